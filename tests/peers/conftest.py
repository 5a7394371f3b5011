"""Shared fixtures for the real-peer tests: start the real `snowflake serve` binary on loopback.

Run by scripts/test inside target/peers-venv; the binary is target/debug/snowflake unless
SNOWFLAKE_BIN says otherwise.
"""

import importlib
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROTO_DIR = ROOT / "proto" / "snowflake" / "v1"


def snowflake_bin() -> str:
    path = os.environ.get("SNOWFLAKE_BIN", str(ROOT / "target" / "debug" / "snowflake"))
    if not os.path.exists(path):
        raise RuntimeError(f"{path} does not exist: build it first (cargo build), or run scripts/test")
    return path


class Serve:
    """A running `snowflake serve` with only the listeners asked for, on 127.0.0.1:0."""

    def __init__(self, *args: str, protocols=("thrift",)):
        self.state_dir = tempfile.mkdtemp(prefix="snowflake-peer-")
        flags = []
        for protocol in ("http", "grpc", "thrift"):
            flags += [f"--{protocol}-addr", "127.0.0.1:0" if protocol in protocols else "off"]
        if "resp" in protocols and "--resp-addr" not in args:
            flags += ["--resp-addr", "127.0.0.1:0"]
        self.proc = subprocess.Popen(
            [snowflake_bin(), "serve", "--state-dir", self.state_dir, *flags, *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.addrs = {}
        self.log = []
        found = threading.Event()
        wanted = set(protocols)

        def read():
            for line in self.proc.stderr:
                self.log.append(line)
                match = re.search(r"(http|grpc|thrift|resp) listening addr=(\S+):(\d+)", line)
                if match:
                    self.addrs[match.group(1)] = (match.group(2), int(match.group(3)))
                    if wanted <= set(self.addrs):
                        found.set()

        threading.Thread(target=read, daemon=True).start()
        if not found.wait(15):
            self.stop()
            raise RuntimeError("snowflake serve did not start:\n" + "".join(self.log))

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture
def serve():
    started = []

    def start(*args, protocols=("thrift",)):
        server = Serve(*args, protocols=protocols)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def wait_until(predicate, timeout=10.0, interval=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False


@pytest.fixture(scope="session")
def pb():
    """Generates the Python messages and stubs from the repository's .proto.

    Compiled from inside its directory so the modules are the top-level `snowflake_pb2` and
    `snowflake_pb2_grpc`: the Thrift peer test generates a package named `snowflake` too.
    """
    out = tempfile.mkdtemp(prefix="snowflake-grpc-py-")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{PROTO_DIR}",
            f"--python_out={out}",
            f"--grpc_python_out={out}",
            "snowflake.proto",
        ],
        check=True,
    )
    sys.path.insert(0, out)
    messages = importlib.import_module("snowflake_pb2")
    stubs = importlib.import_module("snowflake_pb2_grpc")
    yield messages, stubs
    sys.path.remove(out)
    shutil.rmtree(out, ignore_errors=True)

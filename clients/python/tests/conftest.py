"""Fixtures for the Python client's tests: real `snowflake serve` nodes on loopback (random
ports, temporary state directories, stopped at the end), a listener that never answers, test
certificates made with openssl, and `snowflake audit` to count duplicates.

The binary is target/debug/snowflake unless SNOWFLAKE_BIN says otherwise (scripts/test builds
it with `cargo build -p snowflake-cli --locked`).
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from typing import Dict, Iterable, List, Tuple

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
EPOCH_MS = 1288834974657


def snowflake_bin() -> str:
    path = os.environ.get("SNOWFLAKE_BIN", str(ROOT / "target" / "debug" / "snowflake"))
    if not os.path.exists(path):
        raise RuntimeError(
            f"{path} does not exist: build it (cargo build -p snowflake-cli --locked), "
            "or set SNOWFLAKE_BIN"
        )
    return path


class Node:
    """A running `snowflake serve` with only its gRPC listener, on 127.0.0.1 (a port of the
    kernel's choosing), ready to issue IDs."""

    def __init__(self, worker: int, *args: str):
        self.worker = worker
        self.state_dir = tempfile.mkdtemp(prefix="snowflake-pyclient-")
        self.log: List[str] = []
        self.proc = subprocess.Popen(
            [
                snowflake_bin(),
                "serve",
                "--state-dir",
                self.state_dir,
                "--http-addr",
                "off",
                "--thrift-addr",
                "off",
                "--grpc-addr",
                "127.0.0.1:0",
                "--datacenter-id",
                "1",
                "--worker-id",
                str(worker),
                *args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.port = 0
        ready = threading.Event()

        def read() -> None:
            assert self.proc.stderr is not None
            for line in self.proc.stderr:
                self.log.append(line)
                found = re.search(r"grpc listening addr=127\.0\.0\.1:(\d+)", line)
                if found:
                    self.port = int(found.group(1))
                if "ready: issuing ids" in line and self.port:
                    ready.set()
            ready.set()  # it exited: no need to wait longer

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(20) or not self.port or self.proc.poll() is not None:
            self.stop()
            raise RuntimeError("snowflake serve did not become ready:\n" + "".join(self.log))

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.state_dir, ignore_errors=True)


@pytest.fixture
def nodes():
    """Starts nodes: ``nodes(worker, *extra_args)``; all are stopped at the end."""
    started: List[Node] = []

    def start(worker: int, *args: str) -> Node:
        node = Node(worker, *args)
        started.append(node)
        return node

    yield start
    for node in started:
        node.stop()


@pytest.fixture
def black_hole():
    """A listener on 127.0.0.1 that accepts connections and never reads or answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held: List[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
                held.append(conn)
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield "127.0.0.1:%d" % listener.getsockname()[1]
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    listener.close()


def decode(snowflake_id: int) -> Tuple[int, int, int, int]:
    """(timestamp_ms, datacenter, worker, sequence) under the default layout."""
    return (
        (snowflake_id >> 22) + EPOCH_MS,
        (snowflake_id >> 17) & 0x1F,
        (snowflake_id >> 12) & 0x1F,
        snowflake_id & 0xFFF,
    )


def audit(ids: Iterable[int], directory: pathlib.Path) -> Dict[str, int]:
    """`snowflake audit --json` over the IDs (one decimal per line in a file)."""
    path = directory / "ids.txt"
    with open(path, "w") as f:
        f.write("\n".join(map(str, ids)))
        f.write("\n")
    out = subprocess.run(
        [snowflake_bin(), "audit", "--json", str(path)], capture_output=True, text=True
    )
    assert out.returncode in (0, 1), out.stderr
    return json.loads(out.stdout)


def openssl(cwd: pathlib.Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


class Certs:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, made with openssl in
    a directory (the files crates/snowflake-testkit makes), and a second CA that signed nothing."""

    def __init__(self, directory: pathlib.Path):
        self.dir = directory
        for ca in ("ca", "other-ca"):
            openssl(
                directory, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                f"{ca}.key", "-out", f"{ca}.crt", "-days", "30", "-subj", f"/CN=pyclient-{ca}",
                "-addext", "basicConstraints=critical,CA:TRUE",
                "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            )  # fmt: skip
        self._issue("server", "pyclient-server", "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                    "extendedKeyUsage=serverAuth\n")  # fmt: skip
        self._issue("client", "pyclient-client", "extendedKeyUsage=clientAuth\n")

    def _issue(self, name: str, cn: str, ext: str) -> None:
        openssl(self.dir, "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
                "-out", f"{name}.csr", "-subj", f"/CN={cn}")  # fmt: skip
        (self.dir / f"{name}.ext").write_text(ext)
        openssl(self.dir, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey",
                "ca.key", "-CAcreateserial", "-days", "30", "-out", f"{name}.crt",
                "-extfile", f"{name}.ext")  # fmt: skip

    def path(self, name: str) -> str:
        return str(self.dir / name)


@pytest.fixture(scope="session")
def certs(tmp_path_factory):
    return Certs(tmp_path_factory.mktemp("certs"))


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False

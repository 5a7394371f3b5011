"""TLS on the service's listeners (SPEC §8 "Security") with other stacks than ours: grpcio
(BoringSSL) for gRPC over TLS and mutual TLS, Python's `ssl` (OpenSSL) for HTTPS keep-alive
connections, and certificate renewal under load: zero failed calls, no dropped connection, and
new connections get the renewed certificate. Certificates are made with the openssl command."""

import http.client
import os
import pathlib
import ssl
import subprocess
import threading
import time

import grpc
import pytest

from conftest import wait_until


def openssl(cwd, *args):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


class Certs:
    """A CA and certificates signed by it, in a directory."""

    def __init__(self, directory: pathlib.Path):
        self.dir = directory
        openssl(self.dir, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
                "-out", "ca.crt", "-days", "30", "-subj", "/CN=peer-test-ca",
                "-addext", "basicConstraints=critical,CA:TRUE",
                "-addext", "keyUsage=critical,keyCertSign,cRLSign")

    def issue(self, name, cn, server=True):
        openssl(self.dir, "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
                "-out", f"{name}.csr", "-subj", f"/CN={cn}")
        ext = ("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
               if server else "extendedKeyUsage=clientAuth\n")
        (self.dir / f"{name}.ext").write_text(ext)
        openssl(self.dir, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey",
                "ca.key", "-CAcreateserial", "-days", "30", "-out", f"{name}.crt",
                "-extfile", f"{name}.ext")

    def path(self, name):
        return str(self.dir / name)

    def read(self, name):
        return (self.dir / name).read_bytes()


@pytest.fixture
def certs(tmp_path):
    certs = Certs(tmp_path)
    certs.issue("server", "peer-server-one")
    certs.issue("renewed", "peer-server-two")
    certs.issue("again", "peer-server-three")
    certs.issue("client", "peer-client", server=False)
    return certs


def grpc_target(server):
    host, port = server.addrs["grpc"]
    return f"{host}:{port}"


def test_grpc_over_tls_and_mutual_tls(serve, pb, certs):
    messages, stubs = pb
    server = serve("--tls-cert", certs.path("server.crt"), "--tls-key", certs.path("server.key"),
                   "--tls-client-ca", certs.path("ca.crt"), protocols=("grpc",))
    with_client = grpc.ssl_channel_credentials(
        root_certificates=certs.read("ca.crt"),
        private_key=certs.read("client.key"),
        certificate_chain=certs.read("client.crt"),
    )
    with grpc.secure_channel(grpc_target(server), with_client) as channel:
        stub = stubs.SnowflakeStub(channel)
        assert wait_until(lambda: _serves(stub, messages)), "never served over mTLS"
        ids = list(stub.NextIds(messages.NextIdsRequest(count=100), timeout=5).ids)
        assert ids == sorted(ids) and len(set(ids)) == 100

    # No client certificate, or no TLS at all: refused.
    without = grpc.ssl_channel_credentials(root_certificates=certs.read("ca.crt"))
    for channel in (grpc.secure_channel(grpc_target(server), without),
                    grpc.insecure_channel(grpc_target(server))):
        with channel:
            with pytest.raises(grpc.RpcError) as raised:
                stubs.SnowflakeStub(channel).NextId(messages.NextIdRequest(), timeout=3)
            assert raised.value.code() == grpc.StatusCode.UNAVAILABLE, raised.value


def _serves(stub, messages):
    try:
        return stub.NextId(messages.NextIdRequest(), timeout=2).id > 0
    except grpc.RpcError:
        return False


def served_cn(server, ca_file):
    """The common name of the certificate a new HTTPS connection gets."""
    host, port = server.addrs["http"]
    context = ssl.create_default_context(cafile=ca_file)
    with context.wrap_socket(__import__("socket").create_connection((host, port), timeout=5),
                             server_hostname=host) as tls:
        subject = dict(item[0] for item in tls.getpeercert()["subject"])
        return subject["commonName"]


def replace(source, target):
    """Atomically replaces `target` with a copy of `source` (write a temporary file, rename)."""
    tmp = target + ".tmp"
    with open(source, "rb") as src, open(tmp, "wb") as dst:
        dst.write(src.read())
    os.rename(tmp, target)


def test_renewal_under_load_fails_no_call_and_drops_no_connection(serve, pb, certs, tmp_path):
    messages, stubs = pb
    cert, key = str(tmp_path / "tls.crt"), str(tmp_path / "tls.key")
    replace(certs.path("server.crt"), cert)
    replace(certs.path("server.key"), key)
    server = serve("--tls-cert", cert, "--tls-key", key, protocols=("grpc", "http"))
    ca_file = certs.path("ca.crt")
    assert served_cn(server, ca_file) == "peer-server-one"

    channel = grpc.secure_channel(
        grpc_target(server), grpc.ssl_channel_credentials(root_certificates=certs.read("ca.crt")))
    stub = stubs.SnowflakeStub(channel)
    assert wait_until(lambda: _serves(stub, messages))
    host, port = server.addrs["http"]
    https = http.client.HTTPSConnection(
        host, port, timeout=5, context=ssl.create_default_context(cafile=ca_file))
    https.connect()
    first_socket = https.sock

    stop = threading.Event()
    failures, calls, seen = [], [0], set()

    def load():
        while not stop.is_set():
            try:
                seen.add(stub.NextId(messages.NextIdRequest(), timeout=5).id)
                https.request("GET", "/v1/id")
                response = https.getresponse()
                body = response.read()
                if response.status != 200:
                    failures.append(f"{response.status} {body!r}")
                calls[0] += 2
            except Exception as err:  # noqa: BLE001 - every failure counts
                failures.append(repr(err))

    loader = threading.Thread(target=load)
    loader.start()
    try:
        # Renewed twice while the load runs: the key first, then the certificate (a pair
        # caught half renewed in between keeps the current one).
        time.sleep(1.0)
        replace(certs.path("renewed.key"), key)
        replace(certs.path("renewed.crt"), cert)
        assert wait_until(lambda: served_cn(server, ca_file) == "peer-server-two", timeout=5)
        replace(certs.path("again.crt"), cert)
        replace(certs.path("again.key"), key)
        assert wait_until(lambda: served_cn(server, ca_file) == "peer-server-three", timeout=5)
        time.sleep(1.0)
    finally:
        stop.set()
        loader.join()
    assert failures == [], failures[:3]
    assert calls[0] > 100, calls[0]
    assert https.sock is first_socket, "the HTTPS keep-alive connection was dropped"
    https.close()
    channel.close()

"""TLS and mutual TLS against a real node (``--tls-cert``/``--tls-key``, and
``--tls-client-ca`` that requires a client certificate), certificates made with openssl."""

from __future__ import annotations

import asyncio

import pytest

from snowflake_client import AsyncClient, Client, InvalidArgument, Tls, Unavailable


def test_tls_and_mutual_tls(nodes, certs):
    server = ("--tls-cert", certs.path("server.crt"), "--tls-key", certs.path("server.key"))
    tls_node = nodes(6, *server)
    mtls_node = nodes(7, *server, "--tls-client-ca", certs.path("ca.crt"))
    ca_only = Tls(certs.path("ca.crt"))
    mutual = Tls(certs.path("ca.crt"), cert=certs.path("client.crt"), key=certs.path("client.key"))
    assert repr(mutual) == "Tls(mutual=True)" and not ca_only.mutual

    with Client([tls_node.endpoint], tls=ca_only) as client:
        assert len(set(client.next_ids(5000))) == 5000
    with Client([f"https://{mtls_node.endpoint}"], tls=mutual, prefetch=True) as client:
        ids = [client.next_id() for _ in range(5000)]
        assert len(set(ids)) == 5000

    async def run_async():
        async with AsyncClient([mtls_node.endpoint], tls=mutual) as client:
            return await asyncio.gather(*(client.next_id() for _ in range(100)))

    assert len(set(asyncio.run(run_async()))) == 100

    # Refused, each with the reason, within give_up_after: no client certificate where one is
    # required; a CA that did not sign the node's certificate; plaintext to a TLS node.
    for endpoint, tls in [
        (mtls_node.endpoint, ca_only),
        (tls_node.endpoint, Tls(certs.path("other-ca.crt"))),
        (tls_node.endpoint, None),
    ]:
        with Client([endpoint], tls=tls, give_up_after=1.0) as client:
            with pytest.raises(Unavailable) as raised:
                client.next_id()
            assert raised.value.reasons[endpoint] != "not tried"


def test_bad_tls_files_are_named(tmp_path, certs):
    missing = tmp_path / "nope.crt"
    with pytest.raises(InvalidArgument, match=f"the CA file {missing}: No such file"):
        Tls(missing)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate")
    with pytest.raises(InvalidArgument, match=f"the CA file {garbage}: no PEM certificate"):
        Tls(garbage)
    with pytest.raises(InvalidArgument, match=f"the client key file {garbage}: no PEM private"):
        Tls(certs.path("ca.crt"), cert=certs.path("client.crt"), key=garbage)
    with pytest.raises(InvalidArgument, match="give both cert and key, or neither"):
        Tls(certs.path("ca.crt"), cert=certs.path("client.crt"))
    big = tmp_path / "big.pem"
    big.write_bytes(b"x" * (1024 * 1024 + 1))
    with pytest.raises(InvalidArgument, match="larger than 1 MiB"):
        Tls(big)
    with open(certs.path("ca.crt"), "rb") as f:
        assert not Tls(f.read()).mutual
    with pytest.raises(InvalidArgument, match="an http:// endpoint with TLS settings"):
        Client(["http://127.0.0.1:1"], tls=Tls(certs.path("ca.crt")))

"""TLS to the service: the CA that signed the nodes' certificates, and a client certificate for
nodes that require mutual TLS (``--tls-client-ca`` on the server)."""

from __future__ import annotations

import os
from typing import Optional, Tuple, Union

import grpc

from ._errors import InvalidArgument

#: Larger PEM files are refused rather than read whole.
MAX_PEM_BYTES = 1024 * 1024

#: A PEM file's path, or its contents as bytes.
PemSource = Union[str, "os.PathLike[str]", bytes]


def _read(source: PemSource, what: str) -> Tuple[bytes, str]:
    """The PEM bytes, and how to name their source in an error."""
    if isinstance(source, bytes):
        pem, where = source, what
    elif isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        where = f"{what} file {path}"
        try:
            with open(path, "rb") as f:
                pem = f.read(MAX_PEM_BYTES + 1)
        except OSError as e:
            raise InvalidArgument(f"{where}: {e.strerror or e}") from None
        if len(pem) > MAX_PEM_BYTES:
            raise InvalidArgument(f"{where}: larger than 1 MiB")
    else:
        raise InvalidArgument(f"{what}: expected a file path or PEM bytes, got {source!r}")
    return pem, where


class Tls:
    """How the client verifies the nodes, and the identity it presents to them.

    ``ca``: the CA certificate(s) that signed the nodes' certificates; ``cert`` and ``key``
    (both or neither): a client certificate chain and its private key, for mutual TLS. Each is
    a file path or the PEM bytes. Files are read once, here; a missing or malformed one is an
    :class:`InvalidArgument` naming it.
    """

    __slots__ = ("_ca", "_cert", "_key")

    def __init__(
        self,
        ca: PemSource,
        cert: Optional[PemSource] = None,
        key: Optional[PemSource] = None,
    ):
        if (cert is None) != (key is None):
            raise InvalidArgument(
                "tls: a client certificate needs its key and a key its certificate "
                "(give both cert and key, or neither)"
            )
        ca_pem, where = _read(ca, "the CA")
        if b"-----BEGIN CERTIFICATE-----" not in ca_pem:
            raise InvalidArgument(f"{where}: no PEM certificate in it")
        self._ca: bytes = ca_pem
        self._cert: Optional[bytes] = None
        self._key: Optional[bytes] = None
        if cert is not None and key is not None:
            cert_pem, where = _read(cert, "the client certificate")
            if b"-----BEGIN CERTIFICATE-----" not in cert_pem:
                raise InvalidArgument(f"{where}: no PEM certificate in it")
            key_pem, where = _read(key, "the client key")
            if b"PRIVATE KEY-----" not in key_pem:
                raise InvalidArgument(f"{where}: no PEM private key in it")
            self._cert, self._key = cert_pem, key_pem

    @property
    def mutual(self) -> bool:
        """Whether a client certificate is presented."""
        return self._cert is not None

    def __repr__(self) -> str:
        # Never the key.
        return f"Tls(mutual={self.mutual})"

    def credentials(self) -> grpc.ChannelCredentials:
        """grpcio's channel credentials."""
        return grpc.ssl_channel_credentials(
            root_certificates=self._ca,
            private_key=self._key,
            certificate_chain=self._cert,
        )

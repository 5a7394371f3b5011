"""One node the client can ask: its address checked, and whether (and until when) it is skipped
after a failure, with the backoff that decides for how long."""

from __future__ import annotations

import threading
import time
from typing import Optional, Tuple

from ._errors import InvalidArgument

#: The first pause before a failed node is asked again; it doubles with each failure in a row.
BACKOFF_INITIAL = 0.05
#: The longest pause, also the most of a node's ``retry-after`` that is honoured.
BACKOFF_MAX = 5.0


def backoff_after(failures: int) -> float:
    """The pause after ``failures`` failures in a row: 50 ms doubling up to 5 s."""
    doublings = min(max(failures - 1, 0), 20)
    return min(BACKOFF_INITIAL * (1 << doublings), BACKOFF_MAX)


def parse_endpoint(endpoint: object, tls: bool) -> Tuple[str, str]:
    """``HOST:PORT`` (or an ``http://``/``https://`` URL) -> (gRPC target ``HOST:PORT``, host),
    checked the way the Rust client checks it."""
    if not isinstance(endpoint, str):
        raise InvalidArgument(
            f"invalid endpoint {endpoint!r}: expected a string HOST:PORT, e.g. 127.0.0.1:50051"
        )

    def bad(why: str) -> InvalidArgument:
        return InvalidArgument(
            f"invalid endpoint {endpoint!r}: {why} (expected HOST:PORT, e.g. 127.0.0.1:50051)"
        )

    if "://" in endpoint:
        scheme, authority = endpoint.split("://", 1)
        if scheme not in ("http", "https"):
            raise bad(f"unknown scheme {scheme!r}")
        authority = authority.rstrip("/")
    else:
        scheme, authority = ("https" if tls else "http"), endpoint
    if scheme == "https" and not tls:
        raise bad("an https:// endpoint needs TLS settings (the CA to trust)")
    if scheme == "http" and tls:
        raise bad("an http:// endpoint with TLS settings")
    if "/" in authority:
        raise bad("a path is not allowed")
    if ":" not in authority:
        raise bad("no port")
    host, port = authority.rsplit(":", 1)
    if not host:
        raise bad("no host")
    if not (port.isdigit() and 1 <= int(port) <= 65535):
        raise bad(f"port {port!r} is not in 1..=65535")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise bad("an IPv6 address needs brackets, e.g. [::1]:50051")
    return authority, host


class Node:
    """A node's health as the client saw it. Thread-safe."""

    __slots__ = ("name", "target", "host", "_lock", "_down_until", "_failures", "_last_error")

    def __init__(self, name: str, target: str, host: str):
        #: As the caller wrote it, for messages.
        self.name = name
        #: What gRPC dials.
        self.target = target
        #: The name its TLS certificate must carry.
        self.host = host
        self._lock = threading.Lock()
        #: Skipped until then (``time.monotonic()``); None: usable.
        self._down_until: Optional[float] = None
        #: Failures in a row, for the backoff.
        self._failures = 0
        #: The last failure, for the error when every node failed.
        self._last_error: Optional[str] = None

    def down_until(self, now: float) -> Optional[float]:
        """When the node may be asked again (None: now)."""
        until = self._down_until
        return until if until is not None and until > now else None

    def succeeded(self) -> None:
        with self._lock:
            self._down_until = None
            self._failures = 0
            self._last_error = None

    def failed(self, error: str, retry_after: Optional[float]) -> float:
        """A failure: skipped for the backoff or as long as the node asked (``retry-after``,
        at most the backoff's maximum), whichever is longer. Returns the pause."""
        with self._lock:
            self._failures += 1
            pause = max(backoff_after(self._failures), min(retry_after or 0.0, BACKOFF_MAX))
            self._down_until = time.monotonic() + pause
            self._last_error = error
            return pause

    @property
    def last_error(self) -> Optional[str]:
        return self._last_error


class Rotation:
    """Takes turns on the nodes that are usable."""

    __slots__ = ("nodes", "_turn")

    def __init__(self, nodes: "list[Node]"):
        self.nodes = nodes
        self._turn = 0

    def pick(self, now: float) -> Tuple[Optional[int], float]:
        """(the index of the next usable node, 0) or (None, when the first skipped one may be
        asked again)."""
        n = len(self.nodes)
        start = self._turn % n
        self._turn = start + 1
        earliest: Optional[float] = None
        for k in range(n):
            i = (start + k) % n
            until = self.nodes[i].down_until(now)
            if until is None:
                return i, 0.0
            earliest = until if earliest is None else min(earliest, until)
        return None, earliest if earliest is not None else now

"""Fork safety: the clients of this process, told when it forks (``os.register_at_fork``).

Before the fork each client takes its calls out of gRPC (cancelling those in flight, which are
tried again afterwards), so that gRPC's own fork handlers run and the child starts from a quiet
gRPC core: grpcio does not survive ``fork()`` while other threads are inside it unless its fork
support is switched on by environment variables, which this client neither needs nor sets. The
child then builds its own channels, buffer and refiller on first use (a client notices the new
process id on every call, so a fork made outside Python's ``os.fork`` is caught too); the
parent's buffered IDs stay the parent's, never handed out twice. What the child inherited is
kept referenced and never closed: its sockets are shared with the parent, which goes on using
them.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any, List

_lock = threading.Lock()
_clients: "weakref.WeakSet[Any]" = weakref.WeakSet()
#: A child's inherited per-process states, kept so that nothing closes them.
_inherited: List[Any] = []


def register(client: Any) -> None:
    with _lock:
        _clients.add(client)


def unregister(client: Any) -> None:
    with _lock:
        _clients.discard(client)


def keep_inherited(state: Any) -> None:
    _inherited.append(state)


def _before() -> None:
    _lock.acquire()
    for client in list(_clients):
        prepare = getattr(client, "_fork_prepare", None)
        if prepare is not None:
            prepare()


def _after_in_parent() -> None:
    try:
        for client in list(_clients):
            resume = getattr(client, "_fork_parent", None)
            if resume is not None:
                resume()
    finally:
        _lock.release()


def _after_in_child() -> None:
    global _lock
    # Another thread of the parent may have been inside the lock's users; the child has only
    # this thread: a fresh lock. The clients rebuild their state on their next call.
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_before, after_in_parent=_after_in_parent, after_in_child=_after_in_child
    )

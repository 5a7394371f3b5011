"""The synchronous client: IDs over gRPC from a list of nodes, with a deadline on every attempt,
failover with backoff, a bound on every call, an optional prefetch buffer refilled by a
background thread, and a fresh start in a forked child."""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from typing import Any, Callable, Iterable, List, Optional, Tuple, TypeVar, Union

import grpc

from . import _fork
from ._buffer import Buffer
from ._core import (
    CHANNEL_OPTIONS,
    DEFAULT_DEADLINE,
    MAX_IDS_PER_CALL,
    MAX_IDS_PER_REQUEST,
    BadAnswer,
    Seconds,
    Settings,
    Stats,
    check_count,
    checked_ids,
    describe,
    is_refusal,
    no_answer,
    refusal,
    retry_after,
    timed_out,
    unavailable,
)
from ._endpoint import Node, Rotation
from ._errors import Closed, InvalidArgument, Unavailable
from ._layout import DecodedId, IdRange, Layout, TimeLike, unix_ms
from ._proto import snowflake_pb2 as pb
from ._proto import snowflake_pb2_grpc as pb_grpc
from ._tls import Tls

log = logging.getLogger("snowflake_client")

T = TypeVar("T")

#: The longest ``fork()`` waits for the client's calls in flight to leave gRPC (each ends within
#: its deadline; past this bound, or the deadline and a second, the fork goes on).
FORK_QUIESCE_SECS = 10.0

_NEXT_ID = pb.NextIdRequest()
_GET_INFO = pb.GetInfoRequest()


class _Process:
    """Everything a client holds that belongs to one process: channels, locks, the buffer, the
    refiller, the counters. A forked child makes its own and never touches its parent's."""

    def __init__(self, settings: Settings):
        self.pid = os.getpid()
        self.nodes: List[Node] = settings.nodes()
        self.rotation = Rotation(self.nodes)
        creds = settings.tls.credentials() if settings.tls else None
        self.channels: List[grpc.Channel] = [
            grpc.secure_channel(n.target, creds, options=CHANNEL_OPTIONS)
            if creds
            else grpc.insecure_channel(n.target, options=CHANNEL_OPTIONS)
            for n in self.nodes
        ]
        self.stubs = [pb_grpc.SnowflakeStub(c) for c in self.channels]
        #: Guards the counters, the calls in flight and the fork gate.
        self.gate = threading.Condition(threading.Lock())
        #: Set while this process forks: no new call enters gRPC.
        self.forking = False
        #: Calls inside gRPC now.
        self.active = 0
        #: Set by close(): interrupts waits between attempts.
        self.closed = threading.Event()
        self.buffer: Optional[Buffer] = (
            Buffer(settings.prefetch, settings.max_age) if settings.prefetch else None
        )
        #: One fetch for the buffer at a time (the refiller's, or a taker's on a miss).
        self.fill = threading.Lock()
        self.wake = threading.Event()
        self.served_direct = 0
        self.fetches = 0
        self.fetched_ids = 0
        self.failovers = 0
        self.buffer_misses = 0


class Client:
    """A client of the Snowflake ID service. Safe to share between threads, and across
    ``fork()``.

    ``endpoints``: the nodes' gRPC addresses, ``HOST:PORT`` (a list, or one string with commas).
    ``prefetch``: the most IDs kept fetched ahead by a background thread (0: off; ``True``:
    262,144); ``next_id()`` then takes an ID from memory. ``max_age``: a prefetched ID fetched
    longer ago than this (seconds) is dropped, never handed out. ``deadline``: the longest one
    attempt at one node may take (seconds; also sent as the gRPC deadline). ``give_up_after``:
    a call that no node can serve fails with :class:`Unavailable` after this (seconds).
    ``tls``: a :class:`Tls` for TLS or mutual TLS to every node.
    """

    def __init__(
        self,
        endpoints: Union[str, Iterable[str]],
        *,
        prefetch: Union[int, bool] = 0,
        max_age: Seconds = 2.0,
        deadline: Seconds = DEFAULT_DEADLINE,
        give_up_after: Seconds = 30.0,
        tls: Optional[Tls] = None,
    ):
        self._settings = Settings.check(endpoints, prefetch, max_age, deadline, give_up_after, tls)
        self._closed = False
        self._layout: Optional[Layout] = None
        self._process_lock = threading.Lock()
        self._p = _Process(self._settings)
        self._start_refiller(self._p)
        _fork.register(self)

    # --- the API ---------------------------------------------------------------------------

    def next_id(self) -> int:
        """One ID: from the prefetch buffer when there is one (a memory read unless it ran
        dry), else from a node's ``NextId``."""
        p = self._p
        if p.pid != os.getpid():
            p = self._child()
        if self._closed:
            raise Closed()
        buffer = p.buffer
        if buffer is None:
            id_, _ = self._call(
                p,
                lambda s: s.NextId,
                _NEXT_ID,
                time.monotonic() + self._settings.give_up_after,
                lambda r: checked_ids([r.id], 1)[0],
            )
            with p.gate:
                p.served_direct += 1
                p.fetched_ids += 1
            return id_
        id_, wake = buffer.take(time.monotonic())
        if wake:
            p.wake.set()
        if id_ is not None:
            return id_
        return self._miss(p, buffer)

    def next_ids(self, count: int) -> List[int]:
        """``count`` IDs (1..=1,000,000), asked of the nodes 4,096 at a time, each part from one
        node with failover. Parts from different nodes are not ordered with each other."""
        check_count(count, MAX_IDS_PER_REQUEST)
        p = self._process()
        out: List[int] = []
        while len(out) < count:
            part = min(count - len(out), MAX_IDS_PER_CALL)
            ids, _ = self._fetch(p, part, time.monotonic() + self._settings.give_up_after)
            out.extend(ids)
        with p.gate:
            p.served_direct += count
        return out

    def layout(self) -> Layout:
        """The nodes' ID layout (widths and epoch), read once from a node's ``GetInfo``."""
        if self._layout is None:
            p = self._process()
            info, _ = self._call(
                p, lambda s: s.GetInfo, _GET_INFO, time.monotonic() + self._settings.give_up_after
            )
            self._layout = Layout.from_info(info)
        return self._layout

    def decode(self, snowflake_id: int) -> DecodedId:
        """The fields of an ID, under the layout read from the service."""
        return self.layout().decode(snowflake_id)

    def range(self, start: TimeLike, end: TimeLike) -> IdRange:
        """The smallest and largest ID any node could issue from ``start`` to ``end`` (both
        inclusive; Unix milliseconds or aware datetimes), from the service's ``Range``: for
        ``WHERE id BETWEEN min_id AND max_id`` scans over a primary key."""
        from_ms, to_ms = unix_ms(start, "range start"), unix_ms(end, "range end")
        if from_ms > to_ms:
            raise InvalidArgument(
                f"invalid range: start {from_ms} is after end {to_ms} "
                "(expected start <= end, Unix ms)"
            )
        request = pb.RangeRequest(from_ms=from_ms, to_ms=to_ms)
        p = self._process()
        response, _ = self._call(
            p, lambda s: s.Range, request, time.monotonic() + self._settings.give_up_after
        )
        return IdRange(response.min_id, response.max_id)

    def stats(self) -> Stats:
        """The counters so far (in a forked child: since the fork)."""
        p = self._p if self._closed or self._p.pid == os.getpid() else self._child()
        b = p.buffer
        with p.gate:
            return Stats(
                served_from_buffer=b.taken if b is not None else 0,
                served_direct=p.served_direct,
                fetches=p.fetches,
                fetched_ids=p.fetched_ids,
                failovers=p.failovers,
                discarded=b.discarded if b is not None else 0,
                buffer_misses=p.buffer_misses,
                buffered=len(b) if b is not None else 0,
            )

    def close(self) -> None:
        """Stops the client: the refiller ends, buffered IDs are dropped (never handed out),
        calls in flight and later calls fail with :class:`Closed`. Idempotent."""
        if self._closed:
            return
        self._closed = True
        _fork.unregister(self)
        p = self._p
        if p.pid != os.getpid():
            # A child closing what it inherited: the parent's channels are not its own.
            return
        p.closed.set()
        p.wake.set()
        with p.gate:
            p.gate.notify_all()
        if p.buffer is not None:
            p.buffer.clear()
        for channel in p.channels:
            channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        names = ", ".join(n for n, _, _ in self._settings.endpoints)
        return f"Client([{names}], prefetch={self._settings.prefetch}, closed={self._closed})"

    # --- one process's state, and forks ----------------------------------------------------

    def _process(self) -> _Process:
        p = self._p
        if p.pid != os.getpid():
            p = self._child()
        if self._closed:
            raise Closed()
        return p

    def _child(self) -> _Process:
        """In a forked child: a fresh state. The parent's buffered IDs are the parent's to hand
        out, and its channels' sockets are shared with it; both are left alone (never closed
        here, so nothing is sent on the parent's connections)."""
        with self._process_lock:
            p = self._p
            if p.pid == os.getpid():
                return p
            _fork.keep_inherited(p)
            p = _Process(self._settings)
            self._p = p
            if not self._closed:
                self._start_refiller(p)
            return p

    def _fork_prepare(self) -> None:
        """Before ``fork()``: no call of this client is inside gRPC (new calls wait, calls in
        flight end within their deadline), so gRPC's own fork handlers run and the child
        starts from a quiet gRPC core."""
        p = self._p
        if p.pid != os.getpid():
            return
        with p.gate:
            p.forking = True
            give_up = time.monotonic() + min(self._settings.deadline + 1.0, FORK_QUIESCE_SECS)
            while p.active and time.monotonic() < give_up:
                p.gate.wait(give_up - time.monotonic())

    def _fork_parent(self) -> None:
        p = self._p
        with p.gate:
            p.forking = False
            p.gate.notify_all()

    # --- calls -----------------------------------------------------------------------------

    def _invoke(self, p: _Process, method: Any, request: Any, timeout: float) -> Any:
        """One attempt, never inside gRPC while the process forks.

        A blocking call, polled by the calling thread itself: a future would hand its answer
        over from gRPC's polling thread, which costs a scheduler wake-up each way (2-4 times
        the round trip on a busy machine), and that thread could still be inside gRPC when
        the process forks."""
        with p.gate:
            while p.forking:
                p.gate.wait()
            if self._closed:
                raise Closed()
            p.active += 1
        try:
            return method(request, timeout=timeout)
        finally:
            with p.gate:
                p.active -= 1
                if p.active == 0:
                    p.gate.notify_all()

    def _call(
        self,
        p: _Process,
        method: Callable[[pb_grpc.SnowflakeStub], Any],
        request: Any,
        give_up: float,
        check: Optional[Callable[[Any], T]] = None,
    ) -> Tuple[Any, int]:
        """Tries the nodes in turn until one answers (and ``check`` accepts the answer), the
        service refuses the request itself (:class:`InvalidArgument`), or ``give_up`` passes
        (:class:`Unavailable`). The answer (checked), and which node gave it."""
        started = time.monotonic()
        while True:
            if self._closed:
                raise Closed()
            now = time.monotonic()
            i, until = p.rotation.pick(now)
            if i is None:
                if now >= give_up:
                    raise unavailable(p.nodes, now - started)
                p.closed.wait(min(until, give_up) - now)
                continue
            remaining = give_up - now
            if remaining <= 0:
                raise unavailable(p.nodes, now - started)
            node = p.nodes[i]
            timeout = min(self._settings.deadline, remaining)
            sent = time.monotonic()
            try:
                response = self._invoke(p, method(p.stubs[i]), request, timeout)
                result = check(response) if check else response
            except BadAnswer as bad:
                self._failed(p, node, str(bad), None)
                continue
            except grpc.RpcError as error:
                if self._closed:
                    raise Closed() from None
                if is_refusal(error):
                    raise refusal(error) from None
                elapsed = time.monotonic() - sent
                if timed_out(error, elapsed, timeout):
                    self._failed(p, node, no_answer(timeout), None)
                else:
                    self._failed(p, node, describe(error), retry_after(error))
                continue
            if node.last_error is not None:
                log.info("snowflake endpoint %s answers again", node.name)
            node.succeeded()
            with p.gate:
                p.fetches += 1
            return result, i

    def _failed(self, p: _Process, node: Node, error: str, retry: Optional[float]) -> None:
        pause = node.failed(error, retry)
        with p.gate:
            p.failovers += 1
        log.debug("snowflake endpoint %s failed (%s); skipped for %.3f s", node.name, error, pause)

    def _fetch(self, p: _Process, count: int, give_up: float) -> Tuple[List[int], int]:
        """``count`` IDs (at most 4,096) from one node, with failover."""
        request = pb.NextIdsRequest(count=count)
        ids, i = self._call(
            p,
            lambda s: s.NextIds,
            request,
            give_up,
            lambda r: checked_ids(r.ids, count),
        )
        with p.gate:
            p.fetched_ids += count
        return ids, i

    # --- prefetch --------------------------------------------------------------------------

    def _miss(self, p: _Process, buffer: Buffer) -> int:
        """The buffer is empty: wait for the fetch in flight, or make one; both within one
        ``give_up_after`` (the refiller's fetch may be trying nodes that are all down)."""
        if self._closed:
            raise Closed()
        with p.gate:
            p.buffer_misses += 1
        started = time.monotonic()
        give_up = started + self._settings.give_up_after
        if not p.fill.acquire(timeout=self._settings.give_up_after):
            raise unavailable(p.nodes, time.monotonic() - started)
        try:
            id_, _ = buffer.take(time.monotonic())
            if id_ is not None:
                return id_
            if self._closed:
                raise Closed()
            count = max(buffer.wanted(MAX_IDS_PER_CALL), 1)
            born = time.monotonic()
            ids, _ = self._fetch(p, count, give_up)
            buffer.push(ids[1:], born)
            with p.gate:
                p.served_direct += 1
            return ids[0]
        finally:
            p.fill.release()

    def _start_refiller(self, p: _Process) -> None:
        if p.buffer is None:
            return
        thread = threading.Thread(
            target=_refill,
            args=(weakref.ref(self), p),
            name="snowflake-client-refill",
            daemon=True,
        )
        thread.start()


def _refill(client_ref: "weakref.ref[Client]", p: _Process) -> None:
    """The background refill: woken when the buffer falls below its low-water mark (and on a
    tick, to follow the rate and drop stale IDs), it resizes the buffer from the observed rate
    and fetches up to the target. It ends when the client is closed or garbage, or in a forked
    child (which starts its own)."""
    buffer = p.buffer
    assert buffer is not None
    tick = min(max(buffer.max_age / 4, 0.005), 0.25)
    last_taken, last_at = 0, time.monotonic()
    rate, fetch_time = 0.0, 0.002
    first = True
    while True:
        woken = first or p.wake.wait(tick)
        p.wake.clear()
        first = False
        client = client_ref()
        if client is None or client._closed or p.pid != os.getpid():
            return
        try:
            buffer.refill_started()
            now = time.monotonic()
            buffer.evict_stale(now)
            taken = buffer.taken
            elapsed = now - last_at
            if elapsed > 0:
                recent = (taken - last_taken) / elapsed
                rate = recent if rate == 0.0 else 0.5 * rate + 0.5 * recent
            idle = not woken and taken == last_taken
            last_taken, last_at = taken, now
            if idle:
                # Nobody took an ID since the last round: keep what is fresh, fetch nothing.
                continue
            buffer.resize(rate, fetch_time, MAX_IDS_PER_CALL)
            while not client._closed:
                count = buffer.wanted(MAX_IDS_PER_CALL)
                if count == 0:
                    break
                with p.fill:
                    born = time.monotonic()
                    try:
                        ids, _ = client._fetch(p, count, born + client._settings.give_up_after)
                    except (Unavailable, InvalidArgument, Closed) as e:
                        # Takers that find the buffer empty see the same; try again next round.
                        log.debug("snowflake prefetch: %s", e)
                        break
                    fetch_time = (fetch_time + (time.monotonic() - born)) / 2
                    if not client._closed:
                        buffer.push(ids, born)
        except Exception:  # noqa: BLE001 - the refiller must outlive a surprise
            log.exception("snowflake prefetch: the refill round failed")
        finally:
            del client
        if p.closed.is_set():
            buffer.clear()
            return

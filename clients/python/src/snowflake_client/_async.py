"""The asyncio client: the synchronous client's contract (failover, deadlines, bounded calls,
prefetch refilled by a background task, a fresh start in a forked child) on ``grpc.aio``."""

from __future__ import annotations

import asyncio
import logging
import os
import time
import weakref
from typing import Any, Callable, Iterable, List, Optional, Tuple, TypeVar, Union

import grpc
import grpc.aio

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

_NEXT_ID = pb.NextIdRequest()
_GET_INFO = pb.GetInfoRequest()


class _LoopState:
    """What an AsyncClient holds for one process and one event loop: gRPC asyncio channels
    belong to the loop they were made in."""

    def __init__(self, settings: Settings, loop: asyncio.AbstractEventLoop):
        self.pid = os.getpid()
        self.loop = loop
        self.nodes: List[Node] = settings.nodes()
        self.rotation = Rotation(self.nodes)
        creds = settings.tls.credentials() if settings.tls else None
        self.channels: List[grpc.aio.Channel] = [
            grpc.aio.secure_channel(n.target, creds, options=CHANNEL_OPTIONS)
            if creds
            else grpc.aio.insecure_channel(n.target, options=CHANNEL_OPTIONS)
            for n in self.nodes
        ]
        self.stubs = [pb_grpc.SnowflakeStub(c) for c in self.channels]
        self.buffer: Optional[Buffer] = (
            Buffer(settings.prefetch, settings.max_age) if settings.prefetch else None
        )
        #: One fetch for the buffer at a time (the refiller's, or a taker's on a miss).
        self.fill = asyncio.Lock()
        self.wake = asyncio.Event()
        #: Set by close(): interrupts waits between attempts.
        self.closed = asyncio.Event()
        self.refiller: Optional[asyncio.Task] = None
        self.served_direct = 0
        self.fetches = 0
        self.fetched_ids = 0
        self.failovers = 0
        self.buffer_misses = 0


class AsyncClient:
    """The asyncio twin of :class:`Client`, with the same arguments; its methods are
    coroutines (``await client.next_id()``), and so is ``close()``. Safe to share between the
    tasks of one event loop. Its channels are made in the loop it is first used in; a client
    whose loop was closed starts afresh in the next one."""

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
        self._s: Optional[_LoopState] = None
        _fork.register(self)

    # --- the API ---------------------------------------------------------------------------

    async def next_id(self) -> int:
        """One ID: from the prefetch buffer when there is one, else from a node's ``NextId``."""
        s = self._state()
        buffer = s.buffer
        if buffer is None:
            id_, _ = await self._call(
                s,
                lambda stub: stub.NextId,
                _NEXT_ID,
                time.monotonic() + self._settings.give_up_after,
                lambda r: checked_ids([r.id], 1)[0],
            )
            s.served_direct += 1
            s.fetched_ids += 1
            return id_
        id_, wake = buffer.take(time.monotonic())
        if wake:
            s.wake.set()
        if id_ is not None:
            return id_
        return await self._miss(s, buffer)

    async def next_ids(self, count: int) -> List[int]:
        """``count`` IDs (1..=1,000,000), 4,096 per call, each part from one node with
        failover. Parts from different nodes are not ordered with each other."""
        check_count(count, MAX_IDS_PER_REQUEST)
        s = self._state()
        out: List[int] = []
        while len(out) < count:
            part = min(count - len(out), MAX_IDS_PER_CALL)
            out.extend(await self._fetch(s, part, time.monotonic() + self._settings.give_up_after))
        s.served_direct += count
        return out

    async def layout(self) -> Layout:
        """The nodes' ID layout (widths and epoch), read once from a node's ``GetInfo``."""
        if self._layout is None:
            s = self._state()
            info, _ = await self._call(
                s,
                lambda stub: stub.GetInfo,
                _GET_INFO,
                time.monotonic() + self._settings.give_up_after,
            )
            self._layout = Layout.from_info(info)
        return self._layout

    async def decode(self, snowflake_id: int) -> DecodedId:
        """The fields of an ID, under the layout read from the service."""
        return (await self.layout()).decode(snowflake_id)

    async def range(self, start: TimeLike, end: TimeLike) -> IdRange:
        """The smallest and largest ID any node could issue from ``start`` to ``end`` (both
        inclusive; Unix milliseconds or aware datetimes), from the service's ``Range``."""
        from_ms, to_ms = unix_ms(start, "range start"), unix_ms(end, "range end")
        if from_ms > to_ms:
            raise InvalidArgument(
                f"invalid range: start {from_ms} is after end {to_ms} "
                "(expected start <= end, Unix ms)"
            )
        request = pb.RangeRequest(from_ms=from_ms, to_ms=to_ms)
        s = self._state()
        response, _ = await self._call(
            s, lambda stub: stub.Range, request, time.monotonic() + self._settings.give_up_after
        )
        return IdRange(response.min_id, response.max_id)

    def stats(self) -> Stats:
        """The counters so far (of this process and event loop)."""
        s = self._s
        if s is None or s.pid != os.getpid():
            return Stats()
        b = s.buffer
        return Stats(
            served_from_buffer=b.taken if b is not None else 0,
            served_direct=s.served_direct,
            fetches=s.fetches,
            fetched_ids=s.fetched_ids,
            failovers=s.failovers,
            discarded=b.discarded if b is not None else 0,
            buffer_misses=s.buffer_misses,
            buffered=len(b) if b is not None else 0,
        )

    async def close(self) -> None:
        """Stops the client: the refiller ends, buffered IDs are dropped (never handed out),
        calls in flight and later calls fail with :class:`Closed`. Idempotent."""
        if self._closed:
            return
        self._closed = True
        _fork.unregister(self)
        s = self._s
        if s is None or s.pid != os.getpid() or s.loop.is_closed():
            return
        s.closed.set()
        if s.buffer is not None:
            s.buffer.clear()
        if s.refiller is not None:
            s.refiller.cancel()
        for channel in s.channels:
            await channel.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        names = ", ".join(n for n, _, _ in self._settings.endpoints)
        return f"AsyncClient([{names}], prefetch={self._settings.prefetch}, closed={self._closed})"

    # --- state per process and loop --------------------------------------------------------

    def _state(self) -> _LoopState:
        if self._closed:
            raise Closed()
        s = self._s
        loop = asyncio.get_running_loop()
        if s is not None and s.loop is loop and s.pid == os.getpid():
            return s
        if s is not None and s.pid == os.getpid() and not s.loop.is_closed():
            raise InvalidArgument(
                "this AsyncClient runs in another event loop: gRPC asyncio channels belong "
                "to the loop they were made in (make one client per loop)"
            )
        if s is not None and s.pid != os.getpid():
            # A forked child: the parent's buffer and channels are the parent's.
            _fork.keep_inherited(s)
        s = _LoopState(self._settings, loop)
        self._s = s
        if s.buffer is not None:
            s.refiller = loop.create_task(_refill(weakref.ref(self), s))
        return s

    # --- calls -----------------------------------------------------------------------------

    async def _call(
        self,
        s: _LoopState,
        method: Callable[[pb_grpc.SnowflakeStub], Any],
        request: Any,
        give_up: float,
        check: Optional[Callable[[Any], T]] = None,
    ) -> Tuple[Any, int]:
        """Tries the nodes in turn until one answers (and ``check`` accepts the answer), the
        service refuses the request itself, or ``give_up`` passes."""
        started = time.monotonic()
        while True:
            if self._closed:
                raise Closed()
            now = time.monotonic()
            i, until = s.rotation.pick(now)
            if i is None:
                if now >= give_up:
                    raise unavailable(s.nodes, now - started)
                try:
                    await asyncio.wait_for(s.closed.wait(), min(until, give_up) - now)
                except asyncio.TimeoutError:
                    pass
                continue
            remaining = give_up - now
            if remaining <= 0:
                raise unavailable(s.nodes, now - started)
            node = s.nodes[i]
            timeout = min(self._settings.deadline, remaining)
            sent = time.monotonic()
            try:
                call = method(s.stubs[i])(request, timeout=timeout)
                # gRPC enforces the deadline; the extra second is a bound of our own.
                response = await asyncio.wait_for(call, timeout + 1.0)
                result = check(response) if check else response
            except BadAnswer as bad:
                self._failed(s, node, str(bad), None)
                continue
            except asyncio.TimeoutError:
                if self._closed:
                    raise Closed() from None
                self._failed(s, node, no_answer(timeout), None)
                continue
            except asyncio.CancelledError:
                if self._closed:
                    raise Closed() from None
                raise
            except grpc.RpcError as error:
                if self._closed:
                    raise Closed() from None
                if is_refusal(error):
                    raise refusal(error) from None
                if timed_out(error, time.monotonic() - sent, timeout):
                    self._failed(s, node, no_answer(timeout), None)
                else:
                    self._failed(s, node, describe(error), retry_after(error))
                continue
            if node.last_error is not None:
                log.info("snowflake endpoint %s answers again", node.name)
            node.succeeded()
            s.fetches += 1
            return result, i

    def _failed(self, s: _LoopState, node: Node, error: str, retry: Optional[float]) -> None:
        pause = node.failed(error, retry)
        s.failovers += 1
        log.debug("snowflake endpoint %s failed (%s); skipped for %.3f s", node.name, error, pause)

    async def _fetch(self, s: _LoopState, count: int, give_up: float) -> List[int]:
        request = pb.NextIdsRequest(count=count)
        ids, _ = await self._call(
            s, lambda stub: stub.NextIds, request, give_up, lambda r: checked_ids(r.ids, count)
        )
        s.fetched_ids += count
        return ids

    async def _miss(self, s: _LoopState, buffer: Buffer) -> int:
        """The buffer is empty: wait for the fetch in flight, or make one; both within one
        ``give_up_after``."""
        s.buffer_misses += 1
        started = time.monotonic()
        give_up = started + self._settings.give_up_after
        try:
            await asyncio.wait_for(s.fill.acquire(), self._settings.give_up_after)
        except asyncio.TimeoutError:
            raise unavailable(s.nodes, time.monotonic() - started) from None
        try:
            id_, _ = buffer.take(time.monotonic())
            if id_ is not None:
                return id_
            if self._closed:
                raise Closed()
            count = max(buffer.wanted(MAX_IDS_PER_CALL), 1)
            born = time.monotonic()
            ids = await self._fetch(s, count, give_up)
            buffer.push(ids[1:], born)
            s.served_direct += 1
            return ids[0]
        finally:
            s.fill.release()


async def _refill(client_ref: "weakref.ref[AsyncClient]", s: _LoopState) -> None:
    """The background refill task (the sync client's refiller, on the event loop)."""
    buffer = s.buffer
    assert buffer is not None
    tick = min(max(buffer.max_age / 4, 0.005), 0.25)
    last_taken, last_at = 0, time.monotonic()
    rate, fetch_time = 0.0, 0.002
    first = True
    while True:
        woken = first
        if not first:
            try:
                await asyncio.wait_for(s.wake.wait(), tick)
                woken = True
            except asyncio.TimeoutError:
                pass
        s.wake.clear()
        first = False
        client = client_ref()
        if client is None or client._closed or s.pid != os.getpid():
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
                continue
            buffer.resize(rate, fetch_time, MAX_IDS_PER_CALL)
            while not client._closed:
                count = buffer.wanted(MAX_IDS_PER_CALL)
                if count == 0:
                    break
                async with s.fill:
                    born = time.monotonic()
                    try:
                        ids = await client._fetch(s, count, born + client._settings.give_up_after)
                    except (Unavailable, InvalidArgument, Closed) as e:
                        log.debug("snowflake prefetch: %s", e)
                        break
                    fetch_time = (fetch_time + (time.monotonic() - born)) / 2
                    if not client._closed:
                        buffer.push(ids, born)
        except asyncio.CancelledError:
            return
        except Exception:  # noqa: BLE001 - the refiller must outlive a surprise
            log.exception("snowflake prefetch: the refill round failed")
        finally:
            del client

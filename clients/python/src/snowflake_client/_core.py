"""What the sync and the asyncio client share: their settings (checked), their statistics, and
how a failed attempt is judged (refused, no answer, or a node failure to fail over from)."""

from __future__ import annotations

import datetime
import numbers
from dataclasses import dataclass
from typing import Any, Iterable, List, Optional, Sequence, Tuple, Union

import grpc

from ._endpoint import Node, parse_endpoint
from ._errors import InvalidArgument, Unavailable
from ._tls import Tls

#: The most IDs one ``next_ids`` call returns.
MAX_IDS_PER_REQUEST = 1_000_000
#: The most IDs asked of a node in one call: one millisecond of one node (the server's
#: ``--max-batch`` is 100,000 by default).
MAX_IDS_PER_CALL = 4096
#: ``prefetch=True``: this many IDs at most in the buffer (the Rust client's default).
DEFAULT_PREFETCH = 262_144
#: The largest ``prefetch`` accepted.
MAX_PREFETCH = 10_000_000
#: The default deadline of one attempt at one node (seconds).
DEFAULT_DEADLINE = 2.0

#: A duration: seconds, or a ``datetime.timedelta``.
Seconds = Union[float, int, datetime.timedelta]

#: gRPC channel settings of every node.
CHANNEL_OPTIONS: List[Tuple[str, Any]] = [
    # Each channel its own connection: a channel made after fork() must never reuse a
    # subchannel (and its socket) that the parent process made.
    ("grpc.use_local_subchannel_pool", 1),
    # A connection attempt gives up after 1 s; a node that is back is dialled again within
    # 2 s (gRPC's defaults are 20 s and up to 120 s).
    ("grpc.min_reconnect_backoff_ms", 1000),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2000),
    # A half-open connection to a frozen or vanished node is noticed.
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
]


@dataclass(frozen=True)
class Stats:
    """Counters since the client was made (in a forked child: since the fork)."""

    #: IDs handed out from the prefetch buffer.
    served_from_buffer: int = 0
    #: IDs handed out straight from a call (no prefetch, a miss, or ``next_ids``).
    served_direct: int = 0
    #: Successful calls to a node.
    fetches: int = 0
    #: IDs received from nodes.
    fetched_ids: int = 0
    #: Attempts that failed and moved on to another node (or waited for one).
    failovers: int = 0
    #: Prefetched IDs dropped because they were older than ``max_age``, or at close.
    discarded: int = 0
    #: ``next_id`` calls that found the prefetch buffer empty and waited for a fetch.
    buffer_misses: int = 0
    #: IDs in the prefetch buffer now.
    buffered: int = 0


def _seconds(value: object, what: str, low: float, high: float) -> float:
    if isinstance(value, datetime.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidArgument(f"invalid {what} {value!r}: expected seconds in {low:g}..={high:g}")
    seconds = float(value)
    if not low <= seconds <= high:  # also refuses NaN
        raise InvalidArgument(f"invalid {what} {value!r}: expected seconds in {low:g}..={high:g}")
    return seconds


@dataclass(frozen=True)
class Settings:
    """A client's settings, checked."""

    #: (as given, gRPC target, host) per node.
    endpoints: Tuple[Tuple[str, str, str], ...]
    #: The most IDs buffered; 0: no prefetch.
    prefetch: int
    max_age: float
    deadline: float
    give_up_after: float
    tls: Optional[Tls]

    @classmethod
    def check(
        cls,
        endpoints: Union[str, Iterable[str]],
        prefetch: Union[int, bool],
        max_age: Seconds,
        deadline: Seconds,
        give_up_after: Seconds,
        tls: Optional[Tls],
    ) -> "Settings":
        if tls is not None and not isinstance(tls, Tls):
            raise InvalidArgument(f"invalid tls {tls!r}: expected a snowflake_client.Tls or None")
        if isinstance(endpoints, str):
            given: Sequence[object] = [e.strip() for e in endpoints.split(",") if e.strip()]
        else:
            try:
                given = list(endpoints)
            except TypeError:
                raise InvalidArgument(
                    f"invalid endpoints {endpoints!r}: expected a list of HOST:PORT strings"
                ) from None
        if not given:
            raise InvalidArgument("no endpoint given: expected at least one HOST:PORT")
        parsed = []
        for e in given:
            target, host = parse_endpoint(e, tls is not None)
            parsed.append((str(e), target, host))
        if prefetch is True:
            prefetch = DEFAULT_PREFETCH
        elif prefetch is False:
            prefetch = 0
        if not isinstance(prefetch, int) or not 0 <= prefetch <= MAX_PREFETCH:
            raise InvalidArgument(
                f"invalid prefetch {prefetch!r}: expected 0..={MAX_PREFETCH} IDs "
                "(the most kept fetched ahead; 0: off)"
            )
        return cls(
            endpoints=tuple(parsed),
            prefetch=prefetch,
            max_age=_seconds(max_age, "max_age", 0.001, 3600),
            deadline=_seconds(deadline, "deadline", 0.001, 3600),
            give_up_after=_seconds(give_up_after, "give_up_after", 0.001, 86400),
            tls=tls,
        )

    def nodes(self) -> List[Node]:
        return [Node(name, target, host) for name, target, host in self.endpoints]


def check_count(count: object, high: int) -> int:
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= high:
        raise InvalidArgument(f"invalid count {count!r}: expected 1..={high}")
    return count


class BadAnswer(Exception):
    """A node answered something unusable (a negative ID, the wrong count): a node failure."""


def checked_ids(ids: Sequence[int], count: int) -> List[int]:
    """IDs as a node sent them, checked."""
    if len(ids) != count:
        raise BadAnswer(f"asked for {count} IDs, got {len(ids)}")
    out = list(ids)
    if out and min(out) < 0:
        raise BadAnswer(f"answered an invalid ID {min(out)}: expected 0..={(1 << 63) - 1}")
    return out


def retry_after(error: Any) -> Optional[float]:
    """The node's ``retry-after`` (whole seconds, at most an hour), if it sent one."""
    try:
        metadata = error.trailing_metadata() or ()
    except Exception:  # noqa: BLE001 - a failed call without metadata
        return None
    for key, value in metadata:
        if key == "retry-after":
            try:
                return float(min(int(str(value).strip()), 3600))
            except ValueError:
                return None
    return None


def describe(error: Any) -> str:
    """A failed call as one line: its status code and message."""
    try:
        code, details = error.code(), error.details()
    except Exception:  # noqa: BLE001
        return str(error) or type(error).__name__
    line = code.name if isinstance(code, grpc.StatusCode) else str(code)
    return f"{line}: {details}" if details else line


def no_answer(timeout: float) -> str:
    return f"no answer within {round(timeout * 1000)} ms"


def is_refusal(error: Any) -> bool:
    """The service refused the request itself: no other node would serve it."""
    try:
        return error.code() == grpc.StatusCode.INVALID_ARGUMENT
    except Exception:  # noqa: BLE001
        return False


def refusal(error: Any) -> InvalidArgument:
    return InvalidArgument(f"the service refused the request: {error.details()}")


def timed_out(error: Any, elapsed: float, timeout: float) -> bool:
    """The attempt ran out its deadline (as gRPC reports it)."""
    try:
        code = error.code()
    except Exception:  # noqa: BLE001
        return False
    return (
        code in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED)
        and elapsed + 0.001 >= timeout
    )


def unavailable(nodes: Sequence[Node], waited: float) -> Unavailable:
    return Unavailable(waited, {n.name: n.last_error or "not tried" for n in nodes})

"""The ID layout a node issues with (field widths and epoch), read from the service, and what it
takes apart: an ID into its fields, a time into the bounds of a range scan."""

from __future__ import annotations

import datetime
from typing import Any, NamedTuple, Union

from ._errors import InvalidArgument

#: The default (Twitter) epoch: 2010-11-04T01:42:54.657Z in Unix milliseconds.
TWITTER_EPOCH_MS = 1288834974657

_I64_MAX = (1 << 63) - 1
_I64_MIN = -(1 << 63)

#: A point in time for :meth:`Client.range`: Unix milliseconds, or a timezone-aware datetime.
TimeLike = Union[int, datetime.datetime]


class DecodedId(NamedTuple):
    """An ID's fields under its node's layout."""

    id: int
    #: Unix milliseconds (the epoch already added).
    timestamp_ms: int
    datacenter_id: int
    worker_id: int
    sequence: int

    @property
    def time(self) -> datetime.datetime:
        """The timestamp as an aware UTC datetime."""
        return datetime.datetime.fromtimestamp(self.timestamp_ms / 1000, tz=datetime.timezone.utc)


class IdRange(NamedTuple):
    """The smallest and largest ID any node could issue in a time interval (both inclusive):
    ``WHERE id BETWEEN min_id AND max_id`` scans exactly that interval."""

    min_id: int
    max_id: int


class Layout(NamedTuple):
    """A node's ID layout: field widths, most significant first (timestamp | datacenter |
    worker | sequence), and the epoch."""

    #: ``"twitter"``, ``"js-safe"`` or ``"custom:T,D,W,S"`` (the widths only; the epoch is
    #: its own field).
    name: str
    timestamp_bits: int
    datacenter_bits: int
    worker_bits: int
    sequence_bits: int
    epoch_ms: int
    #: The largest ID the layout can hold.
    max_id: int

    @classmethod
    def twitter(cls, epoch_ms: int = TWITTER_EPOCH_MS) -> "Layout":
        """The default layout: 41 | 5 | 5 | 12."""
        return cls("twitter", 41, 5, 5, 12, epoch_ms, (1 << 63) - 1)

    @classmethod
    def from_info(cls, info: Any) -> "Layout":
        """From a ``GetInfoResponse``; a node too old to send its layout has the default
        widths with its epoch (and so do stubs generated before the layout was in the
        proto)."""
        if "layout" not in info.DESCRIPTOR.fields_by_name or not info.HasField("layout"):
            return cls.twitter(info.epoch_ms)
        w = info.layout
        bits = w.timestamp_bits + w.datacenter_bits + w.worker_bits + w.sequence_bits
        max_id = w.max_id or (1 << bits) - 1
        return cls(
            w.name,
            w.timestamp_bits,
            w.datacenter_bits,
            w.worker_bits,
            w.sequence_bits,
            w.epoch_ms,
            max_id,
        )

    def decode(self, snowflake_id: int) -> DecodedId:
        """The fields of ``snowflake_id`` (0 ..= ``max_id``)."""
        if isinstance(snowflake_id, bool) or not isinstance(snowflake_id, int):
            raise InvalidArgument(
                f"invalid id {snowflake_id!r}: expected an integer in 0..={self.max_id}"
            )
        if not 0 <= snowflake_id <= self.max_id:
            raise InvalidArgument(
                f"invalid id {snowflake_id}: expected 0..={self.max_id} ({self.name} layout)"
            )
        s, w, d = self.sequence_bits, self.worker_bits, self.datacenter_bits
        return DecodedId(
            snowflake_id,
            (snowflake_id >> (s + w + d)) + self.epoch_ms,
            (snowflake_id >> (s + w)) & ((1 << d) - 1),
            (snowflake_id >> s) & ((1 << w) - 1),
            snowflake_id & ((1 << s) - 1),
        )


def unix_ms(value: object, what: str) -> int:
    """Unix milliseconds from an ``int`` or an aware ``datetime``, checked."""
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise InvalidArgument(
                f"invalid {what} {value.isoformat()}: a naive datetime is ambiguous; "
                "give it a timezone (e.g. datetime.timezone.utc) or pass Unix milliseconds"
            )
        delta = value - datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
        return delta // datetime.timedelta(milliseconds=1)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(
            f"invalid {what} {value!r}: expected Unix milliseconds (int) or an aware datetime"
        )
    if not _I64_MIN <= value <= _I64_MAX:
        raise InvalidArgument(f"invalid {what} {value}: expected {_I64_MIN}..={_I64_MAX} ms")
    return value

"""The client's surface against a real node: IDs as ints, statistics, closing, and every bad
argument refused with a typed error that names the value and the valid range."""

from __future__ import annotations

import datetime

import pytest

from conftest import decode
from snowflake_client import (
    MAX_IDS_PER_REQUEST,
    AsyncClient,
    Client,
    Closed,
    InvalidArgument,
    Layout,
    SnowflakeError,
    Stats,
    Unavailable,
)
from snowflake_client._core import retry_after


def test_ids_are_ints_from_the_node_and_increasing(nodes):
    node = nodes(3)
    with Client([node.endpoint]) as client:
        first = client.next_id()
        batch = client.next_ids(10_000)
        assert type(first) is int and all(type(i) is int for i in batch)
        assert len(batch) == 10_000 and len(set(batch)) == 10_000
        assert first < batch[0] and batch == sorted(batch)
        assert {decode(i)[1:3] for i in [first, *batch]} == {(1, 3)}
        stats = client.stats()
        assert stats.served_direct == 10_001 and stats.fetched_ids == 10_001
        # 10,000 IDs in parts of 4,096: 3 calls, and 1 for next_id.
        assert stats.fetches == 4 and stats.failovers == 0
        assert stats.served_from_buffer == 0 and stats.buffered == 0


def test_the_service_refusal_is_invalid_argument_and_fails_at_once(nodes):
    # The node takes at most 100 IDs a call; the client asks 4,096 per part.
    node = nodes(3, "--max-batch", "100")
    with Client([node.endpoint]) as client:
        with pytest.raises(InvalidArgument) as raised:
            client.next_ids(1000)
        assert "the service refused the request" in str(raised.value)
        assert "1000" in str(raised.value) and "100" in str(raised.value)
        assert client.stats().failovers == 0


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(endpoints=[]), "no endpoint given"),
        (dict(endpoints=["nope"]), "invalid endpoint 'nope': no port"),
        (dict(endpoints=["127.0.0.1:0"]), "port '0' is not in 1..=65535"),
        (dict(endpoints=["host:99999"]), "is not in 1..=65535"),
        (dict(endpoints=[":50051"]), "no host"),
        (dict(endpoints=["ftp://h:1"]), "unknown scheme 'ftp'"),
        (dict(endpoints=["https://h:1"]), "needs TLS settings"),
        (dict(endpoints=["h:1/x"]), "a path is not allowed"),
        (dict(endpoints=["::1:5"]), "needs brackets"),
        (dict(endpoints=[5]), "expected a string HOST:PORT"),
        (dict(prefetch=-1), "invalid prefetch -1: expected 0..=10000000"),
        (dict(prefetch=2.5), "invalid prefetch 2.5"),
        (dict(max_age=0), "invalid max_age 0: expected seconds in 0.001..=3600"),
        (dict(max_age=float("nan")), "invalid max_age nan"),
        (dict(deadline=-1), "invalid deadline -1"),
        (dict(deadline="1"), "invalid deadline '1'"),
        (dict(give_up_after=10**9), "invalid give_up_after 1000000000"),
        (dict(tls="ca.pem"), "expected a snowflake_client.Tls"),
    ],
)
@pytest.mark.parametrize("cls", [Client, AsyncClient])
def test_bad_settings_are_refused_with_the_value_and_the_range(cls, kwargs, message):
    kwargs = dict(kwargs)
    endpoints = kwargs.pop("endpoints", ["127.0.0.1:1"])
    with pytest.raises(InvalidArgument) as raised:
        cls(endpoints, **kwargs)
    assert message in str(raised.value)
    assert isinstance(raised.value, ValueError) and isinstance(raised.value, SnowflakeError)


def test_endpoints_forms_and_durations():
    # A comma-separated string, bracketed IPv6, URLs and timedeltas are accepted.
    client = Client(
        "127.0.0.1:1, [::1]:2,http://localhost:3", give_up_after=datetime.timedelta(seconds=1)
    )
    assert repr(client) == (
        "Client([127.0.0.1:1, [::1]:2, http://localhost:3], prefetch=0, closed=False)"
    )
    assert [t for _, t, _ in client._settings.endpoints] == ["127.0.0.1:1", "[::1]:2", "localhost:3"]
    assert client._settings.give_up_after == 1.0
    assert Client(["127.0.0.1:1"], prefetch=True)._settings.prefetch == 262_144
    client.close()


def test_bad_counts_and_ids():
    client = Client(["127.0.0.1:1"])
    for bad in (0, -1, MAX_IDS_PER_REQUEST + 1, 1.5, True, "3"):
        with pytest.raises(InvalidArgument) as raised:
            client.next_ids(bad)  # type: ignore[arg-type]
        assert f"invalid count {bad!r}: expected 1..={MAX_IDS_PER_REQUEST}" in str(raised.value)
    layout = Layout.twitter()
    for bad in (-1, 2**63, "12", 1.0):
        with pytest.raises(InvalidArgument) as raised:
            layout.decode(bad)  # type: ignore[arg-type]
        assert "invalid id" in str(raised.value) and "9223372036854775807" in str(raised.value)
    for start, end, message in [
        (5, 4, "start 5 is after end 4"),
        ("x", 4, "invalid range start 'x'"),
        (0, 2**64, "invalid range end"),
        (datetime.datetime(2024, 1, 1), 5, "a naive datetime is ambiguous"),
    ]:
        with pytest.raises(InvalidArgument) as raised:
            client.range(start, end)  # type: ignore[arg-type]
        assert message in str(raised.value)
    client.close()


def test_the_layout_decodes_the_specs_worked_example():
    fields = Layout.twitter().decode(1724551110457221119)
    assert (fields.timestamp_ms, fields.datacenter_id, fields.worker_id, fields.sequence) == (
        1700000000000,
        7,
        13,
        4095,
    )
    assert fields.time.isoformat() == "2023-11-14T22:13:20+00:00"
    js_safe = Layout("js-safe", 41, 2, 4, 6, 1288834974657, 2**53 - 1)
    assert js_safe.decode((5 << 12) | (2 << 10) | (9 << 6) | 63)[1:] == (
        1288834974657 + 5,
        2,
        9,
        63,
    )


def test_closing_drops_the_buffer_and_fails_later_calls(nodes):
    node = nodes(4)
    client = Client([node.endpoint], prefetch=10_000)
    ids = [client.next_id() for _ in range(100)]
    assert len(set(ids)) == 100
    client.close()
    client.close()
    for call in (client.next_id, lambda: client.next_ids(1), client.layout):
        with pytest.raises(Closed, match="the client is closed"):
            call()
    stats = client.stats()
    assert stats.buffered == 0 and stats.discarded > 0, stats
    assert stats.served_from_buffer + stats.served_direct == 100


def test_stats_start_at_zero():
    assert Client(["127.0.0.1:1"]).stats() == Stats()


class _Failed:
    def __init__(self, metadata):
        self._metadata = metadata

    def trailing_metadata(self):
        return self._metadata


def test_retry_after_is_read_in_whole_seconds_and_capped():
    assert retry_after(_Failed((("retry-after", "2"),))) == 2.0
    assert retry_after(_Failed((("other", "1"), ("retry-after", " 7 ")))) == 7.0
    assert retry_after(_Failed((("retry-after", "99999"),))) == 3600.0
    assert retry_after(_Failed((("retry-after", "soon"),))) is None
    assert retry_after(_Failed(None)) is None


def test_unavailable_names_each_endpoint():
    error = Unavailable(1.2345, {"a:1": "UNAVAILABLE: refused", "b:2": "not tried"})
    assert str(error) == (
        "no endpoint could serve within 1234 ms: a:1: UNAVAILABLE: refused; b:2: not tried"
    )
    assert error.reasons["b:2"] == "not tried" and error.waited == 1.2345

"""The node's layout read from the service (GetInfo) and used to decode its IDs, and range()
over the service's Range: the two gRPC additions of the layouts work (SPEC §9)."""

from __future__ import annotations

import asyncio
import datetime
import time

import pytest

from conftest import EPOCH_MS
from snowflake_client import AsyncClient, Client, IdRange, InvalidArgument, Layout
from snowflake_client._proto import snowflake_pb2

def now_ms() -> int:
    return int(time.time() * 1000)


def test_the_layout_is_read_from_the_node_and_decodes_its_ids(nodes):
    js_safe = nodes(3, "--layout", "js-safe")
    default = nodes(4)
    with Client([js_safe.endpoint]) as client:
        layout = client.layout()
        assert layout == Layout("js-safe", 41, 2, 4, 6, EPOCH_MS, 2**53 - 1)
        before = now_ms()
        id_ = client.next_id()
        assert id_ <= 2**53 - 1
        fields = client.decode(id_)
        assert (fields.datacenter_id, fields.worker_id) == (1, 3)
        assert before - 1 <= fields.timestamp_ms <= now_ms()
        with pytest.raises(InvalidArgument, match="expected 0..=9007199254740991"):
            client.decode(2**53)
    with Client([default.endpoint]) as client:
        assert client.layout() == Layout.twitter()
        assert client.decode(client.next_id())[2:4] == (1, 4)

    async def run():
        async with AsyncClient([js_safe.endpoint]) as client:
            return await client.layout(), await client.decode(await client.next_id())

    layout, fields = asyncio.run(run())
    assert layout.name == "js-safe" and fields.worker_id == 3


def test_range_bounds_the_ids_of_a_time_interval(nodes):
    node = nodes(5)
    with Client([node.endpoint]) as client:
        before = now_ms()
        ids = client.next_ids(10_000)
        after = now_ms()
        scan = client.range(before, after)
        assert isinstance(scan, IdRange)
        assert scan == IdRange((before - EPOCH_MS) << 22, ((after - EPOCH_MS + 1) << 22) - 1)
        assert all(scan.min_id <= i <= scan.max_id for i in ids)
        utc = datetime.timezone.utc
        as_datetimes = client.range(
            datetime.datetime.fromtimestamp(before / 1000, tz=utc),
            datetime.datetime.fromtimestamp(after / 1000, tz=utc),
        )
        assert as_datetimes == scan
        # A bound before the epoch is refused by the service, which names it.
        with pytest.raises(InvalidArgument) as raised:
            client.range(EPOCH_MS - 1, EPOCH_MS)
        assert str(EPOCH_MS - 1) in str(raised.value)

    async def run():
        async with AsyncClient([node.endpoint]) as client:
            return await client.range(before, after)

    assert asyncio.run(run()) == scan

"""The asyncio client: many tasks sharing one client, with and without prefetch, and failover
when a node is gone."""

from __future__ import annotations

import asyncio
import signal

import pytest

from conftest import audit, decode
from snowflake_client import AsyncClient, Closed, InvalidArgument

TASKS = 100


@pytest.mark.parametrize("prefetch", [0, True])
def test_a_hundred_concurrent_tasks_share_one_client(nodes, tmp_path, prefetch):
    a, b = nodes(1), nodes(2)
    per_task = 2000 if prefetch else 100

    async def run():
        async with AsyncClient([a.endpoint, b.endpoint], prefetch=prefetch) as client:

            async def task():
                return [await client.next_id() for _ in range(per_task)]

            results = await asyncio.gather(*(task() for _ in range(TASKS)))
            batch = await client.next_ids(5000)
            return [i for r in results for i in r] + batch, client.stats()

    ids, stats = asyncio.run(run())
    assert all(type(i) is int for i in ids)
    report = audit(ids, tmp_path)
    assert report["duplicates"] == 0 and report["unique"] == TASKS * per_task + 5000, report
    assert {decode(i)[2] for i in ids} == {1, 2}
    if prefetch:
        assert stats.served_from_buffer > TASKS * per_task // 2, stats
    else:
        assert stats.served_direct == TASKS * per_task + 5000, stats


def test_async_failover_and_close(nodes):
    a, b = nodes(1), nodes(2)

    async def run():
        client = AsyncClient([a.endpoint, b.endpoint], deadline=0.5)
        before = await asyncio.gather(*(client.next_id() for _ in range(50)))
        a.signal(signal.SIGKILL)
        after = await asyncio.gather(*(client.next_id() for _ in range(200)))
        assert {decode(i)[2] for i in after[-100:]} == {2}
        assert client.stats().failovers >= 1
        with pytest.raises(InvalidArgument, match="invalid count 0"):
            await client.next_ids(0)
        await client.close()
        with pytest.raises(Closed):
            await client.next_id()
        return before + after

    ids = asyncio.run(run())
    assert len(set(ids)) == 250


def test_a_client_is_bound_to_its_running_loop_and_starts_afresh_in_the_next(nodes):
    node = nodes(3)
    client = AsyncClient([node.endpoint], prefetch=1000)
    first = asyncio.run(client.next_id())
    # The first loop is closed: the next one gets new channels and a new buffer.
    second = asyncio.run(client.next_id())
    assert first != second
    asyncio.run(client.close())

"""Prefetch against a real node: IDs come from memory, none older than max_age is handed out
(its own timestamp is checked), stale ones are counted as discarded, and an idle client stops
fetching."""

from __future__ import annotations

import threading
import time

from conftest import decode
from snowflake_client import Client


def test_prefetch_serves_from_memory_and_never_hands_out_a_stale_id(nodes):
    node = nodes(4)
    max_age = 0.3
    client = Client([node.endpoint], prefetch=True, max_age=max_age)
    ids = []
    for round_ in range(3):
        for _ in range(300):
            id_ = client.next_id()
            age_ms = time.time() * 1000 - decode(id_)[0]
            assert age_ms <= max_age * 1000 + 20, f"round {round_}: an ID {age_ms:.0f} ms old"
            ids.append(id_)
        # Long enough for everything buffered to go stale.
        time.sleep(max_age * 2)
    assert len(set(ids)) == len(ids)
    stats = client.stats()
    assert stats.served_from_buffer > 600, stats
    assert stats.discarded > 0, f"stale IDs were dropped: {stats}"
    assert stats.served_from_buffer + stats.served_direct == len(ids), stats
    # Idle: nothing more is fetched once the buffer went stale.
    time.sleep(0.5)
    fetched = client.stats().fetches
    time.sleep(0.5)
    assert client.stats().fetches == fetched
    client.close()


def test_threads_share_one_prefetching_client_without_a_duplicate(nodes):
    a, b = nodes(1), nodes(2)
    client = Client([a.endpoint, b.endpoint], prefetch=True)
    out = [[] for _ in range(8)]

    def draw(mine):
        for _ in range(50_000):
            mine.append(client.next_id())

    threads = [threading.Thread(target=draw, args=(o,)) for o in out]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [i for o in out for i in o]
    assert len(ids) == 400_000 and len(set(ids)) == 400_000
    stats = client.stats()
    assert stats.served_from_buffer + stats.served_direct == 400_000, stats
    assert stats.served_from_buffer > 300_000, stats
    client.close()

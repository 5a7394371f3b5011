"""Failover, deadlines and the bound on every call, against real nodes: a node frozen with
SIGSTOP under a million prefetched IDs, nodes that are all gone or all frozen, and a listener
that accepts connections and never answers."""

from __future__ import annotations

import asyncio
import re
import signal
import threading
import time

import pytest

from conftest import audit, decode
from snowflake_client import AsyncClient, Client, Unavailable

MILLION = 1_000_000


def test_a_million_prefetched_ids_from_two_nodes_while_one_is_frozen_for_5_s(nodes, tmp_path):
    a, b = nodes(1), nodes(2)
    max_age = 1.0
    client = Client([a.endpoint, b.endpoint], prefetch=True, max_age=max_age)
    ids = [0] * MILLION
    oldest_ms = 0
    froze_at = thawed_at = 0.0

    def freeze() -> None:
        nonlocal froze_at, thawed_at
        time.sleep(2.0)
        froze_at = time.monotonic()
        a.signal(signal.SIGSTOP)
        time.sleep(5.0)
        a.signal(signal.SIGCONT)
        thawed_at = time.monotonic()

    freezer = threading.Thread(target=freeze)
    # Paced at 100,000 IDs/s (a busy service, not a loop as fast as Python goes), so the load
    # runs through the whole freeze; a call that waited catches up afterwards.
    rate = 100_000
    started = time.monotonic()
    freezer.start()
    for n in range(MILLION):
        if n % 1000 == 0:
            ahead = started + n / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
        id_ = client.next_id()  # an exception here is an error surfaced: the test fails
        age_ms = time.time() * 1000 - decode(id_)[0]
        if age_ms > oldest_ms:
            oldest_ms = age_ms
        ids[n] = id_
    finished = time.monotonic()
    freezer.join()
    stats = client.stats()
    client.close()

    assert froze_at and finished > froze_at + 5.0, "the load ran through the freeze"
    # No ID older than max_age when handed out (1 ms for the timestamp's truncation, and a few
    # for the clock read after the call on a busy machine).
    assert oldest_ms <= max_age * 1000 + 20, f"an ID {oldest_ms:.0f} ms old was handed out"
    report = audit(ids, tmp_path)
    assert report["ids"] == MILLION and report["invalid"] == 0
    assert report["duplicates"] == 0 and report["unique"] == MILLION, report
    assert {decode(i)[2] for i in ids} == {1, 2}, "both nodes served"
    assert stats.failovers >= 1, stats
    assert stats.served_from_buffer + stats.served_direct == MILLION, stats
    assert thawed_at < finished


@pytest.mark.parametrize("how", ["killed", "frozen"])
def test_when_every_node_is_stopped_a_call_fails_with_unavailable_after_give_up_after(
    nodes, how
):
    a, b = nodes(1), nodes(2)
    sync = Client([a.endpoint, b.endpoint], give_up_after=2.0)
    asynchronous = AsyncClient([a.endpoint, b.endpoint], give_up_after=2.0)

    async def draw_async():
        return await asynchronous.next_id()

    sync.next_id()
    asyncio.run(draw_async())
    for node in (a, b):
        node.signal(signal.SIGKILL if how == "killed" else signal.SIGSTOP)
    time.sleep(0.1)
    # With prefetch, made now: its refiller is trying the nodes, and the first taker finds
    # the buffer empty.
    prefetching = Client([a.endpoint, b.endpoint], give_up_after=2.0, prefetch=1000)

    for name, call in [
        ("sync", sync.next_id),
        ("prefetch", prefetching.next_id),
        ("async", lambda: asyncio.run(draw_async())),
    ]:
        started = time.monotonic()
        with pytest.raises(Unavailable) as raised:
            call()
        took = time.monotonic() - started
        assert 1.5 <= took <= 2.5, f"{name}: failed after {took:.3f} s (give_up_after 2 s)"
        text = str(raised.value)
        assert text.startswith("no endpoint could serve within"), text
        assert a.endpoint in text and b.endpoint in text, text
        if how == "frozen" and name != "prefetch":
            assert "no answer within" in text, text
    sync.close()
    prefetching.close()


def test_the_deadline_holds_against_a_node_that_accepts_and_never_answers(nodes, black_hole):
    real = nodes(3)
    client = Client([black_hole, real.endpoint], deadline=0.2)
    slowest = 0.0
    for _ in range(20):
        started = time.monotonic()
        client.next_id()
        slowest = max(slowest, time.monotonic() - started)
    # At worst one attempt at the black hole (200 ms) before the real node.
    assert slowest < 1.2, f"slowest call {slowest:.3f} s"
    assert client.stats().failovers >= 1
    client.close()

    # The black hole alone: a call fails when it said it would, with the reason.
    alone = Client([black_hole], deadline=0.2, give_up_after=1.0)
    started = time.monotonic()
    with pytest.raises(Unavailable) as raised:
        alone.next_id()
    took = time.monotonic() - started
    assert 0.9 <= took <= 2.5, took
    # Each attempt ran out its deadline; once gRPC's own connection attempt timed out (1 s), it
    # says so.
    # (The last attempt gets what is left of give_up_after as its deadline.)
    reason = raised.value.reasons[black_hole]
    assert re.match(r"no answer within \d+ ms$", reason) or "SETTINGS frame" in reason, reason
    alone.close()

    # With prefetch: the refiller's fetch at the black hole holds the fetch lock, and a taker
    # that finds the buffer empty still fails within its one give_up_after.
    prefetching = Client([black_hole], deadline=0.2, give_up_after=1.0, prefetch=True)
    time.sleep(0.3)
    started = time.monotonic()
    with pytest.raises(Unavailable):
        prefetching.next_id()
    assert time.monotonic() - started < 1.3
    prefetching.close()

    # The asyncio client too.
    async def run():
        async with AsyncClient([black_hole, real.endpoint], deadline=0.2) as both:
            began = time.monotonic()
            for _ in range(10):
                await both.next_id()
            assert time.monotonic() - began < 2.5
        async with AsyncClient([black_hole], deadline=0.2, give_up_after=1.0) as hole:
            began = time.monotonic()
            with pytest.raises(Unavailable):
                await hole.next_id()
            assert 0.9 <= time.monotonic() - began <= 2.5

    asyncio.run(run())


def test_a_killed_node_is_skipped_and_used_again_once_back(nodes):
    a, b = nodes(1), nodes(2)
    client = Client([a.endpoint, b.endpoint], deadline=0.5)
    ids = [client.next_id() for _ in range(50)]
    assert {decode(i)[2] for i in ids} == {1, 2}, "the client takes turns on the nodes"
    a.signal(signal.SIGSTOP)
    time.sleep(0.2)  # stopped for sure (kill() returns before the target is descheduled)
    during = [client.next_id() for _ in range(50)]
    assert {decode(i)[2] for i in during} == {2}
    a.signal(signal.SIGCONT)
    # Skipped for a backoff of at most 5 s, then asked again.
    deadline = time.monotonic() + 10
    after = []
    while time.monotonic() < deadline and 1 not in {decode(i)[2] for i in after}:
        after.append(client.next_id())
        time.sleep(0.01)
    assert 1 in {decode(i)[2] for i in after}, "the thawed node serves again"
    all_ids = ids + during + after
    assert len(set(all_ids)) == len(all_ids)
    assert client.stats().failovers >= 1
    client.close()

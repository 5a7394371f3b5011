"""Fork safety: a parent whose prefetch thread is running forks workers (multiprocessing, the
fork start method, as gunicorn and Celery do); each child draws IDs through the client it
inherited. No child repeats an ID of its parent's buffer or of another child, none hangs, and
the parent keeps issuing. No gRPC environment variable is set: the client needs none."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import threading
import time

from conftest import audit, decode
from snowflake_client import AsyncClient, Client

WORKERS = 4
PER_WORKER = 250_000


def _draw(client: Client, count: int, path: str) -> None:
    ids = [client.next_id() for _ in range(count)]
    stats = client.stats()
    with open(path, "w") as f:
        json.dump({"ids": ids, "fetched_ids": stats.fetched_ids, "pid": os.getpid()}, f)


def test_forked_workers_never_repeat_an_id_and_never_hang(nodes, tmp_path):
    # grpcio itself sets GRPC_DEFAULT_SSL_ROOTS_FILE_PATH at import; nothing else is set (its
    # fork support would need GRPC_ENABLE_FORK_SUPPORT and GRPC_POLL_STRATEGY).
    grpc_vars = [k for k in os.environ if k.startswith("GRPC_")]
    assert grpc_vars in ([], ["GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"]), grpc_vars
    a, b = nodes(1), nodes(2)
    client = Client([a.endpoint, b.endpoint], prefetch=True)
    parent_ids = [client.next_id() for _ in range(20_000)]
    assert client.stats().buffered > 0, "the parent holds prefetched IDs when it forks"

    # The parent keeps issuing from a thread while it forks and while the workers run.
    stop = threading.Event()
    during: list = []

    def keep_issuing() -> None:
        while not stop.is_set():
            during.append(client.next_id())
            time.sleep(0.0002)

    issuer = threading.Thread(target=keep_issuing)
    issuer.start()
    context = multiprocessing.get_context("fork")
    paths = [str(tmp_path / f"worker-{n}.json") for n in range(WORKERS)]
    workers = [context.Process(target=_draw, args=(client, PER_WORKER, p)) for p in paths]
    started = time.monotonic()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(max(0.0, started + 30 - time.monotonic()))
    took = time.monotonic() - started
    hung = [w.pid for w in workers if w.exitcode is None]
    for worker in workers:
        if worker.exitcode is None:
            worker.kill()
            worker.join()
    stop.set()
    issuer.join()
    assert not hung, f"workers {hung} did not finish within 30 s"
    assert [w.exitcode for w in workers] == [0] * WORKERS
    assert took < 30

    after = [client.next_id() for _ in range(20_000)]
    client.close()
    all_ids = parent_ids + during + after
    for path in paths:
        with open(path) as f:
            drawn = json.load(f)
        assert len(drawn["ids"]) == PER_WORKER
        # Each worker fetched its own IDs: at least as many as it handed out.
        assert drawn["fetched_ids"] >= PER_WORKER, drawn["fetched_ids"]
        all_ids += drawn["ids"]
    assert len(during) > 0
    report = audit(all_ids, tmp_path)
    assert report["invalid"] == 0
    assert report["duplicates"] == 0 and report["unique"] == len(all_ids), report
    assert {decode(i)[2] for i in all_ids} == {1, 2}


def _draw_async(client: AsyncClient, count: int, path: str) -> None:
    async def run():
        return [await client.next_id() for _ in range(count)]

    with open(path, "w") as f:
        json.dump(asyncio.run(run()), f)


def test_an_asyncio_client_made_before_fork_serves_each_worker(nodes, tmp_path):
    # The common shape of an asyncio service that forks workers: the client is made at import
    # in the parent, which forks before using it. (grpc.aio itself does not survive a fork
    # after it was used: docs/clients.md says so.)
    node = nodes(5)
    client = AsyncClient([node.endpoint], prefetch=True)
    context = multiprocessing.get_context("fork")
    paths = [str(tmp_path / f"child-{n}.json") for n in range(2)]
    children = [context.Process(target=_draw_async, args=(client, 50_000, p)) for p in paths]
    for child in children:
        child.start()
    for child in children:
        child.join(30)
        if child.exitcode is None:
            child.kill()
    assert [c.exitcode for c in children] == [0, 0]

    async def draw(n):
        ids = [await client.next_id() for _ in range(n)]
        await client.close()
        return ids

    all_ids = asyncio.run(draw(5000))
    for path in paths:
        with open(path) as f:
            all_ids += json.load(f)
    assert len(set(all_ids)) == len(all_ids) == 105_000

"""The fork scenarios of test_fork.py, each run in a fresh interpreter (as a service's master
process is): `python fork_scenarios.py SCENARIO OUT_DIR ENDPOINT...`. Each writes the IDs of
every process to OUT_DIR/*.json and exits 0, or exits non-zero saying what went wrong.

A fresh interpreter because gRPC's state is per process: a pytest process that already ran
other tests (the asyncio ones leave grpc.aio's poller thread running) is not the process a
service forks from.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import sys
import threading
import time

from snowflake_client import AsyncClient, Client

WORKERS = 4
PER_WORKER = 250_000
LIMIT_SECS = 30


def _write(path: str, ids: list, **extra: object) -> None:
    with open(path, "w") as f:
        json.dump({"ids": ids, "pid": os.getpid(), **extra}, f)


def _draw(client: Client, count: int, path: str) -> None:
    ids = [client.next_id() for _ in range(count)]
    _write(path, ids, fetched_ids=client.stats().fetched_ids)


def sync_workers(out: str, endpoints: list) -> None:
    """A parent that has fetched IDs and whose prefetch thread runs forks 4 workers; each draws
    250,000 IDs through the client it inherited; the parent keeps issuing meanwhile and after."""
    client = Client(endpoints, prefetch=True)
    parent = [client.next_id() for _ in range(20_000)]
    if client.stats().buffered == 0:
        sys.exit("the parent holds no prefetched IDs when it forks")
    stop = threading.Event()
    during: list = []

    def keep_issuing() -> None:
        while not stop.is_set():
            during.append(client.next_id())
            time.sleep(0.0002)

    issuer = threading.Thread(target=keep_issuing)
    issuer.start()
    context = multiprocessing.get_context("fork")
    workers = [
        context.Process(target=_draw, args=(client, PER_WORKER, f"{out}/worker-{n}.json"))
        for n in range(WORKERS)
    ]
    started = time.monotonic()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(max(0.0, started + LIMIT_SECS - time.monotonic()))
    took = time.monotonic() - started
    hung = [w.pid for w in workers if w.exitcode is None]
    for worker in workers:
        if worker.exitcode is None:
            worker.kill()
            worker.join()
    stop.set()
    issuer.join()
    if hung:
        sys.exit(f"workers {hung} did not finish within {LIMIT_SECS} s")
    codes = [w.exitcode for w in workers]
    if codes != [0] * WORKERS:
        sys.exit(f"workers exited with {codes}")
    after = [client.next_id() for _ in range(20_000)]
    client.close()
    _write(f"{out}/parent.json", parent + during + after, during=len(during), took=took)


def _draw_async(client: AsyncClient, count: int, path: str) -> None:
    async def run() -> list:
        return [await client.next_id() for _ in range(count)]

    _write(path, asyncio.run(run()))


def asyncio_workers(out: str, endpoints: list) -> None:
    """An asyncio service's shape: the client is made at import in the parent, which forks
    workers before using it; each worker and then the parent draw IDs."""
    client = AsyncClient(endpoints, prefetch=True)
    context = multiprocessing.get_context("fork")
    children = [
        context.Process(target=_draw_async, args=(client, 50_000, f"{out}/child-{n}.json"))
        for n in range(2)
    ]
    for child in children:
        child.start()
    for child in children:
        child.join(LIMIT_SECS)
        if child.exitcode is None:
            child.kill()
            child.join()
    codes = [c.exitcode for c in children]
    if codes != [0, 0]:
        sys.exit(f"workers exited with {codes}")

    async def draw() -> list:
        ids = [await client.next_id() for _ in range(5000)]
        await client.close()
        return ids

    _write(f"{out}/parent.json", asyncio.run(draw()))


if __name__ == "__main__":
    scenario, out_dir, *given = sys.argv[1:]
    {"sync": sync_workers, "asyncio": asyncio_workers}[scenario](out_dir, given)

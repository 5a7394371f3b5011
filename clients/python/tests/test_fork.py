"""Fork safety: a parent whose prefetch thread is running forks workers (multiprocessing, the
fork start method, as gunicorn and Celery do); each child draws IDs through the client it
inherited. No child repeats an ID of its parent's buffer or of another child, none hangs, and
the parent keeps issuing. No gRPC environment variable is set: the client needs none.

Each scenario runs in a fresh interpreter (fork_scenarios.py says why)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

from conftest import audit, decode

SCENARIOS = pathlib.Path(__file__).with_name("fork_scenarios.py")


def run_scenario(name: str, out: pathlib.Path, endpoints: list) -> list:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRPC_")}
    done = subprocess.run(
        [sys.executable, str(SCENARIOS), name, str(out), *endpoints],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"{name}: exit {done.returncode}\n{done.stderr[-4000:]}"
    drawn = {}
    for path in sorted(out.glob("*.json")):
        with open(path) as f:
            drawn[path.stem] = json.load(f)
    return drawn


def test_forked_workers_never_repeat_an_id_and_never_hang(nodes, tmp_path):
    a, b = nodes(1), nodes(2)
    drawn = run_scenario("sync", tmp_path, [a.endpoint, b.endpoint])
    workers = [drawn[f"worker-{n}"] for n in range(4)]
    parent = drawn["parent"]
    assert parent["took"] < 30 and parent["during"] > 0, "the parent kept issuing"
    assert len({w["pid"] for w in workers} | {parent["pid"]}) == 5
    all_ids = list(parent["ids"])
    for worker in workers:
        assert len(worker["ids"]) == 250_000
        # Each worker fetched its own IDs: at least as many as it handed out.
        assert worker["fetched_ids"] >= 250_000, worker["fetched_ids"]
        all_ids += worker["ids"]
    report = audit(all_ids, tmp_path)
    assert report["invalid"] == 0 and report["ids"] == len(all_ids) >= 1_040_000
    assert report["duplicates"] == 0 and report["unique"] == len(all_ids), report
    assert {decode(i)[2] for i in all_ids} == {1, 2}


def test_an_asyncio_client_made_before_fork_serves_each_worker(nodes, tmp_path):
    node = nodes(5)
    drawn = run_scenario("asyncio", tmp_path, [node.endpoint])
    all_ids = [i for d in drawn.values() for i in d["ids"]]
    assert len(all_ids) == 105_000 and len(set(all_ids)) == 105_000

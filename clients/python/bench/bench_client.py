"""Measures the Python client against a real `snowflake serve` on loopback (started here unless
--endpoint names one), the way BENCHMARKS.md measures the Rust client:

1. ``next_id()`` with prefetch, called on a fixed schedule of --rate IDs/s (100,000 by default)
   for --secs seconds: every call timed (``perf_counter_ns`` before and after), so the
   percentiles include one clock read; and how many calls found the buffer empty;
2. ``next_id()`` with prefetch, as fast as one thread goes;
3. ``next_id()`` without prefetch (one gRPC ``NextId`` round trip each): IDs/s of one process,
   one thread and 8 threads.

    python clients/python/bench/bench_client.py [--bin target/release/snowflake] [--rounds 3]

Prints a markdown table; numbers are medians of the rounds.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Dict, List, Optional

from snowflake_client import Client

ROOT = pathlib.Path(__file__).resolve().parents[3]


def start_node(binary: str) -> subprocess.Popen:
    state = tempfile.mkdtemp(prefix="snowflake-pybench-")
    proc = subprocess.Popen(
        [binary, "serve", "--state-dir", state, "--http-addr", "off", "--thrift-addr", "off",
         "--grpc-addr", "127.0.0.1:0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    for line in proc.stderr:
        found = re.search(r"grpc listening addr=(\S+)", line)
        if found:
            proc.endpoint = found.group(1)  # type: ignore[attr-defined]
        if "ready: issuing ids" in line:
            threading.Thread(target=proc.stderr.read, daemon=True).start()
            return proc
    raise SystemExit("snowflake serve did not start")


def percentile(sorted_ns: List[int], p: float) -> float:
    return sorted_ns[min(len(sorted_ns) - 1, int(len(sorted_ns) * p))] / 1000


def paced(endpoint: str, rate: int, secs: float) -> Dict[str, float]:
    client = Client([endpoint], prefetch=True, max_age=1.0)
    for _ in range(rate // 10):  # warm-up: the refiller learns the rate
        client.next_id()
    time.sleep(0.2)
    misses_before = client.stats().buffer_misses
    n = int(rate * secs)
    took = [0] * n
    clock = time.perf_counter_ns
    interval = 1_000_000_000 // rate
    start = clock()
    for i in range(n):
        due = start + i * interval
        while clock() < due:
            pass
        t0 = clock()
        client.next_id()
        took[i] = clock() - t0
    elapsed = (clock() - start) / 1e9
    misses = client.stats().buffer_misses - misses_before
    client.close()
    took.sort()
    return {
        "p50": percentile(took, 0.5),
        "p99": percentile(took, 0.99),
        "p999": percentile(took, 0.999),
        "max": took[-1] / 1000,
        "rate": n / elapsed,
        "misses": misses,
    }


def flat_out(client: Client, secs: float) -> float:
    n, start = 0, time.perf_counter()
    end = start + secs
    while True:
        for _ in range(1000):
            client.next_id()
        n += 1000
        if time.perf_counter() >= end:
            return n / (time.perf_counter() - start)


def threads_flat_out(endpoint: str, threads: int, secs: float) -> float:
    client = Client([endpoint])
    counts = [0] * threads
    stop = threading.Event()

    def run(k: int) -> None:
        while not stop.is_set():
            client.next_id()
            counts[k] += 1

    workers = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
    start = time.perf_counter()
    for w in workers:
        w.start()
    time.sleep(secs)
    stop.set()
    for w in workers:
        w.join()
    rate = sum(counts) / (time.perf_counter() - start)
    client.close()
    return rate


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--endpoint", help="a running node's gRPC HOST:PORT")
    parser.add_argument("--bin", default=str(ROOT / "target" / "release" / "snowflake"))
    parser.add_argument("--rate", type=int, default=100_000)
    parser.add_argument("--secs", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    node = None
    endpoint = args.endpoint
    if endpoint is None:
        if not os.path.exists(args.bin):
            raise SystemExit(f"{args.bin} is missing: cargo build --release -p snowflake-cli")
        node = start_node(args.bin)
        endpoint = node.endpoint  # type: ignore[attr-defined]
    try:
        rounds = []
        for r in range(args.rounds):
            result = paced(endpoint, args.rate, args.secs)
            with Client([endpoint], prefetch=True, max_age=1.0) as client:
                result["flat"] = flat_out(client, args.secs)
            with Client([endpoint]) as client:
                result["direct"] = flat_out(client, args.secs)
            result["direct8"] = threads_flat_out(endpoint, 8, args.secs)
            print(f"round {r + 1}: " + ", ".join(f"{k} {v:,.1f}" for k, v in result.items()),
                  file=sys.stderr)  # fmt: skip
            rounds.append(result)
    finally:
        if node is not None:
            node.send_signal(signal.SIGTERM)
            node.wait(15)
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    print(f"| µs per call | p50 | p99 | p99.9 | max |\n| --- | ---: | ---: | ---: | ---: |")
    print(f"| next_id() with prefetch, paced at {args.rate:,} IDs/s | {med['p50']:.2f} | "
          f"{med['p99']:.2f} | {med['p999']:.2f} | {med['max']:,.0f} |")  # fmt: skip
    print()
    print(f"Paced: {med['rate']:,.0f} IDs/s achieved, {med['misses']:.0f} calls (median of "
          f"{len(rounds)} rounds of {args.secs:g} s) found the buffer empty. As fast as one "
          f"thread goes with prefetch: {med['flat']:,.0f} IDs/s. Without prefetch (one NextId "
          f"round trip per ID): {med['direct']:,.0f} IDs/s from one thread, "
          f"{med['direct8']:,.0f} IDs/s from 8 threads sharing one client.")  # fmt: skip


if __name__ == "__main__":
    main()

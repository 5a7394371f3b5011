/**
 * Benchmark of the TypeScript client against a real node on loopback, as the Rust client's is
 * measured (bench/src/client.rs): `nextId()` with prefetch (maxAge 1 s) on a fixed schedule of
 * 100,000 per second with every call timed; one process as fast as it goes with prefetch; and
 * without prefetch, one `NextId` round trip per call, alone and with 64 calls in flight.
 *
 * Usage (from clients/typescript, after `npm run build`):
 *   node dist/bench/bench.js [--secs S] [--rate IDS_PER_SEC] [--endpoint HOST:PORT]
 * Without --endpoint it starts `snowflake serve --worker-threads 1` from SNOWFLAKE_BIN (default:
 * the workspace's target/release/snowflake; build it with
 * `cargo build --release -p snowflake-cli --locked`). Numbers are printed, never asserted.
 *
 * @module
 */

import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { setImmediate as yieldToLoop } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { Client } from "../src/index.js";
import { serviceDefinition, toIds, type RawNextIds } from "../src/wire.js";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../../../..");

const { values } = parseArgs({
  options: {
    secs: { type: "string", default: "5" },
    rate: { type: "string", default: "100000" },
    rounds: { type: "string", default: "3" },
    endpoint: { type: "string" },
  },
});
const secs = Number(values.secs);
const rate = Number(values.rate);
const rounds = Number(values.rounds);
if (
  !(secs > 0 && secs <= 600) ||
  !(rate >= 1 && rate <= 10_000_000) ||
  !(Number.isInteger(rounds) && rounds >= 1 && rounds <= 100)
) {
  console.error(
    `invalid --secs ${values.secs} (0..=600), --rate ${values.rate} (1..=10000000) or --rounds ${values.rounds} (1..=100)`,
  );
  process.exit(2);
}

/** Each measurement's values over the rounds, in the order first recorded. */
const results = new Map<string, number[]>();
const record = (name: string, value: number): void => {
  const values = results.get(name) ?? [];
  values.push(value);
  results.set(name, values);
};

/** Percentile `q` (0..1) of sorted `xs`. */
const quantile = (xs: Float64Array, q: number): number =>
  xs[Math.min(xs.length - 1, Math.floor(q * xs.length))]!;
const fmt = (x: number, digits = 0): string =>
  x.toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits });

/** A node started for the run: its gRPC address, and how to stop it. */
async function startNode(): Promise<{ addr: string; stop: () => void }> {
  const bin = process.env["SNOWFLAKE_BIN"] ?? join(ROOT, "target", "release", "snowflake");
  if (!existsSync(bin)) {
    throw new Error(
      `${bin} does not exist: cargo build --release -p snowflake-cli --locked (or set SNOWFLAKE_BIN)`,
    );
  }
  const dir = mkdtempSync(join(tmpdir(), "snowflake-ts-bench-"));
  const proc = spawn(
    bin,
    [
      "serve",
      "--state-dir",
      dir,
      "--http-addr",
      "off",
      "--thrift-addr",
      "off",
      "--grpc-addr",
      "127.0.0.1:0",
      "--worker-threads",
      "1",
      "--datacenter-id",
      "1",
      "--worker-id",
      "1",
    ],
    { stdio: ["ignore", "ignore", "pipe"] },
  );
  let log = "";
  const addr = await new Promise<string>((resolveAddr, reject) => {
    proc.stderr!.setEncoding("utf8");
    proc.stderr!.on("data", (chunk: string) => {
      log += chunk;
      const m = /grpc listening addr=(\S+?):(\d+)/.exec(log);
      if (m) {
        resolveAddr(`${m[1]}:${m[2]}`);
      }
    });
    proc.once("exit", (code) => reject(new Error(`snowflake serve exited with ${code}: ${log}`)));
  });
  return {
    addr,
    stop: () => {
      proc.kill("SIGTERM");
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * `nextId()` on a fixed schedule of `perSecond` for `seconds`, each call timed (ns). Between
 * slots the loop spins; every 256 calls it yields to the event loop (an application serving
 * requests does so between them), which is when the refiller's answers are read. A stall is not
 * made up with a burst afterwards.
 */
async function paced(client: Client | undefined, perSecond: number, seconds: number) {
  const interval = 1000 / perSecond;
  const latencies = new Float64Array(Math.ceil(perSecond * seconds) + 1);
  const missesBefore = client?.stats().bufferMisses ?? 0;
  const started = performance.now();
  const end = started + seconds * 1000;
  let due = started;
  let calls = 0;
  for (;;) {
    let now = performance.now();
    while (now < due) {
      now = performance.now();
    }
    if (now >= end || calls === latencies.length) {
      break;
    }
    if (client !== undefined) {
      await client.nextId();
    }
    latencies[calls++] = (performance.now() - now) * 1e6;
    due += interval;
    if (now > due + 1) {
      due = now;
    }
    if (calls % 256 === 0) {
      await yieldToLoop();
    }
  }
  const achieved = calls / ((performance.now() - started) / 1000);
  const sorted = latencies.subarray(0, calls).sort();
  return { sorted, achieved, misses: (client?.stats().bufferMisses ?? 0) - missesBefore, calls };
}

/**
 * What reading one answer of 4,096 IDs costs the event loop: the `.proto`'s deserializer (int64
 * as decimal strings) and the conversion to `bigint`, on IDs of today's magnitude (ms).
 */
function decodeCost(): number {
  const method = serviceDefinition()["NextIds"]!;
  const base = 2128406317411348480n;
  const answer = (method as unknown as { responseSerialize: (m: RawNextIds) => Buffer }).responseSerialize({
    ids: Array.from({ length: 4096 }, (_, i) => String(base + BigInt(i))),
  });
  const times: number[] = [];
  for (let i = 0; i < 200; i++) {
    const t = performance.now();
    const ids = toIds((method.responseDeserialize(answer) as RawNextIds).ids, 4096, (1n << 63n) - 1n);
    times.push(performance.now() - t);
    if (!Array.isArray(ids)) {
      throw new Error(JSON.stringify(ids));
    }
  }
  return times.sort((x, y) => x - y)[100]!;
}

/** One round of every measurement against the node at `addr`. */
async function round(addr: string): Promise<void> {
  record("reading one NextIds answer of 4,096 IDs (deserialize + BigInt), median of 200: ms", decodeCost());
  const prefetched = new Client({ endpoints: [addr], prefetch: true, maxAge: 1000 });
  // Warm: the first fill done, the rate seen, the code compiled.
  const warm = performance.now() + 500;
  while (performance.now() < warm) {
    for (let i = 0; i < 100; i++) {
      await prefetched.nextId();
    }
    await yieldToLoop();
  }
  const p = await paced(prefetched, rate, secs);
  const paced_ = `nextId() with prefetch, paced at ${fmt(rate)} IDs/s`;
  record(`${paced_}: p50 ns`, quantile(p.sorted, 0.5));
  record(`${paced_}: p99 ns`, quantile(p.sorted, 0.99));
  record(`${paced_}: p99.9 ns`, quantile(p.sorted, 0.999));
  record(`${paced_}: max ns`, p.sorted[p.sorted.length - 1]!);
  record(`${paced_}: achieved IDs/s`, p.achieved);
  record(`${paced_}: calls that waited for a refill`, p.misses);
  // The same schedule with no call: what this machine lets one event loop keep up (a stall of
  // the process is not made up afterwards, so a busy machine lowers it).
  record(`the same schedule with no call: achieved IDs/s`, (await paced(undefined, rate, secs)).achieved);

  let n = 0;
  let started = performance.now();
  while (performance.now() - started < secs * 1000) {
    for (let i = 0; i < 1000; i++) {
      await prefetched.nextId();
    }
    n += 1000;
    await yieldToLoop();
  }
  record(
    "nextId() with prefetch, one loop as fast as it goes (yielding every 1,000): IDs/s",
    n / ((performance.now() - started) / 1000),
  );
  prefetched.close();

  const direct = new Client({ endpoints: [addr] });
  await direct.nextId();
  const trips: number[] = [];
  started = performance.now();
  while (performance.now() - started < secs * 1000) {
    const t = performance.now();
    await direct.nextId();
    trips.push((performance.now() - t) * 1e6);
  }
  const elapsed = (performance.now() - started) / 1000;
  const sortedTrips = Float64Array.from(trips).sort();
  const trip = "nextId() without prefetch, one call at a time (a NextId round trip each)";
  record(`${trip}: p50 ns`, quantile(sortedTrips, 0.5));
  record(`${trip}: p99 ns`, quantile(sortedTrips, 0.99));
  record(`${trip}: IDs/s`, trips.length / elapsed);

  const inFlight = 64;
  let done = 0;
  started = performance.now();
  const until = started + secs * 1000;
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      while (performance.now() < until) {
        await direct.nextId();
        done += 1;
      }
    }),
  );
  record(
    `nextId() without prefetch, ${inFlight} calls in flight: IDs/s`,
    done / ((performance.now() - started) / 1000),
  );
  direct.close();
}

async function main(): Promise<void> {
  const node = values.endpoint === undefined ? await startNode() : { addr: values.endpoint, stop: () => {} };
  const load = (): string =>
    loadavg()
      .map((x) => x.toFixed(2))
      .join(" ");
  console.log(
    `node ${process.version}, ${cpus().length} CPUs (${cpus()[0]?.model ?? "?"}), load ${load()}; ` +
      `server ${node.addr}; ${rounds} rounds of ${secs} s per measurement`,
  );
  try {
    for (let r = 1; r <= rounds; r++) {
      await round(node.addr);
      console.error(`round ${r}/${rounds} done`);
    }
  } finally {
    node.stop();
  }
  console.log(`load after ${load()}; median of the rounds (each round's value in brackets):`);
  for (const [name, xs] of results) {
    const median = [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
    const digits = median < 10 ? 2 : 0;
    console.log(`${name}: ${fmt(median, digits)} [${xs.map((x) => fmt(x, digits)).join(", ")}]`);
  }
}

await main();

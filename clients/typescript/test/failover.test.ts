/**
 * Failover, deadlines and prefetch against real `snowflake serve` nodes: a node frozen under
 * load (SIGSTOP), every node frozen or gone, a node that accepts and never answers, a node that
 * answers UNAVAILABLE with `retry-after`, and close.
 *
 * @module
 */

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { after, test } from "node:test";
import { setImmediate as yieldToLoop, setTimeout as sleep } from "node:timers/promises";
import { Client, Closed, Layout, Unavailable, type ClientEvent } from "../src/index.js";
import { ServeNode, audit, blackHole, stopAll, twitterTimestampMs, track } from "./support.js";

after(stopAll);

test(
  "1,000,000 IDs from two nodes with prefetch while one is frozen for 5 s: 0 duplicates, no error, none older than maxAge",
  { timeout: 240_000 },
  async () => {
    const a = await ServeNode.start({ worker: 1 });
    const b = await ServeNode.start({ worker: 2 });
    const maxAge = 1000;
    const events: Array<{ at: number; event: ClientEvent }> = [];
    const client = track(
      new Client({
        endpoints: [a.addr, b.addr],
        prefetch: true,
        maxAge,
        deadlineMs: 300,
        backoff: { initialMs: 50, maxMs: 500 },
        onEvent: (event) => {
          if (event.type !== "fetched") {
            events.push({ at: performance.now(), event });
          }
        },
      }),
    );
    const total = 1_000_000;
    // Paced, and yielding to the event loop between slices as a server does between requests,
    // so that the refiller's fetches are answered while IDs are taken.
    const perSecond = 100_000;
    const ids = new Array<bigint>(total);
    const errors: unknown[] = [];
    let n = 0;
    let oldest = 0;
    let takenWhileFrozen = 0;
    let frozen = false;
    let thawed = false;
    let takenAfterThaw = 0;
    const started = performance.now();
    const freeze = (async () => {
      await sleep(1000);
      a.signal("SIGSTOP");
      frozen = true;
      await sleep(5000);
      frozen = false;
      thawed = true;
      a.signal("SIGCONT");
    })();
    while (n < total) {
      const due = Math.min(total, Math.ceil(((performance.now() - started) / 1000) * perSecond));
      while (n < due) {
        try {
          const id = await client.nextId();
          const age = Date.now() - twitterTimestampMs(id);
          if (age > oldest) {
            oldest = age;
          }
          ids[n++] = id;
          if (frozen) {
            takenWhileFrozen += 1;
          } else if (thawed) {
            takenAfterThaw += 1;
          }
        } catch (e) {
          errors.push(e);
          if (errors.length > 10) {
            break;
          }
        }
      }
      if (errors.length > 10) {
        break;
      }
      await yieldToLoop();
    }
    const took = (performance.now() - started) / 1000;
    await freeze;
    const stats = client.stats();
    client.close();
    assert.deepEqual(errors, [], "no error surfaced while the other node could serve");
    // The freeze fell inside the run: IDs were handed out during it and after it.
    const context = `${takenWhileFrozen} IDs taken during the freeze, ${takenAfterThaw} after it (run took ${took.toFixed(1)} s)`;
    assert.ok(takenWhileFrozen >= 1000 && takenAfterThaw >= 1000, context);
    // The ID's own time, from the node's clock (the same machine's): never older than maxAge,
    // but for the millisecond an ID's timestamp is truncated to, and a few for the two clocks
    // (Date.now() and the client's monotonic clock) read apart.
    assert.ok(oldest <= maxAge + 5, `an ID ${oldest} ms old was handed out (maxAge ${maxAge} ms)`);
    const failovers = events.filter((e) => e.event.type === "failover" && e.event.endpoint === a.addr);
    assert.ok(failovers.length >= 1, "the frozen node was failed over");
    assert.ok(
      failovers.every((e) => e.event.type === "failover" && /no answer within \d+ ms/.test(e.event.error)),
      JSON.stringify(failovers.slice(0, 3)),
    );
    assert.equal(stats.servedFromBuffer + stats.servedDirect, total, JSON.stringify(stats));
    assert.ok(
      stats.servedFromBuffer > total * 0.9,
      `most IDs came from the buffer: ${JSON.stringify(stats)}`,
    );
    const report = audit(ids);
    assert.equal(report.ids, total);
    assert.equal(report.duplicates, 0, "0 duplicates (snowflake audit)");
    assert.equal(report.invalid, 0);
    assert.deepEqual(report.nodes.map((node) => node.worker_id).sort(), [1, 2], "both nodes served");
  },
);

test(
  "every node frozen, then gone: Unavailable within giveUpAfterMs (2 s) ± 0.5 s",
  { timeout: 60_000 },
  async () => {
    const a = await ServeNode.start({ worker: 3 });
    const b = await ServeNode.start({ worker: 4 });
    const endpoints = [a.addr, b.addr];
    const plain = track(new Client({ endpoints, deadlineMs: 300, giveUpAfterMs: 2000 }));
    const prefetching = track(
      new Client({ endpoints, deadlineMs: 300, giveUpAfterMs: 2000, prefetch: true, maxAge: 200 }),
    );
    await plain.nextId();
    await prefetching.nextId();
    const within = async (client: Client, reason: RegExp): Promise<void> => {
      const started = performance.now();
      const error = await client.nextId().then(
        (id) => assert.fail(`an ID ${id} from nodes that cannot serve`),
        (e: unknown) => e,
      );
      const took = performance.now() - started;
      assert.ok(error instanceof Unavailable, String(error));
      assert.ok(took >= 1500 && took <= 2500, `failed after ${took.toFixed(0)} ms, not 2000 ± 500`);
      assert.match(error.message, reason);
      assert.deepEqual(
        error.failures.map((f) => f.endpoint),
        endpoints,
      );
    };
    a.signal("SIGSTOP");
    b.signal("SIGSTOP");
    // What the prefetching client bought goes stale meanwhile (maxAge 200 ms).
    await sleep(300);
    await within(plain, /no answer within \d+ ms/);
    await within(prefetching, /no answer within \d+ ms|not tried/);
    assert.ok(prefetching.stats().bufferMisses >= 1);
    await a.stop();
    await b.stop();
    await within(plain, /ECONNREFUSED|Unavailable/);
    await within(prefetching, /ECONNREFUSED|Unavailable|no answer/);
    plain.close();
    prefetching.close();
  },
);

test("a node that accepts and never answers: the deadline holds", { timeout: 60_000 }, async () => {
  const hole = await blackHole();
  const real = await ServeNode.start({ worker: 5 });
  const client = track(new Client({ endpoints: [hole.addr, real.addr], deadlineMs: 200 }));
  let slowest = 0;
  for (let i = 0; i < 20; i++) {
    const started = performance.now();
    await client.nextId();
    slowest = Math.max(slowest, performance.now() - started);
  }
  // At worst one attempt at the black hole (200 ms) before the real node.
  assert.ok(slowest < 1200, `slowest call ${slowest.toFixed(0)} ms`);
  assert.ok(client.stats().failovers >= 1, JSON.stringify(client.stats()));
  client.close();

  // With the black hole alone, a call fails when it said it would, with the reason.
  const alone = track(new Client({ endpoints: [hole.addr], deadlineMs: 200, giveUpAfterMs: 1000 }));
  let started = performance.now();
  await assert.rejects(
    alone.nextIds(10),
    (e: unknown) => e instanceof Unavailable && /: no answer within \d+ ms/.test(e.message),
  );
  let took = performance.now() - started;
  assert.ok(took >= 900 && took < 1500, `${took.toFixed(0)} ms`);
  alone.close();

  // With prefetch: the refiller's fetch at the black hole holds the fetch lock, and a taker
  // that finds the buffer empty still fails within its one giveUpAfterMs.
  const prefetching = track(
    new Client({
      endpoints: [hole.addr],
      deadlineMs: 200,
      giveUpAfterMs: 1000,
      backoff: { initialMs: 1, maxMs: 1 },
      prefetch: true,
    }),
  );
  await sleep(300);
  started = performance.now();
  await assert.rejects(prefetching.nextId(), (e: unknown) => e instanceof Unavailable);
  took = performance.now() - started;
  assert.ok(took < 1300, `${took.toFixed(0)} ms`);

  // close() ends a call waiting on the black hole at once, with Closed.
  const pending = prefetching.nextId();
  await sleep(50);
  started = performance.now();
  prefetching.close();
  await assert.rejects(pending, (e: unknown) => e instanceof Closed);
  assert.ok(performance.now() - started < 200);
  assert.equal(prefetching.tryNextId(), undefined);
  await hole.close();
});

test(
  "a node that answers UNAVAILABLE with retry-after is skipped that long while the other serves",
  { timeout: 60_000 },
  async () => {
    // A node killed without a clean shutdown restarts behind its reservation (--reserve-ms): with
    // --request-timeout-ms 50 it refuses requests with UNAVAILABLE and retry-after meanwhile.
    const flags = ["--reserve-ms", "5000", "--request-timeout-ms", "50"];
    const a = await ServeNode.start({ worker: 6, args: flags });
    const b = await ServeNode.start({ worker: 7 });
    const failovers: Array<{ at: number; retryInMs: number; error: string }> = [];
    const client = track(
      new Client({
        endpoints: [a.addr, b.addr],
        deadlineMs: 1000,
        backoff: { initialMs: 50, maxMs: 5000 },
        onEvent: (e) => {
          if (e.type === "failover" && e.endpoint === a.addr) {
            failovers.push({ at: performance.now(), retryInMs: e.retryInMs, error: e.error });
          }
        },
      }),
    );
    await client.nextIds(2);
    const port = a.port;
    await a.kill();
    const restarted = await ServeNode.start({ worker: 6, grpcPort: port, stateDir: a.stateDir, args: flags });
    const ids: bigint[] = [];
    const until = performance.now() + 3000;
    while (performance.now() < until) {
      ids.push(await client.nextId());
      await sleep(5);
    }
    client.close();
    await restarted.stop();
    const refusals = failovers.filter((f) =>
      f.error.startsWith("Unavailable: restarted with the clock behind"),
    );
    assert.ok(refusals.length >= 1, JSON.stringify(failovers));
    // retry-after is whole seconds, at least 1: the node is skipped at least 1 s, far above the
    // 50 ms backoff, and not asked again before.
    for (const f of refusals) {
      assert.ok(f.retryInMs >= 1000, JSON.stringify(f));
    }
    for (let i = 1; i < refusals.length; i++) {
      assert.ok(refusals[i]!.at - refusals[i - 1]!.at >= 990, JSON.stringify(refusals));
    }
    assert.equal(new Set(ids).size, ids.length);
  },
);

test(
  "a program that never closes its client still exits when its work is done",
  { timeout: 60_000 },
  async () => {
    const node = await ServeNode.start({ worker: 8 });
    const script = `
    import { Client } from ${JSON.stringify(new URL("../src/index.js", import.meta.url).href)};
    const plain = new Client({ endpoints: [${JSON.stringify(node.addr)}] });
    const prefetching = new Client({ endpoints: [${JSON.stringify(node.addr)}], prefetch: true });
    console.log(String(await plain.nextId()), String(await prefetching.nextId()));
  `;
    const started = performance.now();
    const out = spawnSync(process.execPath, ["--input-type=module", "-e", script], {
      encoding: "utf8",
      timeout: 30_000,
    });
    assert.equal(out.status, 0, out.stderr);
    assert.match(out.stdout, /^\d+ \d+\n$/);
    assert.ok(performance.now() - started < 15_000);
  },
);

test(
  "nodes of two layouts: the client keeps the first one's and never asks the other",
  { timeout: 60_000 },
  async () => {
    // Twitter's widths with two epochs: the same bits mean different times, so IDs can collide.
    const a = await ServeNode.start({ worker: 12 });
    const b = await ServeNode.start({ worker: 13, args: ["--epoch-ms", "1600000000000"] });
    const errors: string[] = [];
    const client = track(
      new Client({
        endpoints: [a.addr, b.addr],
        onEvent: (e) => {
          if (e.type === "failover") {
            errors.push(`${e.endpoint}: ${e.error}`);
          }
        },
      }),
    );
    const ids = [
      ...(await client.nextIds(10)),
      await client.nextId(),
      await client.nextId(),
      await client.nextId(),
    ];
    const layout = await client.layout();
    assert.ok(layout.equals(Layout.twitter()), `${layout.name} ${layout.epochMs}`);
    for (const id of ids) {
      assert.equal((await client.decode(id)).workerId, 12, "every ID from the first node");
    }
    assert.ok(errors.length >= 1);
    assert.match(
      errors[0]!,
      new RegExp(
        `^${b.addr}: ${b.addr} issues IDs under the layout twitter \\(epoch 1600000000000\\), another endpoint ` +
          `under twitter \\(epoch 1288834974657\\): IDs of two layouts can collide`,
      ),
    );
    // The first node answered sets the client's layout.
    const other = track(new Client({ endpoints: [b.addr, a.addr] }));
    assert.equal((await other.layout()).epochMs, 1600000000000);
    // With the first node gone, the other is still never asked: the call fails, naming why.
    const strict = track(new Client({ endpoints: [a.addr, b.addr], giveUpAfterMs: 1000 }));
    assert.equal((await strict.layout()).epochMs, 1288834974657);
    await a.stop();
    await assert.rejects(
      strict.nextIds(5),
      (e: unknown) => e instanceof Unavailable && /IDs of two layouts can collide/.test(e.message),
    );
  },
);

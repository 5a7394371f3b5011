/**
 * Unit tests without a server: endpoint checks, backoff, the prefetch buffer's hand-out and
 * sizing, layouts, option and TLS validation, and the shipped `.proto` against the repository's.
 *
 * @module
 */

import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import {
  Client,
  ConfigError,
  InvalidArgument,
  Layout,
  SnowflakeError,
  Unavailable,
  tlsFromFiles,
} from "../src/index.js";
import { Health, backoffAfter, parseEndpoint } from "../src/endpoint.js";
import { Buffer as IdBuffer } from "../src/prefetch.js";
import {
  PROTO_FILE,
  PROTO_ROOT,
  codeName,
  retryAfterMs,
  toIds,
  type RawInfo,
  type RawLayout,
} from "../src/wire.js";
import { layoutFromInfo, mixedLayouts } from "../src/layout.js";
import { Metadata } from "@grpc/grpc-js";
import { ROOT, makeCerts, tempDir } from "./support.js";

test("the .proto shipped in the package is the repository's (scripts/check-proto.mjs --write copies it)", () => {
  const shipped = readFileSync(join(PROTO_ROOT, PROTO_FILE));
  const source = readFileSync(join(ROOT, "proto", PROTO_FILE));
  assert.ok(
    shipped.equals(source),
    `clients/typescript/proto/${PROTO_FILE} differs from proto/${PROTO_FILE}: run node clients/typescript/scripts/check-proto.mjs --write`,
  );
});

test("endpoints are checked, with the reason and the expected shape", () => {
  assert.deepEqual(parseEndpoint("127.0.0.1:50051", false), { target: "127.0.0.1:50051", host: "127.0.0.1" });
  assert.deepEqual(parseEndpoint("ids.example:443", true), {
    target: "ids.example:443",
    host: "ids.example",
  });
  assert.deepEqual(parseEndpoint("https://[::1]:8443/", true), { target: "[::1]:8443", host: "::1" });
  assert.deepEqual(parseEndpoint("http://h:1", false), { target: "h:1", host: "h" });
  for (const [bad, why] of [
    ["127.0.0.1", "no port"],
    [":50051", "no host"],
    ["host:0", 'port "0" is not in 1..=65535'],
    ["host:99999", "is not in 1..=65535"],
    ["host:5x", "is not in 1..=65535"],
    ["ftp://host:1", "unknown scheme"],
    ["https://host:1", "needs TLS settings"],
    ["host:1/path", "a path is not allowed"],
    ["::1:50051", "must be in brackets"],
  ] as const) {
    assert.throws(
      () => parseEndpoint(bad, false),
      (e: unknown) =>
        e instanceof ConfigError && e.message.includes(why) && e.message.includes("expected HOST:PORT"),
      bad,
    );
  }
  assert.throws(() => parseEndpoint("http://h:1", true), /an http:\/\/ endpoint with TLS settings/);
});

test("backoff doubles up to its maximum, and retry-after holds a node longer", () => {
  const b = { initialMs: 100, maxMs: 2000 };
  assert.deepEqual(
    [1, 2, 3, 5, 6, 100].map((n) => backoffAfter(b, n)),
    [100, 200, 400, 1600, 2000, 2000],
  );
  const h = new Health();
  assert.equal(h.downAt(0), undefined);
  assert.equal(h.failed(b, undefined, "refused", 1000), 100);
  assert.equal(h.downAt(1050), 1100);
  assert.equal(h.downAt(1100), undefined);
  // The node said retry-after 1 s: skipped for 1 s, more than the backoff's 200 ms.
  assert.equal(h.failed(b, 1000, "not ready", 2000), 1000);
  // At most the backoff's maximum, however long the node asks.
  assert.equal(h.failed(b, 3_600_000, "not ready", 3000), 2000);
  assert.equal(h.lastError, "not ready");
  assert.equal(h.succeeded(), true);
  assert.equal(h.succeeded(), false);
  assert.equal(h.downAt(3001), undefined);
});

test("retry-after and status lines are read as the Rust client reads them", () => {
  const m = new Metadata();
  assert.equal(retryAfterMs(m), undefined);
  m.set("retry-after", "2");
  assert.equal(retryAfterMs(m), 2000);
  m.set("retry-after", "soon");
  assert.equal(retryAfterMs(m), undefined);
  m.set("retry-after", "999999");
  assert.equal(retryAfterMs(m), 3_600_000);
  assert.equal(codeName(14), "Unavailable");
  assert.equal(codeName(4), "DeadlineExceeded");
  assert.equal(codeName(99), "status 99");
});

test("the buffer hands each ID out once, in order, and a stale one never", () => {
  const b = new IdBuffer({ maxAgeMs: 100, maxBuffer: 262_144, minFetch: 256 });
  b.push([1n, 2n, 3n], 0);
  b.push([4n, 5n], 50);
  assert.equal(b.length, 5);
  assert.equal(b.pop(0).id, 1n);
  // At 120 ms the first batch is stale: 2 and 3 are dropped, never handed out.
  const p = b.pop(120);
  assert.equal(p.id, 4n);
  assert.equal(p.discarded, 2);
  assert.equal(b.evictStale(151), 1);
  assert.equal(b.pop(151).id, undefined);
  assert.equal(b.length, 0);
  b.push([6n], 0);
  assert.equal(b.clear(), 1);
  assert.equal(b.pop(0).id, undefined);
  assert.equal(b.taken, 2);
});

test("a refill is asked for once below the low-water mark", () => {
  const b = new IdBuffer({ maxAgeMs: 2000, maxBuffer: 262_144, minFetch: 4 });
  b.refillStarted();
  b.push([1n, 2n, 3n, 4n], 0);
  // Low water starts at minFetch / 2 = 2.
  assert.equal(b.pop(0).wake, false, "3 left");
  assert.equal(b.pop(0).wake, false, "2 left");
  assert.equal(b.pop(0).wake, true, "1 left: below 2, the first to see it asks");
  assert.equal(b.pop(0).wake, false, "already asked");
  b.refillStarted();
  const p = b.pop(0);
  assert.equal(p.id, undefined);
  assert.equal(p.wake, true, "a new round may be asked for");
});

test("the buffer is sized from the rate and capped by maxAge", () => {
  const b = new IdBuffer({ maxAgeMs: 2000, maxBuffer: 262_144, minFetch: 256 });
  // 1,000,000 IDs/s, 1 ms fetches: cover 27 ms = 27,000 IDs, plus a fetch of 4096.
  b.resize(1e6, 1, 4096);
  assert.deepEqual(b.marks(), [27_000, 31_096]);
  // A slow taker: at least minFetch, and at most what is used within maxAge / 2.
  b.resize(10, 1, 4096);
  assert.deepEqual(b.marks(), [128, 256]);
  // Short maxAge: the cap wins over the rate.
  const short = new IdBuffer({ maxAgeMs: 4, maxBuffer: 262_144, minFetch: 256 });
  short.resize(1e6, 1, 4096);
  const [low, target] = short.marks();
  assert.ok(target <= 2000 && low < target, `${low} ${target}`);
  assert.equal(short.wanted(4096), 2000);
});

test("layouts decode IDs, and bad widths or IDs are refused with the range", () => {
  const twitter = Layout.twitter();
  // 2^53 + 1: above what a number holds exactly.
  const id = (1n << 53n) + 1n;
  const d = twitter.decode(id);
  assert.equal(d.sequence, 1);
  assert.equal(d.workerId, 0);
  assert.equal(d.datacenterId, 0);
  assert.equal(d.timestampMs, 2 ** 31 + 1288834974657);
  assert.equal(twitter.maxId, (1n << 63n) - 1n);
  const big = twitter.decode((1n << 63n) - 1n);
  assert.deepEqual([big.datacenterId, big.workerId, big.sequence], [31, 31, 4095]);
  assert.throws(
    () => twitter.decode(-1n),
    (e: unknown) =>
      e instanceof InvalidArgument && /invalid id -1: expected 0..=9223372036854775807/.test(e.message),
  );
  const jsSafe = new Layout({
    name: "js-safe",
    timestampBits: 41,
    datacenterBits: 2,
    workerBits: 4,
    sequenceBits: 6,
    epochMs: 1288834974657,
  });
  assert.equal(jsSafe.maxId, 2n ** 53n - 1n);
  const f = jsSafe.decode((5n << 12n) | (3n << 10n) | (9n << 6n) | 7n);
  assert.deepEqual([f.timestampMs - 1288834974657, f.datacenterId, f.workerId, f.sequence], [5, 3, 9, 7]);
  assert.throws(() => jsSafe.decode(1n << 53n), /under the layout js-safe/);
  // A max ID from a node must be the widths' largest; the name must describe the widths.
  assert.equal(new Layout({ ...jsSafe, maxId: 2n ** 53n - 1n }).maxId, 2n ** 53n - 1n);
  assert.throws(
    () => new Layout({ ...jsSafe, maxId: 1000n }),
    /invalid layout js-safe: max id 1000 is not its widths' largest id 9007199254740991/,
  );
  assert.throws(
    () => new Layout({ ...jsSafe, name: "twitter" }),
    /the name twitter \(widths 41,5,5,12\) does not go with the widths 41,2,4,6/,
  );
  assert.throws(() => new Layout({ ...jsSafe, name: "fast" }), /expected twitter, js-safe or custom:T,D,W,S/);
  const custom = new Layout({
    timestampBits: 40,
    datacenterBits: 3,
    workerBits: 6,
    sequenceBits: 8,
    epochMs: 0,
  });
  assert.equal(custom.name, "custom:40,3,6,8");
  assert.ok(new Layout({ ...Layout.twitter(), name: "custom:41,5,5,12" }).equals(Layout.twitter()));
  assert.ok(!Layout.twitter(1).equals(Layout.twitter(2)));
  assert.equal(Layout.jsSafe().lastMs, 1288834974657 + 2 ** 41 - 1);
  assert.throws(
    () =>
      new Layout({
        name: "custom:29,5,5,12",
        timestampBits: 29,
        datacenterBits: 5,
        workerBits: 5,
        sequenceBits: 12,
        epochMs: 0,
      }),
    /timestamp bits >= 30/,
  );
  assert.throws(
    () =>
      new Layout({
        name: "x",
        timestampBits: 41,
        datacenterBits: 0,
        workerBits: 0,
        sequenceBits: 12,
        epochMs: 0,
      }),
    /datacenter \+ worker bits >= 1/,
  );
});

test("a node's GetInfo gives its layout, checked; an older node's is Twitter's widths with its epoch", () => {
  const now = Date.UTC(2026, 11, 3);
  const info = (layout: RawLayout | null, epoch = "1288834974657"): RawInfo => ({
    datacenter_id: 0,
    worker_id: 0,
    epoch_ms: epoch,
    timestamp_ms: String(now),
    max_batch: "100000",
    ready: true,
    layout,
  });
  const jsSafe: RawLayout = {
    name: "js-safe",
    timestamp_bits: 41,
    datacenter_bits: 2,
    worker_bits: 4,
    sequence_bits: 6,
    epoch_ms: "1288834974657",
    max_id: "9007199254740991",
  };
  assert.ok(layoutFromInfo(info(jsSafe), now).equals(Layout.jsSafe()));
  assert.ok(layoutFromInfo(info(null, "1600000000000"), now).equals(Layout.twitter(1600000000000)));
  assert.throws(() => layoutFromInfo(info({ ...jsSafe, max_id: "5" }), now), /max id 5 is not/);
  assert.throws(() => layoutFromInfo(info({ ...jsSafe, sequence_bits: 300 }), now), /sequence bits 300/);
  assert.throws(
    () => layoutFromInfo(info({ ...jsSafe, epoch_ms: String(now + 1) }), now),
    /is in the future/,
  );
  assert.throws(
    () =>
      layoutFromInfo(
        info({ ...jsSafe, name: "custom:30,2,4,6", timestamp_bits: 30, max_id: String(2n ** 42n - 1n) }),
        now,
      ),
    /custom:30,2,4,6 with epoch 1288834974657 ran out at 2010-11-16T/,
  );
  assert.match(
    mixedLayouts("b:1", Layout.jsSafe(), Layout.twitter()),
    /^b:1 issues IDs under the layout js-safe \(epoch 1288834974657\), another endpoint under twitter/,
  );
  assert.deepEqual(toIds(["1", "9007199254740991"], 2, Layout.jsSafe().maxId), [1n, 9007199254740991n]);
  assert.deepEqual(toIds(["1", "9007199254740992"], 2, Layout.jsSafe().maxId), {
    invalid: "answered an invalid ID 9007199254740992: expected 0..=9007199254740991",
  });
  assert.deepEqual(toIds(["-1"], 1, Layout.twitter().maxId), {
    invalid: "answered an invalid ID -1: expected 0..=9223372036854775807",
  });
  assert.deepEqual(toIds(["1"], 2, Layout.twitter().maxId), { invalid: "asked for 2 IDs, got 1" });
});

test("wrong options are refused with the option, the value and the range", () => {
  const bad: Array<[unknown, RegExp]> = [
    [{}, /no endpoint/],
    [{ endpoints: [] }, /no endpoint/],
    [{ endpoints: ["nope"] }, /invalid endpoint "nope": no port/],
    [{ endpoints: ["h:1"], deadlineMs: 0 }, /invalid deadlineMs 0: expected an integer in 1..=3600000/],
    [{ endpoints: ["h:1"], giveUpAfterMs: 1.5 }, /invalid giveUpAfterMs 1.5/],
    [{ endpoints: ["h:1"], maxAge: -1 }, /invalid maxAge -1/],
    [{ endpoints: ["h:1"], prefetch: -3 }, /invalid prefetch -3: expected an integer in 0..=10000000/],
    [
      { endpoints: ["h:1"], maxIdsPerCall: 100_001 },
      /invalid maxIdsPerCall 100001: expected an integer in 1..=100000/,
    ],
    [
      { endpoints: ["h:1"], backoff: { initialMs: 100, maxMs: 50 } },
      /invalid backoff.maxMs 50: expected an integer in 100..=3600000/,
    ],
    [{ endpoints: ["h:1"], maxAgeMs: 5 }, /unknown option "maxAgeMs"/],
    [{ endpoints: ["h:1"], tls: { ca: "not pem" } }, /the CA: no certificate in it/],
  ];
  for (const [options, message] of bad) {
    assert.throws(
      () => new Client(options as never),
      (e: unknown) =>
        e instanceof ConfigError &&
        e instanceof SnowflakeError &&
        e.code === "config" &&
        message.test(e.message),
      String(message),
    );
  }
});

test("TLS files are checked: a missing file, a certificate without its key, a key of another certificate", () => {
  const certs = makeCerts();
  assert.throws(
    () => tlsFromFiles({ ca: "/nonexistent/ca.crt" }),
    /the CA file \/nonexistent\/ca.crt: ENOENT/,
  );
  const notPem = join(tempDir(), "x.pem");
  writeFileSync(notPem, "hello");
  assert.throws(() => tlsFromFiles({ ca: notPem }), /the CA file .*x.pem: no certificate in it/);
  assert.throws(
    () => tlsFromFiles({ ca: certs.path("ca.crt"), cert: certs.path("client.crt") }),
    /needs both a client certificate/,
  );
  assert.throws(
    () =>
      tlsFromFiles({
        ca: certs.path("ca.crt"),
        cert: certs.path("client.crt"),
        key: certs.path("server.key"),
      }),
    /the client key file .*server.key does not go with the client certificate file .*client.crt/,
  );
  assert.throws(
    () =>
      tlsFromFiles({
        ca: certs.path("ca.crt"),
        cert: certs.path("client.crt"),
        key: certs.path("client.crt"),
      }),
    /the client key file .*client.crt: not a PEM private key/,
  );
  const good = tlsFromFiles({
    ca: certs.path("ca.crt"),
    cert: certs.path("client.crt"),
    key: certs.path("client.key"),
  });
  const client = new Client({ endpoints: ["127.0.0.1:1"], tls: good });
  client.close();
  // TLS settings with an http:// endpoint are a contradiction.
  assert.throws(
    () => new Client({ endpoints: ["http://127.0.0.1:1"], tls: good }),
    /an http:\/\/ endpoint with TLS settings/,
  );
});

test("a client with no reachable node fails in time, naming each node's failure", async () => {
  // Port 1 on loopback: refused at once.
  const client = new Client({
    endpoints: ["127.0.0.1:1", "127.0.0.1:2"],
    giveUpAfterMs: 400,
    backoff: { initialMs: 20, maxMs: 100 },
  });
  const started = performance.now();
  await assert.rejects(client.nextId(), (e: unknown) => {
    assert.ok(e instanceof Unavailable, String(e));
    assert.equal(e.code, "unavailable");
    assert.match(e.message, /^no endpoint could serve within \d+ ms: 127\.0\.0\.1:1: .+; 127\.0\.0\.1:2: .+/);
    assert.deepEqual(
      e.failures.map((f) => f.endpoint),
      ["127.0.0.1:1", "127.0.0.1:2"],
    );
    return true;
  });
  const took = performance.now() - started;
  assert.ok(took >= 350 && took < 3000, `${took} ms`);
  // At least one attempt each, unless the first took the whole time (a loaded machine).
  assert.ok(client.stats().failovers >= 1, JSON.stringify(client.stats()));
  await assert.rejects(
    client.nextIds(0),
    (e: unknown) =>
      e instanceof InvalidArgument &&
      !e.fromService &&
      /invalid count 0: expected 1..=1000000/.test(e.message),
  );
  await assert.rejects(client.nextIds(1.5), /invalid count 1.5/);
  await assert.rejects(client.range(Number.NaN, 1), /invalid from NaN: expected Unix milliseconds/);
  client.close();
  await assert.rejects(client.nextId(), (e: unknown) => e instanceof SnowflakeError && e.code === "closed");

  // An onEvent that throws does not change what a call does.
  const throwing = new Client({
    endpoints: ["127.0.0.1:1"],
    giveUpAfterMs: 200,
    onEvent: () => {
      throw new Error("observer bug");
    },
  });
  await assert.rejects(throwing.nextId(), (e: unknown) => e instanceof Unavailable);
  throwing.close();
});

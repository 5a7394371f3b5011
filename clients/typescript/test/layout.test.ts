/**
 * The node's layout read from the service and used to decode, and `range()`, against real nodes
 * started with `--layout` (SPEC §9 "Layouts"), checked against what the node's HTTP API says.
 *
 * These need the service's gRPC `Range` and `GetInfo.layout` (proto/snowflake/v1): until the
 * `.proto` has them, they are skipped with that reason; once it does (and the shipped copy is the
 * repository's, which unit.test.ts enforces), they run.
 *
 * @module
 */

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, test } from "node:test";
import { Client, InvalidArgument, Layout } from "../src/index.js";
import { PROTO_FILE, PROTO_ROOT } from "../src/wire.js";
import { ServeNode, stopAll, track } from "./support.js";

after(stopAll);

const proto = readFileSync(join(PROTO_ROOT, PROTO_FILE), "utf8");
const skip =
  /rpc Range\(/.test(proto) && /message Layout/.test(proto)
    ? false
    : "waiting for the layouts work: the service's .proto has no Range and no GetInfo.layout yet";

/** GET `path` of a node's HTTP API, as JSON. */
async function http(
  node: ServeNode,
  path: string,
): Promise<{ status: number; body: Record<string, unknown> }> {
  const response = await fetch(`http://${node.httpAddr}${path}`);
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

/** A layout's fields as the HTTP API writes them. */
function asHttp(layout: Layout): Record<string, unknown> {
  return {
    name: layout.name,
    timestamp_bits: layout.timestampBits,
    datacenter_bits: layout.datacenterBits,
    worker_bits: layout.workerBits,
    sequence_bits: layout.sequenceBits,
    epoch_ms: layout.epochMs,
    max_id: String(layout.maxId),
  };
}

/** Starts a node with `flags` and checks that the client's layout and decoding are the node's. */
async function checkLayout(flags: readonly string[], name: string, bits: readonly number[], epochMs: number) {
  const node = await ServeNode.start({ datacenter: 2, worker: 9, http: true, args: flags });
  const client = track(new Client({ endpoints: [node.addr] }));
  const layout = await client.layout();
  assert.equal(layout.name, name);
  assert.deepEqual(
    [layout.timestampBits, layout.datacenterBits, layout.workerBits, layout.sequenceBits],
    bits,
  );
  assert.equal(layout.epochMs, epochMs);
  const info = await http(node, "/v1/info");
  assert.deepEqual(asHttp(layout), info.body["layout"], "the same layout as /v1/info");
  const ids = await client.nextIds(5000);
  for (const id of ids) {
    assert.equal(typeof id, "bigint");
    assert.ok(id <= layout.maxId);
  }
  for (const id of [ids[0]!, ids[4999]!, await client.nextId()]) {
    const mine = await client.decode(id);
    const theirs = (await http(node, `/v1/decode/${id}`)).body;
    assert.deepEqual(
      [mine.timestampMs, mine.datacenterId, mine.workerId, mine.sequence],
      [theirs["timestamp_ms"], theirs["datacenter_id"], theirs["worker_id"], theirs["sequence"]],
      `decoding ${id} under ${name}`,
    );
    assert.deepEqual([mine.datacenterId, mine.workerId], [2, 9]);
  }
  client.close();
  await node.stop();
}

test(
  "the client reads the node's layout from GetInfo and decodes IDs as the node does",
  { skip, timeout: 120_000 },
  async () => {
    await checkLayout([], "twitter", [41, 5, 5, 12], 1288834974657);
    await checkLayout(["--epoch-ms", "1600000000000"], "twitter", [41, 5, 5, 12], 1600000000000);
  },
);

test(
  "nodes serving js-safe and custom layouts: the client's layout and decoding are theirs",
  { skip, timeout: 120_000 },
  async () => {
    await checkLayout(["--layout", "js-safe"], "js-safe", [41, 2, 4, 6], 1288834974657);
    await checkLayout(
      ["--layout", "custom:40,3,6,8", "--epoch-ms", "1600000000000"],
      "custom:40,3,6,8",
      [40, 3, 6, 8],
      1600000000000,
    );
  },
);

test(
  "range(from, to) is the node's Range; a bound out of range is InvalidArgument naming it",
  { skip, timeout: 120_000 },
  async () => {
    const node = await ServeNode.start({ worker: 3, http: true });
    const client = track(new Client({ endpoints: [node.addr] }));
    const before = Date.now();
    const id = await client.nextId();
    const after = Date.now();
    const range = await client.range(before - 1000, new Date(after + 1000));
    assert.equal(typeof range.minId, "bigint");
    assert.ok(range.minId <= id && id <= range.maxId, `${range.minId} <= ${id} <= ${range.maxId}`);
    const theirs = (await http(node, `/v1/range?from=${before - 1000}&to=${after + 1000}`)).body;
    assert.deepEqual([String(range.minId), String(range.maxId)], [theirs["min_id"], theirs["max_id"]]);
    // One millisecond: every ID of that millisecond, any node.
    const layout = await client.layout();
    const one = await client.range(after, BigInt(after));
    const ms = BigInt(after - layout.epochMs);
    const low = BigInt(layout.datacenterBits + layout.workerBits + layout.sequenceBits);
    assert.equal(one.minId, ms << low);
    assert.equal(one.maxId, ((ms + 1n) << low) - 1n);
    for (const [from, to, bound] of [
      [after, before, /from/],
      [layout.epochMs - 1, after, /from/],
      [after, Number.MAX_SAFE_INTEGER, /to/],
    ] as const) {
      await assert.rejects(client.range(from, to), (e: unknown) => {
        assert.ok(e instanceof InvalidArgument, String(e));
        assert.equal(e.fromService, true);
        assert.match(e.message, bound);
        return true;
      });
    }
    client.close();
  },
);

/**
 * IDs above 2^53 stay exact: every ID the client hands out is a `bigint`, and its decimal is the
 * value the server sent, read from the answer's bytes without protobufjs, Long or BigInt
 * parsing — for 1,000,000 IDs from a real node.
 *
 * @module
 */

import assert from "node:assert/strict";
import { after, test } from "node:test";
import * as grpc from "@grpc/grpc-js";
import { Client } from "../src/index.js";
import { serviceDefinition, toIds, type RawNextIds } from "../src/wire.js";
import { ServeNode, audit, stopAll, track } from "./support.js";

after(stopAll);

const TWO_53 = 2n ** 53n;

/**
 * The decimal strings of the int64s of a `NextIdsResponse`, from its bytes: field 1, packed or
 * not; each varint's 7-bit groups summed in decimal with string arithmetic, so that nothing here
 * shares code with the client's path (proto-loader, Long, BigInt).
 */
function decimalsFromBytes(bytes: Uint8Array): string[] {
  const out: string[] = [];
  let p = 0;
  const varint = (): number[] => {
    const groups: number[] = [];
    for (;;) {
      const b = bytes[p++];
      if (b === undefined || groups.length === 10) {
        throw new Error("truncated varint");
      }
      groups.push(b & 0x7f);
      if (b < 0x80) {
        return groups;
      }
    }
  };
  // Decimal digits (most significant first) of sum(groups[i] * 128^i).
  const decimal = (groups: number[]): string => {
    let digits = [0];
    for (let i = groups.length - 1; i >= 0; i--) {
      // digits = digits * 128 + group
      let carry = groups[i]!;
      for (let d = digits.length - 1; d >= 0; d--) {
        const v = digits[d]! * 128 + carry;
        digits[d] = v % 10;
        carry = Math.floor(v / 10);
      }
      while (carry > 0) {
        digits.unshift(carry % 10);
        carry = Math.floor(carry / 10);
      }
    }
    while (digits.length > 1 && digits[0] === 0) {
      digits = digits.slice(1);
    }
    return digits.join("");
  };
  while (p < bytes.length) {
    const tag = varint();
    const key = tag.reduce((sum, g, i) => sum + g * 128 ** i, 0);
    if (key === 0x0a) {
      const len = varint().reduce((sum, g, i) => sum + g * 128 ** i, 0);
      const end = p + len;
      while (p < end) {
        out.push(decimal(varint()));
      }
    } else if (key === 0x08) {
      out.push(decimal(varint()));
    } else {
      throw new Error(`unexpected field key ${key}`);
    }
  }
  return out;
}

test(
  "every ID is a bigint, and String(id) is the server's value, for 1,000,000 IDs above 2^53",
  { timeout: 240_000 },
  async () => {
    const node = await ServeNode.start({ datacenter: 2, worker: 9 });
    const total = 1_000_000;

    // The client's own path, end to end: types, range, uniqueness and the node's pair.
    const client = track(new Client({ endpoints: [node.addr] }));
    const started = Date.now();
    const ids = await client.nextIds(total);
    const ended = Date.now();
    assert.equal(ids.length, total);
    for (const id of ids) {
      if (typeof id !== "bigint" || id <= TWO_53) {
        assert.fail(`${String(id)} (${typeof id}) is not a bigint above 2^53`);
      }
    }
    const single = await client.nextId();
    assert.equal(typeof single, "bigint");
    assert.ok(single > ids[ids.length - 1]!, "one node's IDs increase");
    client.close();
    const report = audit(ids);
    assert.equal(report.ids, total);
    assert.equal(report.duplicates, 0);
    assert.equal(report.invalid, 0);
    assert.deepEqual(
      report.nodes.map((n) => [n.datacenter_id, n.worker_id, n.ids]),
      [[2, 9, total]],
      "every ID decodes (in Rust, from its decimal) to the node's pair",
    );
    assert.ok(report.time_range!.first_ms >= started - 1 && report.time_range!.last_ms <= ended + 1);

    // The client's conversion against the answer's bytes: the same NextIds answers, read both
    // ways, give the same decimals.
    const method = serviceDefinition()["NextIds"]!;
    const raw = track(new grpc.Client(node.addr, grpc.credentials.createInsecure()));
    const call = (count: number): Promise<Buffer> =>
      new Promise((resolve, reject) =>
        raw.makeUnaryRequest(
          method.path,
          method.requestSerialize,
          (bytes: Buffer) => bytes,
          { count },
          { deadline: Date.now() + 10_000 },
          (error, bytes) => (error || bytes === undefined ? reject(error) : resolve(bytes)),
        ),
      );
    let compared = 0;
    while (compared < total) {
      const count = Math.min(4096, total - compared);
      const bytes = await call(count);
      const converted = toIds((method.responseDeserialize(bytes) as RawNextIds).ids, count, (1n << 63n) - 1n);
      if (!Array.isArray(converted)) {
        assert.fail(JSON.stringify(converted));
      }
      const expected = decimalsFromBytes(bytes);
      assert.equal(expected.length, count);
      for (let i = 0; i < count; i++) {
        const id: bigint = converted[i]!;
        if (typeof id !== "bigint" || String(id) !== expected[i] || id <= TWO_53) {
          assert.fail(
            `ID ${i} of an answer: the client says ${String(id)} (${typeof id}), the bytes say ${expected[i]}`,
          );
        }
      }
      compared += count;
    }
    raw.close();
    assert.equal(compared, total);
  },
);

/**
 * The ID layout: the widths of an ID's fields (most significant first: timestamp | datacenter |
 * worker | sequence) and the epoch, as a node reports it in `GetInfo`, and decoding with it.
 *
 * @module
 */

import { InvalidArgument } from "./errors.js";

/** Twitter's epoch, 2010-11-04T01:42:54.657Z: the default of every layout. */
export const TWITTER_EPOCH_MS = 1288834974657;

/** The largest value of a signed 64-bit integer: no ID is above it. */
const MAX_I64 = (1n << 63n) - 1n;

/** An ID split into its fields. */
export interface DecodedId {
  /** The ID, as given. */
  readonly id: bigint;
  /** Its time in Unix milliseconds (the epoch added). */
  readonly timestampMs: number;
  /** Its time. */
  readonly time: Date;
  readonly datacenterId: number;
  readonly workerId: number;
  /** Its sequence within the millisecond. */
  readonly sequence: number;
}

/** The widths and epoch of a layout, as `new Layout(...)` takes them. */
export interface LayoutFields {
  /** `"twitter"`, `"js-safe"` or `"custom:T,D,W,S"`: it describes the widths only. */
  readonly name: string;
  readonly timestampBits: number;
  readonly datacenterBits: number;
  readonly workerBits: number;
  readonly sequenceBits: number;
  /** The epoch, Unix milliseconds. */
  readonly epochMs: number;
  /** The largest ID, when the service says it (at most what the widths hold; that by default). */
  readonly maxId?: bigint;
}

/** A layout, checked (SPEC §9): T ≥ 30, S ≥ 1, D + W ≥ 1, T + D + W + S ≤ 63. */
export class Layout implements LayoutFields {
  readonly name: string;
  readonly timestampBits: number;
  readonly datacenterBits: number;
  readonly workerBits: number;
  readonly sequenceBits: number;
  readonly epochMs: number;
  /** The largest ID the layout can hold: every field at its maximum. */
  readonly maxId: bigint;

  constructor(fields: LayoutFields) {
    const { timestampBits: t, datacenterBits: d, workerBits: w, sequenceBits: s } = fields;
    const widths = `${t},${d},${w},${s}`;
    for (const [what, bits] of [
      ["timestamp", t],
      ["datacenter", d],
      ["worker", w],
      ["sequence", s],
    ] as const) {
      if (!Number.isInteger(bits) || bits < 0 || bits > 63) {
        throw new InvalidArgument(
          `invalid layout ${JSON.stringify(fields.name)}: ${what} bits ${bits} not in 0..=63`,
          false,
        );
      }
    }
    if (t < 30 || s < 1 || d + w < 1 || t + d + w + s > 63) {
      throw new InvalidArgument(
        `invalid layout ${JSON.stringify(fields.name)} (${widths}): expected timestamp bits >= 30, ` +
          `sequence bits >= 1, datacenter + worker bits >= 1, and at most 63 bits in all`,
        false,
      );
    }
    if (!Number.isSafeInteger(fields.epochMs) || fields.epochMs < 0) {
      throw new InvalidArgument(
        `invalid epoch ${fields.epochMs}: expected Unix milliseconds, 0..=${Number.MAX_SAFE_INTEGER}`,
        false,
      );
    }
    this.name = fields.name;
    this.timestampBits = t;
    this.datacenterBits = d;
    this.workerBits = w;
    this.sequenceBits = s;
    this.epochMs = fields.epochMs;
    const widest = (1n << BigInt(t + d + w + s)) - 1n;
    if (fields.maxId !== undefined && (fields.maxId < 0n || fields.maxId > widest)) {
      throw new InvalidArgument(
        `invalid layout ${JSON.stringify(fields.name)} (${widths}): max id ${fields.maxId} not in 0..=${widest}`,
        false,
      );
    }
    this.maxId = fields.maxId ?? widest;
  }

  /** Twitter's widths (41 | 5 | 5 | 12) with `epochMs` (Twitter's by default). */
  static twitter(epochMs: number = TWITTER_EPOCH_MS): Layout {
    return new Layout({
      name: "twitter",
      timestampBits: 41,
      datacenterBits: 5,
      workerBits: 5,
      sequenceBits: 12,
      epochMs,
    });
  }

  /** Splits `id` into its fields. An ID this layout cannot hold is an {@link InvalidArgument}. */
  decode(id: bigint): DecodedId {
    if (typeof id !== "bigint") {
      throw new InvalidArgument(`invalid id ${String(id)}: expected a bigint`, false);
    }
    if (id < 0n || id > this.maxId) {
      const whole = this.maxId === MAX_I64 ? "" : ` under the layout ${this.name}`;
      throw new InvalidArgument(`invalid id ${id}: expected 0..=${this.maxId}${whole}`, false);
    }
    const s = BigInt(this.sequenceBits);
    const w = BigInt(this.workerBits);
    const d = BigInt(this.datacenterBits);
    const field = (shift: bigint, bits: bigint): number => Number((id >> shift) & ((1n << bits) - 1n));
    const timestampMs = Number(id >> (s + w + d)) + this.epochMs;
    return {
      id,
      timestampMs,
      time: new Date(timestampMs),
      datacenterId: field(s + w, d),
      workerId: field(s, w),
      sequence: field(0n, s),
    };
  }

  /** The Unix milliseconds an ID was issued at (the epoch added). */
  timestampMs(id: bigint): number {
    return this.decode(id).timestampMs;
  }
}

/**
 * The ID layout: the widths of an ID's fields (most significant first: timestamp | datacenter |
 * worker | sequence) and the epoch, as a node reports it in `GetInfo`, and decoding with it.
 *
 * @module
 */

import { InvalidArgument } from "./errors.js";
import type { RawInfo } from "./wire.js";

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
  /**
   * `"twitter"`, `"js-safe"` or `"custom:T,D,W,S"`: it describes the widths only (and must agree
   * with them). Without it, the widths' own name.
   */
  readonly name?: string;
  readonly timestampBits: number;
  readonly datacenterBits: number;
  readonly workerBits: number;
  readonly sequenceBits: number;
  /** The epoch, Unix milliseconds. */
  readonly epochMs: number;
  /** The largest ID, when a node says it: it must be the widths' largest. */
  readonly maxId?: bigint;
}

/** The named profiles' widths (timestamp, datacenter, worker, sequence). */
const PROFILES: ReadonlyArray<readonly [string, readonly [number, number, number, number]]> = [
  ["twitter", [41, 5, 5, 12]],
  ["js-safe", [41, 2, 4, 6]],
];

/** The name of these widths: a profile's, else `custom:T,D,W,S`. */
function nameOf(widths: readonly number[]): string {
  const profile = PROFILES.find(([, w]) => w.every((bits, i) => bits === widths[i]));
  return profile === undefined ? `custom:${widths.join(",")}` : profile[0];
}

/** The widths a layout's name gives. */
function widthsOf(name: string): number[] {
  const profile = PROFILES.find(([n]) => n === name);
  if (profile !== undefined) {
    return [...profile[1]];
  }
  const custom = /^custom:([0-9]{1,2}),([0-9]{1,2}),([0-9]{1,2}),([0-9]{1,2})$/.exec(name);
  if (custom === null) {
    throw new InvalidArgument(
      `invalid layout: expected twitter, js-safe or custom:T,D,W,S (timestamp, datacenter, worker ` +
        `and sequence widths), found ${JSON.stringify(name)}`,
      false,
    );
  }
  return custom.slice(1).map(Number);
}

/** A layout, checked (SPEC §9): T ≥ 30, S ≥ 1, D + W ≥ 1, T + D + W + S ≤ 63. */
export class Layout {
  /** `"twitter"`, `"js-safe"` or `"custom:T,D,W,S"`. */
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
    const widths = [t, d, w, s];
    for (const [what, bits] of [
      ["timestamp", t],
      ["datacenter", d],
      ["worker", w],
      ["sequence", s],
    ] as const) {
      if (!Number.isInteger(bits) || bits < 0 || bits > 63) {
        throw new InvalidArgument(`invalid layout: ${what} bits ${bits} not in 0..=63`, false);
      }
    }
    if (t < 30 || s < 1 || d + w < 1 || t + d + w + s > 63) {
      throw new InvalidArgument(
        `invalid layout ${widths.join(",")}: expected timestamp bits >= 30, ` +
          `sequence bits >= 1, datacenter + worker bits >= 1, and at most 63 bits in all`,
        false,
      );
    }
    const name = fields.name ?? nameOf(widths);
    const named = widthsOf(name);
    if (named.some((bits, i) => bits !== widths[i])) {
      throw new InvalidArgument(
        `invalid layout: the name ${name} (widths ${named.join(",")}) does not go with the widths ${widths.join(",")}`,
        false,
      );
    }
    if (!Number.isSafeInteger(fields.epochMs) || fields.epochMs < 0) {
      throw new InvalidArgument(
        `invalid epoch ${fields.epochMs}: expected Unix milliseconds, 0..=${Number.MAX_SAFE_INTEGER}`,
        false,
      );
    }
    const widest = (1n << BigInt(t + d + w + s)) - 1n;
    if (fields.maxId !== undefined && fields.maxId !== widest) {
      throw new InvalidArgument(
        `invalid layout ${name}: max id ${fields.maxId} is not its widths' largest id ${widest}`,
        false,
      );
    }
    this.name = name;
    this.timestampBits = t;
    this.datacenterBits = d;
    this.workerBits = w;
    this.sequenceBits = s;
    this.epochMs = fields.epochMs;
    this.maxId = widest;
  }

  /** Twitter's widths (41 | 5 | 5 | 12) with `epochMs` (Twitter's by default). */
  static twitter(epochMs: number = TWITTER_EPOCH_MS): Layout {
    return new Layout({ timestampBits: 41, datacenterBits: 5, workerBits: 5, sequenceBits: 12, epochMs });
  }

  /** `js-safe` (41 | 2 | 4 | 6: every ID ≤ 2^53 − 1) with `epochMs` (Twitter's by default). */
  static jsSafe(epochMs: number = TWITTER_EPOCH_MS): Layout {
    return new Layout({ timestampBits: 41, datacenterBits: 2, workerBits: 4, sequenceBits: 6, epochMs });
  }

  /** The last Unix millisecond the layout can date an ID with. */
  get lastMs(): number {
    return this.epochMs + 2 ** this.timestampBits - 1;
  }

  /** Whether `other` has the same widths and epoch (the names say nothing more). */
  equals(other: Layout): boolean {
    return (
      this.epochMs === other.epochMs &&
      this.timestampBits === other.timestampBits &&
      this.datacenterBits === other.datacenterBits &&
      this.workerBits === other.workerBits &&
      this.sequenceBits === other.sequenceBits
    );
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

/**
 * The layout a node's `GetInfo` answer describes, checked as the service checks a recorded one:
 * the name agrees with the widths, `max_id` is their largest, the epoch is not in the future and
 * the layout has not run out at `nowMs`. A node older than layouts sends none: it runs Twitter's
 * widths with the epoch it gives.
 */
export function layoutFromInfo(raw: RawInfo, nowMs: number): Layout {
  const l = raw.layout;
  const layout =
    l === undefined || l === null
      ? Layout.twitter(Number(raw.epoch_ms))
      : new Layout({
          name: l.name,
          timestampBits: l.timestamp_bits,
          datacenterBits: l.datacenter_bits,
          workerBits: l.worker_bits,
          sequenceBits: l.sequence_bits,
          epochMs: Number(l.epoch_ms),
          maxId: BigInt(l.max_id),
        });
  if (layout.epochMs > nowMs) {
    throw new InvalidArgument(`epoch ${layout.epochMs} is in the future (now is ${nowMs})`, false);
  }
  if (layout.lastMs < nowMs) {
    throw new InvalidArgument(
      `${layout.name} with epoch ${layout.epochMs} ran out at ${new Date(layout.lastMs).toISOString()}`,
      false,
    );
  }
  return layout;
}

/** Why a node whose layout differs from the one the client already uses is not asked. */
export function mixedLayouts(node: string, theirs: Layout, ours: Layout): string {
  return (
    `${node} issues IDs under the layout ${theirs.name} (epoch ${theirs.epochMs}), another endpoint ` +
    `under ${ours.name} (epoch ${ours.epochMs}): IDs of two layouts can collide, so one client never mixes them`
  );
}

/**
 * The client: IDs over gRPC from a list of nodes, with a deadline on every attempt, health-aware
 * failover, a time after which a call gives up, and an optional prefetch buffer kept full by a
 * background refiller.
 *
 * @module
 */

import { status } from "@grpc/grpc-js";
import { Health, parseEndpoint } from "./endpoint.js";
import { Closed, InvalidArgument, Unavailable } from "./errors.js";
import { Layout, layoutFromInfo, mixedLayouts, type DecodedId } from "./layout.js";
import { settings, type ClientEvent, type ClientOptions, type Settings } from "./options.js";
import { Buffer } from "./prefetch.js";
import { Lock, Sleeps, Waker } from "./sync.js";
import { channelCredentials } from "./tls.js";
import { Channel, toIds, type CallFailure, type Pending, type RawInfo } from "./wire.js";

/** The most IDs one {@link Client.nextIds} call returns. */
export const MAX_IDS_PER_REQUEST = 1_000_000;

/** Counters since the client was made ({@link Client.stats}). */
export interface Stats {
  /** IDs handed out from the prefetch buffer. */
  readonly servedFromBuffer: number;
  /** IDs handed out straight from a call (no prefetch, a miss, or `nextIds`). */
  readonly servedDirect: number;
  /** Successful calls that fetched IDs. */
  readonly fetches: number;
  /** IDs received from nodes. */
  readonly fetchedIds: number;
  /** Attempts that failed and moved on to another node (or waited for one). */
  readonly failovers: number;
  /** Prefetched IDs dropped: older than `maxAge`, or buffered at close. */
  readonly discarded: number;
  /** `nextId` calls that found the prefetch buffer empty and waited for a fetch. */
  readonly bufferMisses: number;
  /** IDs in the prefetch buffer now. */
  readonly buffered: number;
}

/** What one node said about itself ({@link Client.info}). */
export interface NodeInfo {
  /** The node, as given in `endpoints`. */
  readonly endpoint: string;
  readonly datacenterId: number;
  readonly workerId: number;
  /** The node's clock, Unix milliseconds. */
  readonly timestampMs: number;
  /** The largest count `NextIds` accepts. */
  readonly maxBatch: number;
  /** Whether the node can issue IDs now. */
  readonly ready: boolean;
  /** Its layout (Twitter's widths with its epoch, from a node that predates layouts). */
  readonly layout: Layout;
}

/** The smallest and largest ID any node could issue in a time range ({@link Client.range}). */
export interface IdRange {
  readonly minId: bigint;
  readonly maxId: bigint;
}

/** A time: Unix milliseconds (a `number` or `bigint`), or a `Date`. */
export type Time = number | bigint | Date;

interface Node {
  /** As given, for messages and events. */
  readonly name: string;
  readonly channel: Channel;
  readonly health: Health;
  /** Its layout, once its `GetInfo` said which (and it agreed with the client's). */
  layout: Layout | undefined;
}

type Mutable<T> = { -readonly [K in keyof T]: T[K] };

/** A node's answer, checked: the value, or why it is not valid (treated as the node failing). */
type Accepted<T> = { readonly ok: T } | { readonly invalid: string };

/** Channels closed when a client is collected without `close()`. */
const orphans = new FinalizationRegistry<Channel[]>((channels) => {
  for (const channel of channels) {
    channel.close();
  }
});

const now = (): number => performance.now();

/** Unix milliseconds of a {@link Time}, as the decimal string gRPC's int64 takes. */
function millis(what: string, time: Time): string {
  if (time instanceof Date) {
    const ms = time.getTime();
    if (Number.isNaN(ms)) {
      throw new InvalidArgument(`invalid ${what}: an invalid Date`, false);
    }
    return String(ms);
  }
  if (typeof time === "bigint") {
    if (time < -(1n << 63n) || time >= 1n << 63n) {
      throw new InvalidArgument(`invalid ${what} ${time}: expected a signed 64-bit Unix millisecond`, false);
    }
    return time.toString();
  }
  if (typeof time !== "number" || !Number.isSafeInteger(time)) {
    throw new InvalidArgument(
      `invalid ${what} ${String(time)}: expected Unix milliseconds (an integer), a bigint or a Date`,
      false,
    );
  }
  return String(time);
}

/**
 * IDs from the service. Safe to share across the whole program (one per process is the
 * intended use); every method is async except {@link Client.tryNextId}, {@link Client.stats}
 * and {@link Client.close}.
 *
 * Guarantees: every ID a node answered is handed out at most once (a call that times out may
 * lose the IDs issued for it: a gap, never a repeat); each attempt has its deadline and a call
 * fails with {@link Unavailable} after `giveUpAfterMs`, never hangs; IDs are `bigint`, never
 * `number`. IDs from different nodes are not ordered with each other, and prefetched IDs carry
 * the time they were fetched, not the time they are used.
 */
export class Client {
  private readonly settings: Settings;
  private readonly nodes: Node[];
  /** Whose turn it is (round robin over the usable nodes). */
  private turn = 0;
  /** The prefetch buffer, when prefetching. */
  private readonly buffer: Buffer | undefined;
  /** Wakes the refiller. */
  private readonly waker = new Waker();
  /** One prefetch fetch at a time: the refiller's, or a taker's that found the buffer empty. */
  private readonly filling = new Lock();
  /** Waits between attempts; all end at close. */
  private readonly sleeps = new Sleeps();
  /** Calls in flight, cancelled at close. */
  private readonly inflight = new Set<Pending<unknown>>();
  private closed = false;
  private readonly counters: Mutable<Omit<Stats, "buffered">> = {
    servedFromBuffer: 0,
    servedDirect: 0,
    fetches: 0,
    fetchedIds: 0,
    failovers: 0,
    discarded: 0,
    bufferMisses: 0,
  };
  /** Whether onEvent threw already (it is reported once). */
  private observerFailed = false;
  /** The service's layout: the first node's answer to `GetInfo`, which every other node's must equal. */
  private clientLayout: Layout | undefined;

  /**
   * A client of `options.endpoints`; it connects on first use. A wrong option throws a
   * {@link ConfigError} naming it.
   */
  constructor(options: ClientOptions) {
    this.settings = settings(options);
    const tls = this.settings.tls;
    const creds = channelCredentials(tls);
    const addresses = this.settings.endpoints.map((e) => [e, parseEndpoint(e, tls !== undefined)] as const);
    this.nodes = addresses.map(([name, address]) => ({
      name,
      channel: new Channel(address.target, creds, tls?.serverName),
      health: new Health(),
      layout: undefined,
    }));
    orphans.register(
      this,
      this.nodes.map((n) => n.channel),
      this,
    );
    if (this.settings.prefetch !== undefined) {
      this.buffer = new Buffer(this.settings.prefetch);
      void refill(new WeakRef(this), this.waker);
    }
  }

  /** One ID: from the prefetch buffer when prefetching (a memory read unless it ran dry), else a node's `NextId`. */
  async nextId(): Promise<bigint> {
    const buffer = this.buffer;
    if (buffer === undefined) {
      this.checkOpen();
      const [id] = await this.fetchIds(0, now() + this.settings.giveUpAfterMs);
      this.counters.servedDirect += 1;
      return id!;
    }
    const fresh = this.take(buffer);
    if (fresh !== undefined) {
      return fresh;
    }
    this.checkOpen();
    this.counters.bufferMisses += 1;
    // Empty: wait for the fetch in flight, or make one; both within one giveUpAfterMs (the
    // refiller's fetch may be trying nodes that are all down).
    const started = now();
    const giveUp = started + this.settings.giveUpAfterMs;
    if (!(await this.filling.acquire(giveUp - now()))) {
      this.checkOpen();
      throw this.unavailable(started);
    }
    try {
      const again = this.take(buffer);
      if (again !== undefined) {
        return again;
      }
      this.checkOpen();
      const count = Math.max(buffer.wanted(this.settings.maxIdsPerCall), 1);
      const born = now();
      const ids = await this.fetchIds(count, giveUp);
      buffer.push(ids.slice(1), born);
      this.counters.servedDirect += 1;
      return ids[0]!;
    } finally {
      this.filling.release();
    }
  }

  /** An ID from the prefetch buffer if one is there now, without waiting; undefined otherwise. */
  tryNextId(): bigint | undefined {
    return this.buffer === undefined ? undefined : this.take(this.buffer);
  }

  /**
   * `count` IDs (1..=1,000,000), asked of the nodes `maxIdsPerCall` at a time, each part from one
   * node with failover. Parts from different nodes are not ordered with each other.
   */
  async nextIds(count: number): Promise<bigint[]> {
    if (typeof count !== "number" || !Number.isInteger(count) || count < 1 || count > MAX_IDS_PER_REQUEST) {
      throw new InvalidArgument(`invalid count ${String(count)}: expected 1..=${MAX_IDS_PER_REQUEST}`, false);
    }
    this.checkOpen();
    const out: bigint[] = [];
    while (out.length < count) {
      const part = Math.min(count - out.length, this.settings.maxIdsPerCall);
      for (const id of await this.fetchIds(part, now() + this.settings.giveUpAfterMs)) {
        out.push(id);
      }
    }
    this.counters.servedDirect += count;
    return out;
  }

  /**
   * The smallest and largest ID any node could issue between `from` and `to` (both inclusive),
   * for range scans over a primary key: `WHERE id BETWEEN minId AND maxId`. A bound outside the
   * layout's lifetime, or `from` after `to`, is an {@link InvalidArgument} (the node's message).
   */
  async range(from: Time, to: Time): Promise<IdRange> {
    const request = { from_ms: millis("from", from), to_ms: millis("to", to) };
    this.checkOpen();
    const { value } = await this.call(
      now() + this.settings.giveUpAfterMs,
      (channel, deadlineMs) => channel.call("Range", request, deadlineMs),
      (raw, layout): Accepted<IdRange> => {
        const ids = toIds([raw.min_id, raw.max_id], 2, layout.maxId);
        if (!Array.isArray(ids)) {
          return ids;
        }
        const [minId, maxId] = ids as [bigint, bigint];
        if (minId > maxId) {
          return { invalid: `answered a range whose minimum ${minId} is above its maximum ${maxId}` };
        }
        return { ok: { minId, maxId } };
      },
    );
    return value;
  }

  /** What the next node in turn says about itself (`GetInfo`), with failover. */
  async info(): Promise<NodeInfo> {
    this.checkOpen();
    const { value, node } = await this.call(
      now() + this.settings.giveUpAfterMs,
      (channel, deadlineMs) => channel.call("GetInfo", {}, deadlineMs),
      (raw, layout): Accepted<{ raw: RawInfo; layout: Layout }> => ({ ok: { raw, layout } }),
    );
    const { raw, layout } = value;
    return {
      endpoint: this.nodes[node]!.name,
      datacenterId: raw.datacenter_id,
      workerId: raw.worker_id,
      timestampMs: Number(raw.timestamp_ms),
      maxBatch: Number(raw.max_batch),
      ready: raw.ready,
      layout,
    };
  }

  /**
   * The service's ID layout, as its nodes report it in `GetInfo` (asked of a node, with
   * failover, unless already known): decode the client's IDs with it. Every node's layout is
   * read before its IDs are used; one whose layout differs from the first's is not asked (IDs
   * of two layouts can collide).
   */
  async layout(): Promise<Layout> {
    if (this.clientLayout !== undefined) {
      return this.clientLayout;
    }
    this.checkOpen();
    const { value } = await this.call(now() + this.settings.giveUpAfterMs, undefined, (_, layout) => ({
      ok: layout,
    }));
    return value;
  }

  /** Splits `id` into its fields with the layout the service reports ({@link Client.layout}). */
  async decode(id: bigint): Promise<DecodedId> {
    return (await this.layout()).decode(id);
  }

  /** The counters so far. */
  stats(): Stats {
    return { ...this.counters, buffered: this.buffer?.length ?? 0 };
  }

  /**
   * Stops the client: calls in flight and waiting end with {@link Closed}, the refiller ends,
   * the buffered IDs are dropped (never handed out), the connections close. Idempotent.
   */
  close(): void {
    if (this.closed) {
      return;
    }
    this.closed = true;
    for (const pending of this.inflight) {
      pending.cancel();
    }
    this.sleeps.wakeAll();
    this.filling.abort();
    this.waker.wake();
    if (this.buffer !== undefined) {
      const dropped = this.buffer.clear();
      if (dropped > 0) {
        this.discarded(dropped);
      }
    }
    for (const node of this.nodes) {
      node.channel.close();
    }
    orphans.unregister(this);
  }

  private checkOpen(): void {
    if (this.closed) {
      throw new Closed();
    }
  }

  private event(event: ClientEvent): void {
    const onEvent = this.settings.onEvent;
    if (onEvent === undefined) {
      return;
    }
    try {
      onEvent(event);
    } catch (e) {
      // An observer's bug must not fail a call (or stop the refiller): reported once.
      if (!this.observerFailed) {
        this.observerFailed = true;
        process.emitWarning(`snowflake-client: onEvent threw (reported once): ${String(e)}`);
      }
    }
  }

  private discarded(ids: number): void {
    this.counters.discarded += ids;
    this.event({ type: "discarded", ids });
  }

  /** An ID from the buffer, if it has a fresh one (waking the refiller when it runs low). */
  private take(buffer: Buffer): bigint | undefined {
    if (this.closed) {
      return undefined;
    }
    const popped = buffer.pop(now());
    if (popped.discarded > 0) {
      this.discarded(popped.discarded);
    }
    if (popped.wake) {
      this.waker.wake();
    }
    if (popped.id !== undefined) {
      this.counters.servedFromBuffer += 1;
    }
    return popped.id;
  }

  /**
   * IDs from one node, with failover until `giveUp`: `NextIds` for `count` of them, or
   * `NextId` for one when `count` is 0.
   */
  private async fetchIds(count: number, giveUp: number): Promise<bigint[]> {
    const accept = (texts: readonly string[], layout: Layout): Accepted<bigint[]> => {
      const ids = toIds(texts, Math.max(count, 1), layout.maxId);
      return Array.isArray(ids) ? { ok: ids } : ids;
    };
    const { value, node, elapsedMs } =
      count === 0
        ? await this.call(
            giveUp,
            (c, d) => c.call("NextId", {}, d),
            (raw, layout) => accept([raw.id], layout),
          )
        : await this.call(
            giveUp,
            (c, d) => c.call("NextIds", { count }, d),
            (raw, layout) => accept(raw.ids, layout),
          );
    this.counters.fetches += 1;
    this.counters.fetchedIds += value.length;
    if (this.settings.onEvent !== undefined) {
      this.event({ type: "fetched", endpoint: this.nodes[node]!.name, ids: value.length, elapsedMs });
    }
    return value;
  }

  /** The next usable node in turn (not in `skip`), or when the first skipped one may be asked again. */
  private pick(at: number, skip: ReadonlySet<number>): { node: number } | { until: number } {
    const n = this.nodes.length;
    const start = this.turn++ % n;
    let until = Infinity;
    for (let k = 0; k < n; k++) {
      const i = (start + k) % n;
      if (skip.has(i)) {
        continue;
      }
      const down = this.nodes[i]!.health.downAt(at);
      if (down === undefined) {
        return { node: i };
      }
      until = Math.min(until, down);
    }
    return { until };
  }

  /**
   * Runs `start` (given a node's channel and the attempt's deadline) on the nodes in turn until
   * one answers with something `accept` takes under the node's layout, the service refuses the
   * request itself (`INVALID_ARGUMENT`), or `giveUp` has passed. A node's layout is read
   * (`GetInfo`, within the same deadline) before its first answer is used; without `start`, that
   * is the whole attempt. A node that does not know the method (`UNIMPLEMENTED`: an older
   * version) is not asked again in this call, and not counted as down.
   */
  private async call<R, T>(
    giveUp: number,
    start: ((channel: Channel, deadlineMs: number) => Pending<R>) | undefined,
    accept: (raw: R, layout: Layout) => Accepted<T>,
  ): Promise<{ value: T; node: number; elapsedMs: number }> {
    // Every caller gives up giveUpAfterMs after it started.
    const started = giveUp - this.settings.giveUpAfterMs;
    const unsupported = new Set<number>();
    for (;;) {
      this.checkOpen();
      const at = now();
      if (unsupported.size === this.nodes.length) {
        throw this.unavailable(started);
      }
      const picked = this.pick(at, unsupported);
      if ("until" in picked) {
        if (at >= giveUp) {
          throw this.unavailable(started);
        }
        // Nobody is usable before `until`: wait for it, but not past giveUp (then fail).
        await this.sleeps.sleep(Math.min(picked.until, giveUp) - at);
        continue;
      }
      const remaining = giveUp - at;
      if (remaining <= 0) {
        throw this.unavailable(started);
      }
      const i = picked.node;
      const node = this.nodes[i]!;
      const deadlineMs = Math.max(1, Math.ceil(Math.min(this.settings.deadlineMs, remaining)));
      const sent = now();
      const noAnswer = `no answer within ${deadlineMs} ms`;
      let error: string;
      let retryAfterMs: number | undefined;
      try {
        const layout =
          node.layout ?? this.learn(node, await this.send(node.channel.call("GetInfo", {}, deadlineMs)));
        const left = deadlineMs - (now() - sent);
        if (typeof layout === "string") {
          error = layout;
        } else if (start !== undefined && left < 1) {
          error = noAnswer;
        } else {
          const raw =
            start === undefined ? (undefined as R) : await this.send(start(node.channel, Math.ceil(left)));
          const checked = accept(raw, layout);
          if ("invalid" in checked) {
            error = checked.invalid;
          } else {
            if (node.health.succeeded()) {
              this.event({ type: "endpointBack", endpoint: node.name });
            }
            return { value: checked.ok, node: i, elapsedMs: now() - sent };
          }
        }
      } catch (e) {
        this.checkOpen();
        const failure = asFailure(e);
        if (failure.code === status.INVALID_ARGUMENT) {
          throw new InvalidArgument(`the service refused the request: ${failure.details}`, true);
        }
        if (failure.code === status.UNIMPLEMENTED) {
          unsupported.add(i);
          node.health.lastError = failure.message;
          continue;
        }
        const timedOut =
          (failure.code === status.DEADLINE_EXCEEDED || failure.code === status.CANCELLED) &&
          now() - sent + 1 >= deadlineMs;
        error = timedOut ? noAnswer : failure.message;
        retryAfterMs = timedOut ? undefined : failure.retryAfterMs;
      }
      const retryInMs = node.health.failed(this.settings.backoff, retryAfterMs, error, now());
      this.counters.failovers += 1;
      this.event({ type: "failover", endpoint: node.name, error, retryInMs });
    }
  }

  /** A call's answer, the call tracked meanwhile (so that close() cancels it). */
  private async send<R>(pending: Pending<R>): Promise<R> {
    this.inflight.add(pending);
    try {
      return await pending.answer;
    } finally {
      this.inflight.delete(pending);
    }
  }

  /**
   * A node's layout from its `GetInfo` answer, kept when it is usable and the client's (the
   * first one learned sets the client's); else why the node is not asked.
   */
  private learn(node: Node, info: RawInfo): Layout | string {
    let theirs: Layout;
    try {
      theirs = layoutFromInfo(info, Date.now());
    } catch (e) {
      return `answered an unusable layout: ${(e as Error).message}`;
    }
    const ours = (this.clientLayout ??= theirs);
    if (!theirs.equals(ours)) {
      return mixedLayouts(node.name, theirs, ours);
    }
    node.layout = theirs;
    return theirs;
  }

  private unavailable(started: number): Unavailable {
    return new Unavailable(
      Math.round(now() - started),
      this.nodes.map((n) => ({ endpoint: n.name, error: n.health.lastError ?? "not tried" })),
    );
  }

  /**
   * @internal
   * One round of the background refill ({@link refill}): drops stale IDs, follows the rate,
   * fetches up to the target. False when the client is closed.
   */
  async refillRound(woken: boolean, state: RefillState): Promise<boolean> {
    const buffer = this.buffer;
    if (this.closed || buffer === undefined) {
      return false;
    }
    buffer.refillStarted();
    const at = now();
    const stale = buffer.evictStale(at);
    if (stale > 0) {
      this.discarded(stale);
    }
    // The rate IDs are taken at, smoothed over the rounds.
    const taken = buffer.taken;
    const elapsedSec = (at - state.lastAt) / 1000;
    if (elapsedSec > 0) {
      const recent = (taken - state.lastTaken) / elapsedSec;
      state.rate = state.rate === 0 ? recent : 0.5 * state.rate + 0.5 * recent;
    }
    const idle = !woken && taken === state.lastTaken;
    state.lastTaken = taken;
    state.lastAt = at;
    if (idle) {
      // Nobody took an ID since the last round: keep what is fresh, fetch nothing (an idle
      // client would otherwise fetch IDs only to discard them).
      return true;
    }
    const maxPerCall = this.settings.maxIdsPerCall;
    buffer.resize(state.rate, state.fetchMs, maxPerCall);
    for (;;) {
      const count = buffer.wanted(maxPerCall);
      if (count === 0 || this.closed) {
        break;
      }
      if (!(await this.filling.acquire(this.settings.giveUpAfterMs))) {
        break;
      }
      try {
        const born = now();
        const ids = await this.fetchIds(count, born + this.settings.giveUpAfterMs);
        state.fetchMs = (state.fetchMs + (now() - born)) / 2;
        buffer.push(ids, born);
      } catch {
        // Every node failed for giveUpAfterMs (or the client closed): the takers see the same
        // when they find the buffer empty; try again on the next round.
        break;
      } finally {
        this.filling.release();
      }
    }
    return !this.closed;
  }

  /** @internal How often the refiller looks at the buffer when nobody wakes it (ms). */
  refillTickMs(): number {
    const maxAge = this.settings.prefetch?.maxAgeMs ?? 1000;
    return Math.min(Math.max(maxAge / 4, 5), 250);
  }
}

/** @internal What the refiller remembers between rounds. */
export interface RefillState {
  lastTaken: number;
  lastAt: number;
  /** IDs per second taken, smoothed. */
  rate: number;
  /** How long a fetch takes, smoothed (ms). */
  fetchMs: number;
}

/**
 * The background refill: woken when the buffer falls below its low-water mark (and on a tick,
 * to follow the rate and drop stale IDs). It holds the client only weakly between rounds, and
 * ends when the client is closed or collected.
 */
async function refill(client: WeakRef<Client>, waker: Waker): Promise<void> {
  const state: RefillState = { lastTaken: 0, lastAt: now(), rate: 0, fetchMs: 1 };
  // The first round fills the buffer at once, so that the first IDs are local too.
  let woken = true;
  try {
    for (;;) {
      const tick = await round(client, woken, state);
      if (tick === undefined) {
        return;
      }
      woken = await waker.wait(tick);
    }
  } catch {
    // refillRound catches its fetch failures; nothing else is expected to throw. Should
    // anything, the takers still fetch for themselves when the buffer is empty.
  }
}

/**
 * One round, holding the client only while it runs (so that the wait between rounds does not
 * keep it alive); the tick until the next round, or undefined when the refiller must end.
 */
async function round(
  client: WeakRef<Client>,
  woken: boolean,
  state: RefillState,
): Promise<number | undefined> {
  const c = client.deref();
  if (c === undefined || !(await c.refillRound(woken, state))) {
    return undefined;
  }
  return c.refillTickMs();
}

/** A rejected attempt as a {@link CallFailure} (anything else thrown is an internal failure). */
function asFailure(e: unknown): CallFailure {
  if (typeof e === "object" && e !== null && typeof (e as CallFailure).code === "number") {
    return e as CallFailure;
  }
  const details = e instanceof Error ? e.message : String(e);
  return { code: status.INTERNAL, message: `Internal: ${details}`, details, retryAfterMs: undefined };
}

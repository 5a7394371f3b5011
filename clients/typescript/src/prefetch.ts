/**
 * The prefetch buffer: IDs fetched ahead in batches, handed out one at a time from memory, never
 * older than `maxAge`, and sized from the rate the application takes them at.
 *
 * @module
 */

/**
 * How late the refiller may run after it was woken on a busy machine (an event loop busy with
 * other work delays a timer or an I/O callback by several milliseconds now and then): the
 * low-water mark covers it.
 */
const WAKE_SLACK_MS = 25;

/** Prefetch settings, checked (see {@link PrefetchOptions} for their meaning). */
export interface PrefetchSettings {
  readonly maxAgeMs: number;
  readonly maxBuffer: number;
  readonly minFetch: number;
}

/** IDs of one `NextIds` answer. */
interface Batch {
  readonly ids: bigint[];
  next: number;
  /**
   * When the request was sent (`performance.now()` ms): every ID in it was issued after this,
   * so `now - born` is never less than an ID's real age.
   */
  readonly born: number;
}

/** The buffer's queue of batches and its sizing marks. The client owns one when prefetching. */
export class Buffer {
  readonly settings: PrefetchSettings;
  /** Oldest batch first. */
  private batches: Batch[] = [];
  /** IDs buffered, over all batches. */
  private count = 0;
  /** Refill below this many IDs. */
  private lowWater: number;
  /** Fill up to this many. */
  private target: number;
  /** Set by a taker that saw the buffer below the low-water mark; cleared by the refiller. */
  private refillWanted = true;
  /** IDs handed out from the buffer, for the rate estimate. */
  taken = 0;

  constructor(settings: PrefetchSettings) {
    this.settings = settings;
    const initial = Math.min(settings.minFetch, settings.maxBuffer);
    this.lowWater = Math.floor(initial / 2);
    this.target = initial;
  }

  /** IDs buffered now (some may be stale until the next take or eviction). */
  get length(): number {
    return this.count;
  }

  /**
   * The next ID not older than `maxAge` at `now` (undefined if none), and how many stale IDs
   * were dropped on the way. `wake` is true when the buffer is now below its low-water mark and
   * no refill was asked for since the refiller's last round: the caller wakes the refiller.
   */
  pop(now: number): { id: bigint | undefined; discarded: number; wake: boolean } {
    let discarded = 0;
    let id: bigint | undefined;
    for (;;) {
      const front = this.batches[0];
      if (front === undefined) {
        break;
      }
      if (now - front.born > this.settings.maxAgeMs) {
        const left = front.ids.length - front.next;
        discarded += left;
        this.count -= left;
        this.batches.shift();
        continue;
      }
      id = front.ids[front.next]!;
      front.next += 1;
      if (front.next === front.ids.length) {
        this.batches.shift();
      }
      this.count -= 1;
      this.taken += 1;
      break;
    }
    let wake = false;
    if (this.count < this.lowWater && !this.refillWanted) {
      this.refillWanted = true;
      wake = true;
    }
    return { id, discarded, wake };
  }

  /** Adds a fetched batch, sent at `born`. */
  push(ids: bigint[], born: number): void {
    if (ids.length === 0) {
      return;
    }
    this.count += ids.length;
    this.batches.push({ ids, next: 0, born });
  }

  /** Drops every buffered ID (at close); how many. */
  clear(): number {
    const dropped = this.count;
    this.batches = [];
    this.count = 0;
    return dropped;
  }

  /**
   * Drops what is stale at `now` (the refiller does this on its ticks, so that a buffer nobody
   * takes from does not hold old IDs); how many.
   */
  evictStale(now: number): number {
    let discarded = 0;
    for (;;) {
      const front = this.batches[0];
      if (front === undefined || now - front.born <= this.settings.maxAgeMs) {
        break;
      }
      const left = front.ids.length - front.next;
      discarded += left;
      this.count -= left;
      this.batches.shift();
    }
    return discarded;
  }

  /** The refiller starts a round: takers may ask again. */
  refillStarted(): void {
    this.refillWanted = false;
  }

  /** How many IDs to ask for now (0: none), at most `maxPerCall`. */
  wanted(maxPerCall: number): number {
    if (this.count >= this.target) {
      return 0;
    }
    const missing = this.target - this.count;
    return Math.min(Math.max(missing, Math.min(this.settings.minFetch, maxPerCall)), maxPerCall);
  }

  /**
   * Sizes the buffer from the rate IDs are taken at (IDs per second) and how long a fetch takes:
   * the low-water mark covers the IDs taken while a refill is on its way (twice the fetch time,
   * plus {@link WAKE_SLACK_MS} for the refiller to run), the target one fetch more; both capped
   * so that what is bought is used within half of `maxAge` (and by `maxBuffer`).
   */
  resize(ratePerSec: number, fetchMs: number, maxPerCall: number): void {
    const s = this.settings;
    const cover = ((fetchMs * 2 + WAKE_SLACK_MS) / 1000) * ratePerSec;
    const usable = (ratePerSec * s.maxAgeMs) / 1000 / 2;
    const min = s.minFetch;
    const low = Math.max(Math.min(cover, usable), min / 2);
    const target = Math.max(
      Math.min(low + Math.min(maxPerCall, Math.max(cover, min)), Math.max(usable, min), s.maxBuffer),
      1,
    );
    this.target = Math.floor(target);
    this.lowWater = Math.floor(Math.max(Math.min(low, target - 1), 0));
  }

  /** The low-water mark and the target, for tests. */
  marks(): [number, number] {
    return [this.lowWater, this.target];
  }
}

/**
 * The client's options: what `new Client({...})` takes, their defaults, and the checks that turn
 * a wrong value into a {@link ConfigError} naming it and the valid range.
 *
 * @module
 */

import { ConfigError } from "./errors.js";
import type { Backoff } from "./endpoint.js";
import type { PrefetchSettings } from "./prefetch.js";
import type { TlsOptions } from "./tls.js";

/** What the client saw, for an application's own metrics or logs ({@link ClientOptions.onEvent}). */
export type ClientEvent =
  /** A node answered `ids` IDs in `elapsedMs`. */
  | { readonly type: "fetched"; readonly endpoint: string; readonly ids: number; readonly elapsedMs: number }
  /** A node failed; it is skipped for `retryInMs`. */
  | {
      readonly type: "failover";
      readonly endpoint: string;
      readonly error: string;
      readonly retryInMs: number;
    }
  /** A node that had failed answered again. */
  | { readonly type: "endpointBack"; readonly endpoint: string }
  /** Prefetched IDs were dropped: older than `maxAge`, or buffered at close. */
  | { readonly type: "discarded"; readonly ids: number };

/** `new Client(options)`. Only `endpoints` is required. */
export interface ClientOptions {
  /** The nodes' gRPC addresses: `HOST:PORT`, or `http://` / `https://` URLs. */
  readonly endpoints: readonly string[];
  /**
   * Opt-in prefetch: `true` keeps a buffer of IDs fetched ahead (at most 262,144), a number `N`
   * keeps at most `N`; `false` or `0` (the default) asks a node on every call.
   */
  readonly prefetch?: boolean | number;
  /** Prefetched IDs fetched longer ago than this many milliseconds are discarded (default 2000). */
  readonly maxAge?: number;
  /** The deadline of one attempt at one node, in milliseconds (default 2000): also the gRPC deadline. */
  readonly deadlineMs?: number;
  /** How long a call keeps trying the nodes before it fails with `Unavailable` (default 30,000 ms). */
  readonly giveUpAfterMs?: number;
  /** TLS, and mutual TLS with a client certificate (see `tlsFromFiles`). */
  readonly tls?: TlsOptions;
  /** The fewest IDs one prefetch refill asks for, 1..=4096 (default 256). */
  readonly minFetch?: number;
  /** The most IDs asked of a node in one call, 1..=100,000 (default 4096; the node's `--max-batch` must allow it). */
  readonly maxIdsPerCall?: number;
  /** The pause before a failed node is asked again: doubling from `initialMs` (50) up to `maxMs` (5000). */
  readonly backoff?: { readonly initialMs?: number; readonly maxMs?: number };
  /** Called for every {@link ClientEvent}, on the event loop: keep it quick. */
  readonly onEvent?: (event: ClientEvent) => void;
}

/** The options, checked, with the defaults filled in. */
export interface Settings {
  readonly endpoints: readonly string[];
  readonly prefetch: PrefetchSettings | undefined;
  readonly deadlineMs: number;
  readonly giveUpAfterMs: number;
  readonly tls: TlsOptions | undefined;
  readonly maxIdsPerCall: number;
  readonly backoff: Backoff;
  readonly onEvent: ((event: ClientEvent) => void) | undefined;
}

const KNOWN = new Set([
  "endpoints",
  "prefetch",
  "maxAge",
  "deadlineMs",
  "giveUpAfterMs",
  "tls",
  "minFetch",
  "maxIdsPerCall",
  "backoff",
  "onEvent",
]);

/** `value` if it is an integer in `min..=max`, else a ConfigError naming the option. */
function integer(name: string, value: unknown, min: number, max: number, fallback: number): number {
  if (value === undefined) {
    return fallback;
  }
  if (typeof value !== "number" || !Number.isInteger(value) || value < min || value > max) {
    throw new ConfigError(`invalid ${name} ${String(value)}: expected an integer in ${min}..=${max}`);
  }
  return value;
}

/** Checks `options` and fills in the defaults. */
export function settings(options: ClientOptions): Settings {
  if (typeof options !== "object" || options === null) {
    throw new ConfigError("new Client(options): options must be an object with endpoints");
  }
  for (const key of Object.keys(options)) {
    if (!KNOWN.has(key)) {
      throw new ConfigError(
        `unknown option ${JSON.stringify(key)}: expected one of ${[...KNOWN].join(", ")}`,
      );
    }
  }
  const { endpoints } = options;
  if (!Array.isArray(endpoints) || endpoints.length === 0) {
    throw new ConfigError("no endpoint: give at least one HOST:PORT in endpoints");
  }
  for (const e of endpoints) {
    if (typeof e !== "string") {
      throw new ConfigError(`invalid endpoint ${String(e)}: expected a string HOST:PORT`);
    }
  }
  const maxAgeMs = integer("maxAge", options.maxAge, 1, 3_600_000, 2000);
  const minFetch = integer("minFetch", options.minFetch, 1, 4096, 256);
  let prefetch: PrefetchSettings | undefined;
  const p = options.prefetch;
  if (p === true) {
    prefetch = { maxAgeMs, maxBuffer: 262_144, minFetch };
  } else if (p !== undefined && p !== false) {
    const maxBuffer = integer("prefetch", p, 0, 10_000_000, 0);
    prefetch = maxBuffer === 0 ? undefined : { maxAgeMs, maxBuffer, minFetch };
  }
  const initialMs = integer("backoff.initialMs", options.backoff?.initialMs, 1, 60_000, 50);
  const maxMs = integer(
    "backoff.maxMs",
    options.backoff?.maxMs,
    initialMs,
    3_600_000,
    Math.max(5000, initialMs),
  );
  if (options.onEvent !== undefined && typeof options.onEvent !== "function") {
    throw new ConfigError("invalid onEvent: expected a function");
  }
  if (options.tls !== undefined && (typeof options.tls !== "object" || options.tls === null)) {
    throw new ConfigError("invalid tls: expected { ca, cert?, key? } (see tlsFromFiles)");
  }
  return {
    endpoints,
    prefetch,
    deadlineMs: integer("deadlineMs", options.deadlineMs, 1, 3_600_000, 2000),
    giveUpAfterMs: integer("giveUpAfterMs", options.giveUpAfterMs, 1, 86_400_000, 30_000),
    tls: options.tls,
    maxIdsPerCall: integer("maxIdsPerCall", options.maxIdsPerCall, 1, 100_000, 4096),
    backoff: { initialMs, maxMs },
    onEvent: options.onEvent,
  };
}

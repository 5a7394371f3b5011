/**
 * One node the client can ask: its address, checked, and whether (and until when) it is
 * skipped after a failure.
 *
 * @module
 */

import { ConfigError } from "./errors.js";

/** The pause before a failed node is asked again: doubling from `initialMs` up to `maxMs`. */
export interface Backoff {
  readonly initialMs: number;
  readonly maxMs: number;
}

/** The pause after `failures` failures in a row. */
export function backoffAfter(backoff: Backoff, failures: number): number {
  const doublings = Math.min(Math.max(failures - 1, 0), 20);
  return Math.min(backoff.initialMs * 2 ** doublings, backoff.maxMs);
}

/** A node's address, split: what gRPC dials (`host:port`) and the host for TLS. */
export interface Address {
  /** `HOST:PORT` as gRPC's dns resolver takes it (IPv6 in brackets). */
  readonly target: string;
  /** The host alone (no brackets): the name the server's certificate must carry. */
  readonly host: string;
}

/**
 * `HOST:PORT`, or an `http://` / `https://` URL with no path, checked. `tls` says whether the
 * client has TLS settings: an `https://` endpoint needs them, an `http://` one refuses them.
 */
export function parseEndpoint(endpoint: string, tls: boolean): Address {
  const bad = (why: string): ConfigError =>
    new ConfigError(
      `invalid endpoint ${JSON.stringify(endpoint)}: ${why} (expected HOST:PORT, e.g. 127.0.0.1:50051)`,
    );
  let authority = endpoint.trim();
  const scheme = /^([a-zA-Z][a-zA-Z0-9+.-]*):\/\//.exec(authority);
  if (scheme) {
    const name = scheme[1]!.toLowerCase();
    if (name !== "http" && name !== "https") {
      throw bad(`unknown scheme ${JSON.stringify(scheme[1])}`);
    }
    if (name === "https" && !tls) {
      throw bad("an https:// endpoint needs TLS settings (the CA to trust)");
    }
    if (name === "http" && tls) {
      throw bad("an http:// endpoint with TLS settings");
    }
    authority = authority.slice(scheme[0].length).replace(/\/+$/, "");
  }
  if (authority.includes("/")) {
    throw bad("a path is not allowed");
  }
  const colon = authority.lastIndexOf(":");
  if (colon < 0) {
    throw bad("no port");
  }
  let host = authority.slice(0, colon);
  const port = authority.slice(colon + 1);
  if (host === "") {
    throw bad("no host");
  }
  if (host.startsWith("[") && host.endsWith("]")) {
    host = host.slice(1, -1);
  } else if (host.includes(":")) {
    throw bad("an IPv6 address must be in brackets, e.g. [::1]:50051");
  }
  if (!/^[0-9]{1,5}$/.test(port) || Number(port) < 1 || Number(port) > 65535) {
    throw bad(`port ${JSON.stringify(port)} is not in 1..=65535`);
  }
  return { target: authority, host };
}

/** A node's health: skipped until `downUntil` after a failure. */
export class Health {
  /** Skipped until then (`performance.now()` milliseconds); 0: usable. */
  private downUntil = 0;
  /** Failures in a row, for the backoff. */
  private failures = 0;
  /** The last failure, for the error when every node failed. */
  lastError: string | undefined;

  /** When the node may be asked again, or undefined when it may be now. */
  downAt(now: number): number | undefined {
    return this.downUntil > now ? this.downUntil : undefined;
  }

  /** A success: usable again, backoff reset. True when it had been failing. */
  succeeded(): boolean {
    const wasDown = this.failures > 0;
    this.failures = 0;
    this.downUntil = 0;
    this.lastError = undefined;
    return wasDown;
  }

  /**
   * A failure: skipped for the backoff, or for as long as the node asked (`retry-after`, at
   * most the backoff's maximum), whichever is longer. Returns the pause in milliseconds.
   */
  failed(backoff: Backoff, retryAfterMs: number | undefined, error: string, now: number): number {
    this.failures += 1;
    const pause = Math.max(backoffAfter(backoff, this.failures), Math.min(retryAfterMs ?? 0, backoff.maxMs));
    this.downUntil = now + pause;
    this.lastError = error;
    return pause;
  }
}

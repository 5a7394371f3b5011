/**
 * Typed errors: one class per way a call can fail, all subclasses of {@link SnowflakeError}, so
 * that `instanceof Unavailable` (or `error.code === "unavailable"`) tells what to do.
 *
 * @module
 */

/** What kind of failure, as a string (stable, for logs and `switch`). */
export type ErrorCode = "config" | "invalid_argument" | "unavailable" | "closed";

/** The base class of every error the client throws. */
export abstract class SnowflakeError extends Error {
  /** What kind of failure. */
  abstract readonly code: ErrorCode;
}

/**
 * A setting is wrong: an endpoint, a TLS file, an option out of range. Thrown by the
 * constructor; never retried.
 */
export class ConfigError extends SnowflakeError {
  readonly code = "config" as const;
  override readonly name = "ConfigError";
}

/**
 * The request is wrong: a count or a time out of range, checked by the client, or refused by
 * the service itself (gRPC `INVALID_ARGUMENT`). No node would serve it, so it is not retried.
 */
export class InvalidArgument extends SnowflakeError {
  readonly code = "invalid_argument" as const;
  override readonly name = "InvalidArgument";
  /** True when a node refused it (the message is the node's), false when the client did. */
  readonly fromService: boolean;

  constructor(message: string, fromService: boolean) {
    super(message);
    this.fromService = fromService;
  }
}

/**
 * No node could serve within `giveUpAfterMs`. The message names each node's last failure;
 * {@link Unavailable.failures} holds them one by one.
 */
export class Unavailable extends SnowflakeError {
  readonly code = "unavailable" as const;
  override readonly name = "Unavailable";
  /** How long the call tried, in milliseconds. */
  readonly waitedMs: number;
  /** Each node's last failure (`"not tried"` for a node the call never reached). */
  readonly failures: ReadonlyArray<{ readonly endpoint: string; readonly error: string }>;

  constructor(
    waitedMs: number,
    failures: ReadonlyArray<{ readonly endpoint: string; readonly error: string }>,
  ) {
    const details = failures.map((f) => `${f.endpoint}: ${f.error}`).join("; ");
    super(`no endpoint could serve within ${waitedMs} ms: ${details}`);
    this.waitedMs = waitedMs;
    this.failures = failures;
  }
}

/** {@link Client.close} was called (before or during the call). */
export class Closed extends SnowflakeError {
  readonly code = "closed" as const;
  override readonly name = "Closed";

  constructor() {
    super("the client is closed");
  }
}

/**
 * The gRPC wire: the service definition loaded from the `.proto` shipped in the package (int64
 * fields as decimal strings, never a `number`), one channel per node, and unary calls with a
 * deadline that can be cancelled.
 *
 * @module
 */

import { fileURLToPath } from "node:url";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";

/** The directory the `.proto` files are loaded from (`proto/` of this package). */
export const PROTO_ROOT = fileURLToPath(new URL("../../proto/", import.meta.url));
/** The service's `.proto`, relative to {@link PROTO_ROOT}. */
export const PROTO_FILE = "snowflake/v1/snowflake.proto";

/** `NextIdResponse`, as loaded (int64 as a decimal string). */
export interface RawNextId {
  readonly id: string;
}
/** `NextIdsResponse`, as loaded. */
export interface RawNextIds {
  readonly ids: readonly string[];
}
/** `Layout`, as loaded. */
export interface RawLayout {
  readonly name: string;
  readonly timestamp_bits: number;
  readonly datacenter_bits: number;
  readonly worker_bits: number;
  readonly sequence_bits: number;
  readonly epoch_ms: string;
  readonly max_id: string;
}
/** `GetInfoResponse`, as loaded (`layout` is null from a node that predates layouts). */
export interface RawInfo {
  readonly datacenter_id: number;
  readonly worker_id: number;
  readonly epoch_ms: string;
  readonly timestamp_ms: string;
  readonly max_batch: string;
  readonly ready: boolean;
  readonly layout?: RawLayout | null;
}
/** `RangeResponse`, as loaded. */
export interface RawRange {
  readonly min_id: string;
  readonly max_id: string;
}

/** The service's methods this client calls, and what each answers. */
export interface Methods {
  NextId: { request: Record<string, never>; response: RawNextId };
  NextIds: { request: { count: number }; response: RawNextIds };
  GetInfo: { request: Record<string, never>; response: RawInfo };
  Range: { request: { from_ms: string; to_ms: string }; response: RawRange };
}

/** How an attempt failed: a gRPC status, with the node's `retry-after` when it sent one. */
export interface CallFailure {
  /** The gRPC status code (`grpc.status`). */
  readonly code: grpc.status;
  /** The status name and message, as one line. */
  readonly message: string;
  /** The node's message alone. */
  readonly details: string;
  /** The node's `retry-after`, in milliseconds. */
  readonly retryAfterMs: number | undefined;
}

let definition: grpc.ServiceDefinition | undefined;

/** The `snowflake.v1.Snowflake` service, loaded once per process. */
function service(): grpc.ServiceDefinition {
  if (definition === undefined) {
    const loaded = protoLoader.loadSync(PROTO_FILE, {
      includeDirs: [PROTO_ROOT],
      keepCase: true,
      // int64 as decimal strings: converted with BigInt, never through a `number`.
      longs: String,
      enums: String,
      defaults: true,
      oneofs: true,
    });
    definition = loaded["snowflake.v1.Snowflake"] as grpc.ServiceDefinition;
  }
  return definition;
}

/**
 * IDs as a node sent them (decimal strings), as `bigint`s; or why they are not valid IDs (a
 * node that sends a negative ID, one above its layout's `maxId`, or the wrong number of them,
 * is treated as failing).
 */
export function toIds(
  texts: readonly string[],
  wanted: number,
  maxId: bigint,
): bigint[] | { readonly invalid: string } {
  if (texts.length !== wanted) {
    return { invalid: `asked for ${wanted} IDs, got ${texts.length}` };
  }
  const ids = new Array<bigint>(texts.length);
  for (let i = 0; i < texts.length; i++) {
    const id = BigInt(texts[i]!);
    if (id < 0n || id > maxId) {
      return { invalid: `answered an invalid ID ${id}: expected 0..=${maxId}` };
    }
    ids[i] = id;
  }
  return ids;
}

/** The service definition (for tests: the same deserializers the client uses). */
export function serviceDefinition(): grpc.ServiceDefinition {
  return service();
}

/** A status code's name (`UNAVAILABLE` → `Unavailable`, as the Rust client writes it). */
export function codeName(code: number): string {
  const name = grpc.status[code];
  if (name === undefined) {
    return `status ${code}`;
  }
  return name
    .toLowerCase()
    .split("_")
    .map((word) => word.charAt(0).toUpperCase() + word.slice(1))
    .join("");
}

/** The `retry-after` of a failed call's metadata (whole seconds, at most an hour), in ms. */
export function retryAfterMs(metadata: grpc.Metadata | undefined): number | undefined {
  const value = metadata?.get("retry-after")[0];
  if (typeof value !== "string" || !/^\s*[0-9]+\s*$/.test(value)) {
    return undefined;
  }
  return Math.min(Number(value.trim()), 3600) * 1000;
}

/** A failed call as one line and its retry hint. */
function failure(error: grpc.ServiceError): CallFailure {
  const name = codeName(error.code);
  // grpc-js appends an empty "Resolution note: " to connection failures: noise in a message.
  const details = (error.details ?? "").replace(/\.? Resolution note: ?$/, "");
  return {
    code: error.code,
    message: details === "" ? name : `${name}: ${details}`,
    details,
    retryAfterMs: retryAfterMs(error.metadata),
  };
}

/** A call in flight: its answer, and a way to cancel it (at close). */
export interface Pending<T> {
  readonly answer: Promise<T>;
  cancel(): void;
}

/** One node's gRPC channel (it connects on first use, and reconnects after failures). */
export class Channel {
  private readonly client: grpc.Client;

  constructor(target: string, creds: grpc.ChannelCredentials, serverName: string | undefined) {
    const options: grpc.ChannelOptions = {
      // A half-open connection to a frozen or vanished node is noticed.
      "grpc.keepalive_time_ms": 10_000,
      "grpc.keepalive_timeout_ms": 5_000,
      // A node that comes back is dialled again within a second (gRPC's default backs off to
      // two minutes); the client's own backoff decides when it is asked.
      "grpc.initial_reconnect_backoff_ms": 50,
      "grpc.max_reconnect_backoff_ms": 1_000,
      // Every attempt is the client's: no hidden retries, no proxy from the environment.
      "grpc.enable_retries": 0,
      "grpc.enable_http_proxy": 0,
      // Up to 1,000,000 IDs in one answer (22 MB): above gRPC's 4 MiB default.
      "grpc.max_receive_message_length": 64 * 1024 * 1024,
    };
    if (serverName !== undefined) {
      options["grpc.ssl_target_name_override"] = serverName;
      options["grpc.default_authority"] = serverName;
    }
    this.client = new grpc.Client(target, creds, options);
  }

  /**
   * Calls `method` with a gRPC deadline of `deadlineMs`. The answer rejects with a
   * {@link CallFailure}; it always settles, by the deadline at the latest (a timer of ours
   * cancels the call if gRPC's deadline did not end it).
   */
  call<M extends keyof Methods>(
    method: M,
    request: Methods[M]["request"],
    deadlineMs: number,
  ): Pending<Methods[M]["response"]> {
    const def = service()[method];
    if (def === undefined) {
      const error: CallFailure = {
        code: grpc.status.UNIMPLEMENTED,
        message: `Unimplemented: the service definition this client was built with has no ${method}`,
        details: `no ${method} in this client's service definition`,
        retryAfterMs: undefined,
      };
      return { answer: Promise.reject(error), cancel: () => {} };
    }
    let call: grpc.ClientUnaryCall | undefined;
    let guard: NodeJS.Timeout | undefined;
    const answer = new Promise<Methods[M]["response"]>((resolve, reject) => {
      call = this.client.makeUnaryRequest(
        def.path,
        def.requestSerialize,
        def.responseDeserialize as (bytes: Buffer) => Methods[M]["response"],
        request,
        new grpc.Metadata(),
        { deadline: Date.now() + deadlineMs },
        (error, response) => {
          clearTimeout(guard);
          if (error) {
            reject(failure(error));
          } else if (response === undefined) {
            reject({
              code: grpc.status.INTERNAL,
              message: "Internal: an empty answer",
              details: "an empty answer",
              retryAfterMs: undefined,
            } satisfies CallFailure);
          } else {
            resolve(response);
          }
        },
      );
      // gRPC enforces the deadline; this is the belt to its braces, so that no call can hang.
      guard = setTimeout(() => call?.cancel(), deadlineMs + 250);
    });
    return { answer, cancel: () => call?.cancel() };
  }

  /** Closes the channel (calls still in flight are cancelled by the client first). */
  close(): void {
    this.client.close();
  }
}

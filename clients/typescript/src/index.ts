/**
 * `snowflake-client`: IDs from the Snowflake ID service as `bigint`, over gRPC, from a list of
 * nodes, with a deadline on every attempt, health-aware failover, a time after which a call
 * gives up, and opt-in prefetch.
 *
 * ```ts
 * import { Client } from "snowflake-client";
 *
 * const client = new Client({ endpoints: ["10.0.0.1:50051", "10.0.0.2:50051"], prefetch: true });
 * const id = await client.nextId(); // a bigint, e.g. 1859245234715037696n
 * client.close();
 * ```
 *
 * @module
 */

export { Client, MAX_IDS_PER_REQUEST } from "./client.js";
export type { IdRange, NodeInfo, Stats, Time } from "./client.js";
export { Closed, ConfigError, InvalidArgument, SnowflakeError, Unavailable } from "./errors.js";
export type { ErrorCode } from "./errors.js";
export { Layout, TWITTER_EPOCH_MS } from "./layout.js";
export type { DecodedId, LayoutFields } from "./layout.js";
export type { ClientEvent, ClientOptions } from "./options.js";
export { tlsFromFiles } from "./tls.js";
export type { Pem, TlsOptions } from "./tls.js";

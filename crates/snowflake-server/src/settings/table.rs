//! The settings of `snowflake serve`, one constant each, and [`SETTINGS`], their order in
//! `--help`, the config file's key list and docs/configuration.md.

use super::base::{BASE, number};
use super::fleet::*;
use super::{DefaultValue, Group, Kind, Setting};

/// `--config`.
pub const CONFIG: Setting = Setting {
    key: "config",
    flag: Some("config"),
    env: Some("SNOWFLAKE_CONFIG"),
    in_file: false,
    value_name: "FILE",
    kind: Kind::Path,
    help: "TOML file with any of the settings below, keys spelled with underscores (e.g. \
           `http_addr = \"127.0.0.1:8080\"`, `worker_id = 3`); flags and environment variables \
           override it.",
    ..BASE
};

/// `--layout` (a global flag).
pub const LAYOUT: Setting = Setting {
    key: "layout",
    flag: Some("layout"),
    env: Some("SNOWFLAKE_LAYOUT"),
    value_name: "NAME",
    default: DefaultValue::Value("twitter"),
    group: Group::Layout,
    help: "The ID layout: twitter (41 | 5 | 5 | 12 bits, the default), js-safe (41 | 2 | 4 | 6: \
           every ID at most 2^53 - 1, which a JavaScript number holds), or custom:T,D,W,S \
           (timestamp, datacenter, worker and sequence widths; T >= 30, S >= 1, D + W >= 1, \
           T + D + W + S <= 63). `serve` records it in its state directory and fleet, and \
           refuses to start under another one than they record.",
    global: true,
    ..BASE
};

/// `--epoch-ms` (a global flag).
pub const EPOCH_MS: Setting = Setting {
    key: "epoch_ms",
    flag: Some("epoch-ms"),
    env: Some("SNOWFLAKE_EPOCH_MS"),
    value_name: "MS",
    kind: Kind::LayoutField,
    default: DefaultValue::Computed("Twitter's, 1288834974657"),
    group: Group::Layout,
    help: "Custom epoch in Unix milliseconds; not in the future.",
    global: true,
    ..BASE
};

/// `--http-addr`.
pub const HTTP_ADDR: Setting = Setting {
    key: "http_addr",
    flag: Some("http-addr"),
    env: Some("SNOWFLAKE_HTTP_ADDR"),
    value_name: "ADDR",
    default: DefaultValue::Value("127.0.0.1:8080"),
    group: Group::Listeners,
    help: "HTTP/JSON listen address, or `off`.",
    ..BASE
};

/// `--grpc-addr`.
pub const GRPC_ADDR: Setting = Setting {
    key: "grpc_addr",
    flag: Some("grpc-addr"),
    env: Some("SNOWFLAKE_GRPC_ADDR"),
    value_name: "ADDR",
    default: DefaultValue::Value("127.0.0.1:50051"),
    group: Group::Listeners,
    help: "gRPC listen address, or `off`.",
    ..BASE
};

/// `--thrift-addr`.
pub const THRIFT_ADDR: Setting = Setting {
    key: "thrift_addr",
    flag: Some("thrift-addr"),
    env: Some("SNOWFLAKE_THRIFT_ADDR"),
    value_name: "ADDR",
    default: DefaultValue::Value("127.0.0.1:7609"),
    group: Group::Listeners,
    help: "Thrift listen address (framed transport, binary protocol, the 2010 IDL), or `off`.",
    ..BASE
};

/// `--resp-addr`.
pub const RESP_ADDR: Setting = Setting {
    key: "resp_addr",
    flag: Some("resp-addr"),
    env: Some("SNOWFLAKE_RESP_ADDR"),
    value_name: "ADDR",
    default: DefaultValue::Value("off"),
    group: Group::Listeners,
    help: "Redis protocol (RESP2/RESP3) listen address, or `off`: `INCR key` returns a fresh ID, \
           so Redis clients work unchanged.",
    ..BASE
};

/// `--admin-addr`.
pub const ADMIN_ADDR: Setting = Setting {
    key: "admin_addr",
    flag: Some("admin-addr"),
    env: Some("SNOWFLAKE_ADMIN_ADDR"),
    value_name: "ADDR",
    default: DefaultValue::Value("off"),
    group: Group::Listeners,
    help: "Health, readiness, metrics and the status page on a listener of their own that never \
           asks for client certificates (for probes and scrapers when the API requires mTLS), \
           or `off`. They stay on the HTTP listener too.",
    ..BASE
};

/// `--admin-status-page`.
pub const ADMIN_STATUS_PAGE: Setting = Setting {
    key: "admin_status_page",
    flag: Some("admin-status-page"),
    env: Some("SNOWFLAKE_ADMIN_STATUS_PAGE"),
    value_name: "on|off",
    default: DefaultValue::Value("on"),
    group: Group::Listeners,
    help: "Whether the admin listener serves the status page (`/`, `/status.js`) and \
           `/v1/status`, which show the fleet's holders, their hosts, pids and addresses: `on` \
           or `off`. Off, they answer 404 there; probes and metrics stay, and the HTTP listener \
           keeps its page.",
    ..BASE
};

/// `--thrift-max-frame-bytes`.
pub const THRIFT_MAX_FRAME_BYTES: Setting = Setting {
    key: "thrift_max_frame_bytes",
    flag: Some("thrift-max-frame-bytes"),
    env: Some("SNOWFLAKE_THRIFT_MAX_FRAME_BYTES"),
    value_name: "BYTES",
    kind: number(64, 16_384_000, "bytes"),
    default: DefaultValue::Value("65536"),
    group: Group::Limits,
    help: "Largest Thrift frame accepted; a connection sending a larger (or garbage) length is \
           closed.",
    ..BASE
};

/// `--resp-max-bulk-bytes`.
pub const RESP_MAX_BULK_BYTES: Setting = Setting {
    key: "resp_max_bulk_bytes",
    flag: Some("resp-max-bulk-bytes"),
    env: Some("SNOWFLAKE_RESP_MAX_BULK_BYTES"),
    value_name: "BYTES",
    kind: number(64, 16_777_216, "bytes"),
    default: DefaultValue::Value("4096"),
    group: Group::Limits,
    help: "Most bytes of arguments in one RESP command; a request claiming more is refused and \
           its connection closed, without allocating it.",
    ..BASE
};

/// `--resp-max-args`.
pub const RESP_MAX_ARGS: Setting = Setting {
    key: "resp_max_args",
    flag: Some("resp-max-args"),
    env: Some("SNOWFLAKE_RESP_MAX_ARGS"),
    value_name: "N",
    kind: number(2, 65_536, ""),
    default: DefaultValue::Value("64"),
    group: Group::Limits,
    help: "Most arguments in one RESP command.",
    ..BASE
};

/// `--resp-max-inline-bytes`.
pub const RESP_MAX_INLINE_BYTES: Setting = Setting {
    key: "resp_max_inline_bytes",
    flag: Some("resp-max-inline-bytes"),
    env: Some("SNOWFLAKE_RESP_MAX_INLINE_BYTES"),
    value_name: "BYTES",
    kind: number(64, 16_777_216, "bytes"),
    default: DefaultValue::Value("4096"),
    group: Group::Limits,
    help: "Longest RESP inline command (and header line).",
    ..BASE
};

/// `--max-batch`.
pub const MAX_BATCH: Setting = Setting {
    key: "max_batch",
    flag: Some("max-batch"),
    env: Some("SNOWFLAKE_MAX_BATCH"),
    value_name: "N",
    kind: number(1, crate::config::MAX_BATCH_CEILING, ""),
    default: DefaultValue::Computed(
        "100000, or 250 ms of the layout's rate when that is less: 16000 under js-safe",
    ),
    group: Group::Limits,
    help: "Largest number of IDs one request may ask for. A count above one millisecond's worth \
           (4096) is issued three quarters of a millisecond's sequence space at a time, within \
           --request-timeout-ms; for more IDs in one call, gRPC StreamIds.",
    ..BASE
};

/// `--grpc-max-concurrent-streams`.
pub const GRPC_MAX_CONCURRENT_STREAMS: Setting = Setting {
    key: "grpc_max_concurrent_streams",
    flag: Some("grpc-max-concurrent-streams"),
    env: Some("SNOWFLAKE_GRPC_MAX_CONCURRENT_STREAMS"),
    value_name: "N",
    kind: number(1, 1024, ""),
    default: DefaultValue::Value("100"),
    group: Group::Limits,
    help: "Most concurrent gRPC calls (HTTP/2 streams) on one connection; a client opening more \
           gets REFUSED_STREAM for each one over.",
    ..BASE
};

/// `--max-connections`.
pub const MAX_CONNECTIONS: Setting = Setting {
    key: "max_connections",
    flag: Some("max-connections"),
    env: Some("SNOWFLAKE_MAX_CONNECTIONS"),
    value_name: "N",
    kind: number(1, 1_000_000, ""),
    default: DefaultValue::Value("4096"),
    group: Group::Limits,
    help: "Most concurrent connections per listener; more are refused.",
    ..BASE
};

/// `--request-timeout-ms`.
pub const REQUEST_TIMEOUT_MS: Setting = Setting {
    key: "request_timeout_ms",
    flag: Some("request-timeout-ms"),
    env: Some("SNOWFLAKE_REQUEST_TIMEOUT_MS"),
    value_name: "MS",
    kind: number(1, 3_600_000, "ms"),
    default: DefaultValue::Value("10000"),
    group: Group::Limits,
    help: "Longest time one request may wait (for a lagging clock to be waited out, or for the \
           high-water mark to be persisted) before it is refused.",
    ..BASE
};

/// `--idle-timeout-ms`.
pub const IDLE_TIMEOUT_MS: Setting = Setting {
    key: "idle_timeout_ms",
    flag: Some("idle-timeout-ms"),
    env: Some("SNOWFLAKE_IDLE_TIMEOUT_MS"),
    value_name: "MS",
    kind: number(1, 3_600_000, "ms"),
    default: DefaultValue::Value("60000"),
    group: Group::Limits,
    help: "Longest time a connection may make no progress: to send a whole request from its \
           first byte (HTTP headers, a Thrift frame, a RESP command, a gRPC message), between \
           requests (HTTP keep-alive, Thrift, RESP, gRPC with no call open), or to take any of a \
           reply (every door's writes, gRPC's flow-control window); a TLS handshake gets at most \
           10 s of it.",
    ..BASE
};

/// `--shutdown-timeout-ms`.
pub const SHUTDOWN_TIMEOUT_MS: Setting = Setting {
    key: "shutdown_timeout_ms",
    flag: Some("shutdown-timeout-ms"),
    env: Some("SNOWFLAKE_SHUTDOWN_TIMEOUT_MS"),
    value_name: "MS",
    kind: number(0, 3_600_000, "ms"),
    default: DefaultValue::Value("10000"),
    group: Group::Limits,
    help: "On SIGTERM/SIGINT, how long in-flight requests may take to finish.",
    ..BASE
};

/// `--worker-threads`.
pub const WORKER_THREADS: Setting = Setting {
    key: "worker_threads",
    flag: Some("worker-threads"),
    env: Some("SNOWFLAKE_WORKER_THREADS"),
    value_name: "N",
    kind: number(1, 1024, ""),
    default: DefaultValue::Computed("the number of CPUs"),
    group: Group::Limits,
    help: "Threads serving requests. On a machine shared with the load generator (benchmarks), \
           1 avoids the two fighting over cores.",
    ..BASE
};

/// `--max-backwards-wait-ms`.
pub const MAX_BACKWARDS_WAIT_MS: Setting = Setting {
    key: "max_backwards_wait_ms",
    flag: Some("max-backwards-wait-ms"),
    env: Some("SNOWFLAKE_MAX_BACKWARDS_WAIT_MS"),
    value_name: "MS",
    kind: number(0, 10_000, "ms"),
    default: DefaultValue::Value("0"),
    group: Group::Clock,
    help: "Clock regressions up to this many milliseconds are waited out instead of refused; \
           0 refuses every regression with 503.",
    ..BASE
};

/// `--reserve-ms`.
pub const RESERVE_MS: Setting = Setting {
    key: "reserve_ms",
    flag: Some("reserve-ms"),
    env: Some("SNOWFLAKE_RESERVE_MS"),
    value_name: "MS",
    kind: number(100, 60_000, "ms"),
    default: DefaultValue::Value("3000"),
    group: Group::Clock,
    help: "How far ahead of the clock the high-water mark is persisted. A restart after a crash \
           waits at most this long.",
    ..BASE
};

/// `--max-clock-step-ms`.
pub const MAX_CLOCK_STEP_MS: Setting = Setting {
    key: "max_clock_step_ms",
    flag: Some("max-clock-step-ms"),
    env: Some("SNOWFLAKE_MAX_CLOCK_STEP_MS"),
    value_name: "MS",
    kind: number(1, 3_600_000, "ms"),
    default: DefaultValue::Value("1000"),
    group: Group::Clock,
    help: "A wall-clock step forward of more than this many milliseconds is not trusted until \
           it has held for --clock-step-trust-secs: nothing is issued or reserved after the \
           trusted time meanwhile.",
    ..BASE
};

/// `--clock-step-trust-secs`.
pub const CLOCK_STEP_TRUST_SECS: Setting = Setting {
    key: "clock_step_trust_secs",
    flag: Some("clock-step-trust-secs"),
    env: Some("SNOWFLAKE_CLOCK_STEP_TRUST_SECS"),
    value_name: "SECS",
    kind: number(1, 3600, "s"),
    default: DefaultValue::Value("10"),
    group: Group::Clock,
    help: "How long a forward step larger than --max-clock-step-ms must hold before it is \
           trusted. Steps of more than a day are never trusted automatically.",
    ..BASE
};

/// `--tls-cert`.
pub const TLS_CERT: Setting = Setting {
    key: "tls_cert",
    flag: Some("tls-cert"),
    env: Some("SNOWFLAKE_TLS_CERT"),
    value_name: "FILE",
    kind: Kind::Path,
    group: Group::Tls,
    help: "Certificate chain (PEM) for HTTPS on the HTTP address and gRPC over TLS on the gRPC \
           address; needs --tls-key. Renewed files are picked up without a restart. Thrift \
           stays plaintext.",
    ..BASE
};

/// `--tls-key`.
pub const TLS_KEY: Setting = Setting {
    key: "tls_key",
    flag: Some("tls-key"),
    env: Some("SNOWFLAKE_TLS_KEY"),
    value_name: "FILE",
    kind: Kind::Path,
    group: Group::Tls,
    help: "Private key (PEM) of --tls-cert.",
    ..BASE
};

/// `--tls-client-ca`.
pub const TLS_CLIENT_CA: Setting = Setting {
    key: "tls_client_ca",
    flag: Some("tls-client-ca"),
    env: Some("SNOWFLAKE_TLS_CLIENT_CA"),
    value_name: "FILE",
    kind: Kind::Path,
    group: Group::Tls,
    help: "CA certificates (PEM): HTTPS and gRPC then require a client certificate signed by \
           one of them (mutual TLS); needs --tls-cert.",
    ..BASE
};

/// `--datacenter-id`.
pub const DATACENTER_ID: Setting = Setting {
    key: "datacenter_id",
    flag: Some("datacenter-id"),
    env: Some("SNOWFLAKE_DATACENTER_ID"),
    value_name: "D",
    kind: Kind::LayoutField,
    default: DefaultValue::Value("0"),
    group: Group::Identity,
    help: "Datacenter id of this node, 0..=31 (under --layout: 0..=2^D - 1).",
    ..BASE
};

/// `--worker-id`.
pub const WORKER_ID: Setting = Setting {
    key: "worker_id",
    flag: Some("worker-id"),
    env: Some("SNOWFLAKE_WORKER_ID"),
    value_name: "W",
    kind: Kind::LayoutField,
    default: DefaultValue::Value("0"),
    group: Group::Identity,
    help: "Worker id of this node, 0..=31 (under --layout: 0..=2^W - 1). Two live processes \
           must never share a (datacenter, worker) pair.",
    ..BASE
};

/// `--worker-id-from-hostname`.
pub const WORKER_ID_FROM_HOSTNAME: Setting = Setting {
    key: "worker_id_from_hostname",
    flag: Some("worker-id-from-hostname"),
    env: Some("SNOWFLAKE_WORKER_ID_FROM_HOSTNAME"),
    kind: Kind::Switch,
    group: Group::Identity,
    help: "Take the worker id from the ordinal at the end of the host name, as a Kubernetes \
           StatefulSet names its pods (`snowflake-7` → 7).",
    ..BASE
};

/// The config file's `[worker_id_map]`.
pub const WORKER_ID_MAP: Setting = Setting {
    key: "worker_id_map",
    kind: Kind::Table,
    group: Group::Identity,
    help: "A table of host name = worker id (config file only): the node takes the worker id \
           of its host name (--hostname); no worker may be given twice.",
    ..BASE
};

/// `--hostname`.
pub const HOSTNAME: Setting = Setting {
    key: "hostname",
    flag: Some("hostname"),
    env: Some("SNOWFLAKE_HOSTNAME"),
    value_name: "NAME",
    default: DefaultValue::Computed("the machine's host name"),
    group: Group::Identity,
    help: "The host name used by `--worker-id-from-hostname`, the config file's \
           `[worker_id_map]` and fleet registrations.",
    ..BASE
};

/// `--state-dir`.
pub const STATE_DIR: Setting = Setting {
    key: "state_dir",
    flag: Some("state-dir"),
    env: Some("SNOWFLAKE_STATE_DIR"),
    value_name: "DIR",
    kind: Kind::Path,
    default: DefaultValue::Computed(
        "$XDG_STATE_HOME/snowflake, else $HOME/.local/state/snowflake, else ./snowflake-state",
    ),
    group: Group::State,
    help: "Directory for the restart-safety high-water marks; locked while the service runs.",
    ..BASE
};

/// `--log-format`.
pub const LOG_FORMAT: Setting = Setting {
    key: "log_format",
    flag: Some("log-format"),
    env: Some("SNOWFLAKE_LOG_FORMAT"),
    value_name: "FORMAT",
    default: DefaultValue::Value("human"),
    group: Group::Logging,
    help: "Log format: `human` or `json`.",
    ..BASE
};

/// `--log`.
pub const LOG: Setting = Setting {
    key: "log",
    flag: Some("log"),
    env: Some("SNOWFLAKE_LOG"),
    value_name: "FILTER",
    default: DefaultValue::Value("info"),
    group: Group::Logging,
    help: "Log filter, e.g. `info` or `snowflake_server=debug,info`.",
    ..BASE
};

/// Every setting, in the order of `--help`, the config file's key list and
/// docs/configuration.md.
pub static SETTINGS: &[&Setting] = &[
    &CONFIG,
    &HTTP_ADDR,
    &GRPC_ADDR,
    &THRIFT_ADDR,
    &RESP_ADDR,
    &ADMIN_ADDR,
    &ADMIN_STATUS_PAGE,
    &THRIFT_MAX_FRAME_BYTES,
    &RESP_MAX_BULK_BYTES,
    &RESP_MAX_ARGS,
    &RESP_MAX_INLINE_BYTES,
    &GRPC_MAX_CONCURRENT_STREAMS,
    &MAX_BATCH,
    &MAX_CONNECTIONS,
    &REQUEST_TIMEOUT_MS,
    &IDLE_TIMEOUT_MS,
    &SHUTDOWN_TIMEOUT_MS,
    &WORKER_THREADS,
    &MAX_BACKWARDS_WAIT_MS,
    &RESERVE_MS,
    &MAX_CLOCK_STEP_MS,
    &CLOCK_STEP_TRUST_SECS,
    &TLS_CERT,
    &TLS_KEY,
    &TLS_CLIENT_CA,
    &LAYOUT,
    &EPOCH_MS,
    &DATACENTER_ID,
    &WORKER_ID,
    &WORKER_ID_FROM_HOSTNAME,
    &WORKER_ID_MAP,
    &HOSTNAME,
    &STATE_DIR,
    &LOG_FORMAT,
    &LOG,
    &ETCD_ENDPOINTS,
    &ETCD_PREFIX,
    &ETCD_CA,
    &ETCD_CERT,
    &ETCD_KEY,
    &ETCD_USER,
    &ETCD_PASSWORD_FILE,
    &ETCD_PASSWORD,
    &ALLOW_CLEARTEXT_CREDENTIALS,
    &LEASE_TTL_SECS,
    &CLAIM_TIMEOUT_SECS,
    &ADVERTISE_ADDR,
    &ZOOKEEPER,
    &ZOOKEEPER_PATH,
    &ZOOKEEPER_AUTH_FILE,
    &ZOOKEEPER_CA,
    &ZOOKEEPER_CERT,
    &ZOOKEEPER_KEY,
    &ZOOKEEPER_SESSION_TIMEOUT_MS,
    &MAX_PEER_SKEW_MS,
];

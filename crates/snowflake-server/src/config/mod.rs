//! `snowflake serve`'s resolved configuration: flags > `SNOWFLAKE_*` environment variables > a
//! TOML file (`--config`) > defaults, as the settings table ([`crate::settings`]) defines
//! them, all validated before anything is bound.

mod files;
mod parse;
mod resolve;
mod source;

pub use crate::settings::ServeArgs;
pub use parse::{default_state_dir, machine_hostname, worker_from_ordinal};
/// The fleet's settings, defined by the fleet crate (which leases the pair) and resolved here.
pub use snowflake_fleet::{ClientTls, EtcdAuth, EtcdConfig, Secret, ZooKeeperConfig};

use snowflake_core::Layout;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Text for people.
    Human,
    /// One JSON object per line.
    Json,
}

/// The largest `--max-batch`: 100,000 IDs (about 33 ms of one node's sequence space at the
/// three quarters of each millisecond bulk takes). Maximum batches back to back at this size
/// leave a concurrent single-ID client's p99 where it is without them (BENCHMARKS.md, "Single
/// IDs beside maximum batches"); at 1,000,000 it moved. More IDs in one call: gRPC `StreamIds`.
pub const MAX_BATCH_CEILING: u64 = 100_000;

/// The default `--max-batch` under `layout`: 250 ms of its rate (a quarter of its IDs per
/// second), at most [`MAX_BATCH_CEILING`]: 100,000 under Twitter's widths, 16,000 under js-safe.
pub fn default_max_batch(layout: &Layout) -> u64 {
    (layout.max_ids_per_second() / 4).clamp(1, MAX_BATCH_CEILING)
}

/// The validated settings of one `snowflake serve`.
#[derive(Debug, Clone)]
pub struct Config {
    /// HTTP listen address; `None` when off.
    pub http_addr: Option<SocketAddr>,
    /// gRPC listen address; `None` when off.
    pub grpc_addr: Option<SocketAddr>,
    /// Concurrent gRPC calls (HTTP/2 streams) per connection.
    pub grpc_max_concurrent_streams: u32,
    /// Thrift listen address; `None` when off.
    pub thrift_addr: Option<SocketAddr>,
    /// Largest Thrift frame accepted, in bytes.
    pub thrift_max_frame_bytes: usize,
    /// The admin listener (health, readiness, metrics, status page); `None` when off.
    pub admin_addr: Option<SocketAddr>,
    /// Whether the admin listener serves the status page and `/v1/status`.
    pub admin_status_page: bool,
    /// The RESP listener; `None` when off.
    pub resp_addr: Option<SocketAddr>,
    /// What one RESP request may hold.
    pub resp_limits: crate::resp::parse::Limits,
    /// TLS on the HTTP and gRPC listeners; `None`: plaintext.
    pub tls: Option<crate::tls::TlsFiles>,
    /// The layout (`--layout` and `--epoch-ms`; Twitter's by default).
    pub layout: Layout,
    /// Datacenter id.
    pub datacenter_id: u64,
    /// Worker id.
    pub worker_id: u64,
    /// State directory.
    pub state_dir: PathBuf,
    /// Largest count per request.
    pub max_batch: u64,
    /// Clock regressions up to this are waited out.
    pub max_backwards_wait_ms: u64,
    /// How far ahead the high-water mark is persisted.
    pub reserve_ms: u64,
    /// A forward clock step larger than this is not trusted at once.
    pub max_clock_step_ms: u64,
    /// How long a larger step must hold to be trusted.
    pub clock_step_trust: Duration,
    /// Connection cap per listener.
    pub max_connections: usize,
    /// Per-request time limit.
    pub request_timeout: Duration,
    /// How long a connection may make no progress (a request, idling, a write).
    pub idle_timeout: Duration,
    /// Drain time on shutdown.
    pub shutdown_timeout: Duration,
    /// Runtime worker threads.
    pub worker_threads: usize,
    /// Log format.
    pub log_format: LogFormat,
    /// Log filter.
    pub log: String,
    /// Where the worker id came from: with a coordination service, a given one is claimed
    /// exactly, an unset one means "the lowest free".
    pub worker_source: WorkerSource,
    /// Where the pair is leased from, when a fleet shares a coordination service.
    pub etcd: Option<EtcdConfig>,
    /// The address recorded with the node's claim.
    pub advertise_addr: Option<String>,
    /// Where the worker id is registered, when a fleet shares a ZooKeeper ensemble.
    pub zookeeper: Option<ZooKeeperConfig>,
    /// The host name (for the worker id map, the ordinal, and registrations).
    pub hostname: String,
}

/// Where the configuration's worker id came from (the coordination service, when there is
/// one, is [`Config::coordination`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerSource {
    /// Not given: 0, or with a coordination service the lowest free worker.
    Unset,
    /// A number: `--worker-id`, `SNOWFLAKE_WORKER_ID` or the file's `worker_id`.
    Static,
    /// The ordinal at the end of the host name (`--worker-id-from-hostname`).
    HostnameOrdinal,
    /// The host name's entry in the file's `[worker_id_map]`.
    HostnameMap,
}

impl WorkerSource {
    /// Whether the configuration gave the worker id (rather than leaving it to the default).
    pub fn given(self) -> bool {
        self != WorkerSource::Unset
    }

    /// The `identity_source` of `/v1/info` and the metrics without a coordination service:
    /// `static`, `hostname-ordinal` or `hostname-map`.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerSource::Unset | WorkerSource::Static => "static",
            WorkerSource::HostnameOrdinal => "hostname-ordinal",
            WorkerSource::HostnameMap => "hostname-map",
        }
    }
}

impl Config {
    /// Whether the worker id was given (flag, environment, file, host name) rather than
    /// defaulted.
    pub fn worker_id_given(&self) -> bool {
        self.worker_source.given()
    }

    /// Where the worker id came from when the configuration gave it: `static` (a number),
    /// `hostname-map` (the file's `[worker_id_map]`) or `hostname-ordinal`.
    pub fn identity_source(&self) -> &'static str {
        self.worker_source.as_str()
    }

    /// The coordination service the pair is leased from, if any (the settings never give
    /// both).
    pub fn coordination(&self) -> Option<snowflake_fleet::Coordination> {
        snowflake_fleet::Coordination::chosen(self.etcd.as_ref(), self.zookeeper.as_ref())
    }

    /// Defaults for everything (the settings table's), with a state directory: what tests
    /// start from.
    pub fn with_state_dir(state_dir: impl Into<PathBuf>) -> Config {
        let mut config = Config::resolve(&ServeArgs::new(), None)
            .unwrap_or_else(|e| panic!("the settings table's defaults do not resolve: {e}"));
        config.state_dir = state_dir.into();
        config
    }
}

/// A configuration problem, in one line naming the setting, the value and what is valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

impl ConfigError {
    fn invalid(name: &str, err: impl std::fmt::Display) -> ConfigError {
        ConfigError(format!("invalid {name}: {err}"))
    }
}

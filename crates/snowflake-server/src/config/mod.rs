//! `snowflake serve`'s resolved configuration: flags > `SNOWFLAKE_*` environment variables > a
//! TOML file (`--config`) > defaults, as the settings table ([`crate::settings`]) defines
//! them, all validated before anything is bound.

mod files;
mod identity;
mod parse;
mod resolve;
mod source;

pub use crate::settings::ServeArgs;
pub use identity::{IdentityConfig, WorkerSource};
pub use parse::{default_state_dir, machine_hostname, worker_from_ordinal};
/// The fleet's settings, defined by the fleet crate (which leases the pair) and resolved here.
pub use snowflake_fleet::{ClientTls, Coordination, EtcdAuth, EtcdConfig, Secret, ZooKeeperConfig};

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

/// The validated settings of one `snowflake serve`, grouped by concern. Each group gathers
/// sections of the settings table ([`crate::settings::Group`]), and each field is named after
/// its setting's key: `--idle-timeout-ms` is `limits.idle_timeout` (a [`Duration`]),
/// `--worker-id` is `identity.worker_id`.
#[derive(Debug, Clone)]
pub struct Config {
    /// The layout (`--layout` and `--epoch-ms`; Twitter's by default).
    pub layout: Layout,
    /// Where the service listens, and TLS on its doors (the Listeners and TLS sections).
    pub listeners: ListenerConfig,
    /// Sizes, counts and time limits of requests and connections (the Limits section).
    pub limits: LimitsConfig,
    /// The clock policy and the restart-safety reach (the Clock section).
    pub clock: ClockConfig,
    /// The (datacenter, worker) pair and where it comes from (the Identity and Fleet sections).
    pub identity: IdentityConfig,
    /// The state directory (the State section).
    pub state_dir: PathBuf,
    /// The logs (the Logging section).
    pub logging: LogConfig,
}

/// Where the service listens: one address per door (`None` when off), and TLS on them.
#[derive(Debug, Clone)]
pub struct ListenerConfig {
    /// HTTP listen address; `None` when off.
    pub http_addr: Option<SocketAddr>,
    /// gRPC listen address; `None` when off.
    pub grpc_addr: Option<SocketAddr>,
    /// Thrift listen address; `None` when off.
    pub thrift_addr: Option<SocketAddr>,
    /// The RESP listener; `None` when off.
    pub resp_addr: Option<SocketAddr>,
    /// The admin listener (health, readiness, metrics, status page); `None` when off.
    pub admin_addr: Option<SocketAddr>,
    /// Whether the admin listener serves the status page and `/v1/status`.
    pub admin_status_page: bool,
    /// TLS on the HTTP, gRPC and RESP listeners; `None`: plaintext.
    pub tls: Option<crate::tls::TlsFiles>,
}

/// What one request or connection may hold and take, and the runtime's threads.
#[derive(Debug, Clone)]
pub struct LimitsConfig {
    /// Largest Thrift frame accepted, in bytes.
    pub thrift_max_frame_bytes: usize,
    /// What one RESP request may hold.
    pub resp: crate::resp::parse::Limits,
    /// Concurrent gRPC calls (HTTP/2 streams) per connection.
    pub grpc_max_concurrent_streams: u32,
    /// Largest count per request.
    pub max_batch: u64,
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
}

/// How far the wall clock is trusted, and how far ahead of it the state reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockConfig {
    /// Clock regressions up to this are waited out.
    pub max_backwards_wait_ms: u64,
    /// How far ahead the high-water mark is persisted.
    pub reserve_ms: u64,
    /// A forward clock step larger than this is not trusted at once.
    pub max_clock_step_ms: u64,
    /// How long a larger step must hold to be trusted.
    pub clock_step_trust: Duration,
}

/// The logs: their format and filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// Log format.
    pub log_format: LogFormat,
    /// Log filter.
    pub log: String,
}

impl Config {
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

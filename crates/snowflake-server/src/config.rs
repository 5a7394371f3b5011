//! `snowflake serve` settings: flags > `SNOWFLAKE_*` environment variables > a TOML file
//! (`--config`) > defaults, all validated before anything is bound.

use snowflake_core::{Field, Layout, TWITTER_EPOCH_MS};
/// The fleet's settings, defined by the fleet crate (which leases the pair) and resolved here.
pub use snowflake_fleet::{ClientTls, EtcdAuth, EtcdConfig, Secret, ZooKeeperConfig};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The flags of `snowflake serve`. Each is also read from the environment variable named in
/// its help, and from the same key with underscores in the `--config` file.
#[derive(Debug, Clone, Default, clap::Args)]
#[command(next_help_heading = "Service")]
pub struct ServeArgs {
    /// TOML file with any of the settings below, keys spelled with underscores
    /// (e.g. `http_addr = "127.0.0.1:8080"`, `worker_id = 3`); flags and environment variables
    /// override it.
    #[arg(long, env = "SNOWFLAKE_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// HTTP/JSON listen address, or `off` [default: 127.0.0.1:8080].
    #[arg(long, env = "SNOWFLAKE_HTTP_ADDR", value_name = "ADDR")]
    pub http_addr: Option<String>,

    /// gRPC listen address, or `off` [default: 127.0.0.1:50051].
    #[arg(long, env = "SNOWFLAKE_GRPC_ADDR", value_name = "ADDR")]
    pub grpc_addr: Option<String>,

    /// Most concurrent gRPC calls (HTTP/2 streams) on one connection, 1..=1024; a client
    /// opening more gets REFUSED_STREAM for each one over [default: 100].
    #[arg(
        long,
        env = "SNOWFLAKE_GRPC_MAX_CONCURRENT_STREAMS",
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub grpc_max_concurrent_streams: Option<String>,

    /// Thrift listen address (framed transport, binary protocol, the 2010 IDL), or `off`
    /// [default: 127.0.0.1:7609].
    #[arg(long, env = "SNOWFLAKE_THRIFT_ADDR", value_name = "ADDR")]
    pub thrift_addr: Option<String>,

    /// Largest Thrift frame accepted, 64..=16384000 bytes; a connection sending a larger (or
    /// garbage) length is closed [default: 65536].
    #[arg(
        long,
        env = "SNOWFLAKE_THRIFT_MAX_FRAME_BYTES",
        value_name = "BYTES",
        allow_negative_numbers = true
    )]
    pub thrift_max_frame_bytes: Option<String>,

    /// Redis protocol (RESP2/RESP3) listen address, or `off`: `INCR key` returns a fresh ID, so
    /// Redis clients work unchanged [default: off].
    #[arg(long, env = "SNOWFLAKE_RESP_ADDR", value_name = "ADDR")]
    pub resp_addr: Option<String>,

    /// Most bytes of arguments in one RESP command, 64..=16777216; a request claiming more is
    /// refused and its connection closed, without allocating it [default: 4096].
    #[arg(
        long,
        env = "SNOWFLAKE_RESP_MAX_BULK_BYTES",
        value_name = "BYTES",
        allow_negative_numbers = true
    )]
    pub resp_max_bulk_bytes: Option<String>,

    /// Most arguments in one RESP command, 2..=65536 [default: 64].
    #[arg(
        long,
        env = "SNOWFLAKE_RESP_MAX_ARGS",
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub resp_max_args: Option<String>,

    /// Longest RESP inline command (and header line), 64..=16777216 bytes [default: 4096].
    #[arg(
        long,
        env = "SNOWFLAKE_RESP_MAX_INLINE_BYTES",
        value_name = "BYTES",
        allow_negative_numbers = true
    )]
    pub resp_max_inline_bytes: Option<String>,

    /// Health, readiness, metrics and the status page on a listener of their own that never
    /// asks for client certificates (for probes and scrapers when the API requires mTLS), or
    /// `off` [default: off]. They stay on the HTTP listener too.
    #[arg(long, env = "SNOWFLAKE_ADMIN_ADDR", value_name = "ADDR")]
    pub admin_addr: Option<String>,

    /// Whether the admin listener serves the status page (`/`, `/status.js`) and `/v1/status`,
    /// which show the fleet's holders, their hosts, pids and addresses: `on` or `off`
    /// [default: on]. Off, they answer 404 there; probes and metrics stay, and the HTTP
    /// listener keeps its page.
    #[arg(long, env = "SNOWFLAKE_ADMIN_STATUS_PAGE", value_name = "on|off")]
    pub admin_status_page: Option<String>,

    /// Certificate chain (PEM) for HTTPS on the HTTP address and gRPC over TLS on the gRPC
    /// address; needs --tls-key. Renewed files are picked up without a restart. Thrift stays
    /// plaintext.
    #[arg(
        long,
        env = "SNOWFLAKE_TLS_CERT",
        value_name = "FILE",
        help_heading = "TLS"
    )]
    pub tls_cert: Option<PathBuf>,

    /// Private key (PEM) of --tls-cert.
    #[arg(
        long,
        env = "SNOWFLAKE_TLS_KEY",
        value_name = "FILE",
        help_heading = "TLS"
    )]
    pub tls_key: Option<PathBuf>,

    /// CA certificates (PEM): HTTPS and gRPC then require a client certificate signed by one
    /// of them (mutual TLS); needs --tls-cert.
    #[arg(
        long,
        env = "SNOWFLAKE_TLS_CLIENT_CA",
        value_name = "FILE",
        help_heading = "TLS"
    )]
    pub tls_client_ca: Option<PathBuf>,

    /// Datacenter id of this node, 0..=31 [default: 0].
    #[arg(
        long,
        env = "SNOWFLAKE_DATACENTER_ID",
        value_name = "D",
        allow_negative_numbers = true
    )]
    pub datacenter_id: Option<String>,

    /// Worker id of this node, 0..=31 [default: 0]. Two live processes must never share a
    /// (datacenter, worker) pair.
    #[arg(
        long,
        env = "SNOWFLAKE_WORKER_ID",
        value_name = "W",
        allow_negative_numbers = true
    )]
    pub worker_id: Option<String>,

    /// Directory for the restart-safety high-water marks; locked while the service runs
    /// [default: $XDG_STATE_HOME/snowflake, else $HOME/.local/state/snowflake, else ./snowflake-state].
    #[arg(long, env = "SNOWFLAKE_STATE_DIR", value_name = "DIR")]
    pub state_dir: Option<PathBuf>,

    /// Largest number of IDs one request may ask for, 1..=100000 [default: 100000, or 250 ms of
    /// the layout's rate when that is less: 16000 under js-safe]. A count above one
    /// millisecond's worth (4096) is issued three quarters of a millisecond's sequence space at
    /// a time, within --request-timeout-ms; for more IDs in one call, gRPC StreamIds.
    #[arg(
        long,
        env = "SNOWFLAKE_MAX_BATCH",
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub max_batch: Option<String>,

    /// Clock regressions up to this many milliseconds are waited out instead of refused,
    /// 0..=10000 [default: 0: refuse every regression with 503].
    #[arg(
        long,
        env = "SNOWFLAKE_MAX_BACKWARDS_WAIT_MS",
        value_name = "MS",
        allow_negative_numbers = true
    )]
    pub max_backwards_wait_ms: Option<String>,

    /// How far ahead of the clock the high-water mark is persisted, 100..=60000 ms
    /// [default: 3000]. A restart after a crash waits at most this long.
    #[arg(
        long,
        env = "SNOWFLAKE_RESERVE_MS",
        value_name = "MS",
        allow_negative_numbers = true
    )]
    pub reserve_ms: Option<String>,

    /// A wall-clock step forward of more than this many milliseconds is not trusted until it
    /// has held for --clock-step-trust-secs: nothing is issued or reserved after the trusted
    /// time meanwhile, 1..=3600000 [default: 1000].
    #[arg(
        long,
        env = "SNOWFLAKE_MAX_CLOCK_STEP_MS",
        value_name = "MS",
        allow_negative_numbers = true
    )]
    pub max_clock_step_ms: Option<String>,

    /// How long a forward step larger than --max-clock-step-ms must hold before it is trusted,
    /// 1..=3600 s [default: 10]. Steps of more than a day are never trusted automatically.
    #[arg(
        long,
        env = "SNOWFLAKE_CLOCK_STEP_TRUST_SECS",
        value_name = "SECS",
        allow_negative_numbers = true
    )]
    pub clock_step_trust_secs: Option<String>,

    /// Most concurrent connections per listener, 1..=1000000; more are refused
    /// [default: 4096].
    #[arg(
        long,
        env = "SNOWFLAKE_MAX_CONNECTIONS",
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub max_connections: Option<String>,

    /// Longest time one request may wait (for a lagging clock to be waited out, or for the
    /// high-water mark to be persisted) before it is refused, 1..=3600000 ms [default: 10000].
    #[arg(
        long,
        env = "SNOWFLAKE_REQUEST_TIMEOUT_MS",
        value_name = "MS",
        allow_negative_numbers = true
    )]
    pub request_timeout_ms: Option<String>,

    /// Longest time a connection may make no progress: to send a whole request from its first
    /// byte (HTTP headers, a Thrift frame, a RESP command, a gRPC message), between requests
    /// (HTTP keep-alive, Thrift, RESP, gRPC with no call open), or to take any of a reply (every
    /// door's writes, gRPC's flow-control window); a TLS handshake gets at most 10 s of it.
    /// 1..=3600000 ms [default: 60000].
    #[arg(
        long,
        env = "SNOWFLAKE_IDLE_TIMEOUT_MS",
        value_name = "MS",
        allow_negative_numbers = true
    )]
    pub idle_timeout_ms: Option<String>,

    /// On SIGTERM/SIGINT, how long in-flight requests may take to finish, 0..=3600000 ms
    /// [default: 10000].
    #[arg(
        long,
        env = "SNOWFLAKE_SHUTDOWN_TIMEOUT_MS",
        value_name = "MS",
        allow_negative_numbers = true
    )]
    pub shutdown_timeout_ms: Option<String>,

    /// Threads serving requests, 1..=1024 [default: the number of CPUs]. On a machine shared with
    /// the load generator (benchmarks), 1 avoids the two fighting over cores.
    #[arg(
        long,
        env = "SNOWFLAKE_WORKER_THREADS",
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub worker_threads: Option<String>,

    /// Lease the (datacenter, worker) pair from these etcd members (comma-separated
    /// `http://HOST:PORT`; `HOST:PORT` means http) instead of trusting the configuration alone:
    /// two live processes then never hold the same pair. With `--worker-id` the node claims
    /// exactly that pair; without it, the lowest free worker of its datacenter.
    #[arg(
        long,
        env = "SNOWFLAKE_ETCD_ENDPOINTS",
        value_name = "URL[,URL...]",
        help_heading = "Fleet (etcd)"
    )]
    pub etcd_endpoints: Option<String>,

    /// Key prefix of this fleet in etcd: claims live under PREFIX/workers/D/W, high-water marks
    /// under PREFIX/marks/D/W [default: /snowflake].
    #[arg(
        long,
        env = "SNOWFLAKE_ETCD_PREFIX",
        value_name = "PREFIX",
        help_heading = "Fleet (etcd)"
    )]
    pub etcd_prefix: Option<String>,

    /// CA certificates (PEM) that etcd's server certificate must chain to; needed by
    /// `https://` endpoints.
    #[arg(
        long,
        env = "SNOWFLAKE_ETCD_CA",
        value_name = "FILE",
        help_heading = "Fleet (etcd)"
    )]
    pub etcd_ca: Option<PathBuf>,

    /// Client certificate (PEM) for etcd's `--client-cert-auth`; needs --etcd-key. Without
    /// --etcd-user, etcd takes its common name for the user name.
    #[arg(
        long,
        env = "SNOWFLAKE_ETCD_CERT",
        value_name = "FILE",
        help_heading = "Fleet (etcd)"
    )]
    pub etcd_cert: Option<PathBuf>,

    /// Private key (PEM) of --etcd-cert.
    #[arg(
        long,
        env = "SNOWFLAKE_ETCD_KEY",
        value_name = "FILE",
        help_heading = "Fleet (etcd)"
    )]
    pub etcd_key: Option<PathBuf>,

    /// etcd user name (etcd's own authentication); the password comes from
    /// --etcd-password-file or the SNOWFLAKE_ETCD_PASSWORD environment variable, never a flag.
    #[arg(
        long,
        env = "SNOWFLAKE_ETCD_USER",
        value_name = "NAME",
        help_heading = "Fleet (etcd)"
    )]
    pub etcd_user: Option<String>,

    /// File holding the password of --etcd-user (one line).
    #[arg(
        long,
        env = "SNOWFLAKE_ETCD_PASSWORD_FILE",
        value_name = "FILE",
        help_heading = "Fleet (etcd)"
    )]
    pub etcd_password_file: Option<PathBuf>,

    /// Lease time-to-live, 2..=300 s [default: 10]. A crashed node's pair is free again after
    /// this long; a node that cannot renew its lease stops issuing IDs before it runs out.
    #[arg(
        long,
        env = "SNOWFLAKE_LEASE_TTL_SECS",
        value_name = "SECS",
        allow_negative_numbers = true,
        help_heading = "Fleet (etcd)"
    )]
    pub lease_ttl_secs: Option<String>,

    /// How long to keep trying to claim a pinned pair that is held by another node (or to reach
    /// etcd or ZooKeeper) before giving up, 0..=3600 s [default: the lease TTL, or the ZooKeeper
    /// session timeout, + 2 s, so a node restarted right after a crash gets its own pair back
    /// once the old lease or session expires].
    #[arg(
        long,
        env = "SNOWFLAKE_CLAIM_TIMEOUT_SECS",
        value_name = "SECS",
        allow_negative_numbers = true,
        help_heading = "Fleet (etcd)"
    )]
    pub claim_timeout_secs: Option<String>,

    /// Register the worker id in ZooKeeper as the 2010 original did (comma-separated
    /// `HOST:PORT`): an ephemeral znode PATH/W holding this node's Thrift address, after checking
    /// the registered peers over Thrift. With `--worker-id` the node claims exactly that one;
    /// without it, the lowest free worker.
    #[arg(
        long,
        env = "SNOWFLAKE_ZOOKEEPER",
        value_name = "HOST:PORT[,...]",
        help_heading = "Fleet (ZooKeeper)"
    )]
    pub zookeeper: Option<String>,

    /// The ZooKeeper path of this datacenter's workers (one path per datacenter)
    /// [default: /snowflake-servers]. High-water marks live under PATH-marks.
    #[arg(
        long,
        env = "SNOWFLAKE_ZOOKEEPER_PATH",
        value_name = "PATH",
        help_heading = "Fleet (ZooKeeper)"
    )]
    pub zookeeper_path: Option<String>,

    /// File holding `user:password` (one line) for ZooKeeper's digest scheme: the node
    /// authenticates with it, and every znode it creates gets `world:anyone:r` plus all rights
    /// for that identity only, so others can read the 2010 layout but not change it.
    #[arg(
        long,
        env = "SNOWFLAKE_ZOOKEEPER_AUTH_FILE",
        value_name = "FILE",
        help_heading = "Fleet (ZooKeeper)"
    )]
    pub zookeeper_auth_file: Option<PathBuf>,

    /// CA certificates (PEM) that ZooKeeper's certificate must chain to: TLS to every server
    /// of --zookeeper (their secure client port).
    #[arg(
        long,
        env = "SNOWFLAKE_ZOOKEEPER_CA",
        value_name = "FILE",
        help_heading = "Fleet (ZooKeeper)"
    )]
    pub zookeeper_ca: Option<PathBuf>,

    /// Client certificate (PEM) for ZooKeeper (its secure port requires one by default); needs
    /// --zookeeper-key and --zookeeper-ca.
    #[arg(
        long,
        env = "SNOWFLAKE_ZOOKEEPER_CERT",
        value_name = "FILE",
        help_heading = "Fleet (ZooKeeper)"
    )]
    pub zookeeper_cert: Option<PathBuf>,

    /// Private key (PEM) of --zookeeper-cert.
    #[arg(
        long,
        env = "SNOWFLAKE_ZOOKEEPER_KEY",
        value_name = "FILE",
        help_heading = "Fleet (ZooKeeper)"
    )]
    pub zookeeper_key: Option<PathBuf>,

    /// ZooKeeper session timeout asked for, 1000..=120000 ms [default: 10000]; the server may
    /// narrow it to its own bounds. A crashed node's worker is free again after this long.
    #[arg(
        long,
        env = "SNOWFLAKE_ZOOKEEPER_SESSION_TIMEOUT_MS",
        value_name = "MS",
        allow_negative_numbers = true,
        help_heading = "Fleet (ZooKeeper)"
    )]
    pub zookeeper_session_timeout_ms: Option<String>,

    /// Refuse to start when this node's clock is further than this from the mean of its
    /// registered peers' clocks, 0..=3600000 ms [default: 10000, as in 2010].
    #[arg(
        long,
        env = "SNOWFLAKE_MAX_PEER_SKEW_MS",
        value_name = "MS",
        allow_negative_numbers = true,
        help_heading = "Fleet (ZooKeeper)"
    )]
    pub max_peer_skew_ms: Option<String>,

    /// Send coordination credentials over an unencrypted connection: the etcd password of
    /// --etcd-user to `http://` endpoints, the ZooKeeper digest identity of
    /// --zookeeper-auth-file without --zookeeper-ca. Refused by default, because anyone on the
    /// network path could read them and then rewrite or delete the fleet's claims and marks;
    /// only for a network you trust (loopback, a private link).
    #[arg(
        long,
        env = "SNOWFLAKE_ALLOW_CLEARTEXT_CREDENTIALS",
        help_heading = "Fleet (etcd)"
    )]
    pub allow_cleartext_credentials: bool,

    /// Take the worker id from the ordinal at the end of the host name, as a Kubernetes
    /// StatefulSet names its pods (`snowflake-7` → 7).
    #[arg(
        long,
        env = "SNOWFLAKE_WORKER_ID_FROM_HOSTNAME",
        help_heading = "Identity"
    )]
    pub worker_id_from_hostname: bool,

    /// The host name used by `--worker-id-from-hostname`, the config file's `[worker_id_map]`
    /// and fleet registrations [default: the machine's host name].
    #[arg(
        long,
        env = "SNOWFLAKE_HOSTNAME",
        value_name = "NAME",
        help_heading = "Identity"
    )]
    pub hostname: Option<String>,

    /// The address other machines reach this node at (`HOST:PORT`), recorded with its claim;
    /// with ZooKeeper, its Thrift address (the znode's data) [default: the listeners' bound
    /// addresses].
    #[arg(
        long,
        env = "SNOWFLAKE_ADVERTISE_ADDR",
        value_name = "HOST:PORT",
        help_heading = "Fleet (etcd)"
    )]
    pub advertise_addr: Option<String>,

    /// Log format: `human` or `json` [default: human].
    #[arg(long, env = "SNOWFLAKE_LOG_FORMAT", value_name = "FORMAT")]
    pub log_format: Option<String>,

    /// Log filter, e.g. `info` or `snowflake_server=debug,info` [default: info].
    #[arg(long, env = "SNOWFLAKE_LOG", value_name = "FILTER")]
    pub log: Option<String>,
}

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
    /// Whether the worker id was given (flag, environment or file) rather than defaulted: with
    /// etcd, a given worker id is claimed exactly, a defaulted one means "the lowest free".
    pub worker_id_given: bool,
    /// Where the pair is leased from, when a fleet shares a coordination service.
    pub etcd: Option<EtcdConfig>,
    /// The address recorded with the node's claim.
    pub advertise_addr: Option<String>,
    /// Where the worker id is registered, when a fleet shares a ZooKeeper ensemble.
    pub zookeeper: Option<ZooKeeperConfig>,
    /// The host name (for the worker id map, the ordinal, and registrations).
    pub hostname: String,
    /// Where the worker id came from when the configuration gave it: `static` (a number),
    /// `hostname-map` (the file's `[worker_id_map]`) or `hostname-ordinal`.
    pub identity_source: &'static str,
}

impl Config {
    /// Defaults for everything, with a state directory: what tests start from.
    pub fn with_state_dir(state_dir: impl Into<PathBuf>) -> Config {
        Config {
            http_addr: Some(SocketAddr::from(([127, 0, 0, 1], 8080))),
            grpc_addr: Some(SocketAddr::from(([127, 0, 0, 1], 50051))),
            thrift_addr: Some(SocketAddr::from(([127, 0, 0, 1], 7609))),
            grpc_max_concurrent_streams: 100,
            thrift_max_frame_bytes: 65_536,
            admin_addr: None,
            admin_status_page: true,
            resp_addr: None,
            resp_limits: crate::resp::parse::Limits::default(),
            tls: None,
            layout: Layout::TWITTER,
            datacenter_id: 0,
            worker_id: 0,
            state_dir: state_dir.into(),
            max_batch: MAX_BATCH_CEILING,
            max_backwards_wait_ms: 0,
            reserve_ms: 3000,
            max_clock_step_ms: 1000,
            clock_step_trust: Duration::from_secs(10),
            max_connections: 4096,
            request_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            shutdown_timeout: Duration::from_secs(10),
            worker_threads: std::thread::available_parallelism().map_or(1, usize::from),
            log_format: LogFormat::Human,
            log: "info".into(),
            worker_id_given: false,
            etcd: None,
            advertise_addr: None,
            zookeeper: None,
            hostname: String::new(),
            identity_source: "static",
        }
    }

    /// Resolves flags/environment (`args`, plus the global `--epoch-ms`), the config file and
    /// the defaults into a checked configuration.
    pub fn resolve(args: &ServeArgs, epoch_ms: Option<&str>) -> Result<Config, ConfigError> {
        Config::resolve_with_layout(args, epoch_ms, None)
    }

    /// [`Config::resolve`] with the global `--layout` (env `SNOWFLAKE_LAYOUT`, file key
    /// `layout`) too.
    pub fn resolve_with_layout(
        args: &ServeArgs,
        epoch_ms: Option<&str>,
        layout: Option<&str>,
    ) -> Result<Config, ConfigError> {
        let file = match &args.config {
            Some(path) => Some(ConfigFile::read(path)?),
            None => None,
        };
        let src = Sources {
            file: file.as_ref(),
        };
        let mut config = Config::with_state_dir(default_state_dir());

        let epoch = match src.pick(epoch_ms, "epoch-ms", "epoch_ms") {
            Some((text, name)) => {
                let epoch = Layout::TWITTER
                    .parse(Field::Epoch, &text)
                    .map_err(|e| ConfigError::invalid(&name, e))?;
                config.layout =
                    Layout::with_epoch(epoch).map_err(|e| ConfigError::invalid(&name, e))?;
                Some((epoch, name))
            }
            None => None,
        };
        if let Some((text, name)) = src.pick(layout, "layout", "layout") {
            let bits: snowflake_core::Bits =
                text.parse().map_err(|e| ConfigError::invalid(&name, e))?;
            let epoch_ms = epoch.as_ref().map_or(TWITTER_EPOCH_MS, |(ms, _)| *ms);
            config.layout = Layout::new(epoch_ms, bits).map_err(|e| {
                let names = epoch
                    .as_ref()
                    .map_or_else(|| name.clone(), |(_, epoch)| format!("{name} and {epoch}"));
                ConfigError::invalid(&names, e)
            })?;
        }
        // A batch of at most 250 ms of the layout's rate by default, so that one never outlasts
        // a client's call timeout (16,000 under js-safe); Twitter's keeps the ceiling.
        config.max_batch = default_max_batch(&config.layout);
        if let Some((text, name)) = src.pick(args.http_addr.as_deref(), "http-addr", "http_addr") {
            config.http_addr = parse_addr(&text).map_err(|e| ConfigError::invalid(&name, e))?;
        }
        if let Some((text, name)) = src.pick(args.grpc_addr.as_deref(), "grpc-addr", "grpc_addr") {
            config.grpc_addr = parse_addr(&text).map_err(|e| ConfigError::invalid(&name, e))?;
        }
        if let Some((text, name)) =
            src.pick(args.thrift_addr.as_deref(), "thrift-addr", "thrift_addr")
        {
            config.thrift_addr = parse_addr(&text).map_err(|e| ConfigError::invalid(&name, e))?;
        }
        if let Some((text, name)) = src.pick(args.admin_addr.as_deref(), "admin-addr", "admin_addr")
        {
            config.admin_addr = parse_addr(&text).map_err(|e| ConfigError::invalid(&name, e))?;
        }
        if let Some((text, name)) = src.pick(
            args.admin_status_page.as_deref(),
            "admin-status-page",
            "admin_status_page",
        ) {
            config.admin_status_page = match text.as_str() {
                "on" => true,
                "off" => false,
                _ => {
                    return Err(ConfigError::invalid(
                        &name,
                        format!("expected on or off, found {text:?}"),
                    ));
                }
            };
        }
        if let Some((text, name)) = src.pick(args.resp_addr.as_deref(), "resp-addr", "resp_addr") {
            config.resp_addr = parse_addr(&text).map_err(|e| ConfigError::invalid(&name, e))?;
        }
        config.tls = resolve_tls(args, &src)?;
        let layout = config.layout;
        if let Some((text, name)) = src.pick(
            args.datacenter_id.as_deref(),
            "datacenter-id",
            "datacenter_id",
        ) {
            config.datacenter_id = layout
                .parse(Field::DatacenterId, &text)
                .map_err(|e| ConfigError::invalid(&name, e))?;
        }
        if let Some((text, name)) = src.pick(args.worker_id.as_deref(), "worker-id", "worker_id") {
            config.worker_id = layout
                .parse(Field::WorkerId, &text)
                .map_err(|e| ConfigError::invalid(&name, e))?;
            config.worker_id_given = true;
        }
        let hostname = match src.pick(args.hostname.as_deref(), "hostname", "hostname") {
            Some((text, name)) => {
                parse_hostname(&text).map_err(|e| ConfigError::invalid(&name, e))?
            }
            None => machine_hostname(),
        };
        config.hostname = hostname.clone();
        let from_hostname = args.worker_id_from_hostname.then(|| "true".to_owned());
        let from_hostname = match src.pick(
            from_hostname.as_deref(),
            "worker-id-from-hostname",
            "worker_id_from_hostname",
        ) {
            Some((text, name)) => match text.as_str() {
                "true" => Some(name),
                "false" => None,
                _ => {
                    return Err(ConfigError::invalid(
                        &name,
                        format!("expected true or false, found {text:?}"),
                    ));
                }
            },
            None => None,
        };
        let map = match file
            .as_ref()
            .and_then(|f| f.table.get("worker_id_map").map(|v| (f, v)))
        {
            Some((file, value)) => Some(parse_worker_map(value, &layout).map_err(|e| {
                ConfigError::invalid(&format!("[worker_id_map] in {}", file.path.display()), e)
            })?),
            None => None,
        };
        match (config.worker_id_given, from_hostname, map) {
            (_, Some(_), Some(_)) => {
                return Err(ConfigError(
                    "--worker-id-from-hostname and a [worker_id_map] both give the worker id; \
                     keep one"
                        .into(),
                ));
            }
            (true, Some(_), None) | (true, None, Some(_)) => {
                return Err(ConfigError(
                    "--worker-id and --worker-id-from-hostname (or a [worker_id_map]) both give \
                     the worker id; keep one"
                        .into(),
                ));
            }
            (false, Some(name), None) => {
                config.worker_id = worker_from_ordinal(&hostname, &layout)
                    .map_err(|e| ConfigError::invalid(&name, e))?;
                config.worker_id_given = true;
                config.identity_source = "hostname-ordinal";
            }
            (false, None, Some(map)) => {
                config.worker_id = *map.get(&hostname).ok_or_else(|| {
                    ConfigError(format!(
                        "host name {hostname:?} is not in the config file's [worker_id_map] \
                         (it has {}); add it, or set --hostname",
                        map.keys()
                            .map(|k| format!("{k:?}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                })?;
                config.worker_id_given = true;
                config.identity_source = "hostname-map";
            }
            (_, None, None) => {}
        }
        let state_dir = args
            .state_dir
            .as_ref()
            .map(|p| p.to_string_lossy().into_owned());
        if let Some((text, name)) = src.pick(state_dir.as_deref(), "state-dir", "state_dir") {
            if text.is_empty() {
                return Err(ConfigError::invalid(
                    &name,
                    "expected a directory path, found an empty string",
                ));
            }
            config.state_dir = PathBuf::from(text);
        }
        let number = |cli: Option<&str>,
                      flag: &str,
                      key: &str,
                      min: u64,
                      max: u64|
         -> Result<Option<u64>, ConfigError> {
            match src.pick(cli, flag, key) {
                None => Ok(None),
                Some((text, name)) => parse_number(&text, min, max)
                    .map(Some)
                    .map_err(|e| ConfigError::invalid(&name, e)),
            }
        };
        if let Some(n) = number(
            args.grpc_max_concurrent_streams.as_deref(),
            "grpc-max-concurrent-streams",
            "grpc_max_concurrent_streams",
            1,
            1024,
        )? {
            config.grpc_max_concurrent_streams = u32::try_from(n).unwrap_or(1024);
        }
        if let Some(n) = number(
            args.thrift_max_frame_bytes.as_deref(),
            "thrift-max-frame-bytes",
            "thrift_max_frame_bytes",
            64,
            16_384_000,
        )? {
            config.thrift_max_frame_bytes = usize::try_from(n).unwrap_or(usize::MAX);
        }
        for (cli, flag, key, min, max) in [
            (
                args.resp_max_bulk_bytes.as_deref(),
                "resp-max-bulk-bytes",
                "resp_max_bulk_bytes",
                64,
                16_777_216,
            ),
            (
                args.resp_max_args.as_deref(),
                "resp-max-args",
                "resp_max_args",
                2,
                65_536,
            ),
            (
                args.resp_max_inline_bytes.as_deref(),
                "resp-max-inline-bytes",
                "resp_max_inline_bytes",
                64,
                16_777_216,
            ),
        ] {
            if let Some(n) = number(cli, flag, key, min, max)? {
                let n = usize::try_from(n).unwrap_or(usize::MAX);
                let limits = &mut config.resp_limits;
                match flag {
                    "resp-max-bulk-bytes" => limits.max_bulk_bytes = n,
                    "resp-max-args" => limits.max_args = n,
                    _ => limits.max_inline_bytes = n,
                }
            }
        }
        if let Some(n) = number(
            args.max_batch.as_deref(),
            "max-batch",
            "max_batch",
            1,
            MAX_BATCH_CEILING,
        )? {
            config.max_batch = n;
        }
        if let Some(n) = number(
            args.max_backwards_wait_ms.as_deref(),
            "max-backwards-wait-ms",
            "max_backwards_wait_ms",
            0,
            10_000,
        )? {
            config.max_backwards_wait_ms = n;
        }
        if let Some(n) = number(
            args.reserve_ms.as_deref(),
            "reserve-ms",
            "reserve_ms",
            100,
            60_000,
        )? {
            config.reserve_ms = n;
        }
        if let Some(n) = number(
            args.max_clock_step_ms.as_deref(),
            "max-clock-step-ms",
            "max_clock_step_ms",
            1,
            3_600_000,
        )? {
            config.max_clock_step_ms = n;
        }
        if let Some(n) = number(
            args.clock_step_trust_secs.as_deref(),
            "clock-step-trust-secs",
            "clock_step_trust_secs",
            1,
            3600,
        )? {
            config.clock_step_trust = Duration::from_secs(n);
        }
        if let Some(n) = number(
            args.max_connections.as_deref(),
            "max-connections",
            "max_connections",
            1,
            1_000_000,
        )? {
            config.max_connections = usize::try_from(n).unwrap_or(usize::MAX);
        }
        if let Some(n) = number(
            args.request_timeout_ms.as_deref(),
            "request-timeout-ms",
            "request_timeout_ms",
            1,
            3_600_000,
        )? {
            config.request_timeout = Duration::from_millis(n);
        }
        if let Some(n) = number(
            args.idle_timeout_ms.as_deref(),
            "idle-timeout-ms",
            "idle_timeout_ms",
            1,
            3_600_000,
        )? {
            config.idle_timeout = Duration::from_millis(n);
        }
        if let Some(n) = number(
            args.shutdown_timeout_ms.as_deref(),
            "shutdown-timeout-ms",
            "shutdown_timeout_ms",
            0,
            3_600_000,
        )? {
            config.shutdown_timeout = Duration::from_millis(n);
        }
        if let Some(n) = number(
            args.worker_threads.as_deref(),
            "worker-threads",
            "worker_threads",
            1,
            1024,
        )? {
            config.worker_threads = usize::try_from(n).unwrap_or(1);
        }
        if let Some((text, name)) = src.pick(args.log_format.as_deref(), "log-format", "log_format")
        {
            config.log_format = match text.as_str() {
                "human" => LogFormat::Human,
                "json" => LogFormat::Json,
                _ => {
                    return Err(ConfigError::invalid(
                        &name,
                        format!("expected human or json, found {text:?}"),
                    ));
                }
            };
        }
        if let Some((text, _)) = src.pick(args.log.as_deref(), "log", "log") {
            config.log = text;
        }
        if let Some((text, name)) = src.pick(
            args.advertise_addr.as_deref(),
            "advertise-addr",
            "advertise_addr",
        ) {
            config.advertise_addr =
                Some(parse_advertise(&text).map_err(|e| ConfigError::invalid(&name, e))?);
        }
        let endpoints = src.pick(
            args.etcd_endpoints.as_deref(),
            "etcd-endpoints",
            "etcd_endpoints",
        );
        let prefix = src.pick(args.etcd_prefix.as_deref(), "etcd-prefix", "etcd_prefix");
        let ttl = number(
            args.lease_ttl_secs.as_deref(),
            "lease-ttl-secs",
            "lease_ttl_secs",
            2,
            300,
        )?;
        let claim_timeout = number(
            args.claim_timeout_secs.as_deref(),
            "claim-timeout-secs",
            "claim_timeout_secs",
            0,
            3600,
        )?;
        match endpoints {
            Some((text, name)) => {
                let endpoints =
                    parse_endpoints(&text).map_err(|e| ConfigError::invalid(&name, e))?;
                let mut etcd = EtcdConfig::new(endpoints);
                if let Some((text, name)) = prefix {
                    etcd.prefix =
                        parse_prefix(&text).map_err(|e| ConfigError::invalid(&name, e))?;
                }
                if let Some(ttl) = ttl {
                    etcd.lease_ttl_secs = ttl;
                }
                etcd.claim_timeout =
                    Duration::from_secs(claim_timeout.unwrap_or(etcd.lease_ttl_secs + 2));
                let https = etcd.endpoints.iter().any(|e| e.starts_with("https://"));
                etcd.tls = resolve_etcd_tls(args, &src, https)?;
                etcd.auth = resolve_etcd_auth(args, &src)?;
                config.etcd = Some(etcd);
            }
            None => {
                let zookeeper_given = args.zookeeper.is_some()
                    || file
                        .as_ref()
                        .is_some_and(|f| f.table.contains_key("zookeeper"));
                let stray = [
                    (prefix.is_some(), "--etcd-prefix"),
                    (ttl.is_some(), "--lease-ttl-secs"),
                    (args.etcd_ca.is_some(), "--etcd-ca"),
                    (args.etcd_cert.is_some(), "--etcd-cert"),
                    (args.etcd_key.is_some(), "--etcd-key"),
                    (args.etcd_user.is_some(), "--etcd-user"),
                    (args.etcd_password_file.is_some(), "--etcd-password-file"),
                    (
                        claim_timeout.is_some() && !zookeeper_given,
                        "--claim-timeout-secs",
                    ),
                ];
                if let Some((_, flag)) = stray.iter().find(|(set, _)| *set) {
                    return Err(ConfigError(format!(
                        "{flag} needs --etcd-endpoints (or SNOWFLAKE_ETCD_ENDPOINTS): without a \
                         coordination service the pair comes from --datacenter-id/--worker-id alone"
                    )));
                }
            }
        }
        let zookeeper = src.pick(args.zookeeper.as_deref(), "zookeeper", "zookeeper");
        let zk_path = src.pick(
            args.zookeeper_path.as_deref(),
            "zookeeper-path",
            "zookeeper_path",
        );
        let session_timeout = number(
            args.zookeeper_session_timeout_ms.as_deref(),
            "zookeeper-session-timeout-ms",
            "zookeeper_session_timeout_ms",
            1000,
            120_000,
        )?;
        let skew = number(
            args.max_peer_skew_ms.as_deref(),
            "max-peer-skew-ms",
            "max_peer_skew_ms",
            0,
            3_600_000,
        )?;
        match zookeeper {
            Some((text, name)) => {
                if config.etcd.is_some() {
                    return Err(ConfigError(
                        "--etcd-endpoints and --zookeeper both lease the worker id; choose one \
                         coordination service"
                            .into(),
                    ));
                }
                if config.thrift_addr.is_none() {
                    return Err(ConfigError(
                        "--zookeeper needs the Thrift listener (--thrift-addr): the znode holds \
                         this node's Thrift address, and peers check each other over Thrift"
                            .into(),
                    ));
                }
                let servers = parse_servers(&text).map_err(|e| ConfigError::invalid(&name, e))?;
                let mut zk = ZooKeeperConfig::new(servers);
                if let Some((text, name)) = zk_path {
                    zk.path = parse_prefix(&text).map_err(|e| ConfigError::invalid(&name, e))?;
                }
                if let Some(ms) = session_timeout {
                    zk.session_timeout = Duration::from_millis(ms);
                }
                if let Some(ms) = skew {
                    zk.max_peer_skew_ms = ms;
                }
                zk.claim_timeout = match claim_timeout {
                    Some(secs) => Duration::from_secs(secs),
                    None => zk.session_timeout + Duration::from_secs(2),
                };
                if let Some((path, name)) = path_setting(
                    &src,
                    args.zookeeper_auth_file.as_ref(),
                    "zookeeper-auth-file",
                    "zookeeper_auth_file",
                )? {
                    zk.auth = Some(read_digest(&path, &name)?);
                }
                zk.tls = resolve_client_tls(
                    &src,
                    [
                        (args.zookeeper_ca.as_ref(), "zookeeper-ca"),
                        (args.zookeeper_cert.as_ref(), "zookeeper-cert"),
                        (args.zookeeper_key.as_ref(), "zookeeper-key"),
                    ],
                )?;
                config.zookeeper = Some(zk);
            }
            None => {
                let stray = [
                    (zk_path.is_some(), "--zookeeper-path"),
                    (args.zookeeper_auth_file.is_some(), "--zookeeper-auth-file"),
                    (args.zookeeper_ca.is_some(), "--zookeeper-ca"),
                    (args.zookeeper_cert.is_some(), "--zookeeper-cert"),
                    (args.zookeeper_key.is_some(), "--zookeeper-key"),
                    (session_timeout.is_some(), "--zookeeper-session-timeout-ms"),
                    (skew.is_some(), "--max-peer-skew-ms"),
                ];
                if let Some((_, flag)) = stray.iter().find(|(set, _)| *set) {
                    return Err(ConfigError(format!(
                        "{flag} needs --zookeeper (or SNOWFLAKE_ZOOKEEPER)"
                    )));
                }
            }
        }
        refuse_cleartext_credentials(args, &src, &config)?;
        if config.http_addr.is_none()
            && config.grpc_addr.is_none()
            && config.thrift_addr.is_none()
            && config.resp_addr.is_none()
        {
            return Err(ConfigError(
                "every listener is off (--http-addr, --grpc-addr and --thrift-addr): the service would \
                 have no way to hand out ids"
                    .into(),
            ));
        }
        Ok(config)
    }
}

/// Refuses credentials that would cross the network unencrypted (an etcd password to an
/// `http://` endpoint, a ZooKeeper digest identity without TLS) unless
/// `--allow-cleartext-credentials` says the network is trusted.
fn refuse_cleartext_credentials(
    args: &ServeArgs,
    src: &Sources<'_>,
    config: &Config,
) -> Result<(), ConfigError> {
    let flag = args.allow_cleartext_credentials.then(|| "true".to_owned());
    let allowed = match src.pick(
        flag.as_deref(),
        "allow-cleartext-credentials",
        "allow_cleartext_credentials",
    ) {
        Some((text, name)) => match text.as_str() {
            "true" => true,
            "false" => false,
            _ => {
                return Err(ConfigError::invalid(
                    &name,
                    format!("expected true or false, found {text:?}"),
                ));
            }
        },
        None => false,
    };
    if allowed {
        return Ok(());
    }
    const WAY_OUT: &str = "or, only on a network you trust, pass --allow-cleartext-credentials \
        (SNOWFLAKE_ALLOW_CLEARTEXT_CREDENTIALS=true, allow_cleartext_credentials = true in the \
        config file)";
    if let Some(etcd) = &config.etcd
        && let Some(auth) = &etcd.auth
    {
        let plain: Vec<&str> = etcd
            .endpoints
            .iter()
            .filter(|e| e.starts_with("http://"))
            .map(String::as_str)
            .collect();
        if !plain.is_empty() {
            return Err(ConfigError(format!(
                "refusing to send the etcd password of --etcd-user {:?} in cleartext to {}: \
                 anyone on the network path could read it and then rewrite or delete the \
                 fleet's claims and marks (duplicate IDs). Use https:// endpoints with \
                 --etcd-ca, {WAY_OUT}",
                auth.user,
                plain.join(",")
            )));
        }
    }
    if let Some(zookeeper) = &config.zookeeper
        && zookeeper.auth.is_some()
        && zookeeper.tls.is_none()
    {
        return Err(ConfigError(format!(
            "refusing to send the ZooKeeper digest identity of --zookeeper-auth-file in cleartext \
             to {}: anyone on the network path could read it and then rewrite or delete the \
             fleet's znodes and marks (duplicate IDs). Use ZooKeeper's secure client port with \
             --zookeeper-ca (and --zookeeper-cert/--zookeeper-key), {WAY_OUT}",
            zookeeper.servers.join(",")
        )));
    }
    Ok(())
}

/// `--tls-cert`, `--tls-key`, `--tls-client-ca`: all paths, the key and the certificate
/// together, the client CA only with them. The files themselves are read by [`crate::tls`].
fn resolve_tls(
    args: &ServeArgs,
    src: &Sources<'_>,
) -> Result<Option<crate::tls::TlsFiles>, ConfigError> {
    let path = |cli: &Option<PathBuf>, flag: &str, key: &str| {
        path_setting(src, cli.as_ref(), flag, key).map(|found| found.map(|(path, _)| path))
    };
    let cert = path(&args.tls_cert, "tls-cert", "tls_cert")?;
    let key = path(&args.tls_key, "tls-key", "tls_key")?;
    let client_ca = path(&args.tls_client_ca, "tls-client-ca", "tls_client_ca")?;
    match (cert, key) {
        (Some(cert), Some(key)) => Ok(Some(crate::tls::TlsFiles {
            cert,
            key,
            client_ca,
        })),
        (Some(_), None) => Err(ConfigError(
            "--tls-cert needs --tls-key (the certificate's private key)".into(),
        )),
        (None, Some(_)) => Err(ConfigError(
            "--tls-key needs --tls-cert (the certificate it belongs to)".into(),
        )),
        (None, None) if client_ca.is_some() => Err(ConfigError(
            "--tls-client-ca needs --tls-cert and --tls-key: client certificates are asked for \
             over TLS only"
                .into(),
        )),
        (None, None) => Ok(None),
    }
}

/// A file path setting: `Some` when given (an empty path is an error).
fn path_setting(
    src: &Sources<'_>,
    cli: Option<&PathBuf>,
    flag: &str,
    key: &str,
) -> Result<Option<(PathBuf, String)>, ConfigError> {
    let cli = cli.map(|p| p.to_string_lossy().into_owned());
    match src.pick(cli.as_deref(), flag, key) {
        Some((text, name)) if text.is_empty() => Err(ConfigError::invalid(
            &name,
            "expected a file path, found an empty string",
        )),
        Some((text, name)) => Ok(Some((PathBuf::from(text), name))),
        None => Ok(None),
    }
}

/// `--etcd-ca`, `--etcd-cert`, `--etcd-key`: read and checked now, so a bad file stops the
/// start with one line. TLS goes with `https://` endpoints, and they need a CA.
fn resolve_etcd_tls(
    args: &ServeArgs,
    src: &Sources<'_>,
    https: bool,
) -> Result<Option<ClientTls>, ConfigError> {
    let flags = [
        (args.etcd_ca.as_ref(), "etcd-ca"),
        (args.etcd_cert.as_ref(), "etcd-cert"),
        (args.etcd_key.as_ref(), "etcd-key"),
    ];
    if !https {
        for (cli, flag) in flags {
            if let Some((_, name)) = path_setting(src, cli, flag, &flag.replace('-', "_"))? {
                return Err(ConfigError(format!(
                    "{name} needs https:// etcd endpoints (--etcd-endpoints https://HOST:PORT)"
                )));
            }
        }
        return Ok(None);
    }
    match resolve_client_tls(src, flags)? {
        Some(tls) => Ok(Some(tls)),
        None => Err(ConfigError(
            "https:// etcd endpoints need --etcd-ca (the CA that signed etcd's server certificate)"
                .into(),
        )),
    }
}

/// A CA file, and a certificate and key file, for TLS to a coordination service (the flags'
/// names given without `--`, e.g. `etcd-ca`): read and checked now. `None` when none is given;
/// a certificate needs its key and the CA.
fn resolve_client_tls(
    src: &Sources<'_>,
    [(ca, ca_flag), (cert, cert_flag), (key, key_flag)]: [(Option<&PathBuf>, &str); 3],
) -> Result<Option<ClientTls>, ConfigError> {
    let setting = |cli, flag: &str| path_setting(src, cli, flag, &flag.replace('-', "_"));
    let ca = setting(ca, ca_flag)?;
    let cert = setting(cert, cert_flag)?;
    let key = setting(key, key_flag)?;
    let read = |path: &Path, flag: &str| {
        let flag = format!("--{flag}");
        let pem = crate::tls::read_pem_file(path, &flag).map_err(ConfigError)?;
        Ok::<_, ConfigError>((pem, flag))
    };
    let Some((ca_path, _)) = ca else {
        if cert.is_some() || key.is_some() {
            return Err(ConfigError(format!(
                "--{cert_flag} and --{key_flag} need --{ca_flag} (the CA to verify the server with)"
            )));
        }
        return Ok(None);
    };
    let (ca_pem, flag) = read(&ca_path, ca_flag)?;
    crate::tls::parse_certs(&ca_pem, &ca_path, &flag).map_err(ConfigError)?;
    let mut files = vec![ca_path];
    let identity = match (cert, key) {
        (Some((cert_path, _)), Some((key_path, _))) => {
            let (cert_pem, flag) = read(&cert_path, cert_flag)?;
            crate::tls::parse_certs(&cert_pem, &cert_path, &flag).map_err(ConfigError)?;
            let (key_pem, flag) = read(&key_path, key_flag)?;
            crate::tls::parse_key(&key_pem, &key_path, &flag).map_err(ConfigError)?;
            files.extend([cert_path, key_path]);
            Some((
                cert_pem,
                Secret::new(String::from_utf8_lossy(&key_pem).into_owned()),
            ))
        }
        (Some(_), None) => {
            return Err(ConfigError(format!(
                "--{cert_flag} needs --{key_flag} (the certificate's private key)"
            )));
        }
        (None, Some(_)) => {
            return Err(ConfigError(format!(
                "--{key_flag} needs --{cert_flag} (the certificate it belongs to)"
            )));
        }
        (None, None) => None,
    };
    Ok(Some(ClientTls {
        ca_pem,
        identity,
        files,
    }))
}

/// `--etcd-user` with its password from `--etcd-password-file` or `SNOWFLAKE_ETCD_PASSWORD`.
fn resolve_etcd_auth(args: &ServeArgs, src: &Sources<'_>) -> Result<Option<EtcdAuth>, ConfigError> {
    let user = src.pick(args.etcd_user.as_deref(), "etcd-user", "etcd_user");
    let file = path_setting(
        src,
        args.etcd_password_file.as_ref(),
        "etcd-password-file",
        "etcd_password_file",
    )?;
    let from_env = std::env::var("SNOWFLAKE_ETCD_PASSWORD").ok();
    let password = match (file, from_env) {
        (Some((path, name)), _) => Some(read_password(&path, &name)?),
        (None, Some(value)) if !value.is_empty() => Some(Secret::new(value)),
        (None, _) => None,
    };
    match (user, password) {
        (Some((user, name)), Some(password)) => {
            if user.is_empty() || user.len() > 256 || user.chars().any(char::is_control) {
                return Err(ConfigError::invalid(
                    &name,
                    "expected an etcd user name (1..=256 printable characters)",
                ));
            }
            Ok(Some(EtcdAuth { user, password }))
        }
        (Some((_, name)), None) => Err(ConfigError(format!(
            "{name} needs a password: --etcd-password-file FILE or SNOWFLAKE_ETCD_PASSWORD"
        ))),
        (None, Some(_)) => Err(ConfigError(
            "an etcd password (--etcd-password-file or SNOWFLAKE_ETCD_PASSWORD) needs --etcd-user"
                .into(),
        )),
        (None, None) => Ok(None),
    }
}

/// A password file: one line (a trailing newline is not part of it), at most 4 KiB.
fn read_password(path: &Path, name: &str) -> Result<Secret, ConfigError> {
    let bytes = crate::tls::read_pem_file(path, name).map_err(ConfigError)?;
    if bytes.len() > 4096 {
        return Err(ConfigError::invalid(
            name,
            format!(
                "{} is larger than 4096 bytes; expected one line",
                path.display()
            ),
        ));
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| ConfigError::invalid(name, format!("{} is not UTF-8 text", path.display())))?;
    let password = text.strip_suffix('\n').unwrap_or(&text);
    let password = password.strip_suffix('\r').unwrap_or(password);
    if password.is_empty() || password.contains('\n') {
        return Err(ConfigError::invalid(
            name,
            format!("{} must hold the password on one line", path.display()),
        ));
    }
    warn_if_world_readable(path);
    Ok(Secret::new(password))
}

/// A digest identity file: one line `user:password`.
fn read_digest(path: &Path, name: &str) -> Result<Secret, ConfigError> {
    let line = read_password(path, name)?;
    match line.expose().split_once(':') {
        Some((user, password)) if !user.is_empty() && !password.is_empty() => Ok(line),
        _ => Err(ConfigError::invalid(
            name,
            format!(
                "{} must hold one line user:password (ZooKeeper's digest scheme)",
                path.display()
            ),
        )),
    }
}

/// Warns when a secret's file can be read by every user.
fn warn_if_world_readable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = std::fs::metadata(path)
        && meta.permissions().mode() & 0o004 != 0
    {
        // Logging may not be set up yet when the configuration is resolved.
        eprintln!(
            "warning: {} is readable by every user on this machine; make it 0600 or 0640",
            path.display()
        );
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

/// The keys a config file may hold.
const FILE_KEYS: &[&str] = &[
    "http_addr",
    "resp_addr",
    "resp_max_bulk_bytes",
    "resp_max_args",
    "resp_max_inline_bytes",
    "admin_addr",
    "admin_status_page",
    "tls_cert",
    "tls_key",
    "tls_client_ca",
    "grpc_addr",
    "grpc_max_concurrent_streams",
    "thrift_addr",
    "thrift_max_frame_bytes",
    "epoch_ms",
    "layout",
    "datacenter_id",
    "worker_id",
    "state_dir",
    "max_batch",
    "max_backwards_wait_ms",
    "reserve_ms",
    "max_clock_step_ms",
    "clock_step_trust_secs",
    "max_connections",
    "request_timeout_ms",
    "idle_timeout_ms",
    "shutdown_timeout_ms",
    "worker_threads",
    "log_format",
    "log",
    "etcd_endpoints",
    "etcd_prefix",
    "etcd_ca",
    "etcd_cert",
    "etcd_key",
    "etcd_user",
    "etcd_password_file",
    "lease_ttl_secs",
    "claim_timeout_secs",
    "advertise_addr",
    "zookeeper",
    "zookeeper_path",
    "zookeeper_auth_file",
    "zookeeper_ca",
    "zookeeper_cert",
    "zookeeper_key",
    "zookeeper_session_timeout_ms",
    "max_peer_skew_ms",
    "worker_id_from_hostname",
    "allow_cleartext_credentials",
    "hostname",
    "worker_id_map",
];

/// A config file larger than this is refused rather than read.
const MAX_CONFIG_FILE_BYTES: u64 = 1024 * 1024;

#[derive(Debug)]
struct ConfigFile {
    path: PathBuf,
    table: toml::Table,
}

impl ConfigFile {
    fn read(path: &Path) -> Result<ConfigFile, ConfigError> {
        let shown = path.display();
        let meta = std::fs::metadata(path)
            .map_err(|e| ConfigError(format!("cannot read config file {shown}: {e}")))?;
        if meta.len() > MAX_CONFIG_FILE_BYTES {
            return Err(ConfigError(format!(
                "config file {shown} is {} bytes; a config file is at most {MAX_CONFIG_FILE_BYTES} bytes",
                meta.len()
            )));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError(format!("cannot read config file {shown}: {e}")))?;
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            ConfigError(format!(
                "config file {shown} is not valid TOML: {}",
                e.to_string().replace('\n', " ")
            ))
        })?;
        if let Some(unknown) = table.keys().find(|k| !FILE_KEYS.contains(&k.as_str())) {
            return Err(ConfigError(format!(
                "unknown setting {unknown:?} in config file {shown}; known settings: {}",
                FILE_KEYS.join(", ")
            )));
        }
        Ok(ConfigFile {
            path: path.to_owned(),
            table,
        })
    }
}

struct Sources<'a> {
    file: Option<&'a ConfigFile>,
}

impl Sources<'_> {
    /// The value of a setting from the flag/environment, else the file; with its source's name.
    fn pick(&self, cli: Option<&str>, flag: &str, key: &str) -> Option<(String, String)> {
        if let Some(value) = cli {
            let env = format!("SNOWFLAKE_{}", flag.replace('-', "_").to_uppercase());
            return Some((value.to_owned(), format!("--{flag} (or {env})")));
        }
        let file = self.file?;
        let value = file.table.get(key)?;
        let name = format!("{key} in {}", file.path.display());
        let text = match value {
            toml::Value::String(s) => s.clone(),
            toml::Value::Integer(i) => i.to_string(),
            // `{:?}` keeps the fraction or exponent (`3.0`, `100000.0`), so a float is never
            // taken for a whole number.
            toml::Value::Float(f) => format!("{f:?}"),
            toml::Value::Boolean(b) => b.to_string(),
            other => format!("<{}>", other.type_str()),
        };
        Some((text, name))
    }
}

fn parse_addr(text: &str) -> Result<Option<SocketAddr>, String> {
    if text == "off" {
        return Ok(None);
    }
    text.parse::<SocketAddr>().map(Some).map_err(|_| {
        format!("expected IP:PORT (e.g. 127.0.0.1:8080 or [::1]:8080) or off, found {text:?}")
    })
}

/// The most etcd members one node may be given.
const MAX_ETCD_ENDPOINTS: usize = 32;

/// `HOST:PORT`: a non-empty host of letters, digits, `.-_` (or a bracketed IPv6 address) and a
/// port in 1..=65535.
fn is_host_port(text: &str) -> bool {
    text.rsplit_once(':').is_some_and(|(host, port)| {
        !host.is_empty()
            && port.parse::<u16>().is_ok_and(|p| p > 0)
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b".-_[]:".contains(&b))
    })
}

/// `URL[,URL...]`: each `http://HOST:PORT` (or `HOST:PORT`, meaning http).
fn parse_endpoints(text: &str) -> Result<Vec<String>, String> {
    let mut urls = Vec::new();
    for item in text.split(',').map(str::trim) {
        let shown: String = item.chars().take(100).collect();
        if item.is_empty() {
            return Err(format!(
                "expected a comma-separated list of http://HOST:PORT, found an empty entry in {:?}",
                text.chars().take(200).collect::<String>()
            ));
        }
        let (scheme, authority) = match item.strip_prefix("https://") {
            Some(rest) => ("https", rest),
            None => ("http", item.strip_prefix("http://").unwrap_or(item)),
        };
        let authority = authority.strip_suffix('/').unwrap_or(authority);
        if !is_host_port(authority) {
            return Err(format!(
                "expected http://HOST:PORT or https://HOST:PORT (e.g. http://127.0.0.1:2379), \
                 found {shown:?}"
            ));
        }
        let url = format!("{scheme}://{authority}");
        if urls
            .first()
            .is_some_and(|first: &String| !first.starts_with(&format!("{scheme}://")))
        {
            return Err(format!(
                "expected every endpoint to use the same scheme (all http:// or all https://), \
                 found {shown:?} beside {:?}",
                urls[0]
            ));
        }
        if url.parse::<http::Uri>().is_err() {
            return Err(format!("expected http://HOST:PORT, found {shown:?}"));
        }
        if !urls.contains(&url) {
            urls.push(url);
        }
    }
    if urls.len() > MAX_ETCD_ENDPOINTS {
        return Err(format!(
            "expected at most {MAX_ETCD_ENDPOINTS} endpoints, found {}",
            urls.len()
        ));
    }
    Ok(urls)
}

/// A key prefix: `/` then segments of letters, digits, `-`, `_` and `.`, separated by `/`.
fn parse_prefix(text: &str) -> Result<String, String> {
    let shown: String = text.chars().take(100).collect();
    let trimmed = text.strip_suffix('/').unwrap_or(text);
    let valid = trimmed.len() <= 200
        && trimmed.starts_with('/')
        && trimmed[1..].split('/').all(|segment| {
            !segment.is_empty()
                && segment
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        });
    if valid {
        Ok(trimmed.to_owned())
    } else {
        Err(format!(
            "expected a key prefix like /snowflake or /prod/ids (`/`-separated segments of \
             letters, digits, `-`, `_`, `.`; at most 200 characters), found {shown:?}"
        ))
    }
}

/// `HOST:PORT[,HOST:PORT...]` of a ZooKeeper ensemble.
fn parse_servers(text: &str) -> Result<Vec<String>, String> {
    let mut servers = Vec::new();
    for item in text.split(',').map(str::trim) {
        let shown: String = item.chars().take(100).collect();
        if !is_host_port(item) {
            return Err(format!(
                "expected HOST:PORT[,HOST:PORT...] (e.g. 127.0.0.1:2181), found {shown:?}"
            ));
        }
        if !servers.iter().any(|s| s == item) {
            servers.push(item.to_owned());
        }
    }
    if servers.len() > MAX_ETCD_ENDPOINTS {
        return Err(format!(
            "expected at most {MAX_ETCD_ENDPOINTS} servers, found {}",
            servers.len()
        ));
    }
    Ok(servers)
}

/// A host name: letters, digits, `-`, `.` and `_`, at most 253 characters.
fn parse_hostname(text: &str) -> Result<String, String> {
    let valid = !text.is_empty()
        && text.len() <= 253
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b));
    if valid {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "expected a host name (letters, digits, `-`, `.`, `_`; at most 253 characters), found {:?}",
            text.chars().take(100).collect::<String>()
        ))
    }
}

/// The machine's host name (`unknown` if it cannot be read).
pub fn machine_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// The worker id at the end of a StatefulSet pod's host name: `snowflake-7` → 7. Only the
/// canonical spelling a StatefulSet gives (no leading zero, `0` alone): `snowflake-07` is
/// refused, because `snowflake-7` and `snowflake-07` would otherwise both claim worker 7.
pub fn worker_from_ordinal(hostname: &str, layout: &Layout) -> Result<u64, String> {
    let ordinal = hostname
        .rsplit_once('-')
        .map(|(_, tail)| tail)
        .filter(|tail| !tail.is_empty() && tail.bytes().all(|b| b.is_ascii_digit()));
    let Some(ordinal) = ordinal else {
        return Err(format!(
            "host name {hostname:?} does not end in -N (a StatefulSet ordinal, as in snowflake-7)"
        ));
    };
    let max = layout.max_worker_id();
    if ordinal.len() > 1 && ordinal.starts_with('0') {
        return Err(format!(
            "the ordinal {ordinal} of host name {hostname:?} has a leading zero; a StatefulSet \
             ordinal never does (snowflake-7, not snowflake-07), and two spellings of one number \
             would claim one worker id: expected 0..={max} written without leading zeros"
        ));
    }
    match ordinal.parse::<u64>() {
        Ok(n) if n <= max => Ok(n),
        _ => Err(format!(
            "the ordinal {ordinal} of host name {hostname:?} is not a worker id: expected 0..={max}"
        )),
    }
}

/// The config file's `[worker_id_map]`: host name → worker id, no worker given twice.
fn parse_worker_map(
    value: &toml::Value,
    layout: &Layout,
) -> Result<std::collections::BTreeMap<String, u64>, String> {
    let Some(table) = value.as_table() else {
        return Err(format!(
            "expected a table of host name = worker id, found a {}",
            value.type_str()
        ));
    };
    let max = layout.max_worker_id();
    let mut map = std::collections::BTreeMap::new();
    let mut by_worker: std::collections::BTreeMap<u64, &str> = std::collections::BTreeMap::new();
    for (host, worker) in table {
        parse_hostname(host)?;
        let worker = match worker.as_integer() {
            Some(w) if (0..=i64::try_from(max).unwrap_or(i64::MAX)).contains(&w) => {
                u64::try_from(w).unwrap_or(0)
            }
            _ => {
                return Err(format!(
                    "worker id of {host:?}: expected 0..={max}, found {worker}"
                ));
            }
        };
        if let Some(other) = by_worker.insert(worker, host) {
            return Err(format!(
                "{other:?} and {host:?} both map to worker {worker}: two live processes must \
                 never share a worker id"
            ));
        }
        map.insert(host.clone(), worker);
    }
    Ok(map)
}

/// `HOST:PORT` other machines can reach this node at.
fn parse_advertise(text: &str) -> Result<String, String> {
    let shown: String = text.chars().take(100).collect();
    match text.rsplit_once(':') {
        Some((host, _)) if host.len() <= 253 && is_host_port(text) => Ok(text.to_owned()),
        _ => Err(format!(
            "expected HOST:PORT (e.g. 10.0.0.7:7609 or ids-3.internal:7609), found {shown:?}"
        )),
    }
}

fn parse_number(text: &str, min: u64, max: u64) -> Result<u64, String> {
    let shown: String = text.chars().take(40).collect();
    // `u64::from_str` accepts a leading `+`; a setting is plain digits.
    let parsed = if text.starts_with('+') {
        "+".parse::<u64>()
    } else {
        text.parse::<u64>()
    };
    match parsed {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        Ok(_) => Err(format!("expected {min}..={max}, found {shown}")),
        Err(_)
            if text
                .strip_prefix('-')
                .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())) =>
        {
            Err(format!("expected {min}..={max}, found {shown}"))
        }
        Err(_) => Err(format!(
            "expected a whole number in {min}..={max}, found {shown:?}"
        )),
    }
}

/// `$XDG_STATE_HOME/snowflake`, else `$HOME/.local/state/snowflake`, else `./snowflake-state`.
pub fn default_state_dir() -> PathBuf {
    let non_empty = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(dir) = non_empty("XDG_STATE_HOME") {
        dir.join("snowflake")
    } else if let Some(home) = non_empty("HOME") {
        home.join(".local/state/snowflake")
    } else {
        PathBuf::from("snowflake-state")
    }
}

//! `snowflake serve` settings: flags > `SNOWFLAKE_*` environment variables > a TOML file
//! (`--config`) > defaults, all validated before anything is bound.

use snowflake_core::{Field, Layout};
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

    /// Largest number of IDs one request may ask for, 1..=10000000 [default: 100000].
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

    /// Longest time a connection may take to send a request's headers, including idle time
    /// between keep-alive requests, 1..=3600000 ms [default: 60000].
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

/// The validated settings of one `snowflake serve`.
#[derive(Debug, Clone)]
pub struct Config {
    /// HTTP listen address; `None` when off.
    pub http_addr: Option<SocketAddr>,
    /// gRPC listen address; `None` when off.
    pub grpc_addr: Option<SocketAddr>,
    /// Thrift listen address; `None` when off.
    pub thrift_addr: Option<SocketAddr>,
    /// Largest Thrift frame accepted, in bytes.
    pub thrift_max_frame_bytes: usize,
    /// The layout (Twitter's unless `--epoch-ms` says otherwise).
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
    /// Connection cap per listener.
    pub max_connections: usize,
    /// Per-request time limit.
    pub request_timeout: Duration,
    /// Header-read (and keep-alive idle) time limit.
    pub idle_timeout: Duration,
    /// Drain time on shutdown.
    pub shutdown_timeout: Duration,
    /// Runtime worker threads.
    pub worker_threads: usize,
    /// Log format.
    pub log_format: LogFormat,
    /// Log filter.
    pub log: String,
}

impl Config {
    /// Defaults for everything, with a state directory: what tests start from.
    pub fn with_state_dir(state_dir: impl Into<PathBuf>) -> Config {
        Config {
            http_addr: Some(SocketAddr::from(([127, 0, 0, 1], 8080))),
            grpc_addr: Some(SocketAddr::from(([127, 0, 0, 1], 50051))),
            thrift_addr: Some(SocketAddr::from(([127, 0, 0, 1], 7609))),
            thrift_max_frame_bytes: 65_536,
            layout: Layout::TWITTER,
            datacenter_id: 0,
            worker_id: 0,
            state_dir: state_dir.into(),
            max_batch: 100_000,
            max_backwards_wait_ms: 0,
            reserve_ms: 3000,
            max_connections: 4096,
            request_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            shutdown_timeout: Duration::from_secs(10),
            worker_threads: std::thread::available_parallelism().map_or(1, usize::from),
            log_format: LogFormat::Human,
            log: "info".into(),
        }
    }

    /// Resolves flags/environment (`args`, plus the global `--epoch-ms`), the config file and
    /// the defaults into a checked configuration.
    pub fn resolve(args: &ServeArgs, epoch_ms: Option<&str>) -> Result<Config, ConfigError> {
        let file = match &args.config {
            Some(path) => Some(ConfigFile::read(path)?),
            None => None,
        };
        let src = Sources {
            file: file.as_ref(),
        };
        let mut config = Config::with_state_dir(default_state_dir());

        if let Some((text, name)) = src.pick(epoch_ms, "epoch-ms", "epoch_ms") {
            let epoch = Layout::TWITTER
                .parse(Field::Epoch, &text)
                .map_err(|e| ConfigError::invalid(&name, e))?;
            config.layout =
                Layout::with_epoch(epoch).map_err(|e| ConfigError::invalid(&name, e))?;
        }
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
            args.thrift_max_frame_bytes.as_deref(),
            "thrift-max-frame-bytes",
            "thrift_max_frame_bytes",
            64,
            16_384_000,
        )? {
            config.thrift_max_frame_bytes = usize::try_from(n).unwrap_or(usize::MAX);
        }
        if let Some(n) = number(
            args.max_batch.as_deref(),
            "max-batch",
            "max_batch",
            1,
            10_000_000,
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
        if config.http_addr.is_none() && config.grpc_addr.is_none() && config.thrift_addr.is_none()
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
    "grpc_addr",
    "thrift_addr",
    "thrift_max_frame_bytes",
    "epoch_ms",
    "datacenter_id",
    "worker_id",
    "state_dir",
    "max_batch",
    "max_backwards_wait_ms",
    "reserve_ms",
    "max_connections",
    "request_timeout_ms",
    "idle_timeout_ms",
    "shutdown_timeout_ms",
    "worker_threads",
    "log_format",
    "log",
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
            toml::Value::Float(f) => f.to_string(),
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

fn parse_number(text: &str, min: u64, max: u64) -> Result<u64, String> {
    let shown: String = text.chars().take(40).collect();
    match text.parse::<u64>() {
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

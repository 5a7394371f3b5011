//! Validated benchmark settings, and the builder that checks them.

use crate::error::Error;
use std::fmt;
use std::time::Duration;

/// The most connections one run opens.
pub const MAX_CONNECTIONS: u32 = 10_000;
/// The most IDs asked for in one request.
pub const MAX_BATCH: u32 = 1_000_000;
/// The longest measurement (and the longest warm-up) one run may last.
pub const MAX_DURATION: Duration = Duration::from_secs(3600);
/// The most requests one run may be asked to send.
pub const MAX_REQUESTS: u64 = 1_000_000_000_000;
/// The most client worker threads [`run_cli`](crate::run_cli) starts.
pub const MAX_THREADS: usize = 256;
/// The highest total rate `--rate` may ask for, in requests per second.
pub const MAX_RATE: u64 = 10_000_000;
/// The longest a single request (or connection attempt) may take before it counts as a timeout;
/// also the top of the latency histogram.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the measurement lasts when neither a duration nor a request count is given.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(10);
/// How long a request may take before it counts as a timeout, unless configured.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// The target when none is given for HTTP: the service's default HTTP listener, on loopback.
pub const DEFAULT_ADDR: &str = "127.0.0.1:8080";
/// The target when none is given for gRPC: the service's default gRPC listener, on loopback.
pub const DEFAULT_GRPC_ADDR: &str = "127.0.0.1:50051";
/// The target when none is given for Thrift: the service's default Thrift listener, on loopback.
pub const DEFAULT_THRIFT_ADDR: &str = "127.0.0.1:7609";
/// The most IDs per message asked of `StreamIds` under `--stream`.
pub const STREAM_CHUNK: u32 = 4096;
/// How many connections a run opens unless configured.
pub const DEFAULT_CONNECTIONS: u32 = 50;

/// The protocol a benchmark speaks to the service.
///
/// Each protocol lives in its own module behind one internal trait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Protocol {
    /// HTTP/1.1 with JSON bodies: `GET /v1/id` and `GET /v1/ids?count=N`.
    #[default]
    Http,
    /// The 2010 Thrift interface: framed transport, binary protocol, `get_id("bench")`. It has
    /// no batch call, so the batch must be 1.
    Thrift,
    /// gRPC (`snowflake.v1.Snowflake`): `NextId` for a batch of 1, `NextIds` for more, or
    /// `StreamIds` with `--stream`.
    Grpc,
}

impl Protocol {
    /// The lowercase name used on the command line and in reports, e.g. `"http"`.
    pub const fn name(self) -> &'static str {
        match self {
            Protocol::Http => "http",
            Protocol::Thrift => "thrift",
            Protocol::Grpc => "grpc",
        }
    }

    /// The service's default listener for this protocol, on loopback: the target when none is
    /// given (`127.0.0.1:8080`, `127.0.0.1:7609` or `127.0.0.1:50051`).
    pub const fn default_addr(self) -> &'static str {
        match self {
            Protocol::Http => DEFAULT_ADDR,
            Protocol::Thrift => DEFAULT_THRIFT_ADDR,
            Protocol::Grpc => DEFAULT_GRPC_ADDR,
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The settings of one benchmark run, all validated.
///
/// Build one with [`BenchConfig::builder`], or from command-line flags with
/// `BenchConfig::try_from(&args)` ([`BenchArgs`](crate::BenchArgs)).
///
/// ```
/// use snowflake_loadgen::BenchConfig;
/// use std::time::Duration;
///
/// let config = BenchConfig::builder()
///     .addr("127.0.0.1:8080")
///     .connections(8)
///     .batch(100)
///     .duration(Duration::from_secs(2))
///     .build()?;
/// assert_eq!(config.connections(), 8);
/// assert_eq!(config.requests(), None);
/// # Ok::<(), snowflake_loadgen::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BenchConfig {
    /// Which protocol to speak.
    protocol: Protocol,
    /// The target as `HOST:PORT`; resolved when the run starts.
    addr: String,
    /// How many connections run concurrently, each closed-loop.
    connections: u32,
    /// The upper bound on the measurement's length (after the warm-up).
    duration: Duration,
    /// Stop after this many measured requests, if set.
    requests: Option<u64>,
    /// IDs per request.
    batch: u32,
    /// How long to send unrecorded requests before measuring.
    warmup: Duration,
    /// Worker threads of the runtime [`run_cli`](crate::run_cli) builds.
    threads: usize,
    /// How long one request or connection attempt may take.
    timeout: Duration,
    /// Whether to print a once-a-second progress line on stderr.
    progress: bool,
    /// The total requests per second to offer on a fixed schedule; `None` for closed loop.
    rate: Option<u64>,
    /// Whether gRPC requests are `StreamIds` calls.
    stream: bool,
    /// TLS to the service (HTTPS, gRPC over TLS).
    tls: Option<crate::tls::BenchTls>,
    /// The largest valid ID: the service's layout's (an answer with a larger one is bad).
    max_id: u64,
}

impl BenchConfig {
    /// A builder holding the defaults: HTTP to `127.0.0.1:8080` (or the protocol's default
    /// address, see [`Protocol::default_addr`]), 50 connections, 10 s, batch 1,
    /// no warm-up, 1 thread, 5 s timeout, no progress line, closed loop (no rate).
    pub fn builder() -> BenchConfigBuilder {
        BenchConfigBuilder::default()
    }

    /// Which protocol the run speaks.
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// The target, `HOST:PORT`.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// How many concurrent connections the run opens.
    pub fn connections(&self) -> u32 {
        self.connections
    }

    /// The longest the measurement lasts (after the warm-up). A run bounded only by a request
    /// count gets [`MAX_DURATION`] here as a safety cap.
    pub fn duration(&self) -> Duration {
        self.duration
    }

    /// The number of measured requests after which the run stops, if any.
    pub fn requests(&self) -> Option<u64> {
        self.requests
    }

    /// IDs asked for per request.
    pub fn batch(&self) -> u32 {
        self.batch
    }

    /// How long the unrecorded warm-up lasts.
    pub fn warmup(&self) -> Duration {
        self.warmup
    }

    /// Worker threads for the client runtime built by [`run_cli`](crate::run_cli);
    /// [`run`](crate::run) uses whatever runtime it is called on.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// How long one request or connection attempt may take before it counts as a timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Whether the run prints a progress line on stderr.
    pub fn progress(&self) -> bool {
        self.progress
    }

    /// The total load offered, in requests per second, when the run sends on a fixed schedule
    /// (see [`BenchConfigBuilder::rate`]); `None` for a closed-loop run.
    pub fn rate(&self) -> Option<u64> {
        self.rate
    }

    /// Whether each gRPC request is one `StreamIds` call for [`batch`](Self::batch) IDs
    /// (see [`BenchConfigBuilder::stream`]).
    pub fn stream(&self) -> bool {
        self.stream
    }

    /// TLS to the service, if any.
    pub fn tls(&self) -> Option<&crate::tls::BenchTls> {
        self.tls.as_ref()
    }

    /// This configuration against a service of `layout`.
    pub fn with_layout(mut self, layout: snowflake_core::Layout) -> BenchConfig {
        self.max_id = layout.max_id().as_u64();
        self
    }

    /// The largest ID an answer may hold: the layout's (see [`BenchConfigBuilder::layout`]).
    pub fn max_id(&self) -> u64 {
        self.max_id
    }
}

/// Collects benchmark settings; [`build`](BenchConfigBuilder::build) validates them all.
#[derive(Debug, Clone)]
pub struct BenchConfigBuilder {
    /// See [`BenchConfig::protocol`].
    protocol: Protocol,
    /// See [`BenchConfig::addr`]; `None` for the protocol's default.
    addr: Option<String>,
    /// See [`BenchConfig::connections`].
    connections: u32,
    /// The duration asked for, if any.
    duration: Option<Duration>,
    /// See [`BenchConfig::requests`].
    requests: Option<u64>,
    /// See [`BenchConfig::batch`].
    batch: u32,
    /// See [`BenchConfig::warmup`].
    warmup: Duration,
    /// See [`BenchConfig::threads`].
    threads: usize,
    /// See [`BenchConfig::timeout`].
    timeout: Duration,
    /// See [`BenchConfig::progress`].
    progress: bool,
    /// See [`BenchConfig::rate`].
    rate: Option<u64>,
    /// See [`BenchConfig::stream`].
    stream: bool,
    /// See [`BenchConfig::tls`].
    tls: Option<crate::tls::BenchTls>,
    /// See [`BenchConfig::max_id`].
    max_id: u64,
}

impl Default for BenchConfigBuilder {
    fn default() -> Self {
        BenchConfigBuilder {
            protocol: Protocol::Http,
            addr: None,
            connections: DEFAULT_CONNECTIONS,
            duration: None,
            requests: None,
            batch: 1,
            warmup: Duration::ZERO,
            threads: 1,
            timeout: DEFAULT_TIMEOUT,
            progress: false,
            rate: None,
            stream: false,
            tls: None,
            max_id: snowflake_core::SnowflakeId::MAX.as_u64(),
        }
    }
}

impl BenchConfigBuilder {
    /// The protocol to speak (default HTTP).
    pub fn protocol(mut self, protocol: Protocol) -> Self {
        self.protocol = protocol;
        self
    }

    /// The target as `HOST:PORT`, e.g. `127.0.0.1:8080` or `[::1]:8080` (default: the
    /// protocol's, see [`Protocol::default_addr`]).
    pub fn addr(mut self, addr: impl Into<String>) -> Self {
        self.addr = Some(addr.into());
        self
    }

    /// For gRPC: ask for each request's [`batch`](Self::batch) IDs with one server-streaming
    /// `StreamIds` call (at most 4096 IDs per message) instead of `NextId`/`NextIds` (default
    /// off). Only valid with [`Protocol::Grpc`].
    pub fn stream(mut self, stream: bool) -> Self {
        self.stream = stream;
        self
    }

    /// Speak TLS to the service (HTTP and gRPC; Thrift has none). `None` clears it.
    pub fn tls(mut self, tls: impl Into<Option<crate::tls::BenchTls>>) -> Self {
        self.tls = tls.into();
        self
    }

    /// Concurrent connections, `1..=10000` (default 50).
    pub fn connections(mut self, connections: u32) -> Self {
        self.connections = connections;
        self
    }

    /// The longest the measurement lasts, `1ms..=3600s`. Without a duration and without a
    /// request count the run lasts 10 s. `None` clears it.
    pub fn duration(mut self, duration: impl Into<Option<Duration>>) -> Self {
        self.duration = duration.into();
        self
    }

    /// Stop after this many measured requests, `1..=10^12`; with a duration too, whichever
    /// comes first stops the run. `None` clears it.
    pub fn requests(mut self, requests: impl Into<Option<u64>>) -> Self {
        self.requests = requests.into();
        self
    }

    /// IDs per request, `1..=1000000` (default 1).
    pub fn batch(mut self, batch: u32) -> Self {
        self.batch = batch;
        self
    }

    /// Unrecorded warm-up before the measurement, `0..=3600s` (default none).
    pub fn warmup(mut self, warmup: Duration) -> Self {
        self.warmup = warmup;
        self
    }

    /// Worker threads for [`run_cli`](crate::run_cli)'s runtime, `1..=256` (default 1).
    pub fn threads(mut self, threads: usize) -> Self {
        self.threads = threads;
        self
    }

    /// How long a request or connection attempt may take, `1ms..=60s` (default 5 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Whether to print a once-a-second progress line on stderr (default off).
    pub fn progress(mut self, progress: bool) -> Self {
        self.progress = progress;
        self
    }

    /// Offer a fixed load of `rate` requests per second in total, `1..=10000000`, instead of
    /// closed-loop maximum load (default). The rate is split evenly across the connections, and
    /// every request has a scheduled send time: the run's `j`-th request is due `j / rate`
    /// seconds after the start, and connection `i` of `n` sends requests `i`, `i + n`,
    /// `i + 2n`, ... A connection never sends before a request is due; one that fell behind (a
    /// slow answer) sends its overdue requests back to back, one at a time, until it is on
    /// schedule again.
    ///
    /// Latency is then measured from each request's scheduled send time, not from when it was
    /// actually sent, so the time a request waited behind a slow answer counts (coordinated
    /// omission corrected, as `wrk2` does). `None` clears it.
    pub fn rate(mut self, rate: impl Into<Option<u64>>) -> Self {
        self.rate = rate.into();
        self
    }

    /// The service's layout (default: Twitter's): every answered ID must be at most its
    /// largest, or the answer counts as a bad response.
    pub fn layout(mut self, layout: snowflake_core::Layout) -> Self {
        self.max_id = layout.max_id().as_u64();
        self
    }

    /// Checks every setting and returns the validated config.
    pub fn build(self) -> Result<BenchConfig, Error> {
        let addr = self
            .addr
            .unwrap_or_else(|| self.protocol.default_addr().to_owned());
        check_addr(&addr)?;
        if !(1..=MAX_CONNECTIONS).contains(&self.connections) {
            return Err(Error::invalid(
                "--connections",
                format!("1..={MAX_CONNECTIONS}"),
                self.connections.to_string(),
            ));
        }
        if let Some(duration) = self.duration {
            check_duration(
                "--duration",
                duration,
                Duration::from_millis(1),
                MAX_DURATION,
            )?;
        }
        if let Some(requests) = self.requests
            && !(1..=MAX_REQUESTS).contains(&requests)
        {
            return Err(Error::invalid(
                "--requests",
                format!("1..={MAX_REQUESTS}"),
                requests.to_string(),
            ));
        }
        if !(1..=MAX_BATCH).contains(&self.batch) {
            return Err(Error::invalid(
                "--batch",
                format!("1..={MAX_BATCH}"),
                self.batch.to_string(),
            ));
        }
        if self.protocol == Protocol::Thrift && self.batch != 1 {
            return Err(Error::invalid(
                "--batch",
                "1 with --protocol thrift (the Thrift interface has no batch call)",
                self.batch.to_string(),
            ));
        }
        if let Some(tls) = &self.tls {
            if self.protocol == Protocol::Thrift {
                return Err(Error::invalid(
                    "--tls-ca",
                    "--protocol http or grpc (Thrift has no TLS)",
                    "--protocol thrift",
                ));
            }
            // Checked here so that a connection can never fall back to plaintext.
            tls.client_config(b"h2")
                .map_err(|e| Error::invalid("--tls-ca", "usable TLS files", e))?;
            crate::tls::server_name(&addr)
                .map_err(|e| Error::invalid("--addr", "a host TLS can verify", e))?;
        }
        if self.stream && self.protocol != Protocol::Grpc {
            return Err(Error::invalid(
                "--stream",
                "--protocol grpc",
                format!("--protocol {}", self.protocol),
            ));
        }
        check_duration("--warmup", self.warmup, Duration::ZERO, MAX_DURATION)?;
        if !(1..=MAX_THREADS).contains(&self.threads) {
            return Err(Error::invalid(
                "--threads",
                format!("1..={MAX_THREADS}"),
                self.threads.to_string(),
            ));
        }
        check_duration(
            "--timeout",
            self.timeout,
            Duration::from_millis(1),
            MAX_TIMEOUT,
        )?;
        if let Some(rate) = self.rate
            && !(1..=MAX_RATE).contains(&rate)
        {
            return Err(Error::invalid(
                "--rate",
                format!("1..={MAX_RATE}"),
                rate.to_string(),
            ));
        }
        let duration = match (self.duration, self.requests) {
            (Some(duration), _) => duration,
            (None, Some(_)) => MAX_DURATION,
            (None, None) => DEFAULT_DURATION,
        };
        Ok(BenchConfig {
            protocol: self.protocol,
            addr,
            connections: self.connections,
            duration,
            requests: self.requests,
            batch: self.batch,
            warmup: self.warmup,
            threads: self.threads,
            timeout: self.timeout,
            progress: self.progress,
            rate: self.rate,
            stream: self.stream,
            tls: self.tls,
            max_id: self.max_id,
        })
    }
}

/// Accepts `HOST:PORT` with a non-empty host (IPv6 in brackets) and a port in `1..=65535`.
fn check_addr(addr: &str) -> Result<(), Error> {
    let bad = || Error::invalid("--addr", "HOST:PORT with a port in 1..=65535", addr);
    let (host, port) = addr.rsplit_once(':').ok_or_else(bad)?;
    let host_ok = if let Some(inner) = host.strip_prefix('[') {
        inner.strip_suffix(']').is_some_and(|ip| !ip.is_empty())
    } else {
        !host.is_empty() && !host.contains(':')
    };
    let host_ok = host_ok
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._:[]%".contains(c));
    let port_ok =
        port.bytes().all(|b| b.is_ascii_digit()) && port.parse::<u16>().is_ok_and(|port| port != 0);
    if host_ok && port_ok {
        Ok(())
    } else {
        Err(bad())
    }
}

/// Checks that a duration lies in `min..=max`.
fn check_duration(
    flag: &'static str,
    value: Duration,
    min: Duration,
    max: Duration,
) -> Result<(), Error> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(Error::invalid(
            flag,
            format!("{}..={}", format_duration(min), format_duration(max)),
            format_duration(value),
        ))
    }
}

/// A duration in the shortest of the forms the flags accept: `1500ms`, `10s`, `0s`.
pub(crate) fn format_duration(duration: Duration) -> String {
    if duration.subsec_nanos() == 0 {
        format!("{}s", duration.as_secs())
    } else if duration.subsec_nanos().is_multiple_of(1_000_000) {
        format!("{}ms", duration.as_millis())
    } else {
        format!("{:?}", duration)
    }
}

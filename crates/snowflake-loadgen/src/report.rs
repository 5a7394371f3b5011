//! The result of a run: counts, rates and latency, as text or JSON.

use crate::config::{BenchConfig, Protocol};
use crate::stats::Stats;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// What ended the measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum StopReason {
    /// The configured duration (or the safety cap of a count-bounded run) ran out.
    Duration,
    /// The configured number of requests was done.
    Requests,
    /// Ctrl-C (or the shutdown future given to [`run_with_shutdown`](crate::run_with_shutdown)).
    Interrupted,
}

impl StopReason {
    /// The lowercase name used in reports, e.g. `"duration"`.
    pub const fn name(self) -> &'static str {
        match self {
            StopReason::Duration => "duration",
            StopReason::Requests => "requests",
            StopReason::Interrupted => "interrupted",
        }
    }
}

/// Whether the run spoke TLS to the service (`--tls-ca`), and with a client certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum TlsMode {
    /// Plaintext.
    Off,
    /// TLS, verifying the service's certificate.
    On,
    /// Mutual TLS: TLS with a client certificate (`--tls-client-cert`).
    Mutual,
}

impl TlsMode {
    /// The lowercase name used in reports, e.g. `"mutual"` (the service's start log says the
    /// same: `tls="mutual"`).
    pub const fn name(self) -> &'static str {
        match self {
            TlsMode::Off => "off",
            TlsMode::On => "on",
            TlsMode::Mutual => "mutual",
        }
    }
}

/// Latency percentiles of the successful measured requests, in microseconds.
///
/// In a closed-loop run a request's latency runs from when it was sent; under `--rate`
/// ([`Report::offered_rate`] set) from when it was scheduled to be sent, so time spent waiting
/// behind a slow answer counts too. All zero when no request succeeded. Values are HDR-histogram buckets (3 significant digits),
/// capped at 60 s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[non_exhaustive]
pub struct Latency {
    /// How many requests the percentiles describe.
    pub samples: u64,
    /// The median.
    pub p50: u64,
    /// The 90th percentile.
    pub p90: u64,
    /// The 99th percentile.
    pub p99: u64,
    /// The 99.9th percentile.
    pub p99_9: u64,
    /// The slowest request.
    pub max: u64,
}

/// What a run measured, after any warm-up.
///
/// Printed as text by its [`Display`](fmt::Display) impl, or as one JSON object through
/// `serde::Serialize` (durations in seconds as `elapsed_secs`, latency as `latency_us`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Report {
    /// The protocol spoken.
    pub protocol: Protocol,
    /// Whether it was spoken over TLS (JSON `"tls": "off" | "on" | "mutual"`).
    pub tls: TlsMode,
    /// The target, `HOST:PORT`.
    pub addr: String,
    /// Concurrent connections.
    pub connections: u32,
    /// IDs asked for per request.
    pub batch: u32,
    /// The load offered on a fixed schedule under `--rate`, in requests per second across all
    /// connections; `None` (JSON `null`) for a closed-loop run. When set, latency is measured
    /// from each request's scheduled send time.
    pub offered_rate: Option<u64>,
    /// What ended the measurement.
    pub stopped_by: StopReason,
    /// How long the measurement lasted.
    #[serde(rename = "elapsed_secs", serialize_with = "serialize_secs")]
    pub elapsed: Duration,
    /// Requests sent and finished: `requests_ok + requests_failed`.
    pub requests: u64,
    /// Requests answered with status 200 and exactly the IDs asked for.
    pub requests_ok: u64,
    /// Requests that failed: a non-200 status, a wrong body, a timeout, a lost connection.
    pub requests_failed: u64,
    /// All errors: the failed requests plus failed connection attempts.
    pub errors_total: u64,
    /// Errors by kind, e.g. `http_503`, `bad_response`, `timeout`, `connection_closed`,
    /// `connect_refused`; at most 16 kinds, the rest counted as `other`.
    pub errors: BTreeMap<String, u64>,
    /// IDs received in valid answers.
    pub ids: u64,
    /// Successful requests per second: the achieved rate, also under `--rate`.
    pub requests_per_sec: f64,
    /// IDs received per second.
    pub ids_per_sec: f64,
    /// Latency of the successful requests.
    pub latency_us: Latency,
}

impl Report {
    /// Builds the report from the merged stats of all connections.
    pub(crate) fn new(
        config: &BenchConfig,
        stats: &Stats,
        errors: BTreeMap<String, u64>,
        elapsed: Duration,
        stopped_by: StopReason,
    ) -> Report {
        let secs = elapsed.as_secs_f64();
        let per_sec = |count: u64| {
            if secs > 0.0 { count as f64 / secs } else { 0.0 }
        };
        let histogram = &stats.latency_us;
        let latency_us = if histogram.is_empty() {
            Latency::default()
        } else {
            Latency {
                samples: histogram.len(),
                p50: histogram.value_at_quantile(0.50),
                p90: histogram.value_at_quantile(0.90),
                p99: histogram.value_at_quantile(0.99),
                p99_9: histogram.value_at_quantile(0.999),
                max: histogram.max(),
            }
        };
        Report {
            protocol: config.protocol(),
            tls: match config.tls() {
                None => TlsMode::Off,
                Some(tls) if tls.is_mutual() => TlsMode::Mutual,
                Some(_) => TlsMode::On,
            },
            addr: config.addr().to_owned(),
            connections: config.connections(),
            batch: config.batch(),
            offered_rate: config.rate(),
            stopped_by,
            elapsed,
            requests: stats.ok + stats.failed,
            requests_ok: stats.ok,
            requests_failed: stats.failed,
            errors_total: errors.values().fold(0, |sum, n| sum.saturating_add(*n)),
            errors,
            ids: stats.ids,
            requests_per_sec: per_sec(stats.ok),
            ids_per_sec: per_sec(stats.ids),
            latency_us,
        }
    }

    /// What was spoken, as the text report names it: `http`, `https`, `https (mutual tls)`,
    /// `grpc`, `grpc (tls)`, `thrift`.
    pub fn transport(&self) -> String {
        match (self.protocol, self.tls) {
            (protocol, TlsMode::Off) => protocol.name().to_owned(),
            (Protocol::Http, TlsMode::Mutual) => "https (mutual tls)".to_owned(),
            (Protocol::Http, _) => "https".to_owned(),
            (protocol, tls) => format!(
                "{} ({}tls)",
                protocol.name(),
                if tls == TlsMode::Mutual {
                    "mutual "
                } else {
                    ""
                }
            ),
        }
    }

    /// Whether no measured request finished, well or not: every one sent was still waiting for
    /// its answer when the run ended. Such a run measured nothing; `snowflake bench` exits 1.
    pub fn finished_nothing(&self) -> bool {
        self.requests == 0
    }

    /// The errors on one line, most frequent first: `http_503 12, connect_refused 3`, or `none`.
    pub fn errors_summary(&self) -> String {
        if self.errors.is_empty() {
            return "none".to_owned();
        }
        let mut by_count: Vec<(&String, &u64)> = self.errors.iter().collect();
        by_count.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
        by_count
            .iter()
            .map(|(kind, count)| format!("{kind} {count}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let latency = &self.latency_us;
        writeln!(
            f,
            "target      {} over {}, {} connection{}, {} id{} per request",
            self.addr,
            self.transport(),
            self.connections,
            plural(u64::from(self.connections)),
            self.batch,
            plural(u64::from(self.batch)),
        )?;
        match self.offered_rate {
            None => writeln!(
                f,
                "load        closed loop: each connection sends when its previous answer arrived"
            )?,
            Some(rate) => writeln!(
                f,
                "load        {rate} requests/s offered on a fixed schedule; latency measured from \
                 each request's scheduled send time"
            )?,
        }
        writeln!(
            f,
            "elapsed     {:.3} s (stopped by {})",
            self.elapsed.as_secs_f64(),
            self.stopped_by.name()
        )?;
        writeln!(
            f,
            "requests    {} ok, {} failed",
            self.requests_ok, self.requests_failed
        )?;
        writeln!(f, "ids         {}", self.ids)?;
        writeln!(
            f,
            "throughput  {:.1} requests/s, {:.1} ids/s",
            self.requests_per_sec, self.ids_per_sec
        )?;
        writeln!(
            f,
            "latency     p50 {} µs, p90 {} µs, p99 {} µs, p99.9 {} µs, max {} µs ({} sample{})",
            latency.p50,
            latency.p90,
            latency.p99,
            latency.p99_9,
            latency.max,
            latency.samples,
            plural(latency.samples),
        )?;
        write!(f, "errors      {}", self.errors_summary())?;
        if self.finished_nothing() && self.errors.is_empty() {
            write!(
                f,
                ", but no request finished: the service answered none within the run"
            )?;
        }
        Ok(())
    }
}

/// `"s"` unless `count` is 1.
fn plural(count: u64) -> &'static str {
    if count == 1 { "" } else { "s" }
}

/// Serializes a duration as fractional seconds.
fn serialize_secs<S: serde::Serializer>(
    duration: &Duration,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_f64(duration.as_secs_f64())
}

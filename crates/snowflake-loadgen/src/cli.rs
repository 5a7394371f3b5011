//! The `bench` subcommand's flags, their parsing, and the blocking entry point.

use crate::config::{
    BenchConfig, MAX_BATCH, MAX_CONNECTIONS, MAX_DURATION, MAX_RATE, MAX_REQUESTS, MAX_THREADS,
    MAX_TIMEOUT, Protocol,
};
use crate::error::Error;
use std::io::{self, IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

/// Measure the service: open many keep-alive connections, ask for IDs as fast as the service
/// answers (closed loop) or at a fixed --rate, check every answer, and report throughput and
/// latency.
//
// Numbers are taken as text and checked in `BenchConfig::try_from`, so that a bad value gets a
// one-line error naming the flag and its valid range.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Protocol to speak: http (GET /v1/id, /v1/ids?count=N), thrift (framed binary get_id;
    /// --batch must be 1) or grpc (NextId, NextIds, or StreamIds with --stream).
    #[arg(long, value_enum, default_value_t = Protocol::Http)]
    protocol: Protocol,
    /// Address of the service, HOST:PORT [default: 127.0.0.1:8080 for http, 127.0.0.1:7609 for
    /// thrift, 127.0.0.1:50051 for grpc].
    #[arg(long, value_name = "HOST:PORT")]
    addr: Option<String>,
    /// Concurrent connections, 1..=10000; each sends its next request when the previous
    /// response arrived (or, with --rate, when it is due).
    #[arg(
        short = 'c',
        long,
        value_name = "N",
        default_value = "50",
        allow_negative_numbers = true
    )]
    connections: String,
    /// How long to measure, up to 1h, e.g. 10, 10s, 500ms, 2m (default 10s unless --requests
    /// is given).
    #[arg(short = 'd', long, value_name = "SECS", allow_negative_numbers = true)]
    duration: Option<String>,
    /// Total requests to measure across all connections, 1..=1000000000000; with --duration
    /// too, whichever comes first ends the run.
    #[arg(short = 'n', long, value_name = "N", allow_negative_numbers = true)]
    requests: Option<String>,
    /// IDs per request, 1..=1000000: over http 1 asks GET /v1/id, more ask
    /// GET /v1/ids?count=N; over grpc 1 calls NextId, more call NextIds (or StreamIds with
    /// --stream); thrift takes only 1.
    #[arg(
        long,
        value_name = "N",
        default_value = "1",
        allow_negative_numbers = true
    )]
    batch: String,
    /// Warm-up before measuring, up to 1h (same forms as --duration); its requests are not
    /// recorded.
    #[arg(
        long,
        value_name = "SECS",
        default_value = "0",
        allow_negative_numbers = true
    )]
    warmup: String,
    /// Worker threads of the client, 1..=256.
    #[arg(
        long,
        value_name = "N",
        default_value = "1",
        allow_negative_numbers = true
    )]
    threads: String,
    /// How long one request or connection attempt may take before it counts as an error,
    /// 1ms..=60s (same forms as --duration).
    #[arg(
        long,
        value_name = "SECS",
        default_value = "5s",
        allow_negative_numbers = true
    )]
    timeout: String,
    /// Offer a fixed load of N requests/s in total, 1..=10000000, instead of as many as the
    /// service answers: the rate is split evenly across the connections, each sending on a fixed
    /// schedule (never ahead of it; after a slow answer, overdue requests go out back to back).
    /// Latency is then measured from each request's scheduled send time, not the actual one, so
    /// a stalled service shows in the percentiles (coordinated omission corrected, as wrk2 does).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    rate: Option<String>,
    /// With --protocol grpc: make each request one StreamIds call for --batch IDs (up to 4096
    /// per streamed message) and count the IDs received.
    #[arg(long)]
    stream: bool,
    /// Speak TLS (HTTPS, gRPC over TLS) and trust the service's certificate if it chains to
    /// these CA certificates (PEM).
    #[arg(long, value_name = "FILE")]
    tls_ca: Option<std::path::PathBuf>,
    /// Client certificate (PEM) for a service that requires mutual TLS; needs --tls-ca and
    /// --tls-client-key.
    #[arg(long, value_name = "FILE")]
    tls_client_cert: Option<std::path::PathBuf>,
    /// Private key (PEM) of --tls-client-cert.
    #[arg(long, value_name = "FILE")]
    tls_client_key: Option<std::path::PathBuf>,
    /// Print the report as one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Do not print the once-a-second progress line (it is only printed when stderr is a
    /// terminal).
    #[arg(long)]
    no_progress: bool,
}

impl BenchArgs {
    /// Whether the report is to be printed as JSON.
    pub fn json(&self) -> bool {
        self.json
    }
}

impl TryFrom<&BenchArgs> for BenchConfig {
    type Error = Error;

    /// Parses and checks every flag. The progress line is enabled when `--no-progress` is absent
    /// and stderr is a terminal.
    fn try_from(args: &BenchArgs) -> Result<BenchConfig, Error> {
        let connections = parse_number(
            "--connections",
            &args.connections,
            u64::from(MAX_CONNECTIONS),
        )?;
        let duration = args
            .duration
            .as_deref()
            .map(|text| {
                parse_duration_flag("--duration", text, Duration::from_millis(1), MAX_DURATION)
            })
            .transpose()?;
        let requests = args
            .requests
            .as_deref()
            .map(|text| parse_number("--requests", text, MAX_REQUESTS))
            .transpose()?;
        let batch = parse_number("--batch", &args.batch, u64::from(MAX_BATCH))?;
        let warmup = parse_duration_flag("--warmup", &args.warmup, Duration::ZERO, MAX_DURATION)?;
        let threads = parse_number("--threads", &args.threads, MAX_THREADS as u64)?;
        let timeout = parse_duration_flag(
            "--timeout",
            &args.timeout,
            Duration::from_millis(1),
            MAX_TIMEOUT,
        )?;
        let rate = args
            .rate
            .as_deref()
            .map(|text| parse_number("--rate", text, MAX_RATE))
            .transpose()?;
        let tls = crate::tls::BenchTls::from_files(
            args.tls_ca.as_deref(),
            args.tls_client_cert.as_deref(),
            args.tls_client_key.as_deref(),
        )?;
        let mut builder = BenchConfig::builder()
            .protocol(args.protocol)
            .stream(args.stream)
            .tls(tls);
        if let Some(addr) = &args.addr {
            builder = builder.addr(addr.clone());
        }
        builder
            .connections(u32::try_from(connections).unwrap_or(u32::MAX))
            .duration(duration)
            .requests(requests)
            .batch(u32::try_from(batch).unwrap_or(u32::MAX))
            .warmup(warmup)
            .threads(usize::try_from(threads).unwrap_or(usize::MAX))
            .timeout(timeout)
            .progress(!args.no_progress && io::stderr().is_terminal())
            .rate(rate)
            .build()
    }
}

/// Runs `snowflake bench`: checks the flags, starts a runtime with `--threads` workers, runs the
/// benchmark, and prints the report on stdout (text, or one JSON object with `--json`).
///
/// Returns exit code 2 for a bad flag (one line on stderr, nothing on stdout), 1 when the run
/// could not happen (e.g. nothing listens at `--addr`), when any request failed or when none
/// finished at all (the report is still printed), and 0 otherwise. Ctrl-C ends the run early
/// and reports what was measured.
pub fn run_cli(args: BenchArgs) -> ExitCode {
    run_cli_with_layout(args, snowflake_core::Layout::TWITTER)
}

/// [`run_cli`] against a service of another layout (the global `--layout`): IDs above its
/// largest are bad responses.
pub fn run_cli_with_layout(args: BenchArgs, layout: snowflake_core::Layout) -> ExitCode {
    let config = match BenchConfig::try_from(&args).map(|c| c.with_layout(layout)) {
        Ok(config) => config,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.threads())
        .thread_name("snowflake-bench")
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!(
                "error: {}",
                Error::Runtime {
                    reason: crate::error::describe_io(&err)
                }
            );
            return ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(crate::run(config));
    // Every task has ended by now; this only bounds the wait for the runtime's own threads.
    runtime.shutdown_timeout(Duration::from_secs(1));
    let report = match outcome {
        Ok(report) => report,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::FAILURE;
        }
    };
    let text = if args.json {
        match serde_json::to_string(&report) {
            Ok(json) => json,
            Err(err) => {
                eprintln!("error: cannot write the report as JSON: {err}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        report.to_string()
    };
    let mut stdout = io::stdout().lock();
    if let Err(err) = writeln!(stdout, "{text}").and_then(|()| stdout.flush())
        && err.kind() != io::ErrorKind::BrokenPipe
    {
        eprintln!(
            "error: cannot write the report: {}",
            crate::error::describe_io(&err)
        );
        return ExitCode::FAILURE;
    }
    if report.finished_nothing() && report.errors_total == 0 {
        eprintln!(
            "error: no request finished during the {:.3} s run: {} answered none of them (a \
             stalled or frozen service, or a run shorter than one answer takes)",
            report.elapsed.as_secs_f64(),
            report.addr
        );
        return ExitCode::FAILURE;
    }
    if report.errors_total > 0 {
        eprintln!(
            "error: {} error(s) during the run: {}",
            report.errors_total,
            report.errors_summary()
        );
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// Parses a decimal number in `1..=max`; anything else is an [`Error::InvalidFlag`] naming the
/// range and the text as given.
fn parse_number(flag: &'static str, text: &str, max: u64) -> Result<u64, Error> {
    let digits_only = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    match text.parse::<u64>() {
        Ok(value) if digits_only && (1..=max).contains(&value) => Ok(value),
        _ => Err(Error::invalid(flag, format!("1..={max}"), text)),
    }
}

/// Parses a duration flag (see [`parse_duration`]) and checks it lies in `min..=max`.
fn parse_duration_flag(
    flag: &'static str,
    text: &str,
    min: Duration,
    max: Duration,
) -> Result<Duration, Error> {
    let range = format!(
        "{}..={}",
        crate::config::format_duration(min),
        crate::config::format_duration(max)
    );
    match parse_duration(text) {
        Some(value) if (min..=max).contains(&value) => Ok(value),
        Some(_) => Err(Error::invalid(flag, range, text)),
        None => Err(Error::invalid(
            flag,
            format!("a duration like 10, 10s, 500ms or 2m in {range}"),
            text,
        )),
    }
}

/// Parses `10` (seconds), `10s`, `500ms`, `2m` or `1h`; `None` for anything else or for an
/// overflow.
fn parse_duration(text: &str) -> Option<Duration> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    if number.is_empty() {
        return None;
    }
    let number: u64 = number.parse().ok()?;
    let millis = match unit {
        "" | "s" => number.checked_mul(1_000)?,
        "ms" => number,
        "m" => number.checked_mul(60_000)?,
        "h" => number.checked_mul(3_600_000)?,
        _ => return None,
    };
    Some(Duration::from_millis(millis))
}

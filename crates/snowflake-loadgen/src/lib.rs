//! A load generator for the Snowflake ID service: the engine behind `snowflake bench`.
//!
//! Like `wrk`, it opens many keep-alive connections and sends each connection's next request as
//! soon as the previous answer arrived (closed loop), then reports throughput and latency
//! percentiles from an HDR histogram. Unlike `wrk`, it checks every answer: status 200 and
//! exactly the IDs asked for, each a decimal Snowflake ID; anything else is counted as an error
//! by kind (`http_503`, `bad_response`, `timeout`, `connection_closed`, `connect_refused`, ...).
//!
//! With a rate ([`BenchConfigBuilder::rate`], `--rate N`) it offers a fixed load instead, like
//! `wrk2`: N requests per second in total, split evenly across the connections, each sending on
//! a fixed schedule. Latency is then measured from each request's scheduled send time rather
//! than from when it actually went out, so a server that stalls shows in the percentiles
//! instead of silently slowing the client down (coordinated omission). Use it to measure
//! latency at a given load, e.g. at half of the closed-loop peak.
//!
//! A run is always bounded: by its duration (10 s unless set, at most 1 h), by a request count,
//! or by Ctrl-C, which ends it early with a report of what was measured. If not a single
//! connection can be opened at the start, the run fails with [`Error::Connect`] rather than
//! reporting zero throughput.
//!
//! ```no_run
//! use snowflake_loadgen::BenchConfig;
//! use std::time::Duration;
//!
//! # async fn example() -> Result<(), snowflake_loadgen::Error> {
//! let config = BenchConfig::builder()
//!     .addr("127.0.0.1:8080")
//!     .connections(50)
//!     .batch(100)
//!     .duration(Duration::from_secs(10))
//!     .build()?;
//! let report = snowflake_loadgen::run(config).await?;
//! println!("{report}");
//! println!("{:.0} ids/s, p99 {} µs", report.ids_per_sec, report.latency_us.p99);
//! # Ok(())
//! # }
//! ```
//!
//! Protocols: HTTP/1.1 ([`Protocol::Http`]), the 2010 Thrift interface ([`Protocol::Thrift`],
//! framed binary `get_id`, one ID per request) and gRPC ([`Protocol::Grpc`]: `NextId`,
//! `NextIds`, or `StreamIds` with [`BenchConfigBuilder::stream`]). Each protocol is one module
//! behind one internal trait. Thrift exceptions count as `thrift_exception`, gRPC statuses as
//! `grpc_<code>` (e.g. `grpc_unavailable`).

#![deny(missing_docs)]

mod cli;
mod config;
mod engine;
mod error;
mod grpc;
mod http;
mod pace;
mod phase;
mod progress;
mod report;
mod stats;
mod thrift;
mod tls;

pub use cli::{BenchArgs, run_cli, run_cli_with_layout};
pub use config::{
    BenchConfig, BenchConfigBuilder, DEFAULT_ADDR, DEFAULT_CONNECTIONS, DEFAULT_DURATION,
    DEFAULT_GRPC_ADDR, DEFAULT_THRIFT_ADDR, DEFAULT_TIMEOUT, MAX_BATCH, MAX_CONNECTIONS,
    MAX_DURATION, MAX_RATE, MAX_REQUESTS, MAX_THREADS, MAX_TIMEOUT, Protocol,
};
pub use error::Error;
pub use report::{Latency, Report, StopReason, TlsMode};
pub use tls::BenchTls;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

/// Runs a benchmark on the current tokio runtime until its duration or request count ends it,
/// or until Ctrl-C; returns what was measured after the warm-up.
///
/// Fails only if the target cannot be resolved, if no connection at all can be opened at the
/// start, or on Ctrl-C before the measurement started. Errors during the run are counted in the
/// [`Report`].
pub async fn run(config: BenchConfig) -> Result<Report, Error> {
    run_with_shutdown(config, async {
        if tokio::signal::ctrl_c().await.is_err() {
            // No signal handler could be installed: the duration or count still ends the run.
            std::future::pending::<()>().await;
        }
    })
    .await
}

/// Like [`run`], but ends early when `shutdown` completes instead of on Ctrl-C; the report then
/// says [`StopReason::Interrupted`].
pub async fn run_with_shutdown(
    config: BenchConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<Report, Error> {
    let mut shutdown = std::pin::pin!(shutdown);
    let addrs = tokio::select! {
        addrs = resolve(config.addr(), config.timeout()) => addrs?,
        () = &mut shutdown => return Err(Error::Interrupted),
    };
    match config.protocol() {
        Protocol::Http => {
            let client = Arc::new(http::HttpClient::new(&config, addrs));
            engine::run(client, &config, shutdown).await
        }
        Protocol::Thrift => {
            let client = Arc::new(thrift::ThriftClient::new(&config, addrs));
            engine::run(client, &config, shutdown).await
        }
        Protocol::Grpc => {
            let client = Arc::new(grpc::GrpcClient::new(&config, addrs));
            engine::run(client, &config, shutdown).await
        }
    }
}

/// Looks up `addr` (`HOST:PORT`) within `timeout`.
async fn resolve(addr: &str, timeout: std::time::Duration) -> Result<Vec<SocketAddr>, Error> {
    let failed = |reason: String| Error::Resolve {
        addr: addr.to_owned(),
        reason,
    };
    let addrs: Vec<SocketAddr> = tokio::time::timeout(timeout, tokio::net::lookup_host(addr))
        .await
        .map_err(|_| failed("timed out".to_owned()))?
        .map_err(|err| failed(error::describe_io(&err)))?
        .collect();
    if addrs.is_empty() {
        return Err(failed("no addresses found".to_owned()));
    }
    Ok(addrs)
}

//! The client library against our server: what `next_id()` costs with prefetch at a paced
//! 1,000,000 IDs/s (10,000,000 calls a round, each timed, and how many had to wait for a
//! refill), what one gRPC `NextId` round trip costs, and how many IDs/s one client process takes
//! with prefetch.

use crate::model::Run;
use anyhow::{Context, Result};
use hdrhistogram::Histogram;
use snowflake_client::{ClientBuilder, Prefetch};
use std::time::{Duration, Instant};

pub const GROUP: &str = "client";
pub const PREFETCH_PACED: &str = "next_id() with prefetch, paced at 1,000,000 IDs/s";
pub const ROUND_TRIP: &str = "next_id() without prefetch: one gRPC NextId round trip";
pub const THROUGHPUT: &str = "next_id() with prefetch, one task, as fast as it goes";
/// The paced rate.
pub const PACED_RATE: f64 = 1_000_000.0;
/// The paced calls of one round in a full run (10 s at [`PACED_RATE`]).
pub const PACED_CALLS: u64 = 10_000_000;
/// The rounds of a full run: the target is on their median.
pub const ROUNDS: usize = 5;
/// The most calls of a round of [`PACED_CALLS`] that may wait for a refill (median of the rounds).
pub const MOST_WAITS: f64 = 1.0;

/// The paced calls of a smoke run's one round.
pub const QUICK_CALLS: u64 = 100_000;

/// The client measurements of a run against the node whose gRPC port is `grpc_port`: [`ROUNDS`]
/// rounds of [`PACED_CALLS`] paced calls, or one round of [`QUICK_CALLS`] in a smoke run
/// (`quick`); the round trips and the unpaced run take `secs` each.
pub fn rounds(run: &mut Run, grpc_port: u16, secs: f64, quick: bool) -> Result<()> {
    let (rounds, calls) = if quick {
        (1, QUICK_CALLS)
    } else {
        (ROUNDS, PACED_CALLS)
    };
    for r in 1..=rounds {
        eprintln!("client: round {r}/{rounds} ({calls} paced calls)");
        round(run, grpc_port, secs, calls)?;
    }
    Ok(())
}

/// One round: `paced_calls` calls of the paced prefetch run, then the round trips and the
/// unpaced run for `secs` each, against the node whose gRPC port is `grpc_port`.
pub fn round(run: &mut Run, grpc_port: u16, secs: f64, paced_calls: u64) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime
        .block_on(async {
            let endpoint = format!("127.0.0.1:{grpc_port}");
            let prefetched = ClientBuilder::new([endpoint.clone()])
                .prefetch(Prefetch::new().max_age(Duration::from_secs(1)))
                .build()?;
            // Warm: the first fill done and the rate seen, so that the run measures the steady state.
            let warm_until = Instant::now() + Duration::from_millis(300);
            while Instant::now() < warm_until {
                prefetched.next_id().await?;
            }
            let (latency, achieved, misses) = paced(&prefetched, PACED_RATE, paced_calls).await?;
            for (p, q) in [("p50", 0.5), ("p99", 0.99), ("p99.9", 0.999)] {
                run.record(
                    GROUP,
                    PREFETCH_PACED,
                    p,
                    "ns",
                    latency.value_at_quantile(q) as f64,
                );
            }
            run.record(GROUP, PREFETCH_PACED, "max", "ns", latency.max() as f64);
            run.record(GROUP, PREFETCH_PACED, "achieved", "IDs/s", achieved);
            run.record(GROUP, PREFETCH_PACED, "calls", "calls", paced_calls as f64);
            run.record(
                GROUP,
                PREFETCH_PACED,
                "calls that waited for a refill",
                "calls",
                misses as f64,
            );

            let started = Instant::now();
            let mut n = 0u64;
            while started.elapsed().as_secs_f64() < secs {
                for _ in 0..1000 {
                    prefetched.next_id().await?;
                }
                n += 1000;
            }
            run.record(
                GROUP,
                THROUGHPUT,
                "IDs/s",
                "IDs/s",
                n as f64 / started.elapsed().as_secs_f64(),
            );
            prefetched.close();

            let direct = ClientBuilder::new([endpoint]).build()?;
            direct.next_id().await?;
            let mut trips = histogram()?;
            let started = Instant::now();
            while started.elapsed().as_secs_f64() < secs {
                let t = Instant::now();
                direct.next_id().await?;
                trips.saturating_record(t.elapsed().as_nanos() as u64);
            }
            for (p, q) in [("p50", 0.5), ("p99", 0.99)] {
                run.record(
                    GROUP,
                    ROUND_TRIP,
                    p,
                    "ns",
                    trips.value_at_quantile(q) as f64,
                );
            }
            direct.close();
            anyhow::Ok(())
        })
        .context("client library benchmark")
}

/// Nanoseconds from 1 to a minute, 3 significant digits (a plain `Histogram::new` saturates
/// `saturating_record` at its initial 2,047).
fn histogram() -> Result<Histogram<u64>> {
    Ok(Histogram::new_with_bounds(1, 60_000_000_000, 3)?)
}

/// `client` on its own: a fresh server, `rounds` rounds of `paced_calls`, the results put into
/// `dir`'s service.json in place of the client measurements there (so the rest of a full run
/// stays).
pub fn rerun(
    root: &std::path::Path,
    dir: &std::path::Path,
    secs: f64,
    rounds: usize,
    paced_calls: u64,
) -> Result<()> {
    let path = dir.join("service.json");
    let mut run = if path.exists() {
        Run::load(&path)?
    } else {
        Run::new("service", secs, rounds)
    };
    run.measurements.retain(|m| m.group != GROUP);
    let bin = crate::server::sf_binary(root)?;
    let work = tempfile::tempdir()?;
    let server = crate::server::SfServer::start(&bin, work.path())?;
    for r in 1..=rounds {
        eprintln!("client: round {r}/{rounds}");
        round(&mut run, server.grpc_port, secs, paced_calls)?;
    }
    drop(server);
    run.save(&path)?;
    eprintln!("client: wrote {}", path.display());
    Ok(())
}

/// Calls `next_id()` `calls` times on a fixed schedule of `rate` per second, timing each call:
/// the latency histogram (ns), the rate achieved, and how many calls found the buffer empty.
async fn paced(
    client: &snowflake_client::Client,
    rate: f64,
    calls: u64,
) -> Result<(Histogram<u64>, f64, u64)> {
    let mut latency = histogram()?;
    let interval = Duration::from_secs_f64(1.0 / rate);
    let misses_before = client.stats().buffer_misses;
    let started = Instant::now();
    let mut due = started;
    for call in 1..=calls {
        // Wait for the call's slot (spinning: a microsecond is far below any timer's grain).
        let mut now = Instant::now();
        while now < due {
            std::hint::spin_loop();
            now = Instant::now();
        }
        client.next_id().await?;
        latency.saturating_record(now.elapsed().as_nanos() as u64);
        due += interval;
        // A stall (the machine, the scheduler) is not made up with a burst afterwards.
        if now > due + Duration::from_millis(1) {
            due = now;
        }
        // Let the runtime's other tasks (the refiller) run on this worker now and then.
        if call.is_multiple_of(4096) {
            tokio::task::yield_now().await;
        }
    }
    let achieved = calls as f64 / started.elapsed().as_secs_f64();
    Ok((
        latency,
        achieved,
        client.stats().buffer_misses - misses_before,
    ))
}

//! Two builds of the service side by side (`ab --baseline BIN`): single-ID throughput over
//! HTTP (wrk), gRPC (h2load) and RESP (redis-benchmark), in rounds that alternate which build
//! goes first, so the machine's noise hits both alike. Prints a Markdown table of every round
//! and the medians, with the candidate's share of the baseline's rate. For changes on the hot
//! path (a new metric, a new check) that must keep most of the throughput.

use crate::service::{self, RedisTarget, SfServer};
use anyhow::{Result, ensure};
use std::path::Path;

/// Connections per tool: the peak-throughput setting of the service section.
const CONNECTIONS: u32 = 50;
/// The protocols measured, in order.
const PROTOCOLS: [&str; 3] = ["http", "grpc", "resp"];

/// Runs `rounds` rounds of `secs` seconds per protocol and build, and prints the table.
pub fn run(baseline: &Path, candidate: &Path, rounds: usize, secs: u64) -> Result<()> {
    ensure!(rounds >= 1, "--rounds must be at least 1");
    let work = tempfile::tempdir()?;
    let servers = [
        SfServer::start_with(baseline, work.path(), "baseline", 1, &[])?,
        SfServer::start_with(candidate, work.path(), "candidate", 2, &[])?,
    ];
    // rates[protocol][build] = one rate per round.
    let mut rates = vec![[Vec::new(), Vec::new()]; PROTOCOLS.len()];
    println!("| round | protocol | baseline req/s | candidate req/s |");
    println!("|---|---|---:|---:|");
    for round in 1..=rounds {
        let order = if round % 2 == 1 { [0, 1] } else { [1, 0] };
        for (p, protocol) in PROTOCOLS.iter().enumerate() {
            let mut this = [0.0; 2];
            for &build in &order {
                this[build] = measure(&servers[build], protocol, secs, work.path())?;
                rates[p][build].push(this[build]);
            }
            println!("| {round} | {protocol} | {:.0} | {:.0} |", this[0], this[1]);
        }
    }
    println!();
    println!("| protocol | baseline (median) | candidate (median) | candidate / baseline |");
    println!("|---|---:|---:|---:|");
    for (p, protocol) in PROTOCOLS.iter().enumerate() {
        let base = crate::model::median(&rates[p][0]);
        let cand = crate::model::median(&rates[p][1]);
        println!(
            "| {protocol} | {base:.0} | {cand:.0} | {:.1}% |",
            100.0 * cand / base
        );
    }
    Ok(())
}

/// One build's single-ID rate over `protocol` for `secs` seconds.
fn measure(server: &SfServer, protocol: &str, secs: u64, work: &Path) -> Result<f64> {
    Ok(match protocol {
        "http" => {
            let wrk = service::wrk(server.port("http"), CONNECTIONS, secs)?;
            ensure!(
                wrk.non_2xx == 0 && wrk.socket_errors == 0,
                "wrk: {} non-2xx answers, {} socket errors",
                wrk.non_2xx,
                wrk.socket_errors
            );
            wrk.requests_per_sec
        }
        "grpc" => {
            let h2 = service::h2load_grpc(server.port("grpc"), CONNECTIONS, secs, work)?;
            ensure!(h2.failed == 0, "h2load: {} failed requests", h2.failed);
            h2.requests_per_sec
        }
        _ => {
            // redis-benchmark runs a count, not a duration: about `secs` at ~100,000/s.
            let target = RedisTarget::plain(server.port("resp"));
            service::redis_benchmark(&target, CONNECTIONS, 1, secs * 100_000, None)?.rps
        }
    })
}

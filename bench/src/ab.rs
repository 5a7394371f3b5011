//! Two builds of the service side by side (`ab --baseline BIN`): single-ID throughput over
//! HTTP (wrk), gRPC (h2load), Thrift (`snowflake bench`) and RESP (redis-benchmark), and
//! batches of 4,096 IDs over HTTP (`snowflake bench --batch 4096`, in IDs/s), in rounds that
//! alternate which build goes first, so the machine's noise hits both alike. Prints a Markdown
//! table of every round and the medians, with the candidate's share of the baseline's rate. For
//! changes on the hot path (a new metric, a new check) that must keep most of the throughput.

use crate::service::{self, RedisTarget, SfServer};
use anyhow::{Result, ensure};
use std::path::Path;

/// Connections per tool: the peak-throughput setting of the service section.
const CONNECTIONS: u32 = 50;
/// What is measured, in order: single IDs per protocol, then batches over HTTP.
const PROTOCOLS: [&str; 5] = ["http", "grpc", "thrift", "resp", "http-batch-4096"];

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
    println!("| round | protocol | baseline req/s (IDs/s for batches) | candidate |");
    println!("|---|---|---:|---:|");
    for round in 1..=rounds {
        let order = if round % 2 == 1 { [0, 1] } else { [1, 0] };
        for (p, protocol) in PROTOCOLS.iter().enumerate() {
            let mut this = [0.0; 2];
            for &build in &order {
                this[build] = measure(&servers[build], protocol, secs, work.path(), candidate)?;
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

/// One build's rate over `protocol` for `secs` seconds (requests/s; IDs/s for batches);
/// `client` is the `snowflake` binary whose `bench` measures Thrift and batches (the same for
/// both builds).
fn measure(
    server: &SfServer,
    protocol: &str,
    secs: u64,
    work: &Path,
    client: &Path,
) -> Result<f64> {
    let bench = |protocol: &str, args: &[&str]| -> Result<f64> {
        let port = server.port(protocol);
        let r = service::sf_bench(client, protocol, port, args, secs as f64)?;
        ensure!(
            r.errors_total == 0,
            "snowflake bench: {} errors",
            r.errors_total
        );
        Ok(r.ids_per_sec)
    };
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
        "thrift" => bench("thrift", &["-c", &CONNECTIONS.to_string()])?,
        "http-batch-4096" => bench("http", &["-c", &CONNECTIONS.to_string(), "--batch", "4096"])?,
        _ => {
            // redis-benchmark runs a count, not a duration: about `secs` at ~100,000/s.
            let target = RedisTarget::plain(server.port("resp"));
            service::redis_benchmark(&target, CONNECTIONS, 1, secs * 100_000, None)?.rps
        }
    })
}

//! Two builds of the service side by side (`ab --baseline BIN`): single-ID throughput over
//! HTTP (wrk), gRPC (h2load), Thrift (`snowflake bench`) and RESP (redis-benchmark), and
//! batches of 4,096 IDs over HTTP (`snowflake bench --batch 4096`, in IDs/s), in rounds that
//! alternate which build goes first, so the machine's noise hits both alike. Prints a Markdown
//! table of every round and the medians, with the candidate's share of the baseline's rate. For
//! changes on the hot path (a new metric, a new check) that must keep most of the throughput.

use crate::procfs;
use crate::server::SfServer;
use crate::tools::{self, RedisTarget};
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
    // rates[protocol][build] and per_cpu[protocol][build]: one value per round; ratios[protocol]:
    // the candidate's rate over the baseline's, per round (the two measured back to back).
    let mut rates = vec![[Vec::new(), Vec::new()]; PROTOCOLS.len()];
    let mut per_cpu = vec![[Vec::new(), Vec::new()]; PROTOCOLS.len()];
    let mut ratios = vec![Vec::new(); PROTOCOLS.len()];
    println!(
        "| round | protocol | baseline /s | candidate /s | baseline per server CPU-s | candidate per server CPU-s |"
    );
    println!("|---|---|---:|---:|---:|---:|");
    for round in 1..=rounds {
        let order = if round % 2 == 1 { [0, 1] } else { [1, 0] };
        for (p, protocol) in PROTOCOLS.iter().enumerate() {
            let mut this = [(0.0, 0.0); 2];
            for &build in &order {
                let server = &servers[build];
                let cpu_before = procfs::process_cpu_secs(server.pid())?;
                let (rate, done) = measure(server, protocol, secs, work.path(), candidate)?;
                let cpu = procfs::process_cpu_secs(server.pid())? - cpu_before;
                this[build] = (rate, done / cpu.max(0.01));
                rates[p][build].push(rate);
                per_cpu[p][build].push(this[build].1);
            }
            ratios[p].push(this[1].0 / this[0].0);
            println!(
                "| {round} | {protocol} | {:.0} | {:.0} | {:.0} | {:.0} |",
                this[0].0, this[1].0, this[0].1, this[1].1
            );
        }
    }
    println!();
    println!(
        "Rates are requests/s (IDs/s for batches); per server CPU-s is the same work divided by \
         the CPU time (user + system) the server used for it."
    );
    println!();
    println!(
        "| protocol | baseline (median) | candidate (median) | candidate / baseline | round ratios: median (quartiles) | per CPU-s: candidate / baseline |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for (p, protocol) in PROTOCOLS.iter().enumerate() {
        let median = crate::model::median;
        let base = median(&rates[p][0]);
        let cand = median(&rates[p][1]);
        let cpu_ratio = median(&per_cpu[p][1]) / median(&per_cpu[p][0]);
        let (low, high) = quartiles(&ratios[p]);
        println!(
            "| {protocol} | {base:.0} | {cand:.0} | {:.1}% | {:.1}% ({:.1}–{:.1}%) | {:.1}% |",
            100.0 * cand / base,
            100.0 * median(&ratios[p]),
            100.0 * low,
            100.0 * high,
            100.0 * cpu_ratio
        );
    }
    Ok(())
}

/// The first and third quartiles of `samples` (the medians of its lower and upper halves).
fn quartiles(samples: &[f64]) -> (f64, f64) {
    let mut v = samples.to_vec();
    v.sort_by(f64::total_cmp);
    let half = v.len() / 2;
    let upper = &v[v.len() - half..];
    (
        crate::model::median(&v[..half]),
        crate::model::median(upper),
    )
}

/// One build's rate over `protocol` for `secs` seconds (requests/s; IDs/s for batches), and
/// the work done (requests; IDs for batches); `client` is the `snowflake` binary whose `bench`
/// measures Thrift and batches (the same for both builds).
fn measure(
    server: &SfServer,
    protocol: &str,
    secs: u64,
    work: &Path,
    client: &Path,
) -> Result<(f64, f64)> {
    let bench = |protocol: &str, args: &[&str]| -> Result<(f64, f64)> {
        let port = server.port(protocol);
        let r = tools::sf_bench(client, protocol, port, args, secs as f64)?;
        ensure!(
            r.errors_total == 0,
            "snowflake bench: {} errors",
            r.errors_total
        );
        Ok((r.ids_per_sec, r.ids as f64))
    };
    let connections = CONNECTIONS.to_string();
    Ok(match protocol {
        "http" => {
            let wrk = tools::wrk(server.port("http"), CONNECTIONS, secs)?;
            ensure!(
                wrk.non_2xx == 0 && wrk.socket_errors == 0,
                "wrk: {} non-2xx answers, {} socket errors",
                wrk.non_2xx,
                wrk.socket_errors
            );
            (wrk.requests_per_sec, wrk.requests as f64)
        }
        "grpc" => {
            let h2 = tools::h2load_grpc(server.port("grpc"), CONNECTIONS, secs, work)?;
            ensure!(h2.failed == 0, "h2load: {} failed requests", h2.failed);
            (h2.requests_per_sec, h2.succeeded as f64)
        }
        "thrift" => bench("thrift", &["-c", &connections])?,
        "http-batch-4096" => bench("http", &["-c", &connections, "--batch", "4096"])?,
        _ => {
            // redis-benchmark runs a count, not a duration: about `secs` at ~100,000/s.
            let target = RedisTarget::plain(server.port("resp"));
            let requests = secs * 100_000;
            let row = tools::redis_benchmark(&target, CONNECTIONS, 1, requests, None)?;
            (row.rps, requests as f64)
        }
    })
}

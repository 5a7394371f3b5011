//! `service`: our server against Redis INCR and a PostgreSQL sequence, each started on
//! loopback by [`crate::services`], measured with their own tools.

use crate::ceiling;
use crate::model::Run;
use crate::parse;
use crate::procfs::{children_cpu_secs, process_cpu_secs, rss_kib};
use crate::server::sf_binary;
use crate::services::Services;
use crate::tools::{
    RedisTarget, cyclictest, ensure_tools, h2load_grpc, redis_benchmark, sf_bench, wrk, wrk_latency,
};
use anyhow::{Result, bail};
use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

pub const REDIS: &str = "Redis INCR (redis-benchmark)";
pub const PG: &str = "PostgreSQL nextval (pgbench)";
pub const WRK: &str = "snowflake HTTP /v1/id (wrk)";
pub const GRPC_H2LOAD: &str = "snowflake gRPC NextId (h2load)";
/// A zero-work HTTP/2 server in C answering `NextId`'s path with a fixed gRPC frame: the most
/// any gRPC server can do on this machine with the same client.
pub const NGHTTPD: &str = "reference: zero-work HTTP/2 server in C (nghttpd, h2load)";
/// The same fixed answer from a zero-work gRPC server on h2, the HTTP/2 library our gRPC door
/// runs on (`crate::zero_work_h2`): the part of our gap to nghttpd that is the library's.
pub const H2_ZERO: &str = "reference: zero-work gRPC server on h2, our door's library (h2load)";
/// The latency subjects: closed loop (wrk) and fixed rate (snowflake bench --rate).
pub const LATENCY_CLOSED: &str = "snowflake HTTP /v1/id at half of peak, closed loop (wrk)";
pub const LATENCY_RATE: &str = "snowflake HTTP /v1/id at half of peak";
pub const CONNECTIONS: [u32; 3] = [1, 10, 50];

/// The group of the TLS measurements: plaintext against TLS, same server build, same client.
pub const TLS_GROUP: &str = "tls";
/// The group of the RESP measurements: our RESP port against redis-server, same client.
pub const RESP_GROUP: &str = "resp";
pub const RESP_OURS: &str = "snowflake RESP INCR";
pub const RESP_REDIS: &str = "redis-server INCR";
/// `SNOWFLAKE.NEXT 4096` over RESP, in IDs/s.
pub const RESP_BATCH: &str = "snowflake RESP SNOWFLAKE.NEXT 4096, 4 connections";

/// The ceiling measured with the same client as `subject` (one of ours), if it has one; the
/// issue's target share of it.
pub fn ceiling_of(subject: &str) -> Option<(&'static str, f64)> {
    match subject {
        WRK => Some((ceiling::HTTP1, 0.85)),
        GRPC_H2LOAD => Some((NGHTTPD, 0.85)),
        // A reference, not a target (not one of ours): its share of nghttpd for scale.
        H2_ZERO => Some((NGHTTPD, 0.85)),
        RESP_OURS => Some((ceiling::RESP, 0.95)),
        _ => None,
    }
}

/// redis-benchmark counts requests, not seconds: each run is sized from the last rate seen
/// for the same measurement (or a guess), so that it lasts about the measurement's seconds.
#[derive(Default)]
struct Sized(HashMap<String, f64>);

impl Sized {
    fn run(
        &mut self,
        key: &str,
        guess: f64,
        secs: f64,
        bench: impl FnOnce(u64) -> Result<parse::RedisRow>,
    ) -> Result<parse::RedisRow> {
        let rate = self.0.get(key).copied().unwrap_or(guess);
        let row = bench(((rate * secs) as u64).max(1000))?;
        self.0.insert(key.to_owned(), row.rps);
        Ok(row)
    }
}

/// One round of the TLS and RESP measurements: each pair back to back, so that the machine's
/// noise hits both sides alike.
fn tls_and_resp(
    run: &mut Run,
    svc: &Services,
    bin: &Path,
    secs: f64,
    sized: &mut Sized,
    errors: &mut Vec<String>,
) -> Result<()> {
    let (plain, tls) = (svc.sf(), svc.sf_tls.as_ref().expect("started"));
    let ca = svc.ca();
    let ca_arg = ca.to_string_lossy().into_owned();
    let mut bench = |run: &mut Run, subject: &str, protocol: &str, args: &[&str]| -> Result<()> {
        for (param, server, tls_args) in [
            ("plaintext", plain, &[][..]),
            ("TLS", tls, &["--tls-ca", ca_arg.as_str()][..]),
        ] {
            let all: Vec<&str> = args.iter().chain(tls_args).copied().collect();
            let r = sf_bench(bin, protocol, server.port(protocol), &all, secs)?;
            if r.errors_total > 0 {
                errors.push(format!(
                    "{subject} ({param}): {} errors in one round",
                    r.errors_total
                ));
            }
            run.record(TLS_GROUP, subject, param, "IDs/s", r.ids_per_sec);
        }
        Ok(())
    };
    bench(
        run,
        "single IDs, HTTP keep-alive, 50 connections (snowflake bench)",
        "http",
        &["-c", "50"],
    )?;
    bench(
        run,
        "single IDs, gRPC NextId, 50 connections (snowflake bench)",
        "grpc",
        &["-c", "50"],
    )?;
    bench(
        run,
        "batches of 4096, HTTP, 4 connections (snowflake bench)",
        "http",
        &["-c", "4", "--batch", "4096"],
    )?;
    for (subject, plain_port, tls_port) in [
        (
            "Redis INCR, 50 connections (redis-benchmark)",
            svc.redis_port,
            svc.redis_tls_port,
        ),
        (
            "snowflake RESP INCR, 50 connections (redis-benchmark)",
            plain.resp_port,
            tls.resp_port,
        ),
    ] {
        for (param, target) in [
            ("plaintext", RedisTarget::plain(plain_port)),
            ("TLS", RedisTarget::tls(tls_port, &ca)),
        ] {
            let key = format!("{subject} {param}");
            let row = sized.run(&key, 60_000.0, secs, |n| {
                redis_benchmark(&target, 50, 1, n, None)
            })?;
            run.record(TLS_GROUP, subject, param, "IDs/s", row.rps);
        }
    }

    // RESP against Redis and the zero-work RESP server: the same client, INCR without and with
    // pipelining.
    for (param, pipeline, guess) in [("c=50", 1, 60_000.0), ("c=50 -P 16", 16, 600_000.0)] {
        for (subject, port) in [
            (RESP_OURS, plain.resp_port),
            (RESP_REDIS, svc.redis_port),
            (ceiling::RESP, svc.ceilings().resp.port),
        ] {
            let row = sized.run(&format!("{subject} {param}"), guess, secs, |n| {
                redis_benchmark(&RedisTarget::plain(port), 50, pipeline, n, None)
            })?;
            run.record(RESP_GROUP, subject, param, "requests/s", row.rps);
        }
    }
    let row = sized.run(RESP_BATCH, 500.0, secs, |n| {
        redis_benchmark(
            &RedisTarget::plain(plain.resp_port),
            4,
            1,
            n,
            Some(&["SNOWFLAKE.NEXT", "4096"]),
        )
    })?;
    run.record(RESP_GROUP, RESP_BATCH, "c=4", "IDs/s", row.rps * 4096.0);
    Ok(())
}

pub fn run(root: &Path, secs: f64, rounds: usize) -> Result<Run> {
    let started = Instant::now();
    let pg_bin = ensure_tools()?;
    let bin = sf_binary(root)?;
    let mut run = Run::new("service", secs, rounds);
    let mut sized = Sized::default();
    if std::env::var_os("SNOWFLAKE_BIN").is_some() {
        run.notes.push(format!(
            "Measured {} (SNOWFLAKE_BIN), not the release build: these numbers say nothing about performance.",
            bin.display()
        ));
    }
    // wrk and pgbench count whole seconds: every tool gets the same whole number of seconds.
    let whole = (secs.round() as u64).max(1);
    // A smoke run (under a second per measurement) checks the paths, not the numbers: its
    // stream is a tenth of the real one, so that one stream finishes well inside the run
    // even with a debug binary on a loaded 2-core machine (CI once saw a 1,000,000-ID
    // stream finish nowhere inside 1 s there).
    let (stream_batch, stream_label): (u64, &str) = if secs < 1.0 {
        (100_000, "100,000")
    } else {
        (1_000_000, "1,000,000")
    };
    if whole as f64 != secs {
        run.notes.push(format!(
            "Every service measurement ran {whole} s (wrk and pgbench take whole seconds)."
        ));
    }
    let secs = whole as f64;
    let svc = Services::start(pg_bin, &bin)?;
    run.record(
        "memory",
        "snowflake serve",
        "idle",
        "KiB",
        rss_kib(svc.sf_pid())?,
    );
    run.record(
        "memory",
        "redis-server",
        "idle",
        "KiB",
        rss_kib(svc.redis_pid())?,
    );

    // redis-benchmark counts requests, not seconds: each run sized from the last rate seen.
    let redis = |run: &mut Run, sized: &mut Sized, c: u32| -> Result<f64> {
        let guess = if c == 1 { 15_000.0 } else { 60_000.0 };
        let row = sized.run(&format!("Redis INCR c={c}"), guess, secs, |n| {
            svc.redis(c, n)
        })?;
        if c == 50 {
            run.record("single-id", REDIS, "c=50", "IDs/s", row.rps);
            if let Some(p99) = row.p99_ms {
                run.record("redis-latency", REDIS, "p99", "us", p99 * 1000.0);
            }
        }
        run.record(
            "connections",
            "Redis INCR",
            &format!("c={c}"),
            "IDs/s",
            row.rps,
        );
        Ok(row.rps)
    };
    let mut errors: Vec<String> = Vec::new();
    let mut tls_errors: Vec<String> = Vec::new();
    let mut sf =
        |run: &mut Run, group: &str, subject: &str, protocol: &str, args: &[&str]| -> Result<()> {
            let r = sf_bench(&bin, protocol, svc.sf().port(protocol), args, secs)?;
            if r.errors_total > 0 {
                errors.push(format!("{subject}: {} errors in one round", r.errors_total));
            }
            run.record(group, subject, "c=50", "IDs/s", r.ids_per_sec);
            Ok(())
        };

    for round in 1..=rounds {
        eprintln!("service: round {round}/{rounds}");
        // Each door beside what it is compared with (the ratios are taken round by round):
        // Redis, Thrift; wrk on ours, then on the zero-work HTTP/1.1 server; h2load on ours,
        // then on the zero-work server on h2, then on nghttpd.
        redis(&mut run, &mut sized, 50)?;
        sf(
            &mut run,
            "single-id",
            "snowflake Thrift get_id (snowflake bench)",
            "thrift",
            &["-c", "50"],
        )?;
        let w = svc.wrk(50, whole)?;
        if w.non_2xx + w.socket_errors > 0 {
            run.notes.push(format!(
                "wrk round {round}: {} non-2xx, {} socket errors",
                w.non_2xx, w.socket_errors
            ));
        }
        run.record("single-id", WRK, "c=50", "IDs/s", w.requests_per_sec);
        run.record(
            "connections",
            "snowflake HTTP (wrk)",
            "c=50",
            "IDs/s",
            w.requests_per_sec,
        );
        // The HTTP/1.1 ceiling: the same wrk command as ours, against the zero-work C server.
        let c = wrk(svc.ceilings().http.port, 50, whole)?;
        if c.non_2xx + c.socket_errors > 0 {
            bail!(
                "wrk against the zero-work HTTP/1.1 server: {} non-2xx, {} socket errors",
                c.non_2xx,
                c.socket_errors
            );
        }
        run.record(
            "single-id",
            ceiling::HTTP1,
            "c=50",
            "IDs/s",
            c.requests_per_sec,
        );
        let h = h2load_grpc(svc.sf().port("grpc"), 50, whole, svc.work.path())?;
        if h.failed > 0 {
            run.notes.push(format!(
                "h2load round {round}: {} failed requests",
                h.failed
            ));
        }
        run.record(
            "single-id",
            GRPC_H2LOAD,
            "c=50",
            "IDs/s",
            h.requests_per_sec,
        );
        let z = h2load_grpc(svc.h2_zero_port, 50, whole, svc.work.path())?;
        if z.failed > 0 {
            bail!(
                "h2load against the zero-work gRPC server on h2: {} failed requests",
                z.failed
            );
        }
        run.record("single-id", H2_ZERO, "c=50", "IDs/s", z.requests_per_sec);
        let n = h2load_grpc(svc.nghttpd_port, 50, whole, svc.work.path())?;
        if n.failed > 0 {
            bail!("h2load against nghttpd: {} failed requests", n.failed);
        }
        run.record("single-id", NGHTTPD, "c=50", "IDs/s", n.requests_per_sec);
        let p = svc.pgbench(50, whole)?;
        run.record("single-id", PG, "c=50", "IDs/s", p.tps);
        run.record("connections", "PostgreSQL nextval", "c=50", "IDs/s", p.tps);
        sf(
            &mut run,
            "single-id",
            "snowflake HTTP /v1/id (snowflake bench)",
            "http",
            &["-c", "50"],
        )?;
        sf(
            &mut run,
            "single-id",
            "snowflake gRPC NextId (snowflake bench)",
            "grpc",
            &["-c", "50"],
        )?;
        sf(
            &mut run,
            "batch",
            "HTTP /v1/ids?count=4096, 4 connections",
            "http",
            &["-c", "4", "--batch", "4096"],
        )?;
        sf(
            &mut run,
            "batch",
            "gRPC NextIds 4096, 4 connections",
            "grpc",
            &["-c", "4", "--batch", "4096"],
        )?;
        sf(
            &mut run,
            "batch",
            &format!("gRPC StreamIds {stream_label}, 2 connections"),
            "grpc",
            &["-c", "2", "--batch", &stream_batch.to_string(), "--stream"],
        )?;
        tls_and_resp(&mut run, &svc, &bin, secs, &mut sized, &mut tls_errors)?;
        for c in [1u32, 10] {
            redis(&mut run, &mut sized, c)?;
            let w = svc.wrk(c, whole)?;
            run.record(
                "connections",
                "snowflake HTTP (wrk)",
                &format!("c={c}"),
                "IDs/s",
                w.requests_per_sec,
            );
            let p = svc.pgbench(c, whole)?;
            run.record(
                "connections",
                "PostgreSQL nextval",
                &format!("c={c}"),
                "IDs/s",
                p.tps,
            );
        }
    }
    // The client library, in rounds of its own (its target is on the median of 5 rounds of
    // 10,000,000 paced calls), against the same server.
    crate::client::rounds(&mut run, svc.sf().grpc_port, secs, secs < 1.0)?;
    run.record(
        "memory",
        "snowflake serve",
        "after load",
        "KiB",
        rss_kib(svc.sf_pid())?,
    );
    run.record(
        "memory",
        "redis-server",
        "after load",
        "KiB",
        rss_kib(svc.redis_pid())?,
    );

    // How late this machine wakes a sleeping thread: the floor under any latency measured here.
    let wake = cyclictest(if secs < 2.0 { 5_000 } else { 25_000 })?;
    for (p, v) in [
        ("p50", wake.p50),
        ("p99", wake.p99),
        ("p99.9", wake.p99_9),
        ("max", wake.max),
    ] {
        run.record("machine-wakeup", "cyclictest", p, "us", v);
    }

    // Latency at half of the measured peak (wrk, 50 connections), two ways.
    let peak = run.median("single-id", WRK, "c=50").unwrap_or(f64::NAN);
    let half = (peak / 2.0).round().max(1.0) as u64;
    // Closed loop: wrk with the fewest connections whose throughput reaches half of the peak.
    let mut closed_connections = 1;
    while closed_connections < 16 {
        let w = svc.wrk(closed_connections, 1)?;
        if w.requests_per_sec >= half as f64 {
            break;
        }
        closed_connections += 1;
    }
    run.notes.push(format!("Latency was measured at half of the median wrk peak ({half} requests/s) two ways. Closed loop: `wrk -t1 -c{closed_connections} --latency`, the fewest connections that reached half of the peak in a 1 s probe; each connection sends its next request when the previous answer arrived, so a stall delays the requests behind it without being measured (coordinated omission). Fixed rate: `snowflake bench -c 50 --rate {half}`, every request on a fixed schedule and its latency measured from the scheduled time, so stalls of the client, the server or the machine all count."));
    for round in 1..=rounds {
        eprintln!("service: latency round {round}/{rounds}");
        let cpu_before = (children_cpu_secs()?, process_cpu_secs(svc.sf_pid())?);
        let (w, l) = wrk_latency(svc.sf().http_port, closed_connections, whole)?;
        run.record(
            "latency-client-cpu",
            LATENCY_CLOSED,
            "cpu",
            "% of a core",
            100.0 * (children_cpu_secs()? - cpu_before.0) / secs,
        );
        run.record(
            "latency-server-cpu",
            LATENCY_CLOSED,
            "cpu",
            "% of a core",
            100.0 * (process_cpu_secs(svc.sf_pid())? - cpu_before.1) / secs,
        );
        for (p, v) in [
            ("p50", l.p50),
            ("p75", l.p75),
            ("p90", l.p90),
            ("p99", l.p99),
        ] {
            run.record("latency-closed", LATENCY_CLOSED, p, "us", v);
        }
        run.record(
            "latency-closed-rate",
            LATENCY_CLOSED,
            &format!("c={closed_connections}"),
            "requests/s",
            w.requests_per_sec,
        );
        if w.non_2xx + w.socket_errors > 0 {
            errors.push(format!(
                "{LATENCY_CLOSED}: {} non-2xx, {} socket errors in one round",
                w.non_2xx, w.socket_errors
            ));
        }
        let cpu_before = (children_cpu_secs()?, process_cpu_secs(svc.sf_pid())?);
        let r = sf_bench(
            &bin,
            "http",
            svc.sf().http_port,
            &["-c", "50", "--rate", &half.to_string()],
            secs,
        )?;
        run.record(
            "latency-client-cpu",
            LATENCY_RATE,
            "cpu",
            "% of a core",
            100.0 * (children_cpu_secs()? - cpu_before.0) / secs,
        );
        run.record(
            "latency-server-cpu",
            LATENCY_RATE,
            "cpu",
            "% of a core",
            100.0 * (process_cpu_secs(svc.sf_pid())? - cpu_before.1) / secs,
        );
        for (p, v) in [
            ("p50", r.latency_us.p50),
            ("p90", r.latency_us.p90),
            ("p99", r.latency_us.p99),
            ("p99.9", r.latency_us.p99_9),
            ("max", r.latency_us.max),
        ] {
            run.record("latency", LATENCY_RATE, p, "us", v);
        }
        run.record(
            "latency-rate",
            LATENCY_RATE,
            "achieved",
            "requests/s",
            r.requests_per_sec,
        );
        if r.errors_total > 0 {
            errors.push(format!(
                "{LATENCY_RATE}: {} errors in one round",
                r.errors_total
            ));
        }
    }
    run.notes.extend(errors);
    run.notes.extend(tls_errors);
    drop(svc);
    run.machine.loadavg_after = crate::model::loadavg();
    run.wall_secs = started.elapsed().as_secs_f64();
    Ok(run)
}

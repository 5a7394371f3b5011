//! The report's service sections: our server against Redis INCR and a PostgreSQL sequence,
//! plaintext against TLS, our RESP port against redis-server, and the client library.

use super::{LAYOUT_MAX, count, num, paired, ratio, samples, subjects, table};
use crate::lib_bench::OURS;
use crate::model::Run;
use crate::service::{
    CONNECTIONS, GRPC_H2LOAD, H2_ZERO, LATENCY_CLOSED, LATENCY_RATE, NGHTTPD, REDIS, RESP_BATCH,
    RESP_GROUP, RESP_OURS, RESP_REDIS, TLS_GROUP, WRK,
};
use std::fmt::Write as _;

pub(super) fn service_section(out: &mut String, svc: &Run, lib: Option<&Run>, charts_link: &str) {
    let _ = writeln!(out, "## Service\n");
    let _ = writeln!(
        out,
        "Redis, PostgreSQL and `snowflake serve --worker-threads 1` on loopback, started by the harness, measured with their own tools, rounds interleaved; median of {} rounds of {} s. Every request is one ID unless stated. A ratio of two servers is the median of the rounds' ratios (each round measures both within seconds of each other), so it can differ a little from the ratio of the medians.\n",
        svc.rounds, svc.secs
    );
    let redis = svc.median("single-id", REDIS, "c=50").unwrap_or(f64::NAN);
    let times = |a: &str, b: &str| {
        paired(svc, "single-id", a, "c=50", b, "c=50")
            .map_or_else(|| "–".into(), |r| format!("{r:.2}×"))
    };
    let _ = writeln!(out, "### Single IDs, 50 connections, no pipelining\n");
    let rows: Vec<Vec<String>> = subjects(svc, "single-id")
        .iter()
        .filter_map(|s| svc.find("single-id", s, "c=50"))
        .map(|m| {
            // Ours as a share of the zero-work server measured with the same client.
            let of_ceiling = crate::service::ceiling_of(&m.subject)
                .and_then(|(c, _)| paired(svc, "single-id", &m.subject, "c=50", c, "c=50"))
                .map_or_else(String::new, |c| format!("{:.0}%", 100.0 * c));
            vec![
                m.subject.clone(),
                num(m.median),
                times(&m.subject, REDIS),
                times(&m.subject, WRK),
                of_ceiling,
                samples(m),
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "subject",
            "IDs/s",
            "vs Redis",
            "vs ours (wrk)",
            "of its ceiling",
            "rounds",
        ],
        &rows,
    ));
    out.push('\n');
    let ceiling = paired(
        svc,
        "single-id",
        crate::ceiling::HTTP1,
        "c=50",
        REDIS,
        "c=50",
    );
    let ours = paired(svc, "single-id", WRK, "c=50", crate::ceiling::HTTP1, "c=50");
    if let (Some(ceiling), Some(ours)) = (ceiling, ours) {
        let _ = writeln!(
            out,
            "The HTTP/1.1 ceiling: a zero-work server in C (`bench/c/zero_work_http.c`: one thread on epoll like Redis, keep-alive, every pipelined request answered in order, one write per read) answering `GET /v1/id` with a fixed answer of the same size as ours (same status line, same headers, same body length; the harness checks), doing no other work, reached {ceiling:.2}× Redis with the same client (`wrk -t1 -c50`); our HTTP /v1/id (wrk) reached {:.0}% of that.\n",
            100.0 * ours
        );
    }
    let ceiling = paired(svc, "single-id", NGHTTPD, "c=50", REDIS, "c=50");
    let grpc = paired(svc, "single-id", GRPC_H2LOAD, "c=50", NGHTTPD, "c=50");
    if let (Some(ceiling), Some(grpc)) = (ceiling, grpc) {
        let _ = writeln!(
            out,
            "The HTTP/2 ceiling: nghttpd (nghttp2's own server, in C, one thread) answering NextId's path with a fixed gRPC frame, doing no other work, reached {ceiling:.2}× Redis with the same client (h2load, 50 connections, one stream each); our gRPC NextId reached {:.0}% of that.\n",
            100.0 * grpc
        );
        let h2 = paired(svc, "single-id", H2_ZERO, "c=50", NGHTTPD, "c=50");
        let ours = paired(svc, "single-id", GRPC_H2LOAD, "c=50", H2_ZERO, "c=50");
        if let (Some(h2), Some(ours)) = (h2, ours) {
            let _ = writeln!(
                out,
                "How much of that is the HTTP/2 library's: a zero-work gRPC server on h2, the library our gRPC door is built on (`bench/src/zero_work_h2.rs`: the same fixed answer, headers and trailers, one thread, no generator, metrics, timers or limits), reached {:.0}% of nghttpd in the same rounds; our gRPC NextId reached {:.0}% of it.\n",
                100.0 * h2,
                100.0 * ours
            );
        }
    }

    let _ = writeln!(out, "### Batches\n");
    let rows: Vec<Vec<String>> = subjects(svc, "batch")
        .iter()
        .filter_map(|s| svc.find("batch", s, "c=50"))
        .map(|m| {
            vec![
                m.subject.clone(),
                num(m.median),
                format!("{:.1}%", 100.0 * m.median / LAYOUT_MAX),
                ratio(m.median, redis),
                samples(m),
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "request",
            "IDs/s",
            "of 4,096,000",
            "vs Redis INCR",
            "rounds",
        ],
        &rows,
    ));
    out.push('\n');

    let _ = writeln!(out, "### Throughput versus connections\n");
    let mut headers = vec!["subject".to_owned()];
    headers.extend(CONNECTIONS.iter().map(|c| format!("{c} conn.")));
    let rows: Vec<Vec<String>> = subjects(svc, "connections")
        .iter()
        .map(|s| {
            let mut row = vec![s.clone()];
            row.extend(CONNECTIONS.iter().map(|c| {
                svc.median("connections", s, &format!("c={c}"))
                    .map_or_else(String::new, num)
            }));
            row
        })
        .collect();
    let h: Vec<&str> = headers.iter().map(String::as_str).collect();
    out.push_str(&table(&h, &rows));
    let _ = writeln!(
        out,
        "\n![requests/s versus connections]({charts_link}/service-connections.svg)\n"
    );

    let _ = writeln!(out, "### HTTP latency at half of peak\n");
    let latency_table = |group: &str, rate_group: &str, subject: &str| -> Option<String> {
        let rows: Vec<Vec<String>> = svc
            .measurements
            .iter()
            .filter(|m| m.group == group && m.subject == subject)
            .map(|m| vec![m.parameter.clone(), num(m.median), samples(m)])
            .collect();
        if rows.is_empty() {
            return None;
        }
        let achieved = svc
            .measurements
            .iter()
            .find(|m| m.group == rate_group && m.subject == subject)
            .map_or_else(String::new, |m| {
                format!(" Achieved: {} requests/s", num(m.median))
            });
        let cpu = match (
            svc.median("latency-client-cpu", subject, "cpu"),
            svc.median("latency-server-cpu", subject, "cpu"),
        ) {
            (Some(client), Some(server)) => {
                format!("; the client used {client:.0}% of a core, the server {server:.0}%.")
            }
            _ => ".".to_owned(),
        };
        let achieved = format!("{achieved}{cpu}");
        Some(format!(
            "{achieved}\n\n{}",
            table(&["percentile", "µs", "rounds"], &rows)
        ))
    };
    if let Some(t) = latency_table("latency-closed", "latency-closed-rate", LATENCY_CLOSED) {
        let connections = svc
            .measurements
            .iter()
            .find(|m| m.group == "latency-closed-rate")
            .map_or_else(String::new, |m| m.parameter.replace("c=", ""));
        let share = svc
            .median(
                "latency-closed-rate",
                LATENCY_CLOSED,
                &format!("c={connections}"),
            )
            .zip(svc.median("single-id", WRK, "c=50"))
            .map_or_else(String::new, |(achieved, peak)| {
                format!(", {:.0}% of the wrk peak", 100.0 * achieved / peak)
            });
        let _ = writeln!(
            out,
            "Closed loop, `wrk -t1 -c{connections} --latency`: the fewest connections that reached at least half of the peak in a 1 s probe (so at least half of the load{share}).{t}"
        );
    }
    if let Some(t) = latency_table("latency", "latency-rate", LATENCY_RATE) {
        let _ = writeln!(
            out,
            "Fixed rate, 50 connections, `snowflake bench --rate` (latency from each request's scheduled send time: coordinated omission corrected).{t}"
        );
    }
    if let Some(p99) = svc.median("redis-latency", REDIS, "p99") {
        let _ = writeln!(
            out,
            "For scale: redis-benchmark's own p99 for INCR at full load (50 connections) was {} µs.",
            num(p99)
        );
    }
    if let Some(max) = svc.median("machine-wakeup", "cyclictest", "max") {
        let v = |p: &str| {
            svc.median("machine-wakeup", "cyclictest", p)
                .map_or_else(String::new, num)
        };
        let _ = writeln!(
            out,
            "\nThe machine itself, idle: a thread sleeping on a timer (`cyclictest -t1 -i 200`) woke p50 {} µs, p99 {} µs, p99.9 {} µs and at worst {} µs late.",
            v("p50"),
            v("p99"),
            v("p99.9"),
            num(max)
        );
    }
    let closed_cpu = svc.median("latency-client-cpu", LATENCY_CLOSED, "cpu");
    let rate_cpu = svc.median("latency-client-cpu", LATENCY_RATE, "cpu");
    if let (Some(closed_cpu), Some(rate_cpu)) = (closed_cpu, rate_cpu) {
        let _ = writeln!(
            out,
            "\nThe two clients offered the same load at very different cost: wrk used {closed_cpu:.0}% of a core, `snowflake bench --rate` {rate_cpu:.0}%. At a fixed rate every request goes out on its own wake-up instead of right after the previous answer, so the client pays a wake-up (and the kernel a cross-CPU wake of the server) per request. With 2 vCPUs and the server on the other one, a client near 100% of its core queues its own requests, and the coordinated-omission correction rightly counts that queueing as latency: on this machine the fixed-rate p99 measures the client as much as the server."
        );
    }
    let _ = writeln!(
        out,
        "\n![latency percentiles]({charts_link}/service-latency.svg)\n"
    );

    tls_section(out, svc);
    resp_section(out, svc, charts_link);
    client_section(out, svc, lib);

    let _ = writeln!(out, "### Memory (VmRSS)\n");
    let rows: Vec<Vec<String>> = subjects(svc, "memory")
        .iter()
        .map(|s| {
            let v = |p: &str| {
                svc.median("memory", s, p)
                    .map_or_else(String::new, |k| format!("{} KiB", num(k)))
            };
            vec![s.clone(), v("idle"), v("after load")]
        })
        .collect();
    out.push_str(&table(&["process", "idle", "after the load above"], &rows));
    out.push('\n');
}

/// Plaintext against TLS: the same build of our server twice (one with `--tls-cert`), and
/// Redis's own `--tls-port`.
fn tls_section(out: &mut String, svc: &Run) {
    let subjects = subjects(svc, TLS_GROUP);
    if subjects.is_empty() {
        return;
    }
    let _ = writeln!(out, "### TLS\n");
    let _ = writeln!(
        out,
        "A second `snowflake serve --worker-threads 1` with `--tls-cert`/`--tls-key` (RSA 2048, rustls with ring) on its HTTP, gRPC and RESP ports, beside the plaintext one; redis-server with `--tls-port` on the same certificate. Each pair ran back to back in every round, with the same client.\n"
    );
    let rows: Vec<Vec<String>> = subjects
        .iter()
        .map(|s| {
            let plain = svc.median(TLS_GROUP, s, "plaintext").unwrap_or(f64::NAN);
            let tls = svc.median(TLS_GROUP, s, "TLS").unwrap_or(f64::NAN);
            let limit = if s.starts_with("batches") {
                format!("{:.1}% of 4,096,000", 100.0 * tls / LAYOUT_MAX)
            } else {
                String::new()
            };
            vec![s.clone(), num(plain), num(tls), ratio(tls, plain), limit]
        })
        .collect();
    out.push_str(&table(
        &[
            "IDs/s",
            "plaintext",
            "TLS",
            "TLS / plaintext",
            "batches: of the limit",
        ],
        &rows,
    ));
    out.push('\n');
}

/// Our RESP port against redis-server with redis-benchmark, and RESP batches.
fn resp_section(out: &mut String, svc: &Run, charts_link: &str) {
    if subjects(svc, RESP_GROUP).is_empty() {
        return;
    }
    let _ = writeln!(out, "### Redis clients (RESP)\n");
    let _ = writeln!(
        out,
        "`redis-benchmark -t incr -c 50` (and `-P 16`) against our `--resp-addr`, against redis-server (persistence off) and against the zero-work RESP server in C (`bench/c/zero_work_resp.c`: one thread on epoll, one integer reply per command, no parsing), alternating in every round.\n"
    );
    let rows: Vec<Vec<String>> = ["c=50", "c=50 -P 16"]
        .iter()
        .map(|p| {
            let ours = svc.median(RESP_GROUP, RESP_OURS, p).unwrap_or(f64::NAN);
            let redis = svc.median(RESP_GROUP, RESP_REDIS, p).unwrap_or(f64::NAN);
            let ceiling = svc.median(RESP_GROUP, crate::ceiling::RESP, p);
            let rounds = svc
                .find(RESP_GROUP, RESP_OURS, p)
                .zip(svc.find(RESP_GROUP, RESP_REDIS, p))
                .map(|(o, r)| {
                    o.samples
                        .iter()
                        .zip(&r.samples)
                        .map(|(o, r)| ratio(*o, *r))
                        .collect::<Vec<_>>()
                        .join(" / ")
                })
                .unwrap_or_default();
            vec![
                format!(
                    "INCR, {}",
                    p.replace("c=50", "50 connections").replace(" -P", ", -P")
                ),
                num(ours),
                num(redis),
                ratio(ours, redis),
                ceiling.map_or_else(String::new, num),
                ceiling.map_or_else(String::new, |c| format!("{:.0}%", 100.0 * ours / c)),
                rounds,
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "requests/s",
            "ours",
            "redis-server",
            "ours / Redis",
            "zero-work C",
            "ours / zero-work",
            "rounds (ours / Redis)",
        ],
        &rows,
    ));
    if let Some(batch) = svc.median(RESP_GROUP, RESP_BATCH, "c=4") {
        let _ = writeln!(
            out,
            "\n{RESP_BATCH}: {} IDs/s, {:.1}% of 4,096,000.",
            num(batch),
            100.0 * batch / LAYOUT_MAX
        );
    }
    let _ = writeln!(
        out,
        "\n![RESP against redis-server]({charts_link}/service-resp.svg)\n"
    );
}

/// The client library: prefetch at a paced 1,000,000 IDs/s, one round trip, the in-process
/// generator for scale.
fn client_section(out: &mut String, svc: &Run, lib: Option<&Run>) {
    use crate::client::{GROUP, PREFETCH_PACED, ROUND_TRIP, THROUGHPUT};
    if subjects(svc, GROUP).is_empty() {
        return;
    }
    let _ = writeln!(out, "### Client library (`snowflake-client`)\n");
    let _ = writeln!(
        out,
        "One client process against the server above over gRPC on loopback, in rounds of its own: `next_id()` with prefetch (`max_age` 1 s) called 10,000,000 times a round on a fixed schedule of 1,000,000 per second, each call timed (`Instant` before and after, so a figure includes one clock read); then as fast as one task goes; then without prefetch, where each call is one `NextId` round trip.\n"
    );
    let ns = |s: &str, p: &str| svc.median(GROUP, s, p).map_or_else(|| "–".into(), num);
    let mut rows = vec![
        vec![
            PREFETCH_PACED.to_owned(),
            ns(PREFETCH_PACED, "p50"),
            ns(PREFETCH_PACED, "p99"),
            ns(PREFETCH_PACED, "p99.9"),
            ns(PREFETCH_PACED, "max"),
        ],
        vec![
            ROUND_TRIP.to_owned(),
            ns(ROUND_TRIP, "p50"),
            ns(ROUND_TRIP, "p99"),
            String::new(),
            String::new(),
        ],
    ];
    if let Some(gen_ns) = lib.and_then(|l| l.median("lib-ns", OURS, "threads=1")) {
        rows.push(vec![
            "in-process generator (`snowflake-core`), per ID, for scale".into(),
            num(gen_ns),
            String::new(),
            String::new(),
            String::new(),
        ]);
    }
    out.push_str(&table(
        &["ns per call", "p50", "p99", "p99.9", "max"],
        &rows,
    ));
    let achieved = svc.median(GROUP, PREFETCH_PACED, "achieved");
    let waits = svc.find(GROUP, PREFETCH_PACED, "calls that waited for a refill");
    let calls = svc.median(GROUP, PREFETCH_PACED, "calls");
    let fast = svc.median(GROUP, THROUGHPUT, "IDs/s");
    let _ = writeln!(
        out,
        "\nPaced run: {} IDs/s achieved; of {} calls a round, {} (median of the rounds; per round: {}) found the buffer empty and waited for a refill. One task as fast as it goes: {} IDs/s.\n",
        achieved.map_or_else(|| "–".into(), num),
        calls.map_or_else(|| "–".into(), count),
        waits.map_or_else(|| "–".into(), |m| count(m.median)),
        waits.map_or_else(
            || "–".into(),
            |m| m
                .samples
                .iter()
                .map(|&w| count(w))
                .collect::<Vec<_>>()
                .join(" / ")
        ),
        fast.map_or_else(|| "–".into(), num),
    );
}

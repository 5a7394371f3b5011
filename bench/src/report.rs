//! `report`: markdown tables and SVG charts from the JSON of `lib`, `service` and `soak`.

use crate::lib_bench::{CLOCK, OURS};
use crate::model::{Machine, Measurement, Run, median};
use crate::service::RESP_GROUP;
use crate::soak::{self, Soak};
use anyhow::Result;
use std::fmt::Write as _;
use std::path::Path;

mod service;
mod targets;

use service::service_section;
use targets::targets_section;

/// The layout's ceiling for one node: 4096 IDs per millisecond.
const LAYOUT_MAX: f64 = 4_096_000.0;

/// A markdown table; the first column left-aligned, the others right-aligned.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = String::new();
    let line = |cells: &[String]| format!("| {} |\n", cells.join(" | "));
    out.push_str(&line(
        &headers.iter().map(|h| (*h).to_owned()).collect::<Vec<_>>(),
    ));
    let align: Vec<String> = (0..headers.len())
        .map(|i| {
            if i == 0 {
                "---".to_owned()
            } else {
                "---:".to_owned()
            }
        })
        .collect();
    out.push_str(&line(&align));
    for row in rows {
        let mut cells: Vec<String> = row.iter().map(|c| c.replace('|', "\\|")).collect();
        cells.resize(headers.len(), String::new());
        out.push_str(&line(&cells));
    }
    out
}

/// A number for a table: thousands separators for large values, one decimal for small ones.
pub fn num(v: f64) -> String {
    if v.is_nan() {
        return "–".to_owned();
    }
    if v.abs() >= 100.0 {
        let s = format!("{:.0}", v.abs());
        let mut grouped = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i) % 3 == 0 {
                grouped.push(',');
            }
            grouped.push(c);
        }
        if v < 0.0 {
            format!("-{grouped}")
        } else {
            grouped
        }
    } else {
        format!("{v:.1}")
    }
}

/// A whole count: thousands separators, no decimals.
pub fn count(v: f64) -> String {
    if v.abs() >= 100.0 {
        num(v)
    } else {
        format!("{v:.0}")
    }
}

/// `a / b` as `1.23×`.
pub fn ratio(a: f64, b: f64) -> String {
    if a.is_nan() || b.is_nan() || b == 0.0 {
        "–".to_owned()
    } else {
        format!("{:.2}×", a / b)
    }
}

fn samples(m: &Measurement) -> String {
    m.samples
        .iter()
        .map(|v| num(*v))
        .collect::<Vec<_>>()
        .join(" / ")
}

/// The median over the rounds of `a`'s rate over `b`'s in the same round; `None` when either
/// was not measured. Each round measures the two within seconds of each other, so the drift of
/// a shared machine's speed between rounds cancels out of each ratio.
pub(super) fn paired(svc: &Run, group: &str, a: &str, pa: &str, b: &str, pb: &str) -> Option<f64> {
    let (a, b) = (svc.find(group, a, pa)?, svc.find(group, b, pb)?);
    let ratios: Vec<f64> = a
        .samples
        .iter()
        .zip(&b.samples)
        .map(|(a, b)| a / b)
        .collect();
    (!ratios.is_empty()).then(|| crate::model::median(&ratios))
}

fn subjects(run: &Run, group: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for m in run.measurements.iter().filter(|m| m.group == group) {
        if !out.contains(&m.subject) {
            out.push(m.subject.clone());
        }
    }
    out
}

fn params(run: &Run, group: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for m in run.measurements.iter().filter(|m| m.group == group) {
        if !out.contains(&m.parameter) {
            out.push(m.parameter.clone());
        }
    }
    out
}

fn machine_section(out: &mut String, lib: Option<&Run>, svc: Option<&Run>, soak: Option<&Soak>) {
    let m: Machine = lib
        .or(svc)
        .map(|r| r.machine.clone())
        .or_else(|| soak.map(|s| s.machine.clone()))
        .unwrap_or_default();
    let _ = writeln!(out, "## Machine\n");
    let _ = writeln!(out, "- CPU: {} ({} cores visible)", m.cpu, m.cores);
    let _ = writeln!(out, "- Kernel: {}", m.kernel);
    let _ = writeln!(out, "- Date: {}", m.date);
    for r in [lib, svc].into_iter().flatten() {
        let _ = writeln!(
            out,
            "- `{}`: {} round(s) of {} s, took {:.0} s; load average before {} / after {}",
            r.part,
            r.rounds,
            r.secs,
            r.wall_secs,
            r.machine.loadavg_before,
            r.machine.loadavg_after
        );
    }
    out.push('\n');
}

fn lib_section(out: &mut String, lib: &Run, charts_link: &str) {
    let _ = writeln!(out, "## In-process generators\n");
    let _ = writeln!(
        out,
        "Every crate on Twitter's layout (41-bit ms since 2010-11-04T01:42:54.657Z, datacenter 1, worker 1, 12-bit sequence), one generator shared by all threads, median of {} rounds of {} s. The layout caps one node at 4,096,000 IDs/s.\n",
        lib.rounds, lib.secs
    );
    let threads = params(lib, "lib-throughput");
    let ours_ns = lib.median("lib-ns", OURS, "threads=1").unwrap_or(f64::NAN);
    let mut headers: Vec<String> = vec!["generator".into()];
    headers.extend(
        threads
            .iter()
            .map(|t| format!("IDs/s, {}", t.replace("threads=", "threads "))),
    );
    headers.push("ns/ID, 1 thread".into());
    headers.push("ns/ID vs ours".into());
    let mut rows = Vec::new();
    for s in subjects(lib, "lib-ns") {
        let mut row = vec![if s == OURS {
            format!("**{s}**")
        } else {
            s.clone()
        }];
        for t in &threads {
            row.push(
                lib.median("lib-throughput", &s, t)
                    .map_or_else(String::new, num),
            );
        }
        let ns = lib.median("lib-ns", &s, "threads=1").unwrap_or(f64::NAN);
        row.push(num(ns));
        row.push(ratio(ns, ours_ns));
        rows.push(row);
    }
    let h: Vec<&str> = headers.iter().map(String::as_str).collect();
    out.push_str(&table(&h, &rows));
    let clock = lib.median("lib-ns", CLOCK, "threads=1").unwrap_or(f64::NAN);
    let _ = writeln!(
        out,
        "\nns/ID is the median over bursts of 1,500 IDs, each burst starting at a fresh millisecond (so no generator waits for its sequence): the cost of one uncontended ID. Ours costs {} ns more than a bare `SystemTime::now()` in the same run.\n",
        num(ours_ns - clock)
    );
    let _ = writeln!(
        out,
        "![IDs/s versus threads]({charts_link}/lib-threads.svg)\n"
    );

    let _ = writeln!(out, "### Uniqueness and layout of a sample\n");
    let mut rows = Vec::new();
    for s in subjects(lib, "lib-sample") {
        let v = |p: &str| {
            lib.median("lib-sample", &s, p)
                .map_or_else(String::new, count)
        };
        rows.push(vec![
            s.clone(),
            v("total"),
            v("duplicates"),
            v("out-of-order"),
            v("bad-layout"),
        ]);
    }
    out.push_str(&table(
        &[
            "generator",
            "IDs (2 threads)",
            "duplicates",
            "out of order in a thread",
            "not dc 1 / worker 1 / now",
        ],
        &rows,
    ));
    out.push('\n');
}

/// `KiB` with thousands separators.
fn kib(v: f64) -> String {
    format!("{} KiB", count(v))
}

/// The soak: what was run, one row of VmRSS, one row per protocol, the chart; or, without a
/// soak, how to produce one.
fn soak_section(out: &mut String, soak: Option<&Soak>, charts_link: &str, soak_command: &str) {
    let _ = writeln!(
        out,
        "## Memory over a soak
"
    );
    let Some(soak) = soak else {
        let _ = writeln!(
            out,
            "No soak results (`soak.json`) yet: `all` leaves out the {}-minute soak at full load. Produce it, then this section, with\n\n```sh\n{soak_command}\n```\n",
            soak::DEFAULT_MINUTES
        );
        return;
    };
    let protocols = ["http", "grpc", "thrift"];
    let chunks = |p: &str| soak.of(p).count();
    let m = &soak.machine;
    let _ = writeln!(
        out,
        "`snowflake serve --worker-threads 1` on loopback, started by the harness, at full load for {} min: {} consecutive chunks of {} s at {} connections, single IDs over HTTP with `wrk -t1 -c{}` ({} chunks) and, in every {}, one chunk of gRPC `NextId` ({}) and one of Thrift `get_id` ({}) with `snowflake bench -c {}`. VmRSS is read from `/proc` once the server is ready (idle), after every chunk, and every 250 ms during it (under load). The growth runs from the first sample at least {} s into the load (after warm-up; the 2nd sample in a shorter soak) to the last one, which is always an HTTP chunk. Run on {}, took {:.0} s; load average before {} / after {}.\n",
        num(soak.minutes),
        soak.samples.len(),
        soak.sample_secs,
        soak.connections,
        soak.connections,
        chunks("http"),
        soak::CYCLE,
        chunks("grpc"),
        chunks("thrift"),
        soak.connections,
        soak::WARM_SECS,
        m.date,
        soak.wall_secs,
        m.loadavg_before,
        m.loadavg_after
    );
    let g = &soak.growth;
    let sign = if g.kib > 0.0 { "+" } else { "" };
    out.push_str(&table(
        &[
            "idle",
            &format!("after warm-up ({:.0} s)", g.warm_elapsed_secs),
            &format!("end ({:.0} s)", g.end_elapsed_secs),
            "growth, warm-up to end",
            "peak (VmHWM)",
            "minutes",
            "IDs issued",
            "errors",
        ],
        &[vec![
            kib(soak.idle_rss_kib),
            kib(g.warm_rss_kib),
            kib(soak.end_rss_kib),
            format!("{sign}{} ({sign}{:.1}%)", kib(g.kib), g.pct),
            kib(soak.peak_rss_kib),
            num(soak.minutes),
            count(soak.total_ids as f64),
            count(soak.total_errors as f64),
        ]],
    ));
    if let Some(i) = soak::steady_from(&soak.samples) {
        let last = soak.samples.len() - 1;
        let (from, end) = (&soak.samples[i], &soak.samples[last]);
        if i < last {
            let _ = writeln!(
                out,
                "\nVmRSS reached its end value with the {} chunk that ended at {:.0} s and did not change over the last {} samples ({:.0} s).",
                match from.protocol.as_str() {
                    "grpc" => "gRPC",
                    "thrift" => "Thrift",
                    _ => "HTTP",
                },
                from.elapsed_secs,
                last - i + 1,
                end.elapsed_secs - from.elapsed_secs
            );
        } else {
            let _ = writeln!(out, "\nVmRSS still changed at the last sample.");
        }
    }
    out.push('\n');
    let rows: Vec<Vec<String>> = protocols
        .iter()
        .filter(|p| chunks(p) > 0)
        .map(|p| {
            let rps: Vec<f64> = soak.of(p).map(|s| s.requests_per_sec).collect();
            let rss: Vec<f64> = soak.of(p).map(|s| s.rss_kib).collect();
            let min = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
            let max = |v: &[f64]| v.iter().copied().fold(0.0_f64, f64::max);
            vec![
                (*p).to_owned(),
                chunks(p).to_string(),
                num(min(&rps)),
                num(median(&rps)),
                num(max(&rps)),
                count(soak.of(p).map(|s| s.ids as f64).sum()),
                count(soak.of(p).map(|s| s.errors as f64).sum()),
                if min(&rss) == max(&rss) {
                    count(min(&rss))
                } else {
                    format!("{} – {}", count(min(&rss)), count(max(&rss)))
                },
                count(
                    soak.of(p)
                        .map(|s| s.rss_under_load_kib)
                        .fold(0.0_f64, f64::max),
                ),
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "protocol",
            "chunks",
            "requests/s, min",
            "median",
            "max",
            "IDs issued",
            "errors",
            "VmRSS after a chunk, KiB",
            "highest under load, KiB",
        ],
        &rows,
    ));
    let _ = writeln!(
        out,
        "\n![VmRSS and requests/s over the soak]({charts_link}/soak-rss.svg)\n"
    );
    for n in &soak.notes {
        let _ = writeln!(out, "- {n}");
    }
    if !soak.notes.is_empty() {
        out.push('\n');
    }
}

/// The whole markdown document.
pub fn markdown(
    lib: Option<&Run>,
    svc: Option<&Run>,
    soak: Option<&Soak>,
    charts_link: &str,
    command: &str,
    soak_command: &str,
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# Benchmarks\n");
    let _ = writeln!(
        out,
        "Produced by one command, from the repository root:\n\n```sh\n{command}\n```\n"
    );
    let _ = writeln!(
        out,
        "It builds what it needs, installs missing tools (redis-server, redis-tools, wrk, nghttp2-client, nghttp2-server, rt-tests, postgresql, gcc) with apt-get, builds the zero-work servers in C (`bench/c`), starts every server itself on loopback, and rewrites this file and `docs/bench/*.svg`. Numbers are medians of interleaved rounds in one run on one machine; ratios compare numbers from that same run. The machine below is shared: see the load averages.\n"
    );
    let _ = writeln!(
        out,
        "The memory soak ({} minutes at full load) is not part of `all`; `soak` writes `target/compare/soak.json`, and `report` (as `all`) rewrites this file from the results there:\n\n```sh\n{soak_command}\n```\n",
        soak::DEFAULT_MINUTES
    );
    machine_section(&mut out, lib, svc, soak);
    targets_section(&mut out, lib, svc);
    if let Some(lib) = lib {
        lib_section(&mut out, lib, charts_link);
    }
    if let Some(svc) = svc {
        service_section(&mut out, svc, lib, charts_link);
    }
    soak_section(&mut out, soak, charts_link, soak_command);
    let notes: Vec<&String> = [lib, svc]
        .into_iter()
        .flatten()
        .flat_map(|r| &r.notes)
        .collect();
    if !notes.is_empty() {
        let _ = writeln!(out, "## Notes\n");
        for n in notes {
            let _ = writeln!(out, "- {n}");
        }
        out.push('\n');
    }
    out
}

/// Reads `lib.json`, `service.json` and `soak.json` from `dir` (any may be missing, not all),
/// writes the markdown to `markdown_path` and the charts into `charts_dir`.
pub fn write(
    dir: &Path,
    markdown_path: &Path,
    charts_dir: &Path,
    command: &str,
    soak_command: &str,
) -> Result<()> {
    let load = |name: &str| -> Result<Option<Run>> {
        let p = dir.join(name);
        if p.exists() {
            Run::load(&p).map(Some)
        } else {
            Ok(None)
        }
    };
    let lib = load("lib.json")?;
    let svc = load("service.json")?;
    let soak_path = dir.join("soak.json");
    let soak = if soak_path.exists() {
        Some(Soak::load(&soak_path)?)
    } else {
        None
    };
    anyhow::ensure!(
        lib.is_some() || svc.is_some() || soak.is_some(),
        "none of lib.json, service.json and soak.json in {}",
        dir.display()
    );
    std::fs::create_dir_all(charts_dir)?;
    if let Some(lib) = &lib {
        crate::charts::lib_threads(lib, &charts_dir.join("lib-threads.svg"))?;
    }
    if let Some(svc) = &svc {
        crate::charts::connections(svc, &charts_dir.join("service-connections.svg"))?;
        crate::charts::latency(svc, &charts_dir.join("service-latency.svg"))?;
        if svc.measurements.iter().any(|m| m.group == RESP_GROUP) {
            crate::charts::resp(svc, &charts_dir.join("service-resp.svg"))?;
        }
    }
    if let Some(soak) = &soak {
        crate::charts::soak(soak, &charts_dir.join("soak-rss.svg"))?;
    }
    let link = relative_link(markdown_path, charts_dir);
    let md = markdown(
        lib.as_ref(),
        svc.as_ref(),
        soak.as_ref(),
        &link,
        command,
        soak_command,
    );
    if let Some(parent) = markdown_path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let previous = std::fs::read_to_string(markdown_path).unwrap_or_default();
    std::fs::write(markdown_path, with_kept_sections(md, &previous))?;
    eprintln!(
        "report: wrote {} and charts in {}",
        markdown_path.display(),
        charts_dir.display()
    );
    Ok(())
}

/// The line after which BENCHMARKS.md holds sections measured by other tools (the audit, bulk
/// batches beside single IDs): a rewrite keeps them as they are.
pub const KEPT_MARKER: &str = "<!-- Sections below are measured by other commands (each says which); `report` keeps them. -->";

/// `md` followed by the kept sections of the `previous` file, from its marker line on.
fn with_kept_sections(mut md: String, previous: &str) -> String {
    if let Some(at) = previous.find(KEPT_MARKER) {
        if !md.ends_with("\n\n") {
            md.push('\n');
        }
        md.push_str(&previous[at..]);
    }
    md
}

/// The charts directory as a link from the markdown file (relative when it is below it).
fn relative_link(markdown_path: &Path, charts_dir: &Path) -> String {
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_owned());
    let md_dir = abs(markdown_path)
        .parent()
        .map(Path::to_owned)
        .unwrap_or_default();
    let charts = abs(charts_dir);
    match charts.strip_prefix(&md_dir) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".to_owned(),
        Ok(rel) => rel.display().to_string(),
        Err(_) => charts.display().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::{REDIS, RESP_OURS, RESP_REDIS, WRK};

    #[test]
    fn a_rewrite_keeps_the_sections_after_the_marker() {
        let previous = format!("# Old\n\nold numbers\n\n{KEPT_MARKER}\n\n## Audit\n\nkept\n");
        let md = with_kept_sections("# New\n\nnew numbers\n".into(), &previous);
        assert_eq!(
            md,
            format!("# New\n\nnew numbers\n\n{KEPT_MARKER}\n\n## Audit\n\nkept\n")
        );
        assert_eq!(with_kept_sections("# New\n".into(), "# Old\n"), "# New\n");
    }

    #[test]
    fn table_aligns_escapes_and_pads() {
        let t = table(&["a", "b", "c"], &[vec!["x|y".into(), "1".into()]]);
        assert_eq!(
            t,
            "| a | b | c |\n| --- | ---: | ---: |\n| x\\|y | 1 |  |\n"
        );
    }

    #[test]
    fn numbers_and_ratios() {
        assert_eq!(num(4_096_000.4), "4,096,000");
        assert_eq!(num(123.0), "123");
        assert_eq!(num(-1234.0), "-1,234");
        assert_eq!(num(25.04), "25.0");
        assert_eq!(num(f64::NAN), "–");
        assert_eq!(count(0.0), "0");
        assert_eq!(count(1_000_000.0), "1,000,000");
        assert_eq!(ratio(3.0, 2.0), "1.50×");
        assert_eq!(ratio(1.0, 0.0), "–");
    }

    #[test]
    fn relative_links() {
        assert_eq!(
            relative_link(Path::new("/r/BENCHMARKS.md"), Path::new("/r/docs/bench")),
            "docs/bench"
        );
        assert_eq!(
            relative_link(Path::new("/t/BENCHMARKS.md"), Path::new("/t")),
            "."
        );
    }

    #[test]
    fn markdown_from_a_small_run() {
        let mut lib = Run::new("lib", 1.0, 1);
        lib.record("lib-ns", CLOCK, "threads=1", "ns/ID", 20.0);
        lib.record("lib-ns", OURS, "threads=1", "ns/ID", 25.0);
        lib.record("lib-throughput", OURS, "threads=1", "IDs/s", 4_095_000.0);
        lib.record("lib-throughput", OURS, "threads=2", "IDs/s", 4_000_000.0);
        let mut svc = Run::new("service", 1.0, 1);
        svc.record("single-id", REDIS, "c=50", "IDs/s", 100_000.0);
        svc.record("single-id", WRK, "c=50", "IDs/s", 150_000.0);
        svc.record(
            "single-id",
            crate::ceiling::HTTP1,
            "c=50",
            "IDs/s",
            200_000.0,
        );
        svc.record(RESP_GROUP, RESP_OURS, "c=50", "requests/s", 95_000.0);
        svc.record(RESP_GROUP, RESP_REDIS, "c=50", "requests/s", 100_000.0);
        svc.record(
            RESP_GROUP,
            crate::ceiling::RESP,
            "c=50",
            "requests/s",
            100_000.0,
        );
        let md = markdown(
            Some(&lib),
            Some(&svc),
            None,
            "docs/bench",
            "cmd",
            "soak-cmd",
        );
        assert!(
            md.contains("| **snowflake-core (ours)** | 4,095,000 | 4,000,000 | 25.0 | 1.00× |"),
            "{md}"
        );
        assert!(
            md.contains(
                "| snowflake HTTP /v1/id (wrk) | 150,000 | 1.50× | 1.00× | 75% | 150,000 |"
            ),
            "{md}"
        );
        // Each door against its own ceiling, in the service tables and the target table.
        assert!(
            md.contains("| reference: zero-work HTTP/1.1 server in C (epoll, wrk) | 200,000 | 2.00× | 1.33× |  | 200,000 |"),
            "{md}"
        );
        assert!(
            md.contains("| snowflake HTTP /v1/id (wrk) ≥ 85% of its ceiling, the zero-work HTTP/1.1 server in C, same client | 75% | **not met** |"),
            "{md}"
        );
        assert!(
            md.contains("| RESP INCR, 50 connections (redis-benchmark) ≥ 95% of its ceiling, the zero-work RESP server in C, same client | 95% | met |"),
            "{md}"
        );
        assert!(
            md.contains(
                "| INCR, 50 connections | 95,000 | 100,000 | 0.95× | 100,000 | 95% | 0.95× |"
            ),
            "{md}"
        );
        assert!(
            md.contains("our HTTP /v1/id (wrk) reached 75% of that"),
            "{md}"
        );
        assert!(
            md.contains("| one ID ≤ one bare clock read + 10 ns | 25.0 ns vs 20.0 + 10 ns | met |"),
            "{md}"
        );
        assert!(
            md.contains("generator ≥ 99% of 4,096,000 IDs/s, threads 2 | 97.7% | **not met**"),
            "{md}"
        );
        assert!(md.contains("![IDs/s versus threads](docs/bench/lib-threads.svg)"));
        // Without soak.json, the soak section says how to produce it.
        assert!(
            md.contains("## Memory over a soak\n\nNo soak results (`soak.json`) yet"),
            "{md}"
        );
        assert!(md.contains("```sh\nsoak-cmd\n```"), "{md}");
    }

    #[test]
    fn soak_tables_from_a_small_soak() {
        use crate::soak::tests::sample;
        let samples = vec![
            sample(10.0, "http", 90_000.0, 9_000.0),
            sample(61.0, "http", 100_000.0, 10_000.0),
            sample(70.0, "grpc", 35_000.0, 10_400.0),
            sample(80.0, "http", 95_000.0, 10_100.0),
            sample(90.0, "thrift", 110_000.0, 10_200.0),
            sample(100.0, "http", 98_000.0, 10_250.0),
        ];
        let mut soak = Soak {
            minutes: 1.5,
            sample_secs: 10,
            connections: 50,
            idle_rss_kib: 8_380.0,
            end_rss_kib: 10_250.0,
            peak_rss_kib: 10_600.0,
            growth: crate::soak::growth(&samples, 60.0).unwrap(),
            total_ids: samples.iter().map(|s| s.ids).sum(),
            total_errors: 3,
            samples,
            ..Soak::default()
        };
        soak.samples[3].errors = 3;
        let mut md = String::new();
        soak_section(&mut md, Some(&soak), "docs/bench", "soak-cmd");
        assert!(
            md.contains(
                "| idle | after warm-up (61 s) | end (100 s) | growth, warm-up to end | peak (VmHWM) | minutes | IDs issued | errors |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n| 8,380 KiB | 10,000 KiB | 10,250 KiB | +250 KiB (+2.5%) | 10,600 KiB | 1.5 | 528,000 | 3 |\n"
            ),
            "{md}"
        );
        assert!(
            md.contains(
                "| http | 4 | 90,000 | 96,500 | 100,000 | 383,000 | 3 | 9,000 – 10,250 | 10,350 |"
            ),
            "{md}"
        );
        assert!(
            md.contains("| grpc | 1 | 35,000 | 35,000 | 35,000 | 35,000 | 0 | 10,400 | 10,500 |"),
            "{md}"
        );
        assert!(
            md.contains("6 consecutive chunks of 10 s at 50 connections"),
            "{md}"
        );
        assert!(md.contains("(4 chunks)"), "{md}");
        assert!(md.contains("![VmRSS and requests/s over the soak](docs/bench/soak-rss.svg)"));
        soak.samples.push(sample(110.0, "http", 98_000.0, 10_250.0));
        let mut md = String::new();
        soak_section(&mut md, Some(&soak), ".", "soak-cmd");
        assert!(
            md.contains("reached its end value with the HTTP chunk that ended at 100 s and did not change over the last 2 samples (10 s)."),
            "{md}"
        );
        // A shrinking RSS has no plus sign.
        soak.growth.kib = -50.0;
        soak.growth.pct = -0.5;
        let mut md = String::new();
        soak_section(&mut md, Some(&soak), ".", "soak-cmd");
        assert!(md.contains("| -50 KiB (-0.5%) |"), "{md}");
    }
}

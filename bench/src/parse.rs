//! Parsers for what the standard tools print.

use anyhow::{Context, Result, anyhow, bail};
use serde::Deserialize;
use std::collections::HashMap;

/// One row of `redis-benchmark --csv`.
#[derive(Debug, Clone, PartialEq)]
pub struct RedisRow {
    pub test: String,
    pub rps: f64,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
}

/// Finds the row of `test` (e.g. `INCR`) in `redis-benchmark --csv` output, reading the columns
/// by the header line (Redis 7 prints
/// `"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms",...`; older ones only
/// `"test","rps"` rows without a header).
pub fn redis_csv(text: &str, test: &str) -> Result<RedisRow> {
    let split = |line: &str| -> Vec<String> {
        line.trim()
            .split(',')
            .map(|f| f.trim().trim_matches('"').to_owned())
            .collect()
    };
    let mut header: Option<Vec<String>> = None;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let fields = split(line);
        if fields.first().is_some_and(|f| f == "test") {
            header = Some(fields);
            continue;
        }
        if fields.first().is_none_or(|f| f != test) {
            continue;
        }
        let column = |name: &str, default: Option<usize>| -> Option<f64> {
            let i = match &header {
                Some(h) => h.iter().position(|c| c == name)?,
                None => default?,
            };
            fields.get(i)?.parse().ok()
        };
        let rps = column("rps", Some(1)).ok_or_else(|| anyhow!("no rps in {line:?}"))?;
        return Ok(RedisRow {
            test: test.to_owned(),
            rps,
            p50_ms: column("p50_latency_ms", None),
            p99_ms: column("p99_latency_ms", None),
        });
    }
    bail!("redis-benchmark printed no {test} row: {text:?}")
}

/// What pgbench reports.
#[derive(Debug, Clone, PartialEq)]
pub struct Pgbench {
    pub tps: f64,
    pub latency_avg_ms: Option<f64>,
    pub failed: u64,
}

/// Reads `tps = N (without initial connection time)` (PostgreSQL 14+; older versions print
/// `(excluding connections establishing)`), `latency average = X ms` and
/// `number of failed transactions: N`.
pub fn pgbench(text: &str) -> Result<Pgbench> {
    let mut tps = None;
    let mut latency_avg_ms = None;
    let mut failed = 0;
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("tps = ") {
            let is_without =
                rest.contains("without initial connection") || rest.contains("excluding");
            let v: f64 = first_number(rest).context("tps line")?;
            if is_without || tps.is_none() {
                tps = Some(v);
            }
        } else if let Some(rest) = line.strip_prefix("latency average = ") {
            latency_avg_ms = first_number(rest).ok();
        } else if let Some(rest) = line.strip_prefix("number of failed transactions: ") {
            failed = first_number(rest).map_or(0, |v| v as u64);
        }
    }
    Ok(Pgbench {
        tps: tps.ok_or_else(|| anyhow!("pgbench printed no tps line: {text:?}"))?,
        latency_avg_ms,
        failed,
    })
}

/// What wrk reports.
#[derive(Debug, Clone, PartialEq)]
pub struct Wrk {
    /// Requests completed (`N requests in Xs`), whatever their status.
    pub requests: u64,
    pub requests_per_sec: f64,
    pub non_2xx: u64,
    pub socket_errors: u64,
}

/// Reads `N requests in Xs`, `Requests/sec:  N`, `Non-2xx or 3xx responses: N` and
/// `Socket errors: connect A, read B, write C, timeout D`.
pub fn wrk(text: &str) -> Result<Wrk> {
    let mut requests = 0;
    let mut rps = None;
    let mut non_2xx = 0;
    let mut socket_errors = 0;
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("Requests/sec:") {
            rps = Some(first_number(rest).context("Requests/sec line")?);
        } else if let Some((n, _)) = line.split_once(" requests in ") {
            requests = n
                .trim()
                .parse()
                .with_context(|| format!("bad line {line:?}"))?;
        } else if let Some(rest) = line.strip_prefix("Non-2xx or 3xx responses:") {
            non_2xx = first_number(rest).map_or(0, |v| v as u64);
        } else if let Some(rest) = line.strip_prefix("Socket errors:") {
            socket_errors = rest
                .split(',')
                .filter_map(|part| first_number(part).ok())
                .map(|v| v as u64)
                .sum();
        }
    }
    Ok(Wrk {
        requests,
        requests_per_sec: rps
            .ok_or_else(|| anyhow!("wrk printed no Requests/sec line: {text:?}"))?,
        non_2xx,
        socket_errors,
    })
}

/// The parts of `snowflake bench --json` we use.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct SfBench {
    /// Requests measured and IDs received (checked by the client).
    #[serde(default)]
    pub requests: u64,
    #[serde(default)]
    pub ids: u64,
    pub requests_per_sec: f64,
    pub ids_per_sec: f64,
    pub errors_total: u64,
    pub latency_us: SfLatency,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct SfLatency {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p99_9: f64,
    pub max: f64,
}

pub fn sf_bench(text: &str) -> Result<SfBench> {
    serde_json::from_str(text.trim())
        .with_context(|| format!("parsing snowflake bench --json output {text:?}"))
}

/// What `h2load` reported.
#[derive(Debug, Clone, PartialEq)]
pub struct H2load {
    /// Requests per second over the run.
    pub requests_per_sec: f64,
    /// Requests answered with a 2xx status.
    pub succeeded: u64,
    /// Requests that failed or errored.
    pub failed: u64,
}

/// Parses `h2load`'s summary: `finished in 3.29s, 60783.95 req/s, 2.67MB/s` and
/// `requests: 200000 total, 200000 started, 200000 done, 200000 succeeded, 0 failed, 0 errored, 0 timeout`.
pub fn h2load(text: &str) -> Result<H2load> {
    let mut rps = None;
    let mut succeeded = None;
    let mut failed = 0;
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("finished in ") {
            let field = rest
                .split(',')
                .find(|f| f.trim_end().ends_with("req/s"))
                .ok_or_else(|| anyhow!("no req/s in {line:?}"))?;
            rps = Some(first_number(field)?);
        } else if let Some(rest) = line.strip_prefix("requests:") {
            for part in rest.split(',').map(str::trim) {
                let Some((n, what)) = part.split_once(' ') else {
                    continue;
                };
                let n: u64 = n
                    .parse()
                    .with_context(|| format!("bad count in {line:?}"))?;
                match what {
                    "succeeded" => succeeded = Some(n),
                    "failed" | "errored" | "timeout" => failed += n,
                    _ => {}
                }
            }
        }
    }
    Ok(H2load {
        requests_per_sec: rps
            .ok_or_else(|| anyhow!("h2load printed no \"finished in\" line: {text:?}"))?,
        succeeded: succeeded.ok_or_else(|| anyhow!("h2load printed no requests line: {text:?}"))?,
        failed,
    })
}

/// wrk's `--latency` distribution, in µs.
#[derive(Debug, Clone, PartialEq)]
pub struct WrkLatency {
    pub p50: f64,
    pub p75: f64,
    pub p90: f64,
    pub p99: f64,
}

/// Parses the `Latency Distribution` that `wrk --latency` prints: lines like `50%   39.00us`,
/// `99%    1.23ms` (units us, ms or s).
pub fn wrk_latency(text: &str) -> Result<WrkLatency> {
    let mut found: HashMap<&str, f64> = HashMap::new();
    for line in text.lines().map(str::trim) {
        let Some((pct, value)) = line.split_once('%') else {
            continue;
        };
        if !["50", "75", "90", "99"].contains(&pct) {
            continue;
        }
        let value = value.trim();
        let micros = if let Some(v) = value.strip_suffix("us") {
            v.parse::<f64>().ok()
        } else if let Some(v) = value.strip_suffix("ms") {
            v.parse::<f64>().ok().map(|v| v * 1e3)
        } else if let Some(v) = value.strip_suffix('s') {
            v.parse::<f64>().ok().map(|v| v * 1e6)
        } else {
            None
        };
        let micros = micros.with_context(|| format!("bad latency line {line:?}"))?;
        found.insert(pct, micros);
    }
    let get = |p: &str| {
        found
            .get(p)
            .copied()
            .ok_or_else(|| anyhow!("wrk printed no {p}% latency line: {text:?}"))
    };
    Ok(WrkLatency {
        p50: get("50")?,
        p75: get("75")?,
        p90: get("90")?,
        p99: get("99")?,
    })
}

/// What `cyclictest -q -h N` reported: how late a thread woke from its timer, in µs.
#[derive(Debug, Clone, PartialEq)]
pub struct Cyclictest {
    pub samples: u64,
    pub p50: f64,
    pub p99: f64,
    pub p99_9: f64,
    pub max: f64,
}

/// Parses cyclictest's histogram for one thread (`-t1 -q -h N`): lines `000063 012345` (µs,
/// count), then `# Max Latencies: 02480`. Samples beyond the histogram count as the maximum.
pub fn cyclictest(text: &str) -> Result<Cyclictest> {
    let mut buckets: Vec<(f64, u64)> = Vec::new();
    let mut max = None;
    let mut total = None;
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("# Max Latencies:") {
            max = Some(first_number(rest)?);
        } else if let Some(rest) = line.strip_prefix("# Total:") {
            total = Some(first_number(rest)? as u64);
        } else if !line.starts_with('#') {
            let mut fields = line.split_whitespace();
            if let (Some(us), Some(count), None) = (fields.next(), fields.next(), fields.next())
                && let (Ok(us), Ok(count)) = (us.parse::<f64>(), count.parse::<u64>())
            {
                buckets.push((us, count));
            }
        }
    }
    let max = max.ok_or_else(|| anyhow!("cyclictest printed no Max Latencies line: {text:?}"))?;
    let samples = total.ok_or_else(|| anyhow!("cyclictest printed no Total line: {text:?}"))?;
    if samples == 0 {
        bail!("cyclictest took no samples: {text:?}");
    }
    let quantile = |q: f64| {
        let wanted = (q * samples as f64).ceil() as u64;
        let mut seen = 0;
        for &(us, count) in &buckets {
            seen += count;
            if seen >= wanted {
                return us;
            }
        }
        max
    };
    Ok(Cyclictest {
        samples,
        p50: quantile(0.5),
        p99: quantile(0.99),
        p99_9: quantile(0.999),
        max,
    })
}

/// The first decimal number in `s` (skipping anything before it).
fn first_number(s: &str) -> Result<f64> {
    let start = s
        .find(|c: char| c.is_ascii_digit())
        .ok_or_else(|| anyhow!("no number in {s:?}"))?;
    let rest = &s[start..];
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    rest[..end]
        .parse()
        .with_context(|| format!("bad number in {s:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrk_latency_distribution() {
        let out = "Running 4s test @ http://127.0.0.1:1/v1/id\n  1 threads and 3 connections\n  Thread Stats   Avg      Stdev     Max   +/- Stdev\n    Latency    45.21us   30.11us   2.10ms   97.00%\n  Latency Distribution\n     50%   39.00us\n     75%   50.00us\n     90%   75.00us\n     99%    1.06ms\n  249793 requests in 4.00s, 33.59MB read\nRequests/sec:  62448.32\n";
        let l = wrk_latency(out).unwrap();
        assert_eq!(l.p50, 39.0);
        assert_eq!(l.p75, 50.0);
        assert_eq!(l.p90, 75.0);
        assert!((l.p99 - 1060.0).abs() < 1e-9);
        // The summary's Max column is not a percentile line.
        assert!(wrk_latency("Requests/sec: 1\n").is_err());
        assert!(wrk_latency("     50%   fast\n").is_err());
    }

    #[test]
    fn cyclictest_histogram() {
        let mut out = String::from("# /dev/cpu_dma_latency set to 0us\n");
        out.push_str("000061 000500\n000063 000450\n000080 000040\n000200 000009\n000900 000000\n");
        out.push_str("# Total: 000001000\n# Min Latencies: 00007\n# Avg Latencies: 00062\n# Max Latencies: 02480\n# Histogram Overflows: 00001\n");
        let c = cyclictest(&out).unwrap();
        assert_eq!(c.samples, 1000);
        assert_eq!(c.p50, 61.0);
        assert_eq!(c.p99, 80.0);
        assert_eq!(c.p99_9, 200.0);
        assert_eq!(c.max, 2480.0);
        assert!(cyclictest("# Total: 000000000\n# Max Latencies: 00000\n").is_err());
        assert!(cyclictest("nothing").is_err());
    }

    #[test]
    fn redis_benchmark_7_csv() {
        let text = "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"\n\"INCR\",\"49115.91\",\"0.671\",\"0.088\",\"0.575\",\"1.119\",\"3.703\",\"12.871\"\n";
        let row = redis_csv(text, "INCR").unwrap();
        assert_eq!(row.rps, 49115.91);
        assert_eq!(row.p50_ms, Some(0.575));
        assert_eq!(row.p99_ms, Some(3.703));
    }

    #[test]
    fn redis_benchmark_old_csv_without_header() {
        let row = redis_csv(
            "\"PING_INLINE\",\"1000.00\"\n\"INCR\",\"98039.22\"\n",
            "INCR",
        )
        .unwrap();
        assert_eq!(row.rps, 98039.22);
        assert_eq!(row.p99_ms, None);
        assert!(redis_csv("\"SET\",\"1.0\"\n", "INCR").is_err());
    }

    #[test]
    fn pgbench_15_summary() {
        let text = "pgbench (15.18 (Debian 15.18-0+deb12u1))
transaction type: /tmp/x/nextval.sql
scaling factor: 1
query mode: simple
number of clients: 4
number of threads: 2
maximum number of tries: 1
duration: 10 s
number of transactions actually processed: 137901
number of failed transactions: 0 (0.000%)
latency average = 0.290 ms
initial connection time = 3.127 ms
tps = 13790.353226 (without initial connection time)
";
        let p = pgbench(text).unwrap();
        assert_eq!(p.tps, 13790.353226);
        assert_eq!(p.latency_avg_ms, Some(0.290));
        assert_eq!(p.failed, 0);
        assert!(pgbench("connection refused").is_err());
    }

    #[test]
    fn pgbench_old_summary_prefers_excluding_connections() {
        let text = "tps = 900.1 (including connections establishing)\ntps = 1000.5 (excluding connections establishing)\n";
        assert_eq!(pgbench(text).unwrap().tps, 1000.5);
    }

    #[test]
    fn wrk_summary() {
        let text = "Running 1s test @ http://127.0.0.1:18080/v1/id
  1 threads and 50 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     0.99ms    0.95ms   9.74ms   90.12%
    Req/Sec    50.90k    10.96k   61.64k    81.82%
  55694 requests in 1.10s, 7.22MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 7
Requests/sec:  50587.77
Transfer/sec:      6.56MB
";
        let w = wrk(text).unwrap();
        assert_eq!(
            w,
            Wrk {
                requests: 55694,
                requests_per_sec: 50587.77,
                non_2xx: 7,
                socket_errors: 3
            }
        );
        assert!(wrk("unable to connect").is_err());
    }

    #[test]
    fn snowflake_bench_json() {
        let text = r#"{"protocol":"http","addr":"127.0.0.1:18080","connections":50,"batch":1,"offered_rate":null,"stopped_by":"duration","elapsed_secs":1.0,"requests":44144,"requests_ok":44144,"requests_failed":0,"errors_total":0,"errors":{},"ids":44144,"requests_per_sec":44074.7,"ids_per_sec":44074.7,"latency_us":{"samples":44144,"p50":943,"p90":1271,"p99":5535,"p99_9":16767,"max":16959}}"#;
        let b = sf_bench(text).unwrap();
        assert_eq!(b.ids_per_sec, 44074.7);
        assert_eq!((b.requests, b.ids, b.errors_total), (44144, 44144, 0));
        assert_eq!(b.latency_us.p99, 5535.0);
    }

    #[test]
    fn h2load_summary() {
        let out = "starting benchmark...\nfinished in 3.29s, 60783.95 req/s, 2.67MB/s\n\
                   requests: 200000 total, 200000 started, 200000 done, 199990 succeeded, 6 failed, 4 errored, 0 timeout\n\
                   status codes: 200000 2xx, 0 3xx, 0 4xx, 0 5xx\n";
        let h = h2load(out).unwrap();
        assert_eq!(h.requests_per_sec, 60783.95);
        assert_eq!((h.succeeded, h.failed), (199_990, 10));
        assert!(h2load("nothing").is_err());
    }
}

//! `soak`: the memory of `snowflake serve --worker-threads 1` over minutes of full load.
//!
//! The server is started on loopback (free ports, a temporary state directory), its idle VmRSS
//! read, then it is driven at full load in consecutive chunks: single IDs over HTTP with
//! `wrk -t1 -c50`, and one chunk in every [`CYCLE`] each of gRPC `NextId` and Thrift `get_id`
//! with `snowflake bench -c 50`, so that every front end is soaked. VmRSS is read after each
//! chunk (and polled while it runs); the growth is measured from the first sample after the
//! warm-up to the last one, which is always an HTTP chunk.

use crate::model::{Machine, loadavg};
use crate::procfs;
use crate::server::{self, SfServer};
use crate::tools;
use anyhow::{Context, Result, ensure};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Minutes of load and seconds per chunk unless told otherwise.
pub const DEFAULT_MINUTES: f64 = 10.0;
pub const DEFAULT_SAMPLE_SECS: u64 = 10;
/// Connections every chunk keeps busy: the service benchmarks' full load.
pub const CONNECTIONS: u32 = 50;
/// The growth is measured from the first sample at least this far into the load.
pub const WARM_SECS: f64 = 60.0;
/// In every `CYCLE` chunks one is gRPC and one Thrift, the others HTTP.
pub const CYCLE: usize = 5;
/// How often VmRSS is read while a chunk runs.
const POLL: Duration = Duration::from_millis(250);

/// One chunk of load and the VmRSS after it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Sample {
    /// Seconds since the load began, when the chunk ended and VmRSS was read.
    pub elapsed_secs: f64,
    /// The front end the chunk drove: `http` (wrk), `grpc` or `thrift` (snowflake bench).
    pub protocol: String,
    /// Requests/s over the chunk, as the load tool reports it.
    pub requests_per_sec: f64,
    /// IDs issued in the chunk (2xx responses for wrk, IDs received for snowflake bench).
    pub ids: u64,
    /// Errors the load tool reported (non-2xx and socket errors for wrk).
    pub errors: u64,
    /// VmRSS right after the chunk, KiB.
    pub rss_kib: f64,
    /// The highest VmRSS read while the chunk ran (every 250 ms), KiB.
    pub rss_under_load_kib: f64,
}

/// VmRSS growth from the warm-up sample to the last one.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Growth {
    /// Index (from 0) into the samples of the warm-up sample.
    pub warm_index: usize,
    pub warm_elapsed_secs: f64,
    pub warm_rss_kib: f64,
    pub end_elapsed_secs: f64,
    pub end_rss_kib: f64,
    /// End minus warm-up, KiB, and as a percentage of warm-up.
    pub kib: f64,
    pub pct: f64,
}

/// Everything `soak` measured; `report` reads it from `soak.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Soak {
    pub machine: Machine,
    /// Minutes of load asked for, and seconds per chunk.
    pub minutes: f64,
    pub sample_secs: u64,
    pub connections: u32,
    /// How long the whole soak took, start-up included.
    pub wall_secs: f64,
    /// VmRSS once the server was ready, before any load, KiB.
    pub idle_rss_kib: f64,
    pub samples: Vec<Sample>,
    /// VmRSS after the last chunk, KiB.
    pub end_rss_kib: f64,
    /// VmHWM at the end: the highest VmRSS the process ever had, KiB.
    pub peak_rss_kib: f64,
    pub growth: Growth,
    pub total_ids: u64,
    pub total_errors: u64,
    pub notes: Vec<String>,
}

impl Soak {
    pub fn save(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(self)?;
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
    }

    pub fn load(path: &Path) -> Result<Soak> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
    }

    /// The chunks of one protocol.
    pub fn of(&self, protocol: &str) -> impl Iterator<Item = &Sample> {
        self.samples.iter().filter(move |s| s.protocol == protocol)
    }
}

/// The protocol of chunk `i` of `n`: the third of every [`CYCLE`] is gRPC, the fifth Thrift, the
/// rest HTTP; the last chunk is always HTTP, so the end sample follows the main load.
pub fn protocol_of(i: usize, n: usize) -> &'static str {
    if i + 1 == n {
        return "http";
    }
    match i % CYCLE {
        2 => "grpc",
        4 => "thrift",
        _ => "http",
    }
}

/// The growth from the warm-up sample (the first at least `warm_secs` into the load, other than
/// the last; failing that the 2nd) to the last sample; `None` without samples.
pub fn growth(samples: &[Sample], warm_secs: f64) -> Option<Growth> {
    let last = samples.len().checked_sub(1)?;
    let warm_index = samples[..last]
        .iter()
        .position(|s| s.elapsed_secs >= warm_secs)
        .unwrap_or(last.min(1));
    let (warm, end) = (&samples[warm_index], &samples[last]);
    let kib = end.rss_kib - warm.rss_kib;
    Some(Growth {
        warm_index,
        warm_elapsed_secs: warm.elapsed_secs,
        warm_rss_kib: warm.rss_kib,
        end_elapsed_secs: end.elapsed_secs,
        end_rss_kib: end.rss_kib,
        kib,
        // (JSON has no NaN; a live process never has a VmRSS of 0.)
        pct: if warm.rss_kib > 0.0 {
            100.0 * kib / warm.rss_kib
        } else {
            0.0
        },
    })
}

/// The index of the first sample of the run at the end whose VmRSS equals the last one's: from
/// there to the end, VmRSS did not change. `None` without samples.
pub fn steady_from(samples: &[Sample]) -> Option<usize> {
    let end = samples.last()?.rss_kib;
    Some(
        samples
            .iter()
            .rposition(|s| s.rss_kib != end)
            .map_or(0, |i| i + 1),
    )
}

/// Runs `f` while another thread reads the VmRSS of `pid` every [`POLL`]; returns what `f`
/// returned and the highest VmRSS read (0 if none was).
fn polling_rss<T>(pid: u32, f: impl FnOnce() -> T) -> (T, f64) {
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let poller = scope.spawn(|| {
            let mut max = 0.0_f64;
            while !stop.load(Ordering::Relaxed) {
                if let Ok(v) = procfs::rss_kib(pid) {
                    max = max.max(v);
                }
                std::thread::sleep(POLL);
            }
            max
        });
        let out = f();
        stop.store(true, Ordering::Relaxed);
        (out, poller.join().unwrap_or(0.0))
    })
}

/// Requests/s, IDs issued and errors of one chunk of `secs` seconds against `sf`.
fn chunk(bin: &Path, sf: &SfServer, protocol: &str, secs: u64) -> Result<(f64, u64, u64)> {
    if protocol == "http" {
        let w = tools::wrk(sf.http_port, CONNECTIONS, secs)?;
        Ok((
            w.requests_per_sec,
            w.requests.saturating_sub(w.non_2xx),
            w.non_2xx + w.socket_errors,
        ))
    } else {
        let b = tools::sf_bench(
            bin,
            protocol,
            sf.port(protocol),
            &["-c", &CONNECTIONS.to_string()],
            secs as f64,
        )?;
        Ok((b.requests_per_sec, b.ids, b.errors_total))
    }
}

pub fn run(root: &Path, minutes: f64, sample_secs: u64) -> Result<Soak> {
    ensure!(
        minutes > 0.0 && sample_secs > 0,
        "the soak needs minutes > 0 and seconds per sample > 0"
    );
    let started = Instant::now();
    tools::ensure_wrk()?;
    let bin = server::sf_binary(root)?;
    let n = ((minutes * 60.0) / sample_secs as f64).round().max(1.0) as usize;
    let mut soak = Soak {
        machine: Machine::describe(),
        minutes,
        sample_secs,
        connections: CONNECTIONS,
        ..Soak::default()
    };
    let work = tempfile::Builder::new()
        .prefix("snowflake-soak-")
        .tempdir()?;
    let mut sf = SfServer::start(&bin, work.path())?;
    let pid = sf.pid();
    // Let start-up settle before reading the idle size.
    std::thread::sleep(Duration::from_secs(1));
    soak.idle_rss_kib = procfs::rss_kib(pid)?;
    eprintln!(
        "soak: {n} chunks of {sample_secs} s at {CONNECTIONS} connections; idle VmRSS {:.0} KiB",
        soak.idle_rss_kib
    );
    let load_started = Instant::now();
    for i in 0..n {
        let protocol = protocol_of(i, n);
        let (result, rss_under_load_kib) =
            polling_rss(pid, || chunk(&bin, &sf, protocol, sample_secs));
        sf.check_running()?;
        let (requests_per_sec, ids, errors) =
            result.with_context(|| format!("soak chunk {} ({protocol})", i + 1))?;
        let rss_kib = procfs::rss_kib(pid)?;
        let sample = Sample {
            elapsed_secs: load_started.elapsed().as_secs_f64(),
            protocol: protocol.to_owned(),
            requests_per_sec,
            ids,
            errors,
            rss_kib,
            rss_under_load_kib,
        };
        eprintln!(
            "soak: {:>3}/{n} {:>6.0} s {:<6} {:>8.0} req/s {:>3} errors, VmRSS {:.0} KiB (under load {:.0})",
            i + 1,
            sample.elapsed_secs,
            protocol,
            sample.requests_per_sec,
            sample.errors,
            sample.rss_kib,
            sample.rss_under_load_kib
        );
        soak.samples.push(sample);
    }
    soak.peak_rss_kib = procfs::status_kib(pid, "VmHWM")?;
    drop(sf);
    drop(work);
    soak.end_rss_kib = soak.samples.last().map_or(0.0, |s| s.rss_kib);
    soak.growth = growth(&soak.samples, WARM_SECS).unwrap_or_default();
    soak.total_ids = soak.samples.iter().map(|s| s.ids).sum();
    soak.total_errors = soak.samples.iter().map(|s| s.errors).sum();
    if soak.total_errors > 0 {
        soak.notes.push(format!(
            "The load tools reported {} errors over the soak.",
            soak.total_errors
        ));
    }
    soak.machine.loadavg_after = loadavg();
    soak.wall_secs = started.elapsed().as_secs_f64();
    Ok(soak)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A sample with only the fields the computations read.
    pub(crate) fn sample(elapsed_secs: f64, protocol: &str, rps: f64, rss_kib: f64) -> Sample {
        Sample {
            elapsed_secs,
            protocol: protocol.to_owned(),
            requests_per_sec: rps,
            ids: rps as u64,
            errors: 0,
            rss_kib,
            rss_under_load_kib: rss_kib + 100.0,
        }
    }

    #[test]
    fn protocols_cycle_and_the_last_chunk_is_http() {
        let p: Vec<&str> = (0..7).map(|i| protocol_of(i, 7)).collect();
        assert_eq!(
            p,
            ["http", "http", "grpc", "http", "thrift", "http", "http"]
        );
        // The 6 chunks of `soak --quick` soak every front end.
        let quick: Vec<&str> = (0..6).map(|i| protocol_of(i, 6)).collect();
        for want in ["http", "grpc", "thrift"] {
            assert!(quick.contains(&want), "{quick:?}");
        }
        assert_eq!(protocol_of(4, 5), "http");
        assert_eq!(protocol_of(0, 1), "http");
    }

    #[test]
    fn growth_from_the_first_sample_after_warm_up() {
        let s = [
            sample(10.0, "http", 1.0, 8_000.0),
            sample(30.0, "http", 1.0, 9_000.0),
            sample(61.0, "grpc", 1.0, 10_000.0),
            sample(90.0, "http", 1.0, 10_200.0),
            sample(120.0, "http", 1.0, 10_500.0),
        ];
        let g = growth(&s, 60.0).unwrap();
        assert_eq!(g.warm_index, 2);
        assert_eq!((g.warm_elapsed_secs, g.warm_rss_kib), (61.0, 10_000.0));
        assert_eq!((g.end_elapsed_secs, g.end_rss_kib), (120.0, 10_500.0));
        assert_eq!(g.kib, 500.0);
        assert!((g.pct - 5.0).abs() < 1e-9);
    }

    #[test]
    fn growth_falls_back_to_the_second_sample_and_may_shrink() {
        // A short soak never reaches the warm-up: the 2nd sample is the baseline.
        let s = [
            sample(2.0, "http", 1.0, 8_000.0),
            sample(4.0, "grpc", 1.0, 10_000.0),
            sample(6.0, "http", 1.0, 9_500.0),
        ];
        let g = growth(&s, 60.0).unwrap();
        assert_eq!(g.warm_index, 1);
        assert_eq!(g.kib, -500.0);
        assert!((g.pct + 5.0).abs() < 1e-9);
        // Only the last sample past the warm-up: still the 2nd sample, never the last.
        let s = [
            sample(2.0, "http", 1.0, 8_000.0),
            sample(4.0, "http", 1.0, 9_000.0),
            sample(70.0, "http", 1.0, 9_100.0),
        ];
        assert_eq!(growth(&s, 60.0).unwrap().warm_index, 1);
        // One sample: no growth; none: nothing.
        let one = growth(&s[..1], 60.0).unwrap();
        assert_eq!((one.warm_index, one.kib, one.pct), (0, 0.0, 0.0));
        assert_eq!(growth(&[], 60.0), None);
    }

    #[test]
    fn steady_from_the_start_of_the_last_run_of_equal_rss() {
        let s = [
            sample(10.0, "http", 1.0, 8_000.0),
            sample(20.0, "http", 1.0, 9_000.0),
            sample(30.0, "http", 1.0, 8_000.0),
            sample(40.0, "http", 1.0, 9_500.0),
            sample(50.0, "http", 1.0, 9_500.0),
        ];
        assert_eq!(steady_from(&s), Some(3));
        assert_eq!(steady_from(&s[..3]), Some(2));
        assert_eq!(steady_from(&s[..1]), Some(0));
        assert_eq!(steady_from(&[]), None);
        let flat = [s[3].clone(), s[4].clone()];
        assert_eq!(steady_from(&flat), Some(0));
    }

    #[test]
    fn round_trips_through_json() {
        let samples = vec![
            sample(10.0, "http", 90_000.0, 9_000.0),
            sample(20.0, "thrift", 110_000.0, 9_100.0),
        ];
        let soak = Soak {
            idle_rss_kib: 8_000.0,
            growth: growth(&samples, 60.0).unwrap(),
            samples,
            ..Soak::default()
        };
        let back: Soak = serde_json::from_str(&serde_json::to_string(&soak).unwrap()).unwrap();
        assert_eq!(back, soak);
    }

    #[test]
    fn polling_reads_our_own_rss() {
        let (v, max) = polling_rss(std::process::id(), || {
            std::thread::sleep(Duration::from_millis(50));
            7
        });
        assert_eq!(v, 7);
        assert!(max > 0.0);
    }
}

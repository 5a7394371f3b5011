//! `lib`: our generator against other Rust Snowflake crates, in-process, in one run.
//!
//! Every subject issues IDs on Twitter's layout (41-bit ms since 2010-11-04T01:42:54.657Z,
//! 5-bit datacenter 1, 5-bit worker 1, 12-bit sequence) and is shared by all threads the way its
//! documentation recommends for multi-threaded use.

use crate::model::Run;
use snowflake_core::{Generator, Layout, SnowflakeId, TWITTER_EPOCH_MS};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The 10-bit machine id of datacenter 1, worker 1 for crates that take one 10-bit field.
const MACHINE_ID: u16 = (1 << 5) | 1;
/// IDs per timed burst when measuring the uncontended cost: below 4096 so a burst that starts at
/// a fresh millisecond never waits for the next one.
const BURST: u32 = 1500;

/// One ID generator under test, shared by reference across threads.
trait Subject: Sync {
    fn next(&self) -> u64;
}

struct Ours(Generator);
impl Subject for Ours {
    #[inline]
    fn next(&self) -> u64 {
        u64::from(self.0.next_id().expect("our generator refused an ID"))
    }
}

/// ferroid's lock-free generator, the one its README recommends for shared multi-threaded use;
/// its clock is ferroid's `MonotonicClock` (a background thread ticking an atomic each ms).
struct Ferroid(
    ferroid::generator::AtomicSnowflakeGenerator<
        ferroid::id::SnowflakeTwitterId,
        ferroid::time::MonotonicClock,
    >,
);
impl Subject for Ferroid {
    #[inline]
    fn next(&self) -> u64 {
        // The README's blocking usage: yield to the scheduler while pending.
        self.0.next_id(|_| std::thread::yield_now()).to_raw()
    }
}

/// snowflaked's thread-safe `sync::Generator` (feature `sync`), as its README shows.
struct Snowflaked(snowflaked::sync::Generator);
impl Subject for Snowflaked {
    #[inline]
    fn next(&self) -> u64 {
        self.0.generate::<u64>()
    }
}

/// rs-snowflake's generator takes `&mut self` and offers no shared form, so threads share it
/// behind a `Mutex`; `real_time_generate` reads the clock on every ID (its `generate` does not).
struct RsSnowflake(Mutex<snowflake::SnowflakeIdGenerator>);
impl Subject for RsSnowflake {
    #[inline]
    fn next(&self) -> u64 {
        self.0.lock().expect("poisoned").real_time_generate() as u64
    }
}

/// A bare clock read, measured like a generator.
struct ClockRead;
impl Subject for ClockRead {
    #[inline]
    fn next(&self) -> u64 {
        black_box(SystemTime::now());
        0
    }
}

/// A clock read converted to Unix milliseconds, what a generator needs per ID.
struct ClockMs;
impl Subject for ClockMs {
    #[inline]
    fn next(&self) -> u64 {
        unix_ms()
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

pub const OURS: &str = "snowflake-core (ours)";
pub const CLOCK: &str = "clock: SystemTime::now()";
pub const CLOCK_MS: &str = "clock: SystemTime::now() as Unix ms";

struct Subjects {
    ours: Ours,
    ferroid: Ferroid,
    snowflaked: Snowflaked,
    rs: RsSnowflake,
}

impl Subjects {
    fn new() -> anyhow::Result<Subjects> {
        let twitter_epoch = UNIX_EPOCH + Duration::from_millis(TWITTER_EPOCH_MS);
        Ok(Subjects {
            ours: Ours(Generator::new(1, 1)?),
            ferroid: Ferroid(ferroid::generator::AtomicSnowflakeGenerator::new(
                u64::from(MACHINE_ID),
                ferroid::time::MonotonicClock::with_epoch(ferroid::time::TWITTER_EPOCH),
            )),
            snowflaked: Snowflaked(
                snowflaked::Builder::new()
                    .instance(MACHINE_ID)
                    .epoch(twitter_epoch)
                    .build::<snowflaked::sync::Generator>(),
            ),
            rs: RsSnowflake(Mutex::new(snowflake::SnowflakeIdGenerator::with_epoch(
                1,
                1,
                twitter_epoch,
            ))),
        })
    }
}

/// Runs `f` once per subject with its display name (a macro would hide less, but the subjects
/// have different types and we want static dispatch in the hot loop).
macro_rules! each_subject {
    ($subjects:expr, |$name:ident, $s:ident| $body:expr) => {{
        {
            let $name = OURS;
            let $s = &$subjects.ours;
            $body
        }
        {
            let $name = "ferroid 2.0 (AtomicSnowflakeGenerator)";
            let $s = &$subjects.ferroid;
            $body
        }
        {
            let $name = "snowflaked 1.0 (sync::Generator)";
            let $s = &$subjects.snowflaked;
            $body
        }
        {
            let $name = "rs-snowflake 0.6 (Mutex, real_time_generate)";
            let $s = &$subjects.rs;
            $body
        }
    }};
}

/// IDs per second from `threads` threads sharing `s`, for `secs` seconds.
fn throughput<S: Subject>(s: &S, threads: usize, secs: f64) -> f64 {
    let stop = AtomicBool::new(false);
    let barrier = Barrier::new(threads + 1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    barrier.wait();
                    let mut n = 0u64;
                    let mut acc = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        for _ in 0..256 {
                            acc ^= s.next();
                        }
                        n += 256;
                    }
                    black_box(acc);
                    (n, Instant::now())
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        std::thread::sleep(Duration::from_secs_f64(secs));
        stop.store(true, Ordering::Relaxed);
        let mut total = 0u64;
        let mut end = start;
        for h in handles {
            let (n, e) = h.join().expect("benchmark thread panicked");
            total += n;
            end = end.max(e);
        }
        total as f64 / (end - start).as_secs_f64()
    })
}

/// The uncontended cost of one call in ns: the median over bursts of `BURST` calls, each burst
/// starting right after the wall clock enters a new millisecond so no generator has to wait for
/// its sequence to refill.
fn ns_per_call<S: Subject>(s: &S, secs: f64) -> f64 {
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let mut bursts = Vec::new();
    while Instant::now() < deadline || bursts.is_empty() {
        let ms = unix_ms();
        while unix_ms() == ms {
            std::hint::spin_loop();
        }
        let t = Instant::now();
        for _ in 0..BURST {
            black_box(s.next());
        }
        bursts.push(t.elapsed().as_nanos() as f64 / f64::from(BURST));
    }
    crate::model::median(&bursts)
}

/// What a sample of IDs from two threads shows.
#[derive(Debug, PartialEq)]
pub struct SampleCheck {
    pub total: usize,
    pub duplicates: usize,
    /// IDs not greater than the previous one from the same thread.
    pub out_of_order: usize,
    /// IDs whose datacenter/worker is not 1/1 or whose time is not within 5 s of now.
    pub bad_layout: usize,
}

/// Checks a sample: per-thread order, duplicates across threads, fields under our decoder.
pub fn check_sample(per_thread: &[Vec<u64>], now_ms: u64) -> SampleCheck {
    let layout = Layout::TWITTER;
    let mut all = Vec::new();
    let mut out_of_order = 0;
    let mut bad_layout = 0;
    for ids in per_thread {
        out_of_order += ids.windows(2).filter(|w| w[1] <= w[0]).count();
        for &id in ids {
            let ok = SnowflakeId::try_from(id)
                .ok()
                .and_then(|id| layout.describe(id).ok())
                .is_some_and(|d| {
                    d.datacenter_id == 1
                        && d.worker_id == 1
                        && d.timestamp_ms.abs_diff(now_ms) < 5000
                });
            if !ok {
                bad_layout += 1;
            }
        }
        all.extend_from_slice(ids);
    }
    let total = all.len();
    all.sort_unstable();
    all.dedup();
    SampleCheck {
        total,
        duplicates: total - all.len(),
        out_of_order,
        bad_layout,
    }
}

fn sample<S: Subject>(s: &S, threads: usize, per_thread: usize) -> SampleCheck {
    let ids: Vec<Vec<u64>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| scope.spawn(move || (0..per_thread).map(|_| s.next()).collect::<Vec<u64>>()))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("sampling thread panicked"))
            .collect()
    });
    check_sample(&ids, unix_ms())
}

pub fn run(secs: f64, rounds: usize, threads: &[usize], sample_ids: usize) -> anyhow::Result<Run> {
    let started = Instant::now();
    let mut run = Run::new("lib", secs, rounds);
    let subjects = Subjects::new()?;
    let ns_secs = (secs / 2.0).max(0.05);
    for round in 1..=rounds {
        eprintln!("lib: round {round}/{rounds}");
        ns_subject(&mut run, CLOCK, &ClockRead, ns_secs);
        ns_subject(&mut run, CLOCK_MS, &ClockMs, ns_secs);
        each_subject!(subjects, |name, s| ns_subject(&mut run, name, s, ns_secs));
        for &t in threads {
            each_subject!(subjects, |name, s| {
                let v = throughput(s, t, secs);
                run.record("lib-throughput", name, &format!("threads={t}"), "IDs/s", v);
            });
        }
    }
    each_subject!(subjects, |name, s| {
        let check = sample(s, 2, sample_ids / 2);
        run.record("lib-sample", name, "total", "IDs", check.total as f64);
        run.record(
            "lib-sample",
            name,
            "duplicates",
            "IDs",
            check.duplicates as f64,
        );
        run.record(
            "lib-sample",
            name,
            "out-of-order",
            "IDs",
            check.out_of_order as f64,
        );
        run.record(
            "lib-sample",
            name,
            "bad-layout",
            "IDs",
            check.bad_layout as f64,
        );
        if check.duplicates + check.out_of_order + check.bad_layout > 0 {
            run.notes.push(format!(
                "{name}: of {} IDs from 2 threads, {} duplicates, {} out of order within a thread, {} not decoding as datacenter 1 / worker 1 / now",
                check.total, check.duplicates, check.out_of_order, check.bad_layout
            ));
        }
    });
    run.notes.push(
        "ferroid's MonotonicClock is a background thread that stores the elapsed milliseconds in an atomic once per ms (started from one wall-clock read): its IDs cost no clock read, its time can lag the ticker by scheduling delays, and the thread keeps running for the rest of the process.".to_owned(),
    );
    run.notes.push(
        "rs-snowflake's generator needs `&mut self`, so threads share it behind a std Mutex; its `real_time_generate` is used because `generate` only reads the clock once every 4096 IDs.".to_owned(),
    );
    run.notes.push(
        "ferroid and snowflaked have one 10-bit machine field; datacenter 1 / worker 1 is machine id 33, which gives the same bits as 5+5.".to_owned(),
    );
    run.machine.loadavg_after = crate::model::loadavg();
    run.wall_secs = started.elapsed().as_secs_f64();
    Ok(run)
}

fn ns_subject<S: Subject>(run: &mut Run, name: &str, s: &S, secs: f64) {
    let v = ns_per_call(s, secs);
    run.record("lib-ns", name, "threads=1", "ns/ID", v);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_check_counts_duplicates_order_and_layout() {
        let layout = Layout::TWITTER;
        let now = 1_700_000_000_000;
        let id = |seq| u64::from(layout.encode(now, 1, 1, seq).unwrap());
        let other = u64::from(layout.encode(now, 2, 1, 0).unwrap());
        let check = check_sample(&[vec![id(0), id(1), id(2)], vec![id(2), id(1), other]], now);
        assert_eq!(
            check,
            SampleCheck {
                total: 6,
                duplicates: 2,
                out_of_order: 1,
                bad_layout: 1
            }
        );
    }

    #[test]
    fn every_subject_issues_unique_ids_on_the_layout() {
        let subjects = Subjects::new().unwrap();
        each_subject!(subjects, |name, s| {
            let check = sample(s, 2, 5000);
            assert_eq!(check.bad_layout, 0, "{name}");
            assert_eq!(check.total, 10_000, "{name}");
        });
    }
}

//! Saturated generation: how many IDs per second one node issues from 1 and 2 threads, against
//! the layout's limit: 4,096,000 IDs/s (4,096 per millisecond) under `twitter`, 64,000 IDs/s
//! (64 per millisecond) under `js-safe`.
//!
//! `cargo bench -p snowflake-core --bench saturation [-- --secs S --rounds N]`
//!
//! Each round runs for S seconds (default 1) and counts the IDs issued; the median of N rounds
//! (default 5) is reported. Performance is reported, never asserted.

use snowflake_core::{Generator, Layout};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

fn round(layout: Layout, threads: usize, batch: u64, secs: f64) -> f64 {
    let generator = Arc::new(
        Generator::builder()
            .layout(layout)
            .datacenter_id(1)
            .worker_id(1)
            .build()
            .expect("valid node"),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let barrier = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (generator, stop, barrier) = (generator.clone(), stop.clone(), barrier.clone());
            std::thread::spawn(move || {
                let mut count = 0u64;
                barrier.wait();
                let started = Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    if batch == 1 {
                        std::hint::black_box(generator.next_id().expect("id"));
                        count += 1;
                    } else {
                        count +=
                            std::hint::black_box(generator.next_batch(batch).expect("batch")).len();
                    }
                }
                (count, started, Instant::now())
            })
        })
        .collect();
    barrier.wait();
    std::thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    // Timed by the workers themselves: with every core busy, this thread may be scheduled late.
    let results: Vec<(u64, Instant, Instant)> = handles
        .into_iter()
        .map(|h| h.join().expect("thread"))
        .collect();
    let total: u64 = results.iter().map(|r| r.0).sum();
    let first_start = results.iter().map(|r| r.1).min().expect("threads");
    let last_end = results.iter().map(|r| r.2).max().expect("threads");
    total as f64 / (last_end - first_start).as_secs_f64()
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str, default: f64| -> f64 {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    // `cargo test --benches` runs benches with `--test`: one quick round is enough there.
    let quick = args.iter().any(|a| a == "--test");
    let secs = if quick { 0.05 } else { flag("--secs", 1.0) };
    let rounds = if quick {
        1
    } else {
        flag("--rounds", 5.0).max(1.0) as usize
    };

    println!("saturated generation, median of {rounds} rounds of {secs} s");
    println!("{:<38} {:>14} {:>9}", "mode", "IDs/s", "of limit");
    for layout in [Layout::TWITTER, Layout::JS_SAFE] {
        let per_ms = layout.max_ids_per_ms();
        let limit = layout.max_ids_per_second() as f64;
        for (threads, batch) in [(1, 1), (2, 1), (1, per_ms), (2, per_ms)] {
            let call = if batch == 1 {
                "next_id".to_owned()
            } else {
                format!("next_batch({batch})")
            };
            let name = format!("{}: {call}, {threads} thread(s)", layout.name());
            let rates: Vec<f64> = (0..rounds)
                .map(|_| round(layout, threads, batch, secs))
                .collect();
            let rate = median(rates);
            println!("{name:<38} {rate:>14.0} {:>8.2}%", 100.0 * rate / limit);
        }
    }
}

//! Cost of one ID against the cost of one bare clock read, measured side by side.
//!
//! `cargo bench -p snowflake-core --bench generator`
//!
//! Samples are short (64 iterations), so the median sample is one that did not include the wait
//! for the next millisecond: it is the uncontended cost of the generator itself. The saturated
//! rate (IDs per second including those waits) is measured by the `saturation` bench.
//!
//! The `js_safe` benches run the same under the `js-safe` layout (64 IDs per millisecond). `scripts/bench-generator-ab` compares Twitter's path with another revision's in one
//! run.

use divan::{Bencher, black_box};
use snowflake_core::{Clock, Generator, Layout, SystemClock};
use std::time::SystemTime;

fn main() {
    divan::main();
}

/// `SystemTime::now()`, the bare system clock read.
#[divan::bench(sample_size = 64)]
fn clock_read_system_time() -> SystemTime {
    SystemTime::now()
}

/// The clock read as the generator does it, to Unix milliseconds.
#[divan::bench(sample_size = 64)]
fn clock_read_unix_ms() -> u64 {
    black_box(SystemClock).now_ms()
}

/// One ID from a generator shared by `threads` threads.
#[divan::bench(threads = [1, 2], sample_size = 64)]
fn next_id(bencher: Bencher) {
    let generator = Generator::new(1, 1).unwrap();
    bencher.bench(|| generator.next_id().unwrap());
}

/// A batch of up to 4096 IDs reserved in one step (the millisecond's whole sequence when it is
/// fresh); `counter` reports IDs per second.
#[divan::bench(sample_size = 1, sample_count = 500)]
fn next_batch_4096(bencher: Bencher) {
    let generator = Generator::new(1, 1).unwrap();
    bencher
        .counter(divan::counter::ItemsCount::new(4096usize))
        .bench(|| generator.next_batch(4096).unwrap());
}

/// One ID under the `js-safe` layout, from a generator shared by `threads` threads. Samples of
/// 16: four fit in a millisecond's 64 IDs, so the median sample is one without a wait.
#[divan::bench(threads = [1, 2], sample_size = 16)]
fn next_id_js_safe(bencher: Bencher) {
    let generator = Generator::builder()
        .layout(Layout::JS_SAFE)
        .datacenter_id(1)
        .worker_id(1)
        .build()
        .unwrap();
    bencher.bench(|| generator.next_id().unwrap());
}

/// A batch of up to 64 IDs under `js-safe` (its whole millisecond when fresh).
#[divan::bench(sample_size = 1, sample_count = 500)]
fn next_batch_64_js_safe(bencher: Bencher) {
    let generator = Generator::builder()
        .layout(Layout::JS_SAFE)
        .datacenter_id(1)
        .worker_id(1)
        .build()
        .unwrap();
    bencher
        .counter(divan::counter::ItemsCount::new(64usize))
        .bench(|| generator.next_batch(64).unwrap());
}

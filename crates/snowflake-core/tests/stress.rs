//! Many threads on one generator: no duplicate, each thread's IDs increasing.

use snowflake_core::{Generator, SnowflakeId};
use std::sync::Arc;

fn run(threads: usize, per_thread: usize, batch: u64) {
    let generator = Arc::new(Generator::new(5, 9).unwrap());
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let generator = Arc::clone(&generator);
            std::thread::spawn(move || {
                let mut ids = Vec::with_capacity(per_thread);
                while ids.len() < per_thread {
                    if batch == 1 {
                        ids.push(generator.next_id().unwrap());
                    } else {
                        let want = batch.min((per_thread - ids.len()) as u64);
                        ids.extend(generator.next_batch(want).unwrap());
                    }
                }
                ids
            })
        })
        .collect();
    let mut all: Vec<SnowflakeId> = Vec::with_capacity(threads * per_thread);
    for handle in handles {
        let ids = handle.join().unwrap();
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "a thread saw IDs out of order"
        );
        all.extend(ids);
    }
    let total = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), total, "duplicate IDs across threads");
    assert_eq!(total, threads * per_thread);
}

#[test]
fn eight_threads_a_quarter_million_each() {
    run(8, 250_000, 1);
}

#[test]
fn eight_threads_mixing_batches() {
    run(8, 100_000, 37);
}

//! Exhaustive interleavings of the generator's state transition (run with `--cfg loom`).

use snowflake_core::{Generator, ManualClock};
use std::sync::Arc;

const T: u64 = 1_700_000_000_000;

#[test]
fn two_threads_never_issue_the_same_id() {
    loom::model(|| {
        let clock = ManualClock::new(T);
        let generator = Arc::new(Generator::builder().clock(clock).build().unwrap());
        let other = Arc::clone(&generator);
        let thread =
            loom::thread::spawn(move || [other.next_id().unwrap(), other.next_id().unwrap()]);
        let mine = [generator.next_id().unwrap(), generator.next_id().unwrap()];
        let theirs = thread.join().unwrap();
        assert!(mine[0] < mine[1] && theirs[0] < theirs[1]);
        let mut all = vec![mine[0], mine[1], theirs[0], theirs[1]];
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 4);
        assert!(
            all.iter()
                .all(|id| id.timestamp_ms() == T && id.sequence() < 4)
        );
    });
}

#[test]
fn a_millisecond_boundary_between_threads_keeps_ids_unique() {
    loom::model(|| {
        let clock = ManualClock::new(T);
        let generator = Arc::new(Generator::builder().clock(clock.clone()).build().unwrap());
        let other = Arc::clone(&generator);
        let thread = loom::thread::spawn(move || other.next_batch(3).unwrap());
        let first = generator.next_id().unwrap();
        clock.advance_ms(1);
        let second = generator.next_id().unwrap();
        let batch = thread.join().unwrap();
        assert!(first < second);
        for id in batch {
            assert!(id != first && id != second);
        }
    });
}

#[test]
fn a_bulk_take_beside_single_ids_keeps_ids_unique_and_leaves_its_share() {
    loom::model(|| {
        // A 4-bit sequence: 16 per ms; the bulk taker leaves 4 of them.
        let bits = snowflake_core::Bits {
            timestamp: 49,
            datacenter: 5,
            worker: 5,
            sequence: 4,
        };
        let layout =
            snowflake_core::Layout::new_at(snowflake_core::TWITTER_EPOCH_MS, bits, T).unwrap();
        let clock = ManualClock::new(T);
        let generator = Arc::new(
            Generator::builder()
                .layout(layout)
                .clock(clock)
                .build()
                .unwrap(),
        );
        let other = Arc::clone(&generator);
        let thread = loom::thread::spawn(move || {
            let mut taken = Vec::new();
            while let Some(batch) = other.try_take_batch(8, 4).unwrap() {
                taken.extend(batch);
            }
            taken
        });
        let mine = [generator.next_id().unwrap(), generator.next_id().unwrap()];
        let bulk = thread.join().unwrap();
        let mut all: Vec<_> = mine.iter().copied().chain(bulk.iter().copied()).collect();
        let issued = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), issued);
        // Never more than 16 - 4 in bulk; the two single IDs never had to wait.
        assert!(bulk.len() <= 12);
    });
}

/// Exact takes beside single IDs: each exact take is all its IDs, consecutive, or nothing, and
/// no ID is issued twice.
#[test]
fn exact_takes_are_whole_and_disjoint() {
    loom::model(|| {
        let bits = snowflake_core::Bits {
            timestamp: 49,
            datacenter: 5,
            worker: 5,
            sequence: 4,
        };
        let layout =
            snowflake_core::Layout::new_at(snowflake_core::TWITTER_EPOCH_MS, bits, T).unwrap();
        let clock = ManualClock::new(T);
        let generator = Arc::new(
            Generator::builder()
                .layout(layout)
                .clock(clock)
                .build()
                .unwrap(),
        );
        let other = Arc::clone(&generator);
        let thread = loom::thread::spawn(move || other.try_take_exact(10).unwrap());
        let mine = generator.try_take_exact(7).unwrap();
        let theirs = thread.join().unwrap();
        // 16 per millisecond: at most one of the two fits beside the other.
        let mut all = Vec::new();
        for batch in [mine, theirs].into_iter().flatten() {
            let ids: Vec<_> = batch.into_iter().collect();
            assert_eq!(ids.len() as u64, batch.len());
            assert_eq!(
                ids.last().unwrap().sequence() - ids[0].sequence() + 1,
                batch.len()
            );
            all.extend(ids);
        }
        assert!(mine.is_some() || theirs.is_some());
        let issued = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), issued);
    });
}

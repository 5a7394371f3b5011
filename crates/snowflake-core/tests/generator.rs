//! The generator's rules (SPEC §3), with the 2010 IdWorkerSpec cases ported.

use crate::support::ScriptedClock;
use snowflake_core::{Clock, Error, Generator, Layout, ManualClock, SnowflakeId, TWITTER_EPOCH_MS};
use std::collections::HashSet;
use std::sync::atomic::Ordering;

const T: u64 = 1_700_000_000_000;

fn manual(datacenter_id: u64, worker_id: u64, clock: &ManualClock) -> Generator<ManualClock> {
    Generator::builder()
        .datacenter_id(datacenter_id)
        .worker_id(worker_id)
        .clock(clock.clone())
        .build()
        .unwrap()
}

#[test]
fn generates_an_id_with_the_node_and_the_time() {
    let clock = ManualClock::new(T);
    let generator = manual(1, 2, &clock);
    let id = generator.next_id().unwrap();
    assert_eq!(
        (
            id.timestamp_ms(),
            id.datacenter_id(),
            id.worker_id(),
            id.sequence()
        ),
        (T, 1, 2, 0)
    );
    assert_eq!(generator.datacenter_id(), 1);
    assert_eq!(generator.worker_id(), 2);
    assert_eq!(generator.last_issued_ms(), Some(T));
}

#[test]
fn returns_an_accurate_timestamp_from_the_system_clock() {
    let generator = Generator::new(1, 1).unwrap();
    let before = snowflake_core::SystemClock.now_ms();
    let id = generator.next_id().unwrap();
    let after = snowflake_core::SystemClock.now_ms();
    assert!(
        (before..=after).contains(&id.timestamp_ms()),
        "{before} <= {} <= {after}",
        id.timestamp_ms()
    );
}

#[test]
fn node_ids_are_validated() {
    assert_eq!(
        Generator::new(32, 0).unwrap_err().to_string(),
        "invalid datacenter id: expected 0..=31, found 32"
    );
    assert_eq!(
        Generator::new(0, 32).unwrap_err().to_string(),
        "invalid worker id: expected 0..=31, found 32"
    );
    let max = Generator::new(31, 31).unwrap().next_id().unwrap();
    assert_eq!((max.datacenter_id(), max.worker_id()), (31, 31));
}

#[test]
fn sequence_restarts_at_zero_each_new_millisecond() {
    let clock = ManualClock::new(T);
    let generator = manual(0, 0, &clock);
    let seqs: Vec<u64> = (0..3)
        .map(|_| generator.next_id().unwrap().sequence())
        .collect();
    assert_eq!(seqs, [0, 1, 2]);
    clock.advance_ms(1);
    let id = generator.next_id().unwrap();
    assert_eq!((id.timestamp_ms(), id.sequence()), (T + 1, 0));
    // A forward jump leaves a gap and also restarts the sequence.
    clock.advance_ms(10_000);
    let id = generator.next_id().unwrap();
    assert_eq!((id.timestamp_ms(), id.sequence()), (T + 10_001, 0));
}

#[test]
fn rolls_over_the_sequence_into_the_next_millisecond() {
    // 2010: "roll over sequence id" — the full 0..=4095 range is used, then the next ms starts at 0.
    let clock = ScriptedClock::new([T]);
    let generator = Generator::builder()
        .worker_id(4)
        .clock(&clock)
        .build()
        .unwrap();
    for expected in 0..=4095 {
        let id = generator.next_id().unwrap();
        assert_eq!(
            (id.timestamp_ms(), id.sequence(), id.worker_id()),
            (T, expected, 4)
        );
    }
    clock.push(T);
    clock.push(T + 1);
    let id = generator.next_id().unwrap();
    assert_eq!((id.timestamp_ms(), id.sequence()), (T + 1, 0));
}

#[test]
fn generates_100_increasing_ids() {
    let generator = Generator::new(1, 1).unwrap();
    let mut last = SnowflakeId::MIN;
    for _ in 0..100 {
        let id = generator.next_id().unwrap();
        assert!(id > last, "{id} after {last}");
        last = id;
    }
}

#[test]
fn generates_2_000_000_unique_ids() {
    let generator = Generator::new(31, 31).unwrap();
    let mut seen = HashSet::with_capacity(2_000_000);
    for _ in 0..2_000_000 {
        assert!(seen.insert(generator.next_id().unwrap()));
    }
    assert_eq!(seen.len(), 2_000_000);
}

#[test]
fn generates_ids_over_50_billion() {
    let generator = Generator::new(0, 0).unwrap();
    assert!(generator.next_id().unwrap().as_u64() > 50_000_000_000);
}

#[test]
fn waits_exactly_once_when_the_sequence_rolls_over_twice_in_one_millisecond() {
    // 2010: "sleep if we would rollover twice in the same millisecond", with the clock reading
    // [2, 2, 3]: the 4097th ID of millisecond 2 waits once, for millisecond 3.
    let t = TWITTER_EPOCH_MS + 2;
    let clock = ScriptedClock::new([t]);
    let generator = Generator::builder().clock(&clock).build().unwrap();
    let ids = generator.next_ids(4096).unwrap();
    assert_eq!(ids.last().unwrap().sequence(), 4095);
    assert_eq!(generator.stats().exhaustion_waits, 0);

    clock.push(t);
    clock.push(t);
    clock.push(t + 1);
    let reads_before = clock.reads.load(Ordering::SeqCst);
    let id = generator.next_id().unwrap();
    assert_eq!((id.timestamp_ms(), id.sequence()), (t + 1, 0));
    assert_eq!(generator.stats().exhaustion_waits, 1);
    assert_eq!(
        clock.reads.load(Ordering::SeqCst) - reads_before,
        3,
        "read t, waited (t, t+1)"
    );
}

#[test]
fn refuses_after_rollback_without_touching_the_sequence() {
    // 2010: "generate only unique ids, even when time goes backwards" (the duplicate fixed in 2012).
    let clock = ManualClock::new(T);
    let generator = manual(0, 0, &clock);
    assert_eq!(generator.next_id().unwrap().sequence(), 0);
    assert_eq!(generator.next_id().unwrap().sequence(), 1);

    clock.set_ms(T - 1);
    let err = generator.next_id().unwrap_err();
    assert_eq!(
        err,
        Error::ClockMovedBackwards {
            behind_ms: 1,
            last_ms: T,
            now_ms: T - 1
        }
    );
    assert_eq!(
        err.to_string(),
        "clock moved backwards: it reads 1699999999999 (unix ms), 1 ms behind the last issued \
         timestamp 1700000000000; refusing to issue ids until it passes 1700000000000"
    );
    // Refusing again does not change anything either.
    assert!(generator.next_batch(10).is_err());
    assert_eq!(generator.stats().clock_backwards_refusals, 2);

    clock.set_ms(T);
    let id = generator.next_id().unwrap();
    assert_eq!((id.timestamp_ms(), id.sequence()), (T, 2));
}

#[test]
fn reports_how_far_the_clock_moved_back() {
    let clock = ManualClock::new(T);
    let generator = manual(0, 0, &clock);
    generator.next_id().unwrap();
    clock.set_ms(T - 5_000);
    match generator.try_next_id() {
        Err(Error::ClockMovedBackwards {
            behind_ms: 5_000, ..
        }) => {}
        other => panic!("expected a 5000 ms refusal, got {other:?}"),
    }
    clock.set_ms(T + 1);
    assert_eq!(generator.next_id().unwrap().timestamp_ms(), T + 1);
}

#[test]
fn waits_out_small_regressions_when_allowed() {
    let clock = ManualClock::new(T);
    let generator = Generator::builder()
        .clock(clock.clone())
        .max_backwards_wait_ms(10)
        .build()
        .unwrap();
    generator.next_id().unwrap();
    // 5 ms back: within the bound, so next_id sleeps (the manual clock advances) and succeeds.
    clock.set_ms(T - 5);
    let id = generator.next_id().unwrap();
    assert_eq!((id.timestamp_ms(), id.sequence()), (T, 1));
    assert_eq!(generator.stats().clock_backwards_waits, 1);
    // try_next_id never waits.
    clock.set_ms(T - 5);
    assert!(matches!(
        generator.try_next_id(),
        Err(Error::ClockMovedBackwards { behind_ms: 5, .. })
    ));
    // 11 ms back: beyond the bound, refused at once and the clock is left alone.
    clock.set_ms(T - 11);
    assert!(matches!(
        generator.next_id(),
        Err(Error::ClockMovedBackwards { behind_ms: 11, .. })
    ));
    assert_eq!(clock.now_ms(), T - 11);
    assert_eq!(generator.stats().clock_backwards_refusals, 2);
}

#[test]
fn resumes_above_a_high_water_mark() {
    let clock = ManualClock::new(T);
    let generator = Generator::builder()
        .clock(clock.clone())
        .resume_after_ms(T + 1000)
        .build()
        .unwrap();
    assert_eq!(generator.last_issued_ms(), Some(T + 1000));
    assert!(matches!(
        generator.next_id(),
        Err(Error::ClockMovedBackwards {
            behind_ms: 1000,
            ..
        })
    ));
    clock.set_ms(T + 1000);
    // The mark's own millisecond is reserved too: the generator waits for the next one.
    clock.set_ms(T + 1001);
    let id = generator.next_id().unwrap();
    assert_eq!((id.timestamp_ms(), id.sequence()), (T + 1001, 0));
}

#[test]
fn a_running_generator_can_be_moved_above_a_new_mark_but_never_back() {
    let clock = ManualClock::new(T);
    let generator = manual(1, 2, &clock);
    let first = generator.next_id().unwrap();
    assert_eq!(first.timestamp_ms(), T);
    generator.resume_after(T + 500).unwrap();
    assert_eq!(generator.last_issued_ms(), Some(T + 500));
    assert!(matches!(
        generator.next_id(),
        Err(Error::ClockMovedBackwards { behind_ms: 500, .. })
    ));
    // A lower mark changes nothing.
    generator.resume_after(T + 10).unwrap();
    generator.resume_after(0).unwrap();
    assert_eq!(generator.last_issued_ms(), Some(T + 500));
    clock.set_ms(T + 501);
    let id = generator.next_id().unwrap();
    assert_eq!((id.timestamp_ms(), id.sequence()), (T + 501, 0));
    // A mark the layout cannot express is refused and changes nothing.
    assert!(matches!(
        generator.resume_after(u64::MAX),
        Err(Error::OutOfRange { .. })
    ));
    assert_eq!(generator.last_issued_ms(), Some(T + 501));
}

#[test]
fn batches_are_consecutive_and_stay_in_one_millisecond() {
    let clock = ManualClock::new(T);
    let generator = manual(3, 4, &clock);
    let first = generator.next_batch(100).unwrap();
    assert_eq!(first.len(), 100);
    assert_eq!(first.first().sequence(), 0);
    assert_eq!(first.last().sequence(), 99);
    let ids: Vec<SnowflakeId> = first.into_iter().collect();
    assert!(ids.windows(2).all(|w| w[1].as_u64() == w[0].as_u64() + 1));
    assert!(
        ids.iter()
            .all(|id| id.datacenter_id() == 3 && id.worker_id() == 4 && id.timestamp_ms() == T)
    );
    // Only 3996 are left in this millisecond.
    let rest = generator.next_batch(4096).unwrap();
    assert_eq!(rest.len(), 3996);
    assert_eq!(rest.last().sequence(), 4095);
    // A full millisecond is reserved in one step.
    clock.advance_ms(1);
    let full = generator.next_batch(4096).unwrap();
    assert_eq!(full.len(), 4096);
    assert_eq!(
        (
            full.first().timestamp_ms(),
            full.first().sequence(),
            full.last().sequence()
        ),
        (T + 1, 0, 4095)
    );
}

#[test]
fn a_bulk_take_leaves_its_share_of_each_millisecond_and_never_waits() {
    let clock = ManualClock::new(T);
    let generator = manual(0, 0, &clock);
    // 4096 - 1024 may be taken in bulk; the last 1024 stay for others.
    let bulk = generator.try_take_batch(4096, 1024).unwrap().unwrap();
    assert_eq!((bulk.len(), bulk.first().sequence()), (3072, 0));
    assert!(generator.try_take_batch(1, 1024).unwrap().is_none());
    // Another caller still gets the rest, right away.
    let single = generator.try_next_id().unwrap();
    assert_eq!((single.timestamp_ms(), single.sequence()), (T, 3072));
    let rest = generator.try_next_batch(4096).unwrap();
    assert_eq!((rest.len(), rest.last().sequence()), (1023, 4095));
    // A used-up millisecond is not waited out (a ManualClock would never move on).
    assert!(generator.try_take_batch(4096, 0).unwrap().is_none());
    clock.advance_ms(1);
    let next = generator.try_take_batch(100, 1024).unwrap().unwrap();
    assert_eq!((next.first().timestamp_ms(), next.len()), (T + 1, 100));
    // With nothing to leave, the whole millisecond may be taken; `leave` is capped below it.
    assert_eq!(
        generator.try_take_batch(4096, 0).unwrap().unwrap().len(),
        3996
    );
    clock.advance_ms(1);
    assert_eq!(
        generator
            .try_take_batch(4096, 10_000)
            .unwrap()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        generator.try_take_batch(0, 0).unwrap_err().to_string(),
        "invalid count: expected 1..=4096, found 0"
    );
    // A clock that went back is refused, as by try_next_batch.
    clock.set_ms(T);
    assert!(matches!(
        generator.try_take_batch(1, 0),
        Err(Error::ClockMovedBackwards { .. })
    ));
}

#[test]
fn an_exact_take_gets_all_it_asks_for_in_one_millisecond_or_nothing() {
    let clock = ManualClock::new(T);
    let generator = manual(0, 0, &clock);
    let first = generator.try_take_exact(4000).unwrap().unwrap();
    assert_eq!((first.len(), first.first().sequence()), (4000, 0));
    // 96 are left in this millisecond: 100 cannot be had, 96 can.
    assert!(generator.try_take_exact(100).unwrap().is_none());
    let rest = generator.try_take_exact(96).unwrap().unwrap();
    assert_eq!(
        (rest.first().sequence(), rest.last().sequence()),
        (4000, 4095)
    );
    assert!(generator.try_take_exact(1).unwrap().is_none());
    clock.advance_ms(1);
    let next = generator.try_take_exact(4096).unwrap().unwrap();
    assert_eq!(
        (
            next.first().timestamp_ms(),
            next.first().sequence(),
            next.len()
        ),
        (T + 1, 0, 4096)
    );
    assert_eq!(
        generator.try_take_exact(4097).unwrap_err().to_string(),
        "invalid count: expected 1..=4096, found 4097"
    );
    clock.set_ms(T);
    assert!(matches!(
        generator.try_take_exact(1),
        Err(Error::ClockMovedBackwards { .. })
    ));
}

#[test]
fn batch_sizes_are_checked() {
    let generator = Generator::new(0, 0).unwrap();
    assert_eq!(
        generator.next_batch(0).unwrap_err().to_string(),
        "invalid count: expected 1..=4096, found 0"
    );
    assert_eq!(
        generator.next_batch(4097).unwrap_err().to_string(),
        "invalid count: expected 1..=4096, found 4097"
    );
}

#[test]
fn next_ids_spans_milliseconds_in_order() {
    let generator = Generator::new(0, 0).unwrap();
    let ids = generator.next_ids(20_000).unwrap();
    assert_eq!(ids.len(), 20_000);
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    assert!(generator.next_ids(0).unwrap().is_empty());
}

#[test]
fn refuses_clocks_outside_the_layout() {
    let clock = ManualClock::new(TWITTER_EPOCH_MS - 1);
    let generator = manual(0, 0, &clock);
    assert_eq!(
        generator.next_id().unwrap_err(),
        Error::ClockBeforeEpoch {
            now_ms: TWITTER_EPOCH_MS - 1,
            epoch_ms: TWITTER_EPOCH_MS
        }
    );
    let max = Layout::TWITTER.max_timestamp_ms();
    clock.set_ms(max);
    assert_eq!(generator.next_id().unwrap().as_u64() >> 22, (1 << 41) - 1);
    clock.set_ms(max + 1);
    assert_eq!(
        generator.next_id().unwrap_err(),
        Error::LayoutExhausted {
            now_ms: max + 1,
            max_ms: max
        }
    );
}

#[test]
fn the_last_millisecond_of_the_layout_is_not_overrun() {
    let max = Layout::TWITTER.max_timestamp_ms();
    let clock = ScriptedClock::new([max]);
    let generator = Generator::builder()
        .datacenter_id(31)
        .worker_id(31)
        .clock(&clock)
        .build()
        .unwrap();
    assert_eq!(
        generator.next_ids(4096).unwrap().last().copied(),
        Some(SnowflakeId::MAX)
    );
    clock.push(max + 1);
    assert!(matches!(
        generator.next_id(),
        Err(Error::LayoutExhausted { .. })
    ));
}

//! The millisecond pacer: wakes the requests waiting for the clock's next millisecond as soon as
//! it begins, under layouts whose sequence, not the work of formatting IDs, bounds a batch
//! (fewer than 4,096 IDs a millisecond: js-safe's 64).
//!
//! The runtime's timer cannot do it: its wheel ticks once a millisecond at a phase of its own
//! (the runtime's start), and a sleep ends at the first tick after its deadline, up to a
//! millisecond or more after the clock's millisecond began. Under js-safe about one millisecond
//! in six then went by with no request taking its 64 IDs (82–87% of 64,000 IDs/s on a quiet
//! machine; BENCHMARKS.md, "js-safe saturation"). Here one thread per node sleeps with
//! `std::thread::sleep` (a high-resolution timer: tens of microseconds late, no spinning) to
//! the clock's next millisecond ([`Clock::until_next_ms`]) and wakes every waiting request at
//! once. It sleeps from millisecond to millisecond only while a request waits; otherwise it is
//! parked.
//!
//! Under CPU contention, a thread of ordinary priority still woke more than a millisecond late
//! about one time in twenty (load average 7–10 on two vCPUs, other builds running), and each
//! such millisecond went unused. So the thread asks, once, to run under the real-time FIFO policy
//! at its lowest priority (1): it then runs as soon as its timer fires, ahead of ordinary
//! threads, and it never spins (it sleeps from millisecond to millisecond while requests wait,
//! and is parked otherwise). The system grants that to a process with `CAP_SYS_NICE` or an
//! `RLIMIT_RTPRIO` of at least 1 (systemd: `LimitRTPRIO=1`); refused, it logs why once and runs
//! at ordinary priority.
//!
//! It is an alarm, not a clock: the generator still reads the clock for every ID, and a request
//! takes its IDs itself once awake, so a request that is gone (its client left, its timeout
//! passed) takes none. A late or missed wake-up costs throughput, never uniqueness or order,
//! unlike a ticker thread that stands in for the clock (LESSONS.md).

use snowflake_core::Clock;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::sync::Notify;

/// How often the thread looks at a clock that cannot tell when its next millisecond begins (a
/// manual clock in tests).
const POLL: Duration = Duration::from_millis(1);

/// A node's pacer; dropping it ends its thread.
#[derive(Debug)]
pub(super) struct Pacer {
    /// What the thread and the waiting requests share.
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    /// Notified, every waiter at once, when the clock reads a new millisecond.
    tick: Notify,
    /// How many requests wait, and whether the pacer is dropped.
    state: Mutex<State>,
    /// Wakes the parked thread when a request starts waiting, or when the pacer is dropped.
    wake: Condvar,
}

#[derive(Debug, Default)]
struct State {
    /// Requests waiting for the next millisecond: the thread runs while there are any.
    waiting: usize,
    /// The pacer is dropped: the thread ends.
    closed: bool,
}

impl Pacer {
    /// Starts the pacer's thread (parked until a request waits) for a node reading `clock`;
    /// `None` when the system refuses a thread, which is logged (waits for the next millisecond
    /// then use the runtime's timer, as before).
    pub(super) fn start(clock: Arc<dyn Clock>) -> Option<Pacer> {
        let shared = Arc::new(Shared {
            tick: Notify::new(),
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
        });
        let thread = Arc::clone(&shared);
        match std::thread::Builder::new()
            .name("snowflake-pacer".into())
            .spawn(move || {
                raise_priority();
                thread.run(clock.as_ref());
            }) {
            Ok(_) => Some(Pacer { shared }),
            Err(err) => {
                tracing::warn!(
                    error = %err,
                    "cannot start the millisecond pacer's thread: requests for more than a \
                     millisecond's ids wait for the next millisecond on the runtime's timer"
                );
                None
            }
        }
    }

    /// Returns once `clock` reads another millisecond than `seen_ms` (the same clock as the
    /// pacer's): at once if it already does, else when the pacer's thread sees it change.
    /// Cancel-safe: a dropped wait stops counting as waiting at once.
    pub(super) async fn next_ms(&self, clock: &dyn Clock, seen_ms: u64) {
        let _waiting = Waiting::new(&self.shared);
        loop {
            // Registered before the clock is read, so that a tick in between is not missed.
            let tick = self.shared.tick.notified();
            tokio::pin!(tick);
            tick.as_mut().enable();
            if clock.now_ms() != seen_ms {
                return;
            }
            tick.await;
        }
    }

    /// How many requests wait now.
    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.shared.lock().waiting
    }
}

/// Asks for the real-time FIFO policy at its lowest priority for the calling thread (see the
/// module's documentation); logs the outcome once.
fn raise_priority() {
    use thread_priority::{
        RealtimeThreadSchedulePolicy, ThreadPriority, ThreadSchedulePolicy,
        set_thread_priority_and_policy, thread_native_id,
    };
    let fifo = ThreadSchedulePolicy::Realtime(RealtimeThreadSchedulePolicy::Fifo);
    match set_thread_priority_and_policy(thread_native_id(), ThreadPriority::Min, fifo) {
        Ok(()) => tracing::info!(
            "the millisecond pacer's thread runs under the real-time FIFO policy (priority 1)"
        ),
        Err(err) => tracing::warn!(
            error = ?err,
            "the millisecond pacer's thread runs at ordinary priority (the real-time FIFO policy \
             was refused: it needs CAP_SYS_NICE or an RLIMIT_RTPRIO of at least 1, e.g. systemd's \
             LimitRTPRIO=1): under CPU contention, some milliseconds' ids may go unused"
        ),
    }
}

impl Drop for Pacer {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.wake.notify_one();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing panics while holding it; a poisoned lock still holds two plain numbers.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The thread: parked while nobody waits; else, each time the clock reads a new
    /// millisecond, wakes the waiters, and sleeps until the next one.
    fn run(&self, clock: &dyn Clock) {
        let mut notified_ms = None;
        loop {
            {
                let mut state = self.lock();
                while state.waiting == 0 && !state.closed {
                    state = self
                        .wake
                        .wait(state)
                        .unwrap_or_else(PoisonError::into_inner);
                }
                if state.closed {
                    return;
                }
            }
            let now_ms = clock.now_ms();
            if notified_ms != Some(now_ms) {
                notified_ms = Some(now_ms);
                self.tick.notify_waiters();
            }
            // Never returns early: at the next millisecond or a little after (the timer's
            // slack), so the clock reads it when the thread looks again.
            std::thread::sleep(clock.until_next_ms().unwrap_or(POLL));
        }
    }
}

/// One request counted as waiting until dropped.
struct Waiting<'a>(&'a Shared);

impl<'a> Waiting<'a> {
    fn new(shared: &'a Shared) -> Waiting<'a> {
        let mut state = shared.lock();
        state.waiting += 1;
        if state.waiting == 1 {
            shared.wake.notify_one();
        }
        Waiting(shared)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.lock().waiting -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use snowflake_core::{ManualClock, SystemClock};

    const LONG: Duration = Duration::from_secs(10);

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn waiters_wake_when_the_clock_moves_and_a_dropped_one_stops_waiting() {
        let clock = ManualClock::new(1_000);
        let pacer = Pacer::start(Arc::new(clock.clone())).expect("a thread");
        // The clock already reads another millisecond: no wait.
        tokio::time::timeout(LONG, pacer.next_ms(&clock, 999))
            .await
            .expect("at once");
        assert_eq!(pacer.waiting(), 0);
        // Two requests wait for the same millisecond; both wake when it comes.
        let both = async {
            tokio::join!(pacer.next_ms(&clock, 1_000), pacer.next_ms(&clock, 1_000));
        };
        let mover = clock.clone();
        let moved = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            mover.advance_ms(1);
        });
        tokio::time::timeout(LONG, both)
            .await
            .expect("woken when the clock moved");
        moved.join().unwrap();
        assert_eq!(clock.now_ms(), 1_001);
        assert_eq!(pacer.waiting(), 0);
        // A wait that is given up (a request dropped or timed out) no longer counts.
        let gave_up =
            tokio::time::timeout(Duration::from_millis(20), pacer.next_ms(&clock, 1_001)).await;
        assert!(gave_up.is_err(), "the clock did not move");
        assert_eq!(pacer.waiting(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn under_the_system_clock_every_wait_ends_in_a_later_millisecond() {
        let clock = SystemClock;
        let pacer = Pacer::start(Arc::new(clock)).expect("a thread");
        for _ in 0..50 {
            let seen_ms = clock.now_ms();
            tokio::time::timeout(LONG, pacer.next_ms(&clock, seen_ms))
                .await
                .expect("the next millisecond comes");
            assert_ne!(clock.now_ms(), seen_ms);
        }
        assert_eq!(pacer.waiting(), 0);
    }
}

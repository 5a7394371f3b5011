//! The millisecond pacer: under layouts whose sequence, not the work of formatting IDs, bounds a
//! batch (fewer than 4,096 IDs a millisecond: js-safe's 64), one thread per node takes each
//! millisecond's IDs for the bulk requests waiting for them as soon as the millisecond begins,
//! and wakes the smaller requests that wait for the next millisecond.
//!
//! The runtime's timer cannot do it: its wheel ticks once a millisecond at a phase of its own
//! (the runtime's start), and a sleep ends at the first tick after its deadline, up to a
//! millisecond or more after the clock's millisecond began: about one millisecond in six went
//! by with no request taking its 64 IDs (82–87% of 64,000 IDs/s on a quiet machine; BENCHMARKS.md,
//! "js-safe saturation"). Here the thread sleeps with `std::thread::sleep` (a high-resolution
//! timer: tens of microseconds late, no spinning) to the clock's next millisecond
//! ([`Clock::until_next_ms`]), from millisecond to millisecond only while a request waits;
//! otherwise it is parked.
//!
//! A bulk request takes what the current millisecond has left itself (the thread may be asleep
//! until the next one), then hands the rest to the thread as a [`Job`] and waits for the IDs; the
//! thread takes them with the request's own take (the same generator, the same leave-a-quarter
//! rule, the same metrics), a millisecond at a time, and hands them over when the count is
//! reached or when the generator refuses (the request then handles the refusal as any other:
//! waits out a small clock regression, reserves, or answers why). So a runtime thread that runs
//! late (busy formatting a large reply, or descheduled) no longer loses the millisecond: when it
//! was woken to take the IDs itself, one millisecond in twenty still went unused under load.
//! A request that is gone (its client left, its timeout passed) drops its end of the job, and
//! the thread drops the job before its next take: at most one millisecond's IDs are taken for
//! nobody, which is waste, never a duplicate.
//!
//! Under CPU contention, a thread of ordinary priority still woke more than a millisecond late
//! about one time in twenty (load average 7–10 on two vCPUs, other builds running), and each
//! such millisecond went unused. So the thread asks, once, to run under the real-time FIFO policy
//! at its lowest priority (1): it then runs as soon as its timer fires, ahead of ordinary
//! threads, and it never spins. The system grants that to a process with `CAP_SYS_NICE` or an
//! `RLIMIT_RTPRIO` of at least 1 (systemd: `LimitRTPRIO=1`); refused, it logs why once and runs
//! at ordinary priority.
//!
//! It is an alarm, not a clock: the generator still reads the clock for every ID, so an ID's
//! time is always the millisecond it was taken in. A late or missed wake-up costs throughput,
//! never uniqueness or order, unlike a ticker thread that stands in for the clock (LESSONS.md).

use snowflake_core::{Clock, Error as CoreError, IdBatch};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::sync::{Notify, oneshot};

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
    /// Bulk requests whose IDs the thread takes: it runs while there are any.
    jobs: Vec<Job>,
    /// The pacer is dropped: the thread ends.
    closed: bool,
}

/// Takes up to the given count (at most a millisecond's worth) of the current millisecond's IDs
/// for one request, never waiting: `Ok(None)` when the millisecond has no more to give it. The
/// flag says whether other requests wait for the millisecond (the take then leaves them a share).
pub(super) type TakeFn = Box<dyn FnMut(u64, bool) -> Result<Option<IdBatch>, CoreError> + Send>;

/// A bulk request's remainder, whose IDs the pacer's thread takes a millisecond at a time.
pub(super) struct Job {
    take: TakeFn,
    /// IDs still to take.
    left: u64,
    /// The most one take asks for: a millisecond's worth.
    per_ms: u64,
    batches: Vec<IdBatch>,
    /// `None` once answered.
    reply: Option<oneshot::Sender<Served>>,
}

/// What the pacer's thread took for a [`Job`]: all of its count, or what it had taken when the
/// generator refused (`error`).
#[derive(Debug)]
pub(super) struct Served {
    /// The runs of IDs taken, in increasing order.
    pub(super) batches: Vec<IdBatch>,
    /// Why it stopped short, if it did.
    pub(super) error: Option<CoreError>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("left", &self.left)
            .field("taken", &self.batches.len())
            .finish_non_exhaustive()
    }
}

impl Job {
    /// A job of `count` IDs (more than none) taken with `take`, at most `per_ms` at a time; the
    /// receiver gets them. Dropping the receiver ends the job before the thread's next take.
    pub(super) fn new(take: TakeFn, count: u64, per_ms: u64) -> (Job, oneshot::Receiver<Served>) {
        let (reply, served) = oneshot::channel();
        let job = Job {
            take,
            left: count,
            per_ms: per_ms.max(1),
            batches: Vec::new(),
            reply: Some(reply),
        };
        (job, served)
    }

    /// One take for the current millisecond; whether the job goes on (it is neither answered
    /// nor abandoned).
    fn serve(&mut self, others_wait: bool) -> bool {
        let Some(reply) = &self.reply else {
            return false;
        };
        if reply.is_closed() || self.left == 0 {
            // The request is gone: nothing more is taken for it.
            return false;
        }
        match (self.take)(self.left.min(self.per_ms), others_wait) {
            Ok(None) => true,
            Ok(Some(batch)) => {
                self.left = self.left.saturating_sub(batch.len());
                self.batches.push(batch);
                if self.left > 0 {
                    return true;
                }
                self.answer(None);
                false
            }
            Err(err) => {
                self.answer(Some(err));
                false
            }
        }
    }

    fn answer(&mut self, error: Option<CoreError>) {
        if let Some(reply) = self.reply.take() {
            // A request gone meanwhile drops the IDs with the reply.
            let _gone = reply.send(Served {
                batches: std::mem::take(&mut self.batches),
                error,
            });
        }
    }
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

    /// Hands `job` to the thread, which takes its first IDs at once (from what the current
    /// millisecond has left) and then at the start of every millisecond until it is answered or
    /// its receiver is dropped.
    pub(super) fn serve(&self, job: Job) {
        let mut state = self.shared.lock();
        state.jobs.push(job);
        if state.jobs.len() == 1 && state.waiting == 0 {
            self.shared.wake.notify_one();
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
        // Nothing panics while holding it (a job's take runs outside it); a poisoned lock still
        // holds plain numbers and jobs whose requests wait for their answer.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The thread: parked while nobody waits; else, each time the clock reads a new
    /// millisecond, takes the jobs' IDs and wakes the waiters, and sleeps until the next one.
    fn run(&self, clock: &dyn Clock) {
        let mut notified_ms = None;
        loop {
            let (mut jobs, others_wait) = {
                let mut state = self.lock();
                while state.waiting == 0 && state.jobs.is_empty() && !state.closed {
                    state = self
                        .wake
                        .wait(state)
                        .unwrap_or_else(PoisonError::into_inner);
                }
                if state.closed {
                    // The jobs' requests get no answer: they report the node shutting down.
                    return;
                }
                (std::mem::take(&mut state.jobs), state.waiting > 0)
            };
            // The jobs first, oldest first: a job takes whole milliseconds until it is answered,
            // and the next one takes what its last millisecond left. In turn (one millisecond
            // each) they would all finish together and their clients' round trips would leave
            // the node idle; one after another, one request's round trip overlaps the next's
            // milliseconds, and the mean wait is shorter.
            jobs.retain_mut(|job| job.serve(others_wait));
            if !jobs.is_empty() {
                let mut state = self.lock();
                jobs.append(&mut state.jobs);
                state.jobs = jobs;
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
    use snowflake_core::{Generator, Layout, ManualClock, SystemClock};
    use std::sync::atomic::{AtomicU64, Ordering};

    const LONG: Duration = Duration::from_secs(10);
    const T: u64 = 1_800_000_000_000;

    /// A js-safe generator on `clock`, issuing up to `limit_ms`, and a take for the pacer that
    /// counts in `taken` the IDs it took.
    fn js_safe(clock: &ManualClock, limit_ms: u64) -> (TakeFn, Arc<AtomicU64>) {
        let generator = Generator::builder()
            .layout(Layout::JS_SAFE)
            .clock(clock.clone())
            .issue_limit_ms(limit_ms)
            .build()
            .unwrap();
        let taken = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&taken);
        let take: TakeFn = Box::new(move |max, _others_wait| {
            let batch = generator.try_take_batch(max, 0);
            if let Ok(Some(batch)) = &batch {
                counted.fetch_add(batch.len(), Ordering::SeqCst);
            }
            batch
        });
        (take, taken)
    }

    /// Moves `clock` one millisecond every 5 ms until `stop` is set.
    fn ticking(
        clock: &ManualClock,
        stop: &Arc<std::sync::atomic::AtomicBool>,
    ) -> std::thread::JoinHandle<()> {
        let clock = clock.clone();
        let stop = Arc::clone(stop);
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(5));
                clock.advance_ms(1);
            }
        })
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_thread_takes_a_jobs_ids_a_millisecond_at_a_time_and_answers_with_all() {
        let clock = ManualClock::new(T);
        let pacer = Pacer::start(Arc::new(clock.clone())).expect("a thread");
        let (take, taken) = js_safe(&clock, T + 60_000);
        let (job, served) = Job::new(take, 200, 64);
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mover = ticking(&clock, &stop);
        pacer.serve(job);
        let served = tokio::time::timeout(LONG, served)
            .await
            .expect("answered")
            .expect("not dropped");
        stop.store(true, Ordering::SeqCst);
        mover.join().unwrap();
        assert!(served.error.is_none(), "{:?}", served.error);
        let ids: Vec<u64> = served
            .batches
            .into_iter()
            .flatten()
            .map(|id| id.as_u64())
            .collect();
        assert_eq!(ids.len(), 200);
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "in increasing order");
        // 64 a millisecond: four milliseconds' IDs, each taken in its own millisecond.
        let times: std::collections::BTreeSet<u64> = ids
            .iter()
            .map(|id| id >> Layout::JS_SAFE.timestamp_shift())
            .collect();
        assert_eq!(times.len(), 4, "{times:?}");
        assert_eq!(taken.load(Ordering::SeqCst), 200);
        assert!(pacer.shared.lock().jobs.is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_whose_request_is_gone_takes_no_more() {
        let clock = ManualClock::new(T);
        let pacer = Pacer::start(Arc::new(clock.clone())).expect("a thread");
        let (take, taken) = js_safe(&clock, T + 60_000);
        let (job, served) = Job::new(take, 1_000, 64);
        pacer.serve(job);
        // The thread takes what the current millisecond has at once.
        let begun = std::time::Instant::now() + LONG;
        while taken.load(Ordering::SeqCst) < 64 {
            assert!(std::time::Instant::now() < begun, "nothing taken in 10 s");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        drop(served);
        for _ in 0..5 {
            clock.advance_ms(1);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(taken.load(Ordering::SeqCst), 64, "taken for nobody");
        assert!(pacer.shared.lock().jobs.is_empty(), "the job is dropped");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_refusal_reaches_the_request_with_the_ids_taken_before_it() {
        let clock = ManualClock::new(T);
        let pacer = Pacer::start(Arc::new(clock.clone())).expect("a thread");
        // Nothing may be issued after T: the next millisecond is refused.
        let (take, taken) = js_safe(&clock, T);
        let (job, served) = Job::new(take, 1_000, 64);
        pacer.serve(job);
        let begun = std::time::Instant::now() + LONG;
        while taken.load(Ordering::SeqCst) < 64 {
            assert!(std::time::Instant::now() < begun, "nothing taken in 10 s");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        clock.advance_ms(1);
        let served = tokio::time::timeout(LONG, served)
            .await
            .expect("answered")
            .expect("not dropped");
        assert!(
            matches!(
                served.error,
                Some(CoreError::PastIssueLimit { limit_ms: T, .. })
            ),
            "{:?}",
            served.error
        );
        assert_eq!(served.batches.iter().map(IdBatch::len).sum::<u64>(), 64);
        assert!(pacer.shared.lock().jobs.is_empty());
    }

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

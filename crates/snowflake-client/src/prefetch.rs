//! The prefetch buffer: IDs fetched ahead in batches, handed out one at a time from memory, and
//! refilled in the background before it runs dry.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Prefetch settings (opt-in, [`crate::ClientBuilder::prefetch`]).
///
/// A background task keeps a buffer of IDs, fetched with `NextIds` in rounds of parallel calls
/// of at most 1,024 IDs each, and refills it when it falls below a low-water mark sized from the
/// rate the application takes IDs at, how long a round takes and how late the task is
/// scheduled, so that `next_id()` is a memory read. The trade-off: an ID carries the time it
/// was **fetched**, not the time it is used, so IDs handed out by one client are ordered by
/// fetch, and an ID can be older than the moment it is taken. `max_age` bounds that: an ID
/// fetched longer ago than `max_age` is discarded, never handed out (the unused IDs are a gap,
/// never a duplicate). Discarded IDs are counted ([`crate::Stats::discarded_stale`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefetch {
    pub(crate) max_age: Duration,
    pub(crate) max_buffer: u64,
    pub(crate) min_fetch: u32,
}

impl Default for Prefetch {
    fn default() -> Self {
        Prefetch {
            max_age: Duration::from_secs(2),
            max_buffer: 262_144,
            min_fetch: 256,
        }
    }
}

impl Prefetch {
    /// Defaults: `max_age` 2 s, at most 262,144 IDs buffered, fetches of at least 256 IDs.
    pub fn new() -> Prefetch {
        Prefetch::default()
    }

    /// IDs fetched longer ago than this are discarded rather than handed out (at least 1 ms).
    pub fn max_age(mut self, max_age: Duration) -> Prefetch {
        self.max_age = max_age.max(Duration::from_millis(1));
        self
    }

    /// The most IDs kept (at least one fetch's worth).
    pub fn max_buffer(mut self, ids: u64) -> Prefetch {
        self.max_buffer = ids.max(1);
        self
    }

    /// The fewest IDs one refill asks for (1..=4096), however slowly IDs are taken.
    pub fn min_fetch(mut self, ids: u32) -> Prefetch {
        self.min_fetch = ids.clamp(1, 4096);
        self
    }
}

/// How late the refiller may run after it was woken, on a busy machine (a loaded 2-core VM
/// delays a woken task by several milliseconds now and then): the buffer covers it.
const WAKE_SLACK: Duration = Duration::from_millis(25);

/// The most IDs one refill call asks for: a node answers batches of up to 1,024 IDs at once,
/// without its queue for large replies (the server's `bulk::BULK_MIN_IDS`), so that the refill's
/// parallel calls never wait in that queue nor are refused from it (`RESOURCE_EXHAUSTED`).
pub(crate) const CALL_IDS: u32 = 1024;

/// The most refill calls in flight at once (one round): 64 calls of [`CALL_IDS`] bring 65,536
/// IDs a round, 1.3 million IDs/s over a link where a round takes 50 ms, well within a node's
/// default 100 concurrent streams per connection.
pub(crate) const MAX_IN_FLIGHT: usize = 64;

/// IDs of one `NextIds` answer.
#[derive(Debug)]
struct Batch {
    ids: Vec<u64>,
    next: usize,
    /// When the request was sent: every ID in it was issued after this, so `now - born` is never
    /// less than an ID's real age.
    born: Instant,
}

#[derive(Debug, Default)]
struct Queue {
    batches: VecDeque<Batch>,
    len: u64,
}

/// What [`Buffer::pop`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Popped {
    pub(crate) id: Option<u64>,
    /// Stale IDs dropped on the way.
    pub(crate) discarded: u64,
}

#[derive(Debug)]
pub(crate) struct Buffer {
    pub(crate) settings: Prefetch,
    queue: Mutex<Queue>,
    /// Refill below this many IDs.
    low_water: AtomicU64,
    /// Fill up to this many.
    target: AtomicU64,
    /// Set by a taker that saw the buffer below the low-water mark; cleared by the refiller.
    refill_wanted: AtomicBool,
    /// IDs handed out from the buffer, for the rate estimate.
    pub(crate) taken: AtomicU64,
    /// When a taker last asked for a refill (nanoseconds since `created`), for how late the
    /// refiller answers.
    asked_at: AtomicU64,
    created: Instant,
}

impl Buffer {
    pub(crate) fn new(settings: Prefetch) -> Buffer {
        let initial = u64::from(settings.min_fetch).min(settings.max_buffer);
        Buffer {
            settings,
            queue: Mutex::new(Queue::default()),
            low_water: AtomicU64::new(initial / 2),
            target: AtomicU64::new(initial),
            refill_wanted: AtomicBool::new(true),
            taken: AtomicU64::new(0),
            asked_at: AtomicU64::new(0),
            created: Instant::now(),
        }
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The next ID that is not older than `max_age` at `now`, if any; true in the second field
    /// when the buffer is now below its low-water mark and no refill was asked for yet.
    pub(crate) fn pop(&self, now: Instant) -> (Popped, bool) {
        let mut q = self.queue();
        let mut discarded = 0;
        let id = loop {
            let Some(front) = q.batches.front_mut() else {
                break None;
            };
            if now.saturating_duration_since(front.born) > self.settings.max_age {
                let left = (front.ids.len() - front.next) as u64;
                discarded += left;
                q.len -= left;
                q.batches.pop_front();
                continue;
            }
            let id = front.ids[front.next];
            front.next += 1;
            if front.next == front.ids.len() {
                q.batches.pop_front();
            }
            q.len -= 1;
            break Some(id);
        };
        let len = q.len;
        drop(q);
        if id.is_some() {
            self.taken.fetch_add(1, Ordering::Relaxed);
        }
        let mut wake = false;
        if len < self.low_water.load(Ordering::Relaxed)
            && !self.refill_wanted.load(Ordering::Acquire)
        {
            // The time first, so that the refiller never reads an older one with the ask.
            let at = now.saturating_duration_since(self.created).as_nanos();
            self.asked_at
                .store(u64::try_from(at).unwrap_or(u64::MAX), Ordering::Relaxed);
            wake = !self.refill_wanted.swap(true, Ordering::AcqRel);
        }
        (Popped { id, discarded }, wake)
    }

    /// Adds a fetched batch (sent at `born`).
    pub(crate) fn push(&self, ids: Vec<u64>, born: Instant) {
        if ids.is_empty() {
            return;
        }
        let mut q = self.queue();
        q.len += ids.len() as u64;
        q.batches.push_back(Batch { ids, next: 0, born });
    }

    /// Drops every buffered ID (on close); how many.
    pub(crate) fn clear(&self) -> u64 {
        let mut q = self.queue();
        let n = q.len;
        *q = Queue::default();
        n
    }

    pub(crate) fn len(&self) -> u64 {
        self.queue().len
    }

    /// Drops what is stale at `now` (the refiller does this on its ticks, so that a buffer
    /// nobody takes from does not hold old IDs); how many.
    pub(crate) fn evict_stale(&self, now: Instant) -> u64 {
        let mut q = self.queue();
        let mut discarded = 0;
        while let Some(front) = q.batches.front() {
            if now.saturating_duration_since(front.born) <= self.settings.max_age {
                break;
            }
            let left = (front.ids.len() - front.next) as u64;
            discarded += left;
            q.len -= left;
            q.batches.pop_front();
        }
        discarded
    }

    /// The refiller starts a round: takers may ask again. When a taker asked for it, if one
    /// did since the last round.
    pub(crate) fn refill_started(&self) -> Option<Instant> {
        let asked = self.refill_wanted.swap(false, Ordering::AcqRel);
        asked.then(|| self.created + Duration::from_nanos(self.asked_at.load(Ordering::Relaxed)))
    }

    /// How many IDs one call asks for now (0: none), given the sizing: what is missing, at least
    /// `min_fetch`, at most one refill call's worth ([`CALL_IDS`], and `max_per_call`).
    pub(crate) fn wanted(&self, max_per_call: u32) -> u32 {
        self.parts(max_per_call).first().copied().unwrap_or(0)
    }

    /// The calls that bring the buffer up to its target now (none when it is there): each of
    /// `min_fetch` up to [`CALL_IDS`] (and `max_per_call`) IDs, at most [`MAX_IN_FLIGHT`] of
    /// them.
    pub(crate) fn parts(&self, max_per_call: u32) -> Vec<u32> {
        let target = self.target.load(Ordering::Relaxed);
        let mut missing = target.saturating_sub(self.len());
        let most = max_per_call.min(CALL_IDS);
        let least = self.settings.min_fetch.min(most);
        let mut parts = Vec::new();
        while missing > 0 && parts.len() < MAX_IN_FLIGHT {
            let part = u32::try_from(missing)
                .unwrap_or(u32::MAX)
                .clamp(least, most);
            parts.push(part);
            missing = missing.saturating_sub(u64::from(part));
        }
        parts
    }

    /// Sizes the buffer from the rate IDs are taken at (IDs per second), how long a refill
    /// round takes (`fetch_time`: its calls are in flight together), and how late the refiller
    /// started after a taker asked (`late`). `cover` is what is taken during two rounds plus
    /// `late` or [`WAKE_SLACK`], whichever is more (for the refiller to be scheduled); the target
    /// is twice that, capped so that what is bought is used within half of `max_age` (and by
    /// `max_buffer`). The refill starts as soon as one call's worth (`call` IDs) is missing,
    /// and no later than `cover`: while IDs are taken fast the rounds follow each other, each
    /// bringing what was taken during the last, and the whole target stands between the takers
    /// and an empty buffer when a round is slow.
    pub(crate) fn resize(&self, rate: f64, fetch_time: Duration, late: Duration, call: u32) {
        let s = &self.settings;
        let slack = late.max(WAKE_SLACK);
        let cover = (fetch_time.as_secs_f64() * 2.0 + slack.as_secs_f64()) * rate;
        let usable = rate * s.max_age.as_secs_f64() / 2.0;
        let min = f64::from(s.min_fetch);
        let low = cover.min(usable).max(min / 2.0);
        let target = (low + cover.max(min))
            .min(usable.max(min))
            .min(s.max_buffer as f64)
            .max(1.0);
        let low = low.max(target - f64::from(call));
        self.target.store(target as u64, Ordering::Relaxed);
        self.low_water
            .store((low.min(target - 1.0).max(0.0)) as u64, Ordering::Relaxed);
    }

    #[cfg(test)]
    pub(crate) fn marks(&self) -> (u64, u64) {
        (
            self.low_water.load(Ordering::Relaxed),
            self.target.load(Ordering::Relaxed),
        )
    }
}

/// The rate IDs are taken at, measured between refill rounds.
#[derive(Debug)]
struct Meter {
    /// The buffer's `taken` count and when it was read, at the start of this measurement.
    taken: u64,
    at: Instant,
    /// IDs per second.
    rate: f64,
}

impl Meter {
    /// Shorter measurements are not taken: a burst of a few hundred IDs in a millisecond is
    /// not a rate.
    const SHORTEST: Duration = Duration::from_millis(5);

    fn new(now: Instant) -> Meter {
        Meter {
            taken: 0,
            at: now,
            rate: 0.0,
        }
    }

    /// Reads the buffer's `taken` count at `now`: a rise of the rate is followed at once, a
    /// fall by half per measurement, so that the buffer is never sized for less than what was
    /// just taken. Whether any ID was taken since the last measurement.
    fn update(&mut self, taken: u64, now: Instant) -> bool {
        let took = taken.saturating_sub(self.taken);
        let elapsed = now.saturating_duration_since(self.at);
        if elapsed >= Self::SHORTEST {
            let recent = took as f64 / elapsed.as_secs_f64();
            self.rate = recent.max(0.75 * self.rate + 0.25 * recent);
            self.taken = taken;
            self.at = now;
        }
        took > 0
    }
}

/// The background refill: woken when the buffer falls below its low-water mark (and on a
/// tick, to follow the rate and drop stale IDs), it fetches up to the target in rounds, and
/// before each round it measures the rate IDs are taken at and resizes the buffer from it and
/// from how long the last rounds took. It ends when the client is closed or dropped.
pub(crate) async fn refill(client: Weak<crate::Inner>, wake: Arc<Notify>) {
    let mut meter = Meter::new(Instant::now());
    let mut fetch_time = Duration::from_millis(1);
    // How late the refiller starts after a taker asked: a later start is followed at once, an
    // earlier one by an eighth, so that one busy moment of the machine widens the low-water
    // mark for a while (the rounds cover it), not just once.
    let mut late = Duration::ZERO;
    let mut first = true;
    loop {
        let tick = match client.upgrade() {
            Some(inner) => {
                let max_age = inner
                    .buffer
                    .as_ref()
                    .map_or(Duration::from_secs(1), |b| b.settings.max_age);
                (max_age / 4).clamp(Duration::from_millis(5), Duration::from_millis(250))
            }
            None => return,
        };
        let idle_since = Instant::now();
        // The first round fills the buffer at once, so that the first IDs are local too.
        let woken = first
            || tokio::select! {
                () = wake.notified() => true,
                () = tokio::time::sleep(tick) => false,
            };
        first = false;
        let Some(inner) = client.upgrade() else {
            return;
        };
        if inner.closed.load(Ordering::Acquire) {
            return;
        }
        let Some(buffer) = &inner.buffer else {
            return;
        };
        let asked = buffer.refill_started();
        let now = Instant::now();
        if let Some(asked) = asked.filter(|&at| woken && at >= idle_since) {
            let sample = now.saturating_duration_since(asked);
            late = sample.max(late * 7 / 8 + sample / 8);
        }
        let stale = buffer.evict_stale(now);
        if stale > 0 {
            inner.discarded(stale);
        }
        let took = meter.update(buffer.taken.load(Ordering::Relaxed), now);
        if !woken && !took {
            // Nobody took an ID since the last round: keep what is fresh, fetch nothing (an
            // idle client would otherwise fetch IDs only to discard them).
            continue;
        }
        loop {
            let call = inner.max_ids_per_call.min(CALL_IDS);
            buffer.resize(meter.rate, fetch_time, late, call);
            let parts = buffer.parts(inner.max_ids_per_call);
            if parts.is_empty() || inner.closed.load(Ordering::Acquire) {
                break;
            }
            let _one = inner.filling.lock().await;
            let born = Instant::now();
            let (ids, failed) = round(&inner, parts).await;
            buffer.push(ids, born);
            // How long a round takes: a slower one is followed at once, a faster one by half.
            let took = born.elapsed();
            fetch_time = took.max((fetch_time + took) / 2);
            // Every node failed for `give_up_after` (each call waited out the nodes'
            // `retry-after` and backoff meanwhile): the takers see the same when they find the
            // buffer empty; try again on the next round.
            if failed {
                break;
            }
            meter.update(buffer.taken.load(Ordering::Relaxed), Instant::now());
        }
        if inner.closed.load(Ordering::Acquire) {
            let dropped = buffer.clear();
            if dropped > 0 {
                inner.discarded(dropped);
            }
            return;
        }
    }
}

/// One refill round: the `parts` asked for at once, in parallel calls (so that a round brings
/// more than one call's worth per fetch time: one call of 4,096 IDs per 20 ms fetch is only
/// 204,800 IDs/s). A node answers parallel calls in any order, so the round's IDs come back
/// sorted: with the rounds one after the other, every ID of a round is above the last round's
/// (from one node), and IDs stay ordered by fetch. Also whether a call failed.
async fn round(inner: &Arc<crate::Inner>, parts: Vec<u32>) -> (Vec<u64>, bool) {
    let mut calls = tokio::task::JoinSet::new();
    for count in parts {
        let inner = Arc::clone(inner);
        calls.spawn(async move { inner.fetch(count).await });
    }
    let (mut ids, mut failed) = (Vec::new(), false);
    while let Some(call) = calls.join_next().await {
        match call {
            Ok(Ok(got)) => ids.extend(got.iter().map(|id| id.as_u64())),
            _ => failed = true,
        }
    }
    ids.sort_unstable();
    (ids, failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_come_out_once_in_order_and_stale_ones_never() {
        let b = Buffer::new(Prefetch::new().max_age(Duration::from_millis(100)));
        let t0 = Instant::now();
        b.push(vec![1, 2, 3], t0);
        b.push(vec![4, 5], t0 + Duration::from_millis(50));
        assert_eq!(b.len(), 5);
        assert_eq!(b.pop(t0).0.id, Some(1));
        // At 120 ms the first batch is stale: 2 and 3 are dropped, never handed out.
        let (p, _) = b.pop(t0 + Duration::from_millis(120));
        assert_eq!(
            p,
            Popped {
                id: Some(4),
                discarded: 2
            }
        );
        assert_eq!(b.evict_stale(t0 + Duration::from_millis(151)), 1);
        assert_eq!(b.pop(t0 + Duration::from_millis(151)).0.id, None);
        assert_eq!(b.len(), 0);
        b.push(vec![6], t0);
        assert_eq!(b.clear(), 1);
        assert_eq!(b.pop(t0).0.id, None);
    }

    #[test]
    fn a_refill_is_asked_for_once_below_the_low_water_mark() {
        let b = Buffer::new(Prefetch::new().min_fetch(4));
        let now = Instant::now();
        b.refill_started();
        b.push(vec![1, 2, 3, 4], now);
        // Low water starts at min_fetch / 2 = 2.
        assert!(!b.pop(now).1, "3 left");
        assert!(!b.pop(now).1, "2 left");
        assert!(b.pop(now).1, "1 left: below 2, the first to see it asks");
        assert!(!b.pop(now).1, "already asked");
        b.refill_started();
        let (popped, asks) = b.pop(now);
        assert_eq!(popped.id, None);
        assert!(asks, "a new round may be asked for");
    }

    #[test]
    fn the_buffer_is_sized_from_the_rate_and_capped_by_max_age() {
        let b = Buffer::new(Prefetch::new().max_age(Duration::from_secs(2)));
        // 1,000,000 IDs/s, 1 ms fetches: cover 27 ms = 27,000 IDs, the target twice that, and
        // a refill as soon as a call's worth is missing.
        b.resize(1e6, Duration::from_millis(1), Duration::ZERO, 1024);
        assert_eq!(b.marks(), (52_976, 54_000));
        // Asked for in parallel calls small enough to skip the node's bulk queue.
        assert_eq!(b.parts(4096), [vec![1024; 52], vec![752]].concat());
        assert_eq!(b.wanted(4096), 1024);
        // A node allowing fewer per call gets calls of that size.
        assert_eq!(b.parts(500).len(), MAX_IN_FLIGHT);
        assert_eq!(b.parts(500)[0], 500);
        // 20 ms fetches: more than one call's worth per fetch time, at most 64 calls at once.
        b.resize(1e6, Duration::from_millis(20), Duration::ZERO, 1024);
        assert_eq!(b.marks(), (128_976, 130_000));
        assert_eq!(b.parts(4096), vec![1024; MAX_IN_FLIGHT]);
        // A refiller seen starting 100 ms late: the slack follows.
        b.resize(
            1e6,
            Duration::from_millis(20),
            Duration::from_millis(100),
            1024,
        );
        assert_eq!(b.marks(), (261_120, 262_144), "capped by max_buffer");
        // The rate and the fetch time measured: rises at once, falls gradually.
        let t0 = Instant::now();
        let mut meter = Meter::new(t0);
        assert!(!meter.update(0, t0 + Duration::from_millis(10)));
        assert!(meter.update(10_000, t0 + Duration::from_millis(20)));
        assert!((meter.rate - 1e6).abs() < 1e-3, "{}", meter.rate);
        // Too short to measure: the rate stays, the IDs count in the next measurement.
        assert!(meter.update(10_500, t0 + Duration::from_millis(21)));
        assert!((meter.rate - 1e6).abs() < 1e-3, "{}", meter.rate);
        assert!(meter.update(11_000, t0 + Duration::from_millis(30)));
        assert!((meter.rate - 775_000.0).abs() < 1e-3, "{}", meter.rate);
        // A slow taker: at least min_fetch, and at most what is used within max_age / 2.
        b.resize(10.0, Duration::from_millis(1), Duration::ZERO, 1024);
        assert_eq!(b.marks(), (128, 256));
        assert_eq!(b.parts(4096), vec![256]);
        // 10,000 IDs/s: the target is less than a call's worth, the low-water mark covers.
        b.resize(1e4, Duration::from_millis(1), Duration::ZERO, 1024);
        assert_eq!(b.marks(), (270, 540));
        assert_eq!(b.parts(4096), vec![540]);
        // Short max_age: the cap wins over the rate.
        let b = Buffer::new(Prefetch::new().max_age(Duration::from_millis(4)));
        b.resize(1e6, Duration::from_millis(1), Duration::ZERO, 1024);
        let (low, target) = b.marks();
        assert!(target <= 2_000 && low < target, "{low} {target}");
        assert_eq!(b.parts(4096), vec![1024, 976]);
        // A min_fetch above a call's worth is one call's worth.
        let b = Buffer::new(Prefetch::new().min_fetch(4096));
        assert_eq!(b.parts(4096), vec![1024; 4]);
        // Full: nothing to ask for.
        b.push((1..=4096).collect(), Instant::now());
        assert_eq!(b.parts(4096), Vec::<u32>::new());
        assert_eq!(b.wanted(4096), 0);
    }
}

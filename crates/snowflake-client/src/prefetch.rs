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
/// A background task keeps a buffer of IDs, fetched with `NextIds`, and refills it when it falls
/// below a low-water mark sized from the rate the application takes IDs at (and how long a
/// fetch takes), so that `next_id()` is a memory read. The trade-off: an ID carries the time it
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
        let wake = len < self.low_water.load(Ordering::Relaxed)
            && !self.refill_wanted.swap(true, Ordering::AcqRel);
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

    /// The refiller starts a round: takers may ask again.
    pub(crate) fn refill_started(&self) {
        self.refill_wanted.store(false, Ordering::Release);
    }

    /// How many IDs to ask for now (0: none), given the sizing.
    pub(crate) fn wanted(&self, max_per_call: u32) -> u32 {
        let len = self.len();
        let target = self.target.load(Ordering::Relaxed);
        if len >= target {
            return 0;
        }
        let missing = target - len;
        u32::try_from(missing)
            .unwrap_or(u32::MAX)
            .clamp(self.settings.min_fetch.min(max_per_call), max_per_call)
    }

    /// Sizes the buffer from the rate IDs are taken at (IDs per second) and how long a fetch
    /// takes: the low-water mark covers the IDs taken while a refill is on its way (twice the
    /// fetch time, plus [`WAKE_SLACK`] for the refiller to be scheduled), the target one fetch
    /// more; both capped so that what is bought is used within half of `max_age` (and by
    /// `max_buffer`).
    pub(crate) fn resize(&self, rate: f64, fetch_time: Duration, max_per_call: u32) {
        let s = &self.settings;
        let cover = (fetch_time.as_secs_f64() * 2.0 + WAKE_SLACK.as_secs_f64()) * rate;
        let usable = rate * s.max_age.as_secs_f64() / 2.0;
        let min = f64::from(s.min_fetch);
        let low = cover.min(usable).max(min / 2.0);
        let target = (low + f64::from(max_per_call).min(cover.max(min)))
            .min(usable.max(min))
            .min(s.max_buffer as f64)
            .max(1.0);
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

/// The background refill: woken when the buffer falls below its low-water mark (and on a
/// tick, to follow the rate and drop stale IDs), it resizes the buffer from the observed rate
/// and fetches up to the target. It ends when the client is closed or dropped.
pub(crate) async fn refill(client: Weak<crate::Inner>, wake: Arc<Notify>) {
    let mut last_taken = 0u64;
    let mut last_at = Instant::now();
    let mut rate = 0.0f64;
    let mut fetch_time = Duration::from_millis(1);
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
        buffer.refill_started();
        let now = Instant::now();
        let stale = buffer.evict_stale(now);
        if stale > 0 {
            inner.discarded(stale);
        }
        // The rate IDs are taken at, smoothed over the rounds.
        let taken = buffer.taken.load(Ordering::Relaxed);
        let elapsed = now.saturating_duration_since(last_at).as_secs_f64();
        if elapsed > 0.0 {
            let recent = (taken - last_taken) as f64 / elapsed;
            rate = if rate == 0.0 {
                recent
            } else {
                0.5 * rate + 0.5 * recent
            };
        }
        let idle = !woken && taken == last_taken;
        last_taken = taken;
        last_at = now;
        if idle {
            // Nobody took an ID since the last round: keep what is fresh, fetch nothing (an
            // idle client would otherwise fetch IDs only to discard them).
            continue;
        }
        buffer.resize(rate, fetch_time, inner.max_ids_per_call);
        loop {
            let count = buffer.wanted(inner.max_ids_per_call);
            if count == 0 || inner.closed.load(Ordering::Acquire) {
                break;
            }
            let _one = inner.filling.lock().await;
            let born = Instant::now();
            match inner.fetch(count).await {
                Ok(ids) => {
                    let took = born.elapsed();
                    fetch_time = (fetch_time + took) / 2;
                    buffer.push(ids.iter().map(|id| id.as_u64()).collect(), born);
                }
                // Every node failed for `give_up_after`: the takers see the same when they
                // find the buffer empty; try again on the next round.
                Err(_) => break,
            }
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
        // 1,000,000 IDs/s, 1 ms fetches: cover 27 ms = 27,000 IDs, plus a fetch of 4096.
        b.resize(1e6, Duration::from_millis(1), 4096);
        assert_eq!(b.marks(), (27_000, 31_096));
        // A slow taker: at least min_fetch, and at most what is used within max_age / 2.
        b.resize(10.0, Duration::from_millis(1), 4096);
        assert_eq!(b.marks(), (128, 256));
        // Short max_age: the cap wins over the rate.
        let b = Buffer::new(Prefetch::new().max_age(Duration::from_millis(4)));
        b.resize(1e6, Duration::from_millis(1), 4096);
        let (low, target) = b.marks();
        assert!(target <= 2_000 && low < target, "{low} {target}");
        assert_eq!(b.wanted(4096), 2_000);
    }
}

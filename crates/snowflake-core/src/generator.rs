//! The generator: many threads, one lock-free counter, never a repeated ID.
//!
//! # Algorithm
//!
//! The whole mutable state is one `AtomicU64`, `next`: the smallest (timestamp offset, sequence)
//! pair that may still be issued, packed as `offset << sequence_bits | sequence`. Packed this way
//! the pairs count upwards like one integer, and when the sequence of a millisecond is used up,
//! adding one carries into the next millisecond by itself.
//!
//! To issue, a thread reads the clock (`now`), takes `candidate = max(next, now << sequence_bits)`
//! and tries to move `next` past it with one compare-and-swap:
//! - `candidate` lies in `now`'s millisecond: issue it (a batch takes as many of the remaining
//!   sequences of that millisecond as it asked for);
//! - `candidate` lies after `now`, and the last issued ID lies in `now`'s millisecond: the
//!   sequence is exhausted, so spin on the clock until the next millisecond;
//! - the last issued ID lies after `now`: the clock moved backwards; refuse, saying by how much,
//!   without touching `next`: neither consuming nor resetting the sequence.
//!
//! Every issued ID comes from a successful compare-and-swap that moved `next` strictly past it, so
//! IDs are unique and, in the order the swaps succeed, strictly increasing.

use crate::clock::{Clock, SystemClock};
use crate::error::{Error, Field};
use crate::id::SnowflakeId;
use crate::layout::Layout;
use crate::sync::{AtomicU64, Ordering, spin_loop};
use std::fmt;

/// The `next` counter on a cache line of its own: it is written by every issuing thread, the
/// rest of the generator is read-only after construction.
#[repr(align(128))]
struct Padded(AtomicU64);

/// A thread-safe, lock-free Snowflake ID generator for one node (datacenter, worker).
///
/// Share one generator per node (behind an `Arc` or a `static`); two generators with the same
/// pair issue colliding IDs.
///
/// ```
/// use snowflake_core::Generator;
/// let generator = Generator::new(7, 13)?;
/// let a = generator.next_id()?;
/// let b = generator.next_id()?;
/// assert!(b > a);
/// assert_eq!((b.datacenter_id(), b.worker_id()), (7, 13));
/// # Ok::<(), snowflake_core::Error>(())
/// ```
pub struct Generator<C = SystemClock> {
    /// The next free (offset, sequence) pair, packed; see the module docs.
    next: Padded,
    /// Where the fields go; copied apart below so the hot path does no layout arithmetic.
    layout: Layout,
    /// The datacenter and worker ids already shifted into place.
    node_bits: u64,
    datacenter_id: u64,
    worker_id: u64,
    sequence_bits: u32,
    sequence_mask: u64,
    timestamp_shift: u32,
    epoch_ms: u64,
    max_offset_ms: u64,
    /// How far the clock may fall behind and be waited out by [`Generator::next_id`]
    /// rather than refused; 0 refuses every regression.
    max_backwards_wait_ms: u64,
    /// The last timestamp (Unix ms) IDs may be issued at; `u64::MAX` when unlimited. A service
    /// raises it only after durably reserving the time up to it, and sets it to 0 to stop all
    /// issuing (while it cannot prove it holds its node identity, or is shutting down).
    limit_ms: AtomicU64,
    /// The only source of time.
    clock: C,
    /// Counters for metrics; touched only on slow paths.
    exhaustion_waits: AtomicU64,
    backwards_refusals: AtomicU64,
    backwards_waits: AtomicU64,
}

impl<C> fmt::Debug for Generator<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Generator")
            .field("layout", &self.layout)
            .field("datacenter_id", &self.datacenter_id)
            .field("worker_id", &self.worker_id)
            .field("max_backwards_wait_ms", &self.max_backwards_wait_ms)
            .field("last_issued_ms", &self.last_issued_ms())
            .finish_non_exhaustive()
    }
}

/// A run of consecutive IDs reserved in one step, all in one millisecond.
///
/// ```
/// use snowflake_core::Generator;
/// let generator = Generator::new(0, 0)?;
/// let batch = generator.next_batch(100)?;
/// assert!(batch.len() >= 1 && batch.len() <= 100);
/// let ids: Vec<_> = batch.into_iter().collect();
/// assert!(ids.windows(2).all(|w| w[1].as_u64() == w[0].as_u64() + 1));
/// # Ok::<(), snowflake_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IdBatch {
    first: u64,
    len: u64,
}

impl IdBatch {
    /// The first (smallest) ID.
    pub const fn first(&self) -> SnowflakeId {
        SnowflakeId::from_raw(self.first)
    }

    /// The last (largest) ID.
    pub const fn last(&self) -> SnowflakeId {
        SnowflakeId::from_raw(self.first + self.len - 1)
    }

    /// How many IDs (at least 1).
    pub const fn len(&self) -> u64 {
        self.len
    }

    /// Always false: a batch holds at least one ID.
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl IntoIterator for IdBatch {
    type Item = SnowflakeId;
    type IntoIter = IdBatchIter;

    fn into_iter(self) -> IdBatchIter {
        IdBatchIter {
            next: self.first,
            end: self.first + self.len,
        }
    }
}

/// The IDs of an [`IdBatch`], in increasing order.
#[derive(Debug, Clone)]
pub struct IdBatchIter {
    next: u64,
    end: u64,
}

impl Iterator for IdBatchIter {
    type Item = SnowflakeId;

    fn next(&mut self) -> Option<SnowflakeId> {
        if self.next < self.end {
            let id = SnowflakeId::from_raw(self.next);
            self.next += 1;
            Some(id)
        } else {
            None
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = usize::try_from(self.end - self.next).unwrap_or(usize::MAX);
        (n, Some(n))
    }
}

impl ExactSizeIterator for IdBatchIter {}

/// Counters of the generator's slow paths, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GeneratorStats {
    /// How often a millisecond's sequence ran out and the generator waited for the next one.
    pub exhaustion_waits: u64,
    /// How often a request was refused because the clock was behind the last issued ID.
    pub clock_backwards_refusals: u64,
    /// How often a small clock regression was waited out instead of refused.
    pub clock_backwards_waits: u64,
}

/// Configures a [`Generator`]; every setting has a default (Twitter's layout, node 0/0, the
/// system clock, refuse every clock regression, nothing issued before).
#[derive(Debug, Clone)]
pub struct GeneratorBuilder<C = SystemClock> {
    layout: Layout,
    datacenter_id: u64,
    worker_id: u64,
    clock: C,
    max_backwards_wait_ms: u64,
    resume_after_ms: Option<u64>,
    issue_limit_ms: u64,
}

impl Default for GeneratorBuilder<SystemClock> {
    fn default() -> Self {
        GeneratorBuilder {
            layout: Layout::TWITTER,
            datacenter_id: 0,
            worker_id: 0,
            clock: SystemClock,
            max_backwards_wait_ms: 0,
            resume_after_ms: None,
            issue_limit_ms: u64::MAX,
        }
    }
}

impl<C: Clock> GeneratorBuilder<C> {
    /// The layout (default: [`Layout::TWITTER`]).
    pub fn layout(mut self, layout: Layout) -> Self {
        self.layout = layout;
        self
    }

    /// The datacenter id (default 0); checked against the layout by [`GeneratorBuilder::build`].
    pub fn datacenter_id(mut self, datacenter_id: u64) -> Self {
        self.datacenter_id = datacenter_id;
        self
    }

    /// The worker id (default 0); checked against the layout by [`GeneratorBuilder::build`].
    pub fn worker_id(mut self, worker_id: u64) -> Self {
        self.worker_id = worker_id;
        self
    }

    /// The clock (default: [`SystemClock`]).
    pub fn clock<C2: Clock>(self, clock: C2) -> GeneratorBuilder<C2> {
        GeneratorBuilder {
            layout: self.layout,
            datacenter_id: self.datacenter_id,
            worker_id: self.worker_id,
            clock,
            max_backwards_wait_ms: self.max_backwards_wait_ms,
            resume_after_ms: self.resume_after_ms,
            issue_limit_ms: self.issue_limit_ms,
        }
    }

    /// Lets [`Generator::next_id`] and [`Generator::next_batch`] wait out a clock regression of
    /// at most this many milliseconds instead of refusing (default 0: refuse every regression).
    pub fn max_backwards_wait_ms(mut self, ms: u64) -> Self {
        self.max_backwards_wait_ms = ms;
        self
    }

    /// Never issue an ID whose timestamp is at or below `timestamp_ms` (Unix ms): how a restarted
    /// node resumes above what it may have issued before.
    pub fn resume_after_ms(mut self, timestamp_ms: u64) -> Self {
        self.resume_after_ms = Some(timestamp_ms);
        self
    }

    /// Never issue an ID whose timestamp is above `timestamp_ms` (Unix ms) until
    /// [`Generator::set_issue_limit_ms`] raises the limit (default: unlimited). `0` starts the
    /// generator closed.
    pub fn issue_limit_ms(mut self, timestamp_ms: u64) -> Self {
        self.issue_limit_ms = timestamp_ms;
        self
    }

    /// Checks the settings and builds the generator.
    pub fn build(self) -> Result<Generator<C>, Error> {
        let layout = self.layout;
        let datacenter_id = layout.check(Field::DatacenterId, self.datacenter_id)?;
        let worker_id = layout.check(Field::WorkerId, self.worker_id)?;
        let sequence_bits = u32::from(layout.bits().sequence);
        let next = match self.resume_after_ms {
            Some(ms) if ms >= layout.epoch_ms() => {
                let offset = layout.check(Field::Timestamp, ms)? - layout.epoch_ms();
                // The first free pair is the next millisecond's sequence 0.
                (offset + 1) << sequence_bits
            }
            _ => 0,
        };
        Ok(Generator {
            next: Padded(AtomicU64::new(next)),
            layout,
            node_bits: (datacenter_id << layout.datacenter_shift())
                | (worker_id << layout.worker_shift()),
            datacenter_id,
            worker_id,
            sequence_bits,
            sequence_mask: layout.max_sequence(),
            timestamp_shift: layout.timestamp_shift(),
            epoch_ms: layout.epoch_ms(),
            max_offset_ms: layout.max_offset_ms(),
            max_backwards_wait_ms: self.max_backwards_wait_ms,
            limit_ms: AtomicU64::new(self.issue_limit_ms),
            clock: self.clock,
            exhaustion_waits: AtomicU64::new(0),
            backwards_refusals: AtomicU64::new(0),
            backwards_waits: AtomicU64::new(0),
        })
    }
}

impl Generator<SystemClock> {
    /// A generator for node (`datacenter_id`, `worker_id`) with Twitter's layout and the system
    /// clock; fails if either id is outside 0..=31.
    pub fn new(datacenter_id: u64, worker_id: u64) -> Result<Self, Error> {
        Generator::builder()
            .datacenter_id(datacenter_id)
            .worker_id(worker_id)
            .build()
    }

    /// A builder for every other setting.
    pub fn builder() -> GeneratorBuilder<SystemClock> {
        GeneratorBuilder::default()
    }
}

impl<C> Generator<C> {
    /// The timestamp (Unix ms) of the last issued ID, or of the point a resumed generator must
    /// stay above; `None` if nothing has been issued and nothing was resumed from.
    pub fn last_issued_ms(&self) -> Option<u64> {
        let next = self.next.0.load(Ordering::Acquire);
        (next > 0).then(|| ((next - 1) >> self.sequence_bits) + self.epoch_ms)
    }

    /// From now on, never issue an ID whose timestamp is at or below `timestamp_ms` (Unix ms):
    /// what [`GeneratorBuilder::resume_after_ms`] does, for a generator already running (a node
    /// that re-claims its pair learns a new mark). Never moves the generator back; a timestamp
    /// outside the layout is an error and changes nothing.
    pub fn resume_after(&self, timestamp_ms: u64) -> Result<(), Error> {
        if timestamp_ms < self.epoch_ms {
            return Ok(());
        }
        let offset = self.layout.check(Field::Timestamp, timestamp_ms)? - self.epoch_ms;
        // The packed state only grows, so the larger of the two is the later point.
        self.next
            .0
            .fetch_max((offset + 1) << self.sequence_bits, Ordering::AcqRel);
        Ok(())
    }

    /// The last timestamp (Unix ms) IDs may be issued at (`u64::MAX`: unlimited).
    pub fn issue_limit_ms(&self) -> u64 {
        self.limit_ms.load(Ordering::Acquire)
    }

    /// Sets the last timestamp (Unix ms) IDs may be issued at; 0 stops all issuing.
    ///
    /// The limit is loaded after each clock read, so once this returns, any ID issued later by
    /// a thread that passed the old limit carries a timestamp read before this call: lowering
    /// the limit and then reading the clock bounds every ID issued under the old limit.
    ///
    /// ```
    /// use snowflake_core::{Error, Generator, ManualClock};
    /// let clock = ManualClock::new(1_700_000_000_000);
    /// let generator = Generator::builder().clock(clock.clone()).issue_limit_ms(1_700_000_000_000).build()?;
    /// assert!(generator.next_id().is_ok());
    /// clock.advance_ms(1);
    /// assert!(matches!(generator.next_id(), Err(Error::PastIssueLimit { .. })));
    /// generator.set_issue_limit_ms(1_700_000_005_000);
    /// assert!(generator.next_id().is_ok());
    /// # Ok::<(), snowflake_core::Error>(())
    /// ```
    pub fn set_issue_limit_ms(&self, timestamp_ms: u64) {
        self.limit_ms.store(timestamp_ms, Ordering::SeqCst);
    }

    /// The layout.
    pub const fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The datacenter id.
    pub const fn datacenter_id(&self) -> u64 {
        self.datacenter_id
    }

    /// The worker id.
    pub const fn worker_id(&self) -> u64 {
        self.worker_id
    }

    /// The clock.
    pub const fn clock(&self) -> &C {
        &self.clock
    }

    /// The slow-path counters.
    pub fn stats(&self) -> GeneratorStats {
        GeneratorStats {
            exhaustion_waits: self.exhaustion_waits.load(Ordering::Relaxed),
            clock_backwards_refusals: self.backwards_refusals.load(Ordering::Relaxed),
            clock_backwards_waits: self.backwards_waits.load(Ordering::Relaxed),
        }
    }
}

/// Why a reservation attempt did not produce IDs.
enum Refusal {
    /// (Only when asked not to wait.) The current millisecond has no more IDs to give.
    Full,
    Backwards {
        behind_ms: u64,
        last_ms: u64,
        now_ms: u64,
    },
    Other(Error),
}

impl<C: Clock> Generator<C> {
    /// The next ID. Waits for the next millisecond if this one's sequence is used up; waits out
    /// a clock regression up to the configured bound, and otherwise refuses it with
    /// [`Error::ClockMovedBackwards`].
    #[inline]
    pub fn next_id(&self) -> Result<SnowflakeId, Error> {
        self.next_batch(1).map(|batch| batch.first())
    }

    /// Like [`Generator::next_id`], but refuses every clock regression at once (never sleeps for
    /// one), so callers that must not block, such as an async server, decide how to wait.
    #[inline]
    pub fn try_next_id(&self) -> Result<SnowflakeId, Error> {
        self.try_next_batch(1).map(|batch| batch.first())
    }

    /// Reserves, in one step, up to `max` consecutive IDs of one millisecond: as many as are left
    /// in the current millisecond, at most `max`, at least one. `max` must be in
    /// `1..=`[`Layout::max_ids_per_ms`] (4096 for Twitter's layout). Clock regressions are
    /// handled as in [`Generator::next_id`].
    pub fn next_batch(&self, max: u64) -> Result<IdBatch, Error> {
        let max = self.check_batch_size(max)?;
        let mut waited_ms = 0u64;
        loop {
            match self.reserve(max, 0, 1, true) {
                Ok(batch) => return Ok(batch),
                Err(Refusal::Other(e)) => return Err(e),
                Err(Refusal::Full) => unreachable!("reserve waits when asked to"),
                Err(Refusal::Backwards {
                    behind_ms,
                    last_ms,
                    now_ms,
                }) => {
                    let budget = self.max_backwards_wait_ms.saturating_sub(waited_ms);
                    if behind_ms > budget {
                        return Err(self.refuse(behind_ms, last_ms, now_ms));
                    }
                    self.backwards_waits.fetch_add(1, Ordering::Relaxed);
                    self.clock.sleep_ms(behind_ms);
                    waited_ms += behind_ms;
                }
            }
        }
    }

    /// Like [`Generator::next_batch`], but refuses every clock regression at once.
    pub fn try_next_batch(&self, max: u64) -> Result<IdBatch, Error> {
        let max = self.check_batch_size(max)?;
        match self.reserve(max, 0, 1, true) {
            Ok(batch) => Ok(batch),
            Err(Refusal::Other(e)) => Err(e),
            Err(Refusal::Full) => unreachable!("reserve waits when asked to"),
            Err(Refusal::Backwards {
                behind_ms,
                last_ms,
                now_ms,
            }) => Err(self.refuse(behind_ms, last_ms, now_ms)),
        }
    }

    /// Takes up to `max` IDs of the current millisecond while leaving at least `leave` of its
    /// sequences to other callers, and never waits: `Ok(None)` when no more than `leave` are left
    /// (the caller tries again in the next millisecond). A bulk issuer calls this so that a
    /// large request cannot starve small ones: `leave` is what every millisecond keeps for them.
    /// `max` must be in `1..=`[`Layout::max_ids_per_ms`]; `leave` is capped one below that.
    /// Clock regressions are refused at once, as in [`Generator::try_next_batch`].
    pub fn try_take_batch(&self, max: u64, leave: u64) -> Result<Option<IdBatch>, Error> {
        let max = self.check_batch_size(max)?;
        let leave = leave.min(self.layout.max_ids_per_ms() - 1);
        match self.reserve(max, leave, 1, false) {
            Ok(batch) => Ok(Some(batch)),
            Err(Refusal::Full) => Ok(None),
            Err(Refusal::Other(e)) => Err(e),
            Err(Refusal::Backwards {
                behind_ms,
                last_ms,
                now_ms,
            }) => Err(self.refuse(behind_ms, last_ms, now_ms)),
        }
    }

    /// Takes exactly `count` consecutive IDs of the current millisecond, and never waits:
    /// `Ok(None)` when it has fewer than `count` left (the caller tries again in the next
    /// millisecond). So the caller owns the whole range `[first, first + count)`, as a Redis
    /// `INCRBY` caller does. `count` must be in `1..=`[`Layout::max_ids_per_ms`]. Clock
    /// regressions are refused at once, as in [`Generator::try_next_batch`].
    pub fn try_take_exact(&self, count: u64) -> Result<Option<IdBatch>, Error> {
        let count = self.check_batch_size(count)?;
        match self.reserve(count, 0, count, false) {
            Ok(batch) => Ok(Some(batch)),
            Err(Refusal::Full) => Ok(None),
            Err(Refusal::Other(e)) => Err(e),
            Err(Refusal::Backwards {
                behind_ms,
                last_ms,
                now_ms,
            }) => Err(self.refuse(behind_ms, last_ms, now_ms)),
        }
    }

    /// Appends `count` fresh IDs to `out`, in increasing order, reserving them a millisecond's
    /// worth at a time. On an error, the IDs appended so far stay in `out`, all valid and unique.
    pub fn fill(&self, out: &mut Vec<SnowflakeId>, count: usize) -> Result<(), Error> {
        out.reserve(count);
        let mut left = count as u64;
        let per_ms = self.layout.max_ids_per_ms();
        while left > 0 {
            let batch = self.next_batch(left.min(per_ms))?;
            out.extend(batch);
            left -= batch.len();
        }
        Ok(())
    }

    /// `count` fresh IDs in increasing order (see [`Generator::fill`]).
    pub fn next_ids(&self, count: usize) -> Result<Vec<SnowflakeId>, Error> {
        let mut out = Vec::new();
        self.fill(&mut out, count)?;
        Ok(out)
    }

    fn check_batch_size(&self, max: u64) -> Result<u64, Error> {
        let limit = self.layout.max_ids_per_ms();
        if (1..=limit).contains(&max) {
            Ok(max)
        } else {
            Err(Error::OutOfRange {
                field: Field::Count,
                found: max.to_string(),
                min: 1,
                max: limit,
            })
        }
    }

    fn refuse(&self, behind_ms: u64, last_ms: u64, now_ms: u64) -> Error {
        self.backwards_refusals.fetch_add(1, Ordering::Relaxed);
        Error::ClockMovedBackwards {
            behind_ms,
            last_ms,
            now_ms,
        }
    }

    /// Milliseconds since the epoch for a clock reading, or why the layout cannot express it.
    #[inline]
    fn offset_of(&self, now_ms: u64) -> Result<u64, Error> {
        let Some(offset) = now_ms.checked_sub(self.epoch_ms) else {
            return Err(Error::ClockBeforeEpoch {
                now_ms,
                epoch_ms: self.epoch_ms,
            });
        };
        if offset > self.max_offset_ms {
            return Err(Error::LayoutExhausted {
                now_ms,
                max_ms: self.epoch_ms + self.max_offset_ms,
            });
        }
        Ok(offset)
    }

    /// The ID for a packed (offset, sequence) pair.
    #[inline]
    const fn compose(&self, packed: u64) -> u64 {
        ((packed >> self.sequence_bits) << self.timestamp_shift)
            | self.node_bits
            | (packed & self.sequence_mask)
    }

    /// One attempt to reserve up to `max` IDs (1 ≤ max ≤ ids per ms); the heart of the
    /// generator (see the module docs). `leave` sequences of the millisecond stay for others
    /// (`leave < ids per ms`); with `wait` false, a millisecond that has no more to give is
    /// [`Refusal::Full`] instead of a spin to the next one, and so is one with fewer than `min`
    /// left (after `leave`).
    #[inline]
    fn reserve(&self, max: u64, leave: u64, min: u64, wait: bool) -> Result<IdBatch, Refusal> {
        let shift = self.sequence_bits;
        let mut next = self.next.0.load(Ordering::Acquire);
        let mut now_ms = self.clock.now_ms();
        // Whether `now_ms` was read after `next` was last loaded: a reading older than `next`
        // could make another thread's fresh millisecond look like a clock regression.
        let mut fresh = true;
        loop {
            // Loaded after the clock read; see `set_issue_limit_ms`.
            let limit_ms = self.limit_ms.load(Ordering::SeqCst);
            if now_ms > limit_ms {
                return Err(Refusal::Other(Error::PastIssueLimit { now_ms, limit_ms }));
            }
            let now_offset = self.offset_of(now_ms).map_err(Refusal::Other)?;
            let candidate = next.max(now_offset << shift);
            if candidate >> shift != now_offset {
                // `next` is past the current millisecond, so something was issued at or after
                // it; `next > 0` here, and the last issued pair is `next - 1`.
                if !fresh {
                    now_ms = self.clock.now_ms();
                    fresh = true;
                    continue;
                }
                let last_offset = (next - 1) >> shift;
                if last_offset > now_offset {
                    return Err(Refusal::Backwards {
                        behind_ms: last_offset - now_offset,
                        last_ms: last_offset + self.epoch_ms,
                        now_ms,
                    });
                }
                if !wait {
                    return Err(Refusal::Full);
                }
                // This millisecond's sequence is used up: wait for the clock to move on.
                self.exhaustion_waits.fetch_add(1, Ordering::Relaxed);
                now_ms = self.wait_for_change(now_ms);
                next = self.next.0.load(Ordering::Acquire);
                fresh = false;
                continue;
            }
            let room = ((now_offset + 1) << shift) - candidate;
            if room <= leave || room - leave < min {
                // (Only bulk and exact callers leave anything or need more than one, and they
                // never wait.)
                return Err(Refusal::Full);
            }
            let take = max.min(room - leave);
            match self.next.0.compare_exchange_weak(
                next,
                candidate + take,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    return Ok(IdBatch {
                        first: self.compose(candidate),
                        len: take,
                    });
                }
                Err(actual) => {
                    next = actual;
                    fresh = false;
                }
            }
        }
    }

    /// Spins until the clock reads something other than `now_ms`, and returns that reading.
    #[cold]
    fn wait_for_change(&self, now_ms: u64) -> u64 {
        loop {
            spin_loop();
            let later = self.clock.now_ms();
            if later != now_ms {
                return later;
            }
        }
    }
}

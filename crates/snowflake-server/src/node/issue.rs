//! The issue path: counts checked, IDs taken from the generator a millisecond at a time (in
//! bulk, leaving a share of each millisecond to other requests), a clock regression waited
//! out, and every refusal explained.

use super::readiness::{Phase, fence_reason};
use super::{IssueError, Node, Protocol};
use crate::clock_trust::{Reading, Step};
use prometheus_client::metrics::counter::Counter;
use snowflake_core::{Clock, Error as CoreError, IdBatch, format_unix_ms};
use std::time::Duration;
use tokio::time::Instant;

/// How many on-demand reservations one request may wait for before it is refused.
const MAX_RESERVATIONS_PER_REQUEST: u32 = 3;

/// A request for more than one millisecond's worth of IDs takes at most this share of each
/// millisecond's sequence space, as 1/`BULK_LEAVES_ONE_IN`: the rest stays for other requests,
/// so that maximum batches back to back do not make single IDs wait for the next millisecond.
const BULK_LEAVES_ONE_IN: u64 = 4;

/// Below this many IDs per millisecond (Twitter's 4,096), a layout's sequence, not the work of
/// formatting them, bounds a batch (js-safe: 64): bulk requests are woken as each millisecond
/// begins (by the node's pacer) and leave a quarter of a millisecond only while other requests
/// are waiting for one.
pub(super) const SMALL_LAYOUT_IDS_PER_MS: u64 = 4096;

/// Why [`Node::issue_now`] issued nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotNow {
    /// Refused; the error says why.
    Refused(IssueError),
    /// The clock is a little behind: wait this many milliseconds and try again.
    Wait {
        /// How long to wait.
        ms: u64,
    },
    /// The clock has run past the reservation (it jumped forward): await
    /// [`Node::reserve_now`] and try again.
    Reserve,
}

/// How [`Node::issue_within_ms`] takes from a millisecond.
#[derive(Debug, Clone, Copy)]
enum Take {
    /// What it has, up to the count, waiting for the next one when it has none.
    All,
    /// In bulk: what it has beyond this many, without waiting.
    Leaving(u64),
    /// Exactly the count, or none.
    Exact,
}

impl Node {
    /// Parses a requested count: decimal, `1..=max_batch`.
    pub fn parse_count(&self, text: &str) -> Result<u64, IssueError> {
        snowflake_core::parse_count(text, self.max_batch)
            .map_err(|e| IssueError::BadRequest(e.to_string()))
    }

    /// Checks a requested count given as a number.
    pub fn check_count(&self, count: u64) -> Result<u64, IssueError> {
        if (1..=self.max_batch).contains(&count) {
            Ok(count)
        } else {
            Err(IssueError::BadRequest(format!(
                "invalid count: expected 1..={}, found {count}",
                self.max_batch
            )))
        }
    }

    /// Issues `count` IDs (already checked against `max_batch`), as runs of consecutive IDs in
    /// increasing order. A clock regression within `--max-backwards-wait-ms` is waited out
    /// without blocking a thread; anything else that stops the generator is explained.
    ///
    /// A count above one millisecond's worth is issued in bulk: at most three quarters of each
    /// millisecond's sequence space, yielding the thread in between and within the request
    /// timeout. A maximum batch (a quarter of a second of the layout's sequence space at full
    /// speed) never holds a runtime thread, never spins on one for the next millisecond, and
    /// leaves a quarter of every millisecond to the requests that arrive meanwhile.
    pub async fn issue(&self, protocol: Protocol, count: u64) -> Result<Vec<IdBatch>, IssueError> {
        let per_ms = self.layout.max_ids_per_ms();
        if count <= per_ms {
            return self.issue_within_ms(protocol, count, Take::All).await;
        }
        // In bulk: a part of each millisecond at a time (see `BULK_LEAVES_ONE_IN`), the thread
        // yielded in between, all within the request timeout.
        let quarter = per_ms / BULK_LEAVES_ONE_IN;
        let small = per_ms < SMALL_LAYOUT_IDS_PER_MS;
        // Under a small layout, the pacer's thread takes each millisecond's IDs for the request
        // as the millisecond begins (see `pacer`).
        if small && let Some(pacer) = &self.pacer {
            return self.issue_paced(pacer, protocol, count).await;
        }
        let generator = &self.shared.generator;
        let mut spins_seen = generator.stats().exhaustion_waits;
        let deadline = Instant::now() + self.request_timeout;
        let mut batches = Vec::with_capacity(usize::try_from(count / per_ms + 2).unwrap_or(2));
        let mut left = count;
        while left > 0 {
            if Instant::now() >= deadline {
                return Err(self.timed_out());
            }
            // Under a small layout the millisecond's sequence, not the work, bounds a batch: it
            // takes the whole millisecond unless a request had to wait for one since its last
            // take (others are asking: leave them their quarter).
            let leave = if small {
                let spins = generator.stats().exhaustion_waits;
                let others_waited = spins != spins_seen;
                spins_seen = spins;
                if others_waited { quarter } else { 0 }
            } else {
                quarter
            };
            let chunk = self
                .issue_within_ms(protocol, left.min(per_ms), Take::Leaving(leave))
                .await?;
            left -= chunk.iter().map(IdBatch::len).sum::<u64>();
            batches.extend(chunk);
            tokio::task::yield_now().await;
        }
        Ok(batches)
    }

    /// [`Node::issue`] under a small layout: the pacer's thread takes the IDs, a millisecond
    /// at a time; a refusal of the generator comes back here and is handled as on the other
    /// paths (a small clock regression waited out, a reservation awaited, anything else
    /// answered), within the request timeout. Dropping the future (the client is gone) or the
    /// timeout ends the pacer's job before its next take.
    async fn issue_paced(
        &self,
        pacer: &super::pacer::Pacer,
        protocol: Protocol,
        count: u64,
    ) -> Result<Vec<IdBatch>, IssueError> {
        let per_ms = self.layout.max_ids_per_ms();
        let deadline = Instant::now() + self.request_timeout;
        let mut batches = Vec::with_capacity(usize::try_from(count / per_ms + 2).unwrap_or(2));
        let mut left = count;
        let mut waited_ms = 0;
        let mut reservations = 0;
        loop {
            let mut take = self.paced_take(protocol);
            // What the current millisecond has left is taken here at once: the pacer's thread
            // may be asleep until the next one.
            let served = match take(left.min(per_ms), false) {
                Ok(Some(batch)) if batch.len() == left => super::pacer::Served {
                    batches: vec![batch],
                    error: None,
                },
                Err(err) => super::pacer::Served {
                    batches: Vec::new(),
                    error: Some(err),
                },
                first => {
                    let first = first.ok().flatten();
                    let rest = left - first.as_ref().map_or(0, IdBatch::len);
                    batches.extend(first);
                    left = rest;
                    let (job, served) = super::pacer::Job::new(take, left, per_ms);
                    pacer.serve(job);
                    match tokio::time::timeout_at(deadline, served).await {
                        Ok(Ok(served)) => served,
                        // The pacer is gone: the node is being dropped.
                        Ok(Err(_dropped)) => return Err(unavailable("shutting down", 1)),
                        Err(_elapsed) => return Err(self.timed_out()),
                    }
                }
            };
            let taken: u64 = served.batches.iter().map(IdBatch::len).sum();
            left -= taken.min(left);
            batches.extend(served.batches);
            let Some(err) = served.error else {
                return Ok(batches);
            };
            if taken > 0 {
                // As on the other paths, the bounds hold per millisecond's worth taken.
                waited_ms = 0;
                reservations = 0;
            }
            match self.not_now(err, waited_ms) {
                NotNow::Refused(err) => return Err(err),
                NotNow::Wait { ms } => {
                    let wake = Instant::now() + Duration::from_millis(ms);
                    if wake > deadline {
                        return Err(self.timed_out());
                    }
                    tokio::time::sleep_until(wake).await;
                    waited_ms += ms;
                }
                NotNow::Reserve if reservations < MAX_RESERVATIONS_PER_REQUEST => {
                    if tokio::time::timeout_at(deadline, self.reserve_now())
                        .await
                        .is_err()
                    {
                        return Err(self.timed_out());
                    }
                    reservations += 1;
                }
                NotNow::Reserve => {
                    return Err(not_reserved(self.shared.generator.issue_limit_ms()));
                }
            }
        }
    }

    /// The pacer's take for one bulk request: what [`Node::take_now`] does (the generator, the
    /// metrics), leaving a quarter of the millisecond while other requests wait for one.
    fn paced_take(&self, protocol: Protocol) -> super::pacer::TakeFn {
        let shared = std::sync::Arc::clone(&self.shared);
        let issued = self.metrics.ids_issued_counter(protocol);
        let quarter = self.layout.max_ids_per_ms() / BULK_LEAVES_ONE_IN;
        let mut spins_seen = shared.generator.stats().exhaustion_waits;
        Box::new(move |max, others_wait| {
            let spins = shared.generator.stats().exhaustion_waits;
            let leave = if others_wait || spins != spins_seen {
                quarter
            } else {
                0
            };
            spins_seen = spins;
            let taken = shared.generator.try_take_batch(max, leave);
            if let Ok(Some(batch)) = &taken {
                issued.inc_by(batch.len());
            }
            taken
        })
    }

    /// [`Node::issue`] for at most one millisecond's worth of IDs; in bulk (`leave` given), at
    /// most what one millisecond has beyond `leave`, waiting (yielding) for the next
    /// millisecond when it has no more.
    /// Exactly `count` (at most one millisecond's worth) consecutive IDs of one millisecond,
    /// as one run: what Redis's `INCRBY` promises (the caller owns the range). When the current
    /// millisecond has fewer left, it sleeps for the next one, within the request timeout.
    pub async fn issue_exact(&self, protocol: Protocol, count: u64) -> Result<IdBatch, IssueError> {
        let per_ms = self.layout.max_ids_per_ms();
        if !(1..=per_ms).contains(&count) {
            return Err(IssueError::BadRequest(format!(
                "invalid count: expected 1..={per_ms}, found {count}"
            )));
        }
        let batches = self.issue_within_ms(protocol, count, Take::Exact).await?;
        // One run by construction (`Generator::try_take_exact`).
        batches.into_iter().next().ok_or_else(|| self.timed_out())
    }

    async fn issue_within_ms(
        &self,
        protocol: Protocol,
        count: u64,
        take: Take,
    ) -> Result<Vec<IdBatch>, IssueError> {
        self.issue_within_ms_after(protocol, count, take, None)
            .await
    }

    /// [`Node::issue_within_ms`], whose first attempt was made already when `first` is given
    /// (it said what to do: wait, or reserve).
    async fn issue_within_ms_after(
        &self,
        protocol: Protocol,
        count: u64,
        take: Take,
        mut first: Option<NotNow>,
    ) -> Result<Vec<IdBatch>, IssueError> {
        let mut waited_ms = 0;
        let mut reservations = 0;
        // Set on the first slow path, so the fast path never touches a timer.
        let mut deadline = None;
        loop {
            let issued = match (first.take(), take) {
                (Some(not_now), _) => Err(not_now),
                (None, Take::All) => self.issue_now(protocol, count, waited_ms),
                (None, Take::Leaving(leave)) => self.take_now(protocol, count, leave, waited_ms),
                (None, Take::Exact) => self.take_exact_now(protocol, count, waited_ms),
            };
            match issued {
                // (Only in bulk or exact: this millisecond has not enough to give.)
                Ok(batches) if batches.is_empty() => {
                    let deadline =
                        *deadline.get_or_insert_with(|| Instant::now() + self.request_timeout);
                    // Sleep for the next millisecond rather than spin for it: a runtime
                    // thread spinning on the clock takes a whole core from the other requests
                    // (and from their clients) on a small machine.
                    let seen_ms = self.clock.now_ms();
                    // Under a small layout, the pacer wakes the request as the millisecond
                    // begins, so that every millisecond's IDs are taken (see `pacer`).
                    if let Some(pacer) = &self.pacer {
                        let next = pacer.next_ms(self.clock.as_ref(), seen_ms);
                        if tokio::time::timeout_at(deadline, next).await.is_err() {
                            return Err(self.timed_out());
                        }
                        continue;
                    }
                    // Otherwise (Twitter's layout, or no thread for a pacer) on the runtime's
                    // timer; under a small layout at its next tick rather than a whole
                    // millisecond later, so that most milliseconds get a take.
                    let pause = if self.layout.max_ids_per_ms() < SMALL_LAYOUT_IDS_PER_MS {
                        Duration::from_micros(1)
                    } else {
                        Duration::from_millis(1)
                    };
                    while self.clock.now_ms() == seen_ms {
                        if Instant::now() >= deadline {
                            return Err(self.timed_out());
                        }
                        tokio::time::sleep(pause).await;
                    }
                }
                Ok(batches) => return Ok(batches),
                Err(NotNow::Refused(err)) => return Err(err),
                Err(NotNow::Wait { ms }) => {
                    let deadline =
                        *deadline.get_or_insert_with(|| Instant::now() + self.request_timeout);
                    let wake = Instant::now() + Duration::from_millis(ms);
                    if wake > deadline {
                        return Err(self.timed_out());
                    }
                    tokio::time::sleep_until(wake).await;
                    waited_ms += ms;
                }
                Err(NotNow::Reserve) if reservations < MAX_RESERVATIONS_PER_REQUEST => {
                    let deadline =
                        *deadline.get_or_insert_with(|| Instant::now() + self.request_timeout);
                    if tokio::time::timeout_at(deadline, self.reserve_now())
                        .await
                        .is_err()
                    {
                        return Err(self.timed_out());
                    }
                    reservations += 1;
                }
                Err(NotNow::Reserve) => {
                    return Err(not_reserved(self.shared.generator.issue_limit_ms()));
                }
            }
        }
    }

    fn timed_out(&self) -> IssueError {
        unavailable(
            format!(
                "request timed out after {} ms waiting for the clock or for the high-water mark to be persisted",
                self.request_timeout.as_millis()
            ),
            1,
        )
    }

    /// One attempt at [`Node::issue`] that never waits: the IDs, a refusal, or how long to
    /// wait before trying again (a clock regression within the configured bound, counting the
    /// `waited_ms` already spent on this request). For front ends whose handlers are synchronous.
    pub fn issue_now(
        &self,
        protocol: Protocol,
        count: u64,
        waited_ms: u64,
    ) -> Result<Vec<IdBatch>, NotNow> {
        let generator = &self.shared.generator;
        let per_ms = self.layout.max_ids_per_ms();
        let mut batches = Vec::with_capacity(usize::try_from(count / per_ms + 2).unwrap_or(2));
        let mut left = count;
        while left > 0 {
            match generator.try_next_batch(left.min(per_ms)) {
                Ok(batch) => {
                    left -= batch.len();
                    batches.push(batch);
                }
                Err(err) => return Err(self.not_now(err, waited_ms)),
            }
        }
        self.metrics.ids_issued(protocol, count);
        Ok(batches)
    }

    /// One ID, as [`Node::issue_now`] issues it (counted the same way), without a list.
    pub fn issue_one_now(&self, protocol: Protocol) -> Result<u64, NotNow> {
        match self.shared.generator.try_next_batch(1) {
            Ok(batch) => {
                self.metrics.ids_issued(protocol, 1);
                Ok(batch.first().as_u64())
            }
            Err(err) => Err(self.not_now(err, 0)),
        }
    }

    /// [`Node::issue_one_now`], counted on `issued` (a protocol's counter of IDs issued, looked
    /// up once by a caller that asks many times), the request having waited `waited_ms` for a
    /// lagging clock already (see [`Node::issue_now`]).
    pub fn issue_one_now_counted(&self, issued: &Counter, waited_ms: u64) -> Result<u64, NotNow> {
        match self.shared.generator.try_next_batch(1) {
            Ok(batch) => {
                issued.inc();
                Ok(batch.first().as_u64())
            }
            Err(err) => Err(self.not_now(err, waited_ms)),
        }
    }

    /// One ID after [`Node::issue_one_now`] said `not_now`: waits as [`Node::issue`] would have
    /// (a clock regression within the bound, a reservation), within the request timeout, and
    /// counts nothing twice.
    pub async fn issue_one_after(
        &self,
        protocol: Protocol,
        not_now: NotNow,
    ) -> Result<u64, IssueError> {
        let batches = self
            .issue_within_ms_after(protocol, 1, Take::All, Some(not_now))
            .await?;
        batches
            .first()
            .map(|batch| batch.first().as_u64())
            .ok_or_else(|| self.timed_out())
    }

    /// In bulk: up to `count` (at most one millisecond's worth) of what the current millisecond
    /// has beyond `leave`, without waiting; none (an empty list) when it has no more.
    fn take_now(
        &self,
        protocol: Protocol,
        count: u64,
        leave: u64,
        waited_ms: u64,
    ) -> Result<Vec<IdBatch>, NotNow> {
        match self.shared.generator.try_take_batch(count, leave) {
            Ok(Some(batch)) => {
                self.metrics.ids_issued(protocol, batch.len());
                Ok(vec![batch])
            }
            Ok(None) => Ok(Vec::new()),
            Err(err) => Err(self.not_now(err, waited_ms)),
        }
    }

    /// Exactly `count` IDs of the current millisecond, without waiting; none (an empty list)
    /// when it has fewer left.
    fn take_exact_now(
        &self,
        protocol: Protocol,
        count: u64,
        waited_ms: u64,
    ) -> Result<Vec<IdBatch>, NotNow> {
        match self.shared.generator.try_take_exact(count) {
            Ok(Some(batch)) => {
                self.metrics.ids_issued(protocol, batch.len());
                Ok(vec![batch])
            }
            Ok(None) => Ok(Vec::new()),
            Err(err) => Err(self.not_now(err, waited_ms)),
        }
    }

    /// What to do about the generator's refusal `err`, after waiting `waited_ms` already.
    fn not_now(&self, err: CoreError, waited_ms: u64) -> NotNow {
        match err {
            CoreError::ClockMovedBackwards { behind_ms, .. }
                if waited_ms + behind_ms <= self.max_backwards_wait_ms =>
            {
                self.metrics.clock_backwards_waits.inc();
                NotNow::Wait { ms: behind_ms }
            }
            CoreError::PastIssueLimit { now_ms, .. } => {
                if self.shared.status().clock_step.is_some()
                    && let Reading::Stepped(step) = self.check_trust()
                {
                    return NotNow::Refused(stepped(&step));
                }
                let status = self.shared.status();
                if now_ms > status.fence_limit_ms {
                    return NotNow::Refused(fenced(&fence_reason(&status)));
                }
                if status.phase == Phase::Ready {
                    return NotNow::Reserve;
                }
                drop(status);
                NotNow::Refused(self.refusal(CoreError::PastIssueLimit {
                    now_ms,
                    limit_ms: self.shared.generator.issue_limit_ms(),
                }))
            }
            err => NotNow::Refused(self.refusal(err)),
        }
    }

    /// Explains a generator error.
    fn refusal(&self, err: CoreError) -> IssueError {
        match err {
            CoreError::ClockMovedBackwards {
                behind_ms,
                last_ms,
                now_ms,
            } => {
                self.metrics.clock_backwards_refusals.inc();
                backwards(behind_ms, last_ms, now_ms)
            }
            CoreError::PastIssueLimit { .. } => {
                let phase = self.shared.status().phase.clone();
                self.phase_refusal(&phase)
            }
            other => IssueError::Unavailable {
                message: other.to_string(),
                retry_after_secs: 1,
            },
        }
    }

    pub(super) fn phase_refusal(&self, phase: &Phase) -> IssueError {
        let now_ms = self.clock.now_ms();
        match phase {
            Phase::Starting => {
                unavailable("starting: the first high-water mark is being persisted", 1)
            }
            Phase::WaitingForMark { mark_ms } => {
                let wait_ms = mark_ms.saturating_sub(now_ms) + 1;
                unavailable(
                    format!(
                        "restarted with the clock behind the persisted high-water mark: refusing to \
                         issue ids until the clock (now {now_ms}) passes {mark_ms} ({}), {wait_ms} ms from now",
                        format_unix_ms(*mark_ms)
                    ),
                    wait_ms.div_ceil(1000),
                )
            }
            Phase::Ready => not_reserved(self.shared.generator.issue_limit_ms()),
            Phase::PersistFailed { message } => unavailable(
                format!(
                    "cannot persist the high-water mark ahead of use ({message}); not issuing ids beyond it"
                ),
                1,
            ),
            Phase::ShuttingDown => unavailable("shutting down", 1),
        }
    }
}

fn unavailable(message: impl Into<String>, retry_after_secs: u64) -> IssueError {
    IssueError::Unavailable {
        message: message.into(),
        retry_after_secs: retry_after_secs.max(1),
    }
}

pub(super) fn backwards(behind_ms: u64, last_ms: u64, now_ms: u64) -> IssueError {
    unavailable(
        CoreError::ClockMovedBackwards {
            behind_ms,
            last_ms,
            now_ms,
        }
        .to_string(),
        behind_ms.div_ceil(1000),
    )
}

pub(super) fn not_reserved(limit_ms: u64) -> IssueError {
    unavailable(
        format!(
            "the clock has passed the persisted high-water mark {limit_ms}; waiting for the next \
             reservation to be written"
        ),
        1,
    )
}

pub(super) fn stepped(step: &Step) -> IssueError {
    unavailable(step.describe(), step.retry_after_secs())
}

pub(super) fn fenced(reason: &str) -> IssueError {
    unavailable(
        format!("this node cannot prove it still holds its worker id: {reason}"),
        1,
    )
}

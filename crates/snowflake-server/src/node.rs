//! The node: one generator shared by every front end, its restart-safety keeper, and the one
//! place where requests are validated and refusals are explained.

use crate::clock_trust::{ClockAnchor, ClockTrust, Reading, Step};
use crate::config::Config;
use crate::metrics::Metrics;
pub use crate::metrics::Protocol;
use crate::state::{MarkKind, StateDir, StateError, Stored};
use snowflake_core::{Clock, Error as CoreError, Generator, IdBatch, Layout, format_unix_ms};
use snowflake_fleet::{Coordinator, Fence, Fenced, FleetView, IssueLimit, Issuer, LeaseInfo};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

pub(crate) mod readiness;

use readiness::{Blocker, NodeShared, Phase, Status, fence_reason};

/// Why a request got no IDs; each front end maps this to its own status (HTTP 400/503, gRPC
/// `INVALID_ARGUMENT`/`UNAVAILABLE`, a Thrift exception).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IssueError {
    /// The request itself is wrong; retrying it unchanged will not help.
    #[error("{0}")]
    BadRequest(String),
    /// The node cannot issue IDs right now; the message says why.
    #[error("{message}")]
    Unavailable {
        /// Why, in words.
        message: String,
        /// When to try again, in seconds (at least 1).
        retry_after_secs: u64,
    },
}

/// How many on-demand reservations one request may wait for before it is refused.
const MAX_RESERVATIONS_PER_REQUEST: u32 = 3;

/// A request for more than one millisecond's worth of IDs takes at most this share of each
/// millisecond's sequence space, as 1/`BULK_LEAVES_ONE_IN`: the rest stays for other requests,
/// so that maximum batches back to back do not make single IDs wait for the next millisecond.
const BULK_LEAVES_ONE_IN: u64 = 4;

/// Below this many IDs per millisecond (Twitter's 4,096), a layout's sequence, not the work of
/// formatting them, bounds a batch (js-safe: 64): bulk requests wake at every timer tick and
/// leave a quarter of a millisecond only while other requests are waiting for one.
const SMALL_LAYOUT_IDS_PER_MS: u64 = 4096;

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

/// What `GET /v1/info` reports.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Info {
    /// The node's datacenter id.
    pub datacenter_id: u64,
    /// The node's worker id.
    pub worker_id: u64,
    /// The layout's epoch (Unix ms).
    pub epoch_ms: u64,
    /// The node's clock now (Unix ms).
    pub timestamp_ms: u64,
    /// Where the pair came from: `static`, `hostname-map`, `hostname-ordinal` (configuration),
    /// `etcd` or `zookeeper`.
    pub identity_source: &'static str,
    /// The lease on the pair, when it comes from a coordination service.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease: Option<LeaseInfo>,
    /// Whether the node can issue IDs now.
    pub ready: bool,
    /// The persisted high-water mark (Unix ms).
    pub high_water_mark_ms: u64,
    /// The largest `count` one request may ask for.
    pub max_batch: u64,
    /// The service's version.
    pub version: &'static str,
    /// The layout IDs are issued under: name, widths, epoch and largest ID (SPEC §9).
    pub layout: snowflake_core::LayoutRecord,
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

/// One node: a (datacenter, worker) pair, its generator, its state directory and metrics.
#[derive(Debug)]
pub struct Node {
    shared: Arc<NodeShared>,
    /// The node's clock; the generator reads the same one.
    clock: Arc<dyn Clock>,
    layout: Layout,
    /// The largest count one request may ask for.
    max_batch: u64,
    /// How long a clock regression may be waited out rather than refused.
    max_backwards_wait_ms: u64,
    /// How far ahead of the clock the high-water mark is reserved.
    reserve_ms: u64,
    /// How far the wall clock is trusted: reservations never go beyond trusted time.
    trust: ClockTrust,
    /// How long the final mark may take to be stored at shutdown.
    shutdown_timeout: Duration,
    /// Bounds the slow paths of one request (waiting out a clock regression, an on-demand
    /// reservation).
    request_timeout: Duration,
    /// Serializes reservations (the keeper's and on-demand ones after a forward clock jump).
    reserving: tokio::sync::Mutex<()>,
    /// The coordinator's fence, subscribed when the node was built so that no change is
    /// missed before the keeper runs; the keeper takes it.
    fence: Mutex<Option<watch::Receiver<Fence>>>,
    /// The locked state directory; shared with the blocking threads that write it.
    state: Arc<StateDir>,
    metrics: Metrics,
}

impl Node {
    /// Opens and locks the state directory, reads the node's mark, and builds a generator that
    /// is closed (issues nothing) until [`Node::start`] or the keeper opens it.
    pub fn new(config: &Config, clock: Arc<dyn Clock>) -> Result<Arc<Node>, StateError> {
        let anchor = ClockAnchor::now(clock.as_ref());
        Node::with_coordinator(config, clock, anchor, None)
    }

    /// [`Node::new`] for a pair leased from a coordination service (`config`'s datacenter and
    /// worker ids are the claimed pair): the node also stays above the mark the claim read,
    /// obeys the lease's fence, and records every reservation there too. `anchor` is the
    /// clock's reading when the process started, before the claim: trusted time starts there
    /// (see [`crate::clock_trust`]), so a clock that stepped during a slow claim is not trusted.
    pub fn with_coordinator(
        config: &Config,
        clock: Arc<dyn Clock>,
        anchor: ClockAnchor,
        coordinator: Option<Arc<dyn Coordinator>>,
    ) -> Result<Arc<Node>, StateError> {
        let layout = config.layout;
        let state = StateDir::open(&config.state_dir)?;
        state.remove_leftovers();
        let mut mark = state.load(config.datacenter_id, config.worker_id, &layout)?;
        let last_written_ms = mark.as_ref().map(|m| m.written_at_ms);
        // Only a reservation this node's own previous run left behind says it crashed; a mark
        // taken over from the coordination service (below) is another holder's, often a clean
        // stop.
        let crashed_at_ms = mark
            .as_ref()
            .filter(|m| m.kind == MarkKind::Reservation)
            .map(|m| m.high_water_ms);
        let mut fence_rx = coordinator.as_ref().map(|c| c.fence());
        let fence = fence_rx.as_mut().map(|f| f.borrow_and_update().clone());
        if let Some(Fence::Held { floor_ms, .. }) = fence
            && mark.as_ref().is_none_or(|m| m.high_water_ms < floor_ms)
            && floor_ms > 0
        {
            // A previous holder (maybe another machine) may have issued up to here.
            tracing::info!(
                takeover_mark_ms = floor_ms,
                "the pair's high-water mark in the coordination service is above this node's own; \
                 resuming above it"
            );
            mark = Some(StateDir::mark(
                config.datacenter_id,
                config.worker_id,
                &layout,
                floor_ms,
                MarkKind::Reservation,
                floor_ms,
            ));
        }
        let mut builder = Generator::builder()
            .layout(layout)
            .datacenter_id(config.datacenter_id)
            .worker_id(config.worker_id)
            .clock(Arc::clone(&clock))
            .issue_limit_ms(0);
        let phase = match &mark {
            Some(mark) => {
                builder = builder.resume_after_ms(mark.high_water_ms);
                if let Some(high_water_ms) = crashed_at_ms {
                    tracing::warn!(
                        high_water_ms,
                        "the previous run did not shut down cleanly; resuming above its reservation"
                    );
                }
                Phase::WaitingForMark {
                    mark_ms: mark.high_water_ms,
                }
            }
            None => Phase::Starting,
        };
        // The config was validated against the layout, so this cannot fail; map it anyway.
        let generator = builder.build().map_err(|e| StateError::Corrupt {
            path: state.file(config.datacenter_id, config.worker_id),
            reason: e.to_string(),
        })?;
        let now_ms = clock.now_ms();
        let (fence_limit_ms, fence_reason) = match &fence {
            None => (u64::MAX, None),
            Some(fence) => {
                let limit = fence.limit_at(now_ms);
                (limit.limit_ms(), limit.reason().map(str::to_owned))
            }
        };
        let shared = Arc::new(NodeShared {
            generator,
            identity_source: coordinator
                .as_ref()
                .map_or(config.identity_source, |c| c.source()),
            coordinator,
            fleet: Arc::default(),
            status: Mutex::new(Status {
                phase,
                persisted_mark_ms: mark.map_or(0, |m| m.high_water_ms),
                fence_limit_ms,
                fence_reason,
                clock_step: None,
            }),
        });
        // On the same boot, the previous run's last trusted time and the boot time since say
        // what the clock should read: a restart (by a supervisor, at once) is no operator's
        // word that a clock far ahead is right.
        let mut anchor = anchor;
        if anchor.boot.is_none() {
            tracing::warn!(
                "cannot read the boot id (/proc/sys/kernel/random/boot_id): the clock check at a \
                 restart on the same boot is off, so a supervisor restarting this node while its \
                 clock reads far ahead would trust that clock. Let the process read /proc/sys \
                 (systemd: no ProcSubset=pid)"
            );
        }
        let checked = match state.load_clock() {
            Ok(Some(last)) => anchor.check_against(&last, config.max_clock_step_ms),
            Ok(None) => None,
            Err(err) => {
                tracing::warn!(error = %err, "cannot check the clock against the previous run; trusting its first reading");
                None
            }
        };
        if let Some(checked) = checked
            && checked.stepped
        {
            tracing::warn!(
                expected = %snowflake_core::format_unix_ms(checked.expected_ms),
                down_secs = checked.down_ms / 1000,
                "the clock reads further ahead than the time since the previous run on this boot \
                 explains: judging it as a forward step (see --clock-step-trust-secs); if the \
                 new time is right and the step is more than a day, remove clock.json from the \
                 state directory and restart"
            );
        }
        let trust = ClockTrust::anchored(
            Arc::clone(&clock),
            &anchor,
            config.max_clock_step_ms,
            config.clock_step_trust,
        );
        if let Some(written_ms) = last_written_ms {
            trust.raise_to(written_ms);
        }
        if let Some(checked) = checked {
            // Trusted time never goes back, also across restarts.
            trust.raise_to(checked.expected_ms);
        }
        Ok(Arc::new(Node {
            metrics: Metrics::new(Arc::clone(&shared)),
            shared,
            clock,
            layout,
            max_batch: config.max_batch,
            max_backwards_wait_ms: config.max_backwards_wait_ms,
            reserve_ms: config.reserve_ms,
            trust,
            shutdown_timeout: config.shutdown_timeout,
            reserving: tokio::sync::Mutex::new(()),
            fence: Mutex::new(fence_rx),
            request_timeout: config.request_timeout,
            state: Arc::new(state),
        }))
    }

    /// The coordination service that leased the pair, if any.
    pub fn coordinator(&self) -> Option<Arc<dyn Coordinator>> {
        self.shared.coordinator.clone()
    }

    /// The pairs held in this node's datacenter, as last read from the coordinator (kept
    /// fresh by the running service; empty without a coordinator).
    pub fn fleet(&self) -> Arc<FleetView> {
        Arc::clone(&self.shared.fleet)
    }

    /// The metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The layout IDs are issued under.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The generator (shared by every front end).
    pub fn generator(&self) -> &Generator<Arc<dyn Clock>> {
        &self.shared.generator
    }

    /// The largest count one request may ask for.
    pub fn max_batch(&self) -> u64 {
        self.max_batch
    }

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
        let mut waited_ms = 0;
        let mut reservations = 0;
        // Set on the first slow path, so the fast path never touches a timer.
        let mut deadline = None;
        loop {
            let issued = match take {
                Take::All => self.issue_now(protocol, count, waited_ms),
                Take::Leaving(leave) => self.take_now(protocol, count, leave, waited_ms),
                Take::Exact => self.take_exact_now(protocol, count, waited_ms),
            };
            match issued {
                // (Only in bulk or exact: this millisecond has not enough to give.)
                Ok(batches) if batches.is_empty() => {
                    let deadline =
                        *deadline.get_or_insert_with(|| Instant::now() + self.request_timeout);
                    // Sleep for the next millisecond rather than spin for it: a runtime
                    // thread spinning on the clock takes a whole core from the other requests
                    // (and from their clients) on a small machine.
                    // Under a small layout, wake at the timer's next tick rather than a whole
                    // millisecond later: ticks are a millisecond apart, so every millisecond of
                    // the clock gets one take instead of every other one.
                    let pause = if self.layout.max_ids_per_ms() < SMALL_LAYOUT_IDS_PER_MS {
                        Duration::from_micros(1)
                    } else {
                        Duration::from_millis(1)
                    };
                    let seen_ms = self.clock.now_ms();
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

    /// Persists a reservation from the clock's current reading at once (unless one that covers
    /// it was just written), as the keeper would on its next tick: after a forward clock jump,
    /// requests wait for this write instead of failing.
    pub async fn reserve_now(&self) {
        if let Reading::Trusted { now_ms } = self.check_trust() {
            self.reserve(now_ms).await;
        }
    }

    /// Reads the wall clock through the clock-step policy (see `clock_trust`) and applies the
    /// verdict: an untrusted forward step caps the issue limit at trusted time (and makes the
    /// node unready) until it is trusted or the clock comes back.
    fn check_trust(&self) -> Reading {
        let reading = self.trust.read();
        let step = match reading {
            Reading::Trusted { .. } => None,
            Reading::Stepped(step) => Some(step),
        };
        let mut status = self.shared.status();
        match (&status.clock_step, &step) {
            (None, Some(step)) => {
                self.metrics.clock_forward_steps.inc();
                tracing::warn!(step_ms = step.step_ms, "{}", step.describe());
            }
            (Some(_), None) => tracing::info!("the clock is trusted again: issuing ids"),
            _ => {}
        }
        status.clock_step = step;
        self.shared
            .generator
            .set_issue_limit_ms(status.issue_limit_ms());
        reading
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

    /// How long one request may wait for the clock or for a reservation.
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// The timestamp (Unix ms) of the last issued ID, or of the mark resumed from (0 before).
    pub fn last_issued_ms(&self) -> u64 {
        self.shared.generator.last_issued_ms().unwrap_or(0)
    }

    /// The node's clock now (Unix ms): what Thrift's `get_timestamp` returns.
    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// Ok while the node can issue IDs; otherwise why not.
    pub fn readiness(&self) -> Result<(), IssueError> {
        let blocker = {
            let status = self.shared.status();
            self.shared.blocker(&status)
        };
        match blocker {
            None => Ok(()),
            Some(Blocker::Phase(phase)) => Err(self.phase_refusal(&phase)),
            Some(Blocker::Fenced { reason }) => Err(fenced(&reason)),
            Some(Blocker::ClockStep(step)) => Err(stepped(&step)),
            Some(Blocker::Behind { last_ms, now_ms }) => {
                Err(backwards(last_ms - now_ms, last_ms, now_ms))
            }
            Some(Blocker::PastLimit { limit_ms }) => Err(not_reserved(limit_ms)),
        }
    }

    /// What `GET /v1/info` reports.
    pub fn info(&self) -> Info {
        let status = self.shared.status();
        Info {
            datacenter_id: self.shared.generator.datacenter_id(),
            worker_id: self.shared.generator.worker_id(),
            epoch_ms: self.layout.epoch_ms(),
            timestamp_ms: self.clock.now_ms(),
            identity_source: self.shared.identity_source,
            lease: self.shared.coordinator.as_ref().map(|c| c.info()),
            ready: self.shared.can_issue(&status),
            high_water_mark_ms: status.persisted_mark_ms,
            max_batch: self.max_batch,
            version: env!("CARGO_PKG_VERSION"),
            layout: self.layout.into(),
        }
    }

    /// Opens the node at once if the clock is already past its mark (the normal case): persists
    /// the first reservation and starts issuing. Otherwise the keeper opens it later.
    pub async fn start(&self) {
        let phase = self.shared.status().phase.clone();
        if let Phase::WaitingForMark { mark_ms } = phase {
            let now_ms = self.clock.now_ms();
            if now_ms <= mark_ms {
                tracing::warn!(
                    mark_ms,
                    now_ms,
                    wait_ms = mark_ms - now_ms + 1,
                    "the clock is behind the persisted high-water mark: not issuing ids until it passes it"
                );
            }
        }
        self.tick().await;
        // The fence may have changed while the first reservation was written; the keeper
        // applies later changes.
        let current = self
            .fence
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .as_ref()
            .map(|f| f.borrow().clone());
        if let Some(current) = current {
            snowflake_fleet::apply_fence(self, &current);
        }
    }

    /// The keeper, run until `shutdown` flips: opens a waiting node once its clock passes the
    /// mark, keeps the persisted reservation ahead of the clock, and (in a fleet) applies the
    /// coordination service's fence. The two run side by side, so a slow reservation write
    /// never delays closing the node when the lease is lost.
    pub async fn keep(self: Arc<Self>, shutdown: watch::Receiver<bool>) {
        let fence = self
            .fence
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .take();
        let keep_fence = async {
            if let Some(fence) = fence {
                snowflake_fleet::keep_fence(&*self, fence, shutdown.clone()).await;
            }
        };
        tokio::join!(self.keep_reserving(shutdown.clone()), keep_fence);
    }

    async fn keep_reserving(&self, mut shutdown: watch::Receiver<bool>) {
        let period = Duration::from_millis((self.reserve_ms / 4).clamp(5, 1000));
        let mut tick = tokio::time::interval_at(Instant::now() + period, period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                // The only change ever sent is `true`; a dropped sender means stop too.
                _ = shutdown.changed() => return,
            }
            // A reservation stuck on a stalled filesystem must not hold the shutdown up: it is
            // dropped (its blocking write goes on, and the final write waits for it, bounded).
            tokio::select! {
                () = self.tick() => {}
                _ = shutdown.changed() => return,
            }
        }
    }

    /// One step of the keeper.
    async fn tick(&self) {
        let now_ms = match self.check_trust() {
            Reading::Trusted { now_ms } => now_ms,
            // Nothing beyond trusted time is reserved; the node opens or extends its
            // reservation once the step is trusted or the clock is back.
            Reading::Stepped(_) => return,
        };
        let phase = self.shared.status().phase.clone();
        let due = match phase {
            Phase::Starting | Phase::PersistFailed { .. } => true,
            Phase::WaitingForMark { mark_ms } => now_ms > mark_ms,
            Phase::Ready => {
                now_ms.saturating_add(self.reserve_ms / 2) >= self.shared.status().persisted_mark_ms
            }
            Phase::ShuttingDown => false,
        };
        if due {
            self.reserve(now_ms).await;
        }
    }

    /// Durably reserves up to `now + reserve_ms`, then lets the generator issue up to there.
    async fn reserve(&self, now_ms: u64) {
        let _writer = self.reserving.lock().await;
        // Another writer may have covered this reading while we waited for the lock.
        {
            let status = self.shared.status();
            if status.phase == Phase::ShuttingDown
                || (status.phase == Phase::Ready
                    && now_ms.saturating_add(self.reserve_ms / 2) < status.persisted_mark_ms)
            {
                return;
            }
        }
        // Never past the layout's last millisecond: a mark there could never be passed.
        let target_ms = now_ms
            .saturating_add(self.reserve_ms)
            .max(self.shared.status().persisted_mark_ms)
            .min(self.layout.max_timestamp_ms().saturating_sub(1));
        let result = self.store(target_ms, MarkKind::Reservation, now_ms).await;
        let mut status = self.shared.status();
        if status.phase == Phase::ShuttingDown {
            return;
        }
        match result {
            Ok(()) => {
                // A re-claim applied while the write was in flight may have raised the mark to
                // the pair's floor and set the node waiting for it: never undo either.
                status.persisted_mark_ms = status.persisted_mark_ms.max(target_ms);
                let waiting =
                    matches!(status.phase, Phase::WaitingForMark { mark_ms } if mark_ms >= now_ms);
                if status.phase != Phase::Ready && !waiting {
                    tracing::info!(
                        reserved_until_ms = status.persisted_mark_ms,
                        "ready: issuing ids"
                    );
                    status.phase = Phase::Ready;
                }
                self.shared
                    .generator
                    .set_issue_limit_ms(status.issue_limit_ms());
            }
            Err(err) => {
                let message = err.to_string();
                if !matches!(&status.phase, Phase::PersistFailed { message: m } if *m == message) {
                    tracing::error!(error = %message, "cannot persist the high-water mark; ids stop at the last persisted mark");
                }
                if status.phase == Phase::Ready
                    || matches!(status.phase, Phase::PersistFailed { .. })
                {
                    status.phase = Phase::PersistFailed { message };
                }
            }
        }
    }

    async fn store(
        &self,
        high_water_ms: u64,
        kind: MarkKind,
        now_ms: u64,
    ) -> Result<(), StateError> {
        let generator = &self.shared.generator;
        let mark = StateDir::mark(
            generator.datacenter_id(),
            generator.worker_id(),
            &self.layout,
            high_water_ms,
            kind,
            now_ms,
        );
        // The time trusted now, for the next run's clock check (see `Node::with_coordinator`).
        let point = self.trust.trusted_point();
        let state = Arc::clone(&self.state);
        let result = tokio::task::spawn_blocking(move || {
            let stored = state.store(&mark)?;
            if let Some(point) = point
                && let Err(err) = state.store_clock(&point)
            {
                tracing::warn!(error = %err, "cannot record the trusted time for the next run's clock check");
            }
            Ok(stored)
        })
        .await
            .unwrap_or_else(|join| {
                let path = self
                    .state
                    .file(generator.datacenter_id(), generator.worker_id());
                Err(StateError::Write {
                    path,
                    source: std::io::Error::other(join),
                })
            });
        match &result {
            Ok(Stored::Written) => {
                self.metrics.state_writes.inc();
            }
            Ok(Stored::AlreadyCovered) => {}
            Err(_) => {
                self.metrics.state_write_errors.inc();
            }
        }
        result?;
        // Then the coordination service, so a successor on another machine sees it too.
        if let Some(coordinator) = &self.shared.coordinator {
            let stored = coordinator.store_mark(high_water_ms).await;
            match &stored {
                Ok(()) => self.metrics.lease_mark_writes.inc(),
                Err(_) => self.metrics.lease_mark_write_errors.inc(),
            };
            stored.map_err(|source| StateError::Fleet {
                service: coordinator.source(),
                source,
            })?;
        }
        Ok(())
    }

    /// Stops issuing for good and records the exact point reached, so the next start serves at
    /// once. Call after every front end has stopped.
    pub async fn shutdown(&self) -> Result<u64, StateError> {
        let persisted_ms = {
            let mut status = self.shared.status();
            status.phase = Phase::ShuttingDown;
            self.shared.generator.set_issue_limit_ms(0);
            status.persisted_mark_ms
        };
        // Read after closing: every ID issued under the old limit has a timestamp at or below
        // this reading (see `Generator::set_issue_limit_ms`), and at or below the reservation.
        let now_ms = self.clock.now_ms();
        // The mark records when it was written in trusted time, not the wall clock's: a clock
        // stepped ahead at the moment of the stop must not become the next run's starting
        // point (it raises trusted time to it).
        let written_ms = match self.trust.read() {
            Reading::Trusted { now_ms } => now_ms,
            Reading::Stepped(step) => step.trusted_ms,
        };
        let last_ms = self.shared.generator.last_issued_ms().unwrap_or(0);
        let mark_ms = last_ms.max(now_ms).min(persisted_ms.max(last_ms));
        if persisted_ms == 0 && last_ms == 0 {
            return Ok(0);
        }
        // A write in flight (a reservation whose request timed out, a first write stuck on a
        // frozen or unreachable filesystem) finishes first: the state directory takes one writer
        // at a time. Bounded, so that a stuck filesystem never makes SIGTERM wait for ever; the
        // reservation already on disk covers every issued ID.
        let stored = tokio::time::timeout(
            self.shutdown_timeout,
            self.store(mark_ms, MarkKind::Shutdown, written_ms),
        )
        .await
        .unwrap_or_else(|_| {
            Err(StateError::Write {
                path: self.state.file(
                    self.shared.generator.datacenter_id(),
                    self.shared.generator.worker_id(),
                ),
                source: std::io::Error::other(format!(
                    "no answer within {} ms (a stuck filesystem?); the reservation already on \
                     disk covers every issued id",
                    self.shutdown_timeout.as_millis()
                )),
            })
        });
        stored?;
        self.shared.status().persisted_mark_ms = mark_ms;
        Ok(mark_ms)
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

    fn phase_refusal(&self, phase: &Phase) -> IssueError {
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

/// The fleet fences the node through this: the coordinator's fence becomes the node's fence
/// limit (and a re-claim's floor, its new mark), under the status lock.
impl Issuer for Node {
    fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    fn last_issued_ms(&self) -> Option<u64> {
        self.shared.generator.last_issued_ms()
    }

    fn set_issue_limit(&self, limit: IssueLimit) {
        self.apply_fence(limit.until_ms, None, limit.resume_above_ms, limit.at_ms);
    }

    fn fence(&self, fenced: Fenced) {
        self.apply_fence(0, Some(fenced.reason), fenced.resume_above_ms, fenced.at_ms);
    }
}

impl Node {
    /// Applies the coordination service's fence: the generator may issue only until its
    /// deadline (`limit_ms`, wall-clock ms read at `now_ms`), never while it is down (`reason`),
    /// and only above the mark a re-claim read (`resume_above_ms`, when above the last issued
    /// ID).
    fn apply_fence(
        &self,
        limit_ms: u64,
        reason: Option<String>,
        resume_above_ms: Option<u64>,
        now_ms: u64,
    ) {
        let generator = &self.shared.generator;
        let mut status = self.shared.status();
        if reason.is_some() && status.fence_reason.is_none() && status.phase == Phase::Ready {
            tracing::warn!(
                reason = reason.as_deref().unwrap_or(""),
                "fenced: not issuing ids"
            );
        } else if reason.is_none() && status.fence_reason.is_some() {
            tracing::info!("the lease is held again");
        }
        status.fence_limit_ms = limit_ms;
        status.fence_reason = reason;
        if let Some(floor_ms) = resume_above_ms {
            // Re-claimed after an outage, and another holder went further meanwhile.
            if let Err(err) = generator.resume_after(floor_ms) {
                tracing::error!(error = %err, "cannot resume above the pair's mark");
                status.fence_limit_ms = 0;
                status.fence_reason = Some(format!("cannot resume above the pair's mark: {err}"));
            }
            status.persisted_mark_ms = status.persisted_mark_ms.max(floor_ms);
            if now_ms <= floor_ms && status.phase != Phase::ShuttingDown {
                status.phase = Phase::WaitingForMark { mark_ms: floor_ms };
            }
        }
        generator.set_issue_limit_ms(status.issue_limit_ms());
    }
}

fn unavailable(message: impl Into<String>, retry_after_secs: u64) -> IssueError {
    IssueError::Unavailable {
        message: message.into(),
        retry_after_secs: retry_after_secs.max(1),
    }
}

fn backwards(behind_ms: u64, last_ms: u64, now_ms: u64) -> IssueError {
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

fn not_reserved(limit_ms: u64) -> IssueError {
    unavailable(
        format!(
            "the clock has passed the persisted high-water mark {limit_ms}; waiting for the next \
             reservation to be written"
        ),
        1,
    )
}

fn stepped(step: &Step) -> IssueError {
    unavailable(step.describe(), step.retry_after_secs())
}

fn fenced(reason: &str) -> IssueError {
    unavailable(
        format!("this node cannot prove it still holds its worker id: {reason}"),
        1,
    )
}

//! The node: one generator shared by every front end, its restart-safety keeper, and the one
//! place where requests are validated and refusals are explained.

use crate::clock_trust::{ClockAnchor, ClockTrust, Reading};
use crate::config::Config;
use crate::metrics::Metrics;
pub use crate::metrics::Protocol;
use crate::state::{MarkKind, StateDir, StateError};
use snowflake_core::{Clock, Generator, Layout};
use snowflake_fleet::{Coordinator, Fence, FleetView, LeaseInfo};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

mod fence;
mod issue;
mod keeper;
mod pacer;
pub(crate) mod readiness;
pub(crate) mod refusal;

pub use issue::NotNow;
use issue::{backwards, fenced, not_reserved, stepped};
use readiness::{Blocker, NodeShared, Phase, Status};
pub use refusal::IssueError;

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
    /// The node-wide budget for bulk replies, and its queue.
    bulk: crate::bulk::BulkGate,
    /// Wakes the requests waiting for the next millisecond as it begins, under layouts of
    /// fewer than 4,096 IDs a millisecond (see `pacer`); `None` under larger ones, whose
    /// requests sleep on the runtime's timer.
    pacer: Option<pacer::Pacer>,
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
        let mut mark = state.load(
            config.identity.datacenter_id,
            config.identity.worker_id,
            &layout,
        )?;
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
                config.identity.datacenter_id,
                config.identity.worker_id,
                &layout,
                floor_ms,
                MarkKind::Reservation,
                floor_ms,
            ));
        }
        let mut builder = Generator::builder()
            .layout(layout)
            .datacenter_id(config.identity.datacenter_id)
            .worker_id(config.identity.worker_id)
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
            path: state.file(config.identity.datacenter_id, config.identity.worker_id),
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
                .map_or(config.identity.identity_source(), |c| c.source()),
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
            Ok(Some(last)) => anchor.check_against(&last, config.clock.max_clock_step_ms),
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
            config.clock.max_clock_step_ms,
            config.clock.clock_step_trust,
        );
        if let Some(written_ms) = last_written_ms {
            trust.raise_to(written_ms);
        }
        if let Some(checked) = checked {
            // Trusted time never goes back, also across restarts.
            trust.raise_to(checked.expected_ms);
        }
        let metrics = Metrics::new(Arc::clone(&shared));
        let bulk = crate::bulk::BulkGate::new(metrics.bulk.clone());
        let pacer = if layout.max_ids_per_ms() < issue::SMALL_LAYOUT_IDS_PER_MS {
            pacer::Pacer::start(Arc::clone(&clock))
        } else {
            None
        };
        Ok(Arc::new(Node {
            pacer,
            metrics,
            bulk,
            shared,
            clock,
            layout,
            max_batch: config.limits.max_batch,
            max_backwards_wait_ms: config.clock.max_backwards_wait_ms,
            reserve_ms: config.clock.reserve_ms,
            trust,
            shutdown_timeout: config.limits.shutdown_timeout,
            reserving: tokio::sync::Mutex::new(()),
            fence: Mutex::new(fence_rx),
            request_timeout: config.limits.request_timeout,
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

    /// Takes a turn to issue and `bytes` of the node-wide budget for bulk replies (see
    /// [`crate::bulk`]) for a reply, before its IDs are issued; waiting at most a quarter of the
    /// request timeout, so that an admitted request has the rest to issue them (the request
    /// timeout of gRPC and HTTP counts from the request's start). The caller gives the turn
    /// back with [`crate::bulk::BulkPermit::issued`] once the IDs are issued, and the bytes by
    /// dropping the permit with the reply.
    pub async fn admit_bulk(&self, bytes: u64) -> Result<crate::bulk::BulkPermit, IssueError> {
        self.bulk.admit(bytes, self.request_timeout / 4).await
    }

    /// The largest count one request may ask for.
    pub fn max_batch(&self) -> u64 {
        self.max_batch
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
}

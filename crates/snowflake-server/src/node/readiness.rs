//! Readiness: where the node is in its life, what stops it from issuing right now (the one
//! readiness rule behind `/readyz`, gRPC health, `/v1/info` and `snowflake_ready`), and the
//! shared state the metrics read at scrape time.

use crate::clock_trust::Step;
use snowflake_core::{Clock, Generator};
use snowflake_fleet::{Coordinator, FleetView, NOT_RENEWED};
use std::sync::{Arc, Mutex, MutexGuard};

/// Where the node is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Phase {
    /// No mark yet; the first reservation is being written.
    Starting,
    /// Restarted with the clock at or behind the persisted mark: wait for it to pass.
    WaitingForMark { mark_ms: u64 },
    /// Issuing.
    Ready,
    /// The last attempt to persist a reservation failed.
    PersistFailed { message: String },
    /// Stopped issuing for good.
    ShuttingDown,
}

#[derive(Debug)]
pub(super) struct Status {
    pub(super) phase: Phase,
    /// The high-water mark on disk (and in the coordination service): no issued ID is above it.
    pub(super) persisted_mark_ms: u64,
    /// The last timestamp (Unix ms) the coordination service's fence allows: `u64::MAX`
    /// without one, 0 while the lease is lost.
    pub(super) fence_limit_ms: u64,
    /// Why the fence is down, when it is.
    pub(super) fence_reason: Option<String>,
    /// An untrusted forward step of the wall clock, as last seen: nothing is issued after its
    /// trusted time until the step is trusted or the clock comes back.
    pub(super) clock_step: Option<Step>,
}

impl Status {
    /// The limit the generator should have now: nothing before the node opens or after it
    /// shuts down; else the reservation, cut short by the fence.
    pub(super) fn issue_limit_ms(&self) -> u64 {
        match self.phase {
            Phase::Ready | Phase::PersistFailed { .. } => {
                let limit_ms = self.persisted_mark_ms.min(self.fence_limit_ms);
                match &self.clock_step {
                    Some(step) => limit_ms.min(step.trusted_ms),
                    None => limit_ms,
                }
            }
            Phase::Starting | Phase::WaitingForMark { .. } | Phase::ShuttingDown => 0,
        }
    }
}

/// Why the node cannot issue IDs right now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Blocker {
    /// Not open (starting, waiting for the mark, persist failed, shutting down).
    Phase(Phase),
    /// The lease on the pair cannot be proven.
    Fenced { reason: String },
    /// The wall clock stepped forward and is not trusted yet.
    ClockStep(Step),
    /// The clock is behind the last issued ID.
    Behind { last_ms: u64, now_ms: u64 },
    /// The clock is past the persisted reservation.
    PastLimit { limit_ms: u64 },
}

impl Blocker {
    /// The reason as a bounded metric label, one of [`NOT_READY_REASONS`].
    fn code(&self) -> &'static str {
        match self {
            Blocker::Phase(Phase::Starting) => "starting",
            Blocker::Phase(Phase::WaitingForMark { .. }) => "waiting_for_mark",
            Blocker::Phase(Phase::Ready) => "ready",
            Blocker::Phase(Phase::PersistFailed { .. }) => "mark_write_failed",
            Blocker::Phase(Phase::ShuttingDown) => "shutting_down",
            Blocker::Fenced { .. } => "lease_not_proven",
            Blocker::ClockStep(_) => "clock_step_untrusted",
            Blocker::Behind { .. } => "clock_behind",
            Blocker::PastLimit { .. } => "reservation_pending",
        }
    }
}

/// The values of `snowflake_not_ready_reason`'s `reason` label: why a node cannot issue IDs
/// (starting; restarted and waiting for the clock to pass the mark; the last write of the mark
/// failed, to the state directory or to the coordination service;
/// draining; the lease cannot be proven; an untrusted forward clock step; the clock behind the
/// last ID; the clock past the reservation while the next is written).
pub const NOT_READY_REASONS: [&str; 8] = [
    "starting",
    "waiting_for_mark",
    "mark_write_failed",
    "shutting_down",
    "lease_not_proven",
    "clock_step_untrusted",
    "clock_behind",
    "reservation_pending",
];

/// A point-in-time view of the node, for metrics.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Snapshot {
    pub ready: bool,
    /// Why not, as one of [`NOT_READY_REASONS`].
    pub not_ready_reason: Option<&'static str>,
    pub waiting_for_mark: bool,
    pub persisted_mark_ms: u64,
}

/// The parts of the node the metrics collector reads at scrape time.
#[derive(Debug)]
pub(crate) struct NodeShared {
    /// The one generator of this node.
    pub generator: Generator<Arc<dyn Clock>>,
    /// Where the node's (datacenter, worker) pair came from: `static`, `hostname-map`,
    /// `hostname-ordinal`, `etcd` or `zookeeper`.
    pub identity_source: &'static str,
    /// The coordination service that leased the pair, if any.
    pub coordinator: Option<Arc<dyn Coordinator>>,
    /// The pairs held in the node's datacenter, as last read from the coordinator.
    pub fleet: Arc<FleetView>,
    pub(super) status: Mutex<Status>,
}

impl NodeShared {
    pub(super) fn status(&self) -> MutexGuard<'_, Status> {
        // A panic while holding this tiny lock cannot leave `Status` half-written.
        self.status
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// What stops IDs from being issued right now, if anything: the phase, a clock behind
    /// the last issued ID, or a clock past the reservation. The one readiness rule, shared by
    /// `/readyz`, gRPC health, `/v1/info` and the `snowflake_ready` metric.
    pub(super) fn blocker(&self, status: &Status) -> Option<Blocker> {
        // An untrusted clock step says more than "starting" or "waiting for the mark" (the
        // step is why the node cannot open), but not more than "shutting down".
        if let Some(step) = status.clock_step
            && status.phase != Phase::ShuttingDown
        {
            return Some(Blocker::ClockStep(step));
        }
        let now_ms = self.generator.clock().now_ms();
        // A mark that could not be written while the lease is down failed because of the
        // lease: the fence is the reason to give.
        let fenced = now_ms > status.fence_limit_ms;
        if status.phase != Phase::Ready
            && !(fenced && matches!(status.phase, Phase::PersistFailed { .. }))
        {
            return Some(Blocker::Phase(status.phase.clone()));
        }
        if fenced {
            return Some(Blocker::Fenced {
                reason: fence_reason(status),
            });
        }
        if let Some(last_ms) = self.generator.last_issued_ms()
            && now_ms < last_ms
        {
            return Some(Blocker::Behind { last_ms, now_ms });
        }
        let limit_ms = self.generator.issue_limit_ms();
        (now_ms > limit_ms).then_some(Blocker::PastLimit { limit_ms })
    }

    /// Whether IDs can be issued right now.
    pub(super) fn can_issue(&self, status: &Status) -> bool {
        self.blocker(status).is_none()
    }

    pub(crate) fn snapshot(&self) -> Snapshot {
        let status = self.status();
        let blocker = self.blocker(&status);
        Snapshot {
            ready: blocker.is_none(),
            not_ready_reason: blocker.as_ref().map(Blocker::code),
            waiting_for_mark: matches!(status.phase, Phase::WaitingForMark { .. }),
            persisted_mark_ms: status.persisted_mark_ms,
        }
    }
}

/// Why the fence stops the node (also when its deadline passed between two keeper wake-ups).
pub(super) fn fence_reason(status: &Status) -> String {
    status
        .fence_reason
        .clone()
        .unwrap_or_else(|| NOT_RENEWED.into())
}

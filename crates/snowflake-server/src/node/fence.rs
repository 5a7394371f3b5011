//! The fence: the coordination service's limit on issuing (the lease's deadline, a lost lease,
//! a re-claim's floor) applied to the generator, through the fleet's `Issuer` trait.

use super::Node;
use super::readiness::Phase;
use snowflake_core::Clock;
use snowflake_fleet::{Fenced, IssueLimit, Issuer};

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
    pub(super) fn apply_fence(
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

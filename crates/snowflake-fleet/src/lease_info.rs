//! The lease as `/v1/info`, the status page and the metrics show it.

use serde::Serialize;
use std::time::{Duration, Instant};

/// What `/v1/info` and the metrics show about the lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LeaseInfo {
    /// `held`, `renewing` (held, but the last renewal failed) or `lost`.
    pub state: &'static str,
    /// The lease's id as etcd shows it (hex), when one is held.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_id: Option<String>,
    /// The TTL etcd granted, in seconds.
    pub ttl_secs: u64,
    /// Milliseconds left before the node stops issuing unless the lease is renewed (0 when
    /// lost).
    pub remaining_ms: u64,
    /// The key that records the claim.
    pub key: String,
    /// Why the lease is not held, when it is not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Successful renewals so far.
    pub renewals: u64,
    /// Failed renewal attempts so far.
    pub renewal_failures: u64,
    /// Times the lease was lost (expired or taken away) and had to be claimed again.
    pub losses: u64,
    /// Free pairs the claim passed over because their high-water mark was far ahead of the
    /// clock (an unpinned claim takes one that serves at once when there is one).
    pub skipped_ahead: u64,
}

/// The state label, the reason and the time left, as [`LeaseInfo::status`] works them out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseStatus {
    /// `held`, `renewing` or `lost`.
    pub state: &'static str,
    /// Why it is lost, when it is.
    pub reason: Option<String>,
    /// Milliseconds left before the proof runs out (0 when lost).
    pub remaining_ms: u64,
}

impl LeaseInfo {
    /// The state label, the reason and the milliseconds left, from what a coordinator knows:
    /// why it lost the pair (if it did), until when holding is proven, and whether the last
    /// renewal failed. `out_of_reach` explains a deadline that passed without a renewal.
    pub fn status(
        lost_reason: Option<&str>,
        until: Option<Instant>,
        renewing: bool,
        out_of_reach: &str,
    ) -> LeaseStatus {
        let remaining = until.map_or(Duration::ZERO, |u| {
            u.saturating_duration_since(Instant::now())
        });
        let remaining_ms = u64::try_from(remaining.as_millis()).unwrap_or(u64::MAX);
        let (state, reason) = match (lost_reason, remaining.is_zero()) {
            (Some(reason), _) => ("lost", Some(reason.to_owned())),
            (None, true) => ("lost", Some(out_of_reach.to_owned())),
            (None, false) if renewing => ("renewing", None),
            (None, false) => ("held", None),
        };
        LeaseStatus {
            state,
            reason,
            remaining_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::LeaseInfo;
    use std::time::{Duration, Instant};

    #[test]
    fn the_status_says_held_renewing_or_lost_and_why() {
        let later = Some(Instant::now() + Duration::from_secs(60));
        let held = LeaseInfo::status(None, later, false, "late");
        assert_eq!((held.state, held.reason), ("held", None));
        assert!(held.remaining_ms > 50_000);
        assert_eq!(
            LeaseInfo::status(None, later, true, "late").state,
            "renewing"
        );
        let late = LeaseInfo::status(None, Some(Instant::now()), false, "late");
        assert_eq!(
            (late.state, late.reason.as_deref(), late.remaining_ms),
            ("lost", Some("late"), 0)
        );
        let lost = LeaseInfo::status(Some("gone"), None, false, "late");
        assert_eq!((lost.state, lost.reason.as_deref()), ("lost", Some("gone")));
    }
}

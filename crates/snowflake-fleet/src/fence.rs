//! The fence: what a coordinator says about holding the pair (held until a monotonic deadline
//! and above a floor, or lost), and what that allows in an issuer's wall-clock time.

use std::time::Instant;

/// Whether the node may issue IDs as far as the coordination service is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fence {
    /// The pair is held: IDs may be issued until `until` (local monotonic time: the earliest
    /// moment the lease could expire, less a safety margin), and only above `floor_ms`.
    Held {
        /// When the proof of holding runs out unless renewed.
        until: Instant,
        /// The mark read when the pair was claimed (Unix ms): a previous holder may have
        /// issued IDs up to it, so this node issues only above it.
        floor_ms: u64,
    },
    /// The node cannot prove it holds the pair; the reason, in words.
    Lost {
        /// Why.
        reason: String,
    },
}

/// Why a held fence whose deadline passed stops the issuer.
pub const NOT_RENEWED: &str = "the lease on this node's (datacenter, worker) pair could not be \
                               renewed in time; not issuing ids until it is";

/// What a fence allows, read at one moment of an issuer's wall clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FenceLimit {
    /// IDs may carry timestamps up to `until_ms` (Unix ms): the monotonic deadline turned into
    /// wall-clock time, rounded down.
    Until {
        /// The last millisecond allowed.
        until_ms: u64,
    },
    /// Nothing may be issued.
    Down {
        /// Why, in words.
        reason: String,
    },
}

impl FenceLimit {
    /// The last millisecond allowed: 0 while the fence is down.
    pub fn limit_ms(&self) -> u64 {
        match self {
            FenceLimit::Until { until_ms } => *until_ms,
            FenceLimit::Down { .. } => 0,
        }
    }

    /// Why the fence is down, when it is.
    pub fn reason(&self) -> Option<&str> {
        match self {
            FenceLimit::Until { .. } => None,
            FenceLimit::Down { reason } => Some(reason),
        }
    }
}

impl Fence {
    /// What the fence allows when the issuer's clock reads `now_ms`: up to the deadline (whole
    /// milliseconds left, rounded down, so never past the monotonic deadline), or nothing once
    /// it passed or the pair is lost.
    pub fn limit_at(&self, now_ms: u64) -> FenceLimit {
        match self {
            Fence::Held { until, .. } => {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    FenceLimit::Down {
                        reason: NOT_RENEWED.into(),
                    }
                } else {
                    let left_ms = u64::try_from(left.as_millis()).unwrap_or(u64::MAX);
                    FenceLimit::Until {
                        until_ms: now_ms.saturating_add(left_ms),
                    }
                }
            }
            Fence::Lost { reason } => FenceLimit::Down {
                reason: reason.clone(),
            },
        }
    }

    /// The deadline of a held fence on the monotonic clock (`None` when lost).
    pub fn deadline(&self) -> Option<Instant> {
        match self {
            Fence::Held { until, .. } => Some(*until),
            Fence::Lost { .. } => None,
        }
    }

    /// The floor of a held fence (`None` when lost).
    pub fn floor_ms(&self) -> Option<u64> {
        match self {
            Fence::Held { floor_ms, .. } => Some(*floor_ms),
            Fence::Lost { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Fence, FenceLimit, NOT_RENEWED};
    use std::time::{Duration, Instant};

    #[test]
    fn a_fence_limits_by_its_deadline_its_expiry_or_its_loss() {
        let held = Fence::Held {
            until: Instant::now() + Duration::from_secs(60),
            floor_ms: 7,
        };
        match held.limit_at(1_000) {
            FenceLimit::Until { until_ms } => {
                assert!((50_000..=61_000).contains(&until_ms), "{until_ms}");
            }
            down => panic!("held, but {down:?}"),
        }
        assert_eq!(held.floor_ms(), Some(7));
        assert!(held.deadline().is_some());
        let expired = Fence::Held {
            until: Instant::now(),
            floor_ms: 7,
        };
        let limit = expired.limit_at(1_000);
        assert_eq!((limit.limit_ms(), limit.reason()), (0, Some(NOT_RENEWED)));
        let lost = Fence::Lost {
            reason: "gone".into(),
        };
        assert_eq!(lost.limit_at(1_000).reason(), Some("gone"));
        assert_eq!(lost.floor_ms(), None);
        assert_eq!(lost.deadline(), None);
        // A deadline far away cannot overflow the wall-clock limit.
        assert_eq!(held.limit_at(u64::MAX).limit_ms(), u64::MAX);
    }
}

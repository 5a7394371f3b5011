//! The database as the fleet fences it: the keeper's [`Issuer`]. The fleet's fence driver
//! (`snowflake_fleet::keep_fence`, exactly as it drives a node) says when the pair is held —
//! until a monotonic deadline, above a floor — and when it is not; the keeper's loops watch
//! that to raise the fleet's mark, grant and revoke.

use snowflake_core::Clock;
use snowflake_fleet::{Fenced, IssueLimit, Issuer};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;
use tokio::sync::watch;

/// What the fence says now.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Fencing {
    /// Until when the pair is provably held (the lease's earliest expiry less the fence's
    /// margin); `None` while it is not.
    pub held_until: Option<Instant>,
    /// Why it is not held, when it is not (`None` before the fence said anything).
    pub reason: Option<String>,
    /// The highest floor the fleet passed on (Unix ms; 0: none): the fleet's mark found when
    /// the pair was claimed, up to which a previous holder may have issued IDs.
    pub floor_ms: u64,
}

impl Fencing {
    /// The time left until the deadline (zero once passed or while not held).
    pub fn left(&self, now: Instant) -> std::time::Duration {
        self.held_until.map_or(std::time::Duration::ZERO, |until| {
            until.saturating_duration_since(now)
        })
    }
}

/// The keeper's issuer: the fence's state, published to the keeper's loops.
#[derive(Debug)]
pub struct Grantee {
    /// The keeper's wall clock: the fleet turns its deadlines into wall-clock limits with it.
    clock: Arc<dyn Clock>,
    /// The fence as last applied; the loops subscribe to it.
    fencing: watch::Sender<Fencing>,
    /// The database's last issued ID (Unix ms) as its last answer said; 0: unknown.
    last_issued_ms: AtomicU64,
}

impl Grantee {
    /// A grantee not fenced yet (nothing held: nothing is granted until the fence says so).
    pub fn new(clock: Arc<dyn Clock>) -> Grantee {
        Grantee {
            clock,
            fencing: watch::channel(Fencing::default()).0,
            last_issued_ms: AtomicU64::new(0),
        }
    }

    /// The fence as it stands, and its changes from now on.
    pub fn subscribe(&self) -> watch::Receiver<Fencing> {
        self.fencing.subscribe()
    }

    /// The fence as it stands.
    #[cfg(test)]
    pub fn fencing(&self) -> Fencing {
        self.fencing.borrow().clone()
    }

    /// Records what the database answered.
    pub fn observed(&self, last_issued_ms: Option<u64>) {
        if let Some(last) = last_issued_ms {
            self.last_issued_ms.fetch_max(last, Ordering::Relaxed);
        }
    }

    fn apply(&self, held_until: Option<Instant>, reason: Option<String>, floor: Option<u64>) {
        self.fencing.send_modify(|f| {
            f.held_until = held_until;
            f.reason = reason;
            f.floor_ms = f.floor_ms.max(floor.unwrap_or(0));
        });
    }
}

impl Issuer for Grantee {
    fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    fn last_issued_ms(&self) -> Option<u64> {
        Some(self.last_issued_ms.load(Ordering::Relaxed)).filter(|ms| *ms > 0)
    }

    fn set_issue_limit(&self, limit: IssueLimit) {
        // The grant is a duration on the database's monotonic clock: the fence's own
        // monotonic deadline bounds it, not the wall-clock `until_ms`.
        self.apply(Some(limit.deadline), None, limit.resume_above_ms);
    }

    fn fence(&self, fenced: Fenced) {
        self.apply(None, Some(fenced.reason), fenced.resume_above_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::Grantee;
    use snowflake_core::ManualClock;
    use snowflake_fleet::{Fence, apply_fence};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    #[test]
    fn the_fence_is_published_with_its_deadline_and_highest_floor() {
        let grantee = Grantee::new(Arc::new(ManualClock::new(1_000)));
        let mut changes = grantee.subscribe();
        assert_eq!(grantee.fencing().held_until, None);
        let until = Instant::now() + Duration::from_secs(8);
        apply_fence(
            &grantee,
            &Fence::Held {
                until,
                floor_ms: 700,
            },
        );
        assert!(changes.has_changed().unwrap());
        let fencing = changes.borrow_and_update().clone();
        assert_eq!((fencing.held_until, fencing.floor_ms), (Some(until), 700));
        assert!(fencing.left(Instant::now()) <= Duration::from_secs(8));
        // The database answered: a floor below its last issued ID is not passed again, but the
        // one already learnt stays.
        grantee.observed(Some(900));
        apply_fence(
            &grantee,
            &Fence::Held {
                until,
                floor_ms: 800,
            },
        );
        assert_eq!(grantee.fencing().floor_ms, 700);
        apply_fence(
            &grantee,
            &Fence::Lost {
                reason: "gone".into(),
            },
        );
        let fencing = grantee.fencing();
        assert_eq!(fencing.held_until, None);
        assert_eq!(fencing.reason.as_deref(), Some("gone"));
        assert_eq!(fencing.left(Instant::now()), Duration::ZERO);
    }
}

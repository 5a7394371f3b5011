//! The issuer a fleet fences: the small trait an ID issuer implements (the server's node; a
//! keeper granting a PostgreSQL extension its issue limit), and the driver that applies every
//! change of a coordinator's fence to it, closing it the instant a deadline passes.

use crate::fence::{Fence, FenceLimit};
use std::time::Instant;
use tokio::sync::watch;

/// Something that issues IDs under a leased pair, as the fleet fences it. The fleet only ever
/// moves its limit (up to a fence's deadline, or down to nothing) and raises its floor (a
/// re-claim read another holder's mark); what that means for the issuer's own state (its
/// phases, its reservation, its logs) is its own business.
pub trait Issuer: Send + Sync {
    /// The issuer's wall clock now (Unix ms): a fence's monotonic deadline is turned into a
    /// wall-clock limit with it.
    fn now_ms(&self) -> u64;

    /// The timestamp (Unix ms) of the last ID issued, or of the mark resumed above; `None`
    /// before either.
    fn last_issued_ms(&self) -> Option<u64>;

    /// The fence is up: IDs may carry timestamps up to `limit.until_ms` (the issuer's other
    /// limits, such as its persisted reservation, still apply).
    fn set_issue_limit(&self, limit: IssueLimit);

    /// The fence is down: issue nothing until the next [`Issuer::set_issue_limit`].
    fn fence(&self, fenced: Fenced);
}

/// The fence is up: how far the issuer may go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssueLimit {
    /// The last millisecond (Unix ms) an ID may carry.
    pub until_ms: u64,
    /// The same deadline on the monotonic clock (the fence's own): for an issuer whose limit
    /// is a duration rather than a wall-clock time, such as a keeper's grant that lapses on its
    /// own.
    pub deadline: Instant,
    /// A floor above the last issued ID: a previous holder may have issued up to it, so the
    /// issuer resumes above it before it uses the new limit.
    pub resume_above_ms: Option<u64>,
    /// The issuer's clock reading (Unix ms) the limit was computed from.
    pub at_ms: u64,
}

/// The fence is down: why, and a floor learnt meanwhile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fenced {
    /// Why nothing may be issued, in words.
    pub reason: String,
    /// As [`IssueLimit::resume_above_ms`]: a held fence whose deadline passed still carries the
    /// floor of its claim.
    pub resume_above_ms: Option<u64>,
    /// The issuer's clock reading (Unix ms) this was decided at.
    pub at_ms: u64,
}

/// Applies `fence` to `issuer` now: its floor (when above the last issued ID), then its limit.
pub fn apply_fence(issuer: &dyn Issuer, fence: &Fence) {
    let now_ms = issuer.now_ms();
    let resume_above_ms = fence
        .floor_ms()
        .filter(|floor_ms| issuer.last_issued_ms().is_none_or(|last| last < *floor_ms));
    match fence.limit_at(now_ms) {
        FenceLimit::Until { until_ms } => issuer.set_issue_limit(IssueLimit {
            until_ms,
            deadline: fence.deadline().unwrap_or_else(Instant::now),
            resume_above_ms,
            at_ms: now_ms,
        }),
        FenceLimit::Down { reason } => issuer.fence(Fenced {
            reason,
            resume_above_ms,
            at_ms: now_ms,
        }),
    }
}

/// What a fence whose sender is gone says: nothing will renew it any more.
pub const KEEPER_STOPPED: &str = "the lease keeper stopped";

/// Runs until `shutdown` flips (or its sender is dropped): applies every change of `fence` to
/// `issuer` at once, and applies it again the instant a held fence's deadline passes on the
/// monotonic clock (the wall-clock limit already stops the issuer then; this also covers a
/// wall clock stepped backwards). When the coordinator is gone (its sender dropped), fences
/// the issuer for good.
pub async fn keep_fence(
    issuer: &dyn Issuer,
    mut fence: watch::Receiver<Fence>,
    mut shutdown: watch::Receiver<bool>,
) {
    // Whatever changed since the receiver was subscribed.
    let current = fence.borrow_and_update().clone();
    apply_fence(issuer, &current);
    // The deadline whose passing was already applied.
    let mut expired: Option<std::time::Instant> = None;
    loop {
        let expiry = match &*fence.borrow() {
            Fence::Held { until, .. } if Some(*until) != expired => Some(*until),
            _ => None,
        };
        tokio::select! {
            changed = fence.changed() => match changed {
                Ok(()) => {
                    let current = fence.borrow_and_update().clone();
                    apply_fence(issuer, &current);
                }
                // The coordinator is gone: nothing will renew the fence any more.
                Err(_) => {
                    apply_fence(issuer, &Fence::Lost {
                        reason: KEEPER_STOPPED.into(),
                    });
                    return;
                }
            },
            () = async {
                match expiry {
                    Some(until) => tokio::time::sleep_until(tokio::time::Instant::from_std(until)).await,
                    None => std::future::pending().await,
                }
            } => {
                let current = fence.borrow().clone();
                apply_fence(issuer, &current);
                expired = expiry;
            }
            _ = shutdown.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Fenced, IssueLimit, Issuer, KEEPER_STOPPED, apply_fence, keep_fence};
    use crate::fence::{Fence, NOT_RENEWED};
    use std::sync::Mutex;
    use std::time::{Duration, Instant};
    use tokio::sync::watch;

    /// An issuer that records what the fleet told it.
    #[derive(Debug, Default)]
    struct Recorder {
        last_issued_ms: Option<u64>,
        told: Mutex<Vec<Told>>,
    }

    #[derive(Debug, Clone, PartialEq, Eq)]
    enum Told {
        Limit(IssueLimit),
        Fenced(Fenced),
    }

    impl Issuer for Recorder {
        fn now_ms(&self) -> u64 {
            1_000
        }
        fn last_issued_ms(&self) -> Option<u64> {
            self.last_issued_ms
        }
        fn set_issue_limit(&self, limit: IssueLimit) {
            self.told.lock().unwrap().push(Told::Limit(limit));
        }
        fn fence(&self, fenced: Fenced) {
            self.told.lock().unwrap().push(Told::Fenced(fenced));
        }
    }

    impl Recorder {
        fn told(&self) -> Vec<Told> {
            self.told.lock().unwrap().clone()
        }
    }

    #[test]
    fn a_floor_above_the_last_issued_id_is_passed_on_held_or_not() {
        let issuer = Recorder {
            last_issued_ms: Some(500),
            ..Recorder::default()
        };
        let until = Instant::now() + Duration::from_secs(60);
        apply_fence(
            &issuer,
            &Fence::Held {
                until,
                floor_ms: 400,
            },
        );
        apply_fence(
            &issuer,
            &Fence::Held {
                until,
                floor_ms: 700,
            },
        );
        apply_fence(
            &issuer,
            &Fence::Held {
                until: Instant::now(),
                floor_ms: 800,
            },
        );
        let told = issuer.told();
        let Told::Limit(first) = &told[0] else {
            panic!("{told:?}")
        };
        assert_eq!((first.resume_above_ms, first.at_ms), (None, 1_000));
        assert!(first.until_ms > 50_000, "{first:?}");
        assert_eq!(first.deadline, until, "the fence's own monotonic deadline");
        let Told::Limit(second) = &told[1] else {
            panic!("{told:?}")
        };
        assert_eq!(second.resume_above_ms, Some(700));
        assert_eq!(
            told[2],
            Told::Fenced(Fenced {
                reason: NOT_RENEWED.into(),
                resume_above_ms: Some(800),
                at_ms: 1_000,
            })
        );
    }

    #[tokio::test]
    async fn the_driver_applies_changes_deadlines_and_the_coordinators_end() {
        let issuer = Recorder::default();
        let (fence_tx, fence_rx) = watch::channel(Fence::Held {
            until: Instant::now() + Duration::from_secs(3600),
            floor_ms: 0,
        });
        let (_stop_tx, stop_rx) = watch::channel(false);
        let driver = async {
            keep_fence(&issuer, fence_rx, stop_rx).await;
        };
        let steps = async {
            tokio::task::yield_now().await;
            fence_tx.send_replace(Fence::Lost {
                reason: "gone".into(),
            });
            tokio::task::yield_now().await;
            drop(fence_tx);
        };
        tokio::time::timeout(Duration::from_secs(5), async {
            tokio::join!(driver, steps)
        })
        .await
        .expect("the driver returns once the coordinator is gone");
        let told = issuer.told();
        assert!(matches!(told[0], Told::Limit(_)), "{told:?}");
        let reasons: Vec<&str> = told
            .iter()
            .filter_map(|t| match t {
                Told::Fenced(f) => Some(f.reason.as_str()),
                Told::Limit(_) => None,
            })
            .collect();
        assert_eq!(reasons, ["gone", KEEPER_STOPPED], "{told:?}");
    }

    #[tokio::test]
    async fn the_driver_closes_the_issuer_when_the_deadline_passes() {
        let issuer = Recorder::default();
        let (_fence_tx, fence_rx) = watch::channel(Fence::Held {
            until: Instant::now() + Duration::from_millis(50),
            floor_ms: 0,
        });
        let (stop_tx, stop_rx) = watch::channel(false);
        let driver = keep_fence(&issuer, fence_rx, stop_rx);
        let stopper = async {
            let deadline = Instant::now() + Duration::from_secs(5);
            while !issuer
                .told()
                .iter()
                .any(|t| matches!(t, Told::Fenced(f) if f.reason == NOT_RENEWED))
            {
                assert!(Instant::now() < deadline, "never fenced at the deadline");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            stop_tx.send_replace(true);
        };
        tokio::join!(driver, stopper);
    }
}

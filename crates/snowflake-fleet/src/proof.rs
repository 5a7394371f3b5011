//! The proof of holding a pair: the bookkeeping of the fence that etcd's lease and ZooKeeper's
//! session share (until when the pair is provably held, the floor of its claim, whether the
//! last renewal failed, why it was lost), and the watch channel that tells the issuer.

use crate::fence::Fence;
use crate::lease_info::{LeaseInfo, LeaseStatus};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;
use tokio::sync::watch;

/// What a coordinator proves about holding its pair, and the fence that tells the node: the
/// part of the lease logic etcd and ZooKeeper share. `T` is the coordinator's own state (etcd's
/// lease, ZooKeeper's session), kept under the same lock so that it changes together with the
/// proof. The transitions return what changed, for the coordinator to log in its own words.
#[derive(Debug)]
pub(crate) struct Proof<T> {
    state: Mutex<Proven<T>>,
    fence: watch::Sender<Fence>,
    renewals: AtomicU64,
    renewal_failures: AtomicU64,
    losses: AtomicU64,
    /// Free pairs the claim passed over because their mark was far ahead of the clock.
    skipped_ahead: u64,
}

/// The state behind [`Proof`]'s lock.
#[derive(Debug)]
pub(crate) struct Proven<T> {
    /// The coordinator's own state.
    pub(crate) own: T,
    /// Until when the pair is provably held (already less the margin); `None` when lost.
    until: Option<Instant>,
    /// The mark read at the last claim.
    pub(crate) floor_ms: u64,
    /// The last renewal failed (the pair may still be held).
    renewing: bool,
    /// Why the pair is not held, when it is not.
    lost_reason: Option<String>,
    /// Why the coordinator cannot see changes to its claim right now (an etcd watch on a member
    /// without a leader): the issuer is fenced until it sees again, however the lease renews.
    blind_reason: Option<String>,
}

impl<T> Proven<T> {
    /// Why the pair is not held, when it is not.
    pub(crate) fn lost_reason(&self) -> Option<&str> {
        self.lost_reason.as_deref()
    }

    /// Whether the coordinator cannot see changes to its claim right now.
    pub(crate) fn is_blind(&self) -> bool {
        self.blind_reason.is_some()
    }
}

/// What a failed renewal changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RenewalFailure {
    /// The first failure in a row (the one worth a warning).
    pub(crate) first: bool,
    /// The proof has run out: the issuer is fenced until a renewal goes through.
    pub(crate) late: bool,
}

/// The coordinator's own description of its lease or session, for [`Proof::info`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LeaseDescription {
    /// The lease's or session's id, as the service shows it.
    pub(crate) lease_id: Option<String>,
    /// The TTL (or session timeout) in seconds.
    pub(crate) ttl_secs: u64,
}

impl<T> Proof<T> {
    /// Just claimed: held until `until`, above `floor_ms`.
    pub(crate) fn new(own: T, until: Instant, floor_ms: u64) -> Proof<T> {
        let (fence, _) = watch::channel(Fence::Held { until, floor_ms });
        Proof {
            state: Mutex::new(Proven {
                own,
                until: Some(until),
                floor_ms,
                renewing: false,
                lost_reason: None,
                blind_reason: None,
            }),
            fence,
            renewals: AtomicU64::new(0),
            renewal_failures: AtomicU64::new(0),
            losses: AtomicU64::new(0),
            skipped_ahead: 0,
        }
    }

    /// The claim passed over `skipped` free pairs whose mark was far ahead of the clock.
    pub(crate) fn with_skipped_ahead(mut self, skipped: u64) -> Proof<T> {
        self.skipped_ahead = skipped;
        self
    }

    /// The state; nothing panics while holding it, but a poisoned lock is still usable.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Proven<T>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The fence (see [`crate::Coordinator::fence`]).
    pub(crate) fn fence(&self) -> watch::Receiver<Fence> {
        self.fence.subscribe()
    }

    /// A renewal went through: held until `until`; `update` changes the coordinator's own state
    /// under the same lock. Returns whether the renewal before it had failed.
    ///
    /// A renewal that raced a loss (answered before it, processed after) changes nothing: only
    /// [`Proof::held_again`] reopens a lost fence. The fence is published under the lock, so a
    /// loss and a renewal are seen in the order they happened.
    pub(crate) fn renewed(&self, until: Instant, update: impl FnOnce(&mut T)) -> bool {
        let mut state = self.lock();
        if state.lost_reason.is_some() {
            return false;
        }
        let was_renewing = state.renewing;
        state.renewing = false;
        update(&mut state.own);
        state.until = Some(until);
        self.renewals.fetch_add(1, Ordering::Relaxed);
        self.fence.send_replace(match &state.blind_reason {
            Some(reason) => Fence::Lost {
                reason: reason.clone(),
            },
            None => Fence::Held {
                until,
                floor_ms: state.floor_ms,
            },
        });
        was_renewing
    }

    /// The coordinator cannot see changes to its claim (`reason`): fence the issuer until
    /// [`Proof::seeing`], whatever the renewals say. The pair is not lost (nothing says it is
    /// gone), so nothing is claimed again and no loss is counted. Returns whether it saw until
    /// now.
    pub(crate) fn blind(&self, reason: String) -> bool {
        let mut state = self.lock();
        let first = state.blind_reason.is_none();
        state.blind_reason = Some(reason.clone());
        if state.lost_reason.is_none() {
            self.fence.send_replace(Fence::Lost { reason });
        }
        first
    }

    /// The coordinator sees changes to its claim again (and has just read it as its own): the
    /// fence is the lease's again. Returns whether it was blind.
    pub(crate) fn seeing(&self) -> bool {
        let mut state = self.lock();
        if state.blind_reason.take().is_none() {
            return false;
        }
        if state.lost_reason.is_none()
            && let Some(until) = state.until
        {
            self.fence.send_replace(Fence::Held {
                until,
                floor_ms: state.floor_ms,
            });
        }
        true
    }

    /// A renewal failed (the pair may still be held until the fence runs out): whether it is
    /// the first failure in a row, and whether the proof has run out.
    pub(crate) fn renewal_failed(&self) -> RenewalFailure {
        self.renewal_failures.fetch_add(1, Ordering::Relaxed);
        let (first, until) = {
            let mut state = self.lock();
            let first = !state.renewing;
            state.renewing = true;
            (first, state.until)
        };
        RenewalFailure {
            first,
            late: until.is_some_and(|u| Instant::now() >= u),
        }
    }

    /// The pair is gone (the service says so): fence at once. Returns whether it was held
    /// until now (a loss, counted), rather than already lost.
    pub(crate) fn lose(&self, reason: String) -> bool {
        let mut state = self.lock();
        let first = state.lost_reason.is_none();
        state.until = None;
        state.lost_reason = Some(reason.clone());
        if first {
            self.losses.fetch_add(1, Ordering::Relaxed);
        }
        self.fence.send_replace(Fence::Lost { reason });
        first
    }

    /// [`Proof::lose`], but only while `current` says the coordinator's state is still the one
    /// the loss was found for (a re-claim may have replaced the lease or session meanwhile).
    pub(crate) fn lose_if(&self, current: impl FnOnce(&T) -> bool, reason: String) -> bool {
        let mut state = self.lock();
        if state.lost_reason.is_some() || !current(&state.own) {
            return false;
        }
        state.until = None;
        state.lost_reason = Some(reason.clone());
        self.losses.fetch_add(1, Ordering::Relaxed);
        self.fence.send_replace(Fence::Lost { reason });
        true
    }

    /// Held again after a loss, until `until` and above `floor_ms`; `update` installs the new
    /// lease or session under the same lock.
    pub(crate) fn held_again(&self, until: Instant, floor_ms: u64, update: impl FnOnce(&mut T)) {
        let mut state = self.lock();
        update(&mut state.own);
        state.until = Some(until);
        state.floor_ms = floor_ms;
        state.renewing = false;
        state.lost_reason = None;
        self.fence.send_replace(match &state.blind_reason {
            Some(reason) => Fence::Lost {
                reason: reason.clone(),
            },
            None => Fence::Held { until, floor_ms },
        });
    }

    /// Given up at shutdown.
    pub(crate) fn released(&self) {
        const RELEASED: &str = "released at shutdown";
        let mut state = self.lock();
        state.until = None;
        state.lost_reason = Some(RELEASED.into());
        self.fence.send_replace(Fence::Lost {
            reason: RELEASED.into(),
        });
    }

    /// The lease for `/v1/info` and the metrics. `out_of_reach` explains a deadline that passed
    /// without a renewal; `describe` gives the lease id and TTL from the coordinator's state.
    pub(crate) fn info(
        &self,
        key: &str,
        out_of_reach: &str,
        describe: impl FnOnce(&T) -> LeaseDescription,
    ) -> LeaseInfo {
        let state = self.lock();
        let LeaseStatus {
            state: label,
            reason,
            remaining_ms,
        } = LeaseInfo::status(
            state
                .lost_reason
                .as_deref()
                .or(state.blind_reason.as_deref()),
            state.until,
            state.renewing,
            out_of_reach,
        );
        let LeaseDescription { lease_id, ttl_secs } = describe(&state.own);
        LeaseInfo {
            state: label,
            lease_id,
            ttl_secs,
            remaining_ms,
            key: key.to_owned(),
            reason,
            renewals: self.renewals.load(Ordering::Relaxed),
            renewal_failures: self.renewal_failures.load(Ordering::Relaxed),
            losses: self.losses.load(Ordering::Relaxed),
            skipped_ahead: self.skipped_ahead,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{LeaseDescription, Proof, RenewalFailure};
    use crate::fence::Fence;
    use std::time::{Duration, Instant};

    /// No lease id, and `ttl_secs` as the TTL.
    fn ttl(ttl_secs: u64) -> LeaseDescription {
        LeaseDescription {
            lease_id: None,
            ttl_secs,
        }
    }

    #[test]
    fn a_proof_goes_through_renewals_a_loss_a_new_hold_and_the_release() {
        let until = Instant::now() + Duration::from_secs(60);
        let proof = Proof::new(7_u32, until, 100);
        let fence = proof.fence();
        assert_eq!(
            *fence.borrow(),
            Fence::Held {
                until,
                floor_ms: 100
            }
        );
        assert_eq!(
            proof.info("k", "late", |own| ttl(u64::from(*own))).state,
            "held"
        );

        // Failures: only the first in a row is new; the proof has not run out.
        assert_eq!(
            proof.renewal_failed(),
            RenewalFailure {
                first: true,
                late: false
            }
        );
        assert_eq!(
            proof.renewal_failed(),
            RenewalFailure {
                first: false,
                late: false
            }
        );
        assert_eq!(proof.info("k", "late", |_| ttl(0)).state, "renewing");
        let later = until + Duration::from_secs(1);
        assert!(proof.renewed(later, |own| *own = 8), "it was renewing");
        assert!(!proof.renewed(later, |_| {}));
        assert_eq!(
            *fence.borrow(),
            Fence::Held {
                until: later,
                floor_ms: 100
            }
        );
        let info = proof.info("k", "late", |own| LeaseDescription {
            lease_id: Some(own.to_string()),
            ttl_secs: 1,
        });
        assert_eq!((info.state, info.lease_id.as_deref()), ("held", Some("8")));
        assert_eq!(
            (info.renewals, info.renewal_failures, info.losses),
            (2, 2, 0)
        );

        // A loss fences at once and counts once.
        assert!(proof.lose("gone".into()));
        assert!(!proof.lose("still gone".into()));
        assert_eq!(proof.lock().lost_reason(), Some("still gone"));
        assert_eq!(
            *fence.borrow(),
            Fence::Lost {
                reason: "still gone".into()
            }
        );
        let info = proof.info("k", "late", |_| ttl(0));
        assert_eq!((info.state, info.remaining_ms, info.losses), ("lost", 0, 1));

        // Held again, above a new floor, with the coordinator's new state.
        proof.held_again(later, 250, |own| *own = 9);
        assert_eq!(
            *fence.borrow(),
            Fence::Held {
                until: later,
                floor_ms: 250
            }
        );
        assert_eq!(proof.lock().lost_reason(), None);
        assert_eq!(proof.lock().own, 9);

        proof.released();
        assert_eq!(
            *fence.borrow(),
            Fence::Lost {
                reason: "released at shutdown".into()
            }
        );
    }

    #[test]
    fn a_renewal_that_races_a_loss_does_not_reopen_the_fence() {
        let until = Instant::now() + Duration::from_secs(60);
        let proof = Proof::new(1_u32, until, 100);
        let fence = proof.fence();
        assert!(proof.lose("taken away".into()));
        // A keep-alive answered before the loss, processed after it.
        proof.renewed(until + Duration::from_secs(30), |own| *own = 2);
        assert_eq!(
            *fence.borrow(),
            Fence::Lost {
                reason: "taken away".into()
            },
            "a renewal after the loss reopened the fence"
        );
        let info = proof.info("k", "late", |_| ttl(0));
        assert_eq!(
            (info.state, info.remaining_ms, info.reason.as_deref()),
            ("lost", 0, Some("taken away"))
        );
        // Only a new hold reopens it.
        proof.held_again(until, 300, |own| *own = 3);
        assert_eq!(
            *fence.borrow(),
            Fence::Held {
                until,
                floor_ms: 300
            }
        );
    }

    #[test]
    fn a_blind_proof_fences_through_renewals_until_it_sees_again() {
        let until = Instant::now() + Duration::from_secs(60);
        let proof = Proof::new(1_u32, until, 100);
        let fence = proof.fence();
        assert!(proof.blind("no leader".into()));
        assert!(!proof.blind("still no leader".into()));
        assert_eq!(
            *fence.borrow(),
            Fence::Lost {
                reason: "still no leader".into()
            }
        );
        // A renewal through another member keeps the lease, not the view of the claim.
        let later = until + Duration::from_secs(10);
        proof.renewed(later, |own| *own = 2);
        assert_eq!(
            *fence.borrow(),
            Fence::Lost {
                reason: "still no leader".into()
            }
        );
        let info = proof.info("k", "late", |_| ttl(0));
        assert_eq!(
            (info.state, info.reason.as_deref(), info.losses),
            ("lost", Some("still no leader"), 0),
            "blind is shown, and no loss is counted"
        );
        // Seeing again: the lease's own fence, with the renewed deadline.
        assert!(proof.seeing());
        assert!(!proof.seeing());
        assert_eq!(
            *fence.borrow(),
            Fence::Held {
                until: later,
                floor_ms: 100
            }
        );
        // A loss while blind stays a loss when the view comes back.
        proof.blind("no leader".into());
        proof.lose("gone".into());
        proof.seeing();
        assert_eq!(
            *fence.borrow(),
            Fence::Lost {
                reason: "gone".into()
            }
        );
    }

    #[test]
    fn a_proof_whose_deadline_passed_is_late() {
        let proof = Proof::new((), Instant::now(), 0);
        assert_eq!(
            proof.renewal_failed(),
            RenewalFailure {
                first: true,
                late: true
            }
        );
        let info = proof.info("k", "out of reach", |()| ttl(0));
        assert_eq!(
            (info.state, info.reason.as_deref()),
            ("lost", Some("out of reach"))
        );
    }
}

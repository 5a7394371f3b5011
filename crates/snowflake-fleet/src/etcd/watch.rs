//! The claim key watched: a claim deleted or taken over by hand (`etcdctl del`, even of the
//! whole prefix) fences the holder at once, not at its next mark write.
//!
//! The watch requires a leader (etcd's `hasleader` metadata): a member cut off from the quorum
//! would otherwise keep the stream open and silent, and a deletion the quorum applied would
//! never reach it, while the keep-alives renew the lease through another member. Such a
//! member cancels the watch ("no leader") once it has had no leader for a few election
//! timeouts: the stream may have been silent while the quorum moved on, so that fences the node
//! (the proof's blind state) until a watch is open on a member with a leader and its first
//! read finds the claim still this node's. A member that refuses to open a watch for want of
//! a leader (an election under way) has missed nothing: the next member is tried.

use super::{EtcdLease, RETRY_PAUSE, call_timeout};
use std::time::Duration;

/// Pause before opening the watch again on the next member after one said it has no leader.
const NO_LEADER_PAUSE: Duration = Duration::from_millis(100);
use tokio::sync::watch;

impl EtcdLease {
    /// Watches the claim key while the pair is held, so that a claim deleted or taken over by
    /// hand (`etcdctl del`, even of the whole prefix, marks included) fences the node at once
    /// rather than at its next mark write, up to half a reservation later. Best effort: a watch
    /// that fails is opened again, and each (re)opening reads the key once; the mark writes'
    /// lease compare stays what guarantees that no mark is written without the claim.
    pub(super) async fn watch_claim(&self, mut stop: watch::Receiver<bool>) {
        // The fault campaign's self-test build must go on issuing without its claim.
        if cfg!(snowflake_campaign_bug) {
            let _ = stop.wait_for(|s| *s).await;
            return;
        }
        // Failures to open it in a row: the first is logged (etcd out of reach, or a user
        // without read permission on the key), the rest only at debug level.
        let mut failures = 0_u32;
        loop {
            if *stop.borrow() {
                return;
            }
            let (ttl_secs, lost) = {
                let state = self.proof.lock();
                (state.own.ttl_secs, state.lost_reason().is_some())
            };
            if lost {
                // The keep-alive loop claims the pair again; watch once it holds it.
                tokio::select! {
                    () = tokio::time::sleep(RETRY_PAUSE) => continue,
                    _ = stop.wait_for(|s| *s) => return,
                }
            }
            let timeout = call_timeout(ttl_secs);
            let opened = tokio::select! {
                opened = self.client.watch_key(&self.claim_key, timeout) => opened,
                _ = stop.wait_for(|s| *s) => return,
            };
            let mut claim = match opened {
                Ok(claim) => {
                    failures = 0;
                    claim
                }
                Err(err) if err.is_no_leader() => {
                    // Refused at once by a member without a leader (an election, or cut off):
                    // nothing was missed by refusing, so it only moves on to the next member
                    // (the client already did). A node that is blind stays so until a watch
                    // opens.
                    tracing::debug!(error = %err, key = %self.claim_key, "the member has no leader; watching on the next one");
                    tokio::select! {
                        () = tokio::time::sleep(NO_LEADER_PAUSE) => continue,
                        _ = stop.wait_for(|s| *s) => return,
                    }
                }
                Err(err) => {
                    failures = failures.saturating_add(1);
                    if failures == 1 {
                        tracing::warn!(error = %err, key = %self.claim_key, "cannot watch the claim key; a claim deleted by hand is noticed at the next mark write until the watch is open");
                    } else {
                        tracing::debug!(error = %err, key = %self.claim_key, "cannot watch the claim key yet");
                    }
                    tokio::select! {
                        () = tokio::time::sleep(RETRY_PAUSE) => continue,
                        _ = stop.wait_for(|s| *s) => return,
                    }
                }
            };
            // Whatever happened before the watch started; seen again if it is still ours.
            if self.check_claim(timeout).await {
                if self.proof.seeing() {
                    tracing::info!(key = %self.claim_key, "the claim is watched again on a member with a leader");
                }
            } else if self.proof.lock().is_blind() {
                // Fenced until the claim is read as ours: open again soon rather than wait on
                // this watch for a TTL.
                tokio::select! {
                    () = tokio::time::sleep(RETRY_PAUSE) => continue,
                    _ = stop.wait_for(|s| *s) => return,
                }
            }
            // Opened again now and then: a member cut off from the others keeps a stream open
            // and silent.
            let reopen = tokio::time::sleep(Duration::from_secs(ttl_secs.max(1)));
            tokio::pin!(reopen);
            loop {
                let next = tokio::select! {
                    next = claim.next() => next,
                    () = &mut reopen => break,
                    _ = stop.wait_for(|s| *s) => return,
                };
                match next {
                    Ok(response) if response.canceled => break,
                    Ok(response) => {
                        if !response.events.is_empty() {
                            self.check_claim(timeout).await;
                        }
                    }
                    Err(err) if err.is_no_leader() => {
                        self.blind(&err);
                        self.client.watch_failed(&claim);
                        break;
                    }
                    Err(err) => {
                        tracing::debug!(error = %err, key = %self.claim_key, "the watch on the claim key ended");
                        break;
                    }
                }
            }
        }
    }

    /// The watch's member has no leader: fence until the claim is watched again.
    fn blind(&self, err: &super::EtcdError) {
        let reason = format!(
            "the etcd member {} watching this node's claim has no leader (cut off from the \
             quorum, or an election is under way), so a deletion of the claim could go unseen; \
             not issuing ids until the claim is watched on a member with a leader",
            err.endpoint()
        );
        if self.proof.blind(reason.clone()) {
            tracing::warn!(key = %self.claim_key, %reason, "fenced: the claim cannot be watched");
        }
    }

    /// Reads the claim key: gone, or attached to another lease, while this node holds the pair
    /// under the lease it read it for, fences the node at once. Whether the read found the
    /// claim still this node's.
    async fn check_claim(&self, timeout: Duration) -> bool {
        let lease_id = {
            let state = self.proof.lock();
            if state.lost_reason().is_some() {
                return false;
            }
            state.own.lease_id
        };
        let Ok(kv) = self.client.get_key(&self.claim_key, timeout).await else {
            // Out of reach: the keep-alives say how long the pair is held.
            return false;
        };
        let reason = match kv {
            None => format!("{} was deleted", self.claim_key),
            Some(kv) if kv.lease != lease_id => format!(
                "{} is attached to lease {:x}, not this node's {lease_id:x}",
                self.claim_key, kv.lease
            ),
            Some(_) => return true,
        };
        if self
            .proof
            .lose_if(|lease| lease.lease_id == lease_id, reason.clone())
        {
            tracing::error!(key = %self.claim_key, %reason, "lost the pair: not issuing ids until it is claimed again");
        }
        false
    }
}

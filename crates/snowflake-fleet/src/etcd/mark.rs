//! The mark written ahead of use: a transaction conditional on the claim key's lease and on
//! the mark's `mod_revision` as this holder last knew it, so a late write can never lower it
//! and a holder that lost its claim can never write it.

use super::txn::{first_kvs, get, lease_is, mod_revision_is, put};
use super::{EtcdLease, call_timeout, pb};
use crate::error::FleetError;
use crate::mark::{Mark, mark_json, parse_mark};

/// How many conditional writes one mark write makes at most when it finds the mark moved by
/// this node's own earlier, late writes.
const MARK_ATTEMPTS: usize = 4;

impl EtcdLease {
    /// Writes `mark_ms` (see [`crate::Coordinator::store_mark`] and the module doc's "Mark"): a
    /// transaction conditional on the claim key's lease and on the mark's `mod_revision` as
    /// this node last knew it.
    pub(super) async fn write_mark(&self, mark_ms: u64) -> Result<(), FleetError> {
        let (lease_id, ttl_secs, mut revision, floor_ms) = {
            let state = self.proof.lock();
            if let Some(reason) = state.lost_reason() {
                return Err(FleetError::NotHeld {
                    holding: "lease",
                    reason: reason.to_owned(),
                });
            }
            (
                state.own.lease_id,
                state.own.ttl_secs,
                state.own.mark_revision,
                state.floor_ms,
            )
        };
        // Never below the floor the claim of this lease read: a reservation the node computed
        // before a re-claim can land after it, and the mark it replaces is another holder's.
        let mark_ms = mark_ms.max(floor_ms);
        let writer = format!("{lease_id:x}");
        let value = mark_json(mark_ms, &self.layout, "lease", &writer);
        for _ in 0..MARK_ATTEMPTS {
            // A build for the fault campaign's self-test (`--cfg snowflake_campaign_bug`,
            // never a release) skips the lease compare, so that a node whose claim was deleted
            // goes on issuing: the campaign must catch it.
            let compare = if cfg!(snowflake_campaign_bug) {
                vec![mod_revision_is(&self.mark_key, revision)]
            } else {
                vec![
                    lease_is(&self.claim_key, lease_id),
                    mod_revision_is(&self.mark_key, revision),
                ]
            };
            let request = pb::TxnRequest {
                compare,
                success: vec![put(&self.mark_key, value.clone(), 0)],
                failure: vec![get(&self.claim_key), get(&self.mark_key)],
            };
            let response = self.client.txn(request, call_timeout(ttl_secs)).await?;
            if response.succeeded {
                // The put's revision is the transaction's: the mark's new mod_revision.
                let written = response.header.map_or(0, |h| h.revision);
                self.learn_mark_revision(lease_id, written);
                return Ok(());
            }
            let mut ranges = first_kvs(response);
            let (claim, mark) = (ranges.next().flatten(), ranges.next().flatten());
            if !cfg!(snowflake_campaign_bug) && claim.as_ref().is_none_or(|kv| kv.lease != lease_id)
            {
                let reason = format!(
                    "{} is no longer attached to this node's lease {writer}",
                    self.claim_key
                );
                // Only this lease's loss: a write sent before a re-claim must not fence the
                // lease that replaced it.
                if self
                    .proof
                    .lose_if(|lease| lease.lease_id == lease_id, reason.clone())
                {
                    tracing::error!(key = %self.claim_key, %reason, "lost the lease: not issuing ids until the pair is claimed again");
                }
                return Err(FleetError::Lost(reason));
            }
            // Still ours, but the mark moved since this node last wrote it: one of its own
            // writes that timed out was applied late. Never write below what it holds.
            let Some(mark) = mark else {
                // Deleted (by hand): nothing to protect.
                revision = 0;
                continue;
            };
            let Mark {
                high_water_ms: stored_ms,
                writer: stored_writer,
            } = parse_mark(&mark.value, &self.layout, "lease").map_err(|reason| {
                FleetError::UnusableMark {
                    context: format!(
                        "the high-water mark in etcd ({}) changed under this node and is unusable",
                        self.mark_key
                    ),
                    source: reason,
                    consequence: "",
                }
            })?;
            if stored_writer.as_deref() != Some(writer.as_str()) {
                tracing::warn!(
                    key = %self.mark_key,
                    writer = stored_writer.as_deref().unwrap_or("(none)"),
                    stored_ms,
                    "the high-water mark was written by someone else while this node holds the pair"
                );
            }
            self.learn_mark_revision(lease_id, mark.mod_revision);
            if stored_ms >= mark_ms {
                return Ok(());
            }
            revision = mark.mod_revision;
        }
        Err(FleetError::KeptChanging(format!(
            "the high-water mark in etcd ({}) kept changing: {MARK_ATTEMPTS} conditional writes \
             of {mark_ms} found it moved",
            self.mark_key
        )))
    }

    /// Records the mark's `mod_revision` after a write (or a read) under `lease_id`; revisions
    /// only grow, and a lease replaced meanwhile keeps its own.
    fn learn_mark_revision(&self, lease_id: i64, revision: i64) {
        let mut state = self.proof.lock();
        if state.own.lease_id == lease_id {
            state.own.mark_revision = state.own.mark_revision.max(revision);
        }
    }
}

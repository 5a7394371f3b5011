//! Keeping the lease: a keep-alive every third of the TTL on one stream (the next member
//! when it fails), each success proving the pair held for the TTL from when it was sent; after
//! an expiry, the same pair claimed again with a new lease, its mark read again.

use super::claim::{Attempt, Claim, ClaimedMark, try_claim};
use super::client::KeepAliveStream;
use super::layout::ensure_layout;
use super::{
    EtcdLease, RETRY_PAUSE, call_timeout, held_until, keep_alive_interval, to_i64, trusted_ttl,
};
use crate::error::FleetError;
use crate::proof::RenewalFailure;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Pause before the next keep-alive after one failed.
const RENEW_RETRY_PAUSE: Duration = Duration::from_millis(200);

impl EtcdLease {
    /// The keep-alive loop.
    pub(super) async fn keep_alive(
        &self,
        mut stop: watch::Receiver<bool>,
    ) -> Result<(), FleetError> {
        let mut stream: Option<KeepAliveStream> = None;
        loop {
            if *stop.borrow() {
                return Ok(());
            }
            let (lease_id, ttl_secs, lost) = {
                let state = self.proof.lock();
                let lease = &state.own;
                (
                    lease.lease_id,
                    lease.ttl_secs,
                    state.lost_reason().is_some(),
                )
            };
            if lost {
                stream = None;
                tokio::select! {
                    result = self.reclaim() => result?,
                    _ = stop.wait_for(|s| *s) => return Ok(()),
                }
                continue;
            }
            let interval = keep_alive_interval(ttl_secs);
            let timeout = call_timeout(ttl_secs);
            let sent = Instant::now();
            let outcome = async {
                match stream.as_mut() {
                    Some(open) => open.keep_alive(lease_id, timeout).await,
                    None => {
                        let (open, ttl) = self.client.keep_alive_stream(lease_id, timeout).await?;
                        stream = Some(open);
                        Ok(ttl)
                    }
                }
            };
            let outcome = tokio::select! {
                outcome = outcome => outcome,
                _ = stop.wait_for(|s| *s) => return Ok(()),
            };
            let next = match outcome.map(|ttl| trusted_ttl(ttl, self.config.lease_ttl_secs)) {
                Ok(Some(ttl)) => {
                    let until = held_until(sent, ttl);
                    if self.proof.renewed(until, |lease| lease.ttl_secs = ttl) {
                        tracing::info!(key = %self.claim_key, "lease renewed again");
                    }
                    sent.checked_add(interval).unwrap_or_else(Instant::now)
                }
                Ok(None) => {
                    self.lose(format!(
                        "etcd says lease {lease_id:x} has expired (it was not renewed within its \
                         {ttl_secs} s TTL)"
                    ));
                    continue;
                }
                Err(err) => {
                    let RenewalFailure { first, late } = self.proof.renewal_failed();
                    // (When opening failed, the client already moved on to the next member.)
                    if let Some(open) = stream.take() {
                        self.client.stream_failed(&open);
                    }
                    if first {
                        tracing::warn!(error = %err, key = %self.claim_key, "cannot renew the lease; trying the next etcd member");
                    }
                    if late {
                        tracing::warn!(key = %self.claim_key, "lease not renewed in time: not issuing ids until it is");
                    }
                    Instant::now() + RENEW_RETRY_PAUSE
                }
            };
            tokio::select! {
                () = tokio::time::sleep_until(next.into()) => {}
                _ = stop.wait_for(|s| *s) => return Ok(()),
            }
        }
    }

    /// After the lease expired: claims the same pair with a new lease, reading its mark again.
    /// Fails only when another node holds the pair.
    async fn reclaim(&self) -> Result<(), FleetError> {
        let ttl_secs = self.config.lease_ttl_secs;
        let timeout = call_timeout(ttl_secs);
        let keys = self.keys();
        loop {
            let sent = Instant::now();
            let granted = match self.client.grant(to_i64(ttl_secs), timeout).await {
                Ok(granted) => granted,
                Err(err) => {
                    tracing::debug!(error = %err, "cannot reach etcd to claim the pair again");
                    tokio::time::sleep(RETRY_PAUSE).await;
                    continue;
                }
            };
            let Some(ttl) = trusted_ttl(granted.ttl, ttl_secs) else {
                tracing::debug!(
                    ttl = granted.ttl,
                    "etcd granted a lease with an unusable ttl; asking again"
                );
                let _ = self.client.revoke(granted.id, timeout).await;
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            };
            // The fleet's layout, checked again: an operator may have moved the fleet.
            let layout_value =
                match ensure_layout(&self.client, &self.config.prefix, &self.layout, timeout).await
                {
                    Ok(Ok(value)) => value,
                    Ok(Err(mismatch)) => {
                        let _ = self.client.revoke(granted.id, timeout).await;
                        return Err(FleetError::Layout(mismatch));
                    }
                    Err(err) => {
                        let _ = self.client.revoke(granted.id, timeout).await;
                        tracing::debug!(error = %err, "cannot reach etcd to claim the pair again");
                        tokio::time::sleep(RETRY_PAUSE).await;
                        continue;
                    }
                };
            let claim = Claim {
                lease_id: granted.id,
                holder: &self.holder,
                layout: &self.layout,
                layout_value: &layout_value,
            };
            match try_claim(&self.client, &keys, &claim, timeout).await {
                Ok(Attempt::Claimed(ClaimedMark {
                    floor_ms,
                    writer,
                    mark_revision,
                })) => {
                    let until = held_until(sent, ttl);
                    // A mark this node wrote itself under its previous lease is only a
                    // reservation: its generator knows exactly what it issued, and stays above
                    // that. Anybody else's mark is a floor.
                    let previous = format!("{:x}", self.proof.lock().own.lease_id);
                    let floor_ms = if writer.as_deref() == Some(previous.as_str()) {
                        0
                    } else {
                        floor_ms
                    };
                    self.proof.held_again(until, floor_ms, |lease| {
                        lease.lease_id = granted.id;
                        lease.ttl_secs = ttl;
                        lease.mark_revision = mark_revision;
                    });
                    tracing::info!(
                        key = %self.claim_key,
                        lease = %format!("{:x}", granted.id),
                        takeover_mark_ms = floor_ms,
                        "claimed the pair again"
                    );
                    return Ok(());
                }
                Ok(Attempt::HeldBy { holder }) => {
                    let _ = self.client.revoke(granted.id, timeout).await;
                    return Err(FleetError::Taken(format!(
                        "lost worker {} of datacenter {} to another node while etcd was out of \
                         reach: {holder} (etcd key {}); this node can never serve that pair again, \
                         so it stops (restart it to claim a free pair)",
                        self.worker_id, self.datacenter_id, self.claim_key
                    )));
                }
                Ok(Attempt::LayoutMoved) => {
                    let _ = self.client.revoke(granted.id, timeout).await;
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                Ok(Attempt::Unusable { reason }) => {
                    let _ = self.client.revoke(granted.id, timeout).await;
                    return Err(FleetError::UnusableMark {
                        context: format!(
                            "the high-water mark in etcd ({}) is unusable",
                            self.mark_key
                        ),
                        source: reason,
                        consequence: "; refusing to serve the pair again",
                    });
                }
                Err(err) => {
                    let _ = self.client.revoke(granted.id, timeout).await;
                    tracing::debug!(error = %err, "cannot reach etcd to claim the pair again");
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
            }
        }
    }
}

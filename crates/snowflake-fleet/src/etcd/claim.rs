//! The claim: a lease granted, then one transaction that creates `PREFIX/workers/D/W` under
//! it only if the key is absent and reads `PREFIX/marks/D/W` (the floor); an unpinned node
//! takes the lowest free worker whose mark it can use, giving back one whose mark it cannot.

use super::client::{EtcdClient, EtcdError};
use super::layout::{ensure_layout, layout_key};
use super::txn::{absent, first_kvs, get, lease_is, put, shown, value_is};
use super::{
    EtcdLease, Keys, Lease, RETRY_PAUSE, call_timeout, held_until, pb, to_i64, trusted_ttl,
};
use crate::config::EtcdConfig;
use crate::fleet_layout::LayoutMismatch;
use crate::mark::{MarkError, usable_mark};
use crate::proof::Proof;
use snowflake_core::{Clock, Layout, SystemClock, format_unix_ms};
use std::time::{Duration, Instant};

/// Who holds a claim: the value of the claim key, for operators.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Holder {
    /// The machine's host name.
    pub host: String,
    /// The process id.
    pub pid: u32,
    /// `--advertise-addr`, if given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advertise_addr: Option<String>,
    /// The bound listeners, `protocol=addr`.
    pub addresses: Vec<String>,
    /// When the process started (ISO-8601 UTC).
    pub started_at: String,
    /// The layout's epoch, so a fleet mixing layouts is noticed.
    pub epoch_ms: u64,
    /// The service's version.
    pub version: &'static str,
}

impl Holder {
    /// This process, with its listeners' addresses.
    pub fn this_process(
        host: String,
        advertise_addr: Option<String>,
        addresses: Vec<String>,
        started_ms: u64,
        epoch_ms: u64,
    ) -> Holder {
        Holder {
            host,
            pid: std::process::id(),
            advertise_addr,
            addresses,
            started_at: format_unix_ms(started_ms),
            epoch_ms,
            version: env!("CARGO_PKG_VERSION"),
        }
    }
}

/// Why no pair could be claimed; the service does not start.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClaimError {
    /// The pinned pair is held by another live node.
    #[error(
        "worker {worker_id} of datacenter {datacenter_id} is held by another node: {holder} (etcd \
         key {key}); gave up after {waited_secs} s. Two live processes must never share a pair: \
         pick another --worker-id, or leave it out to take the lowest free one"
    )]
    Held {
        /// The datacenter.
        datacenter_id: u64,
        /// The worker.
        worker_id: u64,
        /// The claim key's value.
        holder: String,
        /// The claim key.
        key: String,
        /// How long the claim was retried.
        waited_secs: u64,
    },
    /// Every worker of the datacenter is held.
    #[error(
        "all {count} worker ids of datacenter {datacenter_id} are held (etcd keys under {prefix}); \
         stop a node, or start this one in another datacenter"
    )]
    Full {
        /// The datacenter.
        datacenter_id: u64,
        /// How many workers a datacenter has.
        count: u64,
        /// The key prefix of the datacenter's claims.
        prefix: String,
    },
    /// etcd did not answer in time.
    #[error("cannot claim a worker id from etcd ({endpoints}) within {waited_secs} s: {last}")]
    Unreachable {
        /// The members tried.
        endpoints: String,
        /// How long the claim was retried.
        waited_secs: u64,
        /// The last error.
        last: String,
    },
    /// The fleet records another layout (or one that cannot be read).
    #[error(transparent)]
    Layout(#[from] LayoutMismatch),
    /// A signal stopped the process while it was claiming (the lease was revoked).
    #[error("stopped (SIGTERM or SIGINT) while claiming a pair from etcd; nothing is held")]
    Stopped,
    /// The pair's mark in etcd cannot be read; issuing without it could repeat a predecessor's
    /// IDs.
    #[error(
        "the high-water mark of this pair in etcd ({key}) is unusable: {reason}; refusing to claim \
         it, because without it this node could repeat ids a previous holder issued"
    )]
    BadMark {
        /// The mark key.
        key: String,
        /// What is wrong.
        reason: String,
    },
}

/// The outcome of one claim transaction.
#[derive(Debug)]
pub(super) enum Attempt {
    /// The pair is ours, with the mark read with it.
    Claimed(ClaimedMark),
    /// The claim key is ours, but the mark cannot be used (the reason); the claim is still to
    /// be given back.
    Unusable { reason: MarkError },
    /// Another lease holds it; its claim key's value.
    HeldBy { holder: String },
    /// The fleet's layout record is no longer the one read before the claim: read it again.
    LayoutMoved,
}

/// The mark a claim read: the floor, the lease (hex) that wrote it, and the mark key's
/// `mod_revision` (0 when absent).
#[derive(Debug)]
pub(super) struct ClaimedMark {
    /// The mark (Unix ms): the new holder issues only above it.
    pub(super) floor_ms: u64,
    /// The lease (hex) that wrote it, if it says.
    pub(super) writer: Option<String>,
    /// The mark key's `mod_revision` (0 when absent): the next write's compare.
    pub(super) mark_revision: i64,
}

/// A lease granted for a claim, not yet attached to a key.
#[derive(Debug, Clone, Copy)]
struct Granted {
    /// etcd's lease id.
    id: i64,
    /// The TTL to rely on (never more than asked for).
    ttl_secs: u64,
    /// When the grant was sent: the lease is provably held for its TTL from then.
    sent: Instant,
}

/// A worker whose mark cannot be used, skipped by an unpinned claim.
#[derive(Debug)]
struct Skipped {
    /// The worker.
    worker_id: u64,
    /// Its mark key.
    key: String,
    /// Why its mark cannot be used.
    reason: MarkError,
}

/// A pinned worker found held by another lease.
#[derive(Debug)]
struct HeldWorker {
    /// The worker.
    worker_id: u64,
    /// Its claim key's value.
    holder: String,
    /// Its claim key.
    key: String,
}

/// A pair claimed by one round of [`EtcdLease::claim`].
#[derive(Debug)]
struct Won {
    /// The worker.
    worker_id: u64,
    /// The mark read with the claim.
    mark: ClaimedMark,
}

impl EtcdLease {
    /// Claims a pair in `datacenter_id`: exactly `worker_id` when given (retrying while it is
    /// held, up to the claim timeout), else the lowest free worker whose mark is usable (a
    /// worker whose mark is not is given back and skipped).
    pub async fn claim(
        config: &EtcdConfig,
        layout: &Layout,
        datacenter_id: u64,
        worker_id: Option<u64>,
        holder: &Holder,
    ) -> Result<EtcdLease, ClaimError> {
        let never = std::future::pending();
        EtcdLease::claim_until(config, layout, datacenter_id, worker_id, holder, never).await
    }

    /// [`EtcdLease::claim`], given up as soon as `stop` completes (a signal): the lease granted
    /// for the claim is revoked then (which deletes a claim key put under it), and the answer
    /// is [`ClaimError::Stopped`].
    pub async fn claim_until(
        config: &EtcdConfig,
        layout: &Layout,
        datacenter_id: u64,
        worker_id: Option<u64>,
        holder: &Holder,
        stop: impl Future<Output = ()>,
    ) -> Result<EtcdLease, ClaimError> {
        let client = EtcdClient::new(
            &config.endpoints,
            config.tls.as_ref(),
            config.auth.as_ref(),
            call_timeout(config.lease_ttl_secs),
        )
        .map_err(|e| ClaimError::Unreachable {
            endpoints: config.endpoints.join(","),
            waited_secs: 0,
            last: e.to_string(),
        })?;
        let holder_json = serde_json::to_string(holder).unwrap_or_else(|_| "{}".into());
        let started = Instant::now();
        let deadline = started.checked_add(config.claim_timeout).unwrap_or(started);
        let timeout = call_timeout(config.lease_ttl_secs);
        let waited = |started: Instant| started.elapsed().as_secs();
        let mut lease: Option<Granted> = None;
        let mut last_error = String::new();
        // Workers whose mark is unusable (unpinned claims skip them).
        let mut unusable: Vec<Skipped> = Vec::new();
        // Workers whose mark is far ahead of the clock, passed over while another is free;
        // taken after all (`take_ahead`) when none is.
        let mut ahead: Vec<u64> = Vec::new();
        let mut take_ahead = false;
        let rounds = async {
            loop {
                let result: Result<Option<Won>, ClaimError> = async {
                // A lease older than half its TTL may lapse before the claim lands: take a new one.
                if let Some(granted) = lease
                    && granted.sent.elapsed() > Duration::from_secs(granted.ttl_secs) / 2
                {
                    let _ = client.revoke(granted.id, timeout).await;
                    lease = None;
                }
                let lease_id = match lease {
                    Some(granted) => granted.id,
                    None => {
                        let sent = Instant::now();
                        let granted = client
                            .grant(to_i64(config.lease_ttl_secs), timeout)
                            .await
                            .map_err(|e| unreachable(config, &e))?;
                        let ttl_secs = trusted_ttl(granted.ttl, config.lease_ttl_secs)
                            .ok_or_else(|| absurd_grant(config, granted.ttl))?;
                        lease
                            .insert(Granted {
                                id: granted.id,
                                ttl_secs,
                                sent,
                            })
                            .id
                    }
                };
                // The fleet's layout: recorded by the first claimant, ours or a refusal; every
                // claim transaction below compares it.
                let layout_value = ensure_layout(&client, &config.prefix, layout, timeout)
                    .await
                    .map_err(|e| unreachable(config, &e))??;
                let candidates: Vec<u64> = match worker_id {
                    Some(w) => vec![w],
                    None => {
                        let prefix = format!("{}/workers/{datacenter_id}/", config.prefix);
                        let held: Vec<u64> = client
                            .range_prefix(&prefix, timeout)
                            .await
                            .map_err(|e| unreachable(config, &e))?
                            .iter()
                            .filter_map(|kv| {
                                std::str::from_utf8(&kv.key)
                                    .ok()?
                                    .strip_prefix(&prefix)?
                                    .parse()
                                    .ok()
                            })
                            .collect();
                        (0..=layout.max_worker_id())
                            .filter(|w| {
                                !held.contains(w)
                                    && !unusable.iter().any(|u| u.worker_id == *w)
                                    && (take_ahead || !ahead.contains(w))
                            })
                            .collect()
                    }
                };
                let mut held_by = None;
                for &w in &candidates {
                    let keys = Keys::new(&config.prefix, datacenter_id, w);
                    let claim = Claim {
                        lease_id,
                        holder: &holder_json,
                        layout,
                        layout_value: &layout_value,
                    };
                    match try_claim(&client, &keys, &claim, timeout)
                        .await
                        .map_err(|e| unreachable(config, &e))?
                    {
                        Attempt::Claimed(mark)
                            if worker_id.is_none()
                                && !take_ahead
                                && far_ahead(mark.floor_ms, SystemClock.now_ms()) =>
                        {
                            // Its holder would wait until the clock passes the mark: another
                            // free worker serves at once.
                            give_back(&client, &keys.claim, lease_id, timeout)
                                .await
                                .map_err(|e| unreachable(config, &e))?;
                            tracing::warn!(
                                datacenter_id,
                                worker_id = w,
                                key = %keys.mark,
                                mark_ms = mark.floor_ms,
                                mark = %format_unix_ms(mark.floor_ms),
                                "skipping a free worker whose high-water mark is far ahead of the \
                                 clock (its holder would wait until the clock passes it)"
                            );
                            ahead.push(w);
                        }
                        Attempt::Claimed(mark) => {
                            return Ok(Some(Won { worker_id: w, mark }));
                        }
                        // Changed since it was read: read (and check) it again.
                        Attempt::LayoutMoved => return Ok(None),
                        Attempt::HeldBy { holder } => {
                            held_by = Some(HeldWorker {
                                worker_id: w,
                                holder,
                                key: keys.claim,
                            });
                        }
                        Attempt::Unusable { reason } if worker_id.is_none() => {
                            // Never issue without a usable mark; another worker will do.
                            give_back(&client, &keys.claim, lease_id, timeout)
                                .await
                                .map_err(|e| unreachable(config, &e))?;
                            tracing::warn!(
                                datacenter_id,
                                worker_id = w,
                                key = %keys.mark,
                                %reason,
                                "skipping a worker whose high-water mark in etcd is unusable"
                            );
                            unusable.push(Skipped {
                                worker_id: w,
                                key: keys.mark,
                                reason,
                            });
                        }
                        Attempt::Unusable { reason } => {
                            return Err(ClaimError::BadMark {
                                key: keys.mark,
                                reason: reason.to_string(),
                            });
                        }
                    }
                }
                match (worker_id, held_by) {
                    (Some(_), Some(held)) if Instant::now() >= deadline => Err(ClaimError::Held {
                        datacenter_id,
                        worker_id: held.worker_id,
                        holder: held.holder,
                        key: held.key,
                        waited_secs: waited(started),
                    }),
                    (Some(_), Some(held)) => {
                        last_error = format!("held by {}", held.holder);
                        Ok(None)
                    }
                    // Free workers were taken by other nodes claiming at the same moment: list
                    // again.
                    (None, Some(_)) if Instant::now() < deadline => Ok(None),
                    // Nothing free but workers whose mark is far ahead: take one after all.
                    (None, None) if !ahead.is_empty() && !take_ahead => {
                        take_ahead = true;
                        Ok(None)
                    }
                    // Nothing free but workers with unusable marks: say why they were skipped.
                    (None, _) if !unusable.is_empty() => {
                        let first = &unusable[0];
                        Err(ClaimError::BadMark {
                            key: first.key.clone(),
                            reason: format!(
                                "{} (no other worker of datacenter {datacenter_id} is free: {} \
                                 skipped for an unusable mark, worker {} first)",
                                first.reason,
                                unusable.len(),
                                first.worker_id
                            ),
                        })
                    }
                    _ => Err(ClaimError::Full {
                        datacenter_id,
                        count: layout.max_worker_id() + 1,
                        prefix: format!("{}/workers/{datacenter_id}/", config.prefix),
                    }),
                }
            }
            .await;
                match result {
                    Ok(Some(Won { worker_id: w, mark })) => {
                        let granted = lease.expect("a lease was granted");
                        let skipped = u64::try_from(ahead.iter().filter(|a| **a != w).count())
                            .unwrap_or(u64::MAX);
                        return Ok((w, mark, granted, skipped));
                    }
                    Ok(None) => {}
                    Err(ClaimError::Unreachable { last, .. }) => {
                        // A lease we could not confirm may or may not exist; take a fresh one.
                        if let Some(granted) = lease.take() {
                            let _ = client.revoke(granted.id, timeout).await;
                        }
                        last_error = last;
                    }
                    Err(other) => {
                        if let Some(granted) = lease.take() {
                            let _ = client.revoke(granted.id, timeout).await;
                        }
                        return Err(other);
                    }
                }
                if Instant::now() >= deadline {
                    if let Some(granted) = lease.take() {
                        let _ = client.revoke(granted.id, timeout).await;
                    }
                    return Err(ClaimError::Unreachable {
                        endpoints: config.endpoints.join(","),
                        waited_secs: waited(started),
                        last: last_error,
                    });
                }
                tokio::time::sleep(
                    RETRY_PAUSE.min(deadline.saturating_duration_since(Instant::now())),
                )
                .await;
            }
        };
        // The rounds borrow the lease slot; they are dropped at the end of this block, so a
        // stop can read it and give the lease back.
        let outcome = {
            tokio::pin!(rounds);
            tokio::select! {
                result = &mut rounds => Some(result),
                () = stop => None,
            }
        };
        let Some(result) = outcome else {
            if let Some(granted) = lease.take() {
                let _ = client
                    .revoke(granted.id, timeout.min(STOP_REVOKE_TIMEOUT))
                    .await;
            }
            tracing::info!(datacenter_id, "stopped while claiming a pair from etcd");
            return Err(ClaimError::Stopped);
        };
        let (w, mark, granted, skipped) = result?;
        let until = held_until(granted.sent, granted.ttl_secs);
        let keys = Keys::new(&config.prefix, datacenter_id, w);
        tracing::info!(
            datacenter_id,
            worker_id = w,
            lease = %format!("{:x}", granted.id),
            ttl_secs = granted.ttl_secs,
            key = %keys.claim,
            takeover_mark_ms = mark.floor_ms,
            "claimed the pair in etcd"
        );
        Ok(EtcdLease {
            client,
            config: config.clone(),
            datacenter_id,
            worker_id: w,
            claim_key: keys.claim,
            mark_key: keys.mark,
            holder: holder_json,
            layout: *layout,
            proof: Proof::new(
                Lease {
                    lease_id: granted.id,
                    ttl_secs: granted.ttl_secs,
                    mark_revision: mark.mark_revision,
                },
                until,
                mark.floor_ms,
            )
            .with_skipped_ahead(skipped),
        })
    }
}

/// How long a claim stopped by a signal waits for etcd to revoke its lease, at most (the lease
/// lapses by itself after its TTL otherwise): the stop stays prompt when etcd is out of reach.
const STOP_REVOKE_TIMEOUT: Duration = Duration::from_secs(1);

/// What one claim transaction claims with.
#[derive(Debug, Clone, Copy)]
pub(super) struct Claim<'a> {
    /// The lease the claim key is put under.
    pub(super) lease_id: i64,
    /// The claim key's value (the holder's JSON).
    pub(super) holder: &'a str,
    /// The layout the mark must be usable in.
    pub(super) layout: &'a Layout,
    /// The fleet's layout record as read and checked: the transaction compares it.
    pub(super) layout_value: &'a [u8],
}

/// One claim transaction: create the claim key under the lease if absent while the fleet's
/// layout record is still the one checked, and read the mark (which must be usable in the
/// layout). The error is etcd's.
pub(super) async fn try_claim(
    client: &EtcdClient,
    keys: &Keys,
    claim: &Claim<'_>,
    timeout: Duration,
) -> Result<Attempt, EtcdError> {
    let Claim {
        lease_id,
        holder,
        layout,
        layout_value,
    } = *claim;
    let layout_key = layout_key(&keys.prefix);
    let request = pb::TxnRequest {
        compare: vec![absent(&keys.claim), value_is(&layout_key, layout_value)],
        success: vec![
            put(&keys.claim, holder.to_owned(), lease_id),
            get(&keys.mark),
        ],
        failure: vec![get(&keys.claim), get(&keys.mark), get(&layout_key)],
    };
    let response = client.txn(request, timeout).await?;
    let succeeded = response.succeeded;
    let mut ranges = first_kvs(response);
    let (claim, mark) = if succeeded {
        (None, ranges.next().flatten())
    } else {
        let (claim, mark) = (ranges.next().flatten(), ranges.next().flatten());
        if ranges
            .next()
            .flatten()
            .is_none_or(|kv| kv.value != layout_value)
        {
            return Ok(Attempt::LayoutMoved);
        }
        (claim, mark)
    };
    let claimed = |mark: Option<pb::KeyValue>| {
        let mark_revision = mark.as_ref().map_or(0, |kv| kv.mod_revision);
        match usable_mark(
            mark.as_ref().map_or(&[][..], |kv| &kv.value),
            layout,
            "lease",
        ) {
            Ok(read) => Attempt::Claimed(ClaimedMark {
                floor_ms: read.high_water_ms,
                writer: read.writer,
                mark_revision,
            }),
            Err(reason) => Attempt::Unusable { reason },
        }
    };
    if succeeded {
        return Ok(claimed(mark));
    }
    Ok(match claim {
        // Our own earlier attempt landed although its answer was lost: the pair is ours.
        Some(kv) if kv.lease == lease_id => claimed(mark),
        Some(kv) => Attempt::HeldBy {
            holder: shown(&kv.value),
        },
        // Deleted between the compare and the read cannot happen inside one transaction.
        None => Attempt::HeldBy {
            holder: "(unknown)".into(),
        },
    })
}

/// How far ahead of the clock a mark may be before an unpinned claim passes its worker over
/// while another is free: a minute, the largest `--reserve-ms`, so a crashed holder's own
/// reservation never is; a mark further ahead (a wrong clock wrote it) would keep the new
/// holder waiting, not ready, until the clock passes it.
pub const FAR_AHEAD_MS: u64 = 60_000;

/// Whether `mark_ms` is far enough ahead of `now_ms` that an unpinned claim passes its worker
/// over while another is free.
pub(crate) fn far_ahead(mark_ms: u64, now_ms: u64) -> bool {
    mark_ms > now_ms.saturating_add(FAR_AHEAD_MS)
}

/// Gives back a claim this node just made (its mark is unusable, or far ahead): deletes the claim key only
/// while it is still attached to `lease_id`, never someone else's.
async fn give_back(
    client: &EtcdClient,
    claim_key: &str,
    lease_id: i64,
    timeout: Duration,
) -> Result<(), EtcdError> {
    let request = pb::TxnRequest {
        compare: vec![lease_is(claim_key, lease_id)],
        success: vec![pb::RequestOp {
            request: Some(pb::request_op::Request::RequestDeleteRange(
                pb::DeleteRangeRequest {
                    key: claim_key.as_bytes().to_vec(),
                    ..Default::default()
                },
            )),
        }],
        failure: vec![],
    };
    client.txn(request, timeout).await.map(drop)
}

/// A grant whose TTL cannot be trusted (0 or less): as if etcd could not be reached.
fn absurd_grant(config: &EtcdConfig, ttl: i64) -> ClaimError {
    ClaimError::Unreachable {
        endpoints: config.endpoints.join(","),
        waited_secs: 0,
        last: format!(
            "etcd granted a lease with a ttl of {ttl} s (asked for {} s)",
            config.lease_ttl_secs
        ),
    }
}

/// etcd could not be asked: the claim retries until its deadline.
fn unreachable(config: &EtcdConfig, err: &EtcdError) -> ClaimError {
    ClaimError::Unreachable {
        endpoints: config.endpoints.join(","),
        waited_secs: 0,
        last: err.to_string(),
    }
}

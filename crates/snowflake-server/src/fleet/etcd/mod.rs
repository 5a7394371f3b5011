//! Leasing the (datacenter, worker) pair from etcd (`--etcd-endpoints`), with fencing and safe
//! takeover. See DESIGN.md ("Fleet") for the argument; in short:
//!
//! - **Claim.** A lease is granted, then one transaction creates `PREFIX/workers/D/W` under that
//!   lease only if the key is absent, and reads `PREFIX/marks/D/W`. The claim key's value says
//!   who holds it (host, pid, addresses, start time), for operators using `etcdctl`.
//! - **Fence.** etcd expires a lease no earlier than its TTL after it receives a keep-alive,
//!   which is after we sent it. So from the local monotonic instant a successful keep-alive was
//!   *sent*, the lease is provably held for TTL; the node stops issuing a safety margin before
//!   that (TTL/5, for clock-rate drift and timer lateness).
//! - **Mark.** `PREFIX/marks/D/W` holds the high-water mark: the node writes each reservation
//!   there (and to its state directory) before issuing under it. A successor reads it in its
//!   claim transaction and issues only above it. The mark key has no lease: it outlives every
//!   holder. The mark never goes below a value etcd acknowledged to the holder, even when a
//!   write that timed out on the client is applied late (after a later, higher one, possibly
//!   through another member). So every write is a transaction comparing both the claim key's
//!   lease (still ours) and the mark key's `mod_revision` with the one this node last knew (0
//!   for an absent key; etcd compares values as bytes, so revisions are compared, not
//!   numbers): learnt in the claim transaction, then from each successful write's revision. A
//!   late write carries an older revision, so once anything else was written it fails. When a
//!   write's compare fails, the claim key and the mark are read in the same transaction: a
//!   claim no longer on our lease is a loss; otherwise the mark was moved by one of our own
//!   late writes (or, warned about, by hand), so the node adopts its revision and writes again
//!   only if the stored value is lower than its own; a stored value at or above it is already
//!   as good (it is a success). A lower value is written over a higher one only by a CAS
//!   against the revision the node itself wrote: the shutdown mark, which may lower the node's
//!   *own* last reservation because nothing more will be issued; a reservation still in
//!   flight then fails its compare instead of landing after it.
//! - **Unusable marks.** A mark that cannot be read, was written with another epoch, or is at
//!   or past the layout's last millisecond: a node pinned to the pair (`--worker-id`) refuses
//!   to start; an unpinned one gives that claim back (a delete conditional on its own lease)
//!   and takes the next free worker.
//! - **Outage.** Keep-alives go to the next member when one fails. If the lease expired in the
//!   meantime, the node claims the same pair again with a new lease (reading the mark and its
//!   revision again); if another node holds it by then, this node can never serve it again
//!   and stops.
//! - **Remote numbers.** A TTL etcd answers is trusted only up to the TTL asked for (etcd never
//!   grants more, except raising a tiny one to its minimum, which only lasts longer), and every
//!   instant computed from one is checked: a hostile or corrupt answer cannot panic the node or
//!   extend its fence.
//! - **Goodbye.** On graceful shutdown the exact mark is written, then the lease is revoked so
//!   the pair is free at once.

mod client;

pub use client::{EtcdClient, EtcdError, KeepAliveStream};

use crate::config::EtcdConfig;
use crate::fleet::{
    BoxFuture, Coordinator, Fence, HeldPair, LeaseInfo, Proof, StoredMark, canonical_worker,
};
use snowflake_core::{Layout, format_unix_ms};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// The code generated from `proto/etcd/rpc.proto`: etcd's KV and Lease clients.
#[allow(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    clippy::all,
    clippy::pedantic
)]
pub mod pb {
    tonic::include_proto!("etcdserverpb");
}

/// How long one etcd call may take, at most.
const MAX_CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// Pause between attempts while etcd is unreachable or a pinned pair is held.
const RETRY_PAUSE: Duration = Duration::from_millis(500);
/// Pause before the next keep-alive after one failed.
const RENEW_RETRY_PAUSE: Duration = Duration::from_millis(200);
/// How many conditional writes one mark write makes at most when it finds the mark moved by
/// this node's own earlier, late writes.
const MARK_ATTEMPTS: usize = 4;

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

/// The lease as this node knows it (what it proves is in the [`Proof`]).
#[derive(Debug)]
struct Lease {
    /// etcd's lease id.
    lease_id: i64,
    /// The TTL etcd granted, in seconds (never more than asked for).
    ttl_secs: u64,
    /// The mark key's `mod_revision` as of this node's last write (or its claim); 0 when the
    /// key did not exist. Every mark write is conditional on it.
    mark_revision: i64,
}

/// The outcome of one claim transaction.
#[derive(Debug)]
enum Attempt {
    /// The pair is ours; the mark read with it, the lease (hex) that wrote that mark, and the
    /// mark key's `mod_revision` (0 when absent).
    Claimed {
        floor_ms: u64,
        writer: Option<String>,
        mark_revision: i64,
    },
    /// The claim key is ours, but the mark cannot be used (the reason); the claim is still to
    /// be given back.
    Unusable { reason: String },
    /// Another lease holds it; its claim key's value.
    HeldBy { holder: String },
}

/// A (datacenter, worker) pair leased from etcd.
#[derive(Debug)]
pub struct EtcdLease {
    client: EtcdClient,
    config: EtcdConfig,
    datacenter_id: u64,
    worker_id: u64,
    claim_key: String,
    mark_key: String,
    holder: String,
    layout: Layout,
    proof: Proof<Lease>,
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
        let mut lease: Option<(i64, u64, Instant)> = None;
        let mut last_error = String::new();
        // Workers whose mark is unusable (unpinned claims skip them): the mark key and why.
        let mut unusable: Vec<(u64, String, String)> = Vec::new();
        loop {
            let result: Result<Option<(u64, u64, i64)>, ClaimError> = async {
                // A lease older than half its TTL may lapse before the claim lands: take a new one.
                if let Some((id, ttl, granted)) = lease
                    && granted.elapsed() > Duration::from_secs(ttl) / 2
                {
                    let _ = client.revoke(id, timeout).await;
                    lease = None;
                }
                let (lease_id, _, _) = match lease {
                    Some(lease) => lease,
                    None => {
                        let sent = Instant::now();
                        let granted = client
                            .grant(to_i64(config.lease_ttl_secs), timeout)
                            .await
                            .map_err(|e| unreachable(config, &e))?;
                        let ttl = trusted_ttl(granted.ttl, config.lease_ttl_secs)
                            .ok_or_else(|| absurd_grant(config, granted.ttl))?;
                        *lease.insert((granted.id, ttl, sent))
                    }
                };
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
                            .filter(|w| !held.contains(w) && !unusable.iter().any(|u| u.0 == *w))
                            .collect()
                    }
                };
                let mut held_by = None;
                for &w in &candidates {
                    let keys = Keys::new(&config.prefix, datacenter_id, w);
                    match try_claim(&client, &keys, lease_id, &holder_json, layout, timeout)
                        .await
                        .map_err(|e| unreachable(config, &e))?
                    {
                        Attempt::Claimed {
                            floor_ms,
                            mark_revision,
                            ..
                        } => return Ok(Some((w, floor_ms, mark_revision))),
                        Attempt::HeldBy { holder } => held_by = Some((w, holder, keys.claim)),
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
                            unusable.push((w, keys.mark, reason));
                        }
                        Attempt::Unusable { reason } => {
                            return Err(ClaimError::BadMark {
                                key: keys.mark,
                                reason,
                            });
                        }
                    }
                }
                match (worker_id, held_by) {
                    (Some(_), Some((w, holder, key))) if Instant::now() >= deadline => {
                        Err(ClaimError::Held {
                            datacenter_id,
                            worker_id: w,
                            holder,
                            key,
                            waited_secs: waited(started),
                        })
                    }
                    (Some(_), Some((_, holder, _))) => {
                        last_error = format!("held by {holder}");
                        Ok(None)
                    }
                    // Free workers were taken by other nodes claiming at the same moment: list
                    // again.
                    (None, Some(_)) if Instant::now() < deadline => Ok(None),
                    // Nothing free but workers with unusable marks: say why they were skipped.
                    (None, _) if !unusable.is_empty() => {
                        let (w, key, reason) = &unusable[0];
                        Err(ClaimError::BadMark {
                            key: key.clone(),
                            reason: format!(
                                "{reason} (no other worker of datacenter {datacenter_id} is free:                                  {} skipped for an unusable mark, worker {w} first)",
                                unusable.len()
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
                Ok(Some((w, floor_ms, mark_revision))) => {
                    let (lease_id, ttl_secs, sent) = lease.expect("a lease was granted");
                    let until = held_until(sent, ttl_secs);
                    let keys = Keys::new(&config.prefix, datacenter_id, w);
                    tracing::info!(
                        datacenter_id,
                        worker_id = w,
                        lease = %format!("{lease_id:x}"),
                        ttl_secs,
                        key = %keys.claim,
                        takeover_mark_ms = floor_ms,
                        "claimed the pair in etcd"
                    );
                    return Ok(EtcdLease {
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
                                lease_id,
                                ttl_secs,
                                mark_revision,
                            },
                            until,
                            floor_ms,
                        ),
                    });
                }
                Ok(None) => {}
                Err(ClaimError::Unreachable { last, .. }) => {
                    // A lease we could not confirm may or may not exist; take a fresh one.
                    if let Some((id, _, _)) = lease.take() {
                        let _ = client.revoke(id, timeout).await;
                    }
                    last_error = last;
                }
                Err(other) => {
                    if let Some((id, _, _)) = lease.take() {
                        let _ = client.revoke(id, timeout).await;
                    }
                    return Err(other);
                }
            }
            if Instant::now() >= deadline {
                if let Some((id, _, _)) = lease.take() {
                    let _ = client.revoke(id, timeout).await;
                }
                return Err(ClaimError::Unreachable {
                    endpoints: config.endpoints.join(","),
                    waited_secs: waited(started),
                    last: last_error,
                });
            }
            tokio::time::sleep(RETRY_PAUSE.min(deadline.saturating_duration_since(Instant::now())))
                .await;
        }
    }

    /// The claimed datacenter id.
    pub fn datacenter_id(&self) -> u64 {
        self.datacenter_id
    }

    /// The claimed worker id.
    pub fn worker_id(&self) -> u64 {
        self.worker_id
    }

    /// The lease is gone (etcd says so): fence at once.
    fn lose(&self, reason: String) {
        if self.proof.lose(reason.clone()) {
            tracing::error!(key = %self.claim_key, %reason, "lost the lease: not issuing ids until the pair is claimed again");
        }
    }

    /// The keep-alive loop and, beside it, the watch on the claim key (see
    /// [`Coordinator::run`]).
    async fn keep(&self, stop: watch::Receiver<bool>) -> Result<(), String> {
        tokio::select! {
            result = self.keep_alive(stop.clone()) => result,
            () = self.watch_claim(stop) => Ok(()),
        }
    }

    /// Watches the claim key while the pair is held, so that a claim deleted or taken over by
    /// hand (`etcdctl del`, even of the whole prefix, marks included) fences the node at once
    /// rather than at its next mark write, up to half a reservation later. Best effort: a watch
    /// that fails is opened again, and each (re)opening reads the key once; the mark writes'
    /// lease compare stays what guarantees that no mark is written without the claim.
    async fn watch_claim(&self, mut stop: watch::Receiver<bool>) {
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
            // Whatever happened before the watch started.
            self.check_claim(timeout).await;
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
                    Err(err) => {
                        tracing::debug!(error = %err, key = %self.claim_key, "the watch on the claim key ended");
                        break;
                    }
                }
            }
        }
    }

    /// Reads the claim key: gone, or attached to another lease, while this node holds the pair
    /// under the lease it read it for, fences the node at once.
    async fn check_claim(&self, timeout: Duration) {
        let lease_id = {
            let state = self.proof.lock();
            if state.lost_reason().is_some() {
                return;
            }
            state.own.lease_id
        };
        let Ok(kv) = self.client.get_key(&self.claim_key, timeout).await else {
            // Out of reach: the keep-alives say how long the pair is held.
            return;
        };
        let reason = match kv {
            None => format!("{} was deleted", self.claim_key),
            Some(kv) if kv.lease != lease_id => format!(
                "{} is attached to lease {:x}, not this node's {lease_id:x}",
                self.claim_key, kv.lease
            ),
            Some(_) => return,
        };
        if self
            .proof
            .lose_if(|lease| lease.lease_id == lease_id, reason.clone())
        {
            tracing::error!(key = %self.claim_key, %reason, "lost the pair: not issuing ids until it is claimed again");
        }
    }

    /// The keep-alive loop.
    async fn keep_alive(&self, mut stop: watch::Receiver<bool>) -> Result<(), String> {
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
                    let (first, late) = self.proof.renewal_failed();
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
    async fn reclaim(&self) -> Result<(), String> {
        let ttl_secs = self.config.lease_ttl_secs;
        let timeout = call_timeout(ttl_secs);
        let keys = Keys {
            claim: self.claim_key.clone(),
            mark: self.mark_key.clone(),
        };
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
            match try_claim(
                &self.client,
                &keys,
                granted.id,
                &self.holder,
                &self.layout,
                timeout,
            )
            .await
            {
                Ok(Attempt::Claimed {
                    floor_ms,
                    writer,
                    mark_revision,
                }) => {
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
                    return Err(format!(
                        "lost worker {} of datacenter {} to another node while etcd was out of \
                         reach: {holder} (etcd key {}); this node can never serve that pair again, \
                         so it stops (restart it to claim a free pair)",
                        self.worker_id, self.datacenter_id, self.claim_key
                    ));
                }
                Ok(Attempt::Unusable { reason }) => {
                    let _ = self.client.revoke(granted.id, timeout).await;
                    return Err(format!(
                        "the high-water mark in etcd ({}) is unusable: {reason}; refusing to \
                         serve the pair again",
                        self.mark_key
                    ));
                }
                Err(err) => {
                    let _ = self.client.revoke(granted.id, timeout).await;
                    tracing::debug!(error = %err, "cannot reach etcd to claim the pair again");
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
            }
        }
    }

    /// Writes `mark_ms` (see [`Coordinator::store_mark`] and the module doc's "Mark"): a
    /// transaction conditional on the claim key's lease and on the mark's `mod_revision` as
    /// this node last knew it.
    async fn write_mark(&self, mark_ms: u64) -> Result<(), String> {
        let (lease_id, ttl_secs, mut revision, floor_ms) = {
            let state = self.proof.lock();
            if let Some(reason) = state.lost_reason() {
                return Err(format!("the lease is lost ({reason})"));
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
        let value = crate::fleet::mark_json(mark_ms, self.layout.epoch_ms(), "lease", &writer);
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
            let response = self
                .client
                .txn(request, call_timeout(ttl_secs))
                .await
                .map_err(|e| e.to_string())?;
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
                return Err(reason);
            }
            // Still ours, but the mark moved since this node last wrote it: one of its own
            // writes that timed out was applied late. Never write below what it holds.
            let Some(mark) = mark else {
                // Deleted (by hand): nothing to protect.
                revision = 0;
                continue;
            };
            let (stored_ms, stored_writer) = crate::fleet::parse_mark(
                &mark.value,
                self.layout.epoch_ms(),
                "lease",
            )
            .map_err(|reason| {
                format!(
                    "the high-water mark in etcd ({}) changed under this node and is unusable: \
                     {reason}",
                    self.mark_key
                )
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
        Err(format!(
            "the high-water mark in etcd ({}) kept changing: {MARK_ATTEMPTS} conditional writes \
             of {mark_ms} found it moved",
            self.mark_key
        ))
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

impl Coordinator for EtcdLease {
    fn source(&self) -> &'static str {
        "etcd"
    }

    fn fence(&self) -> watch::Receiver<Fence> {
        self.proof.fence()
    }

    fn store_mark(&self, mark_ms: u64) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(self.write_mark(mark_ms))
    }

    fn run(&self, stop: watch::Receiver<bool>) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(self.keep(stop))
    }

    fn release(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
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
                return;
            }
            match self.client.revoke(lease_id, call_timeout(ttl_secs)).await {
                Ok(()) => {
                    tracing::info!(key = %self.claim_key, "released the pair (lease revoked)");
                }
                Err(err) => tracing::warn!(
                    error = %err,
                    key = %self.claim_key,
                    "cannot revoke the lease; the pair frees itself when it expires"
                ),
            }
            self.proof.released();
        })
    }

    fn info(&self) -> LeaseInfo {
        self.proof.info(
            &self.claim_key,
            "not renewed in time; etcd is out of reach",
            |lease| (Some(format!("{:x}", lease.lease_id)), lease.ttl_secs),
        )
    }

    fn held_pairs(&self) -> BoxFuture<'_, Result<Vec<HeldPair>, String>> {
        Box::pin(async move {
            let prefix = format!("{}/workers/{}/", self.config.prefix, self.datacenter_id);
            let ttl_secs = self.proof.lock().own.ttl_secs;
            let kvs = self
                .client
                .range_prefix(&prefix, call_timeout(ttl_secs))
                .await
                .map_err(|e| format!("cannot list {prefix} in etcd: {e}"))?;
            Ok(kvs
                .iter()
                .filter_map(|kv| {
                    let text = std::str::from_utf8(&kv.key).ok()?.strip_prefix(&prefix)?;
                    let worker_id = canonical_worker(text, self.layout.max_worker_id())?;
                    Some(held_pair(self.datacenter_id, worker_id, &kv.value))
                })
                .collect())
        })
    }

    fn workers_per_datacenter(&self) -> u64 {
        self.layout.max_worker_id() + 1
    }
}

/// A claim key's value (the holder's JSON, or anything an operator wrote) as a table row.
fn held_pair(datacenter_id: u64, worker_id: u64, value: &[u8]) -> HeldPair {
    let holder: serde_json::Value = serde_json::from_slice(value).unwrap_or_default();
    let text = |field: &str| {
        holder
            .get(field)
            .and_then(|v| v.as_str())
            .map(str::to_owned)
    };
    let who = match (
        text("host"),
        holder.get("pid").and_then(serde_json::Value::as_u64),
    ) {
        (Some(host), Some(pid)) => format!("{host} (pid {pid})"),
        (Some(host), None) => host,
        _ => String::from_utf8_lossy(value).chars().take(100).collect(),
    };
    let address = text("advertise_addr").unwrap_or_else(|| {
        holder
            .get("addresses")
            .and_then(|a| a.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default()
    });
    // Whatever is in etcd ends up on every status page: bounded.
    let short = |text: String| -> String { text.chars().take(200).collect() };
    HeldPair {
        datacenter_id,
        worker_id,
        holder: short(who),
        address: short(address),
        since: short(text("started_at").unwrap_or_default()),
    }
}

/// What an operator tool reads of one pair in one transaction: the mark as shown, and the
/// mark key's `mod_revision` (0 when absent).
async fn read_pair(
    client: &EtcdClient,
    keys: &Keys,
    layout: &Layout,
    timeout: Duration,
    attempts: usize,
) -> Result<(StoredMark, i64), String> {
    let request = pb::TxnRequest {
        compare: vec![],
        success: vec![get(&keys.claim), get(&keys.mark)],
        failure: vec![],
    };
    let mut last = String::new();
    for _ in 0..attempts.max(1) {
        match client.txn(request.clone(), timeout).await {
            Ok(response) => {
                let mut ranges = first_kvs(response);
                let (claim, mark) = (ranges.next().flatten(), ranges.next().flatten());
                let (high_water_ms, _) = crate::fleet::parse_mark(
                    mark.as_ref().map_or(&[][..], |kv| &kv.value),
                    layout.epoch_ms(),
                    "lease",
                )
                .map_err(|reason| {
                    format!(
                        "the high-water mark in etcd ({}) is unusable: {reason}",
                        keys.mark
                    )
                })?;
                let stored = StoredMark {
                    high_water_ms,
                    value: mark
                        .as_ref()
                        .map_or_else(String::new, |kv| shown(&kv.value)),
                    holder: claim.map(|kv| shown(&kv.value)),
                    location: keys.mark.clone(),
                };
                return Ok((stored, mark.map_or(0, |kv| kv.mod_revision)));
            }
            // The client moved on to the next member: try it.
            Err(err) => last = err.to_string(),
        }
    }
    Err(format!("cannot read {} from etcd: {last}", keys.mark))
}

/// A client for an operator tool, and its call timeout.
fn operator_client(config: &EtcdConfig) -> Result<(EtcdClient, Duration), String> {
    let timeout = call_timeout(config.lease_ttl_secs);
    EtcdClient::new(
        &config.endpoints,
        config.tls.as_ref(),
        config.auth.as_ref(),
        timeout,
    )
    .map(|client| (client, timeout))
    .map_err(|e| e.to_string())
}

/// The pair's mark in etcd as an operator sees it (`snowflake state show`): its
/// `high_water_ms` (0 when none was ever written), the stored value, and the claim key's
/// value as `holder` while a node holds the pair. A mark that cannot be read (not JSON, another
/// epoch) is an error naming the key; one past the layout is shown as it is.
pub async fn read_mark(
    config: &EtcdConfig,
    layout: &Layout,
    datacenter_id: u64,
    worker_id: u64,
) -> Result<StoredMark, String> {
    let (client, timeout) = operator_client(config)?;
    let keys = Keys::new(&config.prefix, datacenter_id, worker_id);
    read_pair(&client, &keys, layout, timeout, config.endpoints.len())
        .await
        .map(|(stored, _)| stored)
}

/// Lowers the pair's mark in etcd to `to_ms` (`snowflake state lower-mark`), recording `by`
/// and `now_ms` in it; returns the mark it replaced. Refused while a node holds the pair, and
/// when `to_ms` is not lower than the current mark. The write is one conditional transaction:
/// nobody holds the pair (the claim key's `create_revision` is 0) and the mark is still the
/// one just read (its `mod_revision`), so a node claiming the pair or writing its mark
/// meanwhile makes it fail instead of being overwritten.
pub async fn lower_mark(
    config: &EtcdConfig,
    layout: &Layout,
    datacenter_id: u64,
    worker_id: u64,
    to_ms: u64,
    by: &str,
    now_ms: u64,
) -> Result<StoredMark, String> {
    let (client, timeout) = operator_client(config)?;
    let keys = Keys::new(&config.prefix, datacenter_id, worker_id);
    let (previous, revision) =
        read_pair(&client, &keys, layout, timeout, config.endpoints.len()).await?;
    if let Some(holder) = &previous.holder {
        return Err(format!(
            "worker {worker_id} of datacenter {datacenter_id} is held by a live node: {holder} \
             (etcd key {}); stop it first: the mark of a held pair is never lowered",
            keys.claim
        ));
    }
    if to_ms >= previous.high_water_ms {
        return Err(format!(
            "{to_ms} is not lower than the current mark {} ({}) in etcd ({})",
            previous.high_water_ms,
            format_unix_ms(previous.high_water_ms),
            keys.mark
        ));
    }
    let value = crate::fleet::lowered_mark_json(
        to_ms,
        layout.epoch_ms(),
        "lease",
        previous.high_water_ms,
        by,
        now_ms,
    );
    let request = pb::TxnRequest {
        compare: vec![
            pb::Compare {
                result: pb::compare::CompareResult::Equal as i32,
                target: pb::compare::CompareTarget::Create as i32,
                key: keys.claim.as_bytes().to_vec(),
                range_end: Vec::new(),
                target_union: Some(pb::compare::TargetUnion::CreateRevision(0)),
            },
            mod_revision_is(&keys.mark, revision),
        ],
        success: vec![put(&keys.mark, value, 0)],
        failure: vec![],
    };
    match client.txn(request, timeout).await {
        Ok(response) if response.succeeded => {
            tracing::info!(
                key = %keys.mark,
                from_ms = previous.high_water_ms,
                to_ms,
                by,
                "lowered the high-water mark in etcd"
            );
            Ok(previous)
        }
        Ok(_) => Err(format!(
            "worker {worker_id} of datacenter {datacenter_id} changed meanwhile in etcd (claimed \
             by a node, or its mark {} written): nothing was lowered; try again",
            keys.mark
        )),
        Err(err) => Err(format!(
            "lowering {} to {to_ms} may or may not have been applied: {err}; read it again \
             before retrying",
            keys.mark
        )),
    }
}

/// The keys of one pair.
#[derive(Debug, Clone)]
struct Keys {
    claim: String,
    mark: String,
}

impl Keys {
    fn new(prefix: &str, datacenter_id: u64, worker_id: u64) -> Keys {
        Keys {
            claim: format!("{prefix}/workers/{datacenter_id}/{worker_id}"),
            mark: format!("{prefix}/marks/{datacenter_id}/{worker_id}"),
        }
    }
}

/// One claim transaction: create the claim key under `lease_id` if absent, and read the mark
/// (which must be usable in `layout`). The error is etcd's.
async fn try_claim(
    client: &EtcdClient,
    keys: &Keys,
    lease_id: i64,
    holder: &str,
    layout: &Layout,
    timeout: Duration,
) -> Result<Attempt, EtcdError> {
    let request = pb::TxnRequest {
        compare: vec![pb::Compare {
            result: pb::compare::CompareResult::Equal as i32,
            target: pb::compare::CompareTarget::Create as i32,
            key: keys.claim.as_bytes().to_vec(),
            range_end: Vec::new(),
            target_union: Some(pb::compare::TargetUnion::CreateRevision(0)),
        }],
        success: vec![
            put(&keys.claim, holder.to_owned(), lease_id),
            get(&keys.mark),
        ],
        failure: vec![get(&keys.claim), get(&keys.mark)],
    };
    let response = client.txn(request, timeout).await?;
    let succeeded = response.succeeded;
    let mut ranges = first_kvs(response);
    let (claim, mark) = if succeeded {
        (None, ranges.next().flatten())
    } else {
        (ranges.next().flatten(), ranges.next().flatten())
    };
    let claimed = |mark: Option<pb::KeyValue>| {
        let mark_revision = mark.as_ref().map_or(0, |kv| kv.mod_revision);
        match parse_mark(mark.as_ref(), layout) {
            Ok((floor_ms, writer)) => Attempt::Claimed {
                floor_ms,
                writer,
                mark_revision,
            },
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

/// Gives back a claim this node just made (its mark is unusable): deletes the claim key only
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

/// The first key-value of each range answer of a transaction, in order (`None` for a range
/// that found nothing); other answers are skipped.
fn first_kvs(response: pb::TxnResponse) -> impl Iterator<Item = Option<pb::KeyValue>> {
    response
        .responses
        .into_iter()
        .filter_map(|op| match op.response {
            Some(pb::response_op::Response::ResponseRange(range)) => {
                Some(range.kvs.into_iter().next())
            }
            _ => None,
        })
}

/// A stored value for a message: lossy UTF-8, at most 500 characters.
fn shown(value: &[u8]) -> String {
    String::from_utf8_lossy(value).chars().take(500).collect()
}

/// The mark's `high_water_ms` and the lease (hex) that wrote it (see
/// [`crate::fleet::parse_mark`]); a mark no id of `layout` can be issued above is unusable.
fn parse_mark(kv: Option<&pb::KeyValue>, layout: &Layout) -> Result<(u64, Option<String>), String> {
    match kv {
        Some(kv) => {
            let (mark_ms, writer) =
                crate::fleet::parse_mark(&kv.value, layout.epoch_ms(), "lease")?;
            crate::fleet::check_mark_in_layout(mark_ms, layout)?;
            Ok((mark_ms, writer))
        }
        None => Ok((0, None)),
    }
}

/// Compares that `key` is attached to `lease_id` (false when the key is absent).
fn lease_is(key: &str, lease_id: i64) -> pb::Compare {
    pb::Compare {
        result: pb::compare::CompareResult::Equal as i32,
        target: pb::compare::CompareTarget::Lease as i32,
        key: key.as_bytes().to_vec(),
        range_end: Vec::new(),
        target_union: Some(pb::compare::TargetUnion::Lease(lease_id)),
    }
}

/// Compares `key`'s `mod_revision` (0: the key is absent).
fn mod_revision_is(key: &str, revision: i64) -> pb::Compare {
    pb::Compare {
        result: pb::compare::CompareResult::Equal as i32,
        target: pb::compare::CompareTarget::Mod as i32,
        key: key.as_bytes().to_vec(),
        range_end: Vec::new(),
        target_union: Some(pb::compare::TargetUnion::ModRevision(revision)),
    }
}

fn put(key: &str, value: String, lease: i64) -> pb::RequestOp {
    pb::RequestOp {
        request: Some(pb::request_op::Request::RequestPut(pb::PutRequest {
            key: key.as_bytes().to_vec(),
            value: value.into_bytes(),
            lease,
            prev_kv: false,
        })),
    }
}

fn get(key: &str) -> pb::RequestOp {
    pb::RequestOp {
        request: Some(pb::request_op::Request::RequestRange(pb::RangeRequest {
            key: key.as_bytes().to_vec(),
            ..Default::default()
        })),
    }
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

fn unreachable(config: &EtcdConfig, err: &EtcdError) -> ClaimError {
    ClaimError::Unreachable {
        endpoints: config.endpoints.join(","),
        waited_secs: 0,
        last: err.to_string(),
    }
}

/// The safety margin: the node stops issuing this long before the lease could expire (a fifth
/// of the TTL).
pub fn margin(ttl_secs: u64) -> Duration {
    Duration::from_secs(ttl_secs) / 5
}

/// One call's time limit: a third of the TTL, at most 2 s.
fn call_timeout(ttl_secs: u64) -> Duration {
    (Duration::from_secs(ttl_secs) / 3).min(MAX_CALL_TIMEOUT)
}

/// The pause between keep-alives: a third of the TTL.
fn keep_alive_interval(ttl_secs: u64) -> Duration {
    Duration::from_secs(ttl_secs) / 3
}

/// The TTL to rely on, from the one etcd answered (`granted`, to a grant or a keep-alive) and
/// the one asked for: never more than asked. etcd grants at most what it is asked (or raises
/// a tiny TTL to its minimum, which only makes the lease last longer than we assume), so a
/// larger answer is not trusted beyond what was asked. `None` when the answer says the lease
/// is gone (0 or less).
fn trusted_ttl(granted: i64, asked_secs: u64) -> Option<u64> {
    u64::try_from(granted)
        .ok()
        .filter(|&ttl| ttl > 0)
        .map(|ttl| ttl.min(asked_secs.max(1)))
}

/// Until when a lease of `ttl_secs` whose grant or keep-alive was sent at `sent` is provably
/// held: TTL after sending, less the margin. A deadline past what an `Instant` can hold proves
/// nothing: `sent` itself (already over).
fn held_until(sent: Instant, ttl_secs: u64) -> Instant {
    let ttl = Duration::from_secs(ttl_secs);
    sent.checked_add(ttl - margin(ttl_secs)).unwrap_or(sent)
}

fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::{
        MAX_CALL_TIMEOUT, call_timeout, held_until, keep_alive_interval, margin, trusted_ttl,
    };
    use std::time::{Duration, Instant};

    #[test]
    fn an_answered_ttl_is_trusted_only_up_to_the_one_asked_for() {
        assert_eq!(trusted_ttl(10, 10), Some(10));
        assert_eq!(
            trusted_ttl(4, 10),
            Some(4),
            "less than asked is taken as is"
        );
        assert_eq!(
            trusted_ttl(11, 10),
            Some(10),
            "more than asked is not trusted"
        );
        assert_eq!(trusted_ttl(i64::MAX, 10), Some(10));
        assert_eq!(
            trusted_ttl(i64::MAX, u64::MAX),
            Some(u64::try_from(i64::MAX).unwrap())
        );
        assert_eq!(trusted_ttl(2, 0), Some(1), "asked for 0: at most 1 s");
        for gone in [0, -1, i64::MIN] {
            assert_eq!(trusted_ttl(gone, 10), None, "{gone}");
        }
    }

    #[test]
    fn times_from_absurd_ttls_do_not_panic() {
        let now = Instant::now();
        assert_eq!(margin(5), Duration::from_secs(1));
        assert_eq!(margin(3), Duration::from_millis(600));
        assert_eq!(margin(u64::MAX), Duration::from_secs(u64::MAX) / 5);
        assert_eq!(call_timeout(3), Duration::from_secs(1));
        assert_eq!(call_timeout(u64::MAX), MAX_CALL_TIMEOUT);
        assert_eq!(call_timeout(0), Duration::ZERO);
        assert_eq!(keep_alive_interval(3), Duration::from_secs(1));
        assert_eq!(
            keep_alive_interval(u64::MAX),
            Duration::from_secs(u64::MAX) / 3
        );
        assert_eq!(held_until(now, 5), now + Duration::from_secs(4));
        assert_eq!(held_until(now, 0), now);
        // Past what an Instant holds: no proof at all, rather than a panic.
        assert_eq!(held_until(now, u64::MAX), now);
        assert!(held_until(now, u64::try_from(i64::MAX).unwrap()) >= now);
    }
}

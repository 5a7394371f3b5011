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
//!   there (and to its state directory) before issuing under it, in a transaction that succeeds
//!   only while the claim key is still attached to this node's lease. A successor reads it in
//!   its claim transaction and issues only above it. The mark key has no lease: it outlives
//!   every holder.
//! - **Outage.** Keep-alives go to the next member when one fails. If the lease expired in the
//!   meantime, the node claims the same pair again with a new lease (reading the mark again);
//!   if another node holds it by then, this node can never serve it again and stops.
//! - **Goodbye.** On graceful shutdown the exact mark is written, then the lease is revoked so
//!   the pair is free at once.

mod client;

pub use client::{EtcdClient, EtcdError, KeepAliveStream};

use crate::config::EtcdConfig;
use crate::fleet::{BoxFuture, Coordinator, Fence, LeaseInfo, Proof};
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
    /// The TTL etcd granted, in seconds.
    ttl_secs: u64,
}

/// The outcome of one claim transaction.
#[derive(Debug)]
enum Attempt {
    /// The pair is ours; the mark read with it, and the lease (hex) that wrote that mark.
    Claimed {
        floor_ms: u64,
        writer: Option<String>,
    },
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
    epoch_ms: u64,
    proof: Proof<Lease>,
}

impl EtcdLease {
    /// Claims a pair in `datacenter_id`: exactly `worker_id` when given (retrying while it is
    /// held, up to the claim timeout), else the lowest free worker.
    pub async fn claim(
        config: &EtcdConfig,
        layout: &Layout,
        datacenter_id: u64,
        worker_id: Option<u64>,
        holder: &Holder,
    ) -> Result<EtcdLease, ClaimError> {
        let client = EtcdClient::new(&config.endpoints, call_timeout(config.lease_ttl_secs))
            .map_err(|e| ClaimError::Unreachable {
                endpoints: config.endpoints.join(","),
                waited_secs: 0,
                last: e.to_string(),
            })?;
        let holder_json = serde_json::to_string(holder).unwrap_or_else(|_| "{}".into());
        let started = Instant::now();
        let deadline = started + config.claim_timeout;
        let timeout = call_timeout(config.lease_ttl_secs);
        let waited = |started: Instant| started.elapsed().as_secs();
        let mut lease: Option<(i64, u64, Instant)> = None;
        let mut last_error = String::new();
        loop {
            let result: Result<Option<(u64, u64)>, ClaimError> = async {
                // A lease older than half its TTL may lapse before the claim lands: take a new one.
                if let Some((id, ttl, granted)) = lease
                    && granted.elapsed() > Duration::from_millis(ttl * 500)
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
                        let ttl = u64::try_from(granted.ttl).unwrap_or(0).max(1);
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
                            .filter(|w| !held.contains(w))
                            .collect()
                    }
                };
                let mut held_by = None;
                for &w in &candidates {
                    let keys = Keys::new(&config.prefix, datacenter_id, w);
                    match try_claim(
                        &client,
                        &keys,
                        lease_id,
                        &holder_json,
                        layout.epoch_ms(),
                        timeout,
                    )
                    .await
                    .map_err(|e| unreachable(config, &e))?
                    {
                        Ok(Attempt::Claimed { floor_ms, .. }) => return Ok(Some((w, floor_ms))),
                        Ok(Attempt::HeldBy { holder }) => held_by = Some((w, holder, keys.claim)),
                        Err(reason) => {
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
                    _ => Err(ClaimError::Full {
                        datacenter_id,
                        count: layout.max_worker_id() + 1,
                        prefix: format!("{}/workers/{datacenter_id}/", config.prefix),
                    }),
                }
            }
            .await;
            match result {
                Ok(Some((w, floor_ms))) => {
                    let (lease_id, ttl_secs, sent) = lease.expect("a lease was granted");
                    let until = sent + Duration::from_secs(ttl_secs) - margin(ttl_secs);
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
                        epoch_ms: layout.epoch_ms(),
                        proof: Proof::new(Lease { lease_id, ttl_secs }, until, floor_ms),
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

    /// The keep-alive loop (see [`Coordinator::run`]).
    async fn keep(&self, mut stop: watch::Receiver<bool>) -> Result<(), String> {
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
            let interval = Duration::from_millis(ttl_secs * 1000 / 3);
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
            let next = match outcome {
                Ok(ttl) if ttl > 0 => {
                    let ttl = u64::try_from(ttl).unwrap_or(ttl_secs);
                    let until = sent + Duration::from_secs(ttl) - margin(ttl);
                    if self.proof.renewed(until, |lease| lease.ttl_secs = ttl) {
                        tracing::info!(key = %self.claim_key, "lease renewed again");
                    }
                    sent + interval
                }
                Ok(_) => {
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
                    Instant::now() + Duration::from_millis(200)
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
            let ttl = u64::try_from(granted.ttl).unwrap_or(0).max(1);
            match try_claim(
                &self.client,
                &keys,
                granted.id,
                &self.holder,
                self.epoch_ms,
                timeout,
            )
            .await
            {
                Ok(Ok(Attempt::Claimed { floor_ms, writer })) => {
                    let until = sent + Duration::from_secs(ttl) - margin(ttl);
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
                    });
                    tracing::info!(
                        key = %self.claim_key,
                        lease = %format!("{:x}", granted.id),
                        takeover_mark_ms = floor_ms,
                        "claimed the pair again"
                    );
                    return Ok(());
                }
                Ok(Ok(Attempt::HeldBy { holder })) => {
                    let _ = self.client.revoke(granted.id, timeout).await;
                    return Err(format!(
                        "lost worker {} of datacenter {} to another node while etcd was out of \
                         reach: {holder} (etcd key {}); this node can never serve that pair again, \
                         so it stops (restart it to claim a free pair)",
                        self.worker_id, self.datacenter_id, self.claim_key
                    ));
                }
                Ok(Err(reason)) => {
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

    async fn write_mark(&self, mark_ms: u64) -> Result<(), String> {
        let (lease_id, ttl_secs) = {
            let state = self.proof.lock();
            if let Some(reason) = state.lost_reason() {
                return Err(format!("the lease is lost ({reason})"));
            }
            (state.own.lease_id, state.own.ttl_secs)
        };
        let value =
            crate::fleet::mark_json(mark_ms, self.epoch_ms, "lease", &format!("{lease_id:x}"));
        let request = pb::TxnRequest {
            compare: vec![pb::Compare {
                result: pb::compare::CompareResult::Equal as i32,
                target: pb::compare::CompareTarget::Lease as i32,
                key: self.claim_key.as_bytes().to_vec(),
                range_end: Vec::new(),
                target_union: Some(pb::compare::TargetUnion::Lease(lease_id)),
            }],
            success: vec![put(&self.mark_key, value, 0)],
            failure: vec![],
        };
        match self.client.txn(request, call_timeout(ttl_secs)).await {
            Ok(response) if response.succeeded => Ok(()),
            Ok(_) => {
                let reason = format!(
                    "{} is no longer attached to this node's lease {lease_id:x}",
                    self.claim_key
                );
                self.lose(reason.clone());
                Err(reason)
            }
            Err(err) => Err(err.to_string()),
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

/// One claim transaction: create the claim key under `lease_id` if absent, and read the mark.
/// The outer error is etcd's; the inner one an unreadable mark.
async fn try_claim(
    client: &EtcdClient,
    keys: &Keys,
    lease_id: i64,
    holder: &str,
    epoch_ms: u64,
    timeout: Duration,
) -> Result<Result<Attempt, String>, EtcdError> {
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
    let mut ranges = response
        .responses
        .into_iter()
        .filter_map(|op| match op.response {
            Some(pb::response_op::Response::ResponseRange(range)) => Some(range),
            _ => None,
        });
    if response.succeeded {
        let mark = ranges.next().and_then(|r| r.kvs.into_iter().next());
        return Ok(parse_mark(mark.as_ref(), epoch_ms)
            .map(|(floor_ms, writer)| Attempt::Claimed { floor_ms, writer }));
    }
    let claim = ranges.next().and_then(|r| r.kvs.into_iter().next());
    let mark = ranges.next().and_then(|r| r.kvs.into_iter().next());
    match claim {
        // Our own earlier attempt landed although its answer was lost: the pair is ours.
        Some(kv) if kv.lease == lease_id => Ok(parse_mark(mark.as_ref(), epoch_ms)
            .map(|(floor_ms, writer)| Attempt::Claimed { floor_ms, writer })),
        Some(kv) => Ok(Ok(Attempt::HeldBy {
            holder: String::from_utf8_lossy(&kv.value)
                .chars()
                .take(500)
                .collect(),
        })),
        // Deleted between the compare and the read cannot happen inside one transaction.
        None => Ok(Ok(Attempt::HeldBy {
            holder: "(unknown)".into(),
        })),
    }
}

/// The mark's `high_water_ms` and the lease (hex) that wrote it; see [`fleet::parse_mark`].
fn parse_mark(kv: Option<&pb::KeyValue>, epoch_ms: u64) -> Result<(u64, Option<String>), String> {
    match kv {
        Some(kv) => crate::fleet::parse_mark(&kv.value, epoch_ms, "lease"),
        None => Ok((0, None)),
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

fn unreachable(config: &EtcdConfig, err: &EtcdError) -> ClaimError {
    ClaimError::Unreachable {
        endpoints: config.endpoints.join(","),
        waited_secs: 0,
        last: err.to_string(),
    }
}

/// The safety margin: the node stops issuing this long before the lease could expire.
pub fn margin(ttl_secs: u64) -> Duration {
    Duration::from_millis(ttl_secs * 1000 / 5)
}

/// One call's time limit: a third of the TTL, at most 2 s.
fn call_timeout(ttl_secs: u64) -> Duration {
    Duration::from_millis(ttl_secs * 1000 / 3).min(MAX_CALL_TIMEOUT)
}

fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

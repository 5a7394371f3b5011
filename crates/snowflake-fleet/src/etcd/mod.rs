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
//! - **Layout.** `PREFIX/layout` records the fleet's layout once (created if absent by the
//!   first claimant); every claim transaction compares it, so a node with another layout
//!   refuses to start, naming both.
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
//!
//! One concept per file, as etcd's lease package: `client` (the calls, over tonic), `txn`
//! (the pieces of a transaction), `claim` (the first claim), `keep` (keep-alives and the
//! re-claim after an outage), `watch` (the claim key watched), `mark` (the mark written
//! ahead of use) and `operator` (`snowflake state show` / `lower-mark`).

mod claim;
mod client;
mod keep;
mod layout;
mod mark;
mod operator;
mod txn;
mod watch;

pub(crate) use claim::far_ahead;
pub use claim::{ClaimError, FAR_AHEAD_MS, Holder};
pub use client::{EtcdClient, EtcdError, KeepAliveStream, WatchStream};
pub use operator::{lower_mark, read_layout, read_mark};

use crate::config::EtcdConfig;
use crate::coordinator::{BoxFuture, Coordinator};
use crate::error::FleetError;
use crate::fence::Fence;
use crate::held::{HeldPair, canonical_worker};
use crate::lease_info::LeaseInfo;
use crate::proof::{LeaseDescription, Proof};
use snowflake_core::Layout;
use std::time::{Duration, Instant};

/// The code generated from `proto/etcd/rpc.proto`: etcd's KV, Lease, Watch and Auth clients.
#[allow(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    clippy::all,
    clippy::pedantic
)]
pub mod pb;

/// How long one etcd call may take, at most.
const MAX_CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// Pause between attempts while etcd is unreachable or a pinned pair is held.
const RETRY_PAUSE: Duration = Duration::from_millis(500);

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

/// A (datacenter, worker) pair leased from etcd.
#[derive(Debug)]
pub struct EtcdLease {
    /// The client every call of this lease goes through.
    client: EtcdClient,
    /// The settings it was claimed with (the TTL asked for, the prefix).
    config: EtcdConfig,
    /// The claimed datacenter.
    datacenter_id: u64,
    /// The claimed worker.
    worker_id: u64,
    /// `PREFIX/workers/D/W`, attached to the lease.
    claim_key: String,
    /// `PREFIX/marks/D/W`, without a lease: it outlives every holder.
    mark_key: String,
    /// The claim key's value (the holder's JSON), written again at a re-claim.
    holder: String,
    /// The layout, for the marks' epoch and their layout check.
    layout: Layout,
    /// The proof of holding, with the lease under its lock.
    proof: Proof<Lease>,
}

impl EtcdLease {
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
    async fn keep(&self, stop: tokio::sync::watch::Receiver<bool>) -> Result<(), FleetError> {
        tokio::select! {
            result = self.keep_alive(stop.clone()) => result,
            () = self.watch_claim(stop) => Ok(()),
        }
    }

    /// The keys of this lease's pair.
    fn keys(&self) -> Keys {
        Keys {
            claim: self.claim_key.clone(),
            mark: self.mark_key.clone(),
            prefix: self.config.prefix.clone(),
        }
    }
}

impl Coordinator for EtcdLease {
    fn source(&self) -> &'static str {
        "etcd"
    }

    fn fence(&self) -> tokio::sync::watch::Receiver<Fence> {
        self.proof.fence()
    }

    fn store_mark(&self, mark_ms: u64) -> BoxFuture<'_, Result<(), FleetError>> {
        Box::pin(self.write_mark(mark_ms))
    }

    fn run(
        &self,
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> BoxFuture<'_, Result<(), FleetError>> {
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
            |lease| LeaseDescription {
                lease_id: Some(format!("{:x}", lease.lease_id)),
                ttl_secs: lease.ttl_secs,
            },
        )
    }

    fn held_pairs(&self) -> BoxFuture<'_, Result<Vec<HeldPair>, FleetError>> {
        Box::pin(async move {
            let prefix = format!("{}/workers/{}/", self.config.prefix, self.datacenter_id);
            let ttl_secs = self.proof.lock().own.ttl_secs;
            let kvs = self
                .client
                .range_prefix(&prefix, call_timeout(ttl_secs))
                .await
                .map_err(|e| {
                    FleetError::Unavailable(format!("cannot list {prefix} in etcd: {e}"))
                })?;
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
/// The keys of one pair, and the prefix they are under.
#[derive(Debug, Clone)]
struct Keys {
    claim: String,
    mark: String,
    prefix: String,
}

impl Keys {
    fn new(prefix: &str, datacenter_id: u64, worker_id: u64) -> Keys {
        Keys {
            claim: format!("{prefix}/workers/{datacenter_id}/{worker_id}"),
            mark: format!("{prefix}/marks/{datacenter_id}/{worker_id}"),
            prefix: prefix.to_owned(),
        }
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

//! The coordinators that lease a node its (datacenter, worker) pair, side by side: [`etcd`]
//! (a lease with keep-alives) and [`zookeeper`] (an ephemeral znode, the 2010 layout), and what
//! they share.
//!
//! What the node needs from a coordination service that leases its (datacenter, worker) pair
//! (etcd or ZooKeeper): a fence that says until when the pair is provably held, and a durable
//! copy of the high-water mark that only the holder can write. `Proof` is the bookkeeping of
//! that fence which both coordinators share.
//!
//! The node never issues an ID while the fence is down or past its deadline, and never above a
//! mark that the coordination service has not durably accepted. A successor that claims the
//! pair reads that mark and issues only above it, so even a predecessor that lost its lease
//! without noticing (frozen, partitioned, its clock ahead) cannot collide with it: everything
//! it could still issue is at or below the mark it wrote while it held the pair.

pub mod etcd;
pub mod zookeeper;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;
use tokio::sync::watch;

/// A boxed future, so the node can hold any coordinator behind one trait object.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Whether the node may issue IDs as far as the coordination service is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fence {
    /// The pair is held: IDs may be issued until `until` (local monotonic time: the earliest
    /// moment the lease could expire, less a safety margin), and only above `floor_ms`.
    Held {
        /// When the proof of holding runs out unless renewed.
        until: Instant,
        /// The mark read when the pair was claimed (Unix ms): a previous holder may have
        /// issued IDs up to it, so this node issues only above it.
        floor_ms: u64,
    },
    /// The node cannot prove it holds the pair; the reason, in words.
    Lost {
        /// Why.
        reason: String,
    },
}

/// What `/v1/info` and the metrics show about the lease.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LeaseInfo {
    /// `held`, `renewing` (held, but the last renewal failed) or `lost`.
    pub state: &'static str,
    /// The lease's id as etcd shows it (hex), when one is held.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_id: Option<String>,
    /// The TTL etcd granted, in seconds.
    pub ttl_secs: u64,
    /// Milliseconds left before the node stops issuing unless the lease is renewed (0 when
    /// lost).
    pub remaining_ms: u64,
    /// The key that records the claim.
    pub key: String,
    /// Why the lease is not held, when it is not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Successful renewals so far.
    pub renewals: u64,
    /// Failed renewal attempts so far.
    pub renewal_failures: u64,
    /// Times the lease was lost (expired or taken away) and had to be claimed again.
    pub losses: u64,
}

impl LeaseInfo {
    /// The state label, the reason and the milliseconds left, from what a coordinator knows:
    /// why it lost the pair (if it did), until when holding is proven, and whether the last
    /// renewal failed. `out_of_reach` explains a deadline that passed without a renewal.
    pub fn status(
        lost_reason: Option<&str>,
        until: Option<Instant>,
        renewing: bool,
        out_of_reach: &str,
    ) -> (&'static str, Option<String>, u64) {
        let remaining = until.map_or(std::time::Duration::ZERO, |u| {
            u.saturating_duration_since(Instant::now())
        });
        let remaining_ms = u64::try_from(remaining.as_millis()).unwrap_or(u64::MAX);
        let (label, reason) = match (lost_reason, remaining.is_zero()) {
            (Some(reason), _) => ("lost", Some(reason.to_owned())),
            (None, true) => ("lost", Some(out_of_reach.to_owned())),
            (None, false) if renewing => ("renewing", None),
            (None, false) => ("held", None),
        };
        (label, reason, remaining_ms)
    }
}

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
}

/// The state behind [`Proof`]'s lock.
#[derive(Debug)]
pub(crate) struct Proven<T> {
    /// The coordinator's own state.
    pub(crate) own: T,
    /// Until when the pair is provably held (already less the margin); `None` when lost.
    until: Option<Instant>,
    /// The mark read at the last claim.
    floor_ms: u64,
    /// The last renewal failed (the pair may still be held).
    renewing: bool,
    /// Why the pair is not held, when it is not.
    lost_reason: Option<String>,
}

impl<T> Proven<T> {
    /// Why the pair is not held, when it is not.
    pub(crate) fn lost_reason(&self) -> Option<&str> {
        self.lost_reason.as_deref()
    }
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
            }),
            fence,
            renewals: AtomicU64::new(0),
            renewal_failures: AtomicU64::new(0),
            losses: AtomicU64::new(0),
        }
    }

    /// The state; nothing panics while holding it, but a poisoned lock is still usable.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Proven<T>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The fence (see [`Coordinator::fence`]).
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
        self.fence.send_replace(Fence::Held {
            until,
            floor_ms: state.floor_ms,
        });
        was_renewing
    }

    /// A renewal failed (the pair may still be held until the fence runs out). Returns whether
    /// it is the first failure in a row, and whether the proof has run out.
    pub(crate) fn renewal_failed(&self) -> (bool, bool) {
        self.renewal_failures.fetch_add(1, Ordering::Relaxed);
        let (first, until) = {
            let mut state = self.lock();
            let first = !state.renewing;
            state.renewing = true;
            (first, state.until)
        };
        (first, until.is_some_and(|u| Instant::now() >= u))
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
        self.fence.send_replace(Fence::Held { until, floor_ms });
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
        describe: impl FnOnce(&T) -> (Option<String>, u64),
    ) -> LeaseInfo {
        let state = self.lock();
        let (label, reason, remaining_ms) = LeaseInfo::status(
            state.lost_reason.as_deref(),
            state.until,
            state.renewing,
            out_of_reach,
        );
        let (lease_id, ttl_secs) = describe(&state.own);
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
        }
    }
}

/// A coordination service that leased this node its pair.
pub trait Coordinator: Send + Sync + fmt::Debug {
    /// `etcd`: where the pair came from (the `identity_source` of `/v1/info` and metrics).
    fn source(&self) -> &'static str;

    /// The fence; it changes when the lease is renewed, lost or re-established.
    fn fence(&self) -> watch::Receiver<Fence>;

    /// Durably records `mark_ms` (Unix ms) as the pair's high-water mark, only while this node
    /// still holds the pair. `Ok` means a successor will see it.
    fn store_mark(&self, mark_ms: u64) -> BoxFuture<'_, Result<(), String>>;

    /// Keeps the lease alive until `stop` flips, re-establishing it after an outage. Returns an
    /// error only when the node can never hold its pair again (another node claimed it): the
    /// service then stops.
    fn run(&self, stop: watch::Receiver<bool>) -> BoxFuture<'_, Result<(), String>>;

    /// Gives the pair up (after the final mark is stored) so another node may claim it at once.
    fn release(&self) -> BoxFuture<'_, ()>;

    /// The lease, for `/v1/info` and the metrics.
    fn info(&self) -> LeaseInfo;

    /// The pairs held in this node's datacenter right now, as the coordination service shows
    /// them (for the status page's fleet table and the free-pairs metric; read through a
    /// [`FleetView`], never per page view).
    fn held_pairs(&self) -> BoxFuture<'_, Result<Vec<HeldPair>, String>>;

    /// How many worker ids the datacenter has (32 with the 2010 layout).
    fn workers_per_datacenter(&self) -> u64;
}

/// One held pair, as the coordination service records it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HeldPair {
    /// The datacenter id.
    pub datacenter_id: u64,
    /// The worker id.
    pub worker_id: u64,
    /// Who holds it: host and process (etcd), or the ZooKeeper session.
    pub holder: String,
    /// Where it serves: its listeners (etcd), or its advertised Thrift address (ZooKeeper).
    pub address: String,
    /// Since when (ISO-8601 UTC): the holder's start (etcd), the znode's creation (ZooKeeper).
    pub since: String,
}

/// A claim's worker id as its key or znode name spells it: the canonical decimal of an id the
/// layout has (`07`, `+7` or `40` name no worker the nodes claim, and are left out of the
/// fleet's table and counts).
pub(crate) fn canonical_worker(text: &str, max_worker_id: u64) -> Option<u64> {
    let worker: u64 = text.parse().ok()?;
    (worker <= max_worker_id && worker.to_string() == text).then_some(worker)
}

/// How often a node reads the held pairs of its datacenter again.
pub const FLEET_REFRESH: std::time::Duration = std::time::Duration::from_secs(10);

/// The last read of the held pairs, refreshed in the background every [`FLEET_REFRESH`]:
/// page views and scrapes read this copy, so they cannot load the coordination service.
#[derive(Debug, Default)]
pub struct FleetView {
    last: Mutex<Option<FleetRead>>,
}

/// One read of the held pairs.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FleetRead {
    /// The node's datacenter.
    pub datacenter_id: u64,
    /// Worker ids per datacenter.
    pub workers: u64,
    /// The pairs, by worker id, as last read successfully (empty before the first success).
    pub held: Vec<HeldPair>,
    /// Why the last read failed, if it did (`held` is then the last good read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When `held` was read (Unix ms).
    pub read_at_ms: u64,
}

impl FleetView {
    /// The last read, if any.
    pub fn get(&self) -> Option<FleetRead> {
        self.last
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .clone()
    }

    /// Reads the held pairs from `coordinator` now, keeping the previous pairs if it fails.
    pub async fn refresh(&self, coordinator: &dyn Coordinator, datacenter_id: u64) {
        let read = coordinator.held_pairs().await;
        let now_ms = snowflake_core::Clock::now_ms(&snowflake_core::SystemClock);
        let mut last = self
            .last
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        match read {
            Ok(mut held) => {
                held.sort_by_key(|p| (p.datacenter_id, p.worker_id));
                *last = Some(FleetRead {
                    datacenter_id,
                    workers: coordinator.workers_per_datacenter(),
                    held,
                    error: None,
                    read_at_ms: now_ms,
                });
            }
            Err(error) => match last.as_mut() {
                Some(previous) => previous.error = Some(error),
                None => {
                    *last = Some(FleetRead {
                        datacenter_id,
                        workers: coordinator.workers_per_datacenter(),
                        held: Vec::new(),
                        error: Some(error),
                        read_at_ms: 0,
                    });
                }
            },
        }
    }

    /// Refreshes the view every [`FLEET_REFRESH`] until `stop` flips.
    pub async fn keep_fresh(
        &self,
        coordinator: &dyn Coordinator,
        datacenter_id: u64,
        mut stop: watch::Receiver<bool>,
    ) {
        loop {
            // A read in flight is abandoned at the stop: a slow coordination service must not
            // hold up the drain, the final mark and the release behind it.
            tokio::select! {
                () = self.refresh(coordinator, datacenter_id) => {}
                _ = stop.wait_for(|stop| *stop) => return,
            }
            tokio::select! {
                () = tokio::time::sleep(FLEET_REFRESH) => {}
                _ = stop.wait_for(|stop| *stop) => return,
            }
        }
    }
}

/// Reads a pair's high-water mark as stored in a coordination service: JSON with
/// `high_water_ms` (Unix ms), `epoch_ms`, and the writer's lease or session id under
/// `writer_field`. Empty data means no mark yet (0). A mark written by a node with another epoch
/// is refused: a fleet sharing one namespace must share one layout.
pub fn parse_mark(
    data: &[u8],
    epoch_ms: u64,
    writer_field: &str,
) -> Result<(u64, Option<String>), String> {
    if data.is_empty() {
        return Ok((0, None));
    }
    let value: serde_json::Value = serde_json::from_slice(data).map_err(|e| {
        format!(
            "not JSON ({e}): {:?}",
            String::from_utf8_lossy(data)
                .chars()
                .take(100)
                .collect::<String>()
        )
    })?;
    let shown: String = value.to_string().chars().take(200).collect();
    let mark = value
        .get("high_water_ms")
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| format!("no whole-number high_water_ms in {shown}"))?;
    let writer = value
        .get(writer_field)
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned);
    match value.get("epoch_ms").map(serde_json::Value::as_u64) {
        None => Ok((mark, writer)),
        Some(Some(theirs)) if theirs == epoch_ms => Ok((mark, writer)),
        Some(theirs) => Err(format!(
            "it was written by a node using epoch {}, and this node uses {epoch_ms}: nodes \
             sharing one fleet namespace must share one layout (--epoch-ms)",
            theirs.map_or_else(|| "(not a number)".to_owned(), |e| e.to_string())
        )),
    }
}

/// The JSON of a pair's high-water mark, as [`parse_mark`] reads it.
pub fn mark_json(mark_ms: u64, epoch_ms: u64, writer_field: &str, writer: &str) -> String {
    let mut value = serde_json::json!({
        "high_water_ms": mark_ms,
        "time": snowflake_core::format_unix_ms(mark_ms),
        "epoch_ms": epoch_ms,
    });
    value[writer_field] = serde_json::Value::String(writer.to_owned());
    value.to_string()
}

/// A pair's mark as an operator tool reads it from a coordination service.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StoredMark {
    /// The high-water mark (Unix ms); 0 when none was ever written.
    pub high_water_ms: u64,
    /// The stored value as it is, for display (empty when none).
    pub value: String,
    /// Who holds the pair right now (the claim key's value, or the znode's data and session),
    /// if anybody does.
    pub holder: Option<String>,
    /// Where it is stored (the etcd key or the znode path).
    pub location: String,
}

/// Refuses a mark no ID of `layout` can ever be issued above: past the layout's last
/// millisecond, the pair could never open again. Returns the mark when it is usable.
pub fn check_mark_in_layout(mark_ms: u64, layout: &snowflake_core::Layout) -> Result<u64, String> {
    let last_ms = layout.max_timestamp_ms();
    if mark_ms >= last_ms {
        return Err(format!(
            "it is {mark_ms} ({}), at or past the layout's last millisecond {last_ms} ({}), so no \
             id could ever be issued above it (a clock far in the future wrote it?); lower it \
             with `snowflake state lower-mark` if no id above the real time was ever used",
            snowflake_core::format_unix_ms(mark_ms),
            snowflake_core::format_unix_ms(last_ms)
        ));
    }
    Ok(mark_ms)
}

/// The JSON of a mark lowered by an operator (`snowflake state lower-mark`): [`mark_json`]'s
/// fields, with the writer `operator`, plus who lowered it, when, and from what.
pub fn lowered_mark_json(
    to_ms: u64,
    epoch_ms: u64,
    writer_field: &str,
    from_ms: u64,
    by: &str,
    at_ms: u64,
) -> String {
    let mut value: serde_json::Value =
        serde_json::from_str(&mark_json(to_ms, epoch_ms, writer_field, "operator"))
            .unwrap_or_default();
    value["lowered"] = serde_json::json!({
        "from_ms": from_ms,
        "by": by,
        "at_ms": at_ms,
        "at": snowflake_core::format_unix_ms(at_ms),
    });
    value.to_string()
}

#[cfg(test)]
mod tests {
    use super::{Fence, Proof, mark_json, parse_mark};
    use std::time::{Duration, Instant};

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
            proof.info("k", "late", |own| (None, u64::from(*own))).state,
            "held"
        );

        // Failures: only the first in a row is new; the proof has not run out.
        assert_eq!(proof.renewal_failed(), (true, false));
        assert_eq!(proof.renewal_failed(), (false, false));
        assert_eq!(proof.info("k", "late", |_| (None, 0)).state, "renewing");
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
        let info = proof.info("k", "late", |own| (Some(own.to_string()), 1));
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
        let info = proof.info("k", "late", |_| (None, 0));
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
        let info = proof.info("k", "late", |_| (None, 0));
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
    fn a_proof_whose_deadline_passed_is_late() {
        let proof = Proof::new((), Instant::now(), 0);
        assert_eq!(proof.renewal_failed(), (true, true));
        let info = proof.info("k", "out of reach", |()| (None, 0));
        assert_eq!(
            (info.state, info.reason.as_deref()),
            ("lost", Some("out of reach"))
        );
    }

    #[test]
    fn marks_round_trip_and_bad_ones_are_explained() {
        let json = mark_json(1_700_000_000_000, 1_288_834_974_657, "lease", "7f");
        assert_eq!(
            parse_mark(json.as_bytes(), 1_288_834_974_657, "lease"),
            Ok((1_700_000_000_000, Some("7f".into())))
        );
        assert_eq!(parse_mark(b"", 0, "lease"), Ok((0, None)));
        assert!(
            parse_mark(b"garbage", 0, "lease")
                .unwrap_err()
                .contains("not JSON")
        );
        assert!(
            parse_mark(b"{\"high_water_ms\":-1}", 0, "lease")
                .unwrap_err()
                .contains("high_water_ms")
        );
        assert!(
            parse_mark(json.as_bytes(), 0, "lease")
                .unwrap_err()
                .contains("epoch 1288834974657")
        );
    }
}

#[cfg(test)]
mod view_tests {
    use super::*;

    #[test]
    fn only_canonical_worker_ids_of_the_layout_count() {
        assert_eq!(canonical_worker("7", 31), Some(7));
        assert_eq!(canonical_worker("0", 31), Some(0));
        for odd in ["07", "+7", "32", "-1", "", "x"] {
            assert_eq!(canonical_worker(odd, 31), None, "{odd:?}");
        }
    }

    /// A coordinator whose listing never answers (a frozen coordination service).
    #[derive(Debug)]
    struct Frozen(watch::Sender<Fence>);

    impl Coordinator for Frozen {
        fn source(&self) -> &'static str {
            "etcd"
        }
        fn fence(&self) -> watch::Receiver<Fence> {
            self.0.subscribe()
        }
        fn store_mark(&self, _mark_ms: u64) -> BoxFuture<'_, Result<(), String>> {
            Box::pin(async { Ok(()) })
        }
        fn run(&self, _stop: watch::Receiver<bool>) -> BoxFuture<'_, Result<(), String>> {
            Box::pin(std::future::pending())
        }
        fn release(&self) -> BoxFuture<'_, ()> {
            Box::pin(async {})
        }
        fn info(&self) -> LeaseInfo {
            LeaseInfo {
                state: "held",
                lease_id: None,
                ttl_secs: 10,
                remaining_ms: 1,
                key: String::new(),
                reason: None,
                renewals: 0,
                renewal_failures: 0,
                losses: 0,
            }
        }
        fn held_pairs(&self) -> BoxFuture<'_, Result<Vec<HeldPair>, String>> {
            Box::pin(std::future::pending())
        }
        fn workers_per_datacenter(&self) -> u64 {
            32
        }
    }

    /// The stop does not wait for a listing in flight: the drain and the final mark come
    /// after this task.
    #[tokio::test]
    async fn a_stop_abandons_a_listing_that_never_answers() {
        let (fence, _) = watch::channel(Fence::Lost {
            reason: "test".into(),
        });
        let coordinator = Frozen(fence);
        let view = FleetView::default();
        let (stop_tx, stop_rx) = watch::channel(false);
        let stopper = async {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            let _ = stop_tx.send(true);
        };
        let ran = tokio::time::timeout(std::time::Duration::from_secs(5), async {
            tokio::join!(view.keep_fresh(&coordinator, 0, stop_rx), stopper);
        })
        .await;
        assert!(ran.is_ok(), "keep_fresh did not return after the stop");
        assert!(view.get().is_none());
    }
}

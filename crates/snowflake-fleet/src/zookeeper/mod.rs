//! Registering the worker id in ZooKeeper (`--zookeeper`), compatible with the 2010 layout and
//! with the fencing and takeover of the etcd lease (see `etcd` and DESIGN.md, "Fleet").
//!
//! - **Registration**, as in 2010: an ephemeral znode `PATH/W` (one path per datacenter) whose
//!   data is this node's advertised Thrift address `host:port`. Before registering, the node
//!   asks every registered peer over Thrift for its worker id (must match its znode), its
//!   datacenter id (must be ours) and its time (our clock must be within `--max-peer-skew-ms`
//!   of the peers' mean); otherwise it refuses to start. A peer that cannot be reached is
//!   skipped with a warning: a crashed node's znode lingers until its session expires, and
//!   refusing then would turn one crash into a fleet that cannot restart. Its worker stays taken.
//!   A node without `--worker-id` skips a free worker whose mark cannot be used (unreadable,
//!   another epoch, at or past the layout's last millisecond); a pinned one refuses to start.
//! - **Ownership proof**: the ephemeral znode alone proves nothing to a writer, because any
//!   znode freshly created by anyone is at version 0 and ZooKeeper's checks compare versions
//!   only: a znode deleted by hand while its holder's session lives and created again by
//!   another node looks the same to the old holder. What proves ownership is the mark znode's
//!   own version. Right after creating `PATH/W`, and before it issues anything, a registrant
//!   rewrites the mark (the same high-water mark, its session as writer) with a
//!   compare-and-set on the version it read; every later mark write of the holder is again a
//!   compare-and-set on the version its own previous write produced. So once another node has
//!   registered the worker, every write of the previous holder fails, whatever happened to
//!   the znode. A failed compare-and-set whose current writer is this very session (a write
//!   whose answer was lost) is adopted, never undone with a lower value.
//! - **Fence**: ZooKeeper expires a session no earlier than its timeout after it last heard from
//!   the client. Every third of the timeout the node reads its own znode's stat; from the moment
//!   a successful read was *sent*, the session is provably alive for the negotiated timeout. The
//!   node stops issuing a fifth of the timeout before that; and at once when its znode is deleted
//!   (a watch on it), when the znode belongs to another session or was created again, or when a
//!   mark write finds that another session wrote the mark since its own last write.
//! - **Mark**: a persistent znode `PATH-marks/W` (a sibling, so listing `PATH` shows only
//!   workers, as 2010 peers expect) holds the high-water mark, written before use in a
//!   multi-operation that checks that this node's znode still exists and compares-and-sets the
//!   mark's version (above). A node that registers reads it and issues only above it. Marks of
//!   the previous release (the same JSON, without the compare-and-set) are read as they are.
//! - **Release**: the node never deletes `PATH/W`: a delete can only compare versions, and every
//!   fresh znode has version 0, so it could delete another session's registration. A graceful
//!   stop closes the session instead, which removes this session's ephemeral znode and nothing
//!   else; a worker given back because its mark cannot be used is given back the same way.
//! - **New session**: when the session expires (2010 never recovered), or the registration is
//!   lost while it lives, the node closes the old session, opens a new one and registers the
//!   same worker again (the same proof, the mark read again). When its previous session's
//!   znode lingers (the client gave that session up before the server expired it), it waits for
//!   the server to expire it (at most the session timeout) instead of deleting it. If another
//!   node holds the worker by then, the service stops.
//! - **Mixed versions**: a node of the previous release writes the mark unconditionally, which
//!   bumps its version, so a new-version holder fences as soon as an old node that took the
//!   worker writes its first reservation (the safe direction). An old-version holder is still
//!   exposed to the deletion hole: it keeps writing against whichever znode exists. Upgrade
//!   every node of a path before relying on the proof, and never delete registration znodes by
//!   hand (stop the node, or let its session expire).
//!
//! One concept per file: `session` (sessions and bounded calls), `acl` (the digest
//! protection of the znodes), `peers` (the 2010 peer checks), `register` (the first
//! registration), `keep` (the session kept, and registered again), `mark` (the mark written
//! ahead of use), `operator` (`snowflake state show` / `lower-mark`) and `version` (the
//! server's version checked against the one the guarantee needs).

mod acl;
mod keep;
mod layout;
mod mark;
mod operator;
mod peers;
mod register;
mod session;
mod version;

pub use operator::{lower_mark, read_layout, read_mark};
pub use register::RegisterError;
pub use session::ZooKeeperError;

use crate::config::ZooKeeperConfig;
use crate::coordinator::{BoxFuture, Coordinator};
use crate::error::FleetError;
use crate::fence::Fence;
use crate::held::{HeldPair, canonical_worker};
use crate::lease_info::LeaseInfo;
use crate::proof::{LeaseDescription, Proof};
use session::{bounded, call_timeout, close};
use snowflake_core::Layout;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::watch;
use zookeeper_client as zk;

/// Pause between attempts while a pinned worker is held or ZooKeeper is out of reach (2010
/// retried every second).
const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// The session as this node knows it (what it proves is in the [`Proof`]).
#[derive(Debug)]
struct Session {
    /// `None` once closed (at release, or before registering again).
    client: Option<Arc<zk::Client>>,
    /// The session's id (hex), as ZooKeeper shows it.
    session: String,
    /// The negotiated session timeout.
    timeout: Duration,
    /// The mark znode's version after this session's last write: the next write's
    /// compare-and-set.
    mark_version: i32,
    /// When our registration znode was created (its `czxid`): a znode of the same path created
    /// later is not ours.
    czxid: i64,
    /// The watch set on our znode at registration, until the keeper takes it over.
    watcher: Option<zk::OneshotWatcher>,
}

/// A worker id registered in ZooKeeper.
#[derive(Debug)]
pub struct ZooKeeperRegistration {
    /// The settings it was registered with (the path, the session timeout, the credentials).
    config: ZooKeeperConfig,
    /// The datacenter (from configuration: one path per datacenter).
    datacenter_id: u64,
    /// The registered worker.
    worker_id: u64,
    /// `PATH/W`, the ephemeral registration.
    node_path: String,
    /// `PATH-marks/W`, the persistent mark.
    mark_path: String,
    /// The znode's data: the advertised Thrift address.
    data: String,
    /// The layout, for the marks' epoch and their layout check.
    layout: Layout,
    /// The proof of holding, with the session under its lock.
    proof: Proof<Session>,
    /// Given up at shutdown: never registered again.
    released: AtomicBool,
}

impl ZooKeeperRegistration {
    /// The registered worker id.
    pub fn worker_id(&self) -> u64 {
        self.worker_id
    }

    /// The datacenter id (from configuration).
    pub fn datacenter_id(&self) -> u64 {
        self.datacenter_id
    }

    /// The registration is gone (ZooKeeper says so): fence at once.
    fn lose(&self, reason: String) {
        if self.proof.lose(reason.clone()) {
            tracing::error!(znode = %self.node_path, %reason, "lost the registration: not issuing ids until the worker is registered again");
        }
    }
}

impl Coordinator for ZooKeeperRegistration {
    fn source(&self) -> &'static str {
        "zookeeper"
    }

    fn fence(&self) -> watch::Receiver<Fence> {
        self.proof.fence()
    }

    fn store_mark(&self, mark_ms: u64) -> BoxFuture<'_, Result<(), FleetError>> {
        Box::pin(self.write_mark(mark_ms))
    }

    fn run(&self, stop: watch::Receiver<bool>) -> BoxFuture<'_, Result<(), FleetError>> {
        Box::pin(self.keep(stop))
    }

    fn release(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.released.store(true, Ordering::SeqCst);
            let (client, timeout, lost) = {
                let mut state = self.proof.lock();
                let lost = state.lost_reason().is_some();
                (state.own.client.take(), state.own.timeout, lost)
            };
            self.proof.released();
            let Some(client) = client else { return };
            // Closing the session removes its ephemeral znode, and only that: a delete could
            // remove another session's registration of the same path.
            if close(client, call_timeout(timeout)).await {
                if !lost {
                    tracing::info!(znode = %self.node_path, "released the worker id (session closed)");
                }
            } else {
                tracing::warn!(znode = %self.node_path, "cannot confirm the session is closed; its znode goes when the session expires");
            }
        })
    }

    fn info(&self) -> LeaseInfo {
        self.proof.info(
            &self.node_path,
            "not confirmed in time; ZooKeeper is out of reach",
            |own| LeaseDescription {
                lease_id: Some(own.session.clone()),
                ttl_secs: own.timeout.as_secs(),
            },
        )
    }

    fn held_pairs(&self) -> BoxFuture<'_, Result<Vec<HeldPair>, FleetError>> {
        Box::pin(async move {
            let (client, timeout) = {
                let state = self.proof.lock();
                (state.own.client.clone(), call_timeout(state.own.timeout))
            };
            let client = client.ok_or_else(|| {
                FleetError::Unavailable("no ZooKeeper session right now".to_owned())
            })?;
            let path = &self.config.path;
            let children = bounded(timeout, client.list_children(path))
                .await
                .map_err(|e| {
                    FleetError::Unavailable(format!("cannot list {path} in ZooKeeper: {e}"))
                })?;
            let mut held = Vec::new();
            for child in children {
                let Some(worker_id) = canonical_worker(&child, self.layout.max_worker_id()) else {
                    continue;
                };
                let znode = format!("{path}/{child}");
                match bounded(timeout, client.get_data(&znode)).await {
                    Ok((data, stat)) => held.push(HeldPair {
                        datacenter_id: self.datacenter_id,
                        worker_id,
                        holder: format!("session {:x}", stat.ephemeral_owner),
                        address: String::from_utf8_lossy(&data).chars().take(100).collect(),
                        since: snowflake_core::format_unix_ms(
                            u64::try_from(stat.ctime).unwrap_or(0),
                        ),
                    }),
                    // Gone between the listing and the read: not held any more.
                    Err(ZooKeeperError::Zk(zk::Error::NoNode)) => {}
                    Err(e) => {
                        return Err(FleetError::Unavailable(format!(
                            "cannot read {znode} in ZooKeeper: {e}"
                        )));
                    }
                }
            }
            Ok(held)
        })
    }

    fn workers_per_datacenter(&self) -> u64 {
        self.layout.max_worker_id() + 1
    }
}

//! The coordinator: what a node needs from the coordination service that leased it its pair
//! (etcd or ZooKeeper), behind one trait.

use crate::error::FleetError;
use crate::fence::Fence;
use crate::held::HeldPair;
use crate::lease_info::LeaseInfo;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use tokio::sync::watch;

/// A boxed future, so the node can hold any coordinator behind one trait object.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A coordination service that leased this node its pair.
pub trait Coordinator: Send + Sync + fmt::Debug {
    /// `etcd`: where the pair came from (the `identity_source` of `/v1/info` and metrics).
    fn source(&self) -> &'static str;

    /// The fence; it changes when the lease is renewed, lost or re-established.
    fn fence(&self) -> watch::Receiver<Fence>;

    /// Durably records `mark_ms` (Unix ms) as the pair's high-water mark, only while this node
    /// still holds the pair. `Ok` means a successor will see it.
    fn store_mark(&self, mark_ms: u64) -> BoxFuture<'_, Result<(), FleetError>>;

    /// Keeps the lease alive until `stop` flips, re-establishing it after an outage. Returns an
    /// error only when the node can never hold its pair again (another node claimed it): the
    /// service then stops.
    fn run(&self, stop: watch::Receiver<bool>) -> BoxFuture<'_, Result<(), FleetError>>;

    /// Gives the pair up (after the final mark is stored) so another node may claim it at once.
    fn release(&self) -> BoxFuture<'_, ()>;

    /// The lease, for `/v1/info` and the metrics.
    fn info(&self) -> LeaseInfo;

    /// The pairs held in this node's datacenter right now, as the coordination service shows
    /// them (for the status page's fleet table and the free-pairs metric; read through a
    /// [`crate::FleetView`], never per page view).
    fn held_pairs(&self) -> BoxFuture<'_, Result<Vec<HeldPair>, FleetError>>;

    /// How many worker ids the datacenter has (32 with the 2010 layout).
    fn workers_per_datacenter(&self) -> u64;
}

//! The node's identity in the configuration: its (datacenter, worker) pair, how the worker id
//! was given, and the coordination service that leases the pair when a fleet shares one.
//!
//! Two questions, answered separately because they combine freely: *which worker id* (given as
//! a number, taken from the host name's ordinal or the config file's `[worker_id_map]`, or left
//! unset) is [`WorkerSource`]; *who makes sure no other live process holds the pair* (nobody
//! but the operator or the platform, etcd, or ZooKeeper) is [`IdentityConfig::coordination`],
//! one [`Coordination`] or none, so that etcd and ZooKeeper can never both be set. A host
//! name's ordinal with `--etcd-endpoints` is a fleet whose pods claim their ordinal exactly
//! (docs/fleet.md).

use super::{Coordination, EtcdConfig, ZooKeeperConfig};

/// Which pair this node issues under and where it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityConfig {
    /// Datacenter id (always from the configuration).
    pub datacenter_id: u64,
    /// Worker id: the configured one; with a coordination service, the one asked for (the
    /// binary replaces it with the pair it was granted before the node opens).
    pub worker_id: u64,
    /// How the worker id was given: with a coordination service, a given one is claimed
    /// exactly, an unset one means "the lowest free".
    pub worker_source: WorkerSource,
    /// The coordination service the pair is leased from, when a fleet shares one (`None`:
    /// the configured pair is used as is).
    pub coordination: Option<Coordination>,
    /// The address recorded with the node's claim.
    pub advertise_addr: Option<String>,
    /// The host name (for the worker id map, the ordinal, and registrations).
    pub hostname: String,
}

/// Where the configuration's worker id came from (the coordination service, when there is
/// one, is [`IdentityConfig::coordination`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerSource {
    /// Not given: 0, or with a coordination service the lowest free worker.
    Unset,
    /// A number: `--worker-id`, `SNOWFLAKE_WORKER_ID` or the file's `worker_id`.
    Static,
    /// The ordinal at the end of the host name (`--worker-id-from-hostname`).
    HostnameOrdinal,
    /// The host name's entry in the file's `[worker_id_map]`.
    HostnameMap,
}

impl WorkerSource {
    /// Whether the configuration gave the worker id (rather than leaving it to the default).
    pub fn given(self) -> bool {
        self != WorkerSource::Unset
    }

    /// The `identity_source` of `/v1/info` and the metrics without a coordination service:
    /// `static`, `hostname-ordinal` or `hostname-map`.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerSource::Unset | WorkerSource::Static => "static",
            WorkerSource::HostnameOrdinal => "hostname-ordinal",
            WorkerSource::HostnameMap => "hostname-map",
        }
    }
}

impl IdentityConfig {
    /// Whether the worker id was given (flag, environment, file, host name) rather than
    /// defaulted.
    pub fn worker_id_given(&self) -> bool {
        self.worker_source.given()
    }

    /// Where the worker id came from when the configuration gave it: `static` (a number),
    /// `hostname-map` (the file's `[worker_id_map]`) or `hostname-ordinal`. (With a
    /// coordination service, the node reports the service's own: `etcd` or `zookeeper`.)
    pub fn identity_source(&self) -> &'static str {
        self.worker_source.as_str()
    }

    /// The etcd settings, when the pair is leased from etcd.
    pub fn etcd(&self) -> Option<&EtcdConfig> {
        match &self.coordination {
            Some(Coordination::Etcd(etcd)) => Some(etcd),
            _ => None,
        }
    }

    /// The ZooKeeper settings, when the worker id is registered in ZooKeeper.
    pub fn zookeeper(&self) -> Option<&ZooKeeperConfig> {
        match &self.coordination {
            Some(Coordination::ZooKeeper(zookeeper)) => Some(zookeeper),
            _ => None,
        }
    }
}

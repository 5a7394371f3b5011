//! Joining a fleet: which coordinator leases the pair, the claim (etcd) or the registration
//! (ZooKeeper) with this process described as the holder, the issuer opened with the pair it
//! got, and the pair given back at once when the issuer fails to open.

use crate::config::{EtcdConfig, ZooKeeperConfig};
use crate::coordinator::Coordinator;
use crate::etcd::{ClaimError, EtcdLease, Holder};
use crate::zookeeper::{RegisterError, ZooKeeperRegistration};
use snowflake_core::{Clock, Layout};
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

/// The coordination service a fleet leases its pairs from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Coordination {
    /// etcd (`--etcd-endpoints`): a lease with keep-alives.
    Etcd(EtcdConfig),
    /// ZooKeeper (`--zookeeper`): an ephemeral znode, the 2010 layout.
    ZooKeeper(ZooKeeperConfig),
}

impl Coordination {
    /// The one configured, if any (the settings never give both).
    pub fn chosen(
        etcd: Option<&EtcdConfig>,
        zookeeper: Option<&ZooKeeperConfig>,
    ) -> Option<Coordination> {
        match (etcd, zookeeper) {
            (Some(etcd), _) => Some(Coordination::Etcd(etcd.clone())),
            (None, Some(zookeeper)) => Some(Coordination::ZooKeeper(zookeeper.clone())),
            (None, None) => None,
        }
    }

    /// `etcd` or `zookeeper`: the `identity_source` of a pair leased from it.
    pub fn source(&self) -> &'static str {
        match self {
            Coordination::Etcd(_) => "etcd",
            Coordination::ZooKeeper(_) => "zookeeper",
        }
    }
}

/// One line for logs: the service, its members and its namespace; never a credential.
impl fmt::Display for Coordination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Coordination::Etcd(etcd) => write!(
                f,
                "etcd {} (prefix {}{}{})",
                etcd.endpoints.join(","),
                etcd.prefix,
                if etcd.tls.is_some() { ", tls" } else { "" },
                etcd.auth
                    .as_ref()
                    .map_or(String::new(), |auth| format!(", user {}", auth.user)),
            ),
            Coordination::ZooKeeper(zookeeper) => write!(
                f,
                "zookeeper {} (path {}{}{})",
                zookeeper.servers.join(","),
                zookeeper.path,
                if zookeeper.tls.is_some() { ", tls" } else { "" },
                if zookeeper.auth.is_some() {
                    ", digest acl"
                } else {
                    ""
                },
            ),
        }
    }
}

/// A (datacenter, worker) pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Pair {
    /// The datacenter id.
    pub datacenter_id: u64,
    /// The worker id.
    pub worker_id: u64,
}

/// The pair a process asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PairRequest {
    /// The datacenter: always this one.
    pub datacenter_id: u64,
    /// The worker: the configured one without a coordinator; with one, exactly this one when
    /// `pinned`, else the lowest free worker.
    pub worker_id: u64,
    /// Whether the worker id was given (a flag, the environment, a file) rather than defaulted.
    pub pinned: bool,
}

/// One listener of the process, recorded with its claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listener {
    /// `http`, `grpc`, `thrift`, `resp`.
    pub protocol: &'static str,
    /// The bound address.
    pub addr: SocketAddr,
}

/// The process asking for a pair, as the coordination service records it for operators.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applicant {
    /// The machine's host name.
    pub host: String,
    /// `--advertise-addr`, if given: what peers and operators should dial.
    pub advertise_addr: Option<String>,
    /// Its bound listeners. ZooKeeper registers the Thrift one (the 2010 layout), which is then
    /// required.
    pub listeners: Vec<Listener>,
}

impl Applicant {
    /// The bound address of `protocol`'s listener, if it has one.
    pub fn listener(&self, protocol: &str) -> Option<SocketAddr> {
        self.listeners
            .iter()
            .find(|l| l.protocol == protocol)
            .map(|l| l.addr)
    }

    /// The znode's data in ZooKeeper: the advertised address, else the bound Thrift address
    /// (with the host name when bound to every interface).
    /// `None` without a Thrift listener.
    fn thrift_address(&self) -> Option<String> {
        let thrift = self.listener("thrift")?;
        Some(match &self.advertise_addr {
            Some(addr) => addr.clone(),
            None if thrift.ip().is_unspecified() => format!("{}:{}", self.host, thrift.port()),
            None => thrift.to_string(),
        })
    }
}

/// Why joining the fleet failed; `E` is the issuer's own error when it fails to open.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError<E> {
    /// No pair could be claimed from etcd.
    #[error(transparent)]
    Claim(#[from] ClaimError),
    /// No worker could be registered in ZooKeeper.
    #[error(transparent)]
    Register(#[from] RegisterError),
    /// ZooKeeper registers the Thrift address, and the Thrift listener is off.
    #[error("--zookeeper needs the Thrift listener")]
    NoThriftListener,
    /// The issuer did not open (the pair was given back).
    #[error(transparent)]
    Open(E),
}

impl<E> ConnectError<E> {
    /// Whether a signal stopped the claim or the registration (nothing is held then).
    pub fn stopped(&self) -> bool {
        matches!(
            self,
            ConnectError::Claim(ClaimError::Stopped)
                | ConnectError::Register(RegisterError::Stopped)
        )
    }
}

/// Joins the fleet of `coordination` (or none) and opens the issuer on the pair it got.
///
/// Without a coordinator, `open` gets the requested pair and no coordinator. With one, the
/// pair is claimed first (etcd: `applicant` and its listeners recorded in the claim key;
/// ZooKeeper: the 2010 peer checks, then its Thrift address registered), then `open` gets the
/// claimed pair and the coordinator; if it fails, the pair is released at once (nothing was
/// issued) rather than at lease expiry. `clock` dates the claim and times the peer checks.
/// When `stop` completes first (a signal), the claim or registration is given up at once and
/// what it held given back: the answer is then an error for which
/// [`ConnectError::stopped`] holds.
pub async fn connect<T, E>(
    coordination: Option<&Coordination>,
    layout: &Layout,
    request: PairRequest,
    applicant: &Applicant,
    clock: &dyn Clock,
    stop: impl Future<Output = ()>,
    open: impl FnOnce(Pair, Option<Arc<dyn Coordinator>>) -> Result<T, E>,
) -> Result<T, ConnectError<E>> {
    let asked = Pair {
        datacenter_id: request.datacenter_id,
        worker_id: request.worker_id,
    };
    let worker_id = request.pinned.then_some(request.worker_id);
    let (pair, coordinator): (Pair, Arc<dyn Coordinator>) = match coordination {
        None => return open(asked, None).map_err(ConnectError::Open),
        Some(Coordination::Etcd(etcd)) => {
            let addresses = applicant
                .listeners
                .iter()
                .map(|l| format!("{}={}", l.protocol, l.addr))
                .collect();
            let holder = Holder::this_process(
                applicant.host.clone(),
                applicant.advertise_addr.clone(),
                addresses,
                clock.now_ms(),
                layout.epoch_ms(),
            );
            tracing::info!(
                endpoints = %etcd.endpoints.join(","),
                prefix = %etcd.prefix,
                datacenter_id = request.datacenter_id,
                worker_id = ?worker_id,
                "claiming a worker id from etcd"
            );
            let lease = EtcdLease::claim_until(
                etcd,
                layout,
                request.datacenter_id,
                worker_id,
                &holder,
                stop,
            )
            .await?;
            let pair = Pair {
                datacenter_id: lease.datacenter_id(),
                worker_id: lease.worker_id(),
            };
            (pair, Arc::new(lease))
        }
        Some(Coordination::ZooKeeper(zookeeper)) => {
            let data = applicant
                .thrift_address()
                .ok_or(ConnectError::NoThriftListener)?;
            tracing::info!(
                servers = %zookeeper.servers.join(","),
                path = %zookeeper.path,
                datacenter_id = request.datacenter_id,
                worker_id = ?worker_id,
                %data,
                "registering a worker id in ZooKeeper"
            );
            let registration = ZooKeeperRegistration::register_until(
                zookeeper,
                layout,
                request.datacenter_id,
                worker_id,
                data,
                clock,
                stop,
            )
            .await?;
            let pair = Pair {
                datacenter_id: request.datacenter_id,
                worker_id: registration.worker_id(),
            };
            (pair, Arc::new(registration))
        }
    };
    match open(pair, Some(Arc::clone(&coordinator))) {
        Ok(issuer) => Ok(issuer),
        Err(err) => {
            // Nothing was issued: give the pair back at once rather than at lease expiry.
            coordinator.release().await;
            Err(ConnectError::Open(err))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Applicant, Coordination, Listener, PairRequest, connect};
    use crate::config::{EtcdAuth, EtcdConfig, Secret, ZooKeeperConfig};
    use snowflake_core::{Layout, ManualClock};
    use std::net::SocketAddr;

    fn applicant(thrift: Option<&str>) -> Applicant {
        Applicant {
            host: "host-7".into(),
            advertise_addr: None,
            listeners: thrift
                .map(|addr| Listener {
                    protocol: "thrift",
                    addr: addr.parse().unwrap(),
                })
                .into_iter()
                .collect(),
        }
    }

    #[test]
    fn the_znode_data_is_the_advertised_or_the_bound_thrift_address() {
        assert_eq!(
            applicant(Some("127.0.0.1:7609")).thrift_address().unwrap(),
            "127.0.0.1:7609"
        );
        assert_eq!(
            applicant(Some("0.0.0.0:7609")).thrift_address().unwrap(),
            "host-7:7609"
        );
        let mut advertised = applicant(Some("0.0.0.0:7609"));
        advertised.advertise_addr = Some("snowflake-7.example:7609".into());
        assert_eq!(
            advertised.thrift_address().unwrap(),
            "snowflake-7.example:7609"
        );
        assert_eq!(applicant(None).thrift_address(), None);
        assert_eq!(
            applicant(Some("127.0.0.1:1")).listener("thrift"),
            Some(SocketAddr::from(([127, 0, 0, 1], 1)))
        );
    }

    #[test]
    fn etcd_comes_first_and_the_log_line_holds_no_secret() {
        let mut etcd = EtcdConfig::new(vec!["https://127.0.0.1:2379".into()]);
        etcd.auth = Some(EtcdAuth {
            user: "snowflake".into(),
            password: Secret::new("hunter2"),
        });
        let mut zookeeper = ZooKeeperConfig::new(vec!["127.0.0.1:2181".into()]);
        zookeeper.auth = Some(Secret::new("snowflake:zk-pass-7"));
        let chosen = Coordination::chosen(Some(&etcd), Some(&zookeeper)).unwrap();
        assert_eq!(chosen.source(), "etcd");
        let shown = chosen.to_string();
        assert_eq!(
            shown,
            "etcd https://127.0.0.1:2379 (prefix /snowflake, user snowflake)"
        );
        let zk = Coordination::chosen(None, Some(&zookeeper)).unwrap();
        assert_eq!(
            zk.to_string(),
            "zookeeper 127.0.0.1:2181 (path /snowflake-servers, digest acl)"
        );
        assert!(!zk.to_string().contains("zk-pass"));
        assert_eq!(Coordination::chosen(None, None), None);
    }

    #[tokio::test]
    async fn without_a_coordinator_the_requested_pair_opens() {
        let request = PairRequest {
            datacenter_id: 3,
            worker_id: 4,
            pinned: false,
        };
        let opened = connect(
            None,
            &Layout::TWITTER,
            request,
            &applicant(None),
            &ManualClock::new(0),
            std::future::pending(),
            |pair, coordinator| {
                assert!(coordinator.is_none());
                Ok::<_, std::io::Error>(pair)
            },
        )
        .await
        .unwrap();
        assert_eq!((opened.datacenter_id, opened.worker_id), (3, 4));
        let failed = connect(
            None,
            &Layout::TWITTER,
            request,
            &applicant(None),
            &ManualClock::new(0),
            std::future::pending(),
            |_, _| Err::<(), _>(std::io::Error::other("state dir locked")),
        )
        .await;
        assert_eq!(failed.unwrap_err().to_string(), "state dir locked");
    }
}

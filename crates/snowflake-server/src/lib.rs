//! The Snowflake ID service: one [`Node`] (generator, restart-safe state, metrics) behind
//! protocol front ends, one module each.
//!
//! The binary parses the configuration, binds the listeners and hands them with a shutdown
//! future to [`run`]; tests do the same on `127.0.0.1:0`.

#![deny(missing_docs)]

/// True only in the fault campaign's self-test build (`scripts/campaign --self-test`), which has
/// a safety check disabled so that the campaign must find duplicate IDs. Never run it for real.
/// The check is the fleet's (the etcd lease compare), so the fleet crate's build says.
pub const CAMPAIGN_BUG_BUILD: bool = snowflake_fleet::CAMPAIGN_BUG_BUILD;

pub mod bulk;
pub mod clock_trust;
pub mod config;
pub mod grpc;
pub mod http;
mod json_ids;
pub mod latency;
pub mod listen;
pub mod metrics;
pub mod node;
pub mod notify;
pub mod resp;
pub mod settings;
pub mod state;
pub mod status;
pub mod thrift;
pub mod tls;
pub mod window;

pub use config::{
    ClockConfig, Config, ConfigError, Coordination, EtcdConfig, IdentityConfig, LimitsConfig,
    ListenerConfig, LogConfig, LogFormat, ServeArgs, WorkerSource, ZooKeeperConfig,
};
pub use node::{IssueError, Node, NotNow, Protocol};
pub use state::StateError;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// The bound listeners, one per enabled protocol.
#[derive(Debug)]
pub struct Listeners {
    /// HTTP/JSON.
    pub http: Option<TcpListener>,
    /// gRPC.
    pub grpc: Option<TcpListener>,
    /// Thrift.
    pub thrift: Option<TcpListener>,
    /// Health, readiness and metrics, never asking for client certificates.
    pub admin: Option<TcpListener>,
    /// The Redis protocol.
    pub resp: Option<TcpListener>,
    /// TLS on the HTTP and gRPC listeners, loaded before anything was bound.
    pub tls: Option<Arc<tls::Tls>>,
}

impl Listeners {
    /// Loads the TLS files of `config` (bad ones stop the start before anything is bound), then
    /// binds every enabled listener.
    pub async fn bind(config: &Config) -> Result<Listeners, BindError> {
        let tls = match &config.listeners.tls {
            Some(files) => Some(Arc::new(
                tls::Tls::load(files.clone(), tls::unix_now()).map_err(BindError::Tls)?,
            )),
            None => None,
        };
        Ok(Listeners {
            http: bind(config.listeners.http_addr, "http").await?,
            grpc: bind(config.listeners.grpc_addr, "grpc").await?,
            thrift: bind(config.listeners.thrift_addr, "thrift").await?,
            admin: bind(config.listeners.admin_addr, "admin").await?,
            resp: bind(config.listeners.resp_addr, "resp").await?,
            tls,
        })
    }

    /// The RESP address actually bound.
    pub fn resp_addr(&self) -> Option<SocketAddr> {
        self.resp.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The admin address actually bound.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The HTTP address actually bound (useful with port 0).
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The gRPC address actually bound.
    pub fn grpc_addr(&self) -> Option<SocketAddr> {
        self.grpc.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The Thrift address actually bound.
    pub fn thrift_addr(&self) -> Option<SocketAddr> {
        self.thrift.as_ref().and_then(|l| l.local_addr().ok())
    }
}

async fn bind(
    addr: Option<SocketAddr>,
    protocol: &'static str,
) -> Result<Option<TcpListener>, BindError> {
    match addr {
        Some(addr) => TcpListener::bind(addr)
            .await
            .map(Some)
            .map_err(|source| BindError::Listen {
                protocol,
                addr,
                source,
            }),
        None => Ok(None),
    }
}

/// A listener could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// The address could not be bound.
    #[error("cannot listen for {protocol} on {addr}: {source}")]
    Listen {
        /// Which listener.
        protocol: &'static str,
        /// The address asked for.
        addr: SocketAddr,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The TLS files do not load (the message names the file and the problem).
    #[error("{0}")]
    Tls(String),
}

/// Why the service stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The final high-water mark could not be persisted.
    #[error(transparent)]
    State(#[from] StateError),
    /// The node lost its pair for good (another node claimed it while this one was cut off
    /// from the coordination service).
    #[error(transparent)]
    Fleet(snowflake_fleet::FleetError),
}

/// Runs the service until `shutdown` completes: opens the node (at once, or once its clock
/// passes a persisted mark), keeps its reservation ahead of the clock (and its lease alive, in a
/// fleet), and serves every listener. Then stops accepting, lets in-flight requests finish,
/// persists the exact high-water mark and releases the lease.
///
/// In a fleet the service also stops, with [`RunError::Fleet`], if its pair is lost for good.
pub async fn run(
    node: Arc<Node>,
    config: &Config,
    listeners: Listeners,
    shutdown: impl Future<Output = ()>,
) -> Result<(), RunError> {
    let (stop_tx, stop_rx) = watch::channel(false);
    // The lease outlives the front ends and the keeper: the final mark is written under it.
    let (lease_stop_tx, lease_stop_rx) = watch::channel(false);
    let mut lease = tokio::task::JoinSet::new();
    let (lost_tx, mut lost_rx) = tokio::sync::mpsc::channel::<snowflake_fleet::FleetError>(1);
    if let Some(coordinator) = node.coordinator() {
        lease.spawn(async move {
            if let Err(reason) = coordinator.run(lease_stop_rx).await {
                let _ = lost_tx.send(reason).await;
            }
        });
    }
    let mut shutdown = std::pin::pin!(shutdown);
    // Opening writes the first reservation, which a stuck filesystem can hold up for ever: a
    // shutdown meanwhile stops the service without serving.
    let opened = tokio::select! {
        () = node.start() => true,
        () = &mut shutdown => false,
    };
    if !opened {
        notify::stopping();
        tracing::warn!("shutting down before the node opened");
        let stored = node.shutdown().await;
        if let Some(coordinator) = node.coordinator() {
            // The keep-alive loop stops first: running beside the release, it would take a
            // revoked lease for an expired one and claim the pair again.
            let _ = lease_stop_tx.send(true);
            while lease.join_next().await.is_some() {}
            coordinator.release().await;
        }
        return stored.map(drop).map_err(RunError::from);
    }
    // Every set aborts its tasks if this future is dropped, so nothing outlives the service.
    let mut keeper = tokio::task::JoinSet::new();
    keeper.spawn(Arc::clone(&node).keep(stop_rx.clone()));
    keeper.spawn(notify::watch(Arc::clone(&node), stop_rx.clone()));
    if let Some(coordinator) = node.coordinator() {
        let (view, stop) = (node.fleet(), stop_rx.clone());
        let datacenter_id = node.info().datacenter_id;
        keeper.spawn(async move { view.keep_fresh(&*coordinator, datacenter_id, stop).await });
    }
    let mut front_ends = tokio::task::JoinSet::new();
    if let Some(tls) = &listeners.tls {
        node.metrics().set_tls(Arc::clone(tls));
        keeper.spawn(tls::watch(Arc::clone(tls), stop_rx.clone()));
    }
    if let Some(listener) = listeners.http {
        let (node, config, stop) = (Arc::clone(&node), config.clone(), stop_rx.clone());
        let tls = listeners.tls.clone();
        front_ends.spawn(async move {
            let router = http::router(Arc::clone(&node));
            http::serve(listener, node, router, &config, tls, stop).await;
        });
    }
    if let Some(listener) = listeners.admin {
        let (node, config, stop) = (Arc::clone(&node), config.clone(), stop_rx.clone());
        front_ends.spawn(async move { http::serve_admin(listener, node, &config, stop).await });
    }
    if let Some(listener) = listeners.grpc {
        let (node, config, stop) = (Arc::clone(&node), config.clone(), stop_rx.clone());
        let tls = listeners.tls.clone();
        front_ends.spawn(async move { grpc::serve(listener, node, &config, tls, stop).await });
    }
    if let Some(listener) = listeners.resp {
        let (node, config, stop) = (Arc::clone(&node), config.clone(), stop_rx.clone());
        let tls = listeners.tls.clone();
        front_ends.spawn(async move { resp::serve(listener, node, &config, tls, stop).await });
    }
    if let Some(listener) = listeners.thrift {
        let (node, config, stop) = (Arc::clone(&node), config.clone(), stop_rx.clone());
        front_ends.spawn(async move { thrift::serve(listener, node, &config, stop).await });
    }
    let lost = tokio::select! {
        () = &mut shutdown => None,
        Some(reason) = lost_rx.recv() => Some(reason),
    };
    match &lost {
        None => tracing::info!("shutting down: no new connections; finishing in-flight requests"),
        Some(reason) => tracing::error!(%reason, "stopping: the pair is lost"),
    }
    notify::stopping();
    let _ = stop_tx.send(true);
    while front_ends.join_next().await.is_some() {}
    while keeper.join_next().await.is_some() {}
    let stored = node.shutdown().await;
    match &stored {
        Ok(mark_ms) => tracing::info!(
            high_water_ms = mark_ms,
            "stopped; high-water mark persisted"
        ),
        Err(err) => tracing::error!(error = %err, "cannot persist the final high-water mark"),
    }
    if let Some(coordinator) = node.coordinator() {
        // Only after the final mark is stored. Even if that failed, every reservation was
        // recorded in the coordination service before use, so the successor stays above it.
        // The keep-alive loop stops before the release (see above).
        let _ = lease_stop_tx.send(true);
        while lease.join_next().await.is_some() {}
        if lost.is_none() {
            coordinator.release().await;
        }
    }
    match lost {
        Some(reason) => Err(RunError::Fleet(reason)),
        None => stored.map(drop).map_err(RunError::from),
    }
}

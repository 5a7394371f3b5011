//! ZooKeeper sessions: opening one (with the digest identity and TLS), closing it (which
//! removes its ephemeral znodes, and only those), and every call bounded by a time limit.

use crate::config::ZooKeeperConfig;
use std::sync::Arc;
use std::time::Duration;
use zookeeper_client as zk;

/// How long one ZooKeeper call may take, at most.
const MAX_CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// Why one ZooKeeper call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZooKeeperError {
    /// ZooKeeper's answer.
    Zk(zk::Error),
    /// No answer in time.
    Timeout(Duration),
    /// A multi-operation (a check and a write) failed, in the client's words.
    Multi(String),
}

impl std::fmt::Display for ZooKeeperError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ZooKeeperError::Zk(zk::Error::NoAuth) => write!(
                f,
                "not authorized (NoAuth): the znode's ACL does not grant this node's identity; \
                 the fleet's znodes belong to the digest identity of --zookeeper-auth-file \
                 (user:password), and every node of the path must use the same one"
            ),
            ZooKeeperError::Zk(err) => write!(f, "{err}"),
            ZooKeeperError::Timeout(t) => write!(f, "no answer within {} ms", t.as_millis()),
            ZooKeeperError::Multi(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for ZooKeeperError {}

impl From<ZooKeeperError> for String {
    fn from(err: ZooKeeperError) -> String {
        err.to_string()
    }
}

/// Runs one ZooKeeper call within `timeout`.
pub(super) async fn bounded<T>(
    timeout: Duration,
    call: impl Future<Output = Result<T, zk::Error>>,
) -> Result<T, ZooKeeperError> {
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(err)) => Err(ZooKeeperError::Zk(err)),
        Err(_) => Err(ZooKeeperError::Timeout(timeout)),
    }
}

/// Opens a session within `timeout`.
pub(super) async fn connect(
    config: &ZooKeeperConfig,
    timeout: Duration,
) -> Result<zk::Client, String> {
    let servers = config.servers.join(",");
    let mut connector = zk::Client::connector();
    connector = connector
        .with_session_timeout(config.session_timeout)
        .with_connection_timeout(call_timeout(config.session_timeout));
    if let Some(auth) = &config.auth {
        connector = connector.with_auth("digest", auth.expose().as_bytes());
    }
    if let Some(tls) = &config.tls {
        // The client builds its rustls configuration with the process's default provider:
        // ours (ring), as for every other TLS connection of the service.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let ca = String::from_utf8_lossy(&tls.ca_pem);
        let mut options = zk::TlsOptions::default()
            .with_pem_ca(&ca)
            .map_err(|e| format!("--zookeeper-ca: {e}"))?;
        if let Some((cert, key)) = &tls.identity {
            options = options
                .with_pem_identity(&String::from_utf8_lossy(cert), key.expose())
                .map_err(|e| format!("--zookeeper-cert/--zookeeper-key: {e}"))?;
        }
        connector = connector.with_tls(options);
    }
    let connect = async {
        if config.tls.is_some() {
            connector.secure_connect(&servers).await
        } else {
            connector.connect(&servers).await
        }
    };
    match tokio::time::timeout(timeout, connect).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(err)) => Err(format!("cannot open a session: {err}")),
        Err(_) => Err(format!("no session within {} ms", timeout.as_millis())),
    }
}

/// Closes a session (once every other handle on it is dropped too) and waits, at most
/// `timeout`, until ZooKeeper confirmed it: its ephemeral znodes, and only its own, are gone
/// then. Returns whether it was confirmed in time.
pub(super) async fn close(client: Arc<zk::Client>, timeout: Duration) -> bool {
    let mut state = client.state_watcher();
    drop(client);
    let closed = async {
        loop {
            if state.state().is_terminated() {
                return;
            }
            state.changed().await;
        }
    };
    tokio::time::timeout(timeout, closed).await.is_ok()
}
/// The session's id (hex), as ZooKeeper shows it.
pub(super) fn session_hex(client: &zk::Client) -> String {
    format!("{:x}", client.session_id().0)
}
/// Whether the client's session is over (expired, or the client closed): the registration is
/// then lost, whatever the failed call was.
pub(super) fn session_gone(client: &zk::Client) -> bool {
    matches!(
        client.state(),
        zk::SessionState::Expired | zk::SessionState::Closed
    )
}

/// The safety margin: a fifth of the session timeout.
pub(super) fn margin(timeout: Duration) -> Duration {
    timeout / 5
}

/// One call's time limit: a third of the session timeout, at most 2 s.
pub(super) fn call_timeout(timeout: Duration) -> Duration {
    (timeout / 3).min(MAX_CALL_TIMEOUT)
}

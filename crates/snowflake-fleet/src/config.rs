//! The fleet's settings: where a pair is leased from (etcd or ZooKeeper), and the credentials
//! that reach it (TLS files read ahead, secrets that never reach a log line).

use std::path::PathBuf;
use std::time::Duration;

/// Registering the worker id in ZooKeeper.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZooKeeperConfig {
    /// The ensemble's `HOST:PORT`s.
    pub servers: Vec<String>,
    /// The path of this datacenter's workers, without a trailing `/`.
    pub path: String,
    /// The session timeout asked for.
    pub session_timeout: Duration,
    /// How long a claim of a held pinned worker (or an unreachable ensemble) is retried.
    pub claim_timeout: Duration,
    /// The largest accepted distance from the peers' mean clock, in ms.
    pub max_peer_skew_ms: u64,
    /// The digest identity (`user:password`) the node authenticates with and protects its
    /// znodes for.
    pub auth: Option<Secret>,
    /// TLS to every server.
    pub tls: Option<ClientTls>,
}

impl ZooKeeperConfig {
    /// The 2010 path.
    pub const DEFAULT_PATH: &'static str = "/snowflake-servers";

    /// Defaults for `servers`.
    pub fn new(servers: Vec<String>) -> ZooKeeperConfig {
        ZooKeeperConfig {
            servers,
            path: ZooKeeperConfig::DEFAULT_PATH.into(),
            session_timeout: Duration::from_secs(10),
            claim_timeout: Duration::from_secs(12),
            max_peer_skew_ms: 10_000,
            auth: None,
            tls: None,
        }
    }

    /// Where the pair's high-water marks live: a sibling of the registration path, so that
    /// listing the path shows only workers (as 2010 peers expect).
    pub fn marks_path(&self) -> String {
        format!("{}-marks", self.path)
    }

    /// Where the fleet's layout is recorded, once: a sibling of the registration path too.
    pub fn layout_path(&self) -> String {
        format!("{}-layout", self.path)
    }
}

/// A secret (a password): shown as `<redacted>` by `Debug`, so it never reaches a log line.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value`.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The secret itself, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// TLS to a coordination service: the CA to verify it with and our client identity, read and
/// checked when the configuration is resolved.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientTls {
    /// The CA certificates (PEM).
    pub ca_pem: Vec<u8>,
    /// The client certificate and key (PEM), for mutual TLS.
    pub identity: Option<(Vec<u8>, Secret)>,
    /// Where they came from, for messages and logs.
    pub files: Vec<PathBuf>,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("files", &self.files)
            .field("mutual", &self.identity.is_some())
            .finish()
    }
}

/// etcd's own authentication: a user and its password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdAuth {
    /// The user name.
    pub user: String,
    /// Its password.
    pub password: Secret,
}

/// Leasing the (datacenter, worker) pair from etcd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdConfig {
    /// Member URLs (`http://HOST:PORT` or `https://HOST:PORT`, all alike).
    pub endpoints: Vec<String>,
    /// TLS (with `https://` endpoints).
    pub tls: Option<ClientTls>,
    /// User authentication.
    pub auth: Option<EtcdAuth>,
    /// Key prefix, starting with `/`, without a trailing `/`.
    pub prefix: String,
    /// Lease TTL asked for, in seconds.
    pub lease_ttl_secs: u64,
    /// How long a claim of a held pinned pair (or of an unreachable etcd) is retried.
    pub claim_timeout: Duration,
}

impl EtcdConfig {
    /// The default key prefix.
    pub const DEFAULT_PREFIX: &'static str = "/snowflake";
    /// The default lease TTL, in seconds.
    pub const DEFAULT_TTL_SECS: u64 = 10;

    /// Defaults for `endpoints`.
    pub fn new(endpoints: Vec<String>) -> EtcdConfig {
        EtcdConfig {
            endpoints,
            tls: None,
            auth: None,
            prefix: EtcdConfig::DEFAULT_PREFIX.into(),
            lease_ttl_secs: EtcdConfig::DEFAULT_TTL_SECS,
            claim_timeout: Duration::from_secs(EtcdConfig::DEFAULT_TTL_SECS + 2),
        }
    }
}

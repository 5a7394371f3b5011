//! The settings of the fleet's coordination services: leasing the pair from etcd, registering
//! the worker id in ZooKeeper (part of the settings table, [`super::SETTINGS`]).

use super::base::{BASE, number};
use super::{DefaultValue, Group, Kind, Setting};

/// `--etcd-endpoints`.
pub const ETCD_ENDPOINTS: Setting = Setting {
    key: "etcd_endpoints",
    flag: Some("etcd-endpoints"),
    env: Some("SNOWFLAKE_ETCD_ENDPOINTS"),
    value_name: "URL[,URL...]",
    group: Group::Etcd,
    help: "Lease the (datacenter, worker) pair from these etcd members (comma-separated \
           `http://HOST:PORT`; `HOST:PORT` means http) instead of trusting the configuration \
           alone: two live processes then never hold the same pair. With `--worker-id` the node \
           claims exactly that pair; without it, the lowest free worker of its datacenter.",
    ..BASE
};

/// `--etcd-prefix`.
pub const ETCD_PREFIX: Setting = Setting {
    key: "etcd_prefix",
    flag: Some("etcd-prefix"),
    env: Some("SNOWFLAKE_ETCD_PREFIX"),
    value_name: "PREFIX",
    default: DefaultValue::Value("/snowflake"),
    group: Group::Etcd,
    help: "Key prefix of this fleet in etcd: claims live under PREFIX/workers/D/W, high-water \
           marks under PREFIX/marks/D/W.",
    ..BASE
};

/// `--etcd-ca`.
pub const ETCD_CA: Setting = Setting {
    key: "etcd_ca",
    flag: Some("etcd-ca"),
    env: Some("SNOWFLAKE_ETCD_CA"),
    value_name: "FILE",
    kind: Kind::Path,
    group: Group::Etcd,
    help: "CA certificates (PEM) that etcd's server certificate must chain to; needed by \
           `https://` endpoints.",
    ..BASE
};

/// `--etcd-cert`.
pub const ETCD_CERT: Setting = Setting {
    key: "etcd_cert",
    flag: Some("etcd-cert"),
    env: Some("SNOWFLAKE_ETCD_CERT"),
    value_name: "FILE",
    kind: Kind::Path,
    group: Group::Etcd,
    help: "Client certificate (PEM) for etcd's `--client-cert-auth`; needs --etcd-key. Without \
           --etcd-user, etcd takes its common name for the user name.",
    ..BASE
};

/// `--etcd-key`.
pub const ETCD_KEY: Setting = Setting {
    key: "etcd_key",
    flag: Some("etcd-key"),
    env: Some("SNOWFLAKE_ETCD_KEY"),
    value_name: "FILE",
    kind: Kind::Path,
    group: Group::Etcd,
    help: "Private key (PEM) of --etcd-cert.",
    ..BASE
};

/// `--etcd-user`.
pub const ETCD_USER: Setting = Setting {
    key: "etcd_user",
    flag: Some("etcd-user"),
    env: Some("SNOWFLAKE_ETCD_USER"),
    value_name: "NAME",
    group: Group::Etcd,
    help: "etcd user name (etcd's own authentication); the password comes from \
           --etcd-password-file or the SNOWFLAKE_ETCD_PASSWORD environment variable, never a \
           flag.",
    ..BASE
};

/// `--etcd-password-file`.
pub const ETCD_PASSWORD_FILE: Setting = Setting {
    key: "etcd_password_file",
    flag: Some("etcd-password-file"),
    env: Some("SNOWFLAKE_ETCD_PASSWORD_FILE"),
    value_name: "FILE",
    kind: Kind::Path,
    group: Group::Etcd,
    help: "File holding the password of --etcd-user (one line).",
    ..BASE
};

/// `SNOWFLAKE_ETCD_PASSWORD`: the environment only, never a flag or the file.
pub const ETCD_PASSWORD: Setting = Setting {
    key: "etcd_password",
    env: Some("SNOWFLAKE_ETCD_PASSWORD"),
    in_file: false,
    value_name: "PASSWORD",
    group: Group::Etcd,
    help: "The password of --etcd-user, from the environment only (a flag would show in the \
           process list); --etcd-password-file wins over it.",
    ..BASE
};

/// `--allow-cleartext-credentials`.
pub const ALLOW_CLEARTEXT_CREDENTIALS: Setting = Setting {
    key: "allow_cleartext_credentials",
    flag: Some("allow-cleartext-credentials"),
    env: Some("SNOWFLAKE_ALLOW_CLEARTEXT_CREDENTIALS"),
    kind: Kind::Switch,
    group: Group::Etcd,
    help: "Send coordination credentials over an unencrypted connection: the etcd password of \
           --etcd-user to `http://` endpoints, the ZooKeeper digest identity of \
           --zookeeper-auth-file without --zookeeper-ca. Refused by default, because anyone on \
           the network path could read them and then rewrite or delete the fleet's claims and \
           marks; only for a network you trust (loopback, a private link).",
    ..BASE
};

/// `--lease-ttl-secs`.
pub const LEASE_TTL_SECS: Setting = Setting {
    key: "lease_ttl_secs",
    flag: Some("lease-ttl-secs"),
    env: Some("SNOWFLAKE_LEASE_TTL_SECS"),
    value_name: "SECS",
    kind: number(2, 300, "s"),
    default: DefaultValue::Value("10"),
    group: Group::Etcd,
    help: "Lease time-to-live. A crashed node's pair is free again after this long; a node that \
           cannot renew its lease stops issuing IDs before it runs out.",
    ..BASE
};

/// `--claim-timeout-secs`.
pub const CLAIM_TIMEOUT_SECS: Setting = Setting {
    key: "claim_timeout_secs",
    flag: Some("claim-timeout-secs"),
    env: Some("SNOWFLAKE_CLAIM_TIMEOUT_SECS"),
    value_name: "SECS",
    kind: number(0, 3600, "s"),
    default: DefaultValue::Computed(
        "the lease TTL, or the ZooKeeper session timeout, + 2 s, so a node restarted right \
         after a crash gets its own pair back once the old lease or session expires",
    ),
    group: Group::Etcd,
    help: "How long to keep trying to claim a pinned pair that is held by another node (or to \
           reach etcd or ZooKeeper) before giving up.",
    ..BASE
};

/// `--advertise-addr`.
pub const ADVERTISE_ADDR: Setting = Setting {
    key: "advertise_addr",
    flag: Some("advertise-addr"),
    env: Some("SNOWFLAKE_ADVERTISE_ADDR"),
    value_name: "HOST:PORT",
    default: DefaultValue::Computed("the listeners' bound addresses"),
    group: Group::Etcd,
    help: "The address other machines reach this node at (`HOST:PORT`), recorded with its \
           claim; with ZooKeeper, its Thrift address (the znode's data).",
    ..BASE
};

/// `--zookeeper`.
pub const ZOOKEEPER: Setting = Setting {
    key: "zookeeper",
    flag: Some("zookeeper"),
    env: Some("SNOWFLAKE_ZOOKEEPER"),
    value_name: "HOST:PORT[,...]",
    group: Group::ZooKeeper,
    help: "Register the worker id in ZooKeeper as the 2010 original did (comma-separated \
           `HOST:PORT`): an ephemeral znode PATH/W holding this node's Thrift address, after \
           checking the registered peers over Thrift. With `--worker-id` the node claims exactly \
           that one; without it, the lowest free worker.",
    ..BASE
};

/// `--zookeeper-path`.
pub const ZOOKEEPER_PATH: Setting = Setting {
    key: "zookeeper_path",
    flag: Some("zookeeper-path"),
    env: Some("SNOWFLAKE_ZOOKEEPER_PATH"),
    value_name: "PATH",
    default: DefaultValue::Value("/snowflake-servers"),
    group: Group::ZooKeeper,
    help: "The ZooKeeper path of this datacenter's workers (one path per datacenter). \
           High-water marks live under PATH-marks.",
    ..BASE
};

/// `--zookeeper-auth-file`.
pub const ZOOKEEPER_AUTH_FILE: Setting = Setting {
    key: "zookeeper_auth_file",
    flag: Some("zookeeper-auth-file"),
    env: Some("SNOWFLAKE_ZOOKEEPER_AUTH_FILE"),
    value_name: "FILE",
    kind: Kind::Path,
    group: Group::ZooKeeper,
    help: "File holding `user:password` (one line) for ZooKeeper's digest scheme: the node \
           authenticates with it, and every znode it creates gets `world:anyone:r` plus all \
           rights for that identity only, so others can read the 2010 layout but not change it.",
    ..BASE
};

/// `--zookeeper-ca`.
pub const ZOOKEEPER_CA: Setting = Setting {
    key: "zookeeper_ca",
    flag: Some("zookeeper-ca"),
    env: Some("SNOWFLAKE_ZOOKEEPER_CA"),
    value_name: "FILE",
    kind: Kind::Path,
    group: Group::ZooKeeper,
    help: "CA certificates (PEM) that ZooKeeper's certificate must chain to: TLS to every \
           server of --zookeeper (their secure client port).",
    ..BASE
};

/// `--zookeeper-cert`.
pub const ZOOKEEPER_CERT: Setting = Setting {
    key: "zookeeper_cert",
    flag: Some("zookeeper-cert"),
    env: Some("SNOWFLAKE_ZOOKEEPER_CERT"),
    value_name: "FILE",
    kind: Kind::Path,
    group: Group::ZooKeeper,
    help: "Client certificate (PEM) for ZooKeeper (its secure port requires one by default); \
           needs --zookeeper-key and --zookeeper-ca.",
    ..BASE
};

/// `--zookeeper-key`.
pub const ZOOKEEPER_KEY: Setting = Setting {
    key: "zookeeper_key",
    flag: Some("zookeeper-key"),
    env: Some("SNOWFLAKE_ZOOKEEPER_KEY"),
    value_name: "FILE",
    kind: Kind::Path,
    group: Group::ZooKeeper,
    help: "Private key (PEM) of --zookeeper-cert.",
    ..BASE
};

/// `--zookeeper-session-timeout-ms`.
pub const ZOOKEEPER_SESSION_TIMEOUT_MS: Setting = Setting {
    key: "zookeeper_session_timeout_ms",
    flag: Some("zookeeper-session-timeout-ms"),
    env: Some("SNOWFLAKE_ZOOKEEPER_SESSION_TIMEOUT_MS"),
    value_name: "MS",
    kind: number(1000, 120_000, "ms"),
    default: DefaultValue::Value("10000"),
    group: Group::ZooKeeper,
    help: "ZooKeeper session timeout asked for; the server may narrow it to its own bounds. A \
           crashed node's worker is free again after this long.",
    ..BASE
};

/// `--max-peer-skew-ms`.
pub const MAX_PEER_SKEW_MS: Setting = Setting {
    key: "max_peer_skew_ms",
    flag: Some("max-peer-skew-ms"),
    env: Some("SNOWFLAKE_MAX_PEER_SKEW_MS"),
    value_name: "MS",
    kind: number(0, 3_600_000, "ms"),
    default: DefaultValue::Value("10000"),
    group: Group::ZooKeeper,
    help: "Refuse to start when this node's clock is further than this from the mean of its \
           registered peers' clocks (10000 as in 2010).",
    ..BASE
};

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

use crate::config::ZooKeeperConfig;
use crate::fleet::{
    BoxFuture, Coordinator, Fence, HeldPair, LeaseInfo, Proof, StoredMark, canonical_worker,
    check_mark_in_layout, lowered_mark_json, mark_json, parse_mark,
};
use crate::thrift::peer::Peer;
use snowflake_core::Layout;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use zookeeper_client as zk;

/// How long one ZooKeeper call may take, at most.
const MAX_CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// Pause between attempts while a pinned worker is held or ZooKeeper is out of reach (2010
/// retried every second).
const RETRY_PAUSE: Duration = Duration::from_secs(1);
/// Time limit of each Thrift call to a peer.
const PEER_TIMEOUT: Duration = Duration::from_secs(2);
/// How many times a registrant reads the mark again when another write got in between its read
/// and its compare-and-set (a previous holder still writing, or an operator).
const CLAIM_ATTEMPTS: usize = 10;
/// How many times a mark write is tried again after finding that its own lost write landed.
const WRITE_ATTEMPTS: usize = 3;
/// The data of the znode `snowflake state lower-mark` holds while it lowers a mark.
const LOWER_MARK_HOLDER: &str = "snowflake-state-lower-mark";

/// Why the node could not register; the service does not start.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RegisterError {
    /// ZooKeeper did not answer in time.
    #[error("cannot register a worker id in ZooKeeper ({servers}) within {waited_secs} s: {last}")]
    Unreachable {
        /// The ensemble.
        servers: String,
        /// How long it was retried.
        waited_secs: u64,
        /// The last error.
        last: String,
    },
    /// The pinned worker is registered by another live node.
    #[error(
        "worker {worker_id} is registered by another node at {holder} ({path}, session {owner}); \
         gave up after {waited_secs} s. Two live processes must never share a worker id: pick \
         another --worker-id, or leave it out to take the lowest free one"
    )]
    Held {
        /// The worker.
        worker_id: u64,
        /// The znode's data (the holder's Thrift address).
        holder: String,
        /// The znode.
        path: String,
        /// The holder's session id.
        owner: String,
        /// How long it was retried.
        waited_secs: u64,
    },
    /// Every worker under the path is registered (or free with an unusable mark).
    #[error("{}", full_message(*count, path, *unusable))]
    Full {
        /// How many workers a datacenter has.
        count: u64,
        /// The path.
        path: String,
        /// How many of them are free but were skipped because their mark cannot be used.
        unusable: u64,
    },
    /// A peer failed the 2010 sanity checks.
    #[error("peer check failed: {0}")]
    Peer(String),
    /// The worker's mark cannot be used.
    #[error(
        "the high-water mark of worker {worker_id} in ZooKeeper ({path}) is unusable: {reason}; \
         refusing to register it, because without it this node could repeat ids a previous \
         holder issued (see it with `snowflake state show`; once no live node holds the worker, \
         `snowflake state lower-mark` rewrites it)"
    )]
    BadMark {
        /// The worker.
        worker_id: u64,
        /// The mark znode.
        path: String,
        /// What is wrong.
        reason: String,
    },
}

fn full_message(count: u64, path: &str, unusable: u64) -> String {
    if unusable == 0 {
        format!(
            "all {count} worker ids under {path} are registered; stop a node, or use another path"
        )
    } else {
        format!(
            "all {count} worker ids under {path} are registered or unusable ({unusable} free ones \
             have a high-water mark that cannot be used: see `snowflake state show`, and \
             `snowflake state lower-mark`); stop a node, or use another path"
        )
    }
}

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
    config: ZooKeeperConfig,
    datacenter_id: u64,
    worker_id: u64,
    node_path: String,
    mark_path: String,
    /// The znode's data: the advertised Thrift address.
    data: String,
    layout: Layout,
    proof: Proof<Session>,
    /// Given up at shutdown: never registered again.
    released: AtomicBool,
}

/// Opens a session within `timeout`.
async fn connect(config: &ZooKeeperConfig, timeout: Duration) -> Result<zk::Client, String> {
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
async fn close(client: Arc<zk::Client>, timeout: Duration) -> bool {
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

/// The ACLs of every znode the node creates: protected with a digest identity, else open as in
/// 2010. ACLs are not inherited, so every create sets them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protection {
    Open,
    /// Anyone may read (the 2010 tooling's view), and only the digest identity
    /// (`--zookeeper-auth-file`) may do anything else: `world:anyone:r` and
    /// `digest:USER:HASH:cdrwa`, spelt out. Not the `auth` scheme, which ZooKeeper expands to
    /// every identity of the session, and over TLS that includes the client certificate's
    /// subject (`x509:CN=…`): a process holding the fleet's certificate and a wrong password
    /// would then own the znodes too.
    Digest(&'static [zk::Acl]),
}

/// ZooKeeper's digest of `user:password` (`DigestAuthenticationProvider`): `user:` and the
/// base64 of the SHA-1 of the whole line.
fn digest_id(identity: &str) -> String {
    use base64::Engine as _;
    let user = identity.split_once(':').map_or(identity, |(user, _)| user);
    let hash = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, identity.as_bytes());
    format!(
        "{user}:{}",
        base64::engine::general_purpose::STANDARD.encode(hash.as_ref())
    )
}

/// The protected ACLs of `identity`, made once per identity for the life of the process (a
/// process has one; `CreateOptions` borrows its ACLs for `'static`).
fn digest_acls(identity: &str) -> &'static [zk::Acl] {
    static MADE: std::sync::Mutex<Vec<(String, &'static [zk::Acl])>> =
        std::sync::Mutex::new(Vec::new());
    let id = digest_id(identity);
    let mut made = MADE.lock().unwrap_or_else(|poison| poison.into_inner());
    if let Some((_, acls)) = made.iter().find(|(known, _)| *known == id) {
        return acls;
    }
    let acls: &'static [zk::Acl] = Box::leak(Box::new([
        zk::Acl::new_const(zk::Permission::READ, "world", "anyone"),
        zk::Acl::new(zk::Permission::ALL, zk::AuthId::new("digest", &id)),
    ]));
    made.push((id, acls));
    acls
}

/// Znodes an earlier version created over TLS (whose `auth` ACL also granted the certificate's
/// `x509` identity), or that someone set by hand, may grant more than the fleet's digest
/// identity: with a digest identity, the node's paths and its mark are brought back to exactly
/// `world:anyone:r` plus that identity (the node holds ADMIN on them through it). A znode it
/// cannot correct is logged as an error: anyone it grants could lower the mark.
async fn tighten_acls(
    client: &zk::Client,
    paths: &[&str],
    config: &ZooKeeperConfig,
    timeout: Duration,
) {
    let (Protection::Digest(expected), Some(identity)) = (Protection::of(config), &config.auth)
    else {
        return;
    };
    let user = identity
        .expose()
        .split_once(':')
        .map_or(identity.expose(), |(user, _)| user);
    for path in paths {
        let (acl, stat) = match bounded(timeout, client.get_acl(path)).await {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(znode = %path, error = %e, "cannot read the znode's ACL");
                continue;
            }
        };
        // ZooKeeper shows a digest's hash as `x` to all but super users: the user is compared.
        let ours = acl.len() == 2
            && acl.iter().any(|a| {
                a.scheme() == "world"
                    && a.id() == "anyone"
                    && a.permission() == zk::Permission::READ
            })
            && acl.iter().any(|a| {
                a.scheme() == "digest"
                    && a.id().split(':').next() == Some(user)
                    && a.permission() == zk::Permission::ALL
            });
        if ours {
            continue;
        }
        let was = acl
            .iter()
            .map(|a| format!("{}:{}:{}", a.scheme(), a.id(), a.permission()))
            .collect::<Vec<_>>()
            .join(", ");
        match bounded(timeout, client.set_acl(path, expected, Some(stat.aversion))).await {
            Ok(_) => tracing::warn!(
                znode = %path,
                %was,
                "the znode granted more than the fleet's digest identity: its ACL is now world:anyone:r plus that identity only"
            ),
            Err(e) => tracing::error!(
                znode = %path,
                %was,
                error = %e,
                "the znode grants more than the fleet's digest identity and its ACL cannot be corrected: set it by hand (docs/security.md)"
            ),
        }
    }
}

impl Protection {
    fn of(config: &ZooKeeperConfig) -> Protection {
        match &config.auth {
            Some(identity) => Protection::Digest(digest_acls(identity.expose())),
            None => Protection::Open,
        }
    }

    fn acls(self) -> zk::Acls<'static> {
        match self {
            Protection::Open => zk::Acls::anyone_all(),
            Protection::Digest(acls) => zk::Acls::new(acls),
        }
    }

    fn persistent(self) -> zk::CreateOptions<'static> {
        zk::CreateMode::Persistent.with_acls(self.acls())
    }

    fn ephemeral(self) -> zk::CreateOptions<'static> {
        zk::CreateMode::Ephemeral.with_acls(self.acls())
    }
}

fn session_hex(client: &zk::Client) -> String {
    format!("{:x}", client.session_id().0)
}

/// Why one ZooKeeper call failed.
#[derive(Debug)]
enum CallError {
    /// ZooKeeper's answer.
    Zk(zk::Error),
    /// No answer in time.
    Timeout(Duration),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Zk(zk::Error::NoAuth) => write!(
                f,
                "not authorized (NoAuth): the znode's ACL does not grant this node's identity; \
                 the fleet's znodes belong to the digest identity of --zookeeper-auth-file \
                 (user:password), and every node of the path must use the same one"
            ),
            CallError::Zk(err) => write!(f, "{err}"),
            CallError::Timeout(t) => write!(f, "no answer within {} ms", t.as_millis()),
        }
    }
}

impl From<CallError> for String {
    fn from(err: CallError) -> String {
        err.to_string()
    }
}

/// Runs one ZooKeeper call within `timeout`.
async fn bounded<T>(
    timeout: Duration,
    call: impl Future<Output = Result<T, zk::Error>>,
) -> Result<T, CallError> {
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(err)) => Err(CallError::Zk(err)),
        Err(_) => Err(CallError::Timeout(timeout)),
    }
}

/// The outcome of one registration attempt of one worker.
enum Attempt {
    /// Ours: the mark read (and who wrote it before us), the mark's version after our
    /// compare-and-set, our znode's `czxid`, the watch on it, and when the compare-and-set was
    /// sent (the session was alive then).
    Registered {
        floor_ms: u64,
        writer: Option<String>,
        mark_version: i32,
        czxid: i64,
        watcher: zk::OneshotWatcher,
        sent: Instant,
    },
    /// Another session holds it.
    HeldBy { holder: String, owner: String },
    /// Its mark cannot be used. `created`: our znode was created before that was found out,
    /// so the worker must be given back by closing this session.
    Unusable { reason: String, created: bool },
}

/// The mark in `data` if this layout can issue above it: its value and writer.
fn usable_mark(data: &[u8], layout: &Layout) -> Result<(u64, Option<String>), String> {
    let (mark_ms, writer) = parse_mark(data, layout.epoch_ms(), "session")?;
    check_mark_in_layout(mark_ms, layout)?;
    Ok((mark_ms, writer))
}

/// The mark `data` (already read as usable) with `session` as its writer: what a registrant
/// writes to claim it. Everything else (an operator's `lowered` record too) stays.
fn claimed_mark(data: &[u8], epoch_ms: u64, session: &str) -> String {
    match serde_json::from_slice::<serde_json::Value>(data) {
        Ok(mut value @ serde_json::Value::Object(_)) => {
            value["session"] = serde_json::Value::String(session.to_owned());
            value.to_string()
        }
        _ => mark_json(0, epoch_ms, "session", session),
    }
}

/// Creates the mark znode if absent and reads it: its data and version.
async fn read_mark_znode(
    client: &zk::Client,
    mark_path: &str,
    protection: Protection,
    timeout: Duration,
) -> Result<(Vec<u8>, i32), String> {
    match bounded(
        timeout,
        client.create(mark_path, b"", &protection.persistent()),
    )
    .await
    {
        Ok(_) | Err(CallError::Zk(zk::Error::NodeExists)) => {}
        Err(err) => return Err(err.to_string()),
    }
    let (data, stat) = bounded(timeout, client.get_data(mark_path)).await?;
    Ok((data, stat.version))
}

/// One registration attempt: reads the mark first (a worker whose mark cannot be used is not
/// taken), creates `PATH/W` (ephemeral, with our address), claims the mark with a
/// compare-and-set (see the module doc), and watches our znode. The error is ZooKeeper's.
async fn try_register(
    client: &zk::Client,
    node_path: &str,
    mark_path: &str,
    data: &str,
    layout: &Layout,
    protection: Protection,
    timeout: Duration,
) -> Result<Attempt, String> {
    let (mark, _) = read_mark_znode(client, mark_path, protection, timeout).await?;
    if let Err(reason) = usable_mark(&mark, layout) {
        return Ok(Attempt::Unusable {
            reason,
            created: false,
        });
    }
    let session = session_hex(client);
    let czxid = match bounded(
        timeout,
        client.create(node_path, data.as_bytes(), &protection.ephemeral()),
    )
    .await
    {
        Ok((stat, _)) => stat.czxid,
        Err(CallError::Zk(zk::Error::NodeExists)) => {
            return match bounded(timeout, client.get_data(node_path)).await {
                // Our own earlier attempt landed although its answer was lost.
                Ok((_, stat)) if format!("{:x}", stat.ephemeral_owner) == session => {
                    claim_mark(
                        client, node_path, mark_path, layout, protection, stat.czxid, timeout,
                    )
                    .await
                }
                Ok((holder, stat)) => Ok(Attempt::HeldBy {
                    holder: String::from_utf8_lossy(&holder).chars().take(200).collect(),
                    owner: format!("{:x}", stat.ephemeral_owner),
                }),
                // Gone again in between: try once more on the next round.
                Err(CallError::Zk(zk::Error::NoNode)) => Ok(Attempt::HeldBy {
                    holder: "(just released)".into(),
                    owner: "0".into(),
                }),
                Err(err) => Err(err.to_string()),
            };
        }
        Err(err) => return Err(err.to_string()),
    };
    claim_mark(
        client, node_path, mark_path, layout, protection, czxid, timeout,
    )
    .await
}

/// With our znode `node_path` (created at `czxid`) in place: rewrites the mark with our session
/// as writer, compare-and-set on the version read (read again when another write got in
/// between), checks the mark again, then watches our znode and checks it is still ours.
async fn claim_mark(
    client: &zk::Client,
    node_path: &str,
    mark_path: &str,
    layout: &Layout,
    protection: Protection,
    czxid: i64,
    timeout: Duration,
) -> Result<Attempt, String> {
    let session = session_hex(client);
    for _ in 0..CLAIM_ATTEMPTS {
        let (data, version) = read_mark_znode(client, mark_path, protection, timeout).await?;
        let (floor_ms, writer) = match usable_mark(&data, layout) {
            Ok(mark) => mark,
            Err(reason) => {
                return Ok(Attempt::Unusable {
                    reason,
                    created: true,
                });
            }
        };
        let value = claimed_mark(&data, layout.epoch_ms(), &session);
        let mut multi = client
            .new_check_writer(node_path, None)
            .map_err(|e| e.to_string())?;
        multi
            .add_set_data(mark_path, value.as_bytes(), Some(version))
            .map_err(|e| e.to_string())?;
        let sent = Instant::now();
        let mark_version = match tokio::time::timeout(timeout, multi.commit()).await {
            Ok(Ok(results)) => match results.first() {
                Some(zk::MultiWriteResult::SetData { stat }) => stat.version,
                _ => version + 1,
            },
            Ok(Err(zk::CheckWriteError::OperationFailed {
                source: zk::Error::BadVersion,
                ..
            })) => continue,
            Ok(Err(zk::CheckWriteError::CheckFailed { source })) => {
                return Err(format!(
                    "{node_path} went away while registering ({source})"
                ));
            }
            Ok(Err(err)) => return Err(err.to_string()),
            Err(_) => return Err(format!("no answer within {} ms", timeout.as_millis())),
        };
        // Still ours after the claim (created again by another session in between, it is
        // theirs; our claim then only fences them, which is safe), and watched from now on.
        let (stat, watcher) = bounded(timeout, client.check_and_watch_stat(node_path)).await?;
        return Ok(match stat {
            Some(stat)
                if format!("{:x}", stat.ephemeral_owner) == session && stat.czxid == czxid =>
            {
                Attempt::Registered {
                    floor_ms,
                    writer,
                    mark_version,
                    czxid,
                    watcher,
                    sent,
                }
            }
            Some(stat) => Attempt::HeldBy {
                holder: "(registered again meanwhile)".into(),
                owner: format!("{:x}", stat.ephemeral_owner),
            },
            None => Attempt::HeldBy {
                holder: "(just released)".into(),
                owner: "0".into(),
            },
        });
    }
    Err(format!(
        "the mark {mark_path} changed under each of {CLAIM_ATTEMPTS} attempts to claim it"
    ))
}

/// The 2010 sanity checks: every registered peer's worker id matches its znode, its datacenter
/// id is ours, and our clock is within `max_skew_ms` of the peers' mean. Unreachable peers are
/// skipped (and logged).
async fn check_peers(
    client: &zk::Client,
    config: &ZooKeeperConfig,
    datacenter_id: u64,
    now_ms: &(dyn Fn() -> u64 + Send + Sync),
    timeout: Duration,
) -> Result<(), RegisterError> {
    let children = match bounded(timeout, client.list_children(&config.path)).await {
        Ok(children) => children,
        Err(err) => {
            return Err(RegisterError::Peer(format!(
                "cannot list {}: {err}",
                config.path
            )));
        }
    };
    let mut times = Vec::new();
    for child in children {
        let Ok(worker) = child.parse::<u64>() else {
            tracing::warn!(path = %config.path, znode = %child, "ignoring a znode that is not a worker id");
            continue;
        };
        let path = format!("{}/{child}", config.path);
        let addr = match bounded(timeout, client.get_data(&path)).await {
            Ok((data, _)) => String::from_utf8_lossy(&data).into_owned(),
            // Released between the listing and the read.
            Err(_) => continue,
        };
        let answers = async {
            let mut peer = Peer::connect(&addr, PEER_TIMEOUT).await?;
            let their_worker = peer.call_i64("get_worker_id").await?;
            let their_datacenter = peer.call_i64("get_datacenter_id").await?;
            let sent = now_ms();
            let their_time = peer.call_i64("get_timestamp").await?;
            let received = now_ms();
            Ok::<_, String>((their_worker, their_datacenter, their_time, sent, received))
        };
        match answers.await {
            Ok((their_worker, their_datacenter, their_time, sent, received)) => {
                if u64::try_from(their_worker).ok() != Some(worker) {
                    // A node killed and restarted at the same address registered another worker
                    // while its old znode lingers (until the dead session expires): consistent,
                    // if the worker it names is registered at this address. That znode is checked
                    // in its own turn.
                    let own = format!("{}/{their_worker}", config.path);
                    let registered = bounded(timeout, client.get_data(&own)).await;
                    if matches!(&registered, Ok((data, _)) if data.as_slice() == addr.as_bytes()) {
                        tracing::warn!(
                            peer = %addr,
                            znode = %path,
                            registered = %own,
                            "skipping a lingering znode: its address now serves the worker \
                             registered at {own} (a node restarted there before its previous \
                             session expired)"
                        );
                        continue;
                    }
                    return Err(RegisterError::Peer(format!(
                        "the peer at {addr} registered as worker {worker} ({path}) says its worker \
                         id is {their_worker}"
                    )));
                }
                if u64::try_from(their_datacenter).ok() != Some(datacenter_id) {
                    return Err(RegisterError::Peer(format!(
                        "the peer at {addr} ({path}) is in datacenter {their_datacenter}, and this \
                         node in {datacenter_id}: one ZooKeeper path holds one datacenter's \
                         workers (use another --zookeeper-path)"
                    )));
                }
                // Compare with our clock at the middle of the exchange.
                let ours = sent + (received.saturating_sub(sent)) / 2;
                times.push((their_time, ours, addr));
            }
            Err(err) => {
                tracing::warn!(peer = %addr, znode = %path, error = %err, "cannot check a registered peer; skipping it (a crashed node's znode stays until its session expires)");
            }
        }
    }
    if times.is_empty() {
        return Ok(());
    }
    // The mean of the peers' offsets from our clock.
    let count = i128::try_from(times.len()).unwrap_or(1);
    let offset: i128 = times
        .iter()
        .map(|(theirs, ours, _)| i128::from(*theirs) - i128::from(*ours))
        .sum::<i128>()
        / count;
    if offset.unsigned_abs() > u128::from(config.max_peer_skew_ms) {
        let peers: Vec<&str> = times.iter().map(|(_, _, addr)| addr.as_str()).collect();
        return Err(RegisterError::Peer(format!(
            "this node's clock is {} ms {} the mean of its {} peers' clocks ({}); at most {} ms \
             is allowed (--max-peer-skew-ms). Fix the clock (NTP) before starting",
            offset.unsigned_abs(),
            if offset > 0 { "behind" } else { "ahead of" },
            times.len(),
            peers.join(", "),
            config.max_peer_skew_ms
        )));
    }
    Ok(())
}

impl ZooKeeperRegistration {
    /// Checks the registered peers, then registers `worker_id` (retrying while it is held, up
    /// to the claim timeout) or the lowest free worker whose mark can be used. `data` is the
    /// advertised Thrift address.
    pub async fn register(
        config: &ZooKeeperConfig,
        layout: &Layout,
        datacenter_id: u64,
        worker_id: Option<u64>,
        data: String,
        now_ms: Arc<dyn Fn() -> u64 + Send + Sync>,
    ) -> Result<ZooKeeperRegistration, RegisterError> {
        let started = Instant::now();
        let deadline = started + config.claim_timeout;
        let timeout = call_timeout(config.session_timeout);
        let servers = config.servers.join(",");
        let unreachable = |last: String| RegisterError::Unreachable {
            servers: servers.clone(),
            waited_secs: started.elapsed().as_secs(),
            last,
        };
        let connect_timeout = config.claim_timeout.max(timeout);
        let mut client = connect(config, connect_timeout)
            .await
            .map_err(unreachable)?;
        for path in [config.path.clone(), config.marks_path()] {
            bounded(
                timeout,
                client.mkdir(&path, &Protection::of(config).persistent()),
            )
            .await
            .map_err(|e| unreachable(format!("cannot create {path}: {e}")))?;
        }
        check_peers(&client, config, datacenter_id, now_ms.as_ref(), timeout).await?;
        let mut last_error = String::new();
        loop {
            let candidates: Vec<u64> = match worker_id {
                Some(w) => vec![w],
                None => {
                    let children = bounded(timeout, client.list_children(&config.path))
                        .await
                        .map_err(|e| unreachable(e.to_string()))?;
                    let held: Vec<u64> = children.iter().filter_map(|c| c.parse().ok()).collect();
                    (0..=layout.max_worker_id())
                        .filter(|w| !held.contains(w))
                        .collect()
                }
            };
            let mut held_by = None;
            let mut unusable = 0;
            let mut failed = false;
            for w in candidates {
                let node_path = format!("{}/{w}", config.path);
                let mark_path = format!("{}/{w}", config.marks_path());
                match try_register(
                    &client,
                    &node_path,
                    &mark_path,
                    &data,
                    layout,
                    Protection::of(config),
                    timeout,
                )
                .await
                {
                    Ok(Attempt::Registered {
                        floor_ms,
                        mark_version,
                        czxid,
                        watcher,
                        sent,
                        ..
                    }) => {
                        tighten_acls(
                            &client,
                            &[&config.path, &config.marks_path(), &mark_path],
                            config,
                            timeout,
                        )
                        .await;
                        let session_timeout = client.session_timeout();
                        let session = session_hex(&client);
                        let until = sent + session_timeout - margin(session_timeout);
                        tracing::info!(
                            worker_id = w,
                            znode = %node_path,
                            %data,
                            session = %session,
                            session_timeout_ms = u64::try_from(session_timeout.as_millis()).unwrap_or(u64::MAX),
                            takeover_mark_ms = floor_ms,
                            mark_version,
                            "registered the worker id in ZooKeeper"
                        );
                        return Ok(ZooKeeperRegistration {
                            config: config.clone(),
                            datacenter_id,
                            worker_id: w,
                            node_path,
                            mark_path,
                            data,
                            layout: *layout,
                            proof: Proof::new(
                                Session {
                                    client: Some(Arc::new(client)),
                                    session,
                                    timeout: session_timeout,
                                    mark_version,
                                    czxid,
                                    watcher: Some(watcher),
                                },
                                until,
                                floor_ms,
                            ),
                            released: AtomicBool::new(false),
                        });
                    }
                    Ok(Attempt::HeldBy { holder, owner }) => {
                        held_by = Some((w, holder, owner, node_path));
                    }
                    Ok(Attempt::Unusable { reason, created }) => {
                        if created {
                            // Give the worker back: closing the session removes our znode and
                            // nothing else (a delete could remove another session's).
                            close(Arc::new(client), timeout).await;
                            client = connect(config, connect_timeout)
                                .await
                                .map_err(unreachable)?;
                        }
                        if worker_id.is_some() {
                            return Err(RegisterError::BadMark {
                                worker_id: w,
                                path: mark_path,
                                reason,
                            });
                        }
                        tracing::warn!(worker_id = w, mark = %mark_path, %reason, "skipping a free worker whose high-water mark cannot be used");
                        unusable += 1;
                    }
                    Err(err) => {
                        failed = true;
                        last_error = err;
                    }
                }
            }
            if worker_id.is_none() && held_by.is_none() && !failed {
                // Every free worker was skipped (or there is none).
                return Err(RegisterError::Full {
                    count: layout.max_worker_id() + 1,
                    path: config.path.clone(),
                    unusable,
                });
            }
            if Instant::now() >= deadline {
                return Err(match (worker_id, held_by) {
                    (Some(_), Some((w, holder, owner, path))) => RegisterError::Held {
                        worker_id: w,
                        holder,
                        path,
                        owner,
                        waited_secs: started.elapsed().as_secs(),
                    },
                    (None, Some(_)) => RegisterError::Full {
                        count: layout.max_worker_id() + 1,
                        path: config.path.clone(),
                        unusable,
                    },
                    (_, None) => unreachable(last_error),
                });
            }
            if let Some((_, holder, _, _)) = &held_by {
                last_error = format!("held by {holder}");
            }
            if session_gone(&client) {
                client = connect(config, connect_timeout)
                    .await
                    .map_err(unreachable)?;
            }
            tokio::time::sleep(RETRY_PAUSE.min(deadline.saturating_duration_since(Instant::now())))
                .await;
        }
    }

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

    async fn keep(&self, mut stop: watch::Receiver<bool>) -> Result<(), String> {
        // The watch on our znode, as a future: it fires when the znode is deleted or its data
        // changes (or the session ends).
        let mut watching: Option<WatchFuture> = None;
        loop {
            if *stop.borrow() {
                return Ok(());
            }
            let (client, session, session_timeout, czxid, lost) = {
                let mut state = self.proof.lock();
                let lost = state.lost_reason().is_some();
                let own = &mut state.own;
                if let Some(watcher) = own.watcher.take() {
                    watching = Some(Box::pin(watcher.changed()));
                }
                (
                    own.client.clone(),
                    own.session.clone(),
                    own.timeout,
                    own.czxid,
                    lost,
                )
            };
            if self.released.load(Ordering::SeqCst) {
                let _ = stop.wait_for(|s| *s).await;
                return Ok(());
            }
            // (`filter` drops our handle on a lost session before it is closed.)
            let Some(client) = client.filter(|_| !lost) else {
                watching = None;
                tokio::select! {
                    result = self.register_again() => result?,
                    _ = stop.wait_for(|s| *s) => return Ok(()),
                }
                continue;
            };
            let sent = Instant::now();
            let call_limit = call_timeout(session_timeout);
            let watched = watching.is_some();
            let check = async {
                if watched {
                    bounded(call_limit, client.check_stat(&self.node_path))
                        .await
                        .map(|stat| (stat, None))
                } else {
                    bounded(call_limit, client.check_and_watch_stat(&self.node_path))
                        .await
                        .map(|(stat, watcher)| (stat, Some(watcher)))
                }
            };
            let outcome = tokio::select! {
                outcome = check => outcome,
                _ = stop.wait_for(|s| *s) => return Ok(()),
            };
            let next = match outcome {
                Ok((Some(stat), watcher))
                    if format!("{:x}", stat.ephemeral_owner) == session && stat.czxid == czxid =>
                {
                    if let Some(watcher) = watcher {
                        watching = Some(Box::pin(watcher.changed()));
                    }
                    let until = sent + session_timeout - margin(session_timeout);
                    if self.proof.renewed(until, |_| {}) {
                        tracing::info!(znode = %self.node_path, "ZooKeeper answers again");
                    }
                    sent + session_timeout / 3
                }
                Ok((Some(stat), _)) => {
                    self.lose(format!(
                        "{} now belongs to session {:x} (created at zxid {:#x}, ours at {czxid:#x})",
                        self.node_path, stat.ephemeral_owner, stat.czxid
                    ));
                    continue;
                }
                Ok((None, _)) => {
                    self.lose(format!("{} is gone", self.node_path));
                    continue;
                }
                Err(CallError::Zk(zk::Error::SessionExpired | zk::Error::ClientClosed)) => {
                    self.lose(format!("the ZooKeeper session {session} expired"));
                    continue;
                }
                Err(err) => {
                    if session_gone(&client) {
                        self.lose(format!("the ZooKeeper session {session} expired"));
                        continue;
                    }
                    let (first, late) = self.proof.renewal_failed();
                    if first {
                        tracing::warn!(error = %err, znode = %self.node_path, "cannot reach ZooKeeper");
                    }
                    if late {
                        tracing::warn!(znode = %self.node_path, "session not confirmed in time: not issuing ids until it is");
                    }
                    Instant::now() + Duration::from_millis(200)
                }
            };
            // Not held while waiting: closing the session (at release) needs every handle.
            drop(client);
            tokio::select! {
                () = tokio::time::sleep_until(next.into()) => {}
                event = next_event(&mut watching) => {
                    watching = None;
                    match event.event_type {
                        zk::EventType::NodeDeleted => self.lose(format!(
                            "{} was deleted while this node's session {session} lives (by an \
                             operator or a script?)",
                            self.node_path
                        )),
                        // Check at once (and watch again).
                        _ => tracing::debug!(znode = %self.node_path, event = ?event.event_type, state = ?event.session_state, "watch fired"),
                    }
                }
                _ = stop.wait_for(|s| *s) => return Ok(()),
            }
        }
    }

    /// After the session expired or the registration was lost: the old session closed, a new
    /// one, the same worker, the mark read and claimed again. Fails only when another node
    /// holds the worker or its mark cannot be used.
    async fn register_again(&self) -> Result<(), String> {
        let timeout = call_timeout(self.config.session_timeout);
        let (previous, old) = {
            let mut state = self.proof.lock();
            (state.own.session.clone(), state.own.client.take())
        };
        if let Some(old) = old {
            // It writes nothing any more, and its znode (if any is left) goes with it.
            close(old, timeout).await;
        }
        let mut connected: Option<zk::Client> = None;
        let mut waiting_since: Option<Instant> = None;
        loop {
            let client = match connected.take() {
                Some(client) if !session_gone(&client) => client,
                _ => match connect(&self.config, timeout.max(Duration::from_secs(2))).await {
                    Ok(client) => client,
                    Err(err) => {
                        tracing::debug!(error = %err, "cannot reach ZooKeeper to register again");
                        tokio::time::sleep(RETRY_PAUSE).await;
                        continue;
                    }
                },
            };
            match try_register(
                &client,
                &self.node_path,
                &self.mark_path,
                &self.data,
                &self.layout,
                Protection::of(&self.config),
                timeout,
            )
            .await
            {
                Ok(Attempt::Registered {
                    floor_ms,
                    writer,
                    mark_version,
                    czxid,
                    watcher,
                    sent,
                }) => {
                    let session_timeout = client.session_timeout();
                    let until = sent + session_timeout - margin(session_timeout);
                    // Our own mark from the previous session is only a reservation.
                    let floor_ms = if writer.as_deref() == Some(previous.as_str()) {
                        0
                    } else {
                        floor_ms
                    };
                    let session = session_hex(&client);
                    tracing::info!(znode = %self.node_path, %session, takeover_mark_ms = floor_ms, mark_version, "registered the worker id again");
                    self.proof.held_again(until, floor_ms, |own| {
                        *own = Session {
                            client: Some(Arc::new(client)),
                            session,
                            timeout: session_timeout,
                            mark_version,
                            czxid,
                            watcher: Some(watcher),
                        };
                    });
                    return Ok(());
                }
                Ok(Attempt::HeldBy { owner, .. }) if owner == previous => {
                    // Our own previous session's znode: the client gave that session up before
                    // the server expired it. The server expires it within the session timeout;
                    // deleting it instead could delete another session's znode of the same
                    // path and version.
                    if waiting_since.is_none() {
                        waiting_since = Some(Instant::now());
                        tracing::info!(znode = %self.node_path, old_session = %previous, "the previous session's znode is still there; waiting for ZooKeeper to expire it");
                    }
                }
                Ok(Attempt::HeldBy { holder, owner }) if owner != "0" => {
                    return Err(format!(
                        "lost worker {} to another node: {holder} (session {owner}, {}); this \
                         node can never serve it again, so it stops (restart it to register a \
                         free worker)",
                        self.worker_id, self.node_path
                    ));
                }
                Ok(Attempt::HeldBy { .. }) => {}
                Ok(Attempt::Unusable { reason, created }) => {
                    if created {
                        close(Arc::new(client), timeout).await;
                    }
                    return Err(format!(
                        "the high-water mark in ZooKeeper ({}) is unusable: {reason}; refusing \
                         to serve the worker again",
                        self.mark_path
                    ));
                }
                Err(err) => {
                    tracing::debug!(error = %err, "cannot register again yet");
                }
            }
            connected = Some(client);
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }

    async fn write_mark(&self, mark_ms: u64) -> Result<(), String> {
        let (client, session, session_timeout, mut version, floor_ms) = {
            let state = self.proof.lock();
            if let Some(reason) = state.lost_reason() {
                return Err(format!("the registration is lost ({reason})"));
            }
            let Some(client) = &state.own.client else {
                return Err("the worker id is released".into());
            };
            (
                Arc::clone(client),
                state.own.session.clone(),
                state.own.timeout,
                state.own.mark_version,
                state.floor_ms,
            )
        };
        // Never below the floor the registration of this session read: a reservation the node
        // computed before a re-registration can land after it, and the mark it replaces is
        // another holder's.
        let mark_ms = mark_ms.max(floor_ms);
        let limit = call_timeout(session_timeout);
        let value = mark_json(mark_ms, self.layout.epoch_ms(), "session", &session);
        for _ in 0..WRITE_ATTEMPTS {
            // Only while our znode exists, and only if nobody wrote the mark since our last
            // write: a registrant claims it with a compare-and-set before it issues anything.
            let mut multi = client
                .new_check_writer(&self.node_path, None)
                .map_err(|e| e.to_string())?;
            multi
                .add_set_data(&self.mark_path, value.as_bytes(), Some(version))
                .map_err(|e| e.to_string())?;
            match tokio::time::timeout(limit, multi.commit()).await {
                Ok(Ok(results)) => {
                    let written = match results.first() {
                        Some(zk::MultiWriteResult::SetData { stat }) => stat.version,
                        _ => version + 1,
                    };
                    self.adopt_mark_version(&session, written);
                    return Ok(());
                }
                Ok(Err(zk::CheckWriteError::CheckFailed { source })) => {
                    let reason = format!("{} is no longer this node's ({source})", self.node_path);
                    self.lose(reason.clone());
                    return Err(reason);
                }
                Ok(Err(zk::CheckWriteError::OperationFailed {
                    source: zk::Error::BadVersion,
                    ..
                })) => {
                    // Somebody wrote the mark since our last write: our own write whose answer
                    // was lost, or another node that registered the worker.
                    let (data, stat) = bounded(limit, client.get_data(&self.mark_path)).await?;
                    let stored = parse_mark(&data, self.layout.epoch_ms(), "session");
                    match stored {
                        Ok((stored_ms, Some(writer))) if writer == session => {
                            version = stat.version;
                            self.adopt_mark_version(&session, version);
                            if stored_ms >= mark_ms {
                                // Already covered; never write a lower mark over it.
                                return Ok(());
                            }
                        }
                        other => {
                            let writer = match other {
                                Ok((_, Some(writer))) => format!("session {writer}"),
                                Ok((_, None)) => "a writer that left no session".into(),
                                Err(reason) => format!("an unusable mark ({reason})"),
                            };
                            let reason = format!(
                                "{} was written by {writer} since this node's last write: \
                                 another node registered worker {}",
                                self.mark_path, self.worker_id
                            );
                            self.lose(reason.clone());
                            return Err(reason);
                        }
                    }
                }
                Ok(Err(err)) => {
                    let message = err.to_string();
                    if session_gone(&client) {
                        self.lose(format!("the ZooKeeper session {session} expired"));
                    }
                    return Err(message);
                }
                Err(_) => {
                    return Err(format!(
                        "ZooKeeper did not answer within {} ms",
                        limit.as_millis()
                    ));
                }
            }
        }
        Err(format!(
            "{} kept changing under {WRITE_ATTEMPTS} writes",
            self.mark_path
        ))
    }

    /// Our session's write produced mark version `version` (versions only grow).
    fn adopt_mark_version(&self, session: &str, version: i32) {
        let mut state = self.proof.lock();
        if state.own.session == session {
            state.own.mark_version = state.own.mark_version.max(version);
        }
    }
}

/// The watch on our znode, as a future.
type WatchFuture = Pin<Box<dyn Future<Output = zk::WatchedEvent> + Send>>;

/// The next event of the watch, if there is one; never otherwise.
async fn next_event(watching: &mut Option<WatchFuture>) -> zk::WatchedEvent {
    match watching {
        Some(future) => future.as_mut().await,
        None => std::future::pending().await,
    }
}

impl Coordinator for ZooKeeperRegistration {
    fn source(&self) -> &'static str {
        "zookeeper"
    }

    fn fence(&self) -> watch::Receiver<Fence> {
        self.proof.fence()
    }

    fn store_mark(&self, mark_ms: u64) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(self.write_mark(mark_ms))
    }

    fn run(&self, stop: watch::Receiver<bool>) -> BoxFuture<'_, Result<(), String>> {
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
            |own| (Some(own.session.clone()), own.timeout.as_secs()),
        )
    }

    fn held_pairs(&self) -> BoxFuture<'_, Result<Vec<HeldPair>, String>> {
        Box::pin(async move {
            let (client, timeout) = {
                let state = self.proof.lock();
                (state.own.client.clone(), call_timeout(state.own.timeout))
            };
            let client = client.ok_or_else(|| "no ZooKeeper session right now".to_owned())?;
            let path = &self.config.path;
            let children = bounded(timeout, client.list_children(path))
                .await
                .map_err(|e| format!("cannot list {path} in ZooKeeper: {e}"))?;
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
                    Err(CallError::Zk(zk::Error::NoNode)) => {}
                    Err(e) => return Err(format!("cannot read {znode} in ZooKeeper: {e}")),
                }
            }
            Ok(held)
        })
    }

    fn workers_per_datacenter(&self) -> u64 {
        self.layout.max_worker_id() + 1
    }
}

/// A short session for an operator tool.
async fn operator_session(config: &ZooKeeperConfig) -> Result<zk::Client, String> {
    let timeout = call_timeout(config.session_timeout).max(Duration::from_secs(2));
    connect(config, config.claim_timeout.max(timeout))
        .await
        .map_err(|e| format!("cannot reach ZooKeeper ({}): {e}", config.servers.join(",")))
}

/// Who holds `node_path`: its data and session, if it exists.
async fn holder_of(
    client: &zk::Client,
    node_path: &str,
    timeout: Duration,
) -> Result<Option<String>, String> {
    match bounded(timeout, client.get_data(node_path)).await {
        Ok((data, stat)) => Ok(Some(format!(
            "{} (session {:x})",
            String::from_utf8_lossy(&data)
                .chars()
                .take(200)
                .collect::<String>(),
            stat.ephemeral_owner
        ))),
        Err(CallError::Zk(zk::Error::NoNode)) => Ok(None),
        Err(err) => Err(format!("cannot read {node_path}: {err}")),
    }
}

/// The mark at `mark_path` as stored (0 and an empty value when there is none), with its
/// version (-1 when absent).
async fn stored_mark(
    client: &zk::Client,
    mark_path: &str,
    layout: &Layout,
    timeout: Duration,
) -> Result<(StoredMark, i32), String> {
    let (data, version) = match bounded(timeout, client.get_data(mark_path)).await {
        Ok((data, stat)) => (data, stat.version),
        Err(CallError::Zk(zk::Error::NoNode)) => (Vec::new(), -1),
        Err(err) => return Err(format!("cannot read {mark_path}: {err}")),
    };
    let (high_water_ms, _) = parse_mark(&data, layout.epoch_ms(), "session")
        .map_err(|reason| format!("the mark at {mark_path} cannot be read: {reason}"))?;
    Ok((
        StoredMark {
            high_water_ms,
            value: String::from_utf8_lossy(&data).into_owned(),
            holder: None,
            location: mark_path.to_owned(),
        },
        version,
    ))
}

/// `snowflake state show` for ZooKeeper: worker `worker_id`'s mark under `config`'s path, and
/// who holds the worker (the registration's data and session), if anybody does.
pub async fn read_mark(
    config: &ZooKeeperConfig,
    layout: &Layout,
    worker_id: u64,
) -> Result<StoredMark, String> {
    let client = operator_session(config).await?;
    let timeout = call_timeout(config.session_timeout);
    let node_path = format!("{}/{worker_id}", config.path);
    let mark_path = format!("{}/{worker_id}", config.marks_path());
    let result = async {
        let (mut mark, _) = stored_mark(&client, &mark_path, layout, timeout).await?;
        mark.holder = holder_of(&client, &node_path, timeout).await?;
        Ok(mark)
    }
    .await;
    close(Arc::new(client), timeout).await;
    result
}

/// `snowflake state lower-mark` for ZooKeeper: lowers worker `worker_id`'s mark to `to_ms`,
/// recording `by` and `now_ms`. Refused while a node holds the worker, and unless `to_ms` is
/// below the current mark. It registers the worker itself for the time of the write (its
/// ephemeral znode proves nobody else holds it, and every node that registers after it claims
/// the mark with a compare-and-set, see the module doc), writes with a compare-and-set on the
/// version it read, then closes its session. Returns the mark as it was.
pub async fn lower_mark(
    config: &ZooKeeperConfig,
    layout: &Layout,
    worker_id: u64,
    to_ms: u64,
    by: &str,
    now_ms: u64,
) -> Result<StoredMark, String> {
    let client = operator_session(config).await?;
    let timeout = call_timeout(config.session_timeout);
    let node_path = format!("{}/{worker_id}", config.path);
    let mark_path = format!("{}/{worker_id}", config.marks_path());
    let result = async {
        match bounded(
            timeout,
            client.create(
                &node_path,
                LOWER_MARK_HOLDER.as_bytes(),
                &Protection::of(config).ephemeral(),
            ),
        )
        .await
        {
            Ok(_) => {}
            Err(CallError::Zk(zk::Error::NodeExists)) => {
                let holder = holder_of(&client, &node_path, timeout)
                    .await?
                    .unwrap_or_else(|| "(just released)".into());
                return Err(format!(
                    "worker {worker_id} is held by {holder} ({node_path}): refusing to lower its \
                     mark while a node holds it; stop that node first (a crashed node's znode \
                     goes when its session expires)"
                ));
            }
            Err(CallError::Zk(zk::Error::NoNode)) => {
                return Err(format!(
                    "{} does not exist: no node ever registered a worker there",
                    config.path
                ));
            }
            Err(err) => return Err(format!("cannot create {node_path}: {err}")),
        }
        let (previous, version) = stored_mark(&client, &mark_path, layout, timeout).await?;
        if version < 0 {
            return Err(format!(
                "worker {worker_id} has no mark at {mark_path}: nothing to lower"
            ));
        }
        if to_ms >= previous.high_water_ms {
            return Err(format!(
                "the mark of worker {worker_id} is {} ({}); --to {to_ms} ({}) is not below it",
                previous.high_water_ms,
                snowflake_core::format_unix_ms(previous.high_water_ms),
                snowflake_core::format_unix_ms(to_ms)
            ));
        }
        let value = lowered_mark_json(
            to_ms,
            layout.epoch_ms(),
            "session",
            previous.high_water_ms,
            by,
            now_ms,
        );
        let mut multi = client
            .new_check_writer(&node_path, None)
            .map_err(|e| e.to_string())?;
        multi
            .add_set_data(&mark_path, value.as_bytes(), Some(version))
            .map_err(|e| e.to_string())?;
        match tokio::time::timeout(timeout, multi.commit()).await {
            Ok(Ok(_)) => Ok(previous),
            Ok(Err(zk::CheckWriteError::OperationFailed {
                source: zk::Error::BadVersion,
                ..
            })) => Err(format!(
                "{mark_path} changed while lowering it; nothing was written (run it again)"
            )),
            Ok(Err(err)) => Err(format!("cannot write {mark_path}: {err}")),
            Err(_) => Err(format!(
                "ZooKeeper did not answer within {} ms; the mark may or may not be lowered (see \
                 `snowflake state show`)",
                timeout.as_millis()
            )),
        }
    }
    .await;
    // Removes our znode (and only ours) at once.
    close(Arc::new(client), timeout).await;
    result
}

/// Whether the client's session is over (expired, or the client closed): the registration is
/// then lost, whatever the failed call was.
fn session_gone(client: &zk::Client) -> bool {
    matches!(
        client.state(),
        zk::SessionState::Expired | zk::SessionState::Closed
    )
}

/// The safety margin: a fifth of the session timeout.
fn margin(timeout: Duration) -> Duration {
    timeout / 5
}

/// One call's time limit: a third of the session timeout, at most 2 s.
fn call_timeout(timeout: Duration) -> Duration {
    (timeout / 3).min(MAX_CALL_TIMEOUT)
}

#[cfg(test)]
mod digest_tests {
    #[test]
    fn the_digest_id_is_zookeepers() {
        // `printf snowflake:zk-pass-7 | openssl dgst -binary -sha1 | base64` (COMPONENTS.md §8).
        assert_eq!(
            super::digest_id("snowflake:zk-pass-7"),
            "snowflake:5ZvEtu0UOpFmetCdLlpab3owKiM="
        );
    }

    #[test]
    fn an_identity_gets_read_for_anyone_and_all_for_its_digest_only() {
        let acls = super::digest_acls("snowflake:zk-pass-7");
        assert_eq!(acls.len(), 2);
        assert!(std::ptr::eq(
            acls,
            super::digest_acls("snowflake:zk-pass-7")
        ));
        let text = format!("{acls:?}");
        assert!(
            text.contains("digest") && text.contains("5ZvEtu0UOpFmetCdLlpab3owKiM="),
            "{text}"
        );
        assert!(!text.contains("\"auth\""), "{text}");
    }
}

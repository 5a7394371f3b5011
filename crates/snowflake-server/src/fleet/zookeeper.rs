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
//! - **Fence**: ZooKeeper expires a session no earlier than its timeout after it last heard from
//!   the client. Every third of the timeout the node reads its own znode's stat; from the moment
//!   a successful read was *sent*, the session is provably alive for the negotiated timeout. The
//!   node stops issuing a fifth of the timeout before that, and when the znode is gone or owned
//!   by another session.
//! - **Mark**: a persistent znode `PATH-marks/W` (a sibling, so listing `PATH` shows only
//!   workers, as 2010 peers expect) holds the high-water mark, written before use in a
//!   multi-operation that first checks this node's ephemeral znode: only the live holder can
//!   write it. A node that registers reads it and issues only above it.
//! - **New session**: when the session expires (2010 never recovered), the node opens a new one
//!   and registers the same worker again, reading the mark again; if another node holds it by
//!   then, the service stops.

use crate::config::ZooKeeperConfig;
use crate::fleet::{BoxFuture, Coordinator, Fence, LeaseInfo, Proof, mark_json, parse_mark};
use crate::thrift::peer::Peer;
use snowflake_core::Layout;
use std::sync::Arc;
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
    /// Every worker under the path is registered.
    #[error("all {count} worker ids under {path} are registered; stop a node, or use another path")]
    Full {
        /// How many workers a datacenter has.
        count: u64,
        /// The path.
        path: String,
    },
    /// A peer failed the 2010 sanity checks.
    #[error("peer check failed: {0}")]
    Peer(String),
    /// The worker's mark cannot be read.
    #[error(
        "the high-water mark of worker {worker_id} in ZooKeeper ({path}) is unusable: {reason}; \
         refusing to register it, because without it this node could repeat ids a previous \
         holder issued"
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

/// The session as this node knows it (what it proves is in the [`Proof`]).
#[derive(Debug)]
struct Session {
    client: Arc<zk::Client>,
    /// The session's id (hex), as ZooKeeper shows it.
    session: String,
    /// The negotiated session timeout.
    timeout: Duration,
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
    epoch_ms: u64,
    proof: Proof<Session>,
}

/// A live session with the time its creation was asked for.
struct Connected {
    client: zk::Client,
    sent: Instant,
}

/// Opens a session within `timeout`.
async fn connect(config: &ZooKeeperConfig, timeout: Duration) -> Result<Connected, String> {
    let servers = config.servers.join(",");
    let sent = Instant::now();
    let connect = zk::Client::connector()
        .with_session_timeout(config.session_timeout)
        .with_connection_timeout(call_timeout(config.session_timeout))
        .connect(&servers);
    match tokio::time::timeout(timeout, connect).await {
        Ok(Ok(client)) => Ok(Connected { client, sent }),
        Ok(Err(err)) => Err(format!("cannot open a session: {err}")),
        Err(_) => Err(format!("no session within {} ms", timeout.as_millis())),
    }
}

fn persistent() -> zk::CreateOptions<'static> {
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())
}

fn ephemeral() -> zk::CreateOptions<'static> {
    zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all())
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
    /// Ours, with the mark read and who wrote it.
    Registered {
        floor_ms: u64,
        writer: Option<String>,
    },
    /// Another session holds it.
    HeldBy { holder: String, owner: String },
}

/// Creates `PATH/W` (ephemeral, with our address), then reads the mark (creating its znode
/// if absent). The outer error is ZooKeeper's, the inner one an unreadable mark.
async fn try_register(
    client: &zk::Client,
    node_path: &str,
    mark_path: &str,
    data: &str,
    epoch_ms: u64,
    timeout: Duration,
) -> Result<Result<Attempt, String>, String> {
    match tokio::time::timeout(
        timeout,
        client.create(node_path, data.as_bytes(), &ephemeral()),
    )
    .await
    {
        Ok(Ok(_)) => {}
        Ok(Err(zk::Error::NodeExists)) => {
            return match bounded(timeout, client.get_data(node_path)).await {
                Ok((holder, stat)) => {
                    let owner = format!("{:x}", stat.ephemeral_owner);
                    if owner == session_hex(client) {
                        // Our own earlier attempt landed although its answer was lost.
                        read_mark(client, mark_path, epoch_ms, timeout).await
                    } else {
                        Ok(Ok(Attempt::HeldBy {
                            holder: String::from_utf8_lossy(&holder).chars().take(200).collect(),
                            owner,
                        }))
                    }
                }
                // Gone again in between: try once more on the next round.
                Err(CallError::Zk(zk::Error::NoNode)) => Ok(Ok(Attempt::HeldBy {
                    holder: "(just released)".into(),
                    owner: "0".into(),
                })),
                Err(err) => Err(err.to_string()),
            };
        }
        Ok(Err(err)) => return Err(err.to_string()),
        Err(_) => return Err(format!("no answer within {} ms", timeout.as_millis())),
    }
    read_mark(client, mark_path, epoch_ms, timeout).await
}

async fn read_mark(
    client: &zk::Client,
    mark_path: &str,
    epoch_ms: u64,
    timeout: Duration,
) -> Result<Result<Attempt, String>, String> {
    match tokio::time::timeout(timeout, client.create(mark_path, b"", &persistent())).await {
        Ok(Ok(_) | Err(zk::Error::NodeExists)) => {}
        Ok(Err(err)) => return Err(err.to_string()),
        Err(_) => return Err(format!("no answer within {} ms", timeout.as_millis())),
    }
    let (data, _) = bounded(timeout, client.get_data(mark_path)).await?;

    Ok(parse_mark(&data, epoch_ms, "session")
        .map(|(floor_ms, writer)| Attempt::Registered { floor_ms, writer }))
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
    /// to the claim timeout) or the lowest free worker. `data` is the advertised Thrift address.
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
        let connected = connect(config, config.claim_timeout.max(timeout))
            .await
            .map_err(unreachable)?;
        let client = connected.client;
        for path in [config.path.clone(), config.marks_path()] {
            bounded(timeout, client.mkdir(&path, &persistent()))
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
            if candidates.is_empty() {
                return Err(RegisterError::Full {
                    count: layout.max_worker_id() + 1,
                    path: config.path.clone(),
                });
            }
            let mut held_by = None;
            for w in candidates {
                let node_path = format!("{}/{w}", config.path);
                let mark_path = format!("{}/{w}", config.marks_path());
                match try_register(
                    &client,
                    &node_path,
                    &mark_path,
                    &data,
                    layout.epoch_ms(),
                    timeout,
                )
                .await
                {
                    Ok(Ok(Attempt::Registered { floor_ms, .. })) => {
                        let session_timeout = client.session_timeout();
                        let session = session_hex(&client);
                        let until = connected.sent + session_timeout - margin(session_timeout);
                        tracing::info!(
                            worker_id = w,
                            znode = %node_path,
                            %data,
                            session = %session,
                            session_timeout_ms = u64::try_from(session_timeout.as_millis()).unwrap_or(u64::MAX),
                            takeover_mark_ms = floor_ms,
                            "registered the worker id in ZooKeeper"
                        );
                        return Ok(ZooKeeperRegistration {
                            config: config.clone(),
                            datacenter_id,
                            worker_id: w,
                            node_path,
                            mark_path,
                            data,
                            epoch_ms: layout.epoch_ms(),
                            proof: Proof::new(
                                Session {
                                    client: Arc::new(client),
                                    session,
                                    timeout: session_timeout,
                                },
                                until,
                                floor_ms,
                            ),
                        });
                    }
                    Ok(Ok(Attempt::HeldBy { holder, owner })) => {
                        held_by = Some((w, holder, owner, node_path));
                    }
                    Ok(Err(reason)) => {
                        // Give the worker back: we cannot serve it safely.
                        let _ = bounded(timeout, client.delete(&node_path, None)).await;
                        return Err(RegisterError::BadMark {
                            worker_id: w,
                            path: mark_path,
                            reason,
                        });
                    }
                    Err(err) => last_error = err,
                }
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
                    },
                    (_, None) => unreachable(last_error),
                });
            }
            if let Some((_, holder, _, _)) = &held_by {
                last_error = format!("held by {holder}");
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
        loop {
            if *stop.borrow() {
                return Ok(());
            }
            let (client, session, session_timeout, lost) = {
                let state = self.proof.lock();
                let own = &state.own;
                (
                    Arc::clone(&own.client),
                    own.session.clone(),
                    own.timeout,
                    state.lost_reason().is_some(),
                )
            };
            if lost {
                tokio::select! {
                    result = self.register_again() => result?,
                    _ = stop.wait_for(|s| *s) => return Ok(()),
                }
                continue;
            }
            let sent = Instant::now();
            let check = bounded(
                call_timeout(session_timeout),
                client.check_stat(&self.node_path),
            );
            let outcome = tokio::select! {
                outcome = check => outcome,
                _ = stop.wait_for(|s| *s) => return Ok(()),
            };
            let next = match outcome {
                Ok(Some(stat)) if format!("{:x}", stat.ephemeral_owner) == session => {
                    let until = sent + session_timeout - margin(session_timeout);
                    if self.proof.renewed(until, |_| {}) {
                        tracing::info!(znode = %self.node_path, "ZooKeeper answers again");
                    }
                    sent + session_timeout / 3
                }
                Ok(Some(stat)) => {
                    self.lose(format!(
                        "{} now belongs to session {:x}",
                        self.node_path, stat.ephemeral_owner
                    ));
                    continue;
                }
                Ok(None) => {
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
            tokio::select! {
                () = tokio::time::sleep_until(next.into()) => {}
                _ = stop.wait_for(|s| *s) => return Ok(()),
            }
        }
    }

    /// One attempt at registering this node's worker on `client` (see [`try_register`]).
    async fn try_register(
        &self,
        client: &zk::Client,
        timeout: Duration,
    ) -> Result<Result<Attempt, String>, String> {
        try_register(
            client,
            &self.node_path,
            &self.mark_path,
            &self.data,
            self.epoch_ms,
            timeout,
        )
        .await
    }

    /// After the session expired: a new session, the same worker, the mark read again. Fails
    /// only when another node holds the worker.
    async fn register_again(&self) -> Result<(), String> {
        let timeout = call_timeout(self.config.session_timeout);
        let previous = self.proof.lock().own.session.clone();
        loop {
            let connected = match connect(&self.config, timeout.max(Duration::from_secs(2))).await {
                Ok(connected) => connected,
                Err(err) => {
                    tracing::debug!(error = %err, "cannot reach ZooKeeper to register again");
                    tokio::time::sleep(RETRY_PAUSE).await;
                    continue;
                }
            };
            let client = connected.client;
            let mut attempt = self.try_register(&client, timeout).await;
            if let Ok(Ok(Attempt::HeldBy { owner, .. })) = &attempt
                && *owner == previous
            {
                // Our own previous session's znode: the client gave that session up before the
                // server expired it. Nobody else can hold it, and that session writes nothing
                // any more (the registration is marked lost), so take the znode over.
                tracing::info!(znode = %self.node_path, old_session = %previous, "the previous session's znode is still there; replacing it");
                match bounded(timeout, client.delete(&self.node_path, None)).await {
                    Ok(()) | Err(CallError::Zk(zk::Error::NoNode)) => {
                        attempt = self.try_register(&client, timeout).await;
                    }
                    Err(err) => attempt = Err(err.to_string()),
                }
            }
            match attempt {
                Ok(Ok(Attempt::Registered { floor_ms, writer })) => {
                    let session_timeout = client.session_timeout();
                    let until = connected.sent + session_timeout - margin(session_timeout);
                    // Our own mark from the previous session is only a reservation.
                    let floor_ms = if writer.as_deref() == Some(previous.as_str()) {
                        0
                    } else {
                        floor_ms
                    };
                    let session = session_hex(&client);
                    tracing::info!(znode = %self.node_path, %session, takeover_mark_ms = floor_ms, "registered the worker id again");
                    self.proof.held_again(until, floor_ms, |own| {
                        *own = Session {
                            client: Arc::new(client),
                            session,
                            timeout: session_timeout,
                        };
                    });
                    return Ok(());
                }
                Ok(Ok(Attempt::HeldBy { holder, owner })) if owner != "0" && owner != previous => {
                    return Err(format!(
                        "lost worker {} to another node while the ZooKeeper session was gone: \
                         {holder} (session {owner}, {}); this node can never serve it again, so \
                         it stops (restart it to register a free worker)",
                        self.worker_id, self.node_path
                    ));
                }
                Ok(Ok(Attempt::HeldBy { .. })) => {}
                Ok(Err(reason)) => {
                    let _ = bounded(timeout, client.delete(&self.node_path, None)).await;
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
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }

    async fn write_mark(&self, mark_ms: u64) -> Result<(), String> {
        let (client, session, session_timeout) = {
            let state = self.proof.lock();
            if let Some(reason) = state.lost_reason() {
                return Err(format!("the registration is lost ({reason})"));
            }
            (
                Arc::clone(&state.own.client),
                state.own.session.clone(),
                state.own.timeout,
            )
        };
        let value = mark_json(mark_ms, self.epoch_ms, "session", &session);
        // Only while our ephemeral znode (version 0, never changed) exists: only this session
        // can keep it alive, so only the holder can move the mark.
        let mut writer = client
            .new_check_writer(&self.node_path, Some(0))
            .map_err(|e| e.to_string())?;
        writer
            .add_set_data(&self.mark_path, value.as_bytes(), None)
            .map_err(|e| e.to_string())?;
        match tokio::time::timeout(call_timeout(session_timeout), writer.commit()).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(zk::CheckWriteError::CheckFailed { source })) => {
                let reason = format!("{} is no longer this node's ({source})", self.node_path);
                self.lose(reason.clone());
                Err(reason)
            }
            Ok(Err(err)) => {
                let message = err.to_string();
                if session_gone(&client) {
                    self.lose(format!("the ZooKeeper session {session} expired"));
                }
                Err(message)
            }
            Err(_) => Err(format!(
                "ZooKeeper did not answer within {} ms",
                call_timeout(session_timeout).as_millis()
            )),
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

    fn store_mark(&self, mark_ms: u64) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(self.write_mark(mark_ms))
    }

    fn run(&self, stop: watch::Receiver<bool>) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(self.keep(stop))
    }

    fn release(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let (client, timeout, lost) = {
                let state = self.proof.lock();
                (
                    Arc::clone(&state.own.client),
                    state.own.timeout,
                    state.lost_reason().is_some(),
                )
            };
            if lost {
                return;
            }
            match bounded(call_timeout(timeout), client.delete(&self.node_path, None)).await {
                Ok(()) => {
                    tracing::info!(znode = %self.node_path, "released the worker id (znode deleted)")
                }
                Err(err) => {
                    tracing::warn!(error = %err, znode = %self.node_path, "cannot delete the znode; it goes when the session expires")
                }
            }
            self.proof.released();
        })
    }

    fn info(&self) -> LeaseInfo {
        self.proof.info(
            &self.node_path,
            "not confirmed in time; ZooKeeper is out of reach",
            |own| (Some(own.session.clone()), own.timeout.as_secs()),
        )
    }
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

//! The registration, as in 2010: an ephemeral znode `PATH/W` holding the node's Thrift
//! address, taken only after the peer checks, and proven by a compare-and-set on the worker's
//! mark before anything is issued (see the module doc of [`super`]).

use super::acl::{Protection, tighten_acls};
use super::layout::ensure_layout;
use super::mark::{claimed_mark, read_mark_znode};
use super::peers::check_peers;
use super::session::{
    ZooKeeperError, bounded, call_timeout, close, connect, margin, session_gone, session_hex,
};
use super::version::check_server_version;
use super::{RETRY_PAUSE, Session, ZooKeeperRegistration};
use crate::config::ZooKeeperConfig;
use crate::error::FleetError;
use crate::etcd::far_ahead;
use crate::fleet_layout::LayoutMismatch;
use crate::mark::{Mark, MarkError, usable_mark};
use crate::proof::Proof;
use snowflake_core::{Clock, Layout, format_unix_ms};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};
use zookeeper_client as zk;

/// How long a registration stopped by a signal waits for ZooKeeper to confirm its session
/// closed, at most (the session expires by itself otherwise).
const STOP_CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

/// How many times a registrant reads the mark again when another write got in between its read
/// and its compare-and-set (a previous holder still writing, or an operator).
const CLAIM_ATTEMPTS: usize = 10;

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
    /// The fleet records another layout (or one that cannot be read).
    #[error(transparent)]
    Layout(#[from] LayoutMismatch),
    /// A peer failed the 2010 sanity checks.
    #[error("peer check failed: {0}")]
    Peer(String),
    /// A signal stopped the process while it was registering (its session was closed).
    #[error(
        "stopped (SIGTERM or SIGINT) while registering a worker id in ZooKeeper; nothing is held"
    )]
    Stopped,
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

/// The message of [`RegisterError::Full`].
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
/// A worker's two znodes, and the fleet's layout record.
#[derive(Debug, Clone)]
pub(super) struct Znodes {
    /// `PATH/W`: the ephemeral registration.
    pub(super) node: String,
    /// `PATH-marks/W`: the persistent mark.
    pub(super) mark: String,
    /// `PATH-layout`: the fleet's layout, checked by the registration.
    pub(super) layout: String,
}

impl Znodes {
    /// Worker `worker_id`'s znodes under `config`'s path.
    pub(super) fn new(config: &ZooKeeperConfig, worker_id: u64) -> Znodes {
        Znodes {
            node: format!("{}/{worker_id}", config.path),
            mark: format!("{}/{worker_id}", config.marks_path()),
            layout: config.layout_path(),
        }
    }
}

/// The outcome of one registration attempt of one worker.
pub(super) enum Attempt {
    /// Ours.
    Registered(Registered),
    /// Another session holds it.
    HeldBy(HeldBy),
    /// Its mark cannot be used. `created`: our znode was created before that was found out,
    /// so the worker must be given back by closing this session.
    Unusable { reason: MarkError, created: bool },
    /// The fleet's layout record changed since it was checked (our znode was created: give the
    /// worker back by closing this session, and check the record again).
    LayoutMoved,
    /// Its mark is far ahead of the clock (nothing was created): another free worker serves at
    /// once.
    Ahead { mark_ms: u64 },
}

/// A worker registered by one attempt.
pub(super) struct Registered {
    /// The mark read: the floor.
    pub(super) floor_ms: u64,
    /// Who wrote it before us (a session, hex), if it says.
    pub(super) writer: Option<String>,
    /// The mark's version after our compare-and-set.
    pub(super) mark_version: i32,
    /// Our znode's `czxid`.
    pub(super) czxid: i64,
    /// The watch on our znode.
    pub(super) watcher: zk::OneshotWatcher,
    /// When the compare-and-set was sent (the session was alive then).
    pub(super) sent: Instant,
}

/// Who holds a worker's znode.
#[derive(Debug)]
pub(super) struct HeldBy {
    /// The znode's data (the holder's Thrift address), or what happened to it.
    pub(super) holder: String,
    /// The holder's session (hex); `0` when the znode just went away.
    pub(super) owner: String,
}

impl HeldBy {
    /// The znode went away between two reads: free on the next round.
    fn just_released() -> HeldBy {
        HeldBy {
            holder: "(just released)".into(),
            owner: "0".into(),
        }
    }
}

/// A pinned worker found held by another session.
#[derive(Debug)]
struct HeldWorker {
    /// The worker.
    worker_id: u64,
    /// Who holds it.
    held: HeldBy,
    /// Its registration znode.
    path: String,
}

/// The layout a registration claims under: the node's, and the version of the fleet's record
/// of it as checked (the claim's multi-operation checks it).
#[derive(Debug, Clone, Copy)]
pub(super) struct Checked<'a> {
    /// The node's layout (the fleet's).
    pub(super) layout: &'a Layout,
    /// The version of `PATH-layout` when it was read and found to be the node's.
    pub(super) record_version: i32,
    /// An unpinned registration passes over a worker whose mark is far ahead of this clock
    /// reading (Unix ms); `None`: it takes it.
    pub(super) skip_ahead_of_ms: Option<u64>,
}

/// One registration attempt: reads the mark first (a worker whose mark cannot be used is not
/// taken), creates `PATH/W` (ephemeral, with our address), claims the mark with a
/// compare-and-set (see the module doc), and watches our znode. The error is ZooKeeper's.
pub(super) async fn try_register(
    client: &zk::Client,
    znodes: &Znodes,
    data: &str,
    checked: Checked<'_>,
    protection: Protection,
    timeout: Duration,
) -> Result<Attempt, FleetError> {
    let layout = checked.layout;
    let (mark, _) = read_mark_znode(client, &znodes.mark, protection, timeout).await?;
    match usable_mark(&mark, layout, "session") {
        Err(reason) => {
            return Ok(Attempt::Unusable {
                reason,
                created: false,
            });
        }
        Ok(Mark { high_water_ms, .. })
            if checked
                .skip_ahead_of_ms
                .is_some_and(|now_ms| far_ahead(high_water_ms, now_ms)) =>
        {
            return Ok(Attempt::Ahead {
                mark_ms: high_water_ms,
            });
        }
        Ok(_) => {}
    }
    let session = session_hex(client);
    let czxid = match bounded(
        timeout,
        client.create(&znodes.node, data.as_bytes(), &protection.ephemeral()),
    )
    .await
    {
        Ok((stat, _)) => stat.czxid,
        Err(ZooKeeperError::Zk(zk::Error::NodeExists)) => {
            return match bounded(timeout, client.get_data(&znodes.node)).await {
                // Our own earlier attempt landed although its answer was lost.
                Ok((_, stat)) if format!("{:x}", stat.ephemeral_owner) == session => {
                    claim_mark(client, znodes, checked, protection, stat.czxid, timeout).await
                }
                Ok((holder, stat)) => Ok(Attempt::HeldBy(HeldBy {
                    holder: String::from_utf8_lossy(&holder).chars().take(200).collect(),
                    owner: format!("{:x}", stat.ephemeral_owner),
                })),
                // Gone again in between: try once more on the next round.
                Err(ZooKeeperError::Zk(zk::Error::NoNode)) => {
                    Ok(Attempt::HeldBy(HeldBy::just_released()))
                }
                Err(err) => Err(err.into()),
            };
        }
        Err(err) => return Err(err.into()),
    };
    claim_mark(client, znodes, checked, protection, czxid, timeout).await
}

/// With our znode (created at `czxid`) in place: rewrites the mark with our session as
/// writer, compare-and-set on the version read (read again when another write got in
/// between) and only while the fleet's layout record is at the version checked, checks the
/// mark again, then watches our znode and checks it is still ours.
async fn claim_mark(
    client: &zk::Client,
    znodes: &Znodes,
    checked: Checked<'_>,
    protection: Protection,
    czxid: i64,
    timeout: Duration,
) -> Result<Attempt, FleetError> {
    let Znodes {
        node: node_path,
        mark: mark_path,
        layout: layout_path,
    } = znodes;
    let layout = checked.layout;
    let session = session_hex(client);
    for _ in 0..CLAIM_ATTEMPTS {
        let (data, version) = read_mark_znode(client, mark_path, protection, timeout).await?;
        let Mark {
            high_water_ms: floor_ms,
            writer,
        } = match usable_mark(&data, layout, "session") {
            Ok(mark) => mark,
            Err(reason) => {
                return Ok(Attempt::Unusable {
                    reason,
                    created: true,
                });
            }
        };
        let value = claimed_mark(&data, layout, &session);
        let mut multi = client
            .new_check_writer(node_path, None)
            .map_err(ZooKeeperError::Zk)?;
        multi
            .add_check_version(layout_path, checked.record_version)
            .map_err(ZooKeeperError::Zk)?;
        multi
            .add_set_data(mark_path, value.as_bytes(), Some(version))
            .map_err(ZooKeeperError::Zk)?;
        let sent = Instant::now();
        let mark_version = match tokio::time::timeout(timeout, multi.commit()).await {
            Ok(Ok(results)) => results
                .iter()
                .find_map(|result| match result {
                    zk::MultiWriteResult::SetData { stat } => Some(stat.version),
                    _ => None,
                })
                .unwrap_or(version + 1),
            // The layout record (the first operation after our znode's check) changed.
            Ok(Err(zk::CheckWriteError::OperationFailed {
                index: 0,
                source: zk::Error::BadVersion | zk::Error::NoNode,
            })) => return Ok(Attempt::LayoutMoved),
            Ok(Err(zk::CheckWriteError::OperationFailed {
                source: zk::Error::BadVersion,
                ..
            })) => continue,
            Ok(Err(zk::CheckWriteError::CheckFailed { source })) => {
                return Err(FleetError::Unavailable(format!(
                    "{node_path} went away while registering ({source})"
                )));
            }
            Ok(Err(err)) => return Err(ZooKeeperError::Multi(err.to_string()).into()),
            Err(_) => return Err(ZooKeeperError::Timeout(timeout).into()),
        };
        // Still ours after the claim (created again by another session in between, it is
        // theirs; our claim then only fences them, which is safe), and watched from now on.
        let (stat, watcher) = bounded(timeout, client.check_and_watch_stat(node_path)).await?;
        return Ok(match stat {
            Some(stat)
                if format!("{:x}", stat.ephemeral_owner) == session && stat.czxid == czxid =>
            {
                Attempt::Registered(Registered {
                    floor_ms,
                    writer,
                    mark_version,
                    czxid,
                    watcher,
                    sent,
                })
            }
            Some(stat) => Attempt::HeldBy(HeldBy {
                holder: "(registered again meanwhile)".into(),
                owner: format!("{:x}", stat.ephemeral_owner),
            }),
            None => Attempt::HeldBy(HeldBy::just_released()),
        });
    }
    Err(FleetError::KeptChanging(format!(
        "the mark {mark_path} changed under each of {CLAIM_ATTEMPTS} attempts to claim it"
    )))
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
        clock: &dyn Clock,
    ) -> Result<ZooKeeperRegistration, RegisterError> {
        let never = std::future::pending();
        ZooKeeperRegistration::register_until(
            config,
            layout,
            datacenter_id,
            worker_id,
            data,
            clock,
            never,
        )
        .await
    }

    /// [`ZooKeeperRegistration::register`], given up as soon as `stop` completes (a signal):
    /// the session opened for it is closed then (which removes a znode it created), and the
    /// answer is [`RegisterError::Stopped`].
    pub async fn register_until(
        config: &ZooKeeperConfig,
        layout: &Layout,
        datacenter_id: u64,
        worker_id: Option<u64>,
        data: String,
        clock: &dyn Clock,
        stop: impl Future<Output = ()>,
    ) -> Result<ZooKeeperRegistration, RegisterError> {
        // A handle on the session the rounds use, to close it when stopped.
        let session = std::sync::Mutex::new(None);
        let outcome = {
            let rounds = ZooKeeperRegistration::register_rounds(
                config,
                layout,
                datacenter_id,
                worker_id,
                data,
                clock,
                &session,
            );
            tokio::pin!(rounds);
            tokio::select! {
                result = &mut rounds => Some(result),
                () = stop => None,
            }
        };
        let kept = session.lock().map(|mut s| s.take()).unwrap_or_default();
        match outcome {
            // The registration holds its own handle; ours goes.
            Some(result) => result,
            None => {
                if let Some(client) = kept {
                    close(Arc::new(client), STOP_CLOSE_TIMEOUT).await;
                }
                tracing::info!(
                    datacenter_id,
                    "stopped while registering a worker id in ZooKeeper"
                );
                Err(RegisterError::Stopped)
            }
        }
    }

    /// The registration's rounds; `session` holds a handle on the session in use (none while
    /// one is being closed, so that it can close).
    async fn register_rounds(
        config: &ZooKeeperConfig,
        layout: &Layout,
        datacenter_id: u64,
        worker_id: Option<u64>,
        data: String,
        clock: &dyn Clock,
        session: &std::sync::Mutex<Option<zk::Client>>,
    ) -> Result<ZooKeeperRegistration, RegisterError> {
        let keep = |client: &zk::Client| {
            if let Ok(mut kept) = session.lock() {
                *kept = Some(client.clone());
            }
        };
        let forget = || {
            if let Ok(mut kept) = session.lock() {
                kept.take();
            }
        };
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
        keep(&client);
        for path in [config.path.clone(), config.marks_path()] {
            bounded(
                timeout,
                client.mkdir(&path, &Protection::of(config).persistent()),
            )
            .await
            .map_err(|e| unreachable(format!("cannot create {path}: {e}")))?;
        }
        check_server_version(config).await;
        check_peers(&client, config, datacenter_id, clock, timeout)
            .await
            .map_err(RegisterError::Peer)?;
        let mut last_error = String::new();
        // Workers whose mark is far ahead of the clock, passed over while another is free;
        // taken after all (`take_ahead`) when none is.
        let mut ahead: Vec<u64> = Vec::new();
        let mut take_ahead = false;
        loop {
            // The fleet's layout: recorded by the first registrant, ours or a refusal; every
            // registration below checks its version.
            let record_version = match ensure_layout(&client, config, layout, timeout).await {
                Ok(checked) => checked?,
                Err(err) if Instant::now() < deadline => {
                    last_error = err.to_string();
                    tokio::time::sleep(RETRY_PAUSE).await;
                    continue;
                }
                Err(err) => return Err(unreachable(err.to_string())),
            };
            let checked = Checked {
                layout,
                record_version,
                skip_ahead_of_ms: (worker_id.is_none() && !take_ahead).then(|| clock.now_ms()),
            };
            let candidates: Vec<u64> = match worker_id {
                Some(w) => vec![w],
                None => {
                    let children = bounded(timeout, client.list_children(&config.path))
                        .await
                        .map_err(|e| unreachable(e.to_string()))?;
                    let held: Vec<u64> = children.iter().filter_map(|c| c.parse().ok()).collect();
                    (0..=layout.max_worker_id())
                        .filter(|w| !held.contains(w) && (take_ahead || !ahead.contains(w)))
                        .collect()
                }
            };
            let mut held_by = None;
            let mut unusable = 0;
            let mut failed = false;
            for w in candidates {
                let znodes = Znodes::new(config, w);
                match try_register(
                    &client,
                    &znodes,
                    &data,
                    checked,
                    Protection::of(config),
                    timeout,
                )
                .await
                {
                    Ok(Attempt::Registered(Registered {
                        floor_ms,
                        mark_version,
                        czxid,
                        watcher,
                        sent,
                        ..
                    })) => {
                        let Znodes {
                            node: node_path,
                            mark: mark_path,
                            layout: layout_path,
                        } = znodes;
                        tighten_acls(
                            &client,
                            &[&config.path, &config.marks_path(), &layout_path, &mark_path],
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
                            )
                            .with_skipped_ahead(
                                u64::try_from(ahead.iter().filter(|a| **a != w).count())
                                    .unwrap_or(u64::MAX),
                            ),
                            released: AtomicBool::new(false),
                        });
                    }
                    Ok(Attempt::HeldBy(held)) => {
                        held_by = Some(HeldWorker {
                            worker_id: w,
                            held,
                            path: znodes.node,
                        });
                    }
                    Ok(Attempt::Ahead { mark_ms }) => {
                        tracing::warn!(
                            worker_id = w,
                            mark = %znodes.mark,
                            mark_ms,
                            time = %format_unix_ms(mark_ms),
                            "skipping a free worker whose high-water mark is far ahead of the \
                             clock (its holder would wait until the clock passes it)"
                        );
                        ahead.push(w);
                    }
                    Ok(Attempt::LayoutMoved) => {
                        // Give the worker back (as for an unusable mark), then check the
                        // record again on the next round.
                        forget();
                        close(Arc::new(client), timeout).await;
                        client = connect(config, connect_timeout)
                            .await
                            .map_err(unreachable)?;
                        keep(&client);
                        failed = true;
                        last_error = format!("{} changed while registering", config.layout_path());
                        break;
                    }
                    Ok(Attempt::Unusable { reason, created }) => {
                        if created {
                            // Give the worker back: closing the session removes our znode and
                            // nothing else (a delete could remove another session's).
                            forget();
                            close(Arc::new(client), timeout).await;
                            client = connect(config, connect_timeout)
                                .await
                                .map_err(unreachable)?;
                            keep(&client);
                        }
                        if worker_id.is_some() {
                            return Err(RegisterError::BadMark {
                                worker_id: w,
                                path: znodes.mark,
                                reason: reason.to_string(),
                            });
                        }
                        tracing::warn!(worker_id = w, mark = %znodes.mark, %reason, "skipping a free worker whose high-water mark cannot be used");
                        unusable += 1;
                    }
                    Err(err) => {
                        failed = true;
                        last_error = err.to_string();
                    }
                }
            }
            if worker_id.is_none()
                && held_by.is_none()
                && !failed
                && !ahead.is_empty()
                && !take_ahead
            {
                // Only workers whose mark is far ahead are free: take one after all.
                take_ahead = true;
                continue;
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
                    (Some(_), Some(held_by)) => RegisterError::Held {
                        worker_id: held_by.worker_id,
                        holder: held_by.held.holder,
                        path: held_by.path,
                        owner: held_by.held.owner,
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
            if let Some(held_by) = &held_by {
                last_error = format!("held by {}", held_by.held.holder);
            }
            if session_gone(&client) {
                client = connect(config, connect_timeout)
                    .await
                    .map_err(unreachable)?;
                keep(&client);
            }
            tokio::time::sleep(RETRY_PAUSE.min(deadline.saturating_duration_since(Instant::now())))
                .await;
        }
    }
}

//! Keeping the registration: the session confirmed every third of its timeout (each success
//! proving it alive for the timeout from when it was sent), the znode watched, and after an
//! expiry or a loss the same worker registered again on a new session.

use super::acl::Protection;
use super::layout::ensure_layout;
use super::register::{Attempt, Checked, HeldBy, Registered, Znodes, try_register};
use super::session::{
    ZooKeeperError, bounded, call_timeout, close, connect, margin, session_gone, session_hex,
};
use super::{RETRY_PAUSE, Session, ZooKeeperRegistration};
use crate::error::FleetError;
use crate::proof::RenewalFailure;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use zookeeper_client as zk;

/// The watch on our znode, as a future.
type WatchFuture = Pin<Box<dyn Future<Output = zk::WatchedEvent> + Send>>;

/// The next event of the watch, if there is one; never otherwise.
async fn next_event(watching: &mut Option<WatchFuture>) -> zk::WatchedEvent {
    match watching {
        Some(future) => future.as_mut().await,
        None => std::future::pending().await,
    }
}

impl ZooKeeperRegistration {
    /// The keeper (see [`crate::Coordinator::run`]): confirms the session every third of its
    /// timeout, fences at once when the znode goes or changes hands, and registers again after
    /// a loss.
    pub(super) async fn keep(&self, mut stop: watch::Receiver<bool>) -> Result<(), FleetError> {
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
                Err(ZooKeeperError::Zk(zk::Error::SessionExpired | zk::Error::ClientClosed)) => {
                    self.lose(format!("the ZooKeeper session {session} expired"));
                    continue;
                }
                Err(err) => {
                    if session_gone(&client) {
                        self.lose(format!("the ZooKeeper session {session} expired"));
                        continue;
                    }
                    let RenewalFailure { first, late } = self.proof.renewal_failed();
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
    async fn register_again(&self) -> Result<(), FleetError> {
        let timeout = call_timeout(self.config.session_timeout);
        let (previous, old) = {
            let mut state = self.proof.lock();
            (state.own.session.clone(), state.own.client.take())
        };
        if let Some(old) = old {
            // It writes nothing any more, and its znode (if any is left) goes with it.
            close(old, timeout).await;
        }
        let znodes = Znodes {
            node: self.node_path.clone(),
            mark: self.mark_path.clone(),
            layout: self.config.layout_path(),
        };
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
            // The fleet's layout, checked again: an operator may have moved the fleet.
            let record_version =
                match ensure_layout(&client, &self.config, &self.layout, timeout).await {
                    Ok(Ok(version)) => version,
                    Ok(Err(mismatch)) => return Err(FleetError::Layout(mismatch)),
                    Err(err) => {
                        tracing::debug!(error = %err, "cannot register again yet");
                        connected = Some(client);
                        tokio::time::sleep(RETRY_PAUSE).await;
                        continue;
                    }
                };
            let checked = Checked {
                layout: &self.layout,
                record_version,
                skip_ahead_of_ms: None,
            };
            match try_register(
                &client,
                &znodes,
                &self.data,
                checked,
                Protection::of(&self.config),
                timeout,
            )
            .await
            {
                Ok(Attempt::Registered(Registered {
                    floor_ms,
                    writer,
                    mark_version,
                    czxid,
                    watcher,
                    sent,
                })) => {
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
                Ok(Attempt::HeldBy(HeldBy { owner, .. })) if owner == previous => {
                    // Our own previous session's znode: the client gave that session up before
                    // the server expired it. The server expires it within the session timeout;
                    // deleting it instead could delete another session's znode of the same
                    // path and version.
                    if waiting_since.is_none() {
                        waiting_since = Some(Instant::now());
                        tracing::info!(znode = %self.node_path, old_session = %previous, "the previous session's znode is still there; waiting for ZooKeeper to expire it");
                    }
                }
                Ok(Attempt::HeldBy(HeldBy { holder, owner })) if owner != "0" => {
                    return Err(FleetError::Taken(format!(
                        "lost worker {} to another node: {holder} (session {owner}, {}); this \
                         node can never serve it again, so it stops (restart it to register a \
                         free worker)",
                        self.worker_id, self.node_path
                    )));
                }
                Ok(Attempt::HeldBy(_)) => {}
                // (Not asked for: a re-registration takes its worker whatever its mark.)
                Ok(Attempt::Ahead { .. }) => {}
                Ok(Attempt::LayoutMoved) => {
                    // Our znode was created: give it back with this session, and look again.
                    close(Arc::new(client), timeout).await;
                    tokio::time::sleep(RETRY_PAUSE).await;
                    continue;
                }
                Ok(Attempt::Unusable { reason, created }) => {
                    if created {
                        close(Arc::new(client), timeout).await;
                    }
                    return Err(FleetError::UnusableMark {
                        context: format!(
                            "the high-water mark in ZooKeeper ({}) is unusable",
                            self.mark_path
                        ),
                        source: reason,
                        consequence: "; refusing to serve the worker again",
                    });
                }
                Err(err) => {
                    tracing::debug!(error = %err, "cannot register again yet");
                }
            }
            connected = Some(client);
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }
}

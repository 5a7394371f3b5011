//! The mark written ahead of use: a multi-operation that checks this node's znode still
//! exists and compares-and-sets the mark's version as this session last wrote it, so a holder
//! that lost its registration can never write it.

use super::ZooKeeperRegistration;
use super::acl::Protection;
use super::session::{ZooKeeperError, bounded, call_timeout, session_gone};
use crate::error::FleetError;
use crate::mark::{Mark, mark_json, parse_mark};
use snowflake_core::Layout;
use std::sync::Arc;
use std::time::Duration;
use zookeeper_client as zk;

/// How many times a mark write is tried again after finding that its own lost write landed.
const WRITE_ATTEMPTS: usize = 3;

/// The mark `data` (already read as usable) with `session` as its writer: what a registrant
/// writes to claim it. Everything else (an operator's `lowered` record too) stays.
pub(super) fn claimed_mark(data: &[u8], layout: &Layout, session: &str) -> String {
    match serde_json::from_slice::<serde_json::Value>(data) {
        Ok(mut value @ serde_json::Value::Object(_)) => {
            value["session"] = serde_json::Value::String(session.to_owned());
            value.to_string()
        }
        _ => mark_json(0, layout, "session", session),
    }
}

/// Creates the mark znode if absent and reads it: its data and version.
pub(super) async fn read_mark_znode(
    client: &zk::Client,
    mark_path: &str,
    protection: Protection,
    timeout: Duration,
) -> Result<(Vec<u8>, i32), ZooKeeperError> {
    match bounded(
        timeout,
        client.create(mark_path, b"", &protection.persistent()),
    )
    .await
    {
        Ok(_) | Err(ZooKeeperError::Zk(zk::Error::NodeExists)) => {}
        Err(err) => return Err(err),
    }
    let (data, stat) = bounded(timeout, client.get_data(mark_path)).await?;
    Ok((data, stat.version))
}

impl ZooKeeperRegistration {
    /// Writes `mark_ms` (see [`crate::Coordinator::store_mark`] and the module doc's "Mark"):
    /// only while our znode exists, and only if nobody wrote the mark since our last write.
    pub(super) async fn write_mark(&self, mark_ms: u64) -> Result<(), FleetError> {
        let (client, session, session_timeout, mut version, floor_ms) = {
            let state = self.proof.lock();
            if let Some(reason) = state.lost_reason() {
                return Err(FleetError::NotHeld {
                    holding: "registration",
                    reason: reason.to_owned(),
                });
            }
            let Some(client) = &state.own.client else {
                return Err(FleetError::Released);
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
        let value = mark_json(mark_ms, &self.layout, "session", &session);
        for _ in 0..WRITE_ATTEMPTS {
            // Only while our znode exists, and only if nobody wrote the mark since our last
            // write: a registrant claims it with a compare-and-set before it issues anything.
            let mut multi = client
                .new_check_writer(&self.node_path, None)
                .map_err(ZooKeeperError::Zk)?;
            multi
                .add_set_data(&self.mark_path, value.as_bytes(), Some(version))
                .map_err(ZooKeeperError::Zk)?;
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
                    return Err(FleetError::Lost(reason));
                }
                Ok(Err(zk::CheckWriteError::OperationFailed {
                    source: zk::Error::BadVersion,
                    ..
                })) => {
                    // Somebody wrote the mark since our last write: our own write whose answer
                    // was lost, or another node that registered the worker.
                    let (data, stat) = bounded(limit, client.get_data(&self.mark_path)).await?;
                    let stored = parse_mark(&data, &self.layout, "session");
                    match stored {
                        Ok(Mark {
                            high_water_ms: stored_ms,
                            writer: Some(writer),
                        }) if writer == session => {
                            version = stat.version;
                            self.adopt_mark_version(&session, version);
                            if stored_ms >= mark_ms {
                                // Already covered; never write a lower mark over it.
                                return Ok(());
                            }
                        }
                        other => {
                            let writer = match other {
                                Ok(Mark {
                                    writer: Some(writer),
                                    ..
                                }) => format!("session {writer}"),
                                Ok(Mark { writer: None, .. }) => {
                                    "a writer that left no session".into()
                                }
                                Err(reason) => format!("an unusable mark ({reason})"),
                            };
                            let reason = format!(
                                "{} was written by {writer} since this node's last write: \
                                 another node registered worker {}",
                                self.mark_path, self.worker_id
                            );
                            self.lose(reason.clone());
                            return Err(FleetError::Lost(reason));
                        }
                    }
                }
                Ok(Err(err)) => {
                    let message = err.to_string();
                    if session_gone(&client) {
                        self.lose(format!("the ZooKeeper session {session} expired"));
                    }
                    return Err(ZooKeeperError::Multi(message).into());
                }
                Err(_) => {
                    return Err(FleetError::Unavailable(format!(
                        "ZooKeeper did not answer within {} ms",
                        limit.as_millis()
                    )));
                }
            }
        }
        Err(FleetError::KeptChanging(format!(
            "{} kept changing under {WRITE_ATTEMPTS} writes",
            self.mark_path
        )))
    }

    /// Our session's write produced mark version `version` (versions only grow).
    fn adopt_mark_version(&self, session: &str, version: i32) {
        let mut state = self.proof.lock();
        if state.own.session == session {
            state.own.mark_version = state.own.mark_version.max(version);
        }
    }
}

//! Holding the pair for the database: the lease kept alive and the fence applied (the fleet
//! crate's `Coordinator::run` and `keep_fence`, as for a node), the fleet's mark raised ahead of
//! the keeper's trusted time, and the grant renewed under both; then the goodbye.
//!
//! The order that makes it safe (DESIGN.md, "PostgreSQL fleet mode"):
//!
//! - **Mark before limit.** A grant's `limit_ms` is a mark the fleet has durably accepted while
//!   the pair was held: the database never issues an ID dated after a mark a successor reads.
//! - **Floor.** Every grant carries the fleet's mark found at the claim: the database issues
//!   only above what a previous holder may have issued.
//! - **Validity within the fence.** A grant lapses `valid_for_ms` after the database receives
//!   it, on its own monotonic clock; `valid_for_ms` is at most half the fence's margin and never
//!   past the fence's deadline, so a database cut off from its keeper, or a keeper cut off from
//!   etcd, stops issuing before the lease can expire.
//! - **Goodbye.** Revoke, then the exact mark (lowered to what was issued), then release.

use crate::database::{Database, Grant, Identity, Observed, Target};
use crate::error::{DbError, KeeperError};
use crate::grantee::Grantee;
use snowflake_fleet::{Coordinator, keep_fence};
use snowflake_server::clock_trust::{ClockTrust, Reading};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Pause between attempts to reach the database again.
pub const RETRY_PAUSE: Duration = Duration::from_millis(500);
/// How often an unchanged warning is repeated.
const REPEAT_WARNING: Duration = Duration::from_secs(10);

/// How long a grant stays valid without renewal: half the fence's margin (the margin is a fifth
/// of the lease's TTL: 1 s for the default 10 s TTL), at least 1 ms.
pub fn validity(ttl_secs: u64) -> Duration {
    (snowflake_fleet::etcd::margin(ttl_secs) / 2).max(Duration::from_millis(1))
}

/// Why holding ended.
#[derive(Debug)]
pub enum End {
    /// The shutdown signal.
    Stopped,
    /// The database is in recovery now (restarted as a standby): the pair is given back and
    /// the keeper waits for a primary again.
    Demoted,
    /// The keeper cannot go on.
    Failed(KeeperError),
}

/// What one hold works with.
#[derive(Debug)]
pub struct Holding<'a> {
    /// Where the database is.
    pub target: &'a Target,
    /// Who the database issues as (checked again after every reconnection).
    pub identity: Identity,
    /// The lease.
    pub coordinator: Arc<dyn Coordinator>,
    /// The keeper's trusted time: no fleet mark beyond it.
    pub trust: &'a ClockTrust,
    /// How far ahead of trusted time the fleet's mark is written (serve's `--reserve-ms`).
    pub reserve_ms: u64,
}

/// The fleet's mark as written, and what the database says it covers.
#[derive(Debug, Default)]
struct Marks {
    /// The highest mark etcd accepted from this hold (Unix ms; 0: none yet): the grant's limit.
    written_ms: AtomicU64,
    /// The highest of the database's own mark and last issued ID it reported: the fleet's mark
    /// is raised to cover them too (IDs issued before fleet mode, or under a mark ahead).
    database_ms: AtomicU64,
}

impl Marks {
    fn written(&self) -> u64 {
        self.written_ms.load(Ordering::Acquire)
    }

    fn observe(&self, observed: &Observed) {
        let own = observed
            .mark_ms
            .unwrap_or(0)
            .max(observed.last_issued_ms.unwrap_or(0));
        self.database_ms.fetch_max(own, Ordering::Relaxed);
    }
}

/// A warning said once, then again only when it changes or every [`REPEAT_WARNING`].
#[derive(Debug, Default)]
struct Warned(Option<(String, Instant)>);

impl Warned {
    fn warn(&mut self, message: String) {
        let repeat = self
            .0
            .as_ref()
            .is_none_or(|(last, at)| *last != message || at.elapsed() >= REPEAT_WARNING);
        if repeat {
            tracing::warn!("{message}");
            self.0 = Some((message, Instant::now()));
        }
    }

    fn clear(&mut self) {
        self.0 = None;
    }
}

/// Holds the pair for `db` until `stop` flips, the database is demoted, or something fatal;
/// then says goodbye (revoke, final mark, release).
pub async fn hold(
    holding: &Holding<'_>,
    mut db: Database,
    first: Observed,
    clock: Arc<dyn snowflake_core::Clock>,
    mut stop: watch::Receiver<bool>,
) -> End {
    let grantee = Grantee::new(clock);
    let marks = Marks::default();
    marks.observe(&first);
    let (inner_tx, inner) = watch::channel(false);
    let coordinator = &holding.coordinator;
    let end = tokio::select! {
        kept = coordinator.run(inner.clone()) => match kept {
            Ok(()) => End::Stopped,
            Err(err) => End::Failed(err.into()),
        },
        () = keep_fence(&grantee, coordinator.fence(), inner.clone()) => {
            End::Failed(KeeperError::Database("the lease keeper stopped".into()))
        }
        () = raise_marks(holding, &grantee, &marks) => unreachable!("raising marks never ends"),
        end = grant(holding, &mut db, &grantee, &marks) => end,
        _ = stop.wait_for(|s| *s) => End::Stopped,
    };
    inner_tx.send_replace(true);
    goodbye(holding, db, &marks, end).await
}

/// Keeps the fleet's mark `reserve_ms` ahead of trusted time while the pair is held: written
/// when it runs within half of that, never beyond time the keeper trusts or the layout's end.
async fn raise_marks(holding: &Holding<'_>, grantee: &Grantee, marks: &Marks) {
    let period = Duration::from_millis((holding.reserve_ms / 4).clamp(5, 1000));
    let last_ms = holding.identity.layout.max_timestamp_ms().saturating_sub(1);
    let mut warned = Warned::default();
    let mut fencing = grantee.subscribe();
    let mut stepped = false;
    loop {
        if fencing.borrow_and_update().held_until.is_some() {
            let now_ms = match holding.trust.read() {
                Reading::Trusted { now_ms } => {
                    if std::mem::take(&mut stepped) {
                        tracing::info!("the clock is trusted again: raising the fleet's mark");
                    }
                    Some(now_ms)
                }
                Reading::Stepped(step) => {
                    if !std::mem::replace(&mut stepped, true) {
                        tracing::warn!(
                            "{}; pg-keeper writes no fleet mark beyond trusted time meanwhile, so \
                             the database stops at the last one",
                            step.describe()
                        );
                    }
                    None
                }
            };
            let written = marks.written();
            if let Some(now_ms) = now_ms
                && (written == 0 || now_ms.saturating_add(holding.reserve_ms / 2) >= written)
            {
                let target = now_ms
                    .saturating_add(holding.reserve_ms)
                    .max(written)
                    .max(marks.database_ms.load(Ordering::Relaxed))
                    .min(last_ms);
                if target > written {
                    match holding.coordinator.store_mark(target).await {
                        Ok(()) => {
                            marks.written_ms.fetch_max(target, Ordering::AcqRel);
                            warned.clear();
                        }
                        Err(err) => warned.warn(format!(
                            "cannot write the fleet's mark {target} to etcd: {err}; the database \
                             issues no id dated after {written}"
                        )),
                    }
                }
            }
        }
        tokio::select! {
            () = tokio::time::sleep(period) => {}
            _ = fencing.changed() => {}
        }
    }
}

/// Renews the grant a few times per validity while the fence is up and a mark is written;
/// revokes it at once when the fence goes down. Reconnects when the database goes away.
async fn grant(holding: &Holding<'_>, db: &mut Database, grantee: &Grantee, marks: &Marks) -> End {
    let ttl_secs = holding.coordinator.info().ttl_secs;
    let validity = validity(ttl_secs);
    let mut tick = tokio::time::interval((validity / 4).max(Duration::from_millis(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut fencing = grantee.subscribe();
    let mut warned = Warned::default();
    // Whether a grant may be live in the database (so a fence going down revokes it).
    let mut granted = false;
    let mut ready = false;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = fencing.changed() => {}
        }
        if db.is_closed() {
            match reopen(holding, &mut warned).await {
                Ok(fresh) => {
                    *db = fresh;
                    granted = false;
                }
                Err(end) => return end,
            }
        }
        let fence = fencing.borrow_and_update().clone();
        let left = fence.left(Instant::now());
        let valid_for_ms = u64::try_from(validity.min(left).as_millis()).unwrap_or(u64::MAX);
        let limit_ms = marks.written();
        if valid_for_ms == 0 || limit_ms == 0 {
            if granted && fence.held_until.is_none() {
                let reason = fence.reason.as_deref().unwrap_or("the lease is not held");
                match db.revoke().await {
                    Ok(_) => tracing::warn!(
                        reason,
                        "revoked the database's grant: not issuing ids until the lease is held again"
                    ),
                    Err(err) => {
                        tracing::warn!(reason, error = %err, "cannot revoke the database's grant; it lapses on its own within {} ms", validity.as_millis())
                    }
                }
                granted = false;
            }
            continue;
        }
        let request = Grant {
            datacenter_id: holding.identity.datacenter_id,
            worker_id: holding.identity.worker_id,
            limit_ms,
            valid_for_ms,
            lease: holding.coordinator.info().lease_id.unwrap_or_default(),
            floor_ms: (fence.floor_ms > 0).then_some(fence.floor_ms),
        };
        match db.grant(&request).await {
            Ok(observed) => {
                grantee.observed(observed.last_issued_ms);
                marks.observe(&observed);
                if observed.in_recovery {
                    return End::Demoted;
                }
                granted = true;
                warned.clear();
                if !ready {
                    ready = true;
                    tracing::info!(
                        datacenter_id = request.datacenter_id,
                        worker_id = request.worker_id,
                        limit_ms,
                        valid_for_ms,
                        floor_ms = fence.floor_ms,
                        lease = %request.lease,
                        "granting: the database issues ids"
                    );
                    crate::notify::ready(&holding.identity);
                }
            }
            Err(DbError::Unreachable(message)) => {
                warned.warn(format!("{message}; the grant lapses on its own"));
                // A call that timed out leaves the connection in an unknown state: reconnect.
                if !db.is_closed() {
                    match reopen(holding, &mut warned).await {
                        Ok(fresh) => *db = fresh,
                        Err(end) => return end,
                    }
                }
            }
            Err(DbError::Refused(message)) => return End::Failed(KeeperError::Database(message)),
        }
    }
}

/// Connects again, until the database answers: the same identity (else the keeper stops), a
/// primary (else the pair is given back).
async fn reopen(holding: &Holding<'_>, warned: &mut Warned) -> Result<Database, End> {
    loop {
        let attempt = async {
            let db = Database::connect(holding.target).await?;
            let (identity, observed) = db.status().await?;
            Ok::<_, DbError>((db, identity, observed))
        };
        match attempt.await {
            Ok((db, identity, observed)) => {
                if identity != holding.identity {
                    return Err(End::Failed(KeeperError::Database(format!(
                        "the database now issues as {identity}, but the keeper holds {} for it: \
                         restart pg-keeper to claim the new pair",
                        holding.identity
                    ))));
                }
                if observed.in_recovery {
                    return Err(End::Demoted);
                }
                tracing::info!(database = %holding.target.shown, "connected to the database again");
                return Ok(db);
            }
            Err(DbError::Unreachable(message)) => warned.warn(message),
            Err(DbError::Refused(message)) => {
                return Err(End::Failed(KeeperError::Database(message)));
            }
        }
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}

/// Revokes the grant (nothing is issued under the pair after it), leaves the exact mark in the
/// fleet at a graceful stop, and gives the pair back.
async fn goodbye(holding: &Holding<'_>, db: Database, marks: &Marks, end: End) -> End {
    let coordinator = &holding.coordinator;
    let written = marks.written();
    let revoked = if db.is_closed() {
        match Database::connect(holding.target).await {
            Ok(db) => db.revoke().await,
            Err(err) => Err(err),
        }
    } else {
        db.revoke().await
    };
    match revoked {
        Ok(observed) => {
            tracing::info!("revoked the database's grant");
            let exact = observed.final_mark_ms(written);
            if matches!(end, End::Stopped) && written > 0 && exact < written {
                match coordinator.store_mark(exact).await {
                    Ok(()) => tracing::info!(mark_ms = exact, "stored the exact mark in etcd"),
                    Err(err) => {
                        tracing::warn!(error = %err, mark_ms = written, "cannot store the exact mark; the reservation in etcd covers every id")
                    }
                }
            }
        }
        Err(err) => tracing::warn!(
            error = %err,
            mark_ms = written,
            "cannot revoke the database's grant; it lapses on its own, and the fleet's mark covers every id it allowed"
        ),
    }
    coordinator.release().await;
    end
}

#[cfg(test)]
mod tests {
    use super::validity;
    use std::time::Duration;

    #[test]
    fn a_grant_is_valid_for_half_the_fences_margin() {
        assert_eq!(validity(10), Duration::from_secs(1));
        assert_eq!(validity(2), Duration::from_millis(200));
        assert_eq!(validity(0), Duration::from_millis(1));
    }
}

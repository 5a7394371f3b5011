//! `snowflake pg-keeper`: the PostgreSQL extension's fleet mode. Run beside a database whose
//! `snowflake.keeper` is on, it leases the database's (datacenter, worker) pair in the fleet's
//! etcd exactly as a `snowflake serve` node does — claim, keep-alive, fence, the mark written
//! to the fleet — and grants the database an issue limit through the extension's
//! superuser-only `snowflake_keeper_grant`, renewed a few times a second and lapsing on its own
//! when it is not.
//!
//! A round: wait until the database is reachable and a primary; read its pair and layout from
//! `snowflake_status()`; claim that pair under that layout, through the fleet crate as a node
//! claims (so the fleet's recorded layout, `{prefix}/layout`, must be the database's: a keeper
//! of a js-safe database is refused by a Twitter fleet, naming both, and the reverse); the
//! fleet's mark found becomes the database's floor;
//! hold it (`hold`); on SIGTERM/SIGINT revoke the grant, leave the exact mark, release. A
//! database that comes back as a standby gets its pair given back, and the keeper waits for a
//! primary again (a failover's new primary runs its own keeper).
//!
//! Files: `database` (the connection and the extension's SQL), `grantee` (the database as the
//! fleet fences it), `hold` (the loops while holding, and the goodbye), `notify` (systemd),
//! `error`. DESIGN.md ("PostgreSQL fleet mode") argues the timing.

#![deny(missing_docs)]

mod database;
mod error;
mod grantee;
mod hold;
mod notify;

pub use database::{CALL_TIMEOUT, Grant, Identity, Observed, Target};
pub use error::{DbError, KeeperError};
pub use hold::validity;

use database::Database;
use hold::{End, Holding};
use snowflake_core::{Clock, Layout};
use snowflake_fleet::etcd::ClaimError;
use snowflake_fleet::{
    Applicant, ConnectError, Coordination, EtcdConfig, LayoutMismatch, PairRequest,
};
use snowflake_server::clock_trust::{ClockAnchor, ClockTrust};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How often the keeper looks again at a database that is down or a standby.
const WAIT_PAUSE: Duration = Duration::from_secs(1);
/// How often an unchanged "still waiting" is logged again.
const WAIT_LOG_EVERY: Duration = Duration::from_secs(30);

/// What the keeper is told (resolved from `serve`'s flags and its own).
#[derive(Debug, Clone)]
pub struct Settings {
    /// The database.
    pub target: Target,
    /// The fleet's etcd.
    pub etcd: EtcdConfig,
    /// How far ahead of trusted time the fleet's mark is written (serve's `--reserve-ms`).
    pub reserve_ms: u64,
    /// serve's `--max-clock-step-ms`.
    pub max_clock_step_ms: u64,
    /// serve's `--clock-step-trust-secs`.
    pub clock_step_trust: Duration,
    /// Recorded with the claim, for operators.
    pub hostname: String,
    /// Recorded with the claim (default: the database, as `postgresql://user@host:port/db`).
    pub advertise_addr: Option<String>,
    /// A layout given on the command line (`--layout`, `--epoch-ms`): the database's must be
    /// it.
    pub layout: Option<Layout>,
}

/// Runs the keeper until `shutdown` completes (then it revokes, leaves the exact mark and
/// releases the pair: `Ok`), or until it cannot go on (the error says why; the pair is
/// released first). `anchor` is the clock reading taken when the process started.
pub async fn run(
    settings: &Settings,
    clock: Arc<dyn Clock>,
    anchor: ClockAnchor,
    shutdown: impl Future<Output = ()>,
) -> Result<(), KeeperError> {
    let trust = ClockTrust::anchored(
        Arc::clone(&clock),
        &anchor,
        settings.max_clock_step_ms,
        settings.clock_step_trust,
    );
    let (stop_tx, stop) = watch::channel(false);
    let keeping = async {
        loop {
            let Some((db, identity, observed)) = open(settings, stop.clone()).await? else {
                return Ok(());
            };
            let Some(coordinator) =
                claim(settings, &identity, clock.as_ref(), stop.clone()).await?
            else {
                return Ok(());
            };
            let holding = Holding {
                target: &settings.target,
                identity,
                coordinator,
                trust: &trust,
                reserve_ms: settings.reserve_ms,
            };
            match hold::hold(&holding, db, observed, Arc::clone(&clock), stop.clone()).await {
                End::Stopped => return Ok(()),
                End::Demoted => {
                    tracing::warn!(
                        database = %settings.target.shown,
                        "the database is in recovery (a standby now): gave its pair back; waiting for it to be a primary again"
                    );
                }
                End::Failed(err) => return Err(err),
            }
        }
    };
    tokio::pin!(keeping, shutdown);
    tokio::select! {
        result = &mut keeping => result,
        () = &mut shutdown => {
            tracing::info!("stopping: revoking the grant, then releasing the pair");
            notify::stopping();
            stop_tx.send_replace(true);
            keeping.await
        }
    }
}

/// Waits until the database answers as a primary that takes grants; `None` when stopped
/// first. A database that refuses (no extension, not preloaded, keeper off, not a superuser,
/// a bad password) is an error at once.
async fn open(
    settings: &Settings,
    mut stop: watch::Receiver<bool>,
) -> Result<Option<(Database, Identity, Observed)>, KeeperError> {
    let shown = settings.target.shown.as_str();
    let mut logged: Option<(String, Instant)> = None;
    loop {
        let attempt = async {
            let db = Database::connect(&settings.target).await?;
            let (identity, observed) = db.status().await?;
            Ok::<_, DbError>((db, identity, observed))
        };
        let waiting = tokio::select! {
            attempt = attempt => match attempt {
                Ok((db, identity, observed)) if !observed.in_recovery => {
                    if let Some(expected) = settings.layout
                        && expected != identity.layout
                    {
                        return Err(KeeperError::Database(format!(
                            "the database ({shown}) uses the layout {} with epoch {}, not {} with \
                             epoch {} as given (--layout, --epoch-ms)",
                            identity.layout.name(),
                            identity.layout.epoch_ms(),
                            expected.name(),
                            expected.epoch_ms()
                        )));
                    }
                    tracing::info!(database = %shown, pair = %identity, "the database takes grants");
                    return Ok(Some((db, identity, observed)));
                }
                Ok(_) => format!(
                    "the database ({shown}) is a standby (in recovery): waiting for it to be \
                     promoted before claiming its pair"
                ),
                Err(DbError::Unreachable(message)) => format!("{message}; trying again"),
                Err(DbError::Refused(message)) => return Err(KeeperError::Database(message)),
            },
            _ = stop.wait_for(|s| *s) => return Ok(None),
        };
        let repeat = logged
            .as_ref()
            .is_none_or(|(last, at)| *last != waiting || at.elapsed() >= WAIT_LOG_EVERY);
        if repeat {
            tracing::warn!("{waiting}");
            notify::status(&waiting);
            logged = Some((waiting, Instant::now()));
        }
        tokio::select! {
            () = tokio::time::sleep(WAIT_PAUSE) => {}
            _ = stop.wait_for(|s| *s) => return Ok(None),
        }
    }
}

/// Claims the database's own pair in etcd (pinned: that pair or none); `None` when stopped
/// first.
async fn claim(
    settings: &Settings,
    identity: &Identity,
    clock: &dyn Clock,
    mut stop: watch::Receiver<bool>,
) -> Result<Option<Arc<dyn snowflake_fleet::Coordinator>>, KeeperError> {
    let request = PairRequest {
        datacenter_id: identity.datacenter_id,
        worker_id: identity.worker_id,
        pinned: true,
    };
    let applicant = Applicant {
        host: settings.hostname.clone(),
        advertise_addr: Some(
            settings
                .advertise_addr
                .clone()
                .unwrap_or_else(|| settings.target.shown.clone()),
        ),
        listeners: Vec::new(),
    };
    let coordination = Coordination::Etcd(settings.etcd.clone());
    // A stop gives the claim up and revokes the lease it was granted.
    let stopped = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    let claimed = snowflake_fleet::connect(
        Some(&coordination),
        &identity.layout,
        request,
        &applicant,
        clock,
        stopped,
        |_, coordinator| Ok::<_, Infallible>(coordinator),
    )
    .await;
    match claimed {
        Err(err) if err.stopped() => Ok(None),
        Ok(Some(coordinator)) => {
            tracing::info!(pair = %identity, lease = ?coordinator.info().lease_id, "claimed the database's pair in etcd");
            Ok(Some(coordinator))
        }
        Ok(None) => Err(KeeperError::Claim(
            "no coordinator was opened (etcd is required)".into(),
        )),
        Err(ConnectError::Claim(ClaimError::Held {
            holder,
            key,
            waited_secs,
            ..
        })) => Err(KeeperError::Claim(format!(
            "{identity} is held by another process: {holder} (etcd key {key}); gave up after \
             {waited_secs} s. A database's pair must be its own: stop the process that holds it, \
             or give the database another pair (snowflake.datacenter_id, snowflake.worker_id)"
        ))),
        Err(ConnectError::Claim(ClaimError::Layout(LayoutMismatch::Other {
            location,
            theirs,
            ours,
            ..
        }))) => Err(KeeperError::Claim(format!(
            "the database ({}) issues under the layout {ours} (snowflake.layout, \
             snowflake.epoch_ms), and the fleet runs the layout {theirs} (recorded at {location}); \
             ids of two layouts can collide, so a fleet runs exactly one: run this keeper in a \
             fleet of the database's layout (its own --etcd-prefix: see docs/layouts.md), or give \
             the fleet's layout to a database that has issued no id yet",
            settings.target.shown
        ))),
        Err(err) => Err(KeeperError::Claim(err.to_string())),
    }
}

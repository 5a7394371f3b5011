//! `snowflake_nextval()`: the issue path, and the reservation that keeps the generator's issue
//! limit at or below the durable mark.
//!
//! Invariant: every issued ID's timestamp ≤ the generator's issue limit ≤ the durable mark,
//! which is in the WAL (flushed) and in `PGDATA/snowflake.mark` (fsynced) before the limit is
//! raised to it. After a restart, a crash or a promotion the generator's floor is that mark, so
//! nothing at or below it is issued again, whatever the clock did meanwhile.

use crate::clock;
use crate::errors::SqlError;
use crate::settings;
use crate::shared::{self, Shared};
use pgrx::pg_sys;
use snowflake_core::Error as CoreError;
use snowflake_pg_state::{Config, Identity, Reading};
use std::sync::atomic::Ordering;

/// The shared state, or why `snowflake_nextval()` cannot run in this process.
pub fn preloaded() -> Result<&'static Shared, SqlError> {
    shared::get().ok_or_else(|| {
        SqlError::not_now("snowflake_nextval() needs the snowflake library preloaded").hint(
            "add snowflake to shared_preload_libraries in postgresql.conf and restart the server",
        )
    })
}

/// The checked settings, or the SQL error naming the bad one.
pub fn config() -> Result<&'static Config, SqlError> {
    settings::config()
        .as_ref()
        .map_err(|e| SqlError::config(e.to_string()))
}

fn not_in_recovery() -> Result<(), SqlError> {
    // SAFETY: a plain read of shared state.
    if unsafe { pg_sys::RecoveryInProgress() } {
        return Err(SqlError::new(
            pg_sys::errcodes::PgSqlErrorCode::ERRCODE_READ_ONLY_SQL_TRANSACTION,
            "cannot issue snowflake ids during recovery: this server is a standby or has not finished replaying wal",
        )
        .hint("issue ids on the primary; a standby issues ids once promoted"));
    }
    Ok(())
}

/// The next ID.
pub fn next_id() -> Result<i64, SqlError> {
    let shared = preloaded()?;
    not_in_recovery()?;
    let config = config()?;
    if !shared.started.load(Ordering::Acquire) {
        start(shared, config)?;
    }
    if config.keeper && !shared.grant_live() {
        return Err(no_grant(shared));
    }
    let generator = &shared.generator;
    let now = clock::wall_ms();
    let limit = generator.issue_limit_ms();
    if now.saturating_add(config.reserve_ms / 2) > limit
        && (now > limit || limit < shared.ceiling_ms.load(Ordering::Relaxed))
    {
        reserve(shared, config, now > limit);
    }
    match generator.try_next_id() {
        Ok(id) => Ok(id.as_i64()),
        Err(CoreError::PastIssueLimit { .. }) => {
            reserve(shared, config, true);
            match generator.try_next_id() {
                Ok(id) => Ok(id.as_i64()),
                Err(CoreError::PastIssueLimit { now_ms, limit_ms }) => {
                    Err(explain_limit(shared, config, now_ms, limit_ms))
                }
                Err(e) => Err(refusal(shared, e)),
            }
        }
        Err(e) => Err(refusal(shared, e)),
    }
}

/// The first issuing call after start or promotion: checks the stored identity and applies the
/// mark as the generator's floor.
fn start(shared: &Shared, config: &Config) -> Result<(), SqlError> {
    let identity = Identity::of(config);
    shared.locked(|shared, locked| {
        // Another backend may have started the generator (and raised the mark since) while this
        // one waited for the lock: resuming after that mark again would put the generator's last
        // issued time a whole reservation ahead of the clock, refusing every ID until the clock
        // caught up (eight pgbench clients starting at once: "clock moved backwards … the
        // durable mark may cover ids issued before this server started").
        if shared.started.load(Ordering::Acquire) {
            return Ok(());
        }
        if let Some(e) = locked.load_error.get() {
            return Err(SqlError::not_now(format!("cannot use the durable mark: {e}")).hint(
                "restore the file from a backup, or, if no id was ever issued with this pair, remove it",
            ));
        }
        if let Some(stored) = locked.stored
            && stored != identity
        {
            return Err(SqlError::not_now(format!(
                "the settings say {identity}, but the durable mark was reserved as {stored}: ids of the new settings would not be covered by it"
            ))
            .hint("restore the old settings; to move this database to another pair or layout, follow docs/postgres.md (changing the pair)"));
        }
        let mark = shared.mark_ms.load(Ordering::Acquire);
        shared
            .generator
            .resume_after(mark)
            .map_err(|e| SqlError::not_now(format!("the durable mark {mark} is unusable: {e}")))?;
        shared.started.store(true, Ordering::Release);
        Ok(())
    })
}

/// Moves the durable mark ahead of the clock when it runs low, and sets the issue limit:
/// `min(mark, trusted time while a step is untrusted, the keeper's grant)`. With `must` false it
/// gives way to a backend already doing it.
pub fn reserve(shared: &Shared, config: &Config, must: bool) {
    let work = |shared: &Shared, locked: &mut shared::Locked| {
        let (wall, mono) = (clock::wall_ms(), clock::mono_ms());
        let reading = locked.trust.observe(shared::policy(), wall, mono);
        let grant_cap = if !config.keeper {
            u64::MAX
        } else if shared.grant_live() {
            locked.grant_limit_ms
        } else {
            0
        };
        let step_cap = match reading {
            Reading::Trusted { now_ms } => {
                locked.step = None;
                let mark = shared.mark_ms.load(Ordering::Acquire);
                let want = now_ms
                    .saturating_add(config.reserve_ms)
                    .min(config.layout.max_timestamp_ms())
                    .min(grant_cap);
                if mark < now_ms.saturating_add(config.reserve_ms / 2) && want > mark {
                    // A failure is kept in last_error and explained to the refused caller.
                    let _ = shared.write_mark(locked, Identity::of(config), want);
                }
                u64::MAX
            }
            Reading::Stepped(step) => {
                locked.step = Some(step);
                step.trusted_ms
            }
        };
        let mark = shared.mark_ms.load(Ordering::Acquire);
        shared.ceiling_ms.store(grant_cap, Ordering::Relaxed);
        shared
            .generator
            .set_issue_limit_ms(mark.min(step_cap).min(grant_cap));
    };
    if must {
        shared.locked(work);
    } else {
        shared.try_locked(work);
    }
}

fn no_grant(shared: &Shared) -> SqlError {
    let pair = config()
        .map(|c| format!("datacenter {} worker {}", c.datacenter_id, c.worker_id))
        .unwrap_or_default();
    let lapsed = shared.grant_deadline_ns.load(Ordering::Acquire);
    let when = if shared.locked(|_, l| l.revoked) {
        "the keeper revoked its grant (it stopped, or lost its lease)".to_owned()
    } else if lapsed == 0 {
        "no keeper has granted an issue limit since the server started".to_owned()
    } else {
        format!(
            "the keeper's grant lapsed {} ms ago",
            clock::mono_ns().saturating_sub(lapsed) / 1_000_000
        )
    };
    SqlError::not_now(format!(
        "the pair ({pair}) is not held: snowflake.keeper is on and {when}"
    ))
    .hint("start snowflake pg-keeper for this database, or check why it cannot renew its lease in etcd")
}

/// Why the generator found the clock past its issue limit.
fn explain_limit(shared: &Shared, config: &Config, now_ms: u64, limit_ms: u64) -> SqlError {
    let (step, last_error, grant_limit) =
        shared.locked(|_, l| (l.step, l.last_error.get(), l.grant_limit_ms));
    if let Some(step) = step {
        return SqlError::not_now(step.describe());
    }
    if let Some(e) = last_error {
        return SqlError::new(pg_sys::errcodes::PgSqlErrorCode::ERRCODE_IO_ERROR, e);
    }
    if config.keeper {
        if !shared.grant_live() {
            return no_grant(shared);
        }
        if now_ms > grant_limit {
            return SqlError::not_now(format!(
                "the clock reads {now_ms} (unix ms), past the keeper's grant {grant_limit}: the pair is not held beyond it"
            ))
            .hint("check that snowflake pg-keeper renews its grant");
        }
    }
    if now_ms > config.layout.max_timestamp_ms() {
        return SqlError::not_now(format!(
            "the clock reads {now_ms} (unix ms), past the layout's last representable time {}",
            config.layout.max_timestamp_ms()
        ));
    }
    SqlError::not_now(format!(
        "the clock reads {now_ms} (unix ms), past the issue limit {limit_ms}: the durable mark could not be raised"
    ))
}

fn refusal(shared: &Shared, e: CoreError) -> SqlError {
    match e {
        CoreError::ClockMovedBackwards { last_ms, .. } => {
            let mark = shared.mark_ms.load(Ordering::Acquire);
            let floor = shared.locked(|_, l| l.keeper_floor_ms);
            let why = if floor > 0
                && last_ms <= floor
                && shared.generator.last_issued_ms() == Some(floor)
            {
                format!(
                    "the fleet's mark {floor} (passed on by snowflake pg-keeper) may cover ids a previous holder of the pair issued"
                )
            } else if last_ms <= mark && shared.generator.last_issued_ms() == Some(mark) {
                format!("the durable mark {mark} may cover ids issued before this server started")
            } else {
                "ids up to it were issued".to_owned()
            };
            SqlError::not_now(e.to_string()).hint(format!(
                "{why}; retry once the clock passes it (the clock must not be set back under a running database)"
            ))
        }
        other => SqlError::not_now(other.to_string()),
    }
}

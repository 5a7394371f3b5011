//! The keeper's side of fleet mode: superuser-only functions through which `snowflake
//! pg-keeper`, holding the database's pair under a lease in the fleet's etcd, grants an issue
//! limit that lapses on its own (a `CLOCK_MONOTONIC` deadline) unless renewed, and revokes it;
//! and the operator's word that a large clock step is right.
//!
//! The keeper writes the fleet's mark at or above the limit before granting it, so a node that
//! takes the pair later issues above every ID this database can issue under the grant; and it
//! passes the fleet's mark it found when it claimed the pair as the grant's floor, so this
//! database issues above every ID a previous holder (a `snowflake serve` node) may have issued.

use crate::clock;
use crate::errors::{OrRaise, SqlError};
use crate::issue;
use crate::status;
use pgrx::prelude::*;
use snowflake_core::Field;
use std::sync::atomic::Ordering;

/// The longest grant, in milliseconds: a keeper renews well within its lease's TTL.
const MAX_VALID_FOR_MS: i32 = 600_000;

fn superuser(function: &str) -> Result<(), SqlError> {
    // SAFETY: reads the session's user; no side effects.
    if unsafe { pg_sys::superuser() } {
        Ok(())
    } else {
        Err(SqlError::new(
            pg_sys::errcodes::PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
            format!("permission denied for function {function}: only a superuser may call it"),
        ))
    }
}

fn grant(
    datacenter_id: i32,
    worker_id: i32,
    limit_ms: i64,
    valid_for_ms: i32,
    lease: Option<&str>,
    floor_ms: Option<i64>,
) -> Result<(), SqlError> {
    superuser("snowflake_keeper_grant")?;
    let shared = issue::preloaded()?;
    let config = issue::config()?;
    if !config.keeper {
        return Err(SqlError::not_now(
            "snowflake.keeper is off: this database's pair is static and takes no grants",
        )
        .hint("set snowflake.keeper = on in postgresql.conf and restart the server to run it under snowflake pg-keeper"));
    }
    if (i64::from(datacenter_id), i64::from(worker_id))
        != (config.datacenter_id as i64, config.worker_id as i64)
    {
        return Err(SqlError::bad_input(format!(
            "the keeper holds datacenter {datacenter_id} worker {worker_id}, but this database issues as datacenter {} worker {} (snowflake.datacenter_id, snowflake.worker_id)",
            config.datacenter_id, config.worker_id
        )));
    }
    if !(1..=MAX_VALID_FOR_MS).contains(&valid_for_ms) {
        return Err(SqlError::bad_input(format!(
            "invalid valid_for_ms: expected 1..={MAX_VALID_FOR_MS}, found {valid_for_ms}"
        )));
    }
    let limit_ms = config
        .layout
        .parse(Field::Timestamp, &limit_ms.to_string())
        .map_err(crate::errors::core_input)?;
    if lease.is_some_and(|l| l.len() > 128) {
        return Err(SqlError::bad_input(
            "invalid lease: expected at most 128 bytes",
        ));
    }
    let floor_ms = match floor_ms {
        None => None,
        Some(floor) => Some(
            config
                .layout
                .parse(Field::Timestamp, &floor.to_string())
                .map_err(|e| SqlError::bad_input(format!("invalid floor_ms: {e}")))?,
        ),
    };
    let deadline = clock::mono_ns() + valid_for_ms as u64 * 1_000_000;
    let floored = shared.locked(|shared, locked| {
        if let Some(floor) = floor_ms {
            // Raised before the grant can let anything be issued (checked against the layout
            // above, so it does not fail).
            shared.generator.resume_after(floor)?;
            locked.keeper_floor_ms = locked.keeper_floor_ms.max(floor);
        }
        locked.grant_limit_ms = limit_ms;
        locked.revoked = false;
        locked.lease.set(lease.unwrap_or(""));
        shared.grant_deadline_ns.store(deadline, Ordering::Release);
        Ok::<(), snowflake_core::Error>(())
    });
    floored.map_err(|e| SqlError::bad_input(format!("invalid floor_ms: {e}")))?;
    // Before the first issuing call since the server started, nothing is reserved: that call
    // applies the mark found at start as the floor, and a reservation made now would become
    // a floor too (refusing IDs for up to reserve_ms).
    // SAFETY: a plain read of shared state.
    if !unsafe { pg_sys::RecoveryInProgress() } && shared.started.load(Ordering::Acquire) {
        issue::reserve(shared, config, true);
    }
    Ok(())
}

/// Grants this database an issue limit: IDs dated up to `limit_ms` (Unix ms) for the next
/// `valid_for_ms` milliseconds, as the keeper holding (`datacenter_id`, `worker_id`) under
/// `lease`; with `floor_ms`, only IDs dated after it from now on (the fleet's mark: a previous
/// holder of the pair may have issued up to it). Returns the status, with the mark and last
/// issued time the keeper writes to the fleet.
#[pg_extern(volatile, parallel_unsafe)]
fn snowflake_keeper_grant(
    datacenter_id: i32,
    worker_id: i32,
    limit_ms: i64,
    valid_for_ms: i32,
    lease: default!(Option<&str>, "NULL"),
    floor_ms: default!(Option<i64>, "NULL"),
) -> pgrx::composite_type!('static, "snowflake_status") {
    grant(
        datacenter_id,
        worker_id,
        limit_ms,
        valid_for_ms,
        lease,
        floor_ms,
    )
    .or_raise();
    status::row()
}

/// Ends the keeper's grant at once (the keeper is stopping or lost its lease): nothing is
/// issued until the next grant.
#[pg_extern(volatile, parallel_unsafe)]
fn snowflake_keeper_revoke() -> pgrx::composite_type!('static, "snowflake_status") {
    superuser("snowflake_keeper_revoke").or_raise();
    let shared = issue::preloaded().or_raise();
    shared.locked(|shared, locked| {
        shared.grant_deadline_ns.store(0, Ordering::Release);
        locked.grant_limit_ms = 0;
        locked.revoked = true;
        locked.lease.clear();
        shared.ceiling_ms.store(0, Ordering::Relaxed);
        shared.generator.set_issue_limit_ms(0);
    });
    status::row()
}

/// An operator's word that the wall clock is right after a forward step that is not trusted
/// (one of more than a day is never trusted automatically).
#[pg_extern(volatile, parallel_unsafe)]
fn snowflake_trust_clock() -> pgrx::composite_type!('static, "snowflake_status") {
    superuser("snowflake_trust_clock").or_raise();
    let shared = issue::preloaded().or_raise();
    shared.locked(|_, locked| {
        locked.trust.accept(clock::wall_ms(), clock::mono_ms());
        locked.step = None;
    });
    status::row()
}

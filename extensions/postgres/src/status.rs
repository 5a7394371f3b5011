//! `snowflake_status()`: one row saying who this database issues as, how far its durable mark
//! reaches, what limits issuing now (the mark, trusted time, the keeper's grant), and the last
//! error. It is also what `snowflake pg-keeper` reads: the last issued time and the mark.

use crate::clock;
use crate::errors::OrRaisePgrx;
use crate::functions::timestamptz;
use crate::settings;
use crate::shared;
use pgrx::prelude::*;
use std::sync::atomic::Ordering;

/// The status row.
pub fn row() -> pgrx::composite_type!('static, "snowflake_status") {
    let mut row = crate::composite::row("snowflake_status");
    let config = settings::config();
    let mut last_error = config.as_ref().err().map(|e| e.to_string());
    if let Ok(c) = config {
        row.set_by_name("datacenter_id", c.datacenter_id as i32)
            .or_raise_pgrx();
        row.set_by_name("worker_id", c.worker_id as i32)
            .or_raise_pgrx();
        row.set_by_name("keeper", c.keeper).or_raise_pgrx();
    }
    if let Ok(layout) = settings::layout() {
        row.set_by_name("layout", layout.name()).or_raise_pgrx();
        row.set_by_name("epoch_ms", layout.epoch_ms() as i64)
            .or_raise_pgrx();
    }
    // SAFETY: a plain read of shared state.
    let in_recovery = unsafe { pg_sys::RecoveryInProgress() };
    row.set_by_name("in_recovery", in_recovery).or_raise_pgrx();
    let shared = shared::get();
    row.set_by_name("preloaded", shared.is_some())
        .or_raise_pgrx();
    if let Some(shared) = shared {
        let (
            stored,
            load_error,
            write_error,
            step,
            grant_limit,
            lease,
            floor,
            trusted,
            reservations,
        ) = shared.locked(|_, l| {
            (
                l.stored,
                l.load_error.get(),
                l.last_error.get(),
                l.step,
                l.grant_limit_ms,
                l.lease.get(),
                l.keeper_floor_ms,
                l.trust.trusted_ms(),
                l.reservations,
            )
        });
        let mark = shared.mark_ms.load(Ordering::Acquire);
        if mark > 0 {
            row.set_by_name("mark_ms", mark as i64).or_raise_pgrx();
            row.set_by_name("mark_time", timestamptz(mark))
                .or_raise_pgrx();
        }
        row.set_by_name("stored_identity", stored.map(|s| s.to_string()))
            .or_raise_pgrx();
        if shared.started.load(Ordering::Acquire)
            && let Some(last) = shared.generator.last_issued_ms()
        {
            row.set_by_name("last_issued_ms", last as i64)
                .or_raise_pgrx();
        }
        row.set_by_name("issue_limit_ms", shared.generator.issue_limit_ms() as i64)
            .or_raise_pgrx();
        let deadline = shared.grant_deadline_ns.load(Ordering::Acquire);
        if deadline > 0 {
            row.set_by_name("grant_limit_ms", grant_limit as i64)
                .or_raise_pgrx();
            let left = deadline as i64 - clock::mono_ns() as i64;
            row.set_by_name("grant_expires_in_ms", left / 1_000_000)
                .or_raise_pgrx();
        }
        row.set_by_name("keeper_lease", lease).or_raise_pgrx();
        if floor > 0 {
            row.set_by_name("keeper_floor_ms", floor as i64)
                .or_raise_pgrx();
        }
        row.set_by_name("trusted_ms", trusted as i64)
            .or_raise_pgrx();
        row.set_by_name("clock_step", step.map(|s| s.describe()))
            .or_raise_pgrx();
        row.set_by_name("reservations", reservations as i64)
            .or_raise_pgrx();
        last_error = last_error.or(load_error).or(write_error);
    }
    row.set_by_name("last_error", last_error).or_raise_pgrx();
    row
}

/// Who this database issues as, its durable mark, its limits and its last error.
#[pg_extern(volatile, parallel_restricted)]
fn snowflake_status() -> pgrx::composite_type!('static, "snowflake_status") {
    row()
}

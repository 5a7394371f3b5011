//! The pure SQL functions: decode, encode, an ID's time, and the smallest and largest ID of a
//! moment (for range scans over a Snowflake primary key). They read only the layout settings,
//! so they are `STABLE`, and work without the library preloaded.

use crate::errors::{OrRaise, OrRaisePgrx, SqlError, core_input};
use crate::settings;
use pgrx::prelude::*;
use snowflake_core::{Field, Layout, SnowflakeId};

/// Unix ms of PostgreSQL's epoch, 2000-01-01T00:00:00Z.
const PG_EPOCH_UNIX_MS: i64 = 946_684_800_000;

fn layout() -> Layout {
    settings::layout()
        .map_err(|e| SqlError::config(e.to_string()))
        .or_raise()
}

/// A timestamptz for Unix ms.
pub fn timestamptz(unix_ms: u64) -> TimestampWithTimeZone {
    let micros = (unix_ms as i64 - PG_EPOCH_UNIX_MS) * 1000;
    TimestampWithTimeZone::try_from(micros)
        .map_err(|_| {
            SqlError::bad_input(format!(
                "{unix_ms} (unix ms) is outside timestamptz's range"
            ))
        })
        .or_raise()
}

/// Unix ms (rounded down) of a timestamptz; infinity is refused.
fn unix_ms(t: TimestampWithTimeZone) -> i64 {
    if !t.is_finite() {
        SqlError::bad_input("invalid timestamp: expected a finite timestamptz, found infinity")
            .raise();
    }
    let micros: i64 = pg_sys::TimestampTz::from(t);
    micros.div_euclid(1000) + PG_EPOCH_UNIX_MS
}

/// Checks a (possibly negative) SQL number for `field` under `layout`.
fn field(layout: &Layout, field: Field, value: i64) -> u64 {
    layout
        .parse(field, &value.to_string())
        .map_err(core_input)
        .or_raise()
}

fn id(value: i64) -> SnowflakeId {
    SnowflakeId::try_from(value).map_err(core_input).or_raise()
}

/// The fields of an ID under the configured layout.
#[pg_extern(stable, parallel_safe, strict)]
fn snowflake_decode(id: i64) -> pgrx::composite_type!('static, "snowflake_decoded") {
    let layout = layout();
    let parts = layout.decode(self::id(id)).map_err(core_input).or_raise();
    let mut row = crate::composite::row("snowflake_decoded");
    let int = |v: u64| i32::try_from(v).unwrap_or(i32::MAX);
    row.set_by_name("timestamp_ms", parts.timestamp_ms as i64)
        .or_raise_pgrx();
    row.set_by_name("time", timestamptz(parts.timestamp_ms))
        .or_raise_pgrx();
    row.set_by_name("datacenter_id", int(parts.datacenter_id))
        .or_raise_pgrx();
    row.set_by_name("worker_id", int(parts.worker_id))
        .or_raise_pgrx();
    row.set_by_name("sequence", int(parts.sequence))
        .or_raise_pgrx();
    row
}

/// The time of an ID.
#[pg_extern(stable, parallel_safe, strict)]
fn snowflake_time(id: i64) -> TimestampWithTimeZone {
    let parts = layout().decode(self::id(id)).map_err(core_input).or_raise();
    timestamptz(parts.timestamp_ms)
}

/// The ID of a timestamp (Unix ms), datacenter, worker and sequence; every value outside its
/// range is an error naming it.
#[pg_extern(stable, parallel_safe, strict)]
fn snowflake_encode(timestamp_ms: i64, datacenter_id: i32, worker_id: i32, sequence: i32) -> i64 {
    let layout = layout();
    let timestamp_ms = field(&layout, Field::Timestamp, timestamp_ms);
    let datacenter_id = field(&layout, Field::DatacenterId, datacenter_id.into());
    let worker_id = field(&layout, Field::WorkerId, worker_id.into());
    let sequence = field(&layout, Field::Sequence, sequence.into());
    layout
        .encode(timestamp_ms, datacenter_id, worker_id, sequence)
        .map_err(core_input)
        .or_raise()
        .as_i64()
}

/// The smallest and largest ID any node could issue in the millisecond of `t` (core's
/// `id_range`, as `GET /v1/range` and `snowflake range` compute it).
fn range_of(t: TimestampWithTimeZone) -> snowflake_core::IdRange {
    let layout = layout();
    let ms = field(&layout, Field::Timestamp, unix_ms(t));
    layout.id_range(ms, ms).map_err(core_input).or_raise()
}

/// The smallest ID any node could issue in the millisecond of `t`.
#[pg_extern(stable, parallel_safe, strict)]
fn snowflake_min_id(t: TimestampWithTimeZone) -> i64 {
    range_of(t).min_id.as_i64()
}

/// The largest ID any node could issue in the millisecond of `t`.
#[pg_extern(stable, parallel_safe, strict)]
fn snowflake_max_id(t: TimestampWithTimeZone) -> i64 {
    range_of(t).max_id.as_i64()
}

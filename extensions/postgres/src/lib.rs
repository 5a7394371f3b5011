//! Snowflake IDs in PostgreSQL: `id bigint PRIMARY KEY DEFAULT snowflake_nextval()`, with the
//! guarantees of the snowflake service (one generator per cluster, a durable mark carried in the
//! WAL, the service's clock policy, postmaster-only identity settings, and a keeper's grant in
//! fleet mode), plus the pure functions to decode, encode and range-scan IDs.
//!
//! Layout, encode, decode and validation are `snowflake-core`'s; the pure logic of settings,
//! mark and clock trust is `snowflake-pg-state`'s. See docs/postgres.md and DESIGN.md.

use pgrx::prelude::*;

mod clock;
mod composite;
mod errors;
mod functions;
mod issue;
mod keeper;
mod settings;
mod shared;
mod status;
mod wal;

::pgrx::pg_module_magic!(name, version);

pgrx::extension_sql!(
    r#"
CREATE TYPE snowflake_decoded AS (
    timestamp_ms bigint,
    time timestamptz,
    datacenter_id int,
    worker_id int,
    sequence int
);
CREATE TYPE snowflake_status AS (
    datacenter_id int,
    worker_id int,
    layout text,
    epoch_ms bigint,
    preloaded bool,
    in_recovery bool,
    keeper bool,
    mark_ms bigint,
    mark_time timestamptz,
    stored_identity text,
    last_issued_ms bigint,
    issue_limit_ms bigint,
    grant_limit_ms bigint,
    grant_expires_in_ms bigint,
    keeper_lease text,
    keeper_floor_ms bigint,
    trusted_ms bigint,
    clock_step text,
    reservations bigint,
    last_error text
);
"#,
    name = "types",
    bootstrap
);

pgrx::extension_sql!(
    r#"
REVOKE ALL ON FUNCTION snowflake_keeper_grant(int, int, bigint, int, text, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION snowflake_keeper_revoke() FROM PUBLIC;
REVOKE ALL ON FUNCTION snowflake_trust_clock() FROM PUBLIC;
"#,
    name = "privileges",
    finalize
);

/// Loads the library: defines the settings always; while preloading also registers the WAL
/// resource manager and the shared memory (so a standby and crash recovery replay the mark).
#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    settings::define();
    // SAFETY: a flag PostgreSQL sets while loading shared_preload_libraries.
    if unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        wal::register();
        shared::install();
        if let Err(e) = settings::config() {
            pgrx::warning!("snowflake: {e}; snowflake_nextval() refuses until it is fixed");
        }
    }
}

/// The next ID of this cluster: strictly increasing, never at or below the durable mark.
#[pg_extern(volatile, parallel_unsafe)]
fn snowflake_nextval() -> i64 {
    errors::OrRaise::or_raise(issue::next_id())
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;
    use snowflake_core::{Layout, SnowflakeId};

    #[pg_test]
    fn nextval_strictly_increases_under_the_pair_and_the_mark() {
        let ids: Vec<i64> = (0..10_000)
            .map(|_| {
                Spi::get_one::<i64>("SELECT snowflake_nextval()")
                    .unwrap()
                    .unwrap()
            })
            .collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
        let last = Layout::TWITTER
            .decode(SnowflakeId::try_from(ids[9_999]).unwrap())
            .unwrap();
        assert_eq!((last.datacenter_id, last.worker_id), (7, 13));
        let mark = Spi::get_one::<i64>("SELECT mark_ms FROM snowflake_status()")
            .unwrap()
            .unwrap();
        assert!(last.timestamp_ms as i64 <= mark);
    }

    #[pg_test(
        error = "parameter \"snowflake.worker_id\" cannot be changed without restarting the server"
    )]
    fn a_session_cannot_set_the_worker_id() {
        Spi::run("SET snowflake.worker_id = 5").unwrap();
    }

    #[pg_test]
    fn decode_matches_the_worked_example() {
        let row = Spi::get_three::<i64, i32, i32>(
            "SELECT timestamp_ms, datacenter_id, worker_id FROM snowflake_decode(1724551110457221119)",
        )
        .unwrap();
        assert_eq!(row, (Some(1_700_000_000_000), Some(7), Some(13)));
        let sequence =
            Spi::get_one::<i32>("SELECT (snowflake_decode(1724551110457221119)).sequence");
        assert_eq!(sequence, Ok(Some(4095)));
    }
}

/// Required by `cargo pgrx test`.
#[cfg(test)]
pub mod pg_test {
    /// One-off set-up (none).
    pub fn setup(_options: Vec<&str>) {}

    /// The test cluster preloads the library with a pair, as production does.
    #[must_use]
    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec![
            "shared_preload_libraries = 'snowflake'",
            "snowflake.datacenter_id = '7'",
            "snowflake.worker_id = '13'",
        ]
    }
}

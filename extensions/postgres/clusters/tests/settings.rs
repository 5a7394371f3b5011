//! The postmaster-only settings: a session cannot change the pair, unusable settings are SQL
//! errors naming the setting, and a restart under another pair is refused while a mark exists.

use crate::{PRELOADED, sqlstate, started};
use snowflake_pg_tests::Cluster;

#[test]
fn a_session_cannot_set_the_pair() {
    let pg = started(&[]);
    for setting in [
        "snowflake.worker_id = 5",
        "snowflake.datacenter_id = 5",
        "snowflake.layout = 'twitter'",
        "snowflake.epoch_ms = 0",
        "snowflake.reserve_ms = 100",
        "snowflake.keeper = off",
    ] {
        let e = pg.sql_error(&format!("SET {setting}"));
        assert_eq!(sqlstate(&e), "55P02", "SET {setting}: {e}");
        assert!(
            e.contains("cannot be changed without restarting the server"),
            "{e}"
        );
    }
    assert_eq!(pg.sql("SHOW snowflake.worker_id"), "13");
}

#[test]
fn unset_or_out_of_range_settings_are_sql_errors_naming_them() {
    let mut pg = Cluster::new(&[
        "shared_preload_libraries = 'snowflake'",
        "snowflake.datacenter_id = 7",
    ]);
    pg.start();
    pg.sql("CREATE EXTENSION snowflake");
    let e = pg.sql_error("SELECT snowflake_nextval()");
    assert_eq!(sqlstate(&e), "F0000");
    assert!(
        e.contains("snowflake.worker_id is not set: add `snowflake.worker_id = N` (N in 0..=31)"),
        "{e}"
    );
    assert!(
        pg.sql("SELECT last_error FROM snowflake_status()")
            .contains("snowflake.worker_id is not set")
    );
    pg.stop("fast");
    pg.configure(&["snowflake.worker_id = 32"]);
    pg.start();
    let e = pg.sql_error("SELECT snowflake_nextval()");
    assert!(
        e.contains("snowflake.worker_id: invalid worker id: expected 0..=31, found 32"),
        "{e}"
    );
    pg.stop("fast");
    pg.configure(&["snowflake.worker_id = 3", "snowflake.reserve_ms = 99999999"]);
    pg.start();
    let e = pg.sql_error("SELECT snowflake_nextval()");
    assert!(
        e.contains("invalid snowflake.reserve_ms: expected 100..=60000, found \"99999999\""),
        "{e}"
    );
    pg.stop("fast");
    pg.configure(&[
        "snowflake.reserve_ms = 3000",
        "snowflake.layout = 'sonyflake'",
    ]);
    pg.start();
    let e = pg.sql_error("SELECT snowflake_nextval()");
    assert!(e.contains("unknown layout \"sonyflake\""), "{e}");
    // The pure functions need a usable layout too, and say so.
    let e = pg.sql_error("SELECT snowflake_time(1)");
    assert_eq!(sqlstate(&e), "F0000");
}

#[test]
fn a_restart_under_another_pair_is_refused_while_the_mark_exists() {
    let mut pg = started(&[]);
    pg.sql("SELECT snowflake_nextval()");
    assert_eq!(
        pg.sql("SELECT stored_identity FROM snowflake_status()"),
        "datacenter 7 worker 13 (layout 41/5/5/12, epoch 1288834974657)"
    );
    pg.stop("fast");
    pg.configure(&["snowflake.worker_id = 14"]);
    pg.start();
    let e = pg.sql_error("SELECT snowflake_nextval()");
    assert_eq!(sqlstate(&e), "55000");
    assert!(
        e.contains("the settings say datacenter 7 worker 14 (layout 41/5/5/12, epoch 1288834974657), but the durable mark was reserved as datacenter 7 worker 13"),
        "{e}"
    );
    pg.stop("fast");
    pg.configure(&[PRELOADED[2]]);
    pg.start();
    pg.sql("SELECT snowflake_nextval()");
}

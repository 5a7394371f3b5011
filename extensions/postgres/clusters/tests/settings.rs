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
    assert!(
        e.contains("snowflake.layout: invalid layout: expected twitter, js-safe or custom:T,D,W,S"),
        "{e}"
    );
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
        "datacenter 7 worker 13 (layout twitter, epoch 1288834974657)"
    );
    pg.stop("fast");
    pg.configure(&["snowflake.worker_id = 14"]);
    pg.start();
    let e = pg.sql_error("SELECT snowflake_nextval()");
    assert_eq!(sqlstate(&e), "55000");
    assert!(
        e.contains("the settings say datacenter 7 worker 14 (layout twitter, epoch 1288834974657), but the durable mark was reserved as datacenter 7 worker 13"),
        "{e}"
    );
    pg.stop("fast");
    pg.configure(&[PRELOADED[2]]);
    pg.start();
    pg.sql("SELECT snowflake_nextval()");
}

#[test]
fn a_named_layout_shapes_every_id_and_the_pure_functions() {
    // js-safe: 41 | 2 | 4 | 6, every ID at most 2^53 - 1; 4 datacenters, 16 workers.
    let pg = started(&[
        "snowflake.layout = 'js-safe'",
        "snowflake.datacenter_id = 3",
        "snowflake.worker_id = 15",
    ]);
    assert_eq!(pg.sql("SELECT layout FROM snowflake_status()"), "js-safe");
    let max = pg.int("SELECT max(snowflake_nextval()) FROM generate_series(1, 20000)");
    assert!(max <= 9_007_199_254_740_991, "{max}");
    assert_eq!(
        pg.sql(&format!(
            "SELECT datacenter_id, worker_id FROM snowflake_decode({max})"
        )),
        "3|15"
    );
    let e = pg.sql_error("SELECT snowflake_decode(9007199254740992)");
    assert_eq!(sqlstate(&e), "22023");
    assert!(e.contains("9007199254740991"), "{e}");
    let e = pg.sql_error("SELECT snowflake_encode(1700000000000, 4, 0, 0)");
    assert!(
        e.contains("invalid datacenter id: expected 0..=3, found 4"),
        "{e}"
    );
    assert_eq!(
        pg.sql("SELECT snowflake_max_id('2023-11-14 22:13:20+00') - snowflake_min_id('2023-11-14 22:13:20+00')"),
        "4095"
    );
    // A worker id the layout cannot hold is a settings error, not a wrapped ID.
    let mut other = Cluster::new(&[
        PRELOADED[0],
        "snowflake.layout = 'js-safe'",
        "snowflake.datacenter_id = 3",
        "snowflake.worker_id = 16",
    ]);
    other.start();
    other.sql("CREATE EXTENSION snowflake");
    let e = other.sql_error("SELECT snowflake_nextval()");
    assert!(
        e.contains("snowflake.worker_id: invalid worker id: expected 0..=15, found 16"),
        "{e}"
    );
}

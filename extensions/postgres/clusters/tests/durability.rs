//! The durable mark: a crash with the clock set back, a mark that only the WAL still carries,
//! a promoted standby whose clock is behind, and a clock stepped forward.

use crate::{sqlstate, started};
use snowflake_pg_tests::{Cluster, set_offset};
use std::fs;
use std::thread::sleep;
use std::time::Duration;

const PATIENCE: Duration = Duration::from_secs(30);

/// Draws IDs for about `secs` seconds (several reservations), returning the largest.
fn draw_for(pg: &Cluster, secs: u64) -> i64 {
    let mut max = 0;
    for _ in 0..secs * 4 {
        max = max.max(pg.int("SELECT max(snowflake_nextval()) FROM generate_series(1, 500)"));
        sleep(Duration::from_millis(250));
    }
    max
}

#[test]
fn a_crash_and_a_clock_set_back_never_repeat_ids_even_with_the_mark_file_stale() {
    let mut pg = started(&["snowflake.reserve_ms = 1000"]);
    pg.sql("CREATE TABLE t (id bigint)");
    pg.sql("SELECT snowflake_nextval()");
    // From here on the reservations are after the last checkpoint: crash recovery replays them.
    pg.sql("CHECKPOINT");
    let stale = fs::read(pg.data.join("snowflake.mark")).unwrap();
    let mut max = draw_for(&pg, 3);
    // IDs drawn in a transaction that rolls back, and in a session that does not wait for its
    // commit to be flushed.
    max = max.max(
        pg.int("BEGIN; SELECT max(snowflake_nextval()) FROM generate_series(1, 1000); ROLLBACK"),
    );
    max = max.max(pg.int(
        "SET synchronous_commit = off;
         INSERT INTO t SELECT snowflake_nextval() FROM generate_series(1, 1000);
         SELECT max(id) FROM t",
    ));
    let mark = pg.int("SELECT mark_ms FROM snowflake_status()");
    assert!(pg.int(&format!("SELECT (snowflake_decode({max})).timestamp_ms")) <= mark);
    pg.stop("immediate");
    // The file goes back to the first reservation's mark: only the WAL knows the later ones.
    fs::write(pg.data.join("snowflake.mark"), &stale).unwrap();
    pg.fake_clock("-5");
    pg.start();
    assert_eq!(
        pg.int("SELECT mark_ms FROM snowflake_status()"),
        mark,
        "replay restores the mark"
    );
    let e = pg.sql_error("SELECT snowflake_nextval()");
    assert_eq!(sqlstate(&e), "55000");
    assert!(e.contains("clock moved backwards"), "{e}");
    let first: i64 = pg
        .sql_eventually("SELECT snowflake_nextval()", PATIENCE)
        .parse()
        .unwrap();
    assert!(first > max, "{first} <= {max}");
    assert!(pg.int(&format!("SELECT (snowflake_decode({first})).timestamp_ms")) > mark);
}

#[test]
fn a_promoted_standby_with_its_clock_behind_issues_above_the_primarys_mark() {
    let mut primary = started(&["snowflake.reserve_ms = 1000"]);
    primary.sql("SELECT snowflake_nextval()");
    let mut standby = Cluster::replica_of(&primary, &[]);
    standby.fake_clock("-5");
    standby.start();
    let e = standby.sql_error("SELECT snowflake_nextval()");
    assert_eq!(sqlstate(&e), "25006");
    assert!(
        e.contains("cannot issue snowflake ids during recovery"),
        "{e}"
    );
    assert_eq!(
        standby.sql("SELECT in_recovery FROM snowflake_status()"),
        "t"
    );
    let max = draw_for(&primary, 3);
    let mark = primary.int("SELECT mark_ms FROM snowflake_status()");
    // The standby replays the reservations: its mark follows the primary's.
    standby.wait_for(
        "SELECT mark_ms FROM snowflake_status()",
        &mark.to_string(),
        PATIENCE,
    );
    primary.stop("immediate");
    standby.promote();
    standby.wait_for("SELECT pg_is_in_recovery()", "f", PATIENCE);
    let first: i64 = standby
        .sql_eventually("SELECT snowflake_nextval()", PATIENCE)
        .parse()
        .unwrap();
    assert!(first > max, "{first} <= {max}");
    assert!(standby.int(&format!("SELECT (snowflake_decode({first})).timestamp_ms")) > mark);
    assert_eq!(
        standby.sql("SELECT stored_identity FROM snowflake_status()"),
        "datacenter 7 worker 13 (layout twitter, epoch 1288834974657)"
    );
}

#[test]
fn a_forward_step_is_refused_until_it_holds_and_leaves_no_mark_in_the_future() {
    let mut pg = Cluster::new(&[
        crate::PRELOADED[0],
        crate::PRELOADED[1],
        crate::PRELOADED[2],
        "snowflake.clock_step_trust_secs = 3",
    ]);
    let offset = pg.fake_clock("+0");
    pg.start();
    pg.sql("CREATE EXTENSION snowflake");
    pg.sql("SELECT snowflake_nextval()");
    let real_now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    };
    // Twenty years ahead for a moment: refused, and nothing reserved there.
    set_offset(&offset, "+631152000");
    let e = pg.sql_error("SELECT snowflake_nextval()");
    assert_eq!(sqlstate(&e), "55000");
    assert!(e.contains("the clock stepped forward by"), "{e}");
    assert!(e.contains("never trusted automatically"), "{e}");
    assert!(
        pg.sql("SELECT clock_step FROM snowflake_status()")
            .contains("stepped forward")
    );
    assert!(pg.int("SELECT mark_ms FROM snowflake_status()") < real_now() + 10_000);
    // Back to the real time: served at once.
    set_offset(&offset, "+0");
    let id = pg.int("SELECT snowflake_nextval()");
    assert!(pg.int(&format!("SELECT (snowflake_decode({id})).timestamp_ms")) < real_now() + 1000);
    // A step of a minute is trusted once it has held for clock_step_trust_secs.
    set_offset(&offset, "+60");
    let e = pg.sql_error("SELECT snowflake_nextval()");
    assert!(e.contains("it is trusted once it has held for 3 s"), "{e}");
    let id: i64 = pg
        .sql_eventually("SELECT snowflake_nextval()", PATIENCE)
        .parse()
        .unwrap();
    assert!(pg.int(&format!("SELECT (snowflake_decode({id})).timestamp_ms")) > real_now() + 50_000);
}

#[test]
fn a_clean_restart_serves_at_once_and_above_every_id_before_it() {
    let mut pg = started(&["snowflake.reserve_ms = 10000"]);
    let before = pg.int("SELECT max(snowflake_nextval()) FROM generate_series(1, 1000)");
    let mark = pg.int("SELECT mark_ms FROM snowflake_status()");
    pg.stop("fast");
    pg.start();
    // The stop recorded the last issued time instead of the reservation ten seconds ahead.
    assert!(pg.int("SELECT mark_ms FROM snowflake_status()") < mark);
    let after = pg.int("SELECT snowflake_nextval()");
    assert!(after > before, "{after} <= {before}");
}

#[test]
fn a_crash_after_a_checkpoint_keeps_the_mark_in_the_file() {
    // Reservations before a checkpoint are never replayed again: only the file keeps them.
    // SIGKILL, so that no exit callback records a stop point either.
    let mut pg = started(&["snowflake.reserve_ms = 1000"]);
    let max = draw_for(&pg, 2);
    let mark = pg.int("SELECT mark_ms FROM snowflake_status()");
    pg.sql("CHECKPOINT");
    pg.kill9();
    pg.fake_clock("-5");
    pg.start();
    assert_eq!(pg.int("SELECT mark_ms FROM snowflake_status()"), mark);
    let first: i64 = pg
        .sql_eventually("SELECT snowflake_nextval()", PATIENCE)
        .parse()
        .unwrap();
    assert!(first > max, "{first} <= {max}");
}

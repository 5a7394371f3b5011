//! The keeper's side of fleet mode, driven by hand as `snowflake pg-keeper` will drive it: no ID
//! without a live grant, none dated past it, the grant lapsing on its own, revoked at once, and
//! only a superuser may grant.

use crate::{sqlstate, started};
use std::thread::sleep;
use std::time::Duration;

const NOW_MS: &str = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

#[test]
fn without_a_live_grant_nothing_is_issued() {
    let pg = started(&["snowflake.keeper = on"]);
    let e = pg.sql_error("SELECT snowflake_nextval()");
    assert_eq!(sqlstate(&e), "55000");
    assert!(
        e.contains("the pair (datacenter 7 worker 13) is not held: snowflake.keeper is on and no keeper has granted an issue limit"),
        "{e}"
    );
    // A keeper of another pair is refused.
    let e = pg.sql_error(&format!(
        "SELECT snowflake_keeper_grant(7, 14, {NOW_MS} + 10000, 2000)"
    ));
    assert_eq!(sqlstate(&e), "22023");
    assert!(e.contains("the keeper holds datacenter 7 worker 14, but this database issues as datacenter 7 worker 13"), "{e}");
    let e = pg.sql_error(&format!(
        "SELECT snowflake_keeper_grant(7, 13, {NOW_MS} + 10000, 0)"
    ));
    assert!(
        e.contains("invalid valid_for_ms: expected 1..=600000, found 0"),
        "{e}"
    );
    // A live grant: IDs flow, never dated past it, and the mark stays within it.
    let limit = pg.int(&format!(
        "SELECT grant_limit_ms FROM snowflake_keeper_grant(7, 13, {NOW_MS} + 10000, 1500, 'lease 694d7a1b')"
    ));
    let id = pg.int("SELECT max(snowflake_nextval()) FROM generate_series(1, 1000)");
    assert!(pg.int(&format!("SELECT (snowflake_decode({id})).timestamp_ms")) <= limit);
    assert_eq!(
        pg.sql("SELECT keeper, keeper_lease, mark_ms <= grant_limit_ms, grant_expires_in_ms BETWEEN 0 AND 1500 FROM snowflake_status()"),
        "t|lease 694d7a1b|t|t"
    );
    // Not renewed: it lapses on its own.
    sleep(Duration::from_millis(1700));
    let e = pg.sql_error("SELECT snowflake_nextval()");
    assert!(e.contains("the keeper's grant lapsed"), "{e}");
    // A grant whose limit the clock has passed issues nothing.
    pg.sql(&format!(
        "SELECT snowflake_keeper_grant(7, 13, {NOW_MS} - 1000, 5000)"
    ));
    let e = pg.sql_error("SELECT snowflake_nextval()");
    assert!(e.contains("past the keeper's grant"), "{e}");
    // Revoked: at once.
    pg.sql(&format!(
        "SELECT snowflake_keeper_grant(7, 13, {NOW_MS} + 10000, 5000)"
    ));
    pg.sql("SELECT snowflake_nextval()");
    pg.sql("SELECT snowflake_keeper_revoke()");
    let e = pg.sql_error("SELECT snowflake_nextval()");
    assert!(
        e.contains("is not held: snowflake.keeper is on and the keeper revoked its grant"),
        "{e}"
    );
}

#[test]
fn a_grant_before_the_first_call_lets_it_issue_at_once() {
    let pg = started(&["snowflake.keeper = on"]);
    // The keeper grants before any backend asked for an ID since the server started.
    pg.sql(&format!(
        "SELECT snowflake_keeper_grant(7, 13, {NOW_MS} + 10000, 5000)"
    ));
    // A reservation made for the grant is not a floor: it covers nothing issued before.
    pg.sql("SELECT snowflake_nextval()");
}

#[test]
fn a_grants_floor_raises_the_generator_above_the_fleets_mark() {
    let pg = started(&["snowflake.keeper = on"]);
    let e = pg.sql_error(&format!(
        "SELECT snowflake_keeper_grant(7, 13, {NOW_MS} + 10000, 5000, 'l', 5)"
    ));
    assert_eq!(sqlstate(&e), "22023");
    assert!(e.contains("invalid floor_ms"), "{e}");
    // A previous holder of the pair may have issued up to 2 s ahead: nothing at or below it.
    let floor = pg.int(&format!(
        "SELECT keeper_floor_ms FROM snowflake_keeper_grant(7, 13, {NOW_MS} + 10000, 5000, 'l', {NOW_MS} + 2000)"
    ));
    let e = pg.sql_error("SELECT snowflake_nextval()");
    assert_eq!(sqlstate(&e), "55000");
    assert!(e.contains("clock moved backwards"), "{e}");
    assert!(
        e.contains(&format!(
            "the fleet's mark {floor} (passed on by snowflake pg-keeper)"
        )),
        "{e}"
    );
    // A lower floor later changes nothing.
    pg.sql(&format!(
        "SELECT snowflake_keeper_grant(7, 13, {NOW_MS} + 10000, 5000, 'l', {NOW_MS} - 60000)"
    ));
    assert_eq!(
        pg.int("SELECT keeper_floor_ms FROM snowflake_status()"),
        floor
    );
    pg.sql(&format!(
        "SELECT snowflake_keeper_grant(7, 13, {NOW_MS} + 10000, 5000, 'l')"
    ));
    let id = pg.int("SELECT snowflake_nextval() FROM pg_sleep(2.2)");
    assert!(pg.int(&format!("SELECT (snowflake_decode({id})).timestamp_ms")) > floor);
}

#[test]
fn only_a_superuser_grants_and_a_static_pair_takes_no_grant() {
    let pg = started(&[]);
    pg.sql("CREATE ROLE app LOGIN");
    for call in [
        format!("snowflake_keeper_grant(7, 13, {NOW_MS} + 10000, 1000)"),
        "snowflake_keeper_revoke()".to_owned(),
        "snowflake_trust_clock()".to_owned(),
    ] {
        let e = pg.sql_error(&format!("SET ROLE app; SELECT {call}"));
        assert_eq!(sqlstate(&e), "42501", "{call}: {e}");
    }
    // The app role may issue IDs and read the status.
    pg.sql("SET ROLE app; SELECT snowflake_nextval(), (snowflake_status()).mark_ms");
    let e = pg.sql_error(&format!(
        "SELECT snowflake_keeper_grant(7, 13, {NOW_MS} + 10000, 1000)"
    ));
    assert_eq!(sqlstate(&e), "55000");
    assert!(e.contains("snowflake.keeper is off"), "{e}");
}

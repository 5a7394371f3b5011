//! Fleet mode against a real etcd: `snowflake pg-keeper` (the main workspace's binary) leasing
//! the database's pair beside `snowflake serve` nodes of the same fleet. No node ever leases
//! the database's pair; a frozen etcd or a killed keeper stops `snowflake_nextval()` before the
//! lease could expire; a node that takes the pair after the database issues above its mark;
//! and a keeper raises the database above the mark of the node that held the pair before.

use crate::started;
use snowflake_pg_tests::fleet::{Etcd, Snowflake, ids_from};
use snowflake_pg_tests::{Cluster, free_port};
use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const EPOCH_MS: i64 = 1_288_834_974_657;

fn timestamp_ms(id: i64) -> i64 {
    (id >> 22) + EPOCH_MS
}

fn worker_of(id: i64) -> i64 {
    (id >> 12) & 31
}

fn now_ms() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// `n` IDs from the database.
fn draw(pg: &Cluster, n: u32) -> Vec<i64> {
    pg.sql(&format!(
        "SELECT snowflake_nextval() FROM generate_series(1, {n})"
    ))
    .lines()
    .map(|l| l.parse().unwrap())
    .collect()
}

/// A database in fleet mode as datacenter 7, worker `worker_id`.
fn fleet_database(worker_id: u64) -> Cluster {
    started(&[
        "snowflake.keeper = on",
        &format!("snowflake.worker_id = {worker_id}"),
    ])
}

/// `snowflake pg-keeper` for `pg`, with a `ttl_secs` lease and `extra` flags; granting.
fn keeper(pg: &Cluster, etcd: &Etcd, ttl_secs: u64, extra: &[&str]) -> Snowflake {
    let conninfo = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres",
        pg.port
    );
    let ttl = ttl_secs.to_string();
    let endpoint = etcd.endpoint();
    let mut args = vec![
        "pg-keeper",
        "--postgres",
        &conninfo,
        "--etcd-endpoints",
        &endpoint,
        "--lease-ttl-secs",
        &ttl,
    ];
    args.extend_from_slice(extra);
    let mut keeper = Snowflake::start(&args);
    keeper.wait_for_log("granting", Duration::from_secs(30));
    keeper
}

/// `snowflake serve` of datacenter 7 in `etcd`'s fleet, gRPC only, with `extra` flags; its
/// gRPC address and state directory.
fn node(etcd: &Etcd, extra: &[&str]) -> (Snowflake, String, tempfile::TempDir) {
    let state = tempfile::tempdir().unwrap();
    let grpc = format!("127.0.0.1:{}", free_port());
    let endpoint = etcd.endpoint();
    let mut args = vec![
        "serve",
        "--etcd-endpoints",
        &endpoint,
        "--datacenter-id",
        "7",
        "--http-addr",
        "off",
        "--thrift-addr",
        "off",
        "--grpc-addr",
        &grpc,
        "--state-dir",
        state.path().to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    (Snowflake::start(&args), grpc, state)
}

/// Calls `snowflake_nextval()` until it fails (at most `limit`): when the failing call had
/// returned (no earlier than the refusal), and its error.
fn first_error(pg: &Cluster, limit: Duration) -> (Instant, String) {
    let start = Instant::now();
    loop {
        let result = pg.try_sql("SELECT snowflake_nextval()");
        let returned = Instant::now();
        if let Err(error) = result {
            return (returned, error);
        }
        assert!(
            start.elapsed() < limit,
            "snowflake_nextval() still issues after {limit:?}"
        );
        sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_node_of_the_databases_datacenter_never_leases_its_pair() {
    let etcd = Etcd::start();
    let pg = fleet_database(0);
    let keeper = keeper(&pg, &etcd, 4, &[]);
    // The claim says who holds the pair: the keeper, for this database.
    let claim = etcd
        .get("/snowflake/workers/7/0")
        .expect("the keeper's claim");
    assert!(
        claim.contains(&format!("\"pid\":{}", keeper.pid())),
        "{claim}"
    );
    assert!(
        claim.contains(&format!(
            "postgresql://postgres@127.0.0.1:{}/postgres",
            pg.port
        )),
        "{claim}"
    );
    // A node of datacenter 7 without a worker id takes the lowest free one: not 0.
    let (mut free, grpc, _state) = node(&etcd, &["--lease-ttl-secs", "4"]);
    free.wait_for_log("ready: issuing ids", Duration::from_secs(30));
    let node_claim = etcd
        .get("/snowflake/workers/7/1")
        .expect("the node's claim");
    assert!(
        node_claim.contains(&format!("\"pid\":{}", free.pid())),
        "{node_claim}"
    );
    let node_ids = ids_from(&grpc, 2000);
    assert!(node_ids.iter().all(|id| worker_of(*id) == 1));
    let db_ids = draw(&pg, 2000);
    assert!(db_ids.iter().all(|id| worker_of(*id) == 0));
    // A node pinned to the database's pair is refused, naming the keeper's claim.
    let (mut pinned, _grpc, _state) = node(
        &etcd,
        &[
            "--worker-id",
            "0",
            "--lease-ttl-secs",
            "4",
            "--claim-timeout-secs",
            "2",
        ],
    );
    let status = pinned.wait_exit(Duration::from_secs(30));
    assert!(!status.success(), "{}", pinned.log());
    let log = pinned.log();
    assert!(
        log.contains("worker 0 of datacenter 7 is held by another node"),
        "{log}"
    );
    assert!(log.contains("postgresql://postgres@127.0.0.1"), "{log}");
    // The keeper still holds the pair, and the database still issues.
    let claim = etcd
        .get("/snowflake/workers/7/0")
        .expect("the keeper's claim");
    assert!(
        claim.contains(&format!("\"pid\":{}", keeper.pid())),
        "{claim}"
    );
    let more = draw(&pg, 10);
    assert!(more[0] > *db_ids.last().unwrap());
}

#[test]
fn a_frozen_etcd_stops_the_database_before_the_lease_could_expire() {
    const TTL: u64 = 5;
    let etcd = Etcd::start();
    let pg = fleet_database(13);
    // The fleet's mark reaches 30 s ahead: only the fence can stop the database here.
    let _keeper = keeper(&pg, &etcd, TTL, &["--reserve-ms", "30000"]);
    let before = draw(&pg, 100);
    let lease = pg.sql("SELECT keeper_lease FROM snowflake_status()");
    let earliest_expiry = etcd.just_renewed(&lease) + Duration::from_secs(TTL);
    etcd.freeze();
    let frozen = Instant::now();
    let (stopped, error) = first_error(&pg, Duration::from_secs(2 * TTL));
    assert!(
        stopped < earliest_expiry,
        "issued until {:?} after the freeze, past the lease's earliest expiry ({:?} after it)",
        stopped - frozen,
        earliest_expiry.saturating_duration_since(frozen)
    );
    assert!(
        error.contains("the pair (datacenter 7 worker 13) is not held"),
        "{error}"
    );
    eprintln!(
        "frozen etcd: the database stopped {:?} after the freeze, {:?} before the lease could expire",
        stopped - frozen,
        earliest_expiry - stopped
    );
    // Nothing is issued while etcd stays frozen, past the lease's expiry.
    while Instant::now() < earliest_expiry + Duration::from_secs(1) {
        assert!(pg.try_sql("SELECT snowflake_nextval()").is_err());
        sleep(Duration::from_millis(100));
    }
    etcd.thaw();
    let after: i64 = pg
        .sql_eventually("SELECT snowflake_nextval()", Duration::from_secs(30))
        .parse()
        .unwrap();
    assert!(after > *before.last().unwrap());
}

#[test]
fn a_killed_keeper_stops_the_database_before_its_lease_could_expire() {
    const TTL: u64 = 5;
    let etcd = Etcd::start();
    let pg = fleet_database(13);
    let mut first = keeper(&pg, &etcd, TTL, &[]);
    let before = draw(&pg, 100);
    let lease = pg.sql("SELECT keeper_lease FROM snowflake_status()");
    let earliest_expiry = etcd.just_renewed(&lease) + Duration::from_secs(TTL);
    first.stop("KILL", Duration::from_secs(10));
    let killed = Instant::now();
    let (stopped, error) = first_error(&pg, Duration::from_secs(2 * TTL));
    assert!(
        stopped < earliest_expiry,
        "issued until {:?} after the kill, past the lease's earliest expiry",
        stopped - killed
    );
    assert!(error.contains("the keeper's grant lapsed"), "{error}");
    // The lease was still there when the database stopped.
    assert!(etcd.get("/snowflake/workers/7/13").is_some());
    eprintln!(
        "killed keeper: the database stopped {:?} after the kill, {:?} before the lease could expire",
        stopped - killed,
        earliest_expiry - stopped
    );
    // A new keeper takes the pair over once the lease expired, and the database issues above
    // everything before.
    let _second = keeper(&pg, &etcd, TTL, &[]);
    let after = draw(&pg, 100);
    assert!(after[0] > *before.last().unwrap());
}

#[test]
fn after_the_database_stops_a_node_that_takes_its_pair_issues_above_its_mark() {
    let etcd = Etcd::start();
    let mut pg = fleet_database(13);
    let mut keeper = keeper(&pg, &etcd, 4, &[]);
    pg.sql("CREATE TABLE t (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), n int)");
    pg.sql("INSERT INTO t (n) SELECT g FROM generate_series(1, 20000) g");
    let db_max = pg.int("SELECT max(id) FROM t");
    // The database crashes; its keeper is stopped (it cannot revoke: the mark stays).
    pg.stop("immediate");
    let status = keeper.stop("TERM", Duration::from_secs(30));
    assert!(status.success(), "{}", keeper.log());
    assert!(
        keeper.log().contains("cannot revoke the database's grant"),
        "{}",
        keeper.log()
    );
    let mark = i64::try_from(etcd.mark_ms(7, 13)).unwrap();
    assert!(
        mark >= timestamp_ms(db_max),
        "{mark} < {}",
        timestamp_ms(db_max)
    );
    // A node takes the pair: everything it issues is above the database's IDs and the mark.
    let (mut taker, grpc, _state) = node(&etcd, &["--worker-id", "13", "--lease-ttl-secs", "4"]);
    taker.wait_for_log("ready: issuing ids", Duration::from_secs(30));
    let ids = ids_from(&grpc, 5000);
    assert!(
        ids.iter()
            .all(|id| *id > db_max && timestamp_ms(*id) > mark)
    );
}

#[test]
fn a_keeper_raises_the_database_above_the_previous_holders_mark() {
    let etcd = Etcd::start();
    // A node held the pair and crashed, its reservation up to 6 s ahead.
    let (mut holder, grpc, _state) = node(
        &etcd,
        &[
            "--worker-id",
            "13",
            "--lease-ttl-secs",
            "2",
            "--reserve-ms",
            "6000",
        ],
    );
    holder.wait_for_log("ready: issuing ids", Duration::from_secs(30));
    let node_ids = ids_from(&grpc, 2000);
    holder.stop("KILL", Duration::from_secs(10));
    let mark = i64::try_from(etcd.mark_ms(7, 13)).unwrap();
    assert!(mark > timestamp_ms(*node_ids.last().unwrap()));
    // The database's keeper claims the pair after the node's lease expired: the fleet's mark
    // is the database's floor.
    let pg = fleet_database(13);
    let _keeper = keeper(&pg, &etcd, 2, &[]);
    assert_eq!(
        pg.int("SELECT keeper_floor_ms FROM snowflake_status()"),
        mark
    );
    if now_ms() + 300 < mark {
        let error = pg.sql_error("SELECT snowflake_nextval()");
        assert!(error.contains("clock moved backwards"), "{error}");
        assert!(
            error.contains(&format!("the fleet's mark {mark}")),
            "{error}"
        );
    }
    let first: i64 = pg
        .sql_eventually("SELECT snowflake_nextval()", Duration::from_secs(20))
        .parse()
        .unwrap();
    assert!(timestamp_ms(first) > mark);
    assert!(first > *node_ids.last().unwrap());
}

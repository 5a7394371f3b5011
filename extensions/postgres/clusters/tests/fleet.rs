//! Fleet mode against a real etcd: `snowflake pg-keeper` (the main workspace's binary) leasing
//! the database's pair beside `snowflake serve` nodes of the same fleet. No node ever leases
//! the database's pair; a frozen etcd or a killed keeper stops `snowflake_nextval()` before the
//! lease could expire; a node that takes the pair after the database issues above its mark;
//! and a keeper raises the database above the mark of the node that held the pair before.

use crate::started;
use snowflake_pg_tests::fleet::{Etcd, Snowflake, ids_from};
use snowflake_pg_tests::{Cluster, free_port};
use std::os::unix::net::UnixDatagram;
use std::path::Path;
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
    keeper_with(pg, etcd, ttl_secs, extra, &[])
}

/// [`keeper`] with `env` added to its environment.
pub(crate) fn keeper_with(
    pg: &Cluster,
    etcd: &Etcd,
    ttl_secs: u64,
    extra: &[&str],
    env: &[(&str, &Path)],
) -> Snowflake {
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
    let mut keeper = Snowflake::start_with(&args, env);
    keeper.wait_for_log("granting", Duration::from_secs(30));
    keeper
}

/// `snowflake serve` of datacenter 7 in `etcd`'s fleet, gRPC only, with `extra` flags; its
/// gRPC address and state directory.
fn node(etcd: &Etcd, extra: &[&str]) -> (Snowflake, String, tempfile::TempDir) {
    node_in(etcd, 7, extra)
}

/// [`node`] of datacenter `datacenter_id`.
pub(crate) fn node_in(
    etcd: &Etcd,
    datacenter_id: u64,
    extra: &[&str],
) -> (Snowflake, String, tempfile::TempDir) {
    let state = tempfile::tempdir().unwrap();
    let grpc = format!("127.0.0.1:{}", free_port());
    let endpoint = etcd.endpoint();
    let datacenter = datacenter_id.to_string();
    let mut args = vec![
        "serve",
        "--etcd-endpoints",
        &endpoint,
        "--datacenter-id",
        &datacenter,
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
    // systemd's readiness protocol, on a socket of the test's.
    let sockets = tempfile::tempdir().unwrap();
    let notify_path = sockets.path().join("notify.sock");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut keeper = keeper_with(&pg, &etcd, 4, &[], &[("NOTIFY_SOCKET", &notify_path)]);
    let ready = received_until(&notify, "READY=1");
    assert!(
        ready.contains("STATUS=granting: the database issues ids as datacenter 7 worker 0"),
        "{ready}"
    );
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
    // SIGTERM: STOPPING=1, the grant revoked, the exact mark stored, the pair released.
    assert!(keeper.stop("TERM", Duration::from_secs(30)).success());
    received_until(&notify, "STOPPING=1");
    let e = pg.sql_error("SELECT snowflake_nextval()");
    assert!(e.contains("the keeper revoked its grant"), "{e}");
    assert!(etcd.get("/snowflake/workers/7/0").is_none());
    let last = *more.last().unwrap();
    let mark = i64::try_from(etcd.mark_ms(7, 0)).unwrap();
    assert!(
        (timestamp_ms(last)..timestamp_ms(last) + 1000).contains(&mark),
        "the exact mark {mark}, last id at {}",
        timestamp_ms(last)
    );
}

/// The datagrams on `socket` until one has the line `line` (each read waits at most its
/// timeout); all of them.
fn received_until(socket: &UnixDatagram, line: &str) -> String {
    let mut all = String::new();
    let mut buf = [0u8; 4096];
    while !all.lines().any(|l| l == line) {
        let n = socket
            .recv(&mut buf)
            .unwrap_or_else(|e| panic!("no {line} ({e}): {all:?}"));
        all.push_str(&String::from_utf8_lossy(&buf[..n]));
        all.push('\n');
    }
    all
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

#[test]
fn a_keeper_refuses_a_database_that_cannot_take_grants() {
    // Nothing is claimed before the database says it takes grants: etcd is never reached.
    let pg = started(&[]);
    pg.sql("CREATE DATABASE other");
    pg.sql("CREATE ROLE app LOGIN");
    let refused = |user: &str, dbname: &str| {
        let conninfo = format!(
            "host=127.0.0.1 port={} user={user} dbname={dbname}",
            pg.port
        );
        let mut keeper = Snowflake::start(&[
            "pg-keeper",
            "--postgres",
            &conninfo,
            "--etcd-endpoints",
            "http://127.0.0.1:1",
        ]);
        let status = keeper.wait_exit(Duration::from_secs(30));
        assert_eq!(status.code(), Some(1), "{}", keeper.log());
        keeper.log()
    };
    let log = refused("postgres", "postgres");
    assert!(
        log.contains("snowflake.keeper is off in postgresql://postgres@127.0.0.1:"),
        "{log}"
    );
    let log = refused("postgres", "other");
    assert!(
        log.contains("the snowflake extension is not created in postgresql://postgres@127.0.0.1:")
            && log.contains("/other: run CREATE EXTENSION snowflake"),
        "{log}"
    );
    let log = refused("app", "postgres");
    assert!(log.contains("role app is not a superuser"), "{log}");
}

#[test]
fn on_failover_the_standbys_keeper_claims_the_pair_and_issues_above_the_old_primary() {
    const TTL: u64 = 3;
    let etcd = Etcd::start();
    let mut primary = fleet_database(13);
    let mut primary_keeper = keeper(&primary, &etcd, TTL, &[]);
    primary.sql("SELECT snowflake_nextval()");
    let mut standby = Cluster::replica_of(&primary, &[]);
    standby.start();
    // The standby's keeper waits for the promotion, claiming nothing.
    let conninfo = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres",
        standby.port
    );
    let endpoint = etcd.endpoint();
    let mut standby_keeper = Snowflake::start(&[
        "pg-keeper",
        "--postgres",
        &conninfo,
        "--etcd-endpoints",
        &endpoint,
        "--lease-ttl-secs",
        "3",
    ]);
    standby_keeper.wait_for_log(
        "is a standby (in recovery): waiting for it to be promoted",
        Duration::from_secs(30),
    );
    let claim = etcd.get("/snowflake/workers/7/13").unwrap();
    assert!(
        claim.contains(&format!("\"pid\":{}", primary_keeper.pid())),
        "{claim}"
    );
    let max = *draw(&primary, 1000).last().unwrap();
    // The primary and its keeper crash; the standby is promoted.
    primary_keeper.stop("KILL", Duration::from_secs(10));
    primary.kill9();
    let mark = i64::try_from(etcd.mark_ms(7, 13)).unwrap();
    standby.promote();
    standby.wait_for("SELECT pg_is_in_recovery()", "f", Duration::from_secs(30));
    // Its keeper claims the pair once the old lease expired, above the fleet's mark, which
    // covers every grant of the old primary (replicated or not).
    standby_keeper.wait_for_log("granting", Duration::from_secs(30));
    assert_eq!(
        standby.int("SELECT keeper_floor_ms FROM snowflake_status()"),
        mark
    );
    let first: i64 = standby
        .sql_eventually("SELECT snowflake_nextval()", Duration::from_secs(20))
        .parse()
        .unwrap();
    assert!(first > max, "{first} <= {max}");
    assert!(timestamp_ms(first) > mark);
}

#[test]
fn the_keeper_follows_its_database_through_a_restart_and_a_demotion() {
    let etcd = Etcd::start();
    let mut pg = fleet_database(13);
    let mut keeper = keeper(&pg, &etcd, 3, &[]);
    let before = *draw(&pg, 100).last().unwrap();
    // A restart loses the grant and the floor: the keeper connects again and grants again.
    pg.stop("fast");
    pg.start();
    let after: i64 = pg
        .sql_eventually("SELECT snowflake_nextval()", Duration::from_secs(20))
        .parse()
        .unwrap();
    assert!(after > before);
    keeper.wait_for_log("connected to the database again", Duration::from_secs(10));
    // Restarted as a standby (of nobody): the keeper gives the pair back and waits.
    let signal = pg.data.join("standby.signal");
    pg.sql(&format!(
        "COPY (SELECT 1 WHERE false) TO '{}'",
        signal.display()
    ));
    pg.stop("fast");
    pg.start();
    keeper.wait_for_log("gave its pair back", Duration::from_secs(20));
    let start = Instant::now();
    while etcd.get("/snowflake/workers/7/13").is_some() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the pair is still claimed"
        );
        sleep(Duration::from_millis(100));
    }
    // Promoted: the keeper claims the pair again, and IDs flow above everything before.
    pg.promote();
    let promoted: i64 = pg
        .sql_eventually("SELECT snowflake_nextval()", Duration::from_secs(30))
        .parse()
        .unwrap();
    assert!(promoted > after);
    let claim = etcd.get("/snowflake/workers/7/13").expect("claimed again");
    assert!(
        claim.contains(&format!("\"pid\":{}", keeper.pid())),
        "{claim}"
    );
}

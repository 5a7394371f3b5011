//! Fleet mode under any layout: `snowflake pg-keeper` claims the database's pair under the
//! database's own layout, so the fleet's recorded layout (`{prefix}/layout`) is checked exactly
//! as for a `snowflake serve` node. A js-safe database and a js-safe node share a fleet (distinct
//! pairs, IDs within 2^53 − 1, no duplicate across both, js-safe's 16 workers per datacenter);
//! a keeper whose database runs another layout than the fleet's is refused, naming both.

use crate::fleet::{keeper_with, node_in};
use crate::started;
use snowflake_pg_tests::fleet::{Etcd, Snowflake, ids_from};
use snowflake_pg_tests::{Cluster, snowflake_cli};
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::process::Command;
use std::time::Duration;

/// The largest js-safe ID, 2^53 − 1.
const JS_SAFE_MAX_ID: i64 = (1 << 53) - 1;

/// (datacenter, worker) of a js-safe ID (41 | 2 | 4 | 6).
fn js_safe_pair(id: i64) -> (i64, i64) {
    ((id >> 10) & 3, (id >> 6) & 15)
}

/// A database in fleet mode under `layout` as (`datacenter_id`, `worker_id`).
fn database(layout: &str, datacenter_id: u64, worker_id: u64) -> Cluster {
    started(&[
        "snowflake.keeper = on",
        &format!("snowflake.layout = '{layout}'"),
        &format!("snowflake.datacenter_id = {datacenter_id}"),
        &format!("snowflake.worker_id = {worker_id}"),
    ])
}

/// `snowflake pg-keeper` for `pg` in `etcd`'s fleet with `extra` flags, not waited on.
fn start_keeper(pg: &Cluster, etcd: &Etcd, extra: &[&str]) -> Snowflake {
    let conninfo = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres",
        pg.port
    );
    let endpoint = etcd.endpoint();
    let mut args = vec![
        "pg-keeper",
        "--postgres",
        &conninfo,
        "--etcd-endpoints",
        &endpoint,
        "--lease-ttl-secs",
        "4",
        "--claim-timeout-secs",
        "3",
    ];
    args.extend_from_slice(extra);
    Snowflake::start(&args)
}

/// A keeper for `pg` that must exit 1; its log.
fn refused_keeper(pg: &Cluster, etcd: &Etcd) -> String {
    let mut keeper = start_keeper(pg, etcd, &[]);
    let status = keeper.wait_exit(Duration::from_secs(60));
    assert_eq!(status.code(), Some(1), "{}", keeper.log());
    keeper.log()
}

/// `n` IDs from the database, 2,000 a statement: a part refused because a renewal of the grant
/// came late (a loaded machine) is drawn again, so the test checks the IDs, not the timing.
fn draw_in_parts(pg: &Cluster, n: u32) -> Vec<i64> {
    let mut ids = Vec::new();
    while ids.len() < n as usize {
        let part = (n as usize - ids.len()).min(2_000);
        let sql = format!("SELECT snowflake_nextval() FROM generate_series(1, {part})");
        let out = pg.sql_eventually(&sql, Duration::from_secs(30));
        ids.extend(out.lines().map(|l| l.parse::<i64>().unwrap()));
    }
    ids
}

/// `snowflake --layout js-safe audit --json` over `ids`: its JSON.
fn audit_js_safe(pg: &Cluster, ids: &[i64]) -> String {
    let mut text = String::new();
    for id in ids {
        writeln!(text, "{id}").unwrap();
    }
    let file = pg.write_file("ids.txt", &text);
    let out = Command::new(snowflake_cli())
        .args(["--layout", "js-safe", "audit", "--json"])
        .arg(&file)
        .output()
        .expect("run snowflake audit");
    let json = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "snowflake --layout js-safe audit: {json}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    json
}

#[test]
fn a_js_safe_database_and_a_js_safe_node_share_a_fleet() {
    let etcd = Etcd::start();
    // The keeper of a js-safe database (datacenter 1, worker 0) is the fleet's first claimant:
    // it records the fleet's layout, the database's.
    let pg = database("js-safe", 1, 0);
    let _keeper = keeper_with(&pg, &etcd, 10, &[], &[]);
    let record = etcd.get("/snowflake/layout").expect("the fleet's layout");
    assert!(
        record.contains(r#""name":"js-safe""#) && record.contains(r#""max_id":"9007199254740991""#),
        "{record}"
    );
    // A js-safe node of the same datacenter, without a worker id, takes the next free pair.
    let (mut js_node, grpc, _state) = node_in(&etcd, 1, &["--layout", "js-safe"]);
    js_node.wait_for_log("ready: issuing ids", Duration::from_secs(30));
    assert!(etcd.get("/snowflake/workers/1/1").is_some());
    // Both issue at once.
    let (db_ids, node_ids) = std::thread::scope(|s| {
        let db = s.spawn(|| draw_in_parts(&pg, 20_000));
        let node = s.spawn(|| ids_from(&grpc, 20_000));
        (db.join().unwrap(), node.join().unwrap())
    });
    assert!(db_ids.windows(2).all(|w| w[0] < w[1]));
    assert!(db_ids.iter().all(|id| js_safe_pair(*id) == (1, 0)));
    assert!(node_ids.iter().all(|id| js_safe_pair(*id) == (1, 1)));
    let all: Vec<i64> = db_ids.iter().chain(&node_ids).copied().collect();
    assert!(
        all.iter().all(|id| (0..=JS_SAFE_MAX_ID).contains(id)),
        "an id above 2^53 - 1"
    );
    assert_eq!(all.iter().collect::<BTreeSet<_>>().len(), 40_000);
    let report = audit_js_safe(&pg, &all);
    for field in [
        r#""ids":40000"#,
        r#""unique":40000"#,
        r#""duplicates":0"#,
        r#""invalid":0"#,
        r#""datacenter_id":1,"worker_id":0,"ids":20000"#,
        r#""datacenter_id":1,"worker_id":1,"ids":20000"#,
    ] {
        assert!(report.contains(field), "no {field} in {report}");
    }
    // The keeper's mark in the fleet is js-safe's: a release before layouts refuses it.
    let mark = etcd.get("/snowflake/marks/1/0").expect("the keeper's mark");
    assert!(
        mark.contains(r#""epoch_ms":null"#) && mark.contains(r#""name":"js-safe""#),
        "{mark}"
    );
    // js-safe has 16 workers a datacenter: with 14 more held, a 17th claimant is refused.
    for worker in 2..16 {
        etcd.put_leased(
            &format!("/snowflake/workers/1/{worker}"),
            r#"{"host":"elsewhere"}"#,
            60,
        );
    }
    let (mut seventeenth, _grpc, _state) = node_in(
        &etcd,
        1,
        &["--layout", "js-safe", "--claim-timeout-secs", "2"],
    );
    let status = seventeenth.wait_exit(Duration::from_secs(60));
    assert!(!status.success(), "{}", seventeenth.log());
    let log = seventeenth.log();
    assert!(
        log.contains("all 16 worker ids of datacenter 1 are held"),
        "{log}"
    );
    // The database still issues, as worker 0.
    let more = draw_in_parts(&pg, 10);
    assert!(more[0] > *db_ids.last().unwrap());
    // A database configured beyond js-safe's 16 workers never reaches the fleet.
    let beyond = database("js-safe", 1, 16);
    let log = refused_keeper(&beyond, &etcd);
    assert!(
        log.contains("snowflake.worker_id: invalid worker id: expected 0..=15, found 16"),
        "{log}"
    );
}

#[test]
fn a_js_safe_databases_keeper_is_refused_by_a_twitter_fleet() {
    let etcd = Etcd::start();
    // A Twitter node records the fleet's layout.
    let (mut twitter_node, _grpc, _state) = node_in(&etcd, 1, &["--worker-id", "5"]);
    twitter_node.wait_for_log("ready: issuing ids", Duration::from_secs(30));
    let pg = database("js-safe", 1, 0);
    let log = refused_keeper(&pg, &etcd);
    assert!(
        log.contains(&format!(
            "cannot claim the database's pair in etcd: the database \
             (postgresql://postgres@127.0.0.1:{}/postgres) issues under the layout js-safe \
             (epoch 1288834974657) (snowflake.layout, snowflake.epoch_ms), and the fleet runs \
             the layout twitter (epoch 1288834974657) (recorded at /snowflake/layout)",
            pg.port
        )),
        "{log}"
    );
    // Nothing was claimed, and the database issues nothing.
    assert!(etcd.get("/snowflake/workers/1/0").is_none());
    let e = pg.sql_error("SELECT snowflake_nextval()");
    assert!(e.contains("no keeper has granted an issue limit"), "{e}");
    assert!(
        etcd.get("/snowflake/layout")
            .unwrap()
            .contains(r#""name":"twitter""#)
    );
}

#[test]
fn a_twitter_databases_keeper_is_refused_by_a_js_safe_fleet() {
    let etcd = Etcd::start();
    // A js-safe node records the fleet's layout.
    let (mut js_node, _grpc, _state) =
        node_in(&etcd, 1, &["--layout", "js-safe", "--worker-id", "5"]);
    js_node.wait_for_log("ready: issuing ids", Duration::from_secs(30));
    let pg = database("twitter", 7, 13);
    let log = refused_keeper(&pg, &etcd);
    assert!(
        log.contains(&format!(
            "cannot claim the database's pair in etcd: the database \
             (postgresql://postgres@127.0.0.1:{}/postgres) issues under the layout twitter \
             (epoch 1288834974657) (snowflake.layout, snowflake.epoch_ms), and the fleet runs \
             the layout js-safe (epoch 1288834974657) (recorded at /snowflake/layout)",
            pg.port
        )),
        "{log}"
    );
    assert!(etcd.get("/snowflake/workers/7/13").is_none());
    let e = pg.sql_error("SELECT snowflake_nextval()");
    assert!(e.contains("no keeper has granted an issue limit"), "{e}");
}

//! The layout a node records (SPEC §9), with the real binary: its state directory, and its
//! fleet once per etcd prefix or ZooKeeper path, compared at every claim. A node with another
//! layout refuses to start, naming both; the pair count follows the widths; what a release
//! before layouts left (marks with an epoch and no layout) is Twitter's.

use crate::etcd_cluster::EtcdCluster;
use crate::support::{Serve, assert_exit, info, now_ms, temp_dir, worker_of};
use crate::zookeeper_fleet::{assert_mentions, zk_node_with_session};
use crate::zookeeper_server::ZooKeeper;
use std::path::Path;
use std::process::Command;

/// The largest js-safe ID: 2^53 − 1.
const JS_MAX_ID: u64 = (1 << 53) - 1;

/// `snowflake serve` leasing from `etcd` under `prefix`, a short TTL, its own state directory.
fn etcd_node(etcd: &EtcdCluster, state_dir: &Path, prefix: &str) -> Serve {
    Serve::new(state_dir).args([
        "--etcd-endpoints",
        &etcd.endpoints(),
        "--lease-ttl-secs",
        "3",
        "--etcd-prefix",
        prefix,
    ])
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[test]
fn an_etcd_prefix_records_its_layout_once_and_refuses_another() {
    let etcd = EtcdCluster::start(1);
    let dirs: Vec<_> = (0..4).map(|_| temp_dir()).collect();

    // Twitter's first: the record, then a js-safe node refused without claiming anything.
    let twitter = etcd_node(&etcd, dirs[0].path(), "/tw").start();
    let record = json(&etcd.get("/tw/layout").expect("the layout is recorded"));
    assert_eq!(record["name"], "twitter", "{record}");
    assert_eq!(record["max_id"], "9223372036854775807", "{record}");
    let refused = etcd_node(&etcd, dirs[1].path(), "/tw")
        .args(["--layout", "js-safe"])
        .run_to_exit();
    assert_exit(&refused, 1);
    assert_mentions(
        &refused,
        &[
            "the fleet runs the layout twitter (epoch 1288834974657) (recorded at /tw/layout)",
            "this node was started with js-safe (epoch 1288834974657)",
            "--layout twitter",
        ],
    );
    assert_eq!(
        etcd.get_prefix("/tw/workers/").len(),
        1,
        "nothing else claimed"
    );
    // A Twitter mark is what every release wrote: an epoch, no layout.
    let mark = json(&etcd.get("/tw/marks/0/0").expect("mark"));
    assert_eq!(mark["epoch_ms"], 1_288_834_974_657_u64, "{mark}");
    assert!(mark.get("layout").is_none(), "{mark}");
    assert_exit(&twitter.stop_with("TERM"), 0);

    // js-safe on its own prefix: the record, marks with their layout, IDs within 2^53 − 1, and
    // a Twitter node refused.
    let js = etcd_node(&etcd, dirs[2].path(), "/js")
        .args(["--layout", "js-safe"])
        .start();
    assert_eq!(json(&etcd.get("/js/layout").unwrap())["name"], "js-safe");
    let ids = js.get("/v1/ids?count=1000").ids();
    assert_eq!(ids.len(), 1000);
    assert!(
        ids.iter().all(|&id| id <= JS_MAX_ID),
        "{:?}",
        ids.iter().max()
    );
    assert_eq!(info(&js)["layout"]["name"], "js-safe");
    let mark = json(&etcd.get("/js/marks/0/0").expect("mark"));
    assert!(mark["epoch_ms"].is_null(), "{mark}");
    assert_eq!(mark["layout"]["name"], "js-safe", "{mark}");
    let refused = etcd_node(&etcd, dirs[3].path(), "/js").run_to_exit();
    assert_exit(&refused, 1);
    assert_mentions(
        &refused,
        &[
            "the fleet runs the layout js-safe (epoch 1288834974657) (recorded at /js/layout)",
            "started with twitter (epoch 1288834974657)",
        ],
    );

    // The pair count follows the widths: js-safe has 16 workers per datacenter, so the 17th
    // claimant of datacenter 1 fails, naming the limit.
    let grant = etcd.etcdctl(&["lease", "grant", "60"]);
    let lease = String::from_utf8_lossy(&grant.stdout)
        .split_whitespace()
        .nth(1)
        .expect("lease id")
        .to_owned();
    for worker in 0..16 {
        let out = etcd.etcdctl(&[
            "put",
            &format!("--lease={lease}"),
            &format!("/js/workers/1/{worker}"),
            "{\"host\":\"elsewhere\"}",
        ]);
        assert!(out.status.success(), "{out:?}");
    }
    let full = etcd_node(&etcd, dirs[3].path(), "/js")
        .args(["--layout", "js-safe", "--datacenter-id", "1"])
        .run_to_exit();
    assert_exit(&full, 1);
    assert_mentions(&full, &["all 16 worker ids of datacenter 1 are held"]);
    assert_exit(&js.stop_with("TERM"), 0);
}

#[test]
fn a_fleet_of_the_previous_release_is_read_as_twitter() {
    let etcd = EtcdCluster::start(1);
    let (a, b) = (temp_dir(), temp_dir());
    // What a release before layouts left: a mark with its epoch, no layout, no record.
    let old_mark_ms = now_ms() + 2_000;
    let out = etcd.etcdctl(&[
        "put",
        "/old/marks/0/5",
        &format!(
            "{{\"high_water_ms\":{old_mark_ms},\"time\":\"2026-01-01T00:00:00.000Z\",\
             \"epoch_ms\":1288834974657,\"lease\":\"694d9a1b2c3d4e5f\"}}"
        ),
    ]);
    assert!(out.status.success(), "{out:?}");
    // A js-safe node cannot record its layout over Twitter's IDs.
    let refused = etcd_node(&etcd, a.path(), "/old")
        .args(["--layout", "js-safe"])
        .run_to_exit();
    assert_exit(&refused, 1);
    assert_mentions(
        &refused,
        &["the fleet runs the layout twitter (epoch 1288834974657) (recorded at /old/marks/0/5)"],
    );
    assert_eq!(etcd.get("/old/layout"), None, "nothing recorded");
    // A Twitter node reads the mark as Twitter's, records the layout and stays above it.
    let node = etcd_node(&etcd, b.path(), "/old")
        .args(["--worker-id", "5"])
        .start();
    assert_eq!(json(&etcd.get("/old/layout").unwrap())["name"], "twitter");
    let (id, _) = crate::support::first_id(&node, std::time::Duration::from_secs(10));
    assert!(crate::support::timestamp_ms(id) > old_mark_ms);
    assert_exit(&node.stop_with("TERM"), 0);
}

#[test]
fn a_zookeeper_path_records_its_layout_once_and_refuses_another() {
    let zk = ZooKeeper::start();
    let dirs: Vec<_> = (0..4).map(|_| temp_dir()).collect();
    let node = |dir: &Path, path: &str| {
        zk_node_with_session(&zk, dir, 4000).args(["--zookeeper-path", path])
    };
    let twitter = node(dirs[0].path(), "/tw").start();
    assert_eq!(
        json(&zk.get("/tw-layout").expect("recorded"))["name"],
        "twitter"
    );
    let refused = node(dirs[1].path(), "/tw")
        .args(["--layout", "js-safe"])
        .run_to_exit();
    assert_exit(&refused, 1);
    assert_mentions(
        &refused,
        &[
            "the fleet runs the layout twitter (epoch 1288834974657) (recorded at /tw-layout)",
            "started with js-safe",
        ],
    );
    assert_eq!(zk.children("/tw"), ["0"], "nothing else registered");
    assert_exit(&twitter.stop_with("TERM"), 0);

    let js = node(dirs[2].path(), "/js")
        .args(["--layout", "js-safe"])
        .start();
    assert_eq!(worker_of(&js), 0);
    assert_eq!(json(&zk.get("/js-layout").unwrap())["name"], "js-safe");
    let mark = json(&zk.get("/js-marks/0").expect("mark"));
    assert_eq!(mark["layout"]["name"], "js-safe", "{mark}");
    assert!(mark["epoch_ms"].is_null(), "{mark}");
    assert!(
        js.get("/v1/ids?count=500")
            .ids()
            .iter()
            .all(|&id| id <= JS_MAX_ID)
    );
    let refused = node(dirs[3].path(), "/js").run_to_exit();
    assert_exit(&refused, 1);
    assert_mentions(
        &refused,
        &["the fleet runs the layout js-safe (epoch 1288834974657) (recorded at /js-layout)"],
    );
    assert_exit(&js.stop_with("TERM"), 0);

    // A path of the previous release (marks with an epoch only) is Twitter's.
    zk.create("/old-marks", "", false);
    zk.create(
        "/old-marks/3",
        "{\"high_water_ms\":1700000000000,\"epoch_ms\":1288834974657,\"session\":\"1\"}",
        false,
    );
    let refused = node(dirs[3].path(), "/old")
        .args(["--layout", "js-safe"])
        .run_to_exit();
    assert_exit(&refused, 1);
    assert_mentions(
        &refused,
        &["the fleet runs the layout twitter", "/old-marks/3"],
    );
    assert_eq!(zk.get("/old-layout"), None, "nothing recorded");
}

#[test]
fn a_state_directory_records_its_layout_and_state_show_prints_it() {
    let (twitter, js) = (temp_dir(), temp_dir());
    let node = Serve::new(twitter.path()).start();
    assert_eq!(node.get("/v1/id").status, 200);
    assert_exit(&node.stop_with("TERM"), 0);
    let refused = Serve::new(twitter.path())
        .args(["--layout", "js-safe"])
        .run_to_exit();
    assert_exit(&refused, 1);
    assert_mentions(
        &refused,
        &[
            "was written under the layout twitter (epoch 1288834974657), but the node now runs \
             js-safe (epoch 1288834974657)",
            "--layout twitter",
        ],
    );

    // js-safe from the environment, as a deployment sets it.
    let node = Serve::new(js.path())
        .env("SNOWFLAKE_LAYOUT", "js-safe")
        .start();
    assert!(
        node.get("/v1/ids?count=100")
            .ids()
            .iter()
            .all(|&id| id <= JS_MAX_ID)
    );
    assert_exit(&node.stop_with("TERM"), 0);
    let refused = Serve::new(js.path()).run_to_exit();
    assert_exit(&refused, 1);
    assert_mentions(&refused, &["under the layout js-safe", "now runs twitter"]);

    let shown = Command::new(crate::support::binary())
        .args(["state", "show", "--state-dir"])
        .arg(js.path())
        .env_remove("SNOWFLAKE_LAYOUT")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.status.success(), "{shown:?}");
    assert!(
        text.contains("under the layout js-safe (epoch 1288834974657)"),
        "{text}"
    );
    let shown = Command::new(crate::support::binary())
        .args(["state", "show", "--json", "--state-dir"])
        .arg(js.path())
        .output()
        .unwrap();
    let value = json(&String::from_utf8_lossy(&shown.stdout));
    assert_eq!(value["local"][0]["layout"]["name"], "js-safe", "{value}");
}

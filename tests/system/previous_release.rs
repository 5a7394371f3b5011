//! Rollback (SPEC §9): what this release writes under a layout other than Twitter's, the release
//! before layouts refuses (its state file, its marks in etcd and ZooKeeper), so going back can
//! never issue Twitter IDs over another layout's; what it writes under Twitter's, that release
//! reads, byte for byte its own format.
//!
//! The previous release's binary is `SNOWFLAKE_TEST_PREVIOUS_RELEASE`: `scripts/previous-release`
//! builds it from the last commit before layouts were recorded, and `scripts/test` sets it. A
//! missing one fails the test, naming the script; nothing is skipped.

use crate::etcd_cluster::EtcdCluster;
use crate::support::{Serve, assert_exit, first_id, temp_dir};
use crate::zookeeper_fleet::{assert_mentions, zk_node_with_session};
use crate::zookeeper_server::ZooKeeper;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The previous release's `snowflake`.
fn previous() -> PathBuf {
    let path = std::env::var_os("SNOWFLAKE_TEST_PREVIOUS_RELEASE").map(PathBuf::from);
    let path = path.unwrap_or_else(|| {
        panic!(
            "SNOWFLAKE_TEST_PREVIOUS_RELEASE is not set: it names the previous release's \
             `snowflake` binary, which scripts/previous-release builds (scripts/test sets it)"
        )
    });
    assert!(path.is_file(), "{} is not a file", path.display());
    path
}

/// This release's node under `layout` on `state_dir`: one ID, then a graceful stop.
fn run_once(serve: Serve) {
    let node = serve.start();
    assert_eq!(node.get("/v1/ids?count=10").status, 200);
    assert_exit(&node.stop_with("TERM"), 0);
}

fn file(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("node-0-0.json")).expect("state file")
}

#[test]
fn the_previous_release_refuses_a_js_safe_state_file_and_reads_a_twitter_one() {
    let previous = previous();
    let js = temp_dir();
    run_once(Serve::new(js.path()).args(["--layout", "js-safe"]));
    let written = file(js.path());
    let refused = Serve::new(js.path()).program(&previous).run_to_exit();
    assert_exit(&refused, 1);
    // (It knows format 1 only, and no `layout` field in it.)
    assert_mentions(
        &refused,
        &["is corrupt", "unknown field `layout`", "refusing to start"],
    );
    assert_eq!(file(js.path()), written, "left as it was");

    // Twitter's: the previous release reads this one's file, and this one reads it back.
    let twitter = temp_dir();
    run_once(Serve::new(twitter.path()));
    let old = Serve::new(twitter.path()).program(&previous).start();
    let (id, _) = first_id(&old, Duration::from_secs(10));
    assert_exit(&old.stop_with("TERM"), 0);
    let new = Serve::new(twitter.path()).start();
    let (next, _) = first_id(&new, Duration::from_secs(10));
    assert!(next > id, "{next} after {id}");
    assert_exit(&new.stop_with("TERM"), 0);
}

#[test]
fn the_previous_release_refuses_js_safe_marks_in_etcd_and_zookeeper() {
    let previous = previous();
    let etcd = EtcdCluster::start(1);
    let etcd_node = |dir: &Path| {
        Serve::new(dir).args([
            "--etcd-endpoints",
            &etcd.endpoints(),
            "--lease-ttl-secs",
            "3",
            "--etcd-prefix",
            "/js",
            "--worker-id",
            "2",
        ])
    };
    let (a, b) = (temp_dir(), temp_dir());
    run_once(etcd_node(a.path()).args(["--layout", "js-safe"]));
    let refused = etcd_node(b.path()).program(&previous).run_to_exit();
    assert_exit(&refused, 1);
    assert_mentions(
        &refused,
        &["/js/marks/0/2", "unusable", "epoch (not a number)"],
    );
    assert_eq!(
        etcd.get("/js/workers/0/2"),
        None,
        "the claim was given back"
    );

    let zk = ZooKeeper::start();
    let zk_node = |dir: &Path| {
        zk_node_with_session(&zk, dir, 4000).args(["--zookeeper-path", "/js", "--worker-id", "1"])
    };
    let (c, d) = (temp_dir(), temp_dir());
    run_once(zk_node(c.path()).args(["--layout", "js-safe"]));
    let refused = zk_node(d.path()).program(&previous).run_to_exit();
    assert_exit(&refused, 1);
    assert_mentions(
        &refused,
        &["/js-marks/1", "unusable", "epoch (not a number)"],
    );
}

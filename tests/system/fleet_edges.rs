//! Fleet edges found by reading (issue 28), against a real etcd and a real ZooKeeper: an
//! unpinned claimant passes over a free pair whose mark is far ahead while another is free,
//! and the etcd claim watch on a member without a leader fences the node.

use crate::etcd_cluster::EtcdCluster;
use crate::support::{Serve, assert_exit, info, now_ms, temp_dir, worker_of};
use crate::zookeeper_fleet::zk_node_with_session;
use crate::zookeeper_server::ZooKeeper;
use std::time::{Duration, Instant};

/// A mark an hour ahead of the clock, as a wrong clock leaves one (Twitter's, with its epoch).
fn mark_an_hour_ahead(writer_field: &str) -> String {
    format!(
        "{{\"high_water_ms\":{},\"time\":\"(an hour ahead)\",\"epoch_ms\":1288834974657,\
         \"{writer_field}\":\"1\"}}",
        now_ms() + 3_600_000
    )
}

#[test]
fn an_unpinned_claimant_passes_over_a_pair_whose_mark_is_far_ahead_while_another_is_free() {
    let etcd = EtcdCluster::start(1);
    let out = etcd.etcdctl(&["put", "/snowflake/marks/0/0", &mark_an_hour_ahead("lease")]);
    assert!(out.status.success(), "{out:?}");
    let (a, b) = (temp_dir(), temp_dir());
    let node = |dir: &std::path::Path| {
        Serve::new(dir).args([
            "--etcd-endpoints",
            &etcd.endpoints(),
            "--lease-ttl-secs",
            "3",
        ])
    };
    // Before: it took worker 0 and waited an hour for the clock, not ready.
    let first = node(a.path()).start();
    assert_eq!(worker_of(&first), 1, "worker 0's mark is an hour ahead");
    assert_eq!(first.get("/v1/id").status, 200, "it serves at once");
    assert!(
        first
            .stderr()
            .contains("skipping a free worker whose high-water mark is far ahead"),
        "{}",
        first.stderr()
    );
    assert_eq!(info(&first)["lease"]["skipped_ahead"], 1);
    let metrics = first.get("/metrics").body;
    assert!(
        metrics.contains("snowflake_lease_claim_skipped_pairs_total 1"),
        "{metrics}"
    );
    // Only worker 0 free (1 held, the rest held by another lease): taken after all, and it
    // waits for its mark.
    let grant = etcd.etcdctl(&["lease", "grant", "60"]);
    let lease = String::from_utf8_lossy(&grant.stdout)
        .split_whitespace()
        .nth(1)
        .expect("lease id")
        .to_owned();
    for worker in 2..32 {
        let out = etcd.etcdctl(&[
            "put",
            &format!("--lease={lease}"),
            &format!("/snowflake/workers/0/{worker}"),
            "{\"host\":\"elsewhere\"}",
        ]);
        assert!(out.status.success(), "{out:?}");
    }
    let second = node(b.path()).start();
    assert_eq!(worker_of(&second), 0, "the only free one");
    assert_eq!(second.get("/readyz").status, 503, "it waits for the mark");
    assert_exit(&second.stop_with("TERM"), 0);
    assert_exit(&first.stop_with("TERM"), 0);
}

#[test]
fn an_unpinned_registrant_passes_over_a_worker_whose_mark_is_far_ahead() {
    let zk = ZooKeeper::start();
    zk.create("/snowflake-servers-marks", "", false);
    zk.create(
        "/snowflake-servers-marks/0",
        &mark_an_hour_ahead("session"),
        false,
    );
    let dir = temp_dir();
    let node = zk_node_with_session(&zk, dir.path(), 4000).start();
    assert_eq!(worker_of(&node), 1, "worker 0's mark is an hour ahead");
    assert_eq!(node.get("/v1/id").status, 200);
    assert!(
        node.stderr()
            .contains("skipping a free worker whose high-water mark is far ahead"),
        "{}",
        node.stderr()
    );
    assert_eq!(info(&node)["lease"]["skipped_ahead"], 1);
    assert_exit(&node.stop_with("TERM"), 0);
}

#[test]
fn a_claim_watch_on_a_member_without_a_leader_fences_the_node_until_a_leader_is_back() {
    let etcd = EtcdCluster::start(3);
    let dir = temp_dir();
    // A long TTL: the keep-alives alone would keep the fence up for 24 s without a quorum.
    // The watch opens on the first member listed, which is left alone below.
    let node = Serve::new(dir.path())
        .args([
            "--etcd-endpoints",
            &etcd.endpoints(),
            "--lease-ttl-secs",
            "30",
        ])
        .start();
    assert_eq!(node.get("/v1/id").status, 200);
    // Let the watch open.
    std::thread::sleep(Duration::from_millis(500));
    etcd.stop(1);
    etcd.stop(2);
    let cut = Instant::now();
    // Member 0 loses its leader (an election timeout, 1 s), then cancels the watch once it has
    // had none for three election timeouts: the node must be fenced, saying why, long before
    // its lease could lapse (24 s). Before hasleader the stream stayed open and silent.
    let refusal = loop {
        let response = node.get("/v1/id");
        if response.status == 503 {
            break response.error();
        }
        assert!(
            cut.elapsed() < Duration::from_secs(15),
            "still serving {:?} after the member lost its quorum",
            cut.elapsed()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        refusal.contains("has no leader") && refusal.contains(&etcd.endpoint(0)),
        "{refusal}"
    );
    eprintln!("fenced {:?} after the quorum was cut", cut.elapsed());
    assert_eq!(info(&node)["lease"]["losses"], 0, "a fence, not a loss");
    // A leader again: the claim is watched again and the node serves.
    etcd.cont(1);
    etcd.cont(2);
    let back = Instant::now();
    while node.get("/v1/id").status != 200 {
        assert!(
            back.elapsed() < Duration::from_secs(30),
            "not serving 30 s after the quorum came back: {}\n{}",
            node.get("/v1/id").error(),
            node.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_exit(&node.stop_with("TERM"), 0);
}

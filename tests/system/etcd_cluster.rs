//! The test kit's real etcd cluster ([`snowflake_testkit::etcd`]), checked on its own: one
//! member, three members losing their leader, a stopped member.

pub use snowflake_testkit::etcd::*;
pub use snowflake_testkit::ports::free_ports;
use std::process::Output;
use std::thread;
use std::time::{Duration, Instant};

/// Asserts that an etcdctl run succeeded, showing its output otherwise.
fn assert_ok(output: &Output, what: &str) {
    assert!(
        output.status.success(),
        "{what} failed ({}): {}{}",
        output.status,
        String::from_utf8_lossy(&output.stderr),
        String::from_utf8_lossy(&output.stdout)
    );
}

/// Retries `etcdctl args` until it succeeds, for at most `timeout`; returns how long it took
/// and how many tries.
fn etcdctl_until_ok(cluster: &EtcdCluster, args: &[&str], timeout: Duration) -> (Duration, u32) {
    let start = Instant::now();
    let mut tries = 0;
    loop {
        tries += 1;
        let output = cluster.etcdctl(args);
        if output.status.success() {
            return (start.elapsed(), tries);
        }
        assert!(
            start.elapsed() < timeout,
            "etcdctl {} still failing after {timeout:?} ({tries} tries): {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        );
        thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn etcd_cluster_single_member_puts_and_gets() {
    let started = Instant::now();
    let cluster = EtcdCluster::start(1);
    eprintln!(
        "etcd_cluster: 1 member healthy after {:?}",
        started.elapsed()
    );
    assert_eq!(cluster.member_count(), 1);
    assert_eq!(cluster.endpoints(), cluster.endpoint(0));
    assert!(cluster.endpoint(0).starts_with("http://127.0.0.1:"));
    assert!(cluster.dir().join("m0").is_dir(), "data dir of m0");

    for (key, value) in [
        ("/sf/a/x", "1"),
        ("/sf/a/y", ""),
        ("/sf/a/z", "hello wörld = + /"),
        ("/sf/b", "other"),
    ] {
        assert_ok(&cluster.etcdctl(&["put", key, value]), "etcdctl put");
    }
    assert_eq!(cluster.get("/sf/a/x").as_deref(), Some("1"));
    assert_eq!(
        cluster.get("/sf/a/y").as_deref(),
        Some(""),
        "empty, not absent"
    );
    assert_eq!(cluster.get("/sf/a/z").as_deref(), Some("hello wörld = + /"));
    assert_eq!(cluster.get("/sf/nope"), None);
    assert_eq!(cluster.get("/sf/a"), None, "a prefix is not a key");
    assert_eq!(
        cluster.get_prefix("/sf/a/"),
        [
            ("/sf/a/x".to_owned(), "1".to_owned()),
            ("/sf/a/y".to_owned(), String::new()),
            ("/sf/a/z".to_owned(), "hello wörld = + /".to_owned()),
        ]
    );
    assert_eq!(cluster.get_prefix("/sf/").len(), 4);
    assert_eq!(cluster.get_prefix(""), cluster.get_prefix("/sf/"));
    assert!(cluster.get_prefix("/none/").is_empty());
    assert_eq!(cluster.leader(), Some(0));
    assert!(
        cluster.log(0).contains("3.4."),
        "the log names the version:\n{}",
        cluster.log(0)
    );
    eprintln!(
        "etcd_cluster: single-member test took {:?}",
        started.elapsed()
    );
}

#[test]
fn etcd_cluster_of_three_survives_losing_its_leader() {
    let started = Instant::now();
    let mut cluster = EtcdCluster::start(3);
    eprintln!(
        "etcd_cluster: 3 members healthy after {:?}",
        started.elapsed()
    );
    let endpoints = cluster.endpoints();
    assert_eq!(endpoints.split(',').count(), 3);
    for i in 0..3 {
        assert!(endpoints.split(',').any(|e| e == cluster.endpoint(i)));
    }
    assert_ok(
        &cluster.etcdctl(&["put", "/sf/k1", "v1"]),
        "put to 3 members",
    );
    assert_eq!(cluster.get("/sf/k1").as_deref(), Some("v1"));

    // Kill the leader: the other two must elect a new one and go on accepting writes.
    let leader = cluster.leader().expect("a leader");
    cluster.kill(leader);
    let killed = Instant::now();
    let (took, tries) =
        etcdctl_until_ok(&cluster, &["put", "/sf/k2", "v2"], Duration::from_secs(8));
    let new_leader = (0..50)
        .find_map(|_| {
            let leader = cluster.leader();
            if leader.is_none() {
                thread::sleep(Duration::from_millis(100));
            }
            leader
        })
        .expect("a new leader within 5 s");
    assert_ne!(new_leader, leader);
    eprintln!(
        "etcd_cluster: killed leader m{leader}; a put succeeded {took:?} later ({tries} tries; \
         m{new_leader} leads, {:?} after the kill)",
        killed.elapsed()
    );
    assert_eq!(cluster.get("/sf/k2").as_deref(), Some("v2"));
    assert!(
        cluster.etcdctl(&["endpoint", "health"]).status.success(),
        "the live members are healthy"
    );

    // Bring it back with its old data: it catches up and serves the write it missed.
    let restart = Instant::now();
    cluster.restart(leader);
    eprintln!(
        "etcd_cluster: m{leader} healthy again {:?} after restart",
        restart.elapsed()
    );
    let output = cluster.etcdctl(&[
        "--endpoints",
        &cluster.endpoint(leader),
        "get",
        "--print-value-only",
        "/sf/k2",
    ]);
    assert_ok(&output, "get from the restarted member alone");
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim_end(), "v2");
    assert_eq!(cluster.get_prefix("/sf/").len(), 2);
    eprintln!(
        "etcd_cluster: three-member test took {:?}",
        started.elapsed()
    );
}

#[test]
fn etcd_cluster_stopped_member_times_out_then_recovers() {
    let started = Instant::now();
    let cluster = EtcdCluster::start(1);
    assert_ok(&cluster.etcdctl(&["put", "/sf/s", "before"]), "put");

    cluster.stop(0);
    let frozen = Instant::now();
    let output = cluster.etcdctl(&["put", "/sf/s", "frozen"]);
    let failed_after = frozen.elapsed();
    assert!(
        !output.status.success(),
        "a put to a frozen etcd succeeded: {}",
        String::from_utf8_lossy(&output.stdout)
    );
    assert!(
        failed_after < Duration::from_secs(6),
        "a put to a frozen etcd took {failed_after:?} to fail (command timeout 3 s)"
    );
    eprintln!(
        "etcd_cluster: put to a stopped member failed after {failed_after:?}: {}",
        String::from_utf8_lossy(&output.stderr).trim()
    );

    cluster.cont(0);
    let (took, tries) =
        etcdctl_until_ok(&cluster, &["put", "/sf/s", "after"], Duration::from_secs(5));
    eprintln!("etcd_cluster: put succeeded {took:?} after SIGCONT ({tries} tries)");
    assert_eq!(cluster.get("/sf/s").as_deref(), Some("after"));

    // Dropping a cluster whose member is frozen still kills it, promptly, and cleans up.
    cluster.stop(0);
    let dir = cluster.dir().to_path_buf();
    let dropping = Instant::now();
    drop(cluster);
    assert!(
        dropping.elapsed() < Duration::from_secs(5),
        "dropping took {:?}",
        dropping.elapsed()
    );
    assert!(!dir.exists(), "{} is left behind", dir.display());
    eprintln!("etcd_cluster: stop/cont test took {:?}", started.elapsed());
}

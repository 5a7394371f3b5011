//! Signals during start-up (issue 28): SIGTERM or SIGINT while a node is still claiming its
//! pair — held by another node, etcd out of reach, a wrong ZooKeeper identity — stop it
//! promptly, giving back what it holds, with a graceful stop's exit status (0), instead of
//! being ignored until `--claim-timeout-secs`.

use crate::etcd_cluster::EtcdCluster;
use crate::support::{Serve, ServeProcess, assert_exit, temp_dir};
use crate::zookeeper_fleet::zk_node_with_session;
use crate::zookeeper_server::ZooKeeper;
use std::time::{Duration, Instant};

/// How long a stop may take once signalled. The claim below would retry for two minutes; the
/// stop takes well under a second on an idle machine (it revokes the claim's lease, within 1 s
/// at most); the bound leaves room for a loaded test machine.
const PROMPT: Duration = Duration::from_secs(5);

/// Sends `signal` once the node logged `claiming` and has been retrying for a moment, and
/// checks that it exits 0 within [`PROMPT`], saying it stopped before serving.
fn stops_promptly(mut node: ServeProcess, claiming: &str, signal: &str) {
    node.wait_for_line(claiming);
    // Inside the retry loop (a round, a pause), not at its first call.
    std::thread::sleep(Duration::from_millis(1500));
    let sent = Instant::now();
    node.signal(signal);
    let status = node.wait_exit(PROMPT);
    let took = sent.elapsed();
    let finished = node.finish(status);
    assert_exit(&finished, 0);
    assert!(
        finished.stderr.contains("stopped before serving"),
        "{}",
        finished.stderr
    );
    eprintln!("SIG{signal} while claiming: exited 0 after {took:?}");
}

#[test]
fn a_signal_stops_a_node_waiting_for_a_held_etcd_pair_and_revokes_its_lease() {
    let etcd = EtcdCluster::start(1);
    let (a, b) = (temp_dir(), temp_dir());
    let node = |dir: &std::path::Path| {
        Serve::new(dir).args([
            "--etcd-endpoints",
            &etcd.endpoints(),
            "--worker-id",
            "0",
            "--lease-ttl-secs",
            "30",
            "--claim-timeout-secs",
            "120",
        ])
    };
    let holder = node(a.path()).start();
    let leases = || {
        let out = etcd.etcdctl(&["lease", "list"]);
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .skip(1)
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let before = leases();
    assert_eq!(before.len(), 1, "the holder's lease: {before:?}");
    for signal in ["TERM", "INT"] {
        let waiting = node(b.path()).spawn();
        stops_promptly(waiting, "claiming a worker id from etcd", signal);
        // The waiting node's lease is gone with it (not left to lapse after 30 s).
        assert_eq!(leases(), before, "after SIG{signal}");
    }
    assert_eq!(holder.get("/v1/id").status, 200, "the holder serves on");
    assert_exit(&holder.stop_with("TERM"), 0);
}

#[test]
fn a_signal_stops_a_node_that_cannot_reach_etcd() {
    let dir = temp_dir();
    for signal in ["TERM", "INT"] {
        let node = Serve::new(dir.path())
            .args(["--etcd-endpoints", "http://127.0.0.1:1"])
            .args(["--claim-timeout-secs", "120"])
            .spawn();
        stops_promptly(node, "claiming a worker id from etcd", signal);
    }
}

#[test]
fn a_signal_stops_a_node_with_a_wrong_zookeeper_identity() {
    use std::os::unix::fs::PermissionsExt;
    let zk = ZooKeeper::start();
    let secrets = temp_dir();
    let identity = |name: &str, line: &str| {
        let path = secrets.path().join(name);
        std::fs::write(&path, format!("{line}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        path
    };
    let (right, wrong) = (
        identity("zk-auth", "snowflake:zk-pass-7"),
        identity("zk-wrong", "snowflake:not-it"),
    );
    let (a, b) = (temp_dir(), temp_dir());
    // The fleet's node protects the path with its identity.
    let holder = zk_node_with_session(&zk, a.path(), 4000)
        .arg("--allow-cleartext-credentials")
        .arg("--zookeeper-auth-file")
        .arg(&right)
        .start();
    for signal in ["TERM", "INT"] {
        let stranger = zk_node_with_session(&zk, b.path(), 4000)
            .args(["--claim-timeout-secs", "120"])
            .arg("--allow-cleartext-credentials")
            .arg("--zookeeper-auth-file")
            .arg(&wrong)
            .spawn();
        stops_promptly(stranger, "registering a worker id in ZooKeeper", signal);
    }
    assert_eq!(holder.get("/v1/id").status, 200, "the holder serves on");
    assert_exit(&holder.stop_with("TERM"), 0);
}

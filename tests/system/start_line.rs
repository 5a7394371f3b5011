//! The line a node logs when it starts: a short summary (listeners, where the pair comes from,
//! the layout, the state directory, the coordinator), never a dump of the configuration and
//! never a secret. A newcomer found a 1,000-character debug dump there.

use crate::support::{Serve, temp_dir};
use crate::zookeeper_server::ZooKeeper;

/// The longest start-up line accepted (the summary of a fleet node is about 400 characters).
const MAX_LINE: usize = 600;

/// The `starting` line `log` holds.
fn starting_line(log: &str) -> String {
    log.lines()
        .find(|line| line.contains("starting"))
        .unwrap_or_else(|| panic!("no starting line in {log}"))
        .to_owned()
}

#[test]
fn a_node_starts_with_a_short_summary() {
    let dir = temp_dir();
    let node = Serve::new(dir.path())
        .args(["--datacenter-id", "3", "--worker-id", "7"])
        .start();
    let line = starting_line(&node.stderr());
    assert!(line.len() <= MAX_LINE, "{} characters: {line}", line.len());
    assert!(!line.contains("Config {"), "a debug dump: {line}");
    for part in [
        "http=127.0.0.1:0",
        "grpc=127.0.0.1:0",
        "thrift=127.0.0.1:0",
        "datacenter 3, worker 7 (static)",
        "epoch 1288834974657",
        &dir.path().display().to_string(),
        "coordinator=none",
    ] {
        assert!(line.contains(part), "no {part:?} in {line}");
    }
}

#[test]
fn a_fleet_node_names_its_coordinator_and_no_secret() {
    let zk = ZooKeeper::start();
    let secrets = temp_dir();
    let auth = secrets.path().join("zk-auth");
    std::fs::write(&auth, "snowflake:zk-start-secret\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&auth, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let dir = temp_dir();
    let node = Serve::new(dir.path())
        .args(["--zookeeper", &zk.connect_string()])
        .arg("--allow-cleartext-credentials")
        .arg("--zookeeper-auth-file")
        .arg(&auth)
        .start();
    let log = node.stderr();
    let line = starting_line(&log);
    assert!(line.len() <= MAX_LINE, "{} characters: {line}", line.len());
    for part in [
        "datacenter 0, the lowest free worker from zookeeper",
        &format!(
            "zookeeper {} (path /snowflake-servers, digest acl)",
            zk.connect_string()
        ),
    ] {
        assert!(line.contains(part), "no {part:?} in {line}");
    }
    assert!(!log.contains("zk-start-secret"), "{log}");
}

//! The ZooKeeper version the guarantee needs (README: 3.8.4 or later, 3.9.2 in 3.9): a node
//! registering with an older server warns at start, naming both versions, over plaintext and
//! over TLS. Debian's ZooKeeper (3.8.0, what these tests run) is older.

use crate::support::{Serve, ServeProcess, temp_dir};
use crate::zookeeper_server::ZooKeeper;
use std::time::{Duration, Instant};

/// The server's version as its `srvr` command says it, `(major, minor, patch)`.
fn server_version(zk: &ZooKeeper) -> (u32, u32, u32) {
    let answer = zk.four_letter("srvr");
    let line = answer
        .lines()
        .find_map(|l| l.strip_prefix("Zookeeper version: "))
        .unwrap_or_else(|| panic!("no version in {answer:?}"));
    let numbers: Vec<u32> = line
        .split(|c: char| !c.is_ascii_digit())
        .take(3)
        .map(|n| n.parse().expect("a number"))
        .collect();
    (numbers[0], numbers[1], numbers[2])
}

/// Whether the guarantee holds with `version`.
fn supported((major, minor, patch): (u32, u32, u32)) -> bool {
    match (major, minor) {
        (3, 8) => patch >= 4,
        (3, 9) => patch >= 2,
        _ => (major, minor) > (3, 9),
    }
}

/// Waits (at most 10 s) until `node` logged that it registered, and returns its stderr.
fn registered_log(node: &ServeProcess) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let log = node.stderr();
        if log.contains("registered the worker id in ZooKeeper") {
            return log;
        }
        assert!(Instant::now() < deadline, "never registered: {log}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Checks what `log` says about the server at `connect` whose version is `version`.
fn assert_version_verdict(log: &str, connect: &str, version: (u32, u32, u32)) {
    let (major, minor, patch) = version;
    let warning = format!(
        "ZooKeeper at {connect} is version {major}.{minor}.{patch}, below 3.8.4 (or 3.9.2 in 3.9)"
    );
    assert!(
        !log.contains("cannot read the ZooKeeper server's version"),
        "{log}"
    );
    if supported(version) {
        assert!(!log.contains("below 3.8.4"), "{log}");
    } else {
        assert!(log.contains(&warning), "no {warning:?} in {log}");
        assert!(log.contains("ZOOKEEPER-4785"), "{log}");
    }
}

#[test]
fn a_node_warns_about_a_zookeeper_older_than_the_guarantee_needs() {
    let zk = ZooKeeper::start();
    let version = server_version(&zk);
    let dir = temp_dir();
    let node = Serve::new(dir.path())
        .args(["--zookeeper", &zk.connect_string()])
        .start();
    let log = registered_log(&node);
    assert_version_verdict(&log, &zk.connect_string(), version);
    assert_eq!(
        node.get("/v1/id").status,
        200,
        "the warning does not stop it"
    );
}

#[test]
fn the_version_is_read_over_tls_too() {
    let certs = crate::certs::Certs::new();
    certs.issue("zk", "zookeeper", "ca", true, 30);
    certs.issue("client", "snowflake-node", "ca", false, 30);
    let key_and_cert = certs.path("zk.pem");
    let pem = [
        std::fs::read_to_string(certs.path("zk.key")).unwrap(),
        std::fs::read_to_string(certs.path("zk.crt")).unwrap(),
    ]
    .concat();
    std::fs::write(&key_and_cert, pem).unwrap();
    let zk = ZooKeeper::start_secure(&key_and_cert, &certs.path("ca.crt"));
    let version = server_version(&zk);
    let dir = temp_dir();
    let node = Serve::new(dir.path())
        .args(["--zookeeper", &zk.secure_connect_string()])
        .arg("--zookeeper-ca")
        .arg(certs.path("ca.crt"))
        .arg("--zookeeper-cert")
        .arg(certs.path("client.crt"))
        .arg("--zookeeper-key")
        .arg(certs.path("client.key"))
        .start();
    let log = registered_log(&node);
    assert_version_verdict(&log, &zk.secure_connect_string(), version);
}

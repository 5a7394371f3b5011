//! The test kit's real ZooKeeper server ([`snowflake_testkit::zookeeper`]), checked on its
//! own: znodes, a stopped server, persistent data across a kill and a restart.

pub use snowflake_testkit::zookeeper::*;
use std::time::{Duration, Instant};

#[test]
fn zookeeper_server_serves_znodes() {
    let started = Instant::now();
    let zk = ZooKeeper::start();
    eprintln!("zookeeper_server: ready after {:?}", started.elapsed());
    assert_eq!(zk.connect_string(), format!("127.0.0.1:{}", zk.port()));
    assert!(zk.dir().join("conf/zoo.cfg").is_file());
    assert_eq!(zk.four_letter("ruok"), "imok");
    let srvr = zk.four_letter("srvr");
    assert!(
        srvr.contains("Zookeeper version: 3.8") && srvr.contains("Mode: standalone"),
        "srvr: {srvr}"
    );
    assert!(zk.four_letter("mntr").contains("zk_version\t3.8"));
    assert!(zk.log().contains("binding to port"), "log:\n{}", zk.log());

    let cli_started = Instant::now();
    zk.create("/snowflake", "", false);
    eprintln!(
        "zookeeper_server: one zkCli call took {:?}",
        cli_started.elapsed()
    );
    zk.create("/snowflake/worker-1", "127.0.0.1:7609", false);
    zk.create("/snowflake/json", r#"{"a":1}"#, false);
    zk.create("/snowflake/spaced", r#"say "a b"  -c"#, false);
    zk.create("/snowflake/apostrophe", "it's", false);
    zk.create("/snowflake/dash", "-1", false);
    let got = Instant::now();
    assert_eq!(
        zk.get("/snowflake/worker-1").as_deref(),
        Some("127.0.0.1:7609")
    );
    eprintln!("zookeeper_server: one get took {:?}", got.elapsed());
    assert_eq!(zk.get("/snowflake/json").as_deref(), Some(r#"{"a":1}"#));
    assert_eq!(
        zk.get("/snowflake/spaced").as_deref(),
        Some(r#"say "a b"  -c"#)
    );
    assert_eq!(zk.get("/snowflake/apostrophe").as_deref(), Some("it's"));
    assert_eq!(zk.get("/snowflake/dash").as_deref(), Some("-1"));
    assert_eq!(
        zk.get("/snowflake").as_deref(),
        Some(""),
        "empty, not absent"
    );
    assert_eq!(zk.get("/nope"), None);
    assert_eq!(zk.get("/snowflake/nope"), None);
    assert_eq!(
        zk.children("/snowflake"),
        ["apostrophe", "dash", "json", "spaced", "worker-1"]
    );
    assert_eq!(zk.children("/snowflake/json"), Vec::<String>::new());
    assert_eq!(zk.children("/nope"), Vec::<String>::new());
    assert!(zk.children("/").contains(&"snowflake".to_owned()));
    assert_eq!(
        zk.ephemeral_owner("/snowflake/worker-1").as_deref(),
        Some("0x0")
    );
    assert_eq!(zk.ephemeral_owner("/nope"), None);

    // An ephemeral znode lives as long as the client's session: within one cli session it
    // has an owner, and it is gone once that session quits.
    let output = zk.cli(&[
        "create -e /snowflake/eph node-a",
        "stat /snowflake/eph",
        "get /snowflake/eph",
    ]);
    let owner = output
        .lines()
        .find_map(|l| l.strip_prefix("ephemeralOwner = "))
        .unwrap_or_else(|| panic!("no ephemeralOwner in:\n{output}"));
    assert!(owner.starts_with("0x") && owner != "0x0", "{output}");
    assert!(output.contains("Created /snowflake/eph"), "{output}");
    assert!(output.lines().any(|l| l == "node-a"), "{output}");
    assert_eq!(zk.get("/snowflake/eph"), None);
    zk.create("/snowflake/eph2", "x", true);
    assert_eq!(zk.get("/snowflake/eph2"), None);
    eprintln!("zookeeper_server: znode test took {:?}", started.elapsed());
}

#[test]
fn zookeeper_server_stopped_answers_nothing_then_recovers() {
    let started = Instant::now();
    let zk = ZooKeeper::start();
    zk.stop();
    let frozen = Instant::now();
    let answer = zk.try_four_letter("ruok", Duration::from_millis(500));
    assert!(answer.is_err(), "a stopped server answered {answer:?}");
    eprintln!(
        "zookeeper_server: ruok to a stopped server failed after {:?}: {}",
        frozen.elapsed(),
        answer.unwrap_err()
    );
    zk.cont();
    assert_eq!(zk.four_letter("ruok"), "imok");
    zk.create("/after", "cont", false);
    assert_eq!(zk.get("/after").as_deref(), Some("cont"));

    // Dropping a stopped server still kills it, promptly, and cleans up.
    zk.stop();
    let dir = zk.dir().to_path_buf();
    let dropping = Instant::now();
    drop(zk);
    assert!(
        dropping.elapsed() < Duration::from_secs(5),
        "dropping took {:?}",
        dropping.elapsed()
    );
    assert!(!dir.exists(), "{} is left behind", dir.display());
    eprintln!(
        "zookeeper_server: stop/cont test took {:?}",
        started.elapsed()
    );
}

#[test]
fn zookeeper_server_keeps_persistent_data_across_kill_and_restart() {
    let started = Instant::now();
    let mut zk = ZooKeeper::start();
    let port = zk.port();
    zk.create("/snowflake", "", false);
    zk.create("/snowflake/worker-7", "127.0.0.1:7609", false);
    zk.kill();
    assert!(
        zk.try_four_letter("ruok", Duration::from_secs(1)).is_err(),
        "a killed server answered"
    );
    let restart = Instant::now();
    zk.restart();
    eprintln!(
        "zookeeper_server: ready again {:?} after restart",
        restart.elapsed()
    );
    assert_eq!(zk.port(), port);
    assert_eq!(zk.four_letter("ruok"), "imok");
    assert_eq!(
        zk.get("/snowflake/worker-7").as_deref(),
        Some("127.0.0.1:7609")
    );
    assert_eq!(zk.children("/snowflake"), ["worker-7"]);

    // A restart of a running (even stopped) server kills it first.
    zk.stop();
    zk.restart();
    assert_eq!(zk.children("/snowflake"), ["worker-7"]);
    assert_eq!(
        zk.log().matches("binding to port").count(),
        3,
        "the log keeps every run:\n{}",
        zk.log()
    );
    eprintln!(
        "zookeeper_server: kill/restart test took {:?}",
        started.elapsed()
    );
}

//! `snowflake state show` and `snowflake state lower-mark` (SPEC §8), run as an operator would:
//! against a real state directory, a real etcd and a real ZooKeeper.

use crate::etcd_cluster::EtcdCluster;
use crate::support::{Serve, assert_exit, binary, libfaketime, now_ms, state_file, temp_dir};
use crate::zookeeper_fleet::zk_node_with_session;
use crate::zookeeper_server::ZooKeeper;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

/// 2046: a mark a clock 20 years ahead left behind.
const POISONED_MS: u64 = 2_426_000_000_000;

fn snowflake(args: &[&str]) -> Output {
    Command::new(binary())
        .args(args)
        .env_remove("SNOWFLAKE_STATE_DIR")
        .env_remove("SNOWFLAKE_ETCD_ENDPOINTS")
        .env_remove("SNOWFLAKE_ZOOKEEPER")
        .env("USER", "test-operator")
        .env_remove("SUDO_USER")
        .output()
        .expect("run snowflake")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn assert_status(output: &Output, code: i32) {
    assert_eq!(
        output.status.code(),
        Some(code),
        "stdout:\n{}\nstderr:\n{}",
        stdout(output),
        stderr(output)
    );
}

/// The command failed (exit status 1) with `needle` in its message.
fn assert_refused(output: &Output, needle: &str) {
    assert_status(output, 1);
    assert!(stderr(output).contains(needle), "{}", stderr(output));
}

/// Writes a state file for datacenter 0 worker 0 with `high_water_ms`, as a node would.
fn poison_local(dir: &Path, high_water_ms: u64) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("node-0-0.json"),
        serde_json::json!({
            "format": 1, "datacenter_id": 0, "worker_id": 0, "epoch_ms": 1_288_834_974_657_u64,
            "high_water_ms": high_water_ms, "kind": "reservation",
            "written_at_ms": high_water_ms - 3000, "pid": 1,
        })
        .to_string(),
    )
    .unwrap();
}

#[test]
fn state_show_prints_the_local_marks_in_text_and_json() {
    let dir = temp_dir();
    let state = dir.path().to_str().unwrap();
    let node = Serve::new(dir.path()).start();
    assert_eq!(node.get("/v1/id").status, 200);
    assert_exit(&node.stop_with("TERM"), 0);
    let mark_ms = state_file(dir.path(), 0, 0)["high_water_ms"]
        .as_u64()
        .unwrap();

    let text = snowflake(&["state", "show", "--state-dir", state]);
    assert_status(&text, 0);
    let shown = stdout(&text);
    assert!(shown.contains(&mark_ms.to_string()), "{shown}");
    assert!(shown.contains("graceful shutdown"), "{shown}");

    let json = snowflake(&["state", "show", "--state-dir", state, "--json"]);
    assert_status(&json, 0);
    let value: serde_json::Value = serde_json::from_str(&stdout(&json)).unwrap();
    assert_eq!(
        value["local"][0]["high_water_ms"].as_u64(),
        Some(mark_ms),
        "{value}"
    );
    assert_eq!(value["local"][0]["kind"], "shutdown", "{value}");
    assert!(value["fleet"].is_null(), "{value}");

    // The fleet's copy needs the pair.
    let refused = snowflake(&[
        "state",
        "show",
        "--state-dir",
        state,
        "--etcd-endpoints",
        "http://127.0.0.1:1",
    ]);
    assert_refused(&refused, "--datacenter-id and --worker-id");
}

#[test]
fn state_tools_check_the_pair_against_the_layout() {
    let dir = temp_dir();
    let state = dir.path().to_str().unwrap();
    let shown = |layout: &str, datacenter: &str, worker: &str| {
        snowflake(&[
            "--layout",
            layout,
            "state",
            "show",
            "--state-dir",
            state,
            "--datacenter-id",
            datacenter,
            "--worker-id",
            worker,
        ])
    };
    // js-safe has 4 datacenters of 16 workers: (4, 0) and (0, 16) are no pairs of it.
    assert_refused(
        &shown("js-safe", "4", "0"),
        "invalid --datacenter-id: invalid datacenter id: expected 0..=3, found 4",
    );
    assert_refused(
        &shown("js-safe", "0", "16"),
        "invalid --worker-id: invalid worker id: expected 0..=15, found 16",
    );
    assert_status(&shown("js-safe", "3", "15"), 0);
    assert_status(&shown("twitter", "31", "31"), 0);
    let lower = snowflake(&[
        "--layout",
        "js-safe",
        "state",
        "lower-mark",
        "--state-dir",
        state,
        "--datacenter-id",
        "5",
        "--worker-id",
        "0",
        "--to",
        "1",
        "--yes",
    ]);
    assert_refused(&lower, "expected 0..=3, found 5");
}

/// `state show` with the process's wall clock offset by libfaketime (`FAKETIME=+2d`), the boot
/// clock left real: as after a clock step while the node was down.
fn snowflake_with_clock(offset: &str, args: &[&str]) -> Output {
    Command::new(binary())
        .args(args)
        .env_remove("SNOWFLAKE_STATE_DIR")
        .env_remove("SNOWFLAKE_MAX_CLOCK_STEP_MS")
        .env("LD_PRELOAD", libfaketime())
        .env("FAKETIME", offset)
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .output()
        .expect("run snowflake")
}

#[test]
fn state_show_says_what_the_clock_check_at_the_next_start_will_find() {
    let dir = temp_dir();
    let state = dir.path().to_str().unwrap();
    let show_json = |output: Output| -> serde_json::Value {
        assert_status(&output, 0);
        serde_json::from_str(&stdout(&output)).unwrap()
    };
    let json_now = || {
        show_json(snowflake(&[
            "state",
            "show",
            "--state-dir",
            state,
            "--json",
        ]))
    };
    let text_now = || stdout(&snowflake(&["state", "show", "--state-dir", state]));

    // No record yet.
    let none = json_now();
    assert!(none["clock"].is_null(), "{none}");
    let text = text_now();
    assert!(text.contains("no clock record"), "{text}");

    // A node ran and stopped: the record is from this boot, and the clock agrees with it.
    let node = Serve::new(dir.path()).start();
    assert_eq!(node.get("/v1/id").status, 200);
    assert_exit(&node.stop_with("TERM"), 0);
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("clock.json")).unwrap())
            .unwrap();
    let shown = json_now();
    let clock = &shown["clock"];
    assert_eq!(clock["trusted_ms"], record["trusted_ms"], "{shown}");
    assert_eq!(clock["pid"], record["pid"], "{shown}");
    assert_eq!(clock["this_boot"], true, "{shown}");
    assert_eq!(clock["start_sees_step"], false, "{shown}");
    let ahead = clock["ahead_ms"].as_i64().unwrap();
    assert!(ahead.abs() < 1000, "the clock has not moved: {shown}");
    let text = text_now();
    assert!(text.contains("a start now trusts the clock"), "{text}");

    // The wall clock stepped 5 s ahead (the boot clock did not): a start would see the step.
    let stepped = show_json(snowflake_with_clock(
        "+5",
        &["state", "show", "--state-dir", state, "--json"],
    ));
    let ahead = stepped["clock"]["ahead_ms"].as_i64().unwrap();
    assert!((4000..6000).contains(&ahead), "{stepped}");
    assert_eq!(stepped["clock"]["start_sees_step"], true, "{stepped}");
    // ... unless the node allows steps that large.
    let allowed = show_json(snowflake_with_clock(
        "+5",
        &[
            "state",
            "show",
            "--state-dir",
            state,
            "--json",
            "--max-clock-step-ms",
            "60000",
        ],
    ));
    assert_eq!(allowed["clock"]["start_sees_step"], false, "{allowed}");
    // Two days: never trusted automatically; the text says what the operator can do.
    let text = stdout(&snowflake_with_clock(
        "+2d",
        &["state", "show", "--state-dir", state],
    ));
    assert!(
        text.contains("more than a day") && text.contains("remove") && text.contains("clock.json"),
        "{text}"
    );

    // A record from an earlier boot is not compared.
    let mut earlier = record.clone();
    earlier["boot_id"] = "00000000-0000-0000-0000-000000000000".into();
    std::fs::write(dir.path().join("clock.json"), earlier.to_string()).unwrap();
    let shown = json_now();
    assert_eq!(shown["clock"]["this_boot"], false, "{shown}");
    assert!(shown["clock"]["ahead_ms"].is_null(), "{shown}");
    let text = text_now();
    assert!(text.contains("earlier boot"), "{text}");

    // A record of this boot dated at the end of time: shown, not a crash.
    let mut far = record.clone();
    far["trusted_ms"] = u64::MAX.into();
    std::fs::write(dir.path().join("clock.json"), far.to_string()).unwrap();
    let shown = json_now();
    assert_eq!(shown["clock"]["ahead_ms"], i64::MIN, "{shown}");
    assert!(text_now().contains("clock record: trusted 18446744073709551615"));

    // An unusable record is reported, not fatal (the node does not refuse to start on it either).
    std::fs::write(dir.path().join("clock.json"), "{ not json").unwrap();
    let shown = json_now();
    let error = shown["clock"]["error"].as_str().unwrap();
    assert!(
        error.contains("clock.json") && error.contains("not a clock record"),
        "{shown}"
    );
    assert_eq!(shown["local"].as_array().unwrap().len(), 1, "{shown}");

    // A bad --max-clock-step-ms is an error naming it.
    let bad = snowflake(&[
        "state",
        "show",
        "--state-dir",
        state,
        "--max-clock-step-ms",
        "-1",
    ]);
    assert_refused(&bad, "max-clock-step-ms");
}

#[test]
fn state_lower_mark_is_refused_while_a_node_runs_then_lowers_a_poisoned_local_mark() {
    let dir = temp_dir();
    let state_dir = dir.path().join("state");
    let state = state_dir.to_str().unwrap();
    let now = now_ms().to_string();
    let lower = |yes: bool| {
        let mut args = vec![
            "state",
            "lower-mark",
            "--state-dir",
            state,
            "--datacenter-id",
            "0",
            "--worker-id",
            "0",
            "--to",
            &now,
        ];
        if yes {
            args.push("--yes");
        }
        snowflake(&args)
    };

    // A running node holds the directory's lock.
    let node = Serve::new(&state_dir).start();
    assert_eq!(node.get("/v1/id").status, 200);
    let refused = lower(true);
    assert_refused(&refused, "in use by another snowflake process");
    assert_exit(&node.stop_with("TERM"), 0);

    // A mark 20 years ahead: the node would wait for it.
    poison_local(&state_dir, POISONED_MS);
    let unconfirmed = lower(false);
    assert_refused(&unconfirmed, "--yes");
    assert_eq!(
        state_file(&state_dir, 0, 0)["high_water_ms"].as_u64(),
        Some(POISONED_MS)
    );

    let lowered = lower(true);
    assert_status(&lowered, 0);
    assert!(
        stdout(&lowered).contains("lowered the mark from 2426000000000"),
        "{}",
        stdout(&lowered)
    );
    let mark = state_file(&state_dir, 0, 0);
    assert_eq!(
        mark["high_water_ms"].as_u64(),
        Some(now.parse().unwrap()),
        "{mark}"
    );
    let log = std::fs::read_to_string(state_dir.join("lower-mark.log")).unwrap();
    assert!(log.contains("by test-operator@"), "{log}");

    // Lowering again to the same time: nothing to do, said so.
    let again = lower(true);
    assert_status(&again, 0);
    assert!(
        stdout(&again).contains("left as it is"),
        "{}",
        stdout(&again)
    );

    // The node opens at once.
    let node = Serve::new(&state_dir).start();
    node.poll("/readyz", Duration::from_secs(5), |r| r.status == 200);
    assert_exit(&node.stop_with("TERM"), 0);
}

// Found by review: a mark that a wrong clock wrote comes with a clock.json dated as far ahead
// (the run trusted that clock). Lowering the mark left clock.json as it was, so the next start on
// the same boot took its time for trusted time: any later forward step short of it was trusted
// at once, and poisoned the mark again.
#[test]
fn lowering_a_poisoned_mark_also_drops_the_clock_record_the_wrong_clock_left() {
    let clock = crate::support::FakeClock::new();
    let dir = temp_dir();
    let state_dir = dir.path().join("state");
    let serve = || {
        Serve::new(&state_dir)
            .args(["--reserve-ms", "1000"])
            .faketime(&clock)
    };
    // Wrong since before the first start: nothing local can tell, the clock is trusted.
    clock.set("+20y");
    let node = serve().start();
    node.poll("/readyz", Duration::from_secs(10), |r| r.status == 200);
    assert_eq!(node.get("/v1/id").status, 200);
    assert_exit(&node.stop_with("TERM"), 0);
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(state_dir.join("clock.json")).unwrap())
            .unwrap();
    let twenty_years_ahead = now_ms() + 19 * 365 * 86_400_000;
    assert!(
        record["trusted_ms"].as_u64().unwrap() > twenty_years_ahead,
        "{record}"
    );

    clock.set("+0");
    let now = now_ms().to_string();
    let state = state_dir.to_str().unwrap();
    let lowered = snowflake(&[
        "state",
        "lower-mark",
        "--state-dir",
        state,
        "--datacenter-id",
        "0",
        "--worker-id",
        "0",
        "--to",
        &now,
        "--yes",
    ]);
    assert_status(&lowered, 0);

    let node = serve().start();
    node.poll("/readyz", Duration::from_secs(10), |r| r.status == 200);
    // Ten years ahead: a step like any other, not trusted at once.
    clock.set("+10y");
    std::thread::sleep(Duration::from_millis(1500));
    let unready = node.get("/readyz");
    let refused = node.get("/v1/id");
    clock.set("+0");
    assert_eq!(unready.status, 503, "a 10-year step trusted: {unready:?}");
    assert!(unready.body.contains("stepped forward"), "{unready:?}");
    assert_eq!(
        refused.status, 503,
        "an ID dated 10 years ahead: {refused:?}"
    );
    node.poll("/readyz", Duration::from_secs(5), |r| r.status == 200);
    assert_exit(&node.stop_with("TERM"), 0);
    let mark = state_file(&state_dir, 0, 0)["high_water_ms"]
        .as_u64()
        .unwrap();
    assert!(
        mark < now_ms() + 60_000,
        "the mark is dated ahead again: {}",
        snowflake_core::format_unix_ms(mark)
    );
    assert!(
        stdout(&lowered).contains("clock.json"),
        "says what it did with the clock record: {}",
        stdout(&lowered)
    );
}

#[test]
fn state_tools_read_and_lower_the_etcd_copy_only_while_nobody_holds_the_pair() {
    let etcd = EtcdCluster::start(1);
    let dir = temp_dir();
    let node_dir = dir.path().join("node");
    let state = node_dir.to_str().unwrap();
    let endpoints = etcd.endpoints();
    let fleet = |extra: &[&str]| {
        let mut args = vec!["state"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&[
            "--state-dir",
            state,
            "--etcd-endpoints",
            &endpoints,
            "--datacenter-id",
            "2",
            "--worker-id",
            "5",
        ]);
        snowflake(&args)
    };
    let poisoned = serde_json::json!({
        "high_water_ms": POISONED_MS, "epoch_ms": 1_288_834_974_657_u64, "lease": "1",
    })
    .to_string();
    let put = etcd.etcdctl(&["put", "/snowflake/marks/2/5", &poisoned]);
    assert!(put.status.success(), "{put:?}");

    let shown = fleet(&["show", "--json"]);
    assert_status(&shown, 0);
    let value: serde_json::Value = serde_json::from_str(&stdout(&shown)).unwrap();
    assert_eq!(
        value["fleet"]["high_water_ms"].as_u64(),
        Some(POISONED_MS),
        "{value}"
    );
    assert_eq!(value["fleet"]["service"], "etcd");
    assert!(value["fleet"]["holder"].is_null(), "{value}");

    // A node pinned to the pair waits for the poisoned mark; while it holds the pair, the
    // fleet's copy cannot be lowered.
    let node = Serve::new(&node_dir)
        .args(["--etcd-endpoints", &endpoints, "--lease-ttl-secs", "3"])
        .args(["--datacenter-id", "2", "--worker-id", "5"])
        .start();
    let waiting = node.get("/v1/id");
    assert_eq!(waiting.status, 503, "{waiting:?}");
    let now = now_ms().to_string();
    // From the node's own state directory the lock refuses; from elsewhere, the holder does.
    let refused = fleet(&["lower-mark", "--to", &now, "--yes"]);
    assert_refused(&refused, "in use by another snowflake process");
    let elsewhere = temp_dir();
    let refused = snowflake(&[
        "state",
        "lower-mark",
        "--to",
        &now,
        "--yes",
        "--state-dir",
        elsewhere.path().to_str().unwrap(),
        "--etcd-endpoints",
        &endpoints,
        "--datacenter-id",
        "2",
        "--worker-id",
        "5",
    ]);
    assert_status(&refused, 1);
    let message = stderr(&refused);
    assert!(
        message.contains("etcd") && message.contains("held"),
        "{message}"
    );
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&etcd.get("/snowflake/marks/2/5").unwrap())
            .unwrap()["high_water_ms"]
            .as_u64(),
        Some(POISONED_MS)
    );
    assert_exit(&node.stop_with("TERM"), 0);

    // The node's graceful stop left the poisoned floor in its own state directory too: both
    // copies are lowered.
    let lowered = fleet(&["lower-mark", "--to", &now, "--yes"]);
    assert_status(&lowered, 0);
    let said = stdout(&lowered);
    assert!(
        said.contains("etcd /snowflake/marks/2/5: lowered the mark from 2426000000000"),
        "{said}"
    );
    assert!(said.contains("local "), "{said}");
    let text = etcd.get("/snowflake/marks/2/5").unwrap();
    let mark: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        mark["high_water_ms"].as_u64(),
        Some(now.parse().unwrap()),
        "{mark}"
    );
    assert!(
        mark["lowered"]["by"]
            .as_str()
            .unwrap()
            .starts_with("test-operator@"),
        "{mark}"
    );

    // The pair opens again at once.
    let node = Serve::new(&node_dir)
        .args(["--etcd-endpoints", &endpoints, "--lease-ttl-secs", "3"])
        .args(["--datacenter-id", "2", "--worker-id", "5"])
        .start();
    node.poll("/readyz", Duration::from_secs(10), |r| r.status == 200);
    assert_exit(&node.stop_with("TERM"), 0);
}

#[test]
fn state_show_reads_the_zookeeper_copy_with_its_holder() {
    let zk = ZooKeeper::start();
    let dir = temp_dir();
    let node = zk_node_with_session(&zk, &dir.path().join("node"), 6000)
        .args(["--worker-id", "4"])
        .start();
    assert_eq!(node.get("/v1/id").status, 200);
    let shown = snowflake(&[
        "state",
        "show",
        "--json",
        "--state-dir",
        dir.path().to_str().unwrap(),
        "--zookeeper",
        &zk.connect_string(),
        "--datacenter-id",
        "0",
        "--worker-id",
        "4",
    ]);
    assert_status(&shown, 0);
    let value: serde_json::Value = serde_json::from_str(&stdout(&shown)).unwrap();
    assert_eq!(value["fleet"]["service"], "zookeeper", "{value}");
    assert!(
        value["fleet"]["high_water_ms"].as_u64().unwrap() > 0,
        "{value}"
    );
    assert!(value["fleet"]["holder"].is_string(), "{value}");
    assert_exit(&node.stop_with("TERM"), 0);
}

#[test]
fn state_show_says_none_for_a_pair_without_a_mark_in_zookeeper() {
    // Found by a newcomer: a worker nobody ever registered showed a mark of 0 dated 1970.
    let zk = ZooKeeper::start();
    let dir = temp_dir();
    let servers = zk.connect_string();
    let show = |json: bool| {
        let mut args = vec!["state", "show"];
        if json {
            args.push("--json");
        }
        args.extend([
            "--state-dir",
            dir.path().to_str().unwrap(),
            "--zookeeper",
            &servers,
            "--datacenter-id",
            "0",
            "--worker-id",
            "9",
        ]);
        let shown = snowflake(&args);
        assert_status(&shown, 0);
        stdout(&shown)
    };
    let text = show(false);
    assert!(
        text.contains("zookeeper /snowflake-servers-marks/9\n  high-water mark none"),
        "{text}"
    );
    assert!(text.contains("not held"), "{text}");
    assert!(!text.contains("1970"), "{text}");
    let value: serde_json::Value = serde_json::from_str(&show(true)).unwrap();
    assert_eq!(value["fleet"]["high_water_ms"], 0, "{value}");
    assert!(value["fleet"]["time"].is_null(), "{value}");
}

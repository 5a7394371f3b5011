//! The real `snowflake` binary, run as a user would (SPEC §5).

use assert_cmd::Command;
use predicates::prelude::*;

fn snowflake() -> Command {
    let mut cmd = Command::cargo_bin("snowflake").unwrap();
    cmd.env_remove("SNOWFLAKE_EPOCH_MS");
    cmd
}

/// Runs with bad input and checks the contract: non-zero exit, nothing on stdout, exactly one
/// line on stderr containing `needle`.
fn fails_with(args: &[&str], needle: &str) {
    let output = snowflake().args(args).output().unwrap();
    assert!(!output.status.success(), "{args:?} succeeded");
    assert!(
        output.stdout.is_empty(),
        "{args:?} wrote to stdout: {:?}",
        String::from_utf8_lossy(&output.stdout)
    );
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(
        stderr.lines().count(),
        1,
        "{args:?}: not one line: {stderr:?}"
    );
    assert!(stderr.starts_with("error: "), "{args:?}: {stderr:?}");
    assert!(
        stderr.contains(needle),
        "{args:?}: {stderr:?} lacks {needle:?}"
    );
}

#[test]
fn encodes_the_worked_example() {
    snowflake()
        .args([
            "encode",
            "--timestamp-ms",
            "1700000000000",
            "--datacenter-id",
            "7",
            "--worker-id",
            "13",
            "--sequence",
            "4095",
        ])
        .assert()
        .success()
        .stdout("1724551110457221119\n");
}

#[test]
fn decodes_the_worked_example_as_json() {
    snowflake().args(["decode", "--json", "1724551110457221119"]).assert().success().stdout(
        "{\"id\":\"1724551110457221119\",\"timestamp_ms\":1700000000000,\"time\":\"2023-11-14T22:13:20.000Z\",\
         \"datacenter_id\":7,\"worker_id\":13,\"sequence\":4095}\n",
    );
}

#[test]
fn decodes_several_ids_as_text() {
    snowflake().args(["decode", "1724551110457221119", "0"]).assert().success().stdout(
        "1724551110457221119 timestamp_ms=1700000000000 time=2023-11-14T22:13:20.000Z datacenter_id=7 worker_id=13 sequence=4095\n\
         0 timestamp_ms=1288834974657 time=2010-11-04T01:42:54.657Z datacenter_id=0 worker_id=0 sequence=0\n",
    );
}

#[test]
fn decode_json_is_one_object_per_line() {
    let output = snowflake()
        .args(["decode", "--json", "0", "9223372036854775807"])
        .output()
        .unwrap();
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    let objects: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(objects.len(), 2);
    assert_eq!(objects[0]["time"], "2010-11-04T01:42:54.657Z");
    assert_eq!(objects[1]["id"], "9223372036854775807");
    assert_eq!(objects[1]["time"], "2080-07-10T17:30:30.208Z");
    assert_eq!(objects[1]["sequence"], 4095);
}

#[test]
fn next_prints_fresh_increasing_ids_for_node_zero_by_default() {
    let output = snowflake()
        .args(["next", "--count", "10000"])
        .output()
        .unwrap();
    assert!(output.status.success());
    let ids: Vec<u64> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(ids.len(), 10_000);
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    assert!(
        ids.iter().all(|id| (id >> 12) & 0x3FF == 0),
        "datacenter 0, worker 0"
    );
}

#[test]
fn next_uses_the_given_node() {
    let output = snowflake()
        .args(["next", "--datacenter-id", "3", "--worker-id", "31"])
        .output()
        .unwrap();
    let id: u64 = String::from_utf8(output.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(((id >> 17) & 0x1F, (id >> 12) & 0x1F), (3, 31));
}

#[test]
fn layout_prints_the_rollover_date() {
    snowflake()
        .arg("layout")
        .assert()
        .success()
        .stdout(predicate::str::contains("epoch: 2010-11-04T01:42:54.657Z"))
        .stdout(predicate::str::contains(
            "rollover: 2080-07-10T17:30:30.208Z",
        ))
        .stdout(predicate::str::contains("nodes: 1024"))
        .stdout(predicate::str::contains(
            "max_ids_per_second_per_node: 4096000",
        ));
}

#[test]
fn another_epoch_is_selected_with_epoch_ms() {
    snowflake()
        .args(["decode", "--json", "--epoch-ms", "1600000000000", "4194304"])
        .assert()
        .success()
        .stdout(predicate::str::contains("\"timestamp_ms\":1600000000001"));
    snowflake()
        .args([
            "--epoch-ms",
            "0",
            "encode",
            "--timestamp-ms",
            "1",
            "--datacenter-id",
            "0",
            "--worker-id",
            "0",
            "--sequence",
            "0",
        ])
        .assert()
        .success()
        .stdout("4194304\n");
    // The environment variable works too.
    snowflake()
        .env("SNOWFLAKE_EPOCH_MS", "0")
        .args(["decode", "4194304"])
        .assert()
        .success()
        .stdout(predicate::str::contains("timestamp_ms=1 "));
}

#[test]
fn bad_input_is_one_line_on_stderr_and_nothing_on_stdout() {
    let encode = |t: &str, d: &str, w: &str, s: &str| {
        vec![
            "encode",
            "--timestamp-ms",
            t,
            "--datacenter-id",
            d,
            "--worker-id",
            w,
            "--sequence",
            s,
        ]
        .into_iter()
        .map(str::to_owned)
        .collect::<Vec<_>>()
    };
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            encode("1700000000000", "32", "0", "0"),
            "invalid datacenter id: expected 0..=31, found 32",
        ),
        (
            encode("1700000000000", "0", "32", "0"),
            "invalid worker id: expected 0..=31, found 32",
        ),
        (
            encode("1700000000000", "0", "0", "4096"),
            "invalid sequence: expected 0..=4095, found 4096",
        ),
        (
            encode("1700000000000", "-1", "0", "0"),
            "invalid datacenter id: expected 0..=31, found -1",
        ),
        (
            encode("1288834974656", "0", "0", "0"),
            "expected 1288834974657..=3487858230208, found 1288834974656",
        ),
        (
            encode("3487858230209", "0", "0", "0"),
            "expected 1288834974657..=3487858230208, found 3487858230209",
        ),
        (
            encode("soon", "0", "0", "0"),
            "invalid timestamp (unix ms): expected a decimal integer",
        ),
    ];
    for (args, needle) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        fails_with(&args, needle);
    }
    fails_with(
        &["decode", "-1"],
        "invalid snowflake id: expected 0..=9223372036854775807, found -1",
    );
    fails_with(
        &["decode", "9223372036854775808"],
        "found 9223372036854775808",
    );
    fails_with(&["decode", "abc"], "expected a decimal integer");
    // A bad ID anywhere means nothing is printed, not even the good ones before it.
    fails_with(&["decode", "1", "2", "x"], "found \"x\"");
    fails_with(&["decode"], "required");
    fails_with(
        &["next", "--count", "0"],
        "invalid count: expected 1..=100000000, found 0",
    );
    fails_with(
        &["next", "--count", "-3"],
        "invalid count: expected 1..=100000000, found -3",
    );
    fails_with(&["next", "--count", "lots"], "invalid count");
    fails_with(
        &["next", "--worker-id", "99"],
        "invalid worker id: expected 0..=31, found 99",
    );
    fails_with(
        &["encode", "--timestamp-ms", "1700000000000"],
        "--datacenter-id",
    );
    fails_with(
        &["next", "--epoch-ms", "99999999999999"],
        "is in the future",
    );
    fails_with(&["frobnicate"], "unrecognized subcommand 'frobnicate'");
    fails_with(&["next", "--bogus"], "unexpected argument '--bogus'");
}

#[test]
fn every_subcommand_has_help() {
    for sub in ["encode", "decode", "next", "layout"] {
        snowflake()
            .args([sub, "--help"])
            .assert()
            .success()
            .stdout(predicate::str::contains("Usage: snowflake"));
    }
    snowflake()
        .arg("--help")
        .assert()
        .success()
        .stdout(predicate::str::contains("encode"));
    snowflake().arg("--version").assert().success();
}

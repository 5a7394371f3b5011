//! The real `snowflake` binary, run as a user would (SPEC §5).

use assert_cmd::Command;
use predicates::prelude::*;

fn snowflake() -> Command {
    let mut cmd = Command::cargo_bin("snowflake").unwrap();
    cmd.env_remove("SNOWFLAKE_EPOCH_MS");
    cmd.env_remove("SNOWFLAKE_LAYOUT");
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
    for sub in ["encode", "decode", "next", "layout", "range"] {
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

/// stdout of a successful run.
fn stdout_of(args: &[&str]) -> String {
    let output = snowflake().args(args).output().unwrap();
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn layout_shows_js_safe_and_custom_widths() {
    let text = stdout_of(&["--layout", "js-safe", "layout"]);
    for line in [
        "name: js-safe\n",
        "bits: timestamp 41 / datacenter 2 / worker 4 / sequence 6\n",
        "shifts: timestamp 12 / datacenter 10 / worker 6\n",
        "max_id: 9007199254740991\n",
        "ids_fit_js_number: true\n",
        "rollover: 2080-07-10T17:30:30.208Z\n",
        "nodes: 64\n",
        "max_ids_per_second_per_node: 64000\n",
    ] {
        assert!(text.contains(line), "{line:?} not in {text}");
    }
    // The default is exactly Twitter's, with its name.
    let text = stdout_of(&["layout"]);
    assert!(text.starts_with("name: twitter\n"), "{text}");
    assert!(text.contains("max_id: 9223372036854775807\n"));
    assert!(text.contains("shifts: timestamp 22 / datacenter 17 / worker 12\n"));
    // --json, with the widths' record and the derived facts; the environment variable works.
    let json: serde_json::Value = serde_json::from_str(
        &String::from_utf8(
            snowflake()
                .env("SNOWFLAKE_LAYOUT", "custom:40,3,5,10")
                .args(["layout", "--json"])
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(json["name"], "custom:40,3,5,10");
    assert_eq!(json["max_id"], ((1u64 << 58) - 1).to_string());
    assert_eq!(json["nodes"], 256);
    assert_eq!(json["max_ids_per_second_per_node"], 1_024_000);
    assert_eq!(json["timestamp_shift"], 18);
    assert_eq!(json["ids_fit_js_number"], false);
}

#[test]
fn layout_warns_when_fewer_than_ten_years_are_left() {
    // 38 timestamp bits (about 8.7 years) from an epoch a year ago.
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let epoch = (now_ms - 365 * 86_400_000).to_string();
    let output = snowflake()
        .args([
            "--layout",
            "custom:38,5,5,12",
            "--epoch-ms",
            &epoch,
            "layout",
        ])
        .output()
        .unwrap();
    assert!(output.status.success());
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.starts_with("warning: the layout's timestamp runs out at ")
            && stderr.contains("years from now, fewer than 10"),
        "{stderr}"
    );
    // Twitter's layout has more than 50 years left: no warning.
    let output = snowflake().arg("layout").output().unwrap();
    assert!(output.stderr.is_empty());
}

#[test]
fn bad_layouts_are_refused_naming_the_rule() {
    fails_with(
        &["--layout", "js_safe", "layout"],
        "--layout (or SNOWFLAKE_LAYOUT): invalid layout: expected twitter, js-safe or \
         custom:T,D,W,S",
    );
    fails_with(
        &["--layout", "custom:29,5,5,12", "layout"],
        "invalid layout custom:29,5,5,12: the timestamp needs at least 30 bits",
    );
    fails_with(
        &["--layout", "custom:41,0,0,12", "next"],
        "the datacenter and worker ids need at least 1 bit together, found 0+0",
    );
    // A layout whose last millisecond has passed.
    fails_with(
        &["--layout", "custom:30,5,5,12", "--epoch-ms", "0", "layout"],
        "invalid layout: custom:30,5,5,12 with epoch 0 ran out at 1970-01-13T10:15:41.823Z",
    );
}

#[test]
fn encode_decode_and_next_follow_the_layout() {
    // js-safe: the encoded ID is the fields side by side in 53 bits.
    let id = stdout_of(&[
        "--layout",
        "js-safe",
        "encode",
        "--timestamp-ms",
        "1700000000000",
        "--datacenter-id",
        "3",
        "--worker-id",
        "15",
        "--sequence",
        "63",
    ]);
    let expected = ((1_700_000_000_000u64 - 1_288_834_974_657) << 12) | (3 << 10) | (15 << 6) | 63;
    assert_eq!(id, format!("{expected}\n"));
    assert_eq!(
        stdout_of(&["--layout", "js-safe", "decode", "--json", id.trim()]),
        format!(
            "{{\"id\":\"{expected}\",\"timestamp_ms\":1700000000000,\"time\":\
             \"2023-11-14T22:13:20.000Z\",\"datacenter_id\":3,\"worker_id\":15,\"sequence\":63}}\n"
        )
    );
    for (field, value, range) in [
        ("--datacenter-id", "4", "expected 0..=3, found 4"),
        ("--worker-id", "16", "expected 0..=15, found 16"),
        ("--sequence", "64", "expected 0..=63, found 64"),
    ] {
        let mut args = vec![
            "--layout",
            "js-safe",
            "encode",
            "--timestamp-ms",
            "1700000000000",
            "--datacenter-id",
            "0",
            "--worker-id",
            "0",
            "--sequence",
            "0",
        ];
        let at = args.iter().position(|a| *a == field).unwrap();
        args[at + 1] = value;
        fails_with(&args, range);
    }
    // Decode refuses an ID above the layout's largest, printing nothing.
    fails_with(
        &["--layout", "js-safe", "decode", "1", "9007199254740992"],
        "invalid snowflake id: expected 0..=9007199254740991, found 9007199254740992",
    );
    // next: 1000 IDs of one js-safe node, increasing, within 53 bits, across milliseconds.
    let text = stdout_of(&[
        "--layout",
        "js-safe",
        "next",
        "-n",
        "1000",
        "--datacenter-id",
        "2",
        "--worker-id",
        "9",
    ]);
    let ids: Vec<u64> = text.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(ids.len(), 1000);
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    assert!(
        ids.iter()
            .all(|&id| id < 1 << 53 && (id >> 6) & 0x3F == (2 << 4) | 9)
    );
    fails_with(
        &["--layout", "js-safe", "next", "--worker-id", "16"],
        "invalid worker id: expected 0..=15, found 16",
    );
}

#[test]
fn range_prints_the_ids_of_a_time_window() {
    assert_eq!(
        stdout_of(&["range", "--from", "1700000000000", "--to", "1700000000999"]),
        "min_id: 1724551110456246272\nmax_id: 1724551114650550271\n"
    );
    assert_eq!(
        stdout_of(&[
            "range",
            "--from",
            "2023-11-14T22:13:20Z",
            "--to",
            "2023-11-14T23:13:20.999+01:00",
            "--json"
        ]),
        "{\"min_id\":\"1724551110456246272\",\"max_id\":\"1724551114650550271\"}\n"
    );
    let js = stdout_of(&[
        "--layout",
        "js-safe",
        "range",
        "--from",
        "1700000000000",
        "--to",
        "1700000000000",
    ]);
    let lo = (1_700_000_000_000u64 - 1_288_834_974_657) << 12;
    assert_eq!(js, format!("min_id: {lo}\nmax_id: {}\n", lo + 4095));
    fails_with(
        &["range", "--from", "1700000000001", "--to", "1700000000000"],
        "invalid range: from 1700000000001 is after to 1700000000000 (unix ms)",
    );
    fails_with(
        &["range", "--from", "5", "--to", "1700000000000"],
        "invalid from (unix ms): expected 1288834974657..=3487858230208, found 5",
    );
    fails_with(
        &["range", "--from", "1700000000000", "--to", "someday"],
        "invalid to: expected unix milliseconds or an RFC 3339 time",
    );
}

#[test]
fn serve_refuses_a_bad_layout_before_binding() {
    // (Before layouts were recorded, serve refused every layout but twitter here.)
    let output = snowflake()
        .env("SNOWFLAKE_LAYOUT", "custom:41,5,5,13")
        .args(["serve", "--http-addr", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty());
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.starts_with(
            "error: invalid --layout (or SNOWFLAKE_LAYOUT): invalid layout custom:41,5,5,13: the \
             widths must sum to at most 63"
        ),
        "{stderr}"
    );
}

/// `snowflake bench --layout`: every answered ID is checked against the layout's largest, so a
/// Twitter node's IDs are bad responses for a js-safe bench, and good ones for a Twitter bench.
#[test]
fn bench_checks_ids_against_the_layout() {
    let dir = crate::support::temp_dir();
    let server = crate::support::Serve::new(dir.path()).start();
    let bench = |layout: &str| {
        let out = std::process::Command::new(crate::support::binary())
            .args(["--layout", layout, "bench", "--addr"])
            .arg(server.addr().to_string())
            .args(["-c", "1", "--requests", "20", "--json", "--no-progress"])
            .output()
            .unwrap();
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("{e}: {}", String::from_utf8_lossy(&out.stderr));
        });
        (out.status.code(), report)
    };
    let (code, report) = bench("twitter");
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["errors_total"], 0, "{report}");
    let (code, report) = bench("js-safe");
    assert_eq!(code, Some(1), "{report}");
    assert_eq!(report["errors"]["bad_response"], 20, "{report}");
    crate::support::assert_exit(&server.stop_with("TERM"), 0);
}

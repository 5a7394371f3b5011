//! `snowflake audit` (SPEC §8) run as a user would: files and stdin, decimal and JSON lines,
//! the exit statuses, and a spilled sort that finds the same as an in-memory one.

use crate::support::{binary, temp_dir};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

const T: u64 = 1_790_000_000_000;

/// `snowflake audit ARGS` with `stdin` as its input.
fn audit(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(binary())
        .arg("audit")
        .args(args)
        .env_remove("SNOWFLAKE_EPOCH_MS")
        .env_remove("SNOWFLAKE_LAYOUT")
        .env_remove("SNOWFLAKE_AUDIT_TEMP_DIR")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run snowflake audit");
    let mut input = child.stdin.take().unwrap();
    let text = stdin.to_owned();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(text.as_bytes());
    });
    let output = child.wait_with_output().unwrap();
    writer.join().unwrap();
    output
}

fn status(output: &Output) -> i32 {
    output.status.code().expect("exited")
}

fn json(output: &Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: stdout {:?}, stderr {:?}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

fn id(ms: u64, datacenter: u64, worker: u64, sequence: u64) -> u64 {
    snowflake_core::Layout::TWITTER
        .encode(ms, datacenter, worker, sequence)
        .unwrap()
        .as_u64()
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn a_clean_input_exits_0_and_counts_per_node() {
    let text = format!(
        "{}\n{}\n{}\n",
        id(T, 1, 2, 0),
        id(T, 1, 2, 1),
        id(T + 9, 3, 4, 0)
    );
    let out = audit(&["--json"], &text);
    assert_eq!(status(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    let report = json(&out);
    assert_eq!(
        (
            &report["ids"],
            &report["unique"],
            &report["duplicates"],
            &report["invalid"]
        ),
        (&3.into(), &3.into(), &0.into(), &0.into())
    );
    assert_eq!(report["nodes"][0]["datacenter_id"], 1);
    assert_eq!(report["nodes"][0]["ids"], 2);
    assert_eq!(report["nodes"][1]["worker_id"], 4);
    assert_eq!(report["time_range"]["first_ms"], T);
    assert_eq!(report["time_range"]["last_ms"], T + 9);
    assert_eq!(report["time_range"]["last"], "2026-09-21T14:13:20.009Z");
    assert_eq!(report["inputs"], serde_json::json!(["-"]));
    // The same as text, from a file and from "-".
    let dir = temp_dir();
    let file = write(dir.path(), "ids.txt", &text);
    let out = audit(&[&file, "-"], "");
    assert_eq!(status(&out), 0);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with("OK: no duplicate, no invalid line\n"),
        "{text}"
    );
    assert!(text.contains("ids:         3\n"), "{text}");
}

#[test]
fn duplicates_across_files_name_both_copies_and_exit_1() {
    let dir = temp_dir();
    let dup = id(T, 0, 7, 5);
    let a = write(dir.path(), "a.txt", &format!("{}\n{dup}\n", id(T, 0, 7, 4)));
    // The HTTP API's own shapes: GET /v1/ids and GET /v1/id.
    let b = write(
        dir.path(),
        "b.jsonl",
        &format!(
            "{{\"ids\":[\"{}\",\"{dup}\"]}}\n{{\"id\":\"{}\"}}\n",
            id(T, 0, 7, 6),
            id(T, 0, 7, 7)
        ),
    );
    let out = audit(&["--json", &a, &b], "");
    assert_eq!(status(&out), 1);
    let report = json(&out);
    assert_eq!(
        (report["ids"].as_u64(), report["unique"].as_u64()),
        (Some(5), Some(4))
    );
    assert_eq!(report["duplicates"], 1);
    let example = &report["duplicate_examples"][0];
    assert_eq!(example["id"], dup.to_string());
    assert_eq!(example["worker_id"], 7);
    assert_eq!(example["sequence"], 5);
    assert_eq!(example["time"], "2026-09-21T14:13:20.000Z");
    assert_eq!(
        example["at"],
        serde_json::json!([format!("{a}:2"), format!("{b}:1")])
    );
    // In text too, with the decoded fields.
    let out = audit(&[&a, &b], "");
    assert_eq!(status(&out), 1);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("FAILED: duplicates\n"), "{text}");
    assert!(text.contains(&format!("{dup} timestamp_ms={T}")), "{text}");
    assert!(text.contains(&format!("at {a}:2, {b}:1")), "{text}");
}

#[test]
fn invalid_and_overlong_lines_exit_1_with_their_line_numbers() {
    let long = "9".repeat(10_000);
    let text = format!(
        "{}\n\nnot-an-id\n{long}\n-5\n{{\"id\":null}}\n",
        id(T, 0, 0, 0)
    );
    let out = audit(&["--json", "--max-line-bytes", "4096"], &text);
    assert_eq!(status(&out), 1);
    let report = json(&out);
    assert_eq!(report["ids"], 1);
    assert_eq!(report["invalid"], 4);
    assert_eq!(report["blank"], 1);
    let at: Vec<&str> = report["invalid_examples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["at"].as_str().unwrap())
        .collect();
    assert_eq!(at, ["-:3", "-:4", "-:5", "-:6"]);
    assert_eq!(
        report["invalid_examples"][1]["reason"],
        "line longer than 4096 bytes"
    );
    // A file with no newline at all, far longer than the limit: one invalid line, no crash.
    let out = audit(
        &["--json", "--max-line-bytes", "1000"],
        &"1".repeat(5_000_000),
    );
    assert_eq!(status(&out), 1);
    assert_eq!(json(&out)["invalid"], 1);
}

#[test]
fn ids_are_read_with_the_layouts_widths_and_none_above_its_largest() {
    let js = |ms: u64, datacenter: u64, worker: u64, sequence: u64| {
        snowflake_core::Layout::JS_SAFE
            .encode(ms, datacenter, worker, sequence)
            .unwrap()
            .as_u64()
    };
    let text = format!(
        "{}\n{}\n{}\n9007199254740992\n{{\"ids\":[\"{}\",\"9223372036854775807\"]}}\n",
        js(T, 3, 15, 0),
        js(T, 3, 15, 63),
        js(T + 9, 1, 2, 0),
        js(T, 0, 0, 0),
    );
    let out = audit(&["--json", "--layout", "js-safe"], &text);
    assert_eq!(status(&out), 1, "{}", String::from_utf8_lossy(&out.stderr));
    let report = json(&out);
    assert_eq!((&report["ids"], &report["invalid"]), (&3.into(), &2.into()));
    assert_eq!(
        report["invalid_examples"][0]["reason"],
        "invalid id: expected a decimal 0..=9007199254740991, found \"9007199254740992\""
    );
    assert_eq!(
        report["invalid_examples"][1]["reason"],
        "invalid id: expected 0..=9007199254740991, found 9223372036854775807"
    );
    // Per node with js-safe's widths: (1, 2) and (3, 15).
    assert_eq!(
        (
            &report["nodes"][0]["datacenter_id"],
            &report["nodes"][0]["worker_id"]
        ),
        (&1.into(), &2.into())
    );
    assert_eq!(
        (
            &report["nodes"][1]["datacenter_id"],
            &report["nodes"][1]["worker_id"]
        ),
        (&3.into(), &15.into())
    );
    assert_eq!(report["nodes"][1]["ids"], 2);
    assert_eq!(report["time_range"]["last_ms"], T + 9);
    // A bad layout is a usage error.
    let out = audit(&["--layout", "js"], "1\n");
    assert_eq!(status(&out), 2);
    assert!(out.stdout.is_empty());
}

#[test]
fn unreadable_inputs_and_bad_flags_exit_2_and_print_nothing() {
    let dir = temp_dir();
    let good = write(dir.path(), "good.txt", "1\n");
    let missing = dir.path().join("missing.txt").display().to_string();
    let cases: [(Vec<&str>, &str); 7] = [
        (vec![&good, &missing], "cannot read"),
        (vec![dir.path().to_str().unwrap()], "is a directory"),
        (vec!["--memory-mib", "0"], "--memory-mib"),
        (vec!["--examples", "-1"], "--examples: expected 0..=1000"),
        (vec!["--max-line-bytes", "2000000000"], "--max-line-bytes"),
        (vec!["--temp-dir", &missing], "not a directory"),
        (vec!["--bogus"], "--bogus"),
    ];
    for (args, needle) in cases {
        let out = audit(&args, "1\n");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(status(&out), 2, "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
    }
}

#[test]
fn future_dates_are_reported_and_fail_only_when_asked_under_the_chosen_epoch() {
    let text = format!("{}\n{}\n", id(T, 0, 0, 0), id(T + 120_000, 0, 0, 0));
    let now = (T + 60_000).to_string();
    let out = audit(&["--json", "--now-ms", &now], &text);
    assert_eq!(status(&out), 0);
    let report = json(&out);
    assert_eq!(report["future"], 1);
    assert_eq!(report["future_examples"][0]["at"], "-:2");
    assert_eq!(report["now_ms"], T + 60_000);
    let out = audit(&["--json", "--now-ms", &now, "--fail-on-future"], &text);
    assert_eq!(status(&out), 1);
    // The text verdict agrees with the exit status: without --fail-on-future the future ID is
    // only reported (OK, exit 0); with it, the run failed and the first line says why.
    let out = audit(&["--now-ms", &now], &text);
    assert_eq!(status(&out), 0);
    let summary = String::from_utf8(out.stdout).unwrap();
    assert!(
        summary.starts_with("OK: no duplicate, no invalid line\n"),
        "{summary}"
    );
    let out = audit(&["--now-ms", &now, "--fail-on-future"], &text);
    assert_eq!(status(&out), 1);
    let summary = String::from_utf8(out.stdout).unwrap();
    assert!(
        summary.starts_with("FAILED: ids dated in the future (--fail-on-future)\n"),
        "{summary}"
    );
    // With a duplicate as well, the verdict names both.
    let both = format!("{text}{}\n", id(T, 0, 0, 0));
    let out = audit(&["--now-ms", &now, "--fail-on-future"], &both);
    assert_eq!(status(&out), 1);
    let summary = String::from_utf8(out.stdout).unwrap();
    assert!(
        summary.starts_with("FAILED: duplicates and ids dated in the future (--fail-on-future)\n"),
        "{summary}"
    );
    // Another epoch moves every time: 1 000 000 ms later epoch, same raw IDs.
    let out = Command::new(binary())
        .args([
            "--epoch-ms",
            "1288835974657",
            "audit",
            "--json",
            "--now-ms",
            &now,
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            child.stdin.take().unwrap().write_all(text.as_bytes())?;
            child.wait_with_output()
        })
        .unwrap();
    let report = json(&out);
    assert_eq!(report["time_range"]["first_ms"], T + 1_000_000);
    assert_eq!(report["future"], 2);
}

#[test]
fn a_spilled_sort_finds_what_an_in_memory_one_finds() {
    // 300,000 fresh IDs from `snowflake next`, then 50 of them again at the end.
    let next = Command::new(binary())
        .args(["next", "--count", "300000", "--worker-id", "3"])
        .output()
        .unwrap();
    assert!(next.status.success());
    let mut text = String::from_utf8(next.stdout).unwrap();
    let again: Vec<String> = text.lines().step_by(6000).map(str::to_owned).collect();
    assert_eq!(again.len(), 50);
    for line in &again {
        text.push_str(line);
        text.push('\n');
    }
    let spill_dir = temp_dir();
    let spill = spill_dir.path().to_str().unwrap();
    let small = json(&audit(
        &["--json", "--memory-mib", "1", "--temp-dir", spill],
        &text,
    ));
    let large = json(&audit(&["--json"], &text));
    assert!(small["spilled_runs"].as_u64().unwrap() >= 9, "{small}");
    assert_eq!(large["spilled_runs"], 0);
    for field in [
        "ids",
        "unique",
        "duplicates",
        "duplicate_ids",
        "nodes",
        "duplicate_examples",
    ] {
        assert_eq!(small[field], large[field], "{field}");
    }
    assert_eq!(small["duplicates"], 50);
    assert_eq!(small["duplicate_examples"][0]["id"], again[0]);
    assert_eq!(
        small["duplicate_examples"][0]["at"],
        serde_json::json!(["-:1", "-:300001"])
    );
    // The spill file is gone.
    assert_eq!(std::fs::read_dir(spill).unwrap().count(), 0);
}

#[test]
fn help_documents_the_input_and_the_exit_statuses() {
    let out = Command::new(binary())
        .args(["audit", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "Exit status: 0",
        "1 duplicates or invalid lines",
        "2 a usage error",
        "\"ids\"",
        "psql",
    ] {
        assert!(help.contains(needle), "{needle:?} not in:\n{help}");
    }
}

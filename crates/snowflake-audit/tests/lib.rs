//! The audit engine against inputs of every kind, and against a reference count.

use snowflake_audit::{Auditor, Options, Progress, Report};
use snowflake_core::Layout;

const T: u64 = 1_790_000_000_000;

fn id(ms: u64, datacenter: u64, worker: u64, sequence: u64) -> u64 {
    Layout::TWITTER
        .encode(ms, datacenter, worker, sequence)
        .unwrap()
        .as_u64()
}

fn options() -> Options {
    Options {
        now_ms: T + 60_000,
        ..Options::default()
    }
}

fn audit(options: Options, inputs: &[(&str, &str)]) -> Report {
    let mut audit = Auditor::new(options);
    for (name, text) in inputs {
        audit.read(name, text.as_bytes(), &mut |_| {}).unwrap();
    }
    audit.finish().unwrap()
}

#[test]
fn a_clean_input_is_counted_per_node_with_its_time_range() {
    let text = format!(
        "{}\n{}\n\n{}\r\n{}",
        id(T, 1, 2, 0),
        id(T + 5, 1, 2, 0),
        id(T + 1, 3, 4, 7),
        id(T + 2, 1, 2, 9)
    );
    let report = audit(options(), &[("a.txt", &text)]);
    assert!(report.is_clean());
    assert_eq!(
        (
            report.ids,
            report.unique,
            report.duplicates,
            report.invalid,
            report.blank,
            report.lines
        ),
        (4, 4, 0, 0, 1, 5)
    );
    let range = report.time_range.as_ref().unwrap();
    assert_eq!((range.first_ms, range.last_ms), (T, T + 5));
    let nodes: Vec<_> = report
        .nodes
        .iter()
        .map(|n| (n.datacenter_id, n.worker_id, n.ids, n.first_ms, n.last_ms))
        .collect();
    assert_eq!(nodes, [(1, 2, 3, T, T + 5), (3, 4, 1, T + 1, T + 1)]);
    assert_eq!(report.future, 0);
    assert_eq!(report.spilled_runs, 0);
    let text = report.to_string();
    assert!(
        text.starts_with("OK: no duplicate, no invalid line\n"),
        "{text}"
    );
}

#[test]
fn duplicates_name_every_copy_across_inputs() {
    let dup = id(T, 0, 0, 1);
    let a = format!("{}\n{dup}\n", id(T, 0, 0, 0));
    let b = format!(
        "{{\"ids\":[\"{}\",\"{dup}\"]}}\n{{\"id\":{dup},\"worker_id\":0}}\n",
        id(T, 0, 0, 2)
    );
    let report = audit(options(), &[("a", &a), ("-", ""), ("b", &b)]);
    assert!(!report.is_clean());
    assert_eq!(
        (
            report.ids,
            report.unique,
            report.duplicates,
            report.duplicate_ids
        ),
        (5, 3, 2, 1)
    );
    let example = &report.duplicate_examples[0];
    assert_eq!(example.decoded.id.as_u64(), dup);
    assert_eq!(example.copies, 3);
    assert_eq!(example.at, ["a:2", "b:1", "b:2"]);
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["duplicates"], 2);
    assert_eq!(json["duplicate_examples"][0]["id"], dup.to_string());
    assert_eq!(json["duplicate_examples"][0]["sequence"], 1);
    assert_eq!(json["duplicate_examples"][0]["at"][1], "b:1");
    assert_eq!(json["inputs"], serde_json::json!(["a", "-", "b"]));
    assert!(report.to_string().starts_with("FAILED: duplicates\n"));
}

#[test]
fn invalid_and_overlong_lines_are_reported_with_their_numbers() {
    let long = "1".repeat(5000);
    let text = format!("5\nnope\n{long}\n-3\n{{\"id\":\"x\"}}\n6\n");
    let options = Options {
        max_line_bytes: 100,
        ..options()
    };
    let report = audit(options, &[("in", &text)]);
    assert_eq!((report.ids, report.invalid, report.lines), (2, 4, 6));
    let at: Vec<_> = report
        .invalid_examples
        .iter()
        .map(|e| e.at.as_str())
        .collect();
    assert_eq!(at, ["in:2", "in:3", "in:4", "in:5"]);
    assert_eq!(
        report.invalid_examples[1].reason,
        "line longer than 100 bytes"
    );
    assert!(report.invalid_examples[0].reason.contains("\"nope\""));
    assert!(!report.is_clean());
}

#[test]
fn future_ids_and_the_epoch_are_honoured() {
    let epoch_ms = 1_700_000_000_000;
    let layout = Layout::with_epoch(epoch_ms).unwrap();
    let raw = |ms: u64| layout.encode(ms, 0, 0, 0).unwrap().as_u64();
    let text = format!("{}\n{}\n", raw(T), raw(T + 120_000));
    let options = Options {
        layout,
        ..options()
    };
    let report = audit(options, &[("x", &text)]);
    assert_eq!(report.future, 1);
    assert_eq!(report.future_examples[0].at, "x:2");
    assert_eq!(report.future_examples[0].decoded.timestamp_ms, T + 120_000);
    assert_eq!(report.time_range.as_ref().unwrap().first_ms, T);
    // Clean all the same: a future date is a finding, not an invalid line.
    assert!(report.is_clean());
    assert!(report.passed());
    // Unless future dates fail the audit: then the verdict says so.
    let failing = Options {
        layout,
        now_ms: T + 60_000,
        fail_on_future: true,
        ..Options::default()
    };
    let report = audit(failing, &[("x", &text)]);
    assert!(report.is_clean());
    assert!(!report.passed());
    assert!(
        report
            .to_string()
            .starts_with("FAILED: ids dated in the future (--fail-on-future)\n")
    );
}

#[test]
fn a_small_memory_budget_spills_and_finds_the_same_as_a_count() {
    // 300,000 IDs from 4 nodes in scrambled order, 1,000 of them repeated far apart.
    let mut lines = Vec::new();
    for i in 0..300_000u64 {
        let x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
        lines.push(id(T + x % 5_000, x % 2, (x >> 1) % 2, i % 4096));
    }
    let repeated: Vec<u64> = (0..1_000).map(|i| lines[i * 97]).collect();
    lines.extend(&repeated);
    let mut reference = lines.clone();
    reference.sort_unstable();
    reference.dedup();
    let text: String = lines.iter().map(|id| format!("{id}\n")).collect();
    let dir = tempfile_dir();
    let options = Options {
        memory_bytes: 1 << 20,
        temp_dir: dir.clone(),
        progress_every: 100_000,
        ..options()
    };
    let mut audit = Auditor::new(options);
    let mut seen = Vec::new();
    audit
        .read("big", text.as_bytes(), &mut |p: Progress| seen.push(p.ids))
        .unwrap();
    assert_eq!(seen, [100_000, 200_000, 300_000]);
    let report = audit.finish().unwrap();
    assert!(report.spilled_runs >= 9, "{}", report.spilled_runs);
    assert_eq!(report.ids, 301_000);
    assert_eq!(report.unique, reference.len() as u64);
    assert_eq!(report.duplicates, 301_000 - reference.len() as u64);
    let first = &report.duplicate_examples[0];
    let lowest = *repeated.iter().min().unwrap();
    assert_eq!(first.decoded.id.as_u64(), lowest);
    assert!(first.at.len() >= 2);
    assert_eq!(report.nodes.len(), 4);
    assert_eq!(report.nodes.iter().map(|n| n.ids).sum::<u64>(), 301_000);
    // The spill file is gone.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    std::fs::remove_dir(&dir).unwrap();
}

#[test]
fn an_unreadable_input_is_an_error_naming_it() {
    struct Broken;
    impl std::io::Read for Broken {
        fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
            Err(std::io::Error::other("disk on fire"))
        }
    }
    let mut audit = Auditor::new(options());
    let err = audit.read("bad.txt", Broken, &mut |_| {}).unwrap_err();
    assert_eq!(err.to_string(), "cannot read bad.txt: disk on fire");
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("snowflake-audit-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

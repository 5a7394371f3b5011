//! The layout recorded in the state directory (SPEC §9): Twitter's widths keep format 1 byte
//! for byte, any other writes format 2 with its layout, and a node whose layout is not the
//! file's refuses to start, naming both.

use crate::support::{T, TestServer, config};
use snowflake_core::{Clock, Layout, ManualClock};
use snowflake_server::Node;
use snowflake_server::state::{MarkKind, StateDir};
use std::path::Path;
use std::sync::Arc;

fn file(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("node-0-0.json")).unwrap()
}

/// A node under `layout` on pair (0, 0), started and stopped gracefully after one ID.
async fn run_once(dir: &Path, layout: Layout, now_ms: u64) {
    let mut config = config(dir);
    config.layout = layout;
    let server = TestServer::start(config, ManualClock::new(now_ms)).await;
    server.wait_ready().await;
    assert_eq!(server.get("/v1/id").await.status, hyper::StatusCode::OK);
    server.stop().await;
}

fn refusal(dir: &Path, layout: Layout) -> String {
    let mut config = config(dir);
    config.layout = layout;
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(T + 10));
    Node::new(&config, clock).unwrap_err().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_twitter_state_directory_refuses_a_js_safe_node_and_the_reverse() {
    let twitter = tempfile::tempdir().unwrap();
    run_once(twitter.path(), Layout::TWITTER, T).await;
    let written = file(twitter.path());
    assert!(written.contains("\"format\": 1"), "{written}");
    assert!(
        !written.contains("layout"),
        "format 1 records no layout: {written}"
    );
    let err = refusal(twitter.path(), Layout::JS_SAFE);
    assert!(
        err.contains(
            "was written under the layout twitter (epoch 1288834974657), but the node \
                      now runs js-safe (epoch 1288834974657)"
        ) && err.contains("refusing to start")
            && err.contains("--layout twitter"),
        "{err}"
    );
    assert_eq!(file(twitter.path()), written, "the file is left as it was");

    let js = tempfile::tempdir().unwrap();
    run_once(js.path(), Layout::JS_SAFE, T).await;
    let record: serde_json::Value = serde_json::from_str(&file(js.path())).unwrap();
    assert_eq!(record["format"], 2, "{record}");
    assert_eq!(record["layout"]["name"], "js-safe", "{record}");
    assert_eq!(record["layout"]["max_id"], "9007199254740991", "{record}");
    assert_eq!(record["epoch_ms"], 1_288_834_974_657_u64, "{record}");
    let err = refusal(js.path(), Layout::TWITTER);
    assert!(
        err.contains(
            "under the layout js-safe (epoch 1288834974657), but the node now runs \
                      twitter (epoch 1288834974657)"
        ) && err.contains("--layout js-safe"),
        "{err}"
    );
    // The same widths with another epoch: the epoch's own refusal, as before layouts.
    let later = Layout::new(1_600_000_000_000, Layout::JS_SAFE.bits()).unwrap();
    let err = refusal(js.path(), later);
    assert!(err.contains("written under epoch 1288834974657"), "{err}");
    // Its own layout reads it and goes on above it.
    run_once(js.path(), Layout::JS_SAFE, T + 1_000).await;
}

#[test]
fn a_format_1_record_is_twitters_widths_and_format_2_must_record_its_layout() {
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(T));
    // Exactly what the previous release wrote (format 1, an epoch and no layout): Twitter's.
    let previous = r#"{
  "format": 1,
  "datacenter_id": 0,
  "worker_id": 0,
  "epoch_ms": 1288834974657,
  "high_water_ms": 1789999990000,
  "kind": "shutdown",
  "written_at_ms": 1789999990000,
  "pid": 4242
}
"#;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("node-0-0.json"), previous).unwrap();
    let err = refusal(dir.path(), Layout::JS_SAFE);
    assert!(err.contains("under the layout twitter"), "{err}");
    let state = StateDir::open(dir.path()).unwrap();
    let mark = state.load(0, 0, &Layout::TWITTER).unwrap().unwrap();
    assert_eq!(mark.high_water_ms, 1_789_999_990_000);
    assert_eq!(mark.written_layout().name, "twitter");
    drop(state);
    // And a node under Twitter's widths writes it back in the same format, byte for byte as
    // the previous release would (the fields in its order, no layout).
    let state = StateDir::open(dir.path()).unwrap();
    state
        .store(&StateDir::mark(
            0,
            0,
            &Layout::TWITTER,
            1_789_999_990_000,
            MarkKind::Shutdown,
            1_789_999_990_000,
        ))
        .unwrap();
    let rewritten = file(dir.path());
    let pid = std::process::id();
    assert_eq!(rewritten, previous.replace("4242", &pid.to_string()));
    drop(state);

    let js = r#""datacenter_id":0,"worker_id":0,"epoch_ms":1288834974657,"high_water_ms":1,"kind":"shutdown","written_at_ms":1,"pid":1"#;
    let layout = r#""layout":{"name":"js-safe","timestamp_bits":41,"datacenter_bits":2,"worker_bits":4,"sequence_bits":6,"epoch_ms":1288834974657,"max_id":"9007199254740991"}"#;
    let cases = [
        (
            format!(r#"{{"format":2,{js}}}"#),
            "format 2 without the layout",
        ),
        (
            format!(r#"{{"format":1,{js},{layout}}}"#),
            "format 1 records no layout",
        ),
        (
            format!(r#"{{"format":3,{js},{layout}}}"#),
            "format 3 is not a supported format",
        ),
        (
            format!(
                r#"{{"format":2,{js},{}}}"#,
                layout.replace("\"sequence_bits\":6", "\"sequence_bits\":7")
            ),
            "its layout record is not valid",
        ),
        (
            format!(
                r#"{{"format":2,{js},{}}}"#,
                layout.replace("\"epoch_ms\":1288834974657", "\"epoch_ms\":1288834974658")
            ),
            "its layout's epoch 1288834974658 is not its epoch_ms 1288834974657",
        ),
    ];
    for (contents, message) in cases {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("node-0-0.json"), &contents).unwrap();
        let mut config = config(dir.path());
        config.layout = Layout::JS_SAFE;
        let err = Node::new(&config, Arc::clone(&clock))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(message) && err.contains("is corrupt"),
            "{contents}: {err}"
        );
    }
    // The well-formed one is read under js-safe.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("node-0-0.json"),
        format!(r#"{{"format":2,{js},{layout}}}"#),
    )
    .unwrap();
    let state = StateDir::open(dir.path()).unwrap();
    assert_eq!(
        state
            .load(0, 0, &Layout::JS_SAFE)
            .unwrap()
            .unwrap()
            .high_water_ms,
        1
    );
}

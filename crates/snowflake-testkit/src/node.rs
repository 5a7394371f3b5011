//! A running node and its IDs, as tests see them: the timestamp and worker of an ID (default
//! layout), `/v1/info`, the first ID a node serves, the state file, exit statuses.

use crate::serve::{Finished, ServeProcess};
use std::collections::HashSet;
use std::fs;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The timestamp (Unix ms) of a Snowflake ID under the default layout.
pub fn timestamp_ms(id: u64) -> u64 {
    (id >> 22) + 1_288_834_974_657
}

/// The `node-<dc>-<worker>.json` state file of a state directory, as JSON.
pub fn state_file(state_dir: &Path, datacenter_id: u32, worker_id: u32) -> serde_json::Value {
    let path = state_dir.join(format!("node-{datacenter_id}-{worker_id}.json"));
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON ({e})", path.display()))
}

// Shared by the serve and fleet tests.

/// The wall clock in Unix ms.
pub fn now_ms() -> u64 {
    let elapsed = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    u64::try_from(elapsed.as_millis()).unwrap()
}

/// A fresh temporary directory, removed when dropped.
pub fn temp_dir() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

/// The process exited with `code`; its stderr otherwise.
pub fn assert_exit(finished: &Finished, code: i32) {
    assert_eq!(
        finished.status.code(),
        Some(code),
        "exit status {}; stderr:\n{}",
        finished.status,
        finished.stderr
    );
}

/// `GET /v1/info`, which must answer 200.
pub fn info(node: &ServeProcess) -> serde_json::Value {
    let response = node.get("/v1/info");
    assert_eq!(response.status, 200, "{response:?}");
    response.json()
}

/// The worker id inside an ID (default layout).
pub fn worker_in(id: u64) -> u64 {
    (id >> 12) & 31
}

/// The worker id a node reports in `/v1/info`.
pub fn worker_of(node: &ServeProcess) -> u64 {
    info(node)["worker_id"].as_u64().expect("worker_id")
}

/// Polls `GET /v1/id` until it answers 200 (at most `timeout`); the 503 messages seen before.
pub fn first_id(node: &ServeProcess, timeout: Duration) -> (u64, Vec<String>) {
    let deadline = Instant::now() + timeout;
    let mut refusals = Vec::new();
    loop {
        let response = node.get("/v1/id");
        if response.status == 200 {
            return (response.ids()[0], refusals);
        }
        assert_eq!(response.status, 503, "{response:?}");
        refusals.push(response.error());
        assert!(
            Instant::now() < deadline,
            "no id within {timeout:?}; last refusal {:?}; stderr:\n{}",
            refusals.last(),
            node.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Asserts every ID is new to `all`, and adds it.
pub fn insert_all(all: &mut HashSet<u64>, ids: &[u64]) {
    for &id in ids {
        assert!(all.insert(id), "duplicate id {id}");
    }
}

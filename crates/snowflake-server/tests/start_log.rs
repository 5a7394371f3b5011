//! What a node says when it opens its state: a crash (a reservation left on disk) is one, a
//! pair taken over above another holder's mark is not.

use crate::support::{T, config};
use snowflake_core::{Clock, Layout, ManualClock};
use snowflake_fleet::{BoxFuture, Coordinator, Fence, FleetError, HeldPair, LeaseInfo};
use snowflake_server::Node;
use snowflake_server::state::{MarkKind, StateDir};
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// The words a crash is logged with.
const CRASH: &str = "the previous run did not shut down cleanly";
/// The words a takeover above the coordinator's mark is logged with.
const TAKEOVER: &str = "resuming above it";

/// A coordinator that holds its pair above `floor_ms`, and does nothing else.
#[derive(Debug)]
struct Holding(watch::Sender<Fence>);

impl Holding {
    fn above(floor_ms: u64) -> Arc<dyn Coordinator> {
        Arc::new(Holding(watch::Sender::new(Fence::Held {
            until: Instant::now() + Duration::from_secs(60),
            floor_ms,
        })))
    }
}

impl Coordinator for Holding {
    fn source(&self) -> &'static str {
        "etcd"
    }
    fn fence(&self) -> watch::Receiver<Fence> {
        self.0.subscribe()
    }
    fn store_mark(&self, _mark_ms: u64) -> BoxFuture<'_, Result<(), FleetError>> {
        Box::pin(async { Ok(()) })
    }
    fn run(&self, _stop: watch::Receiver<bool>) -> BoxFuture<'_, Result<(), FleetError>> {
        Box::pin(std::future::pending())
    }
    fn release(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
    fn info(&self) -> LeaseInfo {
        LeaseInfo {
            state: "held",
            lease_id: None,
            ttl_secs: 10,
            remaining_ms: 1,
            key: String::new(),
            reason: None,
            renewals: 0,
            renewal_failures: 0,
            losses: 0,
            skipped_ahead: 0,
        }
    }
    fn held_pairs(&self) -> BoxFuture<'_, Result<Vec<HeldPair>, FleetError>> {
        Box::pin(async { Ok(Vec::new()) })
    }
    fn workers_per_datacenter(&self) -> u64 {
        32
    }
}

/// A log sink the test reads back.
#[derive(Debug, Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What building a node on `dir` (with `coordinator`) logs.
fn opening_log(dir: &std::path::Path, coordinator: Option<Arc<dyn Coordinator>>) -> String {
    let captured = Captured::default();
    let sink = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || sink.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        let clock = Arc::new(ManualClock::new(T)) as Arc<dyn Clock>;
        let anchor = snowflake_server::clock_trust::ClockAnchor::now(clock.as_ref());
        let node = Node::with_coordinator(&config(dir), clock, anchor, coordinator)
            .expect("the node opens");
        drop(node);
    });
    String::from_utf8(captured.0.lock().unwrap().clone()).unwrap()
}

/// Leaves a mark of `kind` in `dir`, as a run of pair (0, 0) would have.
fn leave_mark(dir: &std::path::Path, high_water_ms: u64, kind: MarkKind) {
    let state = StateDir::open(dir).expect("state dir");
    state
        .store(&StateDir::mark(
            0,
            0,
            &Layout::TWITTER,
            high_water_ms,
            kind,
            T - 1_000,
        ))
        .expect("mark stored");
}

#[test]
fn a_crash_is_logged_as_one() {
    let dir = tempfile::tempdir().unwrap();
    leave_mark(dir.path(), T - 500, MarkKind::Reservation);
    let log = opening_log(dir.path(), None);
    assert!(log.contains(CRASH), "{log}");
}

#[test]
fn a_graceful_stop_is_no_crash() {
    let dir = tempfile::tempdir().unwrap();
    leave_mark(dir.path(), T - 500, MarkKind::Shutdown);
    let log = opening_log(dir.path(), None);
    assert!(!log.contains(CRASH), "{log}");
}

#[test]
fn a_clean_handover_is_no_crash() {
    // A fresh state directory (another machine's node had the pair and stopped cleanly): the
    // claim read its mark as the floor.
    let dir = tempfile::tempdir().unwrap();
    let log = opening_log(dir.path(), Some(Holding::above(T + 5_000)));
    assert!(log.contains(TAKEOVER), "{log}");
    assert!(
        !log.contains(CRASH),
        "a handover was logged as a crash: {log}"
    );
    // This node's own clean stop below the floor: still no crash.
    let dir = tempfile::tempdir().unwrap();
    leave_mark(dir.path(), T - 500, MarkKind::Shutdown);
    let log = opening_log(dir.path(), Some(Holding::above(T + 5_000)));
    assert!(log.contains(TAKEOVER), "{log}");
    assert!(
        !log.contains(CRASH),
        "a handover was logged as a crash: {log}"
    );
}

#[test]
fn a_crash_before_a_handover_is_still_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    leave_mark(dir.path(), T - 500, MarkKind::Reservation);
    let log = opening_log(dir.path(), Some(Holding::above(T + 5_000)));
    assert!(log.contains(CRASH), "{log}");
    assert!(log.contains(TAKEOVER), "{log}");
}

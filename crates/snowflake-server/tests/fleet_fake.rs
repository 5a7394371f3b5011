//! The fake coordinator the fencing tests ([`crate::fleet`]) drive: a fence the test sets, the
//! calls the node made, marks refused or held up; and the helpers that start, wait for and stop
//! a node leasing from it.

use crate::support::{Reply, TestServer, config};
use hyper::StatusCode;
use snowflake_core::ManualClock;
use snowflake_fleet::{BoxFuture, Coordinator, Fence, FleetError, HeldPair, LeaseInfo};
use snowflake_server::Config;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// The Twitter epoch: an ID's timestamp is `(id >> 22) + EPOCH_MS`.
pub(crate) const EPOCH_MS: u64 = 1_288_834_974_657;

/// What the fake coordinator's error says when told to refuse marks.
pub(crate) const MARK_REFUSED: &str = "etcd refused the mark (test)";

pub(crate) fn ms_of(id: u64) -> u64 {
    (id >> 22) + EPOCH_MS
}

/// Everything the node asked of the coordinator, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Call {
    /// `store_mark(ms)`, and whether it was accepted.
    Mark { ms: u64, accepted: bool },
    /// `release()`.
    Release,
    /// `run()` returned (its stop flipped).
    RunStopped,
}

/// A coordinator whose fence the test drives.
#[derive(Debug)]
pub(crate) struct FakeLease {
    pub(crate) fence: watch::Sender<Fence>,
    pub(crate) calls: Mutex<Vec<Call>>,
    pub(crate) refuse_marks: AtomicBool,
    /// While true, `store_mark` waits (the coordination service is slow).
    pub(crate) hold_marks: watch::Sender<bool>,
    /// `store_mark` calls started (including those still waiting).
    pub(crate) marks_started: AtomicUsize,
}

impl FakeLease {
    pub(crate) fn new(fence: Fence) -> Arc<FakeLease> {
        Arc::new(FakeLease {
            fence: watch::Sender::new(fence),
            calls: Mutex::default(),
            refuse_marks: AtomicBool::new(false),
            hold_marks: watch::Sender::new(false),
            marks_started: AtomicUsize::new(0),
        })
    }

    pub(crate) fn hold_marks(&self, hold: bool) {
        self.hold_marks.send_replace(hold);
    }

    pub(crate) fn set(&self, fence: Fence) {
        self.fence.send_replace(fence);
    }

    pub(crate) fn refuse_marks(&self, refuse: bool) {
        self.refuse_marks.store(refuse, Ordering::SeqCst);
    }

    pub(crate) fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    /// Every `store_mark` argument, accepted or not.
    pub(crate) fn marks(&self) -> Vec<u64> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::Mark { ms, .. } => Some(ms),
                _ => None,
            })
            .collect()
    }

    /// The largest mark the coordinator accepted (0 if none).
    pub(crate) fn stored(&self) -> u64 {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::Mark { ms, accepted: true } => Some(ms),
                _ => None,
            })
            .max()
            .unwrap_or(0)
    }

    pub(crate) fn refused_count(&self) -> usize {
        self.calls()
            .iter()
            .filter(|c| {
                matches!(
                    c,
                    Call::Mark {
                        accepted: false,
                        ..
                    }
                )
            })
            .count()
    }
}

impl Coordinator for FakeLease {
    fn source(&self) -> &'static str {
        "etcd"
    }

    fn fence(&self) -> watch::Receiver<Fence> {
        self.fence.subscribe()
    }

    fn store_mark(&self, mark_ms: u64) -> BoxFuture<'_, Result<(), FleetError>> {
        Box::pin(async move {
            self.marks_started.fetch_add(1, Ordering::SeqCst);
            let _ = self.hold_marks.subscribe().wait_for(|hold| !*hold).await;
            let accepted = !self.refuse_marks.load(Ordering::SeqCst);
            self.calls.lock().unwrap().push(Call::Mark {
                ms: mark_ms,
                accepted,
            });
            if accepted {
                Ok(())
            } else {
                Err(FleetError::Unavailable(MARK_REFUSED.into()))
            }
        })
    }

    fn run(&self, mut stop: watch::Receiver<bool>) -> BoxFuture<'_, Result<(), FleetError>> {
        Box::pin(async move {
            let _ = stop.wait_for(|stop| *stop).await;
            self.calls.lock().unwrap().push(Call::RunStopped);
            Ok(())
        })
    }

    fn release(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move { self.calls.lock().unwrap().push(Call::Release) })
    }

    fn info(&self) -> LeaseInfo {
        let (state, reason, remaining_ms) = match &*self.fence.borrow() {
            Fence::Held { until, .. } => (
                "held",
                None,
                u64::try_from(until.saturating_duration_since(Instant::now()).as_millis())
                    .unwrap_or(u64::MAX),
            ),
            Fence::Lost { reason } => ("lost", Some(reason.clone()), 0),
        };
        LeaseInfo {
            state,
            lease_id: Some("694d7b3c1a2b0001".into()),
            ttl_secs: 10,
            remaining_ms,
            key: "/snowflake/workers/0/0".into(),
            reason,
            renewals: 7,
            renewal_failures: 1,
            losses: 0,
            skipped_ahead: 0,
        }
    }

    fn held_pairs(&self) -> BoxFuture<'_, Result<Vec<HeldPair>, FleetError>> {
        Box::pin(async move {
            Ok(vec![HeldPair {
                datacenter_id: 0,
                worker_id: 0,
                holder: "this host (pid 1)".into(),
                address: "http=127.0.0.1:1".into(),
                since: "2026-12-02T00:00:00.000Z".into(),
            }])
        })
    }

    fn workers_per_datacenter(&self) -> u64 {
        32
    }
}

/// Held for a minute of real time (far longer than any test), above `floor_ms`.
pub(crate) fn held(floor_ms: u64) -> Fence {
    Fence::Held {
        until: Instant::now() + Duration::from_secs(60),
        floor_ms,
    }
}

/// Longest a request, or a graceful stop, may take before the test fails.
pub(crate) const HANG: Duration = Duration::from_secs(5);

/// One GET, bounded. A request that hangs (e.g. a generator waiting for the frozen manual clock
/// to leave an exhausted millisecond) fails the test; the clock is nudged first so the spinning
/// worker is let go and the runtime can shut down.
pub(crate) async fn get(server: &TestServer, path: &str) -> Reply {
    match tokio::time::timeout(HANG, server.get(path)).await {
        Ok(reply) => reply,
        Err(_) => {
            server.clock.advance_ms(1);
            panic!("GET {path} hung for {HANG:?}");
        }
    }
}

/// Repeats a GET (in real time, at most 3 s) until it answers `status`.
pub(crate) async fn get_until(server: &TestServer, path: &str, status: StatusCode) -> Reply {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let reply = get(server, path).await;
        if reply.status == status {
            return reply;
        }
        assert!(
            Instant::now() < deadline,
            "{path} never answered {status}: {reply:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub(crate) async fn wait_ready(server: &TestServer) {
    get_until(server, "/readyz", StatusCode::OK).await;
}

/// Graceful stop, bounded.
pub(crate) async fn stop(server: TestServer) {
    let clock = server.clock.clone();
    if tokio::time::timeout(HANG, server.stop()).await.is_err() {
        clock.advance_ms(1);
        panic!("the graceful stop hung for {HANG:?}");
    }
}

/// A server whose pair is leased from `lease`; returns once the node's keeper watches the
/// fence, so that every change the test sends is seen (a change sent earlier is missed: see
/// `a_lease_lost_while_the_node_opens_stops_it`).
pub(crate) async fn start(
    dir: &std::path::Path,
    now_ms: u64,
    lease: &Arc<FakeLease>,
) -> TestServer {
    start_with(config(dir), now_ms, lease).await
}

pub(crate) async fn start_with(config: Config, now_ms: u64, lease: &Arc<FakeLease>) -> TestServer {
    let server = start_opening(config, now_ms, lease).await;
    let deadline = Instant::now() + Duration::from_secs(3);
    while lease.fence.receiver_count() == 0 {
        assert!(
            Instant::now() < deadline,
            "the keeper never watched the fence"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    server
}

/// A server whose pair is leased from `lease`, returned at once (it may still be opening).
pub(crate) async fn start_opening(
    config: Config,
    now_ms: u64,
    lease: &Arc<FakeLease>,
) -> TestServer {
    TestServer::start_with_coordinator(
        config,
        ManualClock::new(now_ms),
        Arc::clone(lease) as Arc<dyn Coordinator>,
    )
    .await
}

pub(crate) fn ids_of(reply: &Reply) -> Vec<u64> {
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    reply.json()["ids"]
        .as_array()
        .expect("ids")
        .iter()
        .map(|id| id.as_str().expect("a string").parse().expect("decimal"))
        .collect()
}

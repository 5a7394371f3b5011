//! The pair's high-water mark in a real etcd, driven through the library (`EtcdLease`, the
//! operator functions) rather than `snowflake serve`, so that the order in which etcd applies
//! the writes is under the test's control: a mark write delayed in the network and applied
//! late must never lower the mark, unusable marks are skipped or refused, and marks written by
//! the previous release are still honoured.
//!
//! The delay comes from [`Proxy`], a small TCP proxy in front of one member that understands
//! just enough HTTP/2 framing to hold the client's frames and later deliver them without the
//! `RST_STREAM` the client sent when it gave up, so etcd applies the request late.

use crate::etcd_cluster::EtcdCluster;
use crate::support::now_ms;
use snowflake_core::Layout;
use snowflake_fleet::etcd::{EtcdLease, Holder};
use snowflake_fleet::{Coordinator, EtcdConfig, Fence, LowerMark, Pair, StoredMark};
use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

/// The lease TTL: long enough that no keep-alive is needed while a test runs (none is sent),
/// and a call timeout (a third of it, at most 2 s) of 2 s.
const TTL_SECS: u64 = 30;
/// How long a delayed request may take to be answered once released.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(10);
/// The client connection preface of HTTP/2.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// HTTP/2 frame types the proxy cares about.
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;

/// One HTTP/2 frame, raw.
struct Frame {
    kind: u8,
    stream: u32,
    bytes: Vec<u8>,
}

/// Reads one HTTP/2 frame; `None` at the end of the stream.
fn read_frame(from: &mut TcpStream) -> Option<Frame> {
    let mut header = [0u8; 9];
    from.read_exact(&mut header).ok()?;
    let length =
        usize::from(header[0]) << 16 | usize::from(header[1]) << 8 | usize::from(header[2]);
    let stream = u32::from_be_bytes([header[5], header[6], header[7], header[8]]) & 0x7fff_ffff;
    let mut bytes = header.to_vec();
    bytes.resize(9 + length, 0);
    from.read_exact(&mut bytes[9..]).ok()?;
    Some(Frame {
        kind: header[3],
        stream,
        bytes,
    })
}

/// What the proxy's threads share.
#[derive(Default)]
struct ProxyState {
    /// Client frames are held rather than forwarded.
    holding: bool,
    /// Per connection: the upstream socket and the frames held for it.
    connections: Vec<(TcpStream, Vec<Frame>)>,
    /// The streams (connection, stream id) whose request headers were held since the last
    /// [`Proxy::hold`].
    held_streams: HashSet<(usize, u32)>,
    /// Every stream ever held: the client's `RST_STREAM` for them is never delivered, even
    /// when it comes after the release.
    delayed: HashSet<(usize, u32)>,
    /// The streams (connection, stream id) the member sent anything on: it answered them.
    answered: HashSet<(usize, u32)>,
    /// `RST_STREAM` frames dropped.
    dropped_resets: usize,
}

/// A TCP proxy in front of one etcd member that can hold the client's HTTP/2 frames (the
/// client times out and moves to the next member) and later deliver them without the client's
/// `RST_STREAM`, so the member applies a request its client gave up on.
struct Proxy {
    addr: SocketAddr,
    state: Arc<(Mutex<ProxyState>, Condvar)>,
}

impl Proxy {
    /// A proxy on a free loopback port forwarding to `target` (`http://127.0.0.1:PORT`).
    fn start(target: &str) -> Proxy {
        let target: SocketAddr = target
            .trim_start_matches("http://")
            .parse()
            .expect("a member address");
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let addr = listener.local_addr().expect("the proxy's address");
        let state: Arc<(Mutex<ProxyState>, Condvar)> = Arc::default();
        let shared = Arc::clone(&state);
        thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(upstream) = TcpStream::connect(target) else {
                    continue;
                };
                let _ = (client.set_nodelay(true), upstream.set_nodelay(true));
                Proxy::connect(&shared, client, upstream);
            }
        });
        Proxy { addr, state }
    }

    /// Runs one proxied connection on two threads.
    fn connect(shared: &Arc<(Mutex<ProxyState>, Condvar)>, client: TcpStream, upstream: TcpStream) {
        let index = {
            let mut state = shared.0.lock().unwrap();
            state
                .connections
                .push((upstream.try_clone().expect("clone"), Vec::new()));
            state.connections.len() - 1
        };
        // Client to member, frame by frame, held while holding.
        let (mut from, state) = (client.try_clone().expect("clone"), Arc::clone(shared));
        thread::spawn(move || {
            let mut preface = [0u8; PREFACE.len()];
            if from.read_exact(&mut preface).is_err() {
                return;
            }
            let mut to = state.0.lock().unwrap().connections[index]
                .0
                .try_clone()
                .expect("clone");
            if to.write_all(&preface).is_err() {
                return;
            }
            while let Some(frame) = read_frame(&mut from) {
                let mut guard = state.0.lock().unwrap();
                if frame.kind == RST_STREAM && guard.delayed.contains(&(index, frame.stream)) {
                    guard.dropped_resets += 1;
                } else if guard.holding {
                    if frame.kind == HEADERS {
                        guard.held_streams.insert((index, frame.stream));
                        guard.delayed.insert((index, frame.stream));
                    }
                    guard.connections[index].1.push(frame);
                } else if to.write_all(&frame.bytes).is_err() {
                    break;
                }
            }
            let _ = to.shutdown(Shutdown::Write);
        });
        // Member to client, noting which streams were answered.
        let (mut from, mut to, state) = (upstream, client, Arc::clone(shared));
        thread::spawn(move || {
            while let Some(frame) = read_frame(&mut from) {
                if frame.stream != 0 {
                    state
                        .0
                        .lock()
                        .unwrap()
                        .answered
                        .insert((index, frame.stream));
                    state.1.notify_all();
                }
                if to.write_all(&frame.bytes).is_err() {
                    break;
                }
            }
            let _ = to.shutdown(Shutdown::Write);
        });
    }

    /// The URL for `--etcd-endpoints`.
    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn lock(&self) -> MutexGuard<'_, ProxyState> {
        self.state.0.lock().unwrap()
    }

    /// From now on, the client's frames are held.
    fn hold(&self) {
        let mut state = self.lock();
        state.holding = true;
        state.held_streams.clear();
    }

    /// Delivers the held frames and forwards again; the client's `RST_STREAM` for a held
    /// request is never delivered (it is not even held), so the member serves the requests
    /// the client gave up on. Returns the held request streams.
    fn release_without_resets(&self) -> HashSet<(usize, u32)> {
        let mut state = self.lock();
        for (upstream, held) in &mut state.connections {
            for frame in held.drain(..) {
                upstream
                    .write_all(&frame.bytes)
                    .expect("deliver a held frame");
            }
        }
        state.holding = false;
        state.held_streams.clone()
    }

    /// Waits until the member answered every stream of `streams`: proof that it received and
    /// served the late requests. Panics after [`DELIVERY_TIMEOUT`].
    fn wait_answered(&self, streams: &HashSet<(usize, u32)>) {
        let deadline = Instant::now() + DELIVERY_TIMEOUT;
        let mut state = self.lock();
        while !streams.is_subset(&state.answered) {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "the member did not answer the late requests (streams {streams:?}) within \
                 {DELIVERY_TIMEOUT:?}"
            );
            state = self.state.1.wait_timeout(state, left).unwrap().0;
        }
    }
}

/// A tokio runtime for the library calls.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// `snowflake state show`'s library call for pair (`datacenter_id`, `worker_id`), its error
/// as the tool prints it.
async fn read_mark(
    config: &EtcdConfig,
    layout: &Layout,
    datacenter_id: u64,
    worker_id: u64,
) -> Result<StoredMark, String> {
    let pair = Pair {
        datacenter_id,
        worker_id,
    };
    snowflake_fleet::etcd::read_mark(config, layout, pair)
        .await
        .map_err(|e| e.to_string())
}

/// `snowflake state lower-mark`'s library call, its error as the tool prints it.
async fn lower_mark(
    config: &EtcdConfig,
    layout: &Layout,
    datacenter_id: u64,
    worker_id: u64,
    to_ms: u64,
    by: &str,
    now_ms: u64,
) -> Result<StoredMark, String> {
    let pair = Pair {
        datacenter_id,
        worker_id,
    };
    let lowering = LowerMark { to_ms, by, now_ms };
    snowflake_fleet::etcd::lower_mark(config, layout, pair, &lowering)
        .await
        .map_err(|e| e.to_string())
}

/// The etcd settings of these tests for `endpoints`.
fn config(endpoints: Vec<String>) -> EtcdConfig {
    let mut config = EtcdConfig::new(endpoints);
    config.lease_ttl_secs = TTL_SECS;
    config.claim_timeout = Duration::from_secs(5);
    config
}

/// A holder description for the claim key.
fn holder() -> Holder {
    Holder::this_process(
        "test".into(),
        None,
        Vec::new(),
        now_ms(),
        Layout::default().epoch_ms(),
    )
}

/// The pair's mark in etcd (`high_water_ms`), read with etcdctl.
fn mark(etcd: &EtcdCluster, worker: u64) -> u64 {
    let text = etcd
        .get(&format!("/snowflake/marks/0/{worker}"))
        .unwrap_or_else(|| panic!("no mark for worker {worker}"));
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    json["high_water_ms"].as_u64().expect("high_water_ms")
}

/// Claims worker `worker` through `[proxy, m1, m2]` (so the client starts on the proxy).
async fn claim(proxy: &Proxy, etcd: &EtcdCluster, worker: u64) -> EtcdLease {
    let endpoints = vec![proxy.url(), etcd.endpoint(1), etcd.endpoint(2)];
    EtcdLease::claim(
        &config(endpoints),
        &Layout::default(),
        0,
        Some(worker),
        &holder(),
    )
    .await
    .unwrap_or_else(|e| panic!("claim worker {worker}: {e}"))
}

/// Writes `mark_ms` through the proxy while it holds the request: the client times out (and
/// moves on to the next member), and the request stays in flight. Returns its streams.
async fn write_held(proxy: &Proxy, lease: &EtcdLease, mark_ms: u64) -> HashSet<(usize, u32)> {
    proxy.hold();
    let started = Instant::now();
    let err = lease
        .store_mark(mark_ms)
        .await
        .expect_err("a held write cannot be answered");
    eprintln!(
        "etcd_mark: the write of {mark_ms} failed after {:?} while held: {err}",
        started.elapsed()
    );
    let streams = proxy.lock().held_streams.clone();
    assert!(!streams.is_empty(), "the write never reached the proxy");
    streams
}

#[test]
fn a_mark_write_applied_late_never_lowers_the_mark_in_etcd() {
    let started = Instant::now();
    let etcd = EtcdCluster::start(3);
    let proxy = Proxy::start(&etcd.endpoint(0));
    let base = now_ms();
    runtime().block_on(async {
        // 1. A reservation held in the network is applied after a later, higher one.
        let lease = claim(&proxy, &etcd, 0).await;
        lease.store_mark(base).await.expect("a first mark");
        let late = write_held(&proxy, &lease, base + 1000).await;
        // The client moved on to the next member, where a higher reservation lands.
        lease
            .store_mark(base + 2000)
            .await
            .expect("the next reservation, on another member");
        let acknowledged = base + 2000;
        assert_eq!(mark(&etcd, 0), acknowledged);
        proxy.release_without_resets();
        proxy.wait_answered(&late);
        let after = mark(&etcd, 0);
        assert!(
            after >= acknowledged,
            "the mark in etcd went down from {acknowledged} (acknowledged) to {after} after the \
             late write of {} was applied: a successor would issue ids below ones already issued",
            base + 1000
        );
        assert_eq!(lease.info().state, "held", "{:?}", lease.info());
        // The shutdown mark may lower the node's own reservation: nothing more is issued.
        lease
            .store_mark(base + 1500)
            .await
            .expect("a shutdown mark");
        assert_eq!(mark(&etcd, 0), base + 1500);

        // 2. A write held in the network is applied before the next one: the next one finds
        // the mark moved by the node's own write; that is no loss, and it still lands.
        let lease = claim(&proxy, &etcd, 1).await;
        lease.store_mark(base).await.expect("a first mark");
        let late = write_held(&proxy, &lease, base + 1000).await;
        proxy.release_without_resets();
        proxy.wait_answered(&late);
        assert_eq!(mark(&etcd, 1), base + 1000, "the late write was applied");
        lease
            .store_mark(base + 2000)
            .await
            .expect("a write after our own late one");
        assert_eq!(mark(&etcd, 1), base + 2000);
        assert_eq!(lease.info().state, "held", "{:?}", lease.info());

        // 3. A late write higher than the next one: the lower one is not written over it.
        let lease = claim(&proxy, &etcd, 2).await;
        lease.store_mark(base).await.expect("a first mark");
        let late = write_held(&proxy, &lease, base + 5000).await;
        proxy.release_without_resets();
        proxy.wait_answered(&late);
        assert_eq!(mark(&etcd, 2), base + 5000, "the late write was applied");
        lease
            .store_mark(base + 4000)
            .await
            .expect("a lower write after a higher late one succeeds");
        assert_eq!(
            mark(&etcd, 2),
            base + 5000,
            "a lower mark was written over a higher one"
        );
        assert_eq!(lease.info().state, "held", "{:?}", lease.info());
    });
    eprintln!(
        "etcd_mark: late-write test took {:?} ({} RST_STREAM dropped)",
        started.elapsed(),
        proxy.lock().dropped_resets
    );
}

/// The settings for a single-member cluster, claims pinned or not retried long.
fn direct_config(etcd: &EtcdCluster) -> EtcdConfig {
    let mut config = config(vec![etcd.endpoint(0)]);
    config.claim_timeout = Duration::from_secs(2);
    config
}

/// The floor a claim read (the fence right after it).
fn floor_of(lease: &EtcdLease) -> u64 {
    match &*lease.fence().borrow() {
        Fence::Held { floor_ms, .. } => *floor_ms,
        lost @ Fence::Lost { .. } => panic!("just claimed, but {lost:?}"),
    }
}

/// `etcdctl put`, which must succeed.
fn put(etcd: &EtcdCluster, args: &[&str]) {
    let mut all = vec!["put"];
    all.extend_from_slice(args);
    let out = etcd.etcdctl(&all);
    assert!(out.status.success(), "etcdctl {all:?}: {out:?}");
}

/// A lease granted with etcdctl: its id (hex).
fn etcdctl_lease(etcd: &EtcdCluster) -> String {
    let grant = etcd.etcdctl(&["lease", "grant", "60"]);
    let text = String::from_utf8_lossy(&grant.stdout);
    text.split_whitespace()
        .nth(1)
        .unwrap_or_else(|| panic!("lease grant printed {text:?}"))
        .to_owned()
}

#[test]
fn an_unusable_mark_is_skipped_unless_the_worker_is_pinned() {
    let started = Instant::now();
    let etcd = EtcdCluster::start(1);
    let layout = Layout::default();
    // A mark past the layout's last millisecond (2^42 - 1): no id could ever be issued above.
    let past = "{\"high_water_ms\":4398046511103,\"epoch_ms\":1288834974657,\"lease\":\"1\"}";
    put(&etcd, &["/snowflake/marks/0/0", past]);
    runtime().block_on(async {
        let config = direct_config(&etcd);
        let unpinned = EtcdLease::claim(&config, &layout, 0, None, &holder())
            .await
            .expect("an unpinned node takes the next worker");
        assert_eq!(unpinned.worker_id(), 1);
        assert_eq!(
            etcd.get("/snowflake/workers/0/0"),
            None,
            "the claim of worker 0 was given back"
        );
        assert!(etcd.get("/snowflake/workers/0/1").is_some());

        let err = EtcdLease::claim(&config, &layout, 0, Some(0), &holder())
            .await
            .expect_err("a node pinned to worker 0 cannot use its mark");
        let message = err.to_string();
        for needle in [
            "/snowflake/marks/0/0",
            "4398046511103",
            "the layout's last millisecond",
            "snowflake state lower-mark",
        ] {
            assert!(message.contains(needle), "lacks {needle:?}: {message}");
        }
        eprintln!("etcd_mark: the pinned claim failed: {message}");
        assert_eq!(etcd.get("/snowflake/workers/0/0"), None, "given back");
        assert!(
            etcd.get("/snowflake/workers/0/1").is_some(),
            "the other node's claim is untouched"
        );
    });
    eprintln!("etcd_mark: unusable-mark test took {:?}", started.elapsed());
}

#[test]
fn an_operator_lowers_a_mark_only_while_nobody_holds_the_pair() {
    let started = Instant::now();
    let etcd = EtcdCluster::start(1);
    let layout = Layout::default();
    let config = direct_config(&etcd);
    let high = now_ms() + 3_600_000;
    runtime().block_on(async {
        let none = read_mark(&config, &layout, 0, 3).await.expect("read");
        assert_eq!((none.high_water_ms, none.holder.as_deref()), (0, None));
        assert_eq!(none.location, "/snowflake/marks/0/3");

        let lease = EtcdLease::claim(&config, &layout, 0, Some(3), &holder())
            .await
            .expect("claim");
        lease.store_mark(high).await.expect("a mark");
        let held = read_mark(&config, &layout, 0, 3).await.expect("read");
        assert_eq!(held.high_water_ms, high);
        assert!(held.value.contains(&high.to_string()), "{held:?}");
        let holder_json = held.holder.expect("held");
        assert!(holder_json.contains("\"host\":\"test\""), "{holder_json}");

        let err = lower_mark(&config, &layout, 0, 3, high - 1000, "alice", now_ms())
            .await
            .expect_err("held");
        assert!(
            err.contains("held by a live node") && err.contains("/snowflake/workers/0/3"),
            "{err}"
        );
        assert_eq!(mark(&etcd, 3), high, "untouched while held");

        lease.release().await;
        assert_eq!(etcd.get("/snowflake/workers/0/3"), None, "released");
        let err = lower_mark(&config, &layout, 0, 3, high, "alice", now_ms())
            .await
            .expect_err("not lower");
        assert!(
            err.contains("not lower") && err.contains(&high.to_string()),
            "{err}"
        );

        let at = now_ms();
        let previous = lower_mark(&config, &layout, 0, 3, high - 1000, "alice", at)
            .await
            .expect("lowered");
        assert_eq!(previous.high_water_ms, high);
        let stored: serde_json::Value =
            serde_json::from_str(&etcd.get("/snowflake/marks/0/3").unwrap()).unwrap();
        assert_eq!(stored["high_water_ms"], high - 1000, "{stored}");
        assert_eq!(stored["lease"], "operator", "{stored}");
        assert_eq!(stored["lowered"]["from_ms"], high, "{stored}");
        assert_eq!(stored["lowered"]["by"], "alice", "{stored}");
        assert_eq!(stored["lowered"]["at_ms"], at, "{stored}");

        // The next holder issues above the lowered mark.
        let next = EtcdLease::claim(&config, &layout, 0, Some(3), &holder())
            .await
            .expect("claim again");
        assert_eq!(floor_of(&next), high - 1000);
        next.store_mark(high - 500)
            .await
            .expect("a mark over the operator's");
        assert_eq!(mark(&etcd, 3), high - 500);
    });
    eprintln!("etcd_mark: lower-mark test took {:?}", started.elapsed());
}

#[test]
fn a_mark_and_a_claim_of_the_previous_release_are_honoured() {
    let started = Instant::now();
    let etcd = EtcdCluster::start(1);
    let layout = Layout::default();
    let config = direct_config(&etcd);
    let old_mark_ms = now_ms() + 60_000;
    // Exactly what the previous release wrote: the mark, and a claim under its lease.
    let old_mark = format!(
        "{{\"high_water_ms\":{old_mark_ms},\"time\":\"2026-01-01T00:00:00.000Z\",\
         \"epoch_ms\":1288834974657,\"lease\":\"694d9a1b2c3d4e5f\"}}"
    );
    put(&etcd, &["/snowflake/marks/0/5", &old_mark]);
    let old_lease = etcdctl_lease(&etcd);
    let old_claim = "{\"host\":\"old-host\",\"pid\":4242,\"addresses\":[\"http=10.0.0.1:8080\"],\
                     \"started_at\":\"2026-01-01T00:00:00.000Z\",\"epoch_ms\":1288834974657,\
                     \"version\":\"0.1.0\"}";
    put(
        &etcd,
        &[
            &format!("--lease={old_lease}"),
            "/snowflake/workers/0/5",
            old_claim,
        ],
    );
    runtime().block_on(async {
        let err = EtcdLease::claim(&config, &layout, 0, Some(5), &holder())
            .await
            .expect_err("the old node holds it");
        assert!(err.to_string().contains("old-host"), "{err}");

        let shown = read_mark(&config, &layout, 0, 5).await.expect("read");
        assert_eq!(shown.high_water_ms, old_mark_ms);
        assert!(shown.holder.unwrap().contains("old-host"));

        let out = etcd.etcdctl(&["lease", "revoke", &old_lease]);
        assert!(out.status.success(), "{out:?}");
        let lease = EtcdLease::claim(&config, &layout, 0, Some(5), &holder())
            .await
            .expect("claim after the old node left");
        assert_eq!(floor_of(&lease), old_mark_ms, "the old mark is the floor");
        // The first write is conditional on the old mark's revision, and lands.
        lease.store_mark(old_mark_ms + 1).await.expect("a mark");
        assert_eq!(mark(&etcd, 5), old_mark_ms + 1);
        assert_eq!(lease.info().state, "held");
    });
    eprintln!("etcd_mark: compatibility test took {:?}", started.elapsed());
}

/// Waits (at most `limit`) until `lease` holds its pair again under a lease other than `first`
/// (hex), its fence held.
async fn claimed_again(lease: &EtcdLease, first: &str, limit: Duration) {
    let mut fence = lease.fence();
    tokio::time::timeout(limit, async {
        loop {
            let again = lease.info().lease_id.is_some_and(|id| id != first);
            if again && matches!(*fence.borrow_and_update(), Fence::Held { .. }) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("not claimed again within {limit:?}"));
}

// Found by review: a reservation the node computed before a re-claim, written after it, went
// through under the new lease (the claim had learned the mark's revision) and put a mark below
// the floor the re-claim read, that is below IDs another holder had issued. The next holder
// starts above the mark: it could issue them again.
#[test]
fn a_mark_written_after_a_reclaim_never_goes_below_the_floor_the_reclaim_read() {
    let started = Instant::now();
    let etcd = EtcdCluster::start(1);
    let worker = 3;
    let mark_key = format!("/snowflake/marks/0/{worker}");
    runtime().block_on(async {
        let mut config = direct_config(&etcd);
        config.lease_ttl_secs = 3;
        let lease = Arc::new(
            EtcdLease::claim(&config, &Layout::default(), 0, Some(worker), &holder())
                .await
                .expect("claimed"),
        );
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let keeper = tokio::spawn({
            let lease = Arc::clone(&lease);
            async move { lease.run(stop_rx).await }
        });
        let base = now_ms();
        lease.store_mark(base).await.expect("a first mark");
        let first = lease.info().lease_id.expect("a lease");

        // While this node is out (its lease revoked), another holder issued up to `floor`.
        let floor = base + 60_000;
        let etcd_ref = &etcd;
        tokio::task::block_in_place(|| {
            put(
                etcd_ref,
                &[
                    &mark_key,
                    &format!(
                        "{{\"high_water_ms\":{floor},\"epoch_ms\":1288834974657,\"lease\":\"b0b\"}}"
                    ),
                ],
            );
            let revoked = etcd_ref.etcdctl(&["lease", "revoke", &first]);
            assert!(revoked.status.success(), "{revoked:?}");
        });
        claimed_again(&lease, &first, Duration::from_secs(15)).await;
        assert_eq!(
            floor_of(&lease),
            floor,
            "the re-claim read the other holder's mark"
        );

        // The reservation computed before the re-claim lands now.
        lease
            .store_mark(base + 1000)
            .await
            .expect("the write goes through");
        let stored = tokio::task::block_in_place(|| mark(etcd_ref, worker));
        assert!(
            stored >= floor,
            "the mark in etcd went down to {stored}, below the floor {floor}"
        );
        stop_tx.send(true).expect("stop");
        keeper.await.expect("the keeper").expect("no error");
        lease.release().await;
    });
    eprintln!(
        "etcd_mark: write-after-reclaim test took {:?}",
        started.elapsed()
    );
}

// Found by review: etcd mode did not watch the claim key. A claim deleted by hand (here the whole
// prefix, marks too, as an operator "resetting" the fleet would) went unnoticed until the node's
// next mark write, up to half a reservation later, while a node starting meanwhile found the pair
// free and without a mark, and issued the same milliseconds. The ZooKeeper twin is
// `zookeeper_marks::a_holder_fences_at_once_when_its_znode_is_deleted_and_registers_again`.
#[test]
fn a_holder_fences_at_once_when_its_claim_is_deleted_and_claims_again() {
    let started = Instant::now();
    let etcd = EtcdCluster::start(1);
    let worker = 4;
    runtime().block_on(async {
        // TTL 30 s: a keep-alive every 10 s, so only a watch notices within a second.
        let lease = Arc::new(
            EtcdLease::claim(
                &direct_config(&etcd),
                &Layout::default(),
                0,
                Some(worker),
                &holder(),
            )
            .await
            .expect("claimed"),
        );
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let keeper = tokio::spawn({
            let lease = Arc::clone(&lease);
            async move { lease.run(stop_rx).await }
        });
        lease.store_mark(now_ms()).await.expect("a first mark");
        let first = lease.info().lease_id.expect("a lease");
        // Let the keeper open its watch.
        tokio::time::sleep(Duration::from_millis(500)).await;

        let etcd_ref = &etcd;
        let deleted = tokio::task::block_in_place(|| {
            let out = etcd_ref.etcdctl(&["del", "--prefix", "/snowflake/"]);
            assert!(out.status.success(), "{out:?}");
            Instant::now()
        });
        let lost_after = tokio::time::timeout(Duration::from_secs(1), async {
            while lease.info().losses == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            deleted.elapsed()
        })
        .await
        .unwrap_or_else(|_| panic!("still held 1 s after the claim was deleted"));
        eprintln!("etcd_mark: fenced {lost_after:?} after etcdctl del returned");

        // The pair is free: claimed again under a new lease, which writes.
        claimed_again(&lease, &first, Duration::from_secs(10)).await;
        lease
            .store_mark(now_ms())
            .await
            .expect("the new lease writes");
        assert_eq!(lease.info().losses, 1, "{:?}", lease.info());
        stop_tx.send(true).expect("stop");
        keeper.await.expect("the keeper").expect("no error");
        lease.release().await;
    });
    eprintln!(
        "etcd_mark: claim-deletion-fence test took {:?}",
        started.elapsed()
    );
}

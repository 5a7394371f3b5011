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
use snowflake_server::fleet::Coordinator;
use snowflake_server::{EtcdConfig, EtcdLease, Holder};
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

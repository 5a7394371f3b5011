//! A real server in-process on 127.0.0.1:0 with a manual clock, and a small HTTP client.

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::StatusCode;
use hyper::header::HeaderMap;
use hyper_util::rt::TokioIo;
use snowflake_core::{Clock, ManualClock};
use snowflake_fleet::Coordinator;
use snowflake_server::{Config, Listeners, Node, RunError};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// 2026-ish; any time after the epoch works.
pub const T: u64 = 1_790_000_000_000;

pub fn config(state_dir: &Path) -> Config {
    let mut config = Config::with_state_dir(state_dir);
    config.listeners.http_addr = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    config.listeners.grpc_addr = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    config.listeners.thrift_addr = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    config.listeners.resp_addr = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    config.listeners.admin_addr = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    config.clock.reserve_ms = 200;
    // The manual clock jumps where real time only flows: the clock-step policy (which compares
    // the wall clock with the real monotonic clock) would see every jump as a step. Tests of
    // that policy set it back (see `http_api::a_forward_clock_step_is_refused_until_it_held`).
    config.clock.max_clock_step_ms = 3_600_000;
    config
}

pub struct TestServer {
    pub addr: SocketAddr,
    /// The Thrift listener's address, if on.
    pub thrift_addr: Option<SocketAddr>,
    /// The gRPC listener's address, if on.
    pub grpc_addr: Option<SocketAddr>,
    /// The RESP listener's address, if on.
    pub resp_addr: Option<SocketAddr>,
    /// The admin listener's address, if on.
    pub admin_addr: Option<SocketAddr>,
    pub node: Arc<Node>,
    pub clock: ManualClock,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), RunError>>>,
    tickers: std::sync::Mutex<Vec<Arc<std::sync::atomic::AtomicBool>>>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        for ticker in self.tickers.lock().unwrap().drain(..) {
            ticker.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

impl TestServer {
    pub async fn start(config: Config, clock: ManualClock) -> TestServer {
        TestServer::start_with(config, clock, None).await
    }

    /// [`TestServer::start`] for a node whose pair is leased from `coordinator`.
    pub async fn start_with_coordinator(
        config: Config,
        clock: ManualClock,
        coordinator: Arc<dyn Coordinator>,
    ) -> TestServer {
        TestServer::start_with(config, clock, Some(coordinator)).await
    }

    async fn start_with(
        config: Config,
        clock: ManualClock,
        coordinator: Option<Arc<dyn Coordinator>>,
    ) -> TestServer {
        let node_clock = Arc::new(clock.clone()) as Arc<dyn Clock>;
        let anchor = snowflake_server::clock_trust::ClockAnchor::now(node_clock.as_ref());
        let node =
            Node::with_coordinator(&config, node_clock, anchor, coordinator).expect("node starts");
        let listeners = Listeners::bind(&config).await.expect("binds");
        let addr = listeners.http_addr().expect("http on");
        let thrift_addr = listeners.thrift_addr();
        let grpc_addr = listeners.grpc_addr();
        let resp_addr = listeners.resp_addr();
        let admin_addr = listeners.admin_addr();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn({
            let node = Arc::clone(&node);
            async move {
                snowflake_server::run(node, &config, listeners, async {
                    let _ = stopped.await;
                })
                .await
            }
        });
        TestServer {
            addr,
            thrift_addr,
            grpc_addr,
            resp_addr,
            admin_addr,
            node,
            clock,
            stop: Some(stop),
            task: Some(task),
            tickers: Default::default(),
        }
    }

    /// Graceful shutdown, as on SIGTERM; returns once the mark is persisted.
    pub async fn stop(mut self) {
        let _ = self.stop.take().expect("running").send(());
        self.task
            .take()
            .expect("running")
            .await
            .expect("no panic")
            .expect("clean stop");
    }

    /// Like `kill -9`: the run loop is dropped without persisting anything.
    /// Returns once every task of the service is gone (so its state-directory lock is free).
    pub async fn crash(mut self) {
        let task = self.task.take().expect("running");
        task.abort();
        let _ = task.await;
        for _ in 0..200 {
            if Arc::strong_count(&self.node) == 1 {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("the service's tasks outlived it");
    }

    /// Advances the manual clock 1 ms per real millisecond until the server is dropped, so
    /// requests for more than one millisecond's 4096 IDs can complete. It runs on an OS thread:
    /// a generator waiting for the next millisecond spins on a runtime worker, which could starve
    /// a ticker task scheduled on that same worker.
    pub fn tick(&self) {
        let clock = self.clock.clone();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        std::thread::spawn(move || {
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(std::time::Duration::from_millis(1));
                clock.advance_ms(1);
            }
        });
        self.tickers.lock().unwrap().push(stop);
    }

    pub async fn get(&self, path: &str) -> Reply {
        get(self.addr, path, &[]).await
    }

    /// Waits (in real time, at most 5 s) until `/metrics` holds every line of `wanted` (what a
    /// connection counts after its replies are written shows a moment later); panics with the
    /// last scrape otherwise.
    pub async fn wait_for_metrics(&self, wanted: &[&str]) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let metrics = self.get("/metrics").await.body;
            if wanted.iter().all(|w| metrics.contains(w)) {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "missing some of {wanted:?} in\n{metrics}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// Waits (in real time, bounded) until `/readyz` answers 200.
    pub async fn wait_ready(&self) {
        for _ in 0..200 {
            if self.get("/readyz").await.status == StatusCode::OK {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("not ready after 2 s: {:?}", self.get("/readyz").await);
    }
}

#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }

    pub fn error(&self) -> String {
        self.json()["error"]
            .as_str()
            .unwrap_or_else(|| panic!("no error field: {}", self.body))
            .to_owned()
    }
}

/// One GET on a fresh connection.
pub async fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Reply {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(connection);
    let mut request = hyper::Request::get(path).header("host", "127.0.0.1");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = sender
        .send_request(request.body(Empty::<Bytes>::new()).expect("request"))
        .await
        .expect("response");
    let status = response.status();
    let headers = response.headers().clone();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    Reply {
        status,
        headers,
        body: String::from_utf8(body.to_vec()).expect("utf-8"),
    }
}

pub fn id_of(reply: &Reply) -> u64 {
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    reply.json()["id"]
        .as_str()
        .expect("id is a string")
        .parse()
        .expect("decimal")
}

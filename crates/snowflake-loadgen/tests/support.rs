//! A small in-test HTTP server that answers like the Snowflake service, or misbehaves on purpose.

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

/// How the server answers.
#[derive(Debug, Clone, Copy)]
pub enum Mode {
    /// Like the service: `{"id":"…"}` and `{"ids":["…",…]}` with unique increasing IDs.
    Good,
    /// Like the service, but closes the connection after every answer.
    GoodNoKeepAlive,
    /// This status with a JSON error body.
    Status(u16),
    /// One ID too few for a batch; the ID as a JSON number for a single ID.
    WrongIds,
    /// Waits this long before answering.
    Slow(Duration),
    /// Accepts connections and closes them at once.
    Hangup,
}

/// A running test server on 127.0.0.1; stops (with all its connections) when dropped.
#[derive(Debug)]
pub struct TestServer {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Requests answered (or being answered) so far.
    requests: Arc<AtomicU64>,
    /// IDs handed out so far.
    ids: Arc<AtomicU64>,
    /// The accept loop, which owns the connection tasks.
    task: JoinHandle<()>,
}

impl TestServer {
    /// Starts a server on `127.0.0.1:0`.
    pub async fn start(mode: Mode) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(AtomicU64::new(0));
        let ids = Arc::new(AtomicU64::new(0));
        let next_id = Arc::new(AtomicU64::new(1_000_000));
        let (counted_requests, counted_ids) = (Arc::clone(&requests), Arc::clone(&ids));
        let task = tokio::spawn(async move {
            let mut connections = JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                if matches!(mode, Mode::Hangup) {
                    drop(stream);
                    continue;
                }
                let (requests, ids, next_id) = (
                    Arc::clone(&counted_requests),
                    Arc::clone(&counted_ids),
                    Arc::clone(&next_id),
                );
                let service = service_fn(move |request: Request<Incoming>| {
                    let (requests, ids, next_id) = (
                        Arc::clone(&requests),
                        Arc::clone(&ids),
                        Arc::clone(&next_id),
                    );
                    async move {
                        requests.fetch_add(1, Ordering::Relaxed);
                        Ok::<_, Infallible>(answer(mode, &request, &ids, &next_id).await)
                    }
                });
                connections.spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .keep_alive(!matches!(mode, Mode::GoodNoKeepAlive))
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        TestServer {
            addr,
            requests,
            ids,
            task,
        }
    }

    /// `HOST:PORT` of the server.
    pub fn addr(&self) -> String {
        self.addr.to_string()
    }

    /// Requests received so far.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// IDs handed out so far.
    pub fn ids(&self) -> u64 {
        self.ids.load(Ordering::Relaxed)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Answers one request according to `mode`.
async fn answer(
    mode: Mode,
    request: &Request<Incoming>,
    ids: &AtomicU64,
    next_id: &AtomicU64,
) -> Response<Full<Bytes>> {
    let count = match (request.uri().path(), request.uri().query()) {
        ("/v1/id", None) => None,
        ("/v1/ids", Some(query)) => match query
            .strip_prefix("count=")
            .and_then(|n| n.parse::<u64>().ok())
        {
            Some(n) if n >= 1 => Some(n),
            _ => {
                return json(
                    StatusCode::BAD_REQUEST,
                    r#"{"error":"bad count"}"#.to_owned(),
                );
            }
        },
        _ => return json(StatusCode::NOT_FOUND, r#"{"error":"not found"}"#.to_owned()),
    };
    match mode {
        Mode::Good | Mode::GoodNoKeepAlive => {}
        Mode::Status(code) => {
            let status = StatusCode::from_u16(code).unwrap();
            return json(
                status,
                r#"{"error":"cannot issue ids right now"}"#.to_owned(),
            );
        }
        Mode::WrongIds => {
            return match count {
                None => json(StatusCode::OK, r#"{"id":1234567}"#.to_owned()),
                Some(n) => json(StatusCode::OK, id_list(ids, next_id, n - 1)),
            };
        }
        Mode::Slow(delay) => tokio::time::sleep(delay).await,
        Mode::Hangup => {}
    }
    match count {
        None => {
            ids.fetch_add(1, Ordering::Relaxed);
            let id = next_id.fetch_add(1, Ordering::Relaxed);
            json(StatusCode::OK, format!(r#"{{"id":"{id}"}}"#))
        }
        Some(n) => json(StatusCode::OK, id_list(ids, next_id, n)),
    }
}

/// `{"ids":[…]}` with `n` fresh IDs.
fn id_list(ids: &AtomicU64, next_id: &AtomicU64, n: u64) -> String {
    ids.fetch_add(n, Ordering::Relaxed);
    let first = next_id.fetch_add(n, Ordering::Relaxed);
    let list: Vec<String> = (first..first + n).map(|id| format!("\"{id}\"")).collect();
    format!(r#"{{"ids":[{}]}}"#, list.join(","))
}

/// A JSON response.
fn json(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap()
}

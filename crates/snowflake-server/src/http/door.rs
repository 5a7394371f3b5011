//! The HTTP door on `listen`'s connections: hyper's HTTP/1.1 with its header-read timeout and
//! a graceful close on shutdown, the HTTP listener's connections starting in `/v1/id`'s own
//! loop (`wire`) and the admin listener's in hyper.

use super::{MAX_BUF_BYTES, admin_router, error, fast, wire};
use crate::config::Config;
use crate::listen::{self, OverCap};
use crate::node::Node;
use crate::tls::{Alpn, Tls};
use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Serves `router` on `listener` until `shutdown` flips to true; then stops accepting, lets
/// in-flight requests finish (at most `config.limits.shutdown_timeout`), and returns.
pub async fn serve(
    listener: TcpListener,
    node: Arc<Node>,
    router: Router,
    config: &Config,
    tls: Option<Arc<Tls>>,
    shutdown: watch::Receiver<bool>,
) {
    let front = fast::Front::with_id(Arc::clone(&node), router);
    serve_as("http", listener, node, front, config, tls, shutdown).await;
}

/// Serves the admin listener ([`admin_router`], never TLS) as [`serve`] does.
pub async fn serve_admin(
    listener: TcpListener,
    node: Arc<Node>,
    config: &Config,
    shutdown: watch::Receiver<bool>,
) {
    let router = admin_router(Arc::clone(&node), config.listeners.admin_status_page);
    let front = fast::Front::router(router);
    serve_as("admin", listener, node, front, config, None, shutdown).await;
}

/// [`serve`], named `name` in logs.
async fn serve_as(
    name: &'static str,
    listener: TcpListener,
    node: Arc<Node>,
    front: fast::Front,
    config: &Config,
    tls: Option<Arc<Tls>>,
    shutdown: watch::Receiver<bool>,
) {
    // HTTP/1.1 only: the JSON API gains nothing from HTTP/2 (gRPC has its own port), and
    // skipping protocol detection keeps the single-ID path lean.
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(config.limits.idle_timeout)
        // The most a connection buffers: an unfinished request head (a longer one is answered
        // 431), and body pieces waiting for a slow client (a large body is formatted only as
        // it is sent). hyper's default (about 400 KiB) times the connection cap was hundreds of
        // megabytes; 8 KiB (hyper's least) keeps the cap's worst case small.
        .max_buf_size(MAX_BUF_BYTES)
        .keep_alive(true);
    let door = Arc::new(Http {
        name,
        builder,
        front,
        idle: config.limits.idle_timeout,
    });
    let rejected = node.metrics().connections_rejected.clone();
    let limits = listen::Limits::of(config);
    listen::serve(listener, door, tls, limits, rejected, shutdown).await;
}

/// An HTTP door: the HTTP listener, or the admin one.
#[derive(Debug)]
struct Http {
    /// `http` or `admin`, for logs.
    name: &'static str,
    /// HTTP/1.1 with keep-alive, and the header-read timeout (`--idle-timeout-ms`) that also
    /// bounds how long a kept-alive connection may wait for its next request.
    builder: hyper::server::conn::http1::Builder,
    /// `/v1/id` in place (the HTTP listener), and the router.
    front: fast::Front,
    /// `--idle-timeout-ms`: the header-read timeout of `/v1/id`'s own loop (`wire`).
    idle: Duration,
}

impl Http {
    /// Serves a connection with hyper, `service` answering its requests.
    async fn hyper<S: listen::Io>(
        &self,
        io: S,
        service: wire::Resumed,
        peer: SocketAddr,
        mut stop: watch::Receiver<bool>,
    ) {
        let connection = self.builder.serve_connection(TokioIo::new(io), service);
        tokio::pin!(connection);
        let result = tokio::select! {
            result = connection.as_mut() => result,
            () = listen::stopped(&mut stop) => {
                // The request in flight is answered; a kept-alive connection then closes.
                connection.as_mut().graceful_shutdown();
                connection.await
            }
        };
        if let Err(err) = result {
            tracing::debug!(%peer, error = %err, "http connection ended with an error");
        }
    }
}

impl listen::Door for Http {
    const ALPN: Alpn = Alpn::Http1;
    const OVER_CAP: OverCap = OverCap::Answer;

    fn name(&self) -> &'static str {
        self.name
    }

    /// The HTTP listener's connections start in `/v1/id`'s own loop ([`wire`]), and go to
    /// hyper at the first request that loop does not answer; the admin listener's are hyper's.
    async fn serve<S: listen::Io>(
        self: Arc<Self>,
        io: S,
        peer: SocketAddr,
        stop: watch::Receiver<bool>,
    ) {
        // The stream on the heap, and one hyper future in the task whichever way the connection
        // comes to it: a TLS stream is 1.3 KB, and the task held it by value in each future that
        // had it (this one's argument, `wire`'s loop, hyper's connection); every connection's
        // task is as large as its largest way through, TLS or not.
        let io = Box::new(io);
        let (io, owed) = match self.front.id() {
            None => (wire::Rewind::new(Vec::new(), io), None),
            Some(id) => match wire::serve(id, self.idle, io, stop.clone()).await {
                None => return,
                Some(handover) => (handover.io, handover.owed),
            },
        };
        let service = wire::Resumed::new(owed, self.front.clone());
        self.hyper(io, service, peer, stop).await;
    }

    /// A 503 to the connection's first request, and close.
    async fn refuse<S: listen::Io>(self: Arc<Self>, io: S) {
        let service = hyper::service::service_fn(|_request| async {
            let mut response = error(
                StatusCode::SERVICE_UNAVAILABLE,
                "too many connections; try again later",
            );
            let headers = response.headers_mut();
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
            Ok::<_, std::convert::Infallible>(response)
        });
        let _ = self
            .builder
            .serve_connection(TokioIo::new(io), service)
            .await;
    }
}

//! The HTTP/JSON front end (SPEC §5): routes that only translate to the node's calls, and an
//! accept loop with a connection cap, timeouts and graceful shutdown.

use crate::config::Config;
use crate::node::{IssueError, Node, Protocol};
use axum::Router;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use snowflake_core::SnowflakeId;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tower_http::limit::RequestBodyLimitLayer;

/// Requests carry no body; anything beyond this is refused with 413.
const MAX_BODY_BYTES: usize = 16 * 1024;

/// At most this many connections over the cap are answered (503) at once; more are just closed.
const MAX_REFUSALS_IN_FLIGHT: usize = 64;

/// The route templates, used as bounded metric labels.
const ROUTES: &[&str] = &[
    "/v1/id",
    "/v1/ids",
    "/v1/decode/{id}",
    "/v1/info",
    "/healthz",
    "/readyz",
    "/metrics",
];

/// The router with every route, error mapping, metrics and body limits. Each route counts its
/// own request (route template and status) without a middleware, which measurably costs on the
/// single-ID hot path; slow work inside a request (waiting out a clock regression, an on-demand
/// reservation) is bounded by `--request-timeout-ms` in the node, and slow clients by the
/// header-read timeout.
pub fn router(node: Arc<Node>) -> Router {
    Router::new()
        .route(
            "/v1/id",
            get(|State(node): State<Arc<Node>>, headers: HeaderMap| async move {
                let response = next_id(&node, &headers).await;
                counted(&node, "/v1/id", response)
            }),
        )
        .route(
            "/v1/ids",
            get(|State(node): State<Arc<Node>>, RawQuery(query): RawQuery| async move {
                let response = next_ids(&node, query.as_deref()).await;
                counted(&node, "/v1/ids", response)
            }),
        )
        .route(
            "/v1/decode/{id}",
            get(|State(node): State<Arc<Node>>, id: Result<Path<String>, PathRejection>| async move {
                let response = decode(&node, id);
                counted(&node, "/v1/decode/{id}", response)
            }),
        )
        .route(
            "/v1/info",
            get(|State(node): State<Arc<Node>>| async move {
                let response = info(&node);
                counted(&node, "/v1/info", response)
            }),
        )
        .route(
            "/healthz",
            get(|State(node): State<Arc<Node>>| async move {
                counted(&node, "/healthz", json(StatusCode::OK, r#"{"status":"ok"}"#))
            }),
        )
        .route(
            "/readyz",
            get(|State(node): State<Arc<Node>>| async move {
                let response = readyz(&node);
                counted(&node, "/readyz", response)
            }),
        )
        .route(
            "/metrics",
            get(|State(node): State<Arc<Node>>| async move {
                let response = metrics(&node);
                counted(&node, "/metrics", response)
            }),
        )
        .fallback(|State(node): State<Arc<Node>>, method: Method, uri: Uri| async move {
            counted(&node, "unmatched", not_found(&method, &uri))
        })
        .method_not_allowed_fallback(
            |State(node): State<Arc<Node>>, method: Method, uri: Uri| async move {
                let route = ROUTES.iter().copied().find(|r| *r == uri.path()).unwrap_or("unmatched");
                counted(&node, route, method_not_allowed(&method, &uri))
            },
        )
        .layer(RequestBodyLimitLayer::new(MAX_BODY_BYTES))
        .with_state(node)
}

/// Counts a request by route template and status.
fn counted(node: &Node, route: &'static str, response: Response) -> Response {
    node.metrics()
        .request(Protocol::Http, route, response.status().as_u16());
    response
}

fn json(status: StatusCode, body: impl Into<axum::body::Body>) -> Response {
    let mut response = Response::new(body.into());
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// `{"error": "..."}` with a status.
fn error(status: StatusCode, message: &str) -> Response {
    json(status, serde_json::json!({ "error": message }).to_string())
}

impl IntoResponse for IssueError {
    fn into_response(self) -> Response {
        match self {
            IssueError::BadRequest(message) => error(StatusCode::BAD_REQUEST, &message),
            IssueError::Unavailable {
                message,
                retry_after_secs,
            } => {
                let mut response = error(StatusCode::SERVICE_UNAVAILABLE, &message);
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs));
                response
            }
        }
    }
}

/// Whether the client asked for `text/plain` rather than JSON.
fn wants_text(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|accept| {
            // The first listed media type that we serve wins.
            accept
                .split(',')
                .map(|part| part.split(';').next().unwrap_or("").trim())
                .find(|media| {
                    matches!(
                        *media,
                        "text/plain" | "application/json" | "*/*" | "application/*" | "text/*"
                    )
                })
                .is_some_and(|media| media == "text/plain" || media == "text/*")
        })
}

async fn next_id(node: &Node, headers: &HeaderMap) -> Response {
    match node.issue(Protocol::Http, 1).await {
        Ok(batches) => {
            let id = batches[0].first().as_u64();
            let mut buf = itoa::Buffer::new();
            let digits = buf.format(id);
            if wants_text(headers) {
                let mut response = Response::new(axum::body::Body::from(digits.to_owned()));
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/plain; charset=utf-8"),
                );
                response
            } else {
                let mut body = String::with_capacity(32);
                body.push_str("{\"id\":\"");
                body.push_str(digits);
                body.push_str("\"}");
                json(StatusCode::OK, body)
            }
        }
        Err(err) => err.into_response(),
    }
}

async fn next_ids(node: &Node, query: Option<&str>) -> Response {
    let count_text = query
        .unwrap_or("")
        .split('&')
        .find_map(|pair| pair.strip_prefix("count="));
    let Some(count_text) = count_text else {
        return error(
            StatusCode::BAD_REQUEST,
            &format!(
                "missing query parameter count: expected /v1/ids?count=N with N in 1..={}",
                node.max_batch()
            ),
        );
    };
    let count = match node.parse_count(count_text) {
        Ok(count) => count,
        Err(err) => return err.into_response(),
    };
    match node.issue(Protocol::Http, count).await {
        Ok(batches) => {
            let capacity = usize::try_from(count)
                .unwrap_or(0)
                .saturating_mul(22)
                .saturating_add(16);
            let mut body = Vec::with_capacity(capacity);
            body.extend_from_slice(b"{\"ids\":[");
            let mut buf = itoa::Buffer::new();
            let mut first = true;
            for batch in batches {
                for id in batch {
                    if !first {
                        body.push(b',');
                    }
                    first = false;
                    body.push(b'"');
                    body.extend_from_slice(buf.format(id.as_u64()).as_bytes());
                    body.push(b'"');
                }
                // A large body is written a millisecond's worth at a time, the thread yielded
                // in between: the requests queued behind it are not held up for its whole length.
                if count > node.layout().max_ids_per_ms() {
                    tokio::task::yield_now().await;
                }
            }
            body.extend_from_slice(b"]}");
            json(StatusCode::OK, body)
        }
        Err(err) => err.into_response(),
    }
}

fn decode(node: &Node, id: Result<Path<String>, PathRejection>) -> Response {
    let Ok(Path(text)) = id else {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid snowflake id: the path segment is not valid UTF-8 text",
        );
    };
    match text.parse::<SnowflakeId>() {
        Ok(id) => match serde_json::to_vec(&node.layout().describe(id)) {
            Ok(body) => json(StatusCode::OK, body),
            Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
        },
        Err(err) => error(StatusCode::BAD_REQUEST, &err.to_string()),
    }
}

fn info(node: &Node) -> Response {
    match serde_json::to_vec(&node.info()) {
        Ok(body) => json(StatusCode::OK, body),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

fn readyz(node: &Node) -> Response {
    match node.readiness() {
        Ok(()) => json(StatusCode::OK, r#"{"status":"ready"}"#),
        Err(err) => err.into_response(),
    }
}

fn metrics(node: &Node) -> Response {
    let mut response = Response::new(axum::body::Body::from(node.metrics().encode()));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    response
}

fn not_found(method: &Method, uri: &Uri) -> Response {
    let path: String = uri.path().chars().take(100).collect();
    error(
        StatusCode::NOT_FOUND,
        &format!(
            "no such route: {method} {path}; routes: {}",
            ROUTES.join(", ")
        ),
    )
}

fn method_not_allowed(method: &Method, uri: &Uri) -> Response {
    let path: String = uri.path().chars().take(100).collect();
    let mut response = error(
        StatusCode::METHOD_NOT_ALLOWED,
        &format!("method {method} is not allowed on {path}; use GET"),
    );
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("GET"));
    response
}

/// Serves HTTP on `listener` until `shutdown` flips to true; then stops accepting, lets
/// in-flight requests finish (at most `config.shutdown_timeout`), and returns.
pub async fn serve(
    listener: TcpListener,
    node: Arc<Node>,
    config: &Config,
    mut shutdown: watch::Receiver<bool>,
) {
    let router = router(Arc::clone(&node));
    // HTTP/1.1 only: the JSON API gains nothing from HTTP/2 (gRPC has its own port), and
    // skipping protocol detection keeps the single-ID path lean.
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(config.idle_timeout)
        .keep_alive(true);
    let builder = Arc::new(builder);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(config.max_connections));
    let refusals = Arc::new(Semaphore::new(MAX_REFUSALS_IN_FLIGHT));
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown.wait_for(|stop| *stop) => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(err) => {
                // Typically out of file descriptors: back off instead of spinning.
                tracing::warn!(error = %err, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            node.metrics().connections_rejected.inc();
            // Answer one request with 503 and close, within a second; past a small number of
            // such answers at once, just close the socket.
            if let Ok(refusal) = Arc::clone(&refusals).try_acquire_owned() {
                let builder = Arc::clone(&builder);
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(|_request| async {
                        let mut response = error(
                            StatusCode::SERVICE_UNAVAILABLE,
                            "too many connections; try again later",
                        );
                        response
                            .headers_mut()
                            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                        response
                            .headers_mut()
                            .insert(header::CONNECTION, HeaderValue::from_static("close"));
                        Ok::<_, std::convert::Infallible>(response)
                    });
                    let connection = builder.serve_connection(TokioIo::new(stream), service);
                    let _ = tokio::time::timeout(Duration::from_secs(1), connection).await;
                    drop(refusal);
                });
            }
            continue;
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        let builder = Arc::clone(&builder);
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            if let Err(err) = watcher.watch(connection).await {
                tracing::debug!(%peer, error = %err, "http connection ended with an error");
            }
            drop(slot);
        });
    }
    drop(listener);
    if tokio::time::timeout(config.shutdown_timeout, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(timeout = ?config.shutdown_timeout, "in-flight http requests did not finish in time");
    }
}

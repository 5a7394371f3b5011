//! The HTTP/JSON front end (SPEC §5): routes that only translate to the node's calls, served
//! over HTTP/1.1 on the connections `listen` accepts (its cap, TLS handshake and drain), with a
//! header-read timeout and a graceful close on shutdown (`door`). `GET /v1/id` is answered
//! straight on the wire by a loop of its own (`wire`) until a connection asks anything else,
//! then by hyper through a service of its own ahead of the router (`fast`), with the router's
//! answers byte for byte. The admin listener is the same door with only the probe routes.

mod door;
mod fast;
mod wire;

pub use door::{serve, serve_admin};

use crate::json_ids::{Format, IdsBody};
use crate::latency::Histogram;
use crate::node::{IssueError, Node, Protocol};
use crate::status;
use axum::Router;
use axum::extract::Query;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use std::sync::Arc;
use std::time::Instant;
use tower_http::limit::RequestBodyLimitLayer;

/// What one HTTP connection buffers at most (see `door::serve_as`), also the longest request
/// head.
const MAX_BUF_BYTES: usize = 8 * 1024;

/// Requests carry no body; anything beyond this is refused with 413.
const MAX_BODY_BYTES: usize = 16 * 1024;

/// The routes only the HTTP listener serves.
const ID_ROUTES: &[&str] = &[
    "/v1/id",
    "/v1/ids",
    "/v1/decode/{id}",
    "/v1/info",
    "/v1/range",
];

/// The routes both the HTTP and the admin listener serve.
const PROBE_ROUTES: &[&str] = &[
    "/healthz",
    "/readyz",
    "/metrics",
    "/",
    "/status.js",
    "/v1/status",
];

/// Every route template of the HTTP listener, used as bounded metric labels.
fn routes() -> impl Iterator<Item = &'static str> {
    ID_ROUTES.iter().chain(PROBE_ROUTES).copied()
}

/// The router with every route, error mapping, metrics and body limits. Each route counts its
/// own request (route template and status) and observes its latency without a middleware,
/// which measurably costs on the single-ID hot path: its closure holds the route's histogram.
/// Slow work inside a request (waiting out a clock regression, an on-demand reservation) is
/// bounded by `--request-timeout-ms` in the node, and slow clients by the header-read timeout.
pub fn router(node: Arc<Node>) -> Router {
    let id = Timed::new(&node, "/v1/id");
    let ids = Timed::new(&node, "/v1/ids");
    let decode_route = Timed::new(&node, "/v1/decode/{id}");
    let range_route = Timed::new(&node, "/v1/range");
    let router =
        Router::new()
            .route(
                "/v1/id",
                get(
                    move |State(node): State<Arc<Node>>,
                          headers: HeaderMap,
                          RawQuery(query): RawQuery| async move {
                        let started = Instant::now();
                        let response = next_id(&node, &headers, query.as_deref()).await;
                        id.done(&node, started, response)
                    },
                ),
            )
            .route(
                "/v1/ids",
                get(
                    move |State(node): State<Arc<Node>>, RawQuery(query): RawQuery| async move {
                        let started = Instant::now();
                        let response = next_ids(&node, query.as_deref()).await;
                        ids.done(&node, started, response)
                    },
                ),
            )
            .route(
                "/v1/decode/{id}",
                get(
                    move |State(node): State<Arc<Node>>,
                          id: Result<Path<String>, PathRejection>| async move {
                        let started = Instant::now();
                        let response = decode(&node, id);
                        decode_route.done(&node, started, response)
                    },
                ),
            )
            .route("/v1/info", node_get(&node, "/v1/info", info))
            .route(
                "/v1/range",
                get(
                    move |State(node): State<Arc<Node>>,
                          query: Result<Query<RangeQuery>, QueryRejection>| async move {
                        let started = Instant::now();
                        let response = range(&node, query);
                        range_route.done(&node, started, response)
                    },
                ),
            );
    let all = Timed::all(&node);
    let listed = routes().collect::<Vec<_>>().join(", ");
    probe_routes(router, &node, listed, true)
        .method_not_allowed_fallback(
            move |State(node): State<Arc<Node>>, method: Method, uri: Uri| async move {
                let started = Instant::now();
                let route = all
                    .iter()
                    .find(|r| r.route == uri.path())
                    .unwrap_or(&all[0]);
                route.done(&node, started, method_not_allowed(&method, &uri))
            },
        )
        .layer(RequestBodyLimitLayer::new(MAX_BODY_BYTES))
        .with_state(node)
}

/// The routes of the status page (and its JSON), which `--admin-status-page off` leaves out
/// of the admin listener.
const STATUS_PAGE_ROUTES: &[&str] = &["/", "/status.js", "/v1/status"];

/// The admin listener's routes (`--admin-addr`): health, readiness, metrics and, with
/// `status_page`, the status page, the same answers as on the HTTP listener; its 404 lists
/// only the routes it serves.
pub fn admin_router(node: Arc<Node>, status_page: bool) -> Router {
    let listed: Vec<&str> = PROBE_ROUTES
        .iter()
        .copied()
        .filter(|route| status_page || !STATUS_PAGE_ROUTES.contains(route))
        .collect();
    probe_routes(Router::new(), &node, listed.join(", "), status_page)
        .layer(RequestBodyLimitLayer::new(MAX_BODY_BYTES))
        .with_state(node)
}

/// The routes both listeners serve (health, readiness, metrics and, with `status_page`, the
/// status page), and the answer to every other path: a 404 that lists `listed`, the
/// listener's own routes.
fn probe_routes(
    router: Router<Arc<Node>>,
    node: &Node,
    listed: String,
    status_page: bool,
) -> Router<Arc<Node>> {
    let listed: Arc<str> = listed.into();
    let unmatched = Timed::new(node, "unmatched");
    let router = if status_page {
        let page = Timed::new(node, "/");
        router
            .route(
                "/",
                get(
                    move |State(node): State<Arc<Node>>,
                          query: Result<Query<PageQuery>, QueryRejection>| async move {
                        let started = Instant::now();
                        let decode = query.ok().and_then(|Query(q)| q.decode);
                        let body = status::page(&node, decode.as_deref());
                        page.done(&node, started, html(body))
                    },
                ),
            )
            .route("/status.js", node_get(node, "/status.js", |_| script()))
            .route("/v1/status", node_get(node, "/v1/status", status_json))
    } else {
        router
    };
    router
        .route(
            "/healthz",
            node_get(node, "/healthz", |_| {
                json(StatusCode::OK, r#"{"status":"ok"}"#)
            }),
        )
        .route("/readyz", node_get(node, "/readyz", readyz))
        .route("/metrics", node_get(node, "/metrics", metrics))
        .fallback(
            move |State(node): State<Arc<Node>>, method: Method, uri: Uri| async move {
                let started = Instant::now();
                unmatched.done(&node, started, not_found(&method, &uri, &listed))
            },
        )
}

/// `GET route` answered by `answer` from the node alone, counted and timed as `route`.
fn node_get(
    node: &Node,
    route: &'static str,
    answer: fn(&Node) -> Response,
) -> axum::routing::MethodRouter<Arc<Node>> {
    let timed = Timed::new(node, route);
    get(move |State(node): State<Arc<Node>>| async move {
        let started = Instant::now();
        let response = answer(&node);
        timed.done(&node, started, response)
    })
}

/// `/status.js`: the status page's script.
fn script() -> Response {
    let mut response = Response::new(axum::body::Body::from(status::SCRIPT));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/javascript; charset=utf-8"),
    );
    response
}

/// `/v1/status`: what the status page shows, as JSON.
fn status_json(node: &Node) -> Response {
    match serde_json::to_vec(&status::status(node)) {
        Ok(body) => json(StatusCode::OK, body),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

/// The status page's query: `?decode=ID` for the form that works without JavaScript.
#[derive(Debug, serde::Deserialize)]
struct PageQuery {
    decode: Option<String>,
}

/// The status page: HTML, not cached, under its own Content-Security-Policy.
fn html(body: String) -> Response {
    let mut response = Response::new(axum::body::Body::from(body));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(status::CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// A route's name (a bounded metric label) and its latency histogram.
#[derive(Debug, Clone)]
struct Timed {
    route: &'static str,
    latency: Arc<Histogram>,
}

impl Timed {
    fn new(node: &Node, route: &'static str) -> Timed {
        Timed {
            route,
            latency: node.metrics().latency(Protocol::Http, route),
        }
    }

    /// Every route template, `unmatched` first.
    fn all(node: &Node) -> Arc<Vec<Timed>> {
        let routes = std::iter::once("unmatched").chain(routes());
        Arc::new(routes.map(|r| Timed::new(node, r)).collect())
    }

    /// Counts a request by route template and status, and observes how long it took.
    fn done<B>(
        &self,
        node: &Node,
        started: Instant,
        response: http::Response<B>,
    ) -> http::Response<B> {
        node.metrics()
            .request(Protocol::Http, self.route, response.status().as_u16());
        self.latency.observe(started.elapsed());
        response
    }
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
            }
            | IssueError::Exhausted {
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
        .any(accepts_text)
}

/// Whether one `Accept` value asks for text: the first listed media type that we serve wins.
fn accepts_text(accept: &str) -> bool {
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
}

async fn next_id(node: &Node, headers: &HeaderMap, query: Option<&str>) -> Response {
    let format = match query {
        // The common case, without a query, costs nothing.
        None => Format::String,
        Some(_) => match Format::of(node, query) {
            Ok(format) => format,
            Err(message) => return error(StatusCode::BAD_REQUEST, &message),
        },
    };
    match node.issue(Protocol::Http, 1).await {
        Ok(batches) => id_response(wants_text(headers), format, batches[0].first().as_u64()),
        Err(err) => err.into_response(),
    }
}

/// `/v1/id`'s answer with `id`: its digits as text, or JSON in `format`.
fn id_response(text: bool, format: Format, id: u64) -> Response {
    let (content_type, body) = id_bytes(text, format, id);
    let mut response = Response::new(axum::body::Body::from(body));
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, content_type);
    response
}

/// `/v1/id`'s content type and body with `id`, as a header value and `Bytes`: one exact-size
/// allocation (a `Vec` with room to spare would cost `Bytes` a second one, its shared header).
fn id_bytes(text: bool, format: Format, id: u64) -> (HeaderValue, bytes::Bytes) {
    let (content_type, body) = id_body(text, format, id);
    (
        HeaderValue::from_static(content_type),
        bytes::Bytes::copy_from_slice(&body),
    )
}

/// `/v1/id`'s content type and body with `id`: its digits as text, or JSON in `format`,
/// formatted on the stack.
fn id_body(text: bool, format: Format, id: u64) -> (&'static str, IdBody) {
    let mut buf = itoa::Buffer::new();
    let digits = buf.format(id).as_bytes();
    let mut body = IdBody {
        bytes: [0; 32],
        len: 0,
    };
    if text {
        body.push(digits);
        return ("text/plain; charset=utf-8", body);
    }
    for part in [
        b"{\"id\":".as_slice(),
        format.quote(),
        digits,
        format.quote(),
        b"}",
    ] {
        body.push(part);
    }
    ("application/json", body)
}

/// `/v1/id`'s body: `{"id":"` + at most 20 digits + `"}` fits.
struct IdBody {
    bytes: [u8; 32],
    len: usize,
}

impl IdBody {
    fn push(&mut self, part: &[u8]) {
        self.bytes[self.len..self.len + part.len()].copy_from_slice(part);
        self.len += part.len();
    }
}

impl std::ops::Deref for IdBody {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.bytes[..self.len]
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
    let format = match Format::of(node, query) {
        Ok(format) => format,
        Err(message) => return error(StatusCode::BAD_REQUEST, &message),
    };
    // A bulk reply takes its share of the node's budget first (see `crate::bulk`), and holds
    // it until the body is sent or dropped.
    let mut permit = if crate::bulk::BulkGate::is_bulk(count) {
        let held = count
            .saturating_mul(22)
            .min(2 * IdsBody::CHUNK_BYTES as u64);
        match node.admit_bulk(held).await {
            Ok(permit) => Some(permit),
            Err(err) => return err.into_response(),
        }
    } else {
        None
    };
    let issued = node.issue(Protocol::Http, count).await;
    if let Some(permit) = permit.as_mut() {
        permit.issued();
    }
    match issued {
        // Bulk: formatted as hyper sends it, a chunk at a time, so that no runtime thread
        // formats (or writes) megabytes in one go while single IDs wait behind it, no
        // multi-megabyte buffer is allocated, and a slow client holds at most a chunk or two.
        Ok(batches) if permit.is_some() => json(
            StatusCode::OK,
            axum::body::Body::new(IdsBody::new(batches, format).holding(permit)),
        ),
        Ok(batches) => {
            let capacity = usize::try_from(count)
                .unwrap_or(0)
                .saturating_mul(22)
                .saturating_add(16);
            let mut body = Vec::with_capacity(capacity);
            body.extend_from_slice(b"{\"ids\":[");
            let mut buf = itoa::Buffer::new();
            let quote = format.quote();
            for (i, id) in batches.into_iter().flatten().enumerate() {
                if i > 0 {
                    body.push(b',');
                }
                body.extend_from_slice(quote);
                body.extend_from_slice(buf.format(id.as_u64()).as_bytes());
                body.extend_from_slice(quote);
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
    // Under the node's layout: an ID above its largest is refused, not decoded past its end.
    let layout = node.layout();
    match layout.parse_id(&text).and_then(|id| layout.describe(id)) {
        Ok(decoded) => match serde_json::to_vec(&decoded) {
            Ok(body) => json(StatusCode::OK, body),
            Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
        },
        Err(err) => error(StatusCode::BAD_REQUEST, &err.to_string()),
    }
}

/// `/v1/range`'s query: the window's bounds, Unix ms or RFC 3339.
#[derive(Debug, serde::Deserialize)]
struct RangeQuery {
    from: Option<String>,
    to: Option<String>,
}

/// `GET /v1/range?from=T&to=T`: the smallest and largest ID any node could issue in the window.
fn range(node: &Node, query: Result<Query<RangeQuery>, QueryRejection>) -> Response {
    let Ok(Query(RangeQuery { from, to })) = query else {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid query: expected /v1/range?from=T&to=T (unix ms or RFC 3339)",
        );
    };
    let (Some(from), Some(to)) = (from, to) else {
        return error(
            StatusCode::BAD_REQUEST,
            "missing query parameter from or to: expected /v1/range?from=T&to=T (unix ms or RFC \
             3339, both included)",
        );
    };
    match crate::window::range(node.layout(), &plus_offset(&from), &plus_offset(&to)) {
        Ok(range) => match serde_json::to_vec(&range) {
            Ok(body) => json(StatusCode::OK, body),
            Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
        },
        Err(message) => error(StatusCode::BAD_REQUEST, &message),
    }
}

/// A `+` in a query string means a space, so an RFC 3339 offset written unescaped
/// (`…T10:00:00+02:00`) arrives as `…T10:00:00 02:00`: read that space back as the `+`.
fn plus_offset(text: &str) -> std::borrow::Cow<'_, str> {
    let bytes = text.as_bytes();
    match bytes.len().checked_sub(6) {
        Some(at) if bytes[at] == b' ' && bytes[at + 3] == b':' => {
            std::borrow::Cow::Owned(format!("{}+{}", &text[..at], &text[at + 1..]))
        }
        _ => std::borrow::Cow::Borrowed(text),
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

/// The 404 answer, listing `routes` (the listener's own).
fn not_found(method: &Method, uri: &Uri, routes: &str) -> Response {
    let path: String = uri.path().chars().take(100).collect();
    error(
        StatusCode::NOT_FOUND,
        &format!("no such route: {method} {path}; routes: {routes}"),
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

//! The single-ID fast path in hyper: `GET` and `HEAD /v1/id` answered by a hyper service of
//! its own, ahead of the axum router, with the router's answers byte for byte
//! (tests/http_answers.rs) and its metrics, and everything else handed to the router
//! unchanged. It answers `/v1/id` on connections that `wire`'s loop handed to hyper (after
//! another route, say); until then that loop answers it, leaner still.
//!
//! What it saves per request, against the same answer through the router: the route lookup,
//! the router's and the route's service clones, the boxed handler future, the `HeaderMap`
//! extractor's copy of the request headers (`Accept` is read in place), and the `Vec` of one ID
//! batch (the generator is asked for one ID). The generator is asked once in place; only when
//! it must wait (a clock regression within the bound, a reservation) does the answer become a
//! boxed future, which waits as the router's handler would.

use super::{Timed, id_bytes};
use crate::json_ids::Format;
use crate::node::{Node, NotNow, Protocol};
use axum::Router;
use axum::http::{HeaderValue, Method, Request, header};
use axum::response::IntoResponse;
use bytes::Bytes;
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;
use tower::ServiceExt;
use tower::util::Oneshot;

/// An answer's body: `/v1/id`'s, as it is (no box), or the router's.
pub(super) type Body = Either<Full<Bytes>, axum::body::Body>;

/// An answer.
pub(super) type Response = http::Response<Body>;

/// An answer of the router's kind (an error), as the router gives it: with the
/// `content-length` axum sets (last in the map) when the body's length is known.
pub(super) fn routed(response: axum::response::Response) -> Response {
    let mut response = response.map(Either::Right);
    if !response.headers().contains_key(header::CONTENT_LENGTH)
        && let Some(length) = http_body::Body::size_hint(response.body()).exact()
    {
        let value = HeaderValue::from(length);
        response.headers_mut().insert(header::CONTENT_LENGTH, value);
    }
    response
}

/// `content-length` values of `/v1/id`'s bodies (at most 29 bytes), made without allocating.
const LENGTHS: [&str; 33] = [
    "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16",
    "17", "18", "19", "20", "21", "22", "23", "24", "25", "26", "27", "28", "29", "30", "31", "32",
];

/// The `content-length` of a body of `length` bytes.
fn content_length(length: usize) -> HeaderValue {
    match LENGTHS.get(length) {
        Some(text) => HeaderValue::from_static(text),
        None => HeaderValue::from(length),
    }
}

/// The HTTP listener's service: `/v1/id` in place, the router for the rest.
#[derive(Debug, Clone)]
pub(super) struct Front {
    /// `/v1/id`'s node and metrics; `None` on the admin listener, which has no such route.
    id: Option<Id>,
    router: Router,
}

/// What `/v1/id` needs: the node, and the route's request counter and latency histogram.
#[derive(Debug, Clone)]
pub(super) struct Id {
    pub(super) node: Arc<Node>,
    pub(super) timed: Timed,
}

impl Front {
    /// `router` with `/v1/id` served ahead of it (the HTTP listener).
    pub(super) fn with_id(node: Arc<Node>, router: Router) -> Front {
        let timed = Timed::new(&node, "/v1/id");
        Front {
            id: Some(Id { node, timed }),
            router,
        }
    }

    /// `/v1/id`'s node and metrics, on the HTTP listener.
    pub(super) fn id(&self) -> Option<&Id> {
        self.id.as_ref()
    }

    /// `router` alone (the admin listener).
    pub(super) fn router(router: Router) -> Front {
        Front { id: None, router }
    }
}

/// Whether the router would answer `request` with `/v1/id`'s handler and nothing else: `GET`
/// or `HEAD` of exactly that path, with no body (a body, however small, goes through the
/// router's body limit as before).
fn is_single_id<B: http_body::Body>(request: &Request<B>) -> bool {
    request.uri().path() == "/v1/id"
        && (request.method() == Method::GET || request.method() == Method::HEAD)
        && request.body().is_end_stream()
}

impl hyper::service::Service<Request<Incoming>> for Front {
    type Response = Response;
    type Error = Infallible;
    type Future = Answer;

    fn call(&self, request: Request<Incoming>) -> Answer {
        match &self.id {
            Some(id) if is_single_id(&request) => id.answer(request),
            _ => Answer::Router(self.router.clone().oneshot(request)),
        }
    }
}

impl Id {
    /// The answer the router's `/v1/id` handler gives, counted and timed as it does.
    fn answer(&self, request: Request<Incoming>) -> Answer {
        let started = Instant::now();
        let query = request.uri().query();
        let format = match query {
            None => Format::String,
            Some(_) => match Format::of(&self.node, query) {
                Ok(format) => format,
                Err(message) => {
                    let response = super::error(hyper::StatusCode::BAD_REQUEST, &message);
                    return self.done(started, routed(response));
                }
            },
        };
        let text = super::wants_text(request.headers());
        let response = match self.node.issue_one_now(Protocol::Http) {
            Ok(id) => id_answer(request, text, format, id),
            Err(NotNow::Refused(err)) => routed(err.into_response()),
            Err(not_now) => {
                // Rare: the generator must wait. As the router's handler would, on a future.
                let id = self.clone();
                return Answer::Waiting(Box::pin(async move {
                    let response = match id.node.issue_one_after(Protocol::Http, not_now).await {
                        Ok(issued) => id_answer(request, text, format, issued),
                        Err(err) => routed(err.into_response()),
                    };
                    id.timed.done(&id.node, started, response)
                }));
            }
        };
        self.done(started, response)
    }

    /// `response`, counted and timed.
    fn done(&self, started: Instant, response: Response) -> Answer {
        Answer::Ready(Some(self.timed.done(&self.node, started, response)))
    }
}

/// `/v1/id`'s answer to `request` with `id`, its body as it is, in the request's header map
/// (emptied): hyper keeps an answer's map for the next request's headers, so that a connection
/// asking for one ID after another allocates no map. The `content-length` goes last in the
/// map, as axum's router puts it (hyper adds its own headers after the map's); for `HEAD`,
/// hyper writes the head without the body: the same bytes as the router's answers.
fn id_answer(request: Request<Incoming>, text: bool, format: Format, id: u64) -> Response {
    let (content_type, body) = id_bytes(text, format, id);
    let (parts, _) = request.into_parts();
    let mut headers = parts.headers;
    headers.clear();
    headers.insert(header::CONTENT_TYPE, content_type);
    headers.insert(header::CONTENT_LENGTH, content_length(body.len()));
    let mut response = Response::new(Either::Left(Full::new(body)));
    *response.headers_mut() = headers;
    response
}

/// The future of one answer.
pub(super) enum Answer {
    /// Answered in place (taken once).
    Ready(Option<Response>),
    /// `/v1/id` waiting for the generator.
    Waiting(Pin<Box<dyn Future<Output = Response> + Send>>),
    /// Anything else, through the router.
    Router(Oneshot<Router, Request<Incoming>>),
}

impl Future for Answer {
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Answer::Ready(response) => Poll::Ready(Ok(response
                .take()
                .expect("an answer is polled once it is ready"))),
            Answer::Waiting(future) => future.as_mut().poll(cx).map(Ok),
            Answer::Router(future) => Pin::new(future).poll(cx).map(|done| done.map(routed)),
        }
    }
}

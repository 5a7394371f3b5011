//! The single-ID fast path: `GET` and `HEAD /v1/id` answered by a hyper service of its own,
//! ahead of the axum router, with the router's answers byte for byte (tests/http_answers.rs)
//! and its metrics, and everything else handed to the router unchanged.
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
use axum::http::{Method, Request, header};
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

/// The router's answer, as an [`Answer`].
fn routed(response: axum::response::Response) -> Response {
    response.map(Either::Right)
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
struct Id {
    node: Arc<Node>,
    timed: Timed,
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
            Some(id) if is_single_id(&request) => id.answer(&request),
            _ => Answer::Router(self.router.clone().oneshot(request)),
        }
    }
}

impl Id {
    /// The answer the router's `/v1/id` handler gives, counted and timed as it does.
    fn answer(&self, request: &Request<Incoming>) -> Answer {
        let started = Instant::now();
        let query = request.uri().query();
        let format = match query {
            None => Format::String,
            Some(_) => match Format::of(&self.node, query) {
                Ok(format) => format,
                Err(message) => {
                    let response = super::error(hyper::StatusCode::BAD_REQUEST, &message);
                    return self.done(request, started, routed(response));
                }
            },
        };
        let response = match self.node.issue_one_now(Protocol::Http) {
            Ok(id) => id_answer(super::wants_text(request.headers()), format, id),
            Err(NotNow::Refused(err)) => routed(err.into_response()),
            Err(not_now) => {
                // Rare: the generator must wait. As the router's handler would, on a future.
                let (id, head) = (self.clone(), request.method() == Method::HEAD);
                let text = super::wants_text(request.headers());
                return Answer::Waiting(Box::pin(async move {
                    let response = match id.node.issue_one_after(Protocol::Http, not_now).await {
                        Ok(issued) => id_answer(text, format, issued),
                        Err(err) => routed(err.into_response()),
                    };
                    id.finish(head, started, response)
                }));
            }
        };
        self.done(request, started, response)
    }

    fn done(&self, request: &Request<Incoming>, started: Instant, response: Response) -> Answer {
        let head = request.method() == Method::HEAD;
        Answer::Ready(Some(self.finish(head, started, response)))
    }

    /// Counted and timed; for `HEAD`, the body's length kept and the body dropped, as axum does.
    fn finish(&self, head: bool, started: Instant, response: Response) -> Response {
        let mut response = self.timed.done(&self.node, started, response);
        super::set_content_length(&mut response);
        if head {
            *response.body_mut() = Either::Left(Full::new(Bytes::new()));
        }
        response
    }
}

/// `/v1/id`'s answer with `id`, its body as it is.
fn id_answer(text: bool, format: Format, id: u64) -> Response {
    let (content_type, body) = id_bytes(text, format, id);
    let mut response = Response::new(Either::Left(Full::new(body)));
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, content_type);
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

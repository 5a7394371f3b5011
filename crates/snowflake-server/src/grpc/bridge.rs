//! The bridge to tonic: every call but the fast `NextId` goes to tonic's
//! [`Routes`](tonic::service::Routes) of our service, health and reflection, between `h2`
//! streams and `http_body` bodies; tonic then answers exactly as it always did, including its
//! errors for malformed frames.
//!
//! Response bodies are sent only as fast as the client's flow-control window allows, so a
//! `StreamIds` call nobody reads stops generating; a window that stays shut for the idle timeout
//! resets the stream, so a call nobody reads does not keep its connection busy for ever.

use super::shared::{Shared, timed_out};
use super::{Handled, METHODS, ReplyBudget};
use crate::bulk::BulkPermit;
use bytes::{Buf, Bytes};
use h2::server::SendResponse;
use h2::{RecvStream, SendStream};
use http::{Request, Response};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use std::future::Future;
use std::future::poll_fn;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tower::ServiceExt;

/// Our method of `path`, as its metrics name it; `None` for other services' (health,
/// reflection) and unknown paths.
fn our_method(path: &str) -> Option<&'static str> {
    METHODS.into_iter().find(|method| *method == path)
}

/// Runs a call through tonic's routes and sends its response; `timeout` counts from `started`,
/// when the call's headers came in.
pub(super) async fn bridge<B>(
    shared: &Shared,
    started: tokio::time::Instant,
    timeout: Duration,
    mut request: Request<B>,
    mut respond: SendResponse<Bytes>,
) where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let routes = shared.routes.clone();
    let method = our_method(request.uri().path());
    // Our methods' calls carry a flag their handler sets.
    let handled = method.map(|method| {
        let handled = Handled::default();
        request.extensions_mut().insert(handled.clone());
        (method, handled)
    });
    // And a place for the shares of the bulk budget their replies hold.
    let budget = ReplyBudget::default();
    if method.is_some() {
        request.extensions_mut().insert(budget.clone());
    }
    let call = tokio::time::timeout_at(started + timeout, routes.oneshot(request));
    let answered = tokio::select! {
        biased;
        answered = call => answered,
        // The client reset the stream (it left, or its own deadline passed): the call's handler
        // is dropped, and with it every ID it would still take (a bulk batch under js-safe
        // takes 250 of the node's milliseconds).
        _reset = poll_fn(|cx| respond.poll_reset(cx)) => {
            if let Some((method, _)) = &handled {
                shared
                    .service
                    .count(method, started.into_std(), tonic::Code::Cancelled);
            }
            return;
        }
    };
    let response = match answered {
        Ok(Ok(response)) => {
            if let Some((method, handled)) = &handled
                && !handled.ran()
            {
                // tonic answered without our handler: count what it sent.
                let code = response
                    .headers()
                    .get("grpc-status")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<i32>().ok())
                    .map_or(tonic::Code::Unknown, tonic::Code::from_i32);
                shared.service.count(method, started.into_std(), code);
            }
            response
        }
        Ok(Err(never)) => match never {},
        Err(_elapsed) => timed_out(shared, method, started)
            .into_http::<()>()
            .map(|()| tonic::body::Body::empty()),
    };
    send_response(respond, response, shared.idle_timeout, &budget).await;
}

/// Sends a response and its body, a frame at a time and only as the client's flow-control
/// window opens (reset if it stays shut for `stall_timeout`), ending with its trailers.
///
/// Data frames carry the shares of the bulk budget the handler took for them (`budget`):
/// given back when h2 has written (or dropped) the bytes.
async fn send_response(
    mut respond: SendResponse<Bytes>,
    response: Response<tonic::body::Body>,
    stall_timeout: Duration,
    budget: &ReplyBudget,
) {
    let mut held: Option<Arc<Vec<BulkPermit>>> = None;
    let (parts, mut body) = response.into_parts();
    let end = body.is_end_stream();
    let Ok(mut send) = respond.send_response(Response::from_parts(parts, ()), end) else {
        return;
    };
    if end {
        return;
    }
    loop {
        if !window_open(&mut send, stall_timeout).await {
            return;
        }
        let frame = tokio::select! {
            frame = body.frame() => frame,
            _ = poll_fn(|cx| send.poll_reset(cx)) => return,
        };
        match frame {
            None => {
                let _ = send.send_data(Bytes::new(), true);
                return;
            }
            Some(Err(status)) => {
                tracing::debug!(%status, "grpc: response body failed");
                send.send_reset(h2::Reason::INTERNAL_ERROR);
                return;
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(mut data) => {
                    let taken = budget.take();
                    if !taken.is_empty() {
                        held = Some(Arc::new(taken));
                    }
                    if let Some(held) = &held {
                        data = BulkPermit::wrap(held, data);
                    }
                    if send.send_data(data, false).is_err() {
                        return;
                    }
                }
                Err(frame) => {
                    if let Ok(trailers) = frame.into_trailers() {
                        let _ = send.send_trailers(trailers);
                    }
                    return;
                }
            },
        }
    }
}

/// Waits until the stream may send at least one more byte; false once the client reset it,
/// the connection is gone, or the client granted no window for `stall_timeout` (then the stream
/// is reset with `CANCEL`: a call nobody reads must not keep its connection busy for ever).
async fn window_open(send: &mut SendStream<Bytes>, stall_timeout: Duration) -> bool {
    send.reserve_capacity(1);
    if send.capacity() > 0 {
        return true;
    }
    let waited = tokio::time::timeout(stall_timeout, async {
        loop {
            match poll_fn(|cx| send.poll_capacity(cx)).await {
                Some(Ok(0)) => {}
                Some(Ok(_)) => return true,
                Some(Err(_)) | None => return false,
            }
        }
    })
    .await;
    waited.unwrap_or_else(|_elapsed| {
        tracing::debug!(
            "grpc: the client took no response data for the idle timeout; resetting the stream"
        );
        send.send_reset(h2::Reason::CANCEL);
        false
    })
}

/// An `h2` request body as an `http_body::Body`, giving flow-control capacity back as it is
/// read; after any bytes already read from it (`prefix`). The whole of it is due by a deadline
/// (the idle timeout from the call's headers): past it the body fails (`CANCEL`), so a request
/// trickled in a byte at a time does not hold its stream, or its connection, for ever.
#[derive(Debug)]
pub(super) struct H2Body {
    prefix: Option<Bytes>,
    recv: RecvStream,
    data_done: bool,
    done: bool,
    due: Pin<Box<tokio::time::Sleep>>,
}

impl H2Body {
    /// The body of `recv`, due by `due`.
    pub(super) fn new(recv: RecvStream, due: tokio::time::Instant) -> H2Body {
        H2Body::with_prefix(Bytes::new(), recv, due)
    }

    /// The body of which `prefix` was already read.
    pub(super) fn with_prefix(
        prefix: Bytes,
        recv: RecvStream,
        due: tokio::time::Instant,
    ) -> H2Body {
        H2Body {
            prefix: Some(prefix).filter(|p| p.has_remaining()),
            recv,
            data_done: false,
            done: false,
            due: Box::pin(tokio::time::sleep_until(due)),
        }
    }

    /// Pending; or, once the deadline has passed, the body's end with an error.
    fn pending_or_late(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, h2::Error>>> {
        ready!(self.due.as_mut().poll(cx));
        tracing::debug!("grpc: the request did not arrive within the idle timeout; cancelled");
        self.done = true;
        Poll::Ready(Some(Err(h2::Error::from(h2::Reason::CANCEL))))
    }
}

impl Body for H2Body {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, h2::Error>>> {
        let this = self.get_mut();
        if let Some(prefix) = this.prefix.take() {
            return Poll::Ready(Some(Ok(Frame::data(prefix))));
        }
        if this.done {
            return Poll::Ready(None);
        }
        if !this.data_done {
            let Poll::Ready(data) = this.recv.poll_data(cx) else {
                return this.pending_or_late(cx);
            };
            match data {
                Some(Ok(data)) => {
                    let _ = this.recv.flow_control().release_capacity(data.len());
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Some(Err(err)) => {
                    this.done = true;
                    return Poll::Ready(Some(Err(err)));
                }
                None => this.data_done = true,
            }
        }
        // Done only once the trailers are in: a pending poll must not end the body.
        let Poll::Ready(trailers) = this.recv.poll_trailers(cx) else {
            return this.pending_or_late(cx);
        };
        this.done = true;
        match trailers {
            Ok(Some(trailers)) => Poll::Ready(Some(Ok(Frame::trailers(trailers)))),
            Ok(None) => Poll::Ready(None),
            Err(err) => Poll::Ready(Some(Err(err))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.prefix.is_none() && (self.done || self.recv.is_end_stream())
    }
}

//! The gRPC listener's HTTP/2 connections, served with the `h2` crate directly.
//!
//! tonic's own transport runs every call through hyper (a task per stream, its body plumbing)
//! and a stack of tower layers, and profiling showed that machinery to cost about a third of
//! the server's CPU for a single-ID call. Served on `h2` directly, with the same tonic services
//! behind it, the per-call cost drops to what HTTP/2 framing itself costs.
//!
//! - `NextId`, the call clients make most, is answered here: its request frame is read and
//!   decoded, the ID issued through the same [`SnowflakeService`] (same validation, same
//!   metrics), and the response written as a gRPC frame plus `grpc-status` trailers, or as a
//!   trailers-only response carrying the error.
//! - Every other call (and a `NextId` whose body is anything but one well-formed, uncompressed
//!   message) goes to tonic's [`Routes`] of our service, health and reflection, through a small
//!   bridge between `h2` streams and `http_body` bodies; tonic then answers exactly as it always
//!   did, including its errors for malformed frames.
//!
//! Connection settings follow what the tonic server was configured with: a cap on concurrent
//! streams, HTTP/2 keep-alive pings with a timeout, a request timeout or the client's shorter
//! `grpc-timeout` (`CANCELLED`, "Timeout expired", as tonic's), and a graceful shutdown (GOAWAY,
//! then in-flight calls finish).
//! Response bodies are sent only as fast as the client's flow-control window allows, so a
//! `StreamIds` call nobody reads stops generating.
//!
//! No connection holds a slot of the connection cap for ever without making progress, whatever
//! the client does (the idle timeout is `--idle-timeout-ms`, as for HTTP keep-alive and Thrift):
//! - it does not answer PINGs: closed after the keep-alive interval plus its timeout;
//! - it answers PINGs but has no call open for the idle timeout: GOAWAY, then closed;
//! - it has a call open but grants it no flow-control window for the idle timeout: that stream
//!   is reset (`CANCEL`), after which the connection is idle as above;
//! - it sends a call's headers but not its message: the request timeout answers the call.

use super::pb::{NextIdRequest, NextIdResponse};
use super::{Handled, MAX_REQUEST_BYTES, METHODS, NEXT_ID, SnowflakeService};
use bytes::{Buf, Bytes, BytesMut};
use h2::server::SendResponse;
use h2::{Ping, RecvStream, SendStream};
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use prost::Message;
use std::future::poll_fn;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tonic::Status;
use tonic::service::Routes;
use tower::ServiceExt;

/// The path of the call answered in place.
const NEXT_ID_PATH: &str = NEXT_ID;

/// Headers (names and values together) one request may carry.
const MAX_HEADER_LIST_BYTES: u32 = 16 * 1024;

/// How long a new connection may take to send the HTTP/2 preface and settings.
pub(super) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How many times per idle timeout a connection checks whether it is idle: it is closed after
/// between 1 and 1 + 1/IDLE_CHECKS idle timeouts with no call open.
const IDLE_CHECKS: u32 = 4;

/// What every connection of one listener shares.
#[derive(Debug)]
pub(super) struct Shared {
    /// Our service, health and reflection, for every call but the fast `NextId`.
    pub(super) routes: Routes,
    /// Our service, for the fast `NextId`.
    pub(super) service: SnowflakeService,
    /// How long a call may take until its response headers.
    pub(super) request_timeout: Duration,
    /// Concurrent streams per connection.
    pub(super) max_streams: u32,
    /// How often an HTTP/2 PING checks that the client is still there.
    pub(super) keepalive_interval: Duration,
    /// How long its answer may take before the connection is dropped.
    pub(super) keepalive_timeout: Duration,
    /// How long a connection may have no call open before it is closed (GOAWAY), and how long
    /// a response may wait for the client's flow-control window before its stream is reset.
    pub(super) idle_timeout: Duration,
}

/// Whether a connection has had any call open lately; shared with the tasks of its calls.
#[derive(Debug, Default)]
struct Activity {
    /// Calls whose task is running.
    open: AtomicUsize,
    /// Set when a call starts or ends; cleared by each idle check.
    touched: AtomicBool,
}

impl Activity {
    /// Counts a call as open until the returned guard is dropped.
    fn call(self: &Arc<Self>) -> CallGuard {
        self.open.fetch_add(1, Ordering::Relaxed);
        self.touched.store(true, Ordering::Relaxed);
        CallGuard(Arc::clone(self))
    }

    /// Whether no call was open at any time since the last check.
    fn idle_since_last_check(&self) -> bool {
        let touched = self.touched.swap(false, Ordering::Relaxed);
        !touched && self.open.load(Ordering::Relaxed) == 0
    }
}

/// One open call of a connection's [`Activity`].
#[derive(Debug)]
struct CallGuard(Arc<Activity>);

impl Drop for CallGuard {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
        self.0.touched.store(true, Ordering::Relaxed);
    }
}

/// Serves one connection until the client closes it, a keep-alive ping goes unanswered, it has
/// had no call open for the idle timeout, or (after `shutdown` flips) its in-flight calls are
/// done.
pub(super) async fn serve_connection<T>(
    io: T,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) where
    T: AsyncRead + AsyncWrite + Unpin,
{
    let mut builder = h2::server::Builder::new();
    builder
        .max_concurrent_streams(shared.max_streams)
        .max_header_list_size(MAX_HEADER_LIST_BYTES);
    let mut connection =
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, builder.handshake::<_, Bytes>(io)).await {
            Ok(Ok(connection)) => connection,
            Ok(Err(err)) => {
                tracing::debug!(error = %err, "grpc: HTTP/2 handshake failed");
                return;
            }
            Err(_) => {
                tracing::debug!("grpc: no HTTP/2 handshake within {HANDSHAKE_TIMEOUT:?}");
                return;
            }
        };
    let keepalive = keep_alive(
        connection.ping_pong(),
        shared.keepalive_interval,
        shared.keepalive_timeout,
    );
    tokio::pin!(keepalive);
    let activity = Arc::new(Activity::default());
    let check_every = shared.idle_timeout / IDLE_CHECKS;
    let mut idle_check =
        tokio::time::interval_at(tokio::time::Instant::now() + check_every, check_every);
    idle_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut idle_checks = 0;
    let mut draining = false;
    // Set when the connection is closed for idleness: how long the goodbye may take.
    let mut close_within = None;
    loop {
        tokio::select! {
            accepted = connection.accept() => match accepted {
                Some(Ok((request, respond))) => {
                    let call = activity.call();
                    let shared = Arc::clone(&shared);
                    tokio::spawn(async move {
                        handle(shared, request, respond).await;
                        drop(call);
                    });
                }
                Some(Err(err)) => {
                    tracing::debug!(error = %err, "grpc: connection error");
                    return;
                }
                None => break,
            },
            _ = shutdown.wait_for(|stop| *stop), if !draining => {
                // GOAWAY: no new calls; the calls in flight go on.
                connection.graceful_shutdown();
                draining = true;
            }
            _ = idle_check.tick(), if !draining => {
                if !activity.idle_since_last_check() {
                    idle_checks = 0;
                    continue;
                }
                idle_checks += 1;
                if idle_checks >= IDLE_CHECKS {
                    tracing::debug!("grpc: no call for the idle timeout; closing the connection");
                    // GOAWAY; no call is open, so h2 closes the connection once the client
                    // has seen it (or the keep-alive timeout gives up on the client).
                    connection.graceful_shutdown();
                    draining = true;
                    close_within = Some(shared.keepalive_timeout);
                }
            }
            () = &mut keepalive => {
                tracing::debug!("grpc: keep-alive ping unanswered; closing the connection");
                return;
            }
        }
    }
    // No more calls: drive the connection until the last responses are written (after a
    // close for idleness, only the GOAWAY and anything h2 still buffers, for a bounded time).
    let goodbye = async {
        match close_within {
            Some(limit) => tokio::time::sleep(limit).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        closed = poll_fn(|cx| connection.poll_closed(cx)) => {
            if let Err(err) = closed {
                tracing::debug!(error = %err, "grpc: connection error while closing");
            }
        }
        () = &mut keepalive => {}
        () = goodbye => {}
    }
}

/// Pings the client every `interval`; completes only when an answer takes longer than
/// `timeout`.
async fn keep_alive(pinger: Option<h2::PingPong>, interval: Duration, timeout: Duration) {
    let Some(mut pinger) = pinger else {
        return std::future::pending().await;
    };
    loop {
        tokio::time::sleep(interval).await;
        match tokio::time::timeout(timeout, pinger.ping(Ping::opaque())).await {
            Ok(Ok(_pong)) => {}
            // The connection is closing anyway; the connection loop notices.
            Ok(Err(_)) => return std::future::pending().await,
            Err(_elapsed) => return,
        }
    }
}

/// One call: `NextId` in place, the rest through tonic.
async fn handle(shared: Arc<Shared>, request: Request<RecvStream>, respond: SendResponse<Bytes>) {
    // As tonic's server: the shorter of our request timeout and the client's `grpc-timeout`.
    let timeout = grpc_timeout(request.headers()).map_or(shared.request_timeout, |client| {
        client.min(shared.request_timeout)
    });
    let started = tokio::time::Instant::now();
    if is_plain_next_id(&request) {
        next_id(&shared, started, timeout, request, respond).await;
    } else {
        let request = request.map(H2Body::new);
        // Boxed, as below: tonic's futures are large, and every spawned call would otherwise
        // copy room for them, `NextId` included.
        Box::pin(bridge(&shared, started, timeout, request, respond)).await;
    }
}

/// Our method of `path`, as its metrics name it; `None` for other services' (health,
/// reflection) and unknown paths.
fn our_method(path: &str) -> Option<&'static str> {
    METHODS.into_iter().find(|method| *method == path)
}

/// The answer to a call the request timeout cut (`CANCELLED`, as tonic's), counted and observed
/// as the method's, like every other answer: the handler that would have counted it was
/// dropped with the call.
fn timed_out(
    shared: &Shared,
    method: Option<&'static str>,
    started: tokio::time::Instant,
) -> Status {
    let status = Status::cancelled("Timeout expired");
    if let Some(method) = method {
        shared
            .service
            .count(method, started.into_std(), status.code());
    }
    status
}

/// The client's deadline from a `grpc-timeout` header (`1S`, `250m`, ...: at most 8 digits and
/// a unit of H, M, S, m, u or n); `None` when absent or malformed (then only ours applies, as
/// with tonic).
fn grpc_timeout(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = value.split_at_checked(value.len().checked_sub(1)?)?;
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let amount: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(amount * 3600),
        "M" => Duration::from_secs(amount * 60),
        "S" => Duration::from_secs(amount),
        "m" => Duration::from_millis(amount),
        "u" => Duration::from_micros(amount),
        "n" => Duration::from_nanos(amount),
        _ => return None,
    })
}

/// A `NextId` call this module can answer: POST, a gRPC protobuf content type and no request
/// compression. Anything else goes to tonic, which knows every variant.
fn is_plain_next_id(request: &Request<RecvStream>) -> bool {
    let headers = request.headers();
    request.method() == http::Method::POST
        && request.uri().path() == NEXT_ID_PATH
        && headers
            .get(http::header::CONTENT_TYPE)
            .is_some_and(|v| v == "application/grpc" || v == "application/grpc+proto")
        && headers.get("grpc-encoding").is_none_or(|v| v == "identity")
}

/// Answers `NextId` in place, or hands a request body that is not one plain message to tonic.
async fn next_id(
    shared: &Shared,
    started: tokio::time::Instant,
    timeout: Duration,
    request: Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
) {
    let (parts, mut body) = request.into_parts();
    // The request timeout covers reading the body too, as tonic's did: a client that sends
    // the headers and never the message does not hold the stream (or a drain) for ever.
    let received = match tokio::time::timeout(timeout, read_some(&mut body)).await {
        Ok(Some(received)) => received,
        Ok(None) => return,
        Err(_elapsed) => {
            let status = timed_out(shared, Some(NEXT_ID), started);
            let _ = respond.send_response(status.into_http::<()>(), true);
            return;
        }
    };
    if !is_one_plain_message::<NextIdRequest>(&received) || !body.is_end_stream() {
        // tonic answers malformed, compressed, oversized or extra frames its usual way.
        let request = Request::from_parts(parts, H2Body::with_prefix(received, body));
        Box::pin(bridge(shared, started, timeout, request, respond)).await;
        return;
    }
    let left = timeout.saturating_sub(started.elapsed());
    let issued = tokio::time::timeout(left, shared.service.issue(1)).await;
    let result = match issued {
        Ok(Ok(batches)) => Ok(NextIdResponse {
            id: batches[0].first().as_i64(),
        }),
        Ok(Err(status)) => Err(status),
        Err(_elapsed) => Err(Status::cancelled("Timeout expired")),
    };
    match shared.service.counted(NEXT_ID, started.into_std(), result) {
        Ok(message) => {
            let response = Response::builder()
                .status(http::StatusCode::OK)
                .header(http::header::CONTENT_TYPE, "application/grpc")
                .body(())
                .unwrap_or_default();
            let Ok(mut send) = respond.send_response(response, false) else {
                return;
            };
            let _ = send.send_data(grpc_frame(&message), false);
            let mut trailers = HeaderMap::with_capacity(1);
            trailers.insert("grpc-status", HeaderValue::from_static("0"));
            let _ = send.send_trailers(trailers);
        }
        Err(status) => {
            // Trailers-only: the status in the response headers, as tonic sends it.
            let _ = respond.send_response(status.into_http::<()>(), true);
        }
    }
}

/// Reads a request body until it ends or holds more than one frame header and the largest
/// message; `None` if the client reset the stream.
async fn read_some(body: &mut RecvStream) -> Option<Bytes> {
    // One byte past the limit tells "too large" apart.
    let limit = 5 + MAX_REQUEST_BYTES + 1;
    let mut received = BytesMut::new();
    while received.len() < limit {
        match body.data().await {
            Some(Ok(chunk)) => {
                let _ = body.flow_control().release_capacity(chunk.len());
                received.extend_from_slice(&chunk);
            }
            Some(Err(err)) => {
                tracing::debug!(error = %err, "grpc: NextId request body failed");
                return None;
            }
            None => break,
        }
    }
    Some(received.freeze())
}

/// Whether `bytes` is exactly one uncompressed gRPC frame of at most [`MAX_REQUEST_BYTES`]
/// holding a message that decodes as `M`.
fn is_one_plain_message<M: Message + Default>(bytes: &[u8]) -> bool {
    let Some((&[flag, a, b, c, d], message)) = bytes.split_first_chunk::<5>() else {
        return false;
    };
    let len = u32::from_be_bytes([a, b, c, d]) as usize;
    flag == 0 && len <= MAX_REQUEST_BYTES && message.len() == len && M::decode(message).is_ok()
}

/// A message as one uncompressed gRPC frame.
fn grpc_frame<M: Message>(message: &M) -> Bytes {
    let len = message.encoded_len();
    let mut frame = BytesMut::with_capacity(5 + len);
    frame.extend_from_slice(&[0]);
    // Our responses are far below 4 GiB.
    frame.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes());
    // Encoding into a buffer with enough capacity cannot fail.
    let _ = message.encode(&mut frame);
    frame.freeze()
}

/// Runs a call through tonic's routes and sends its response; `timeout` counts from `started`,
/// when the call's headers came in.
async fn bridge<B>(
    shared: &Shared,
    started: tokio::time::Instant,
    timeout: Duration,
    mut request: Request<B>,
    respond: SendResponse<Bytes>,
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
    let response = match tokio::time::timeout_at(started + timeout, routes.oneshot(request)).await {
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
    send_response(respond, response, shared.idle_timeout).await;
}

/// Sends a response and its body, a frame at a time and only as the client's flow-control
/// window opens (reset if it stays shut for `stall_timeout`), ending with its trailers.
async fn send_response(
    mut respond: SendResponse<Bytes>,
    response: Response<tonic::body::Body>,
    stall_timeout: Duration,
) {
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
                Ok(data) => {
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
/// read; after any bytes already read from it (`prefix`).
#[derive(Debug)]
struct H2Body {
    prefix: Option<Bytes>,
    recv: RecvStream,
    data_done: bool,
    done: bool,
}

impl H2Body {
    fn new(recv: RecvStream) -> H2Body {
        H2Body::with_prefix(Bytes::new(), recv)
    }

    /// The body of which `prefix` was already read.
    fn with_prefix(prefix: Bytes, recv: RecvStream) -> H2Body {
        H2Body {
            prefix: Some(prefix).filter(|p| p.has_remaining()),
            recv,
            data_done: false,
            done: false,
        }
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
            match ready!(this.recv.poll_data(cx)) {
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
        let trailers = ready!(this.recv.poll_trailers(cx));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_plain_message_is_recognised_and_nothing_else() {
        let empty = grpc_frame(&NextIdRequest {});
        assert_eq!(&empty[..], &[0, 0, 0, 0, 0]);
        assert!(is_one_plain_message::<NextIdRequest>(&empty));
        // Compressed flag, a length that disagrees with the bytes, extra bytes, too short.
        assert!(!is_one_plain_message::<NextIdRequest>(&[1, 0, 0, 0, 0]));
        assert!(!is_one_plain_message::<NextIdRequest>(&[0, 0, 0, 0, 1]));
        assert!(!is_one_plain_message::<NextIdRequest>(&[0, 0, 0, 0, 0, 0]));
        assert!(!is_one_plain_message::<NextIdRequest>(&[0, 0, 0]));
        // A field NextIdRequest does not have is skipped, as protobuf requires.
        assert!(is_one_plain_message::<NextIdRequest>(&[
            0, 0, 0, 0, 2, 0x08, 0x01
        ]));
        // A truncated varint does not decode.
        assert!(!is_one_plain_message::<NextIdRequest>(&[
            0, 0, 0, 0, 2, 0x08, 0x80
        ]));
        // Larger than the limit.
        let mut big = vec![0, 0, 0, 0, 0];
        let len = u32::try_from(MAX_REQUEST_BYTES + 1).unwrap();
        big[1..5].copy_from_slice(&len.to_be_bytes());
        big.resize(5 + MAX_REQUEST_BYTES + 1, 0);
        assert!(!is_one_plain_message::<NextIdRequest>(&big));
    }

    #[test]
    fn grpc_timeout_headers_in_every_unit_and_malformed_ones() {
        let parse = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert("grpc-timeout", HeaderValue::from_str(value).unwrap());
            grpc_timeout(&headers)
        };
        assert_eq!(parse("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(parse("3M"), Some(Duration::from_secs(180)));
        assert_eq!(parse("1S"), Some(Duration::from_secs(1)));
        assert_eq!(parse("250m"), Some(Duration::from_millis(250)));
        assert_eq!(parse("99999999u"), Some(Duration::from_micros(99_999_999)));
        assert_eq!(parse("5n"), Some(Duration::from_nanos(5)));
        for bad in ["", "S", "1", "123456789S", "1x", "-1S", "1.5S", "1 S"] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
        assert_eq!(grpc_timeout(&HeaderMap::new()), None);
    }

    #[test]
    fn a_response_frame_carries_the_encoded_message() {
        let frame = grpc_frame(&NextIdResponse { id: 300 });
        assert_eq!(&frame[..], &[0, 0, 0, 0, 3, 0x08, 0xac, 0x02]);
        let decoded = NextIdResponse::decode(&frame[5..]).unwrap();
        assert_eq!(decoded.id, 300);
    }
}

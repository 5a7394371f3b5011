//! The fast `NextId` path: the call clients make most, answered without tonic. Its request
//! frame is read and decoded, the ID issued through the same [`super::SnowflakeService`] (same
//! validation, same metrics), and the response written as a gRPC frame plus `grpc-status`
//! trailers, or as a trailers-only response carrying the error. A `NextId` whose body is
//! anything but one well-formed, uncompressed message goes to tonic ([`super::bridge`]), which
//! answers it exactly as it always did.
//!
//! It runs on the connection's own task ([`super::conn`]), not on a task per call: answered on
//! the spot ([`answer_now`]) when the message came in with the headers and the node issues
//! without waiting, else by a future the connection polls beside its other work
//! ([`answer_later`]); only a call for tonic gets a task of its own.

use super::bridge::{H2Body, bridge};
use super::pb::{NextIdRequest, NextIdResponse};
use super::shared::{Shared, timed_out};
use super::{MAX_REQUEST_BYTES, NEXT_ID, to_status};
use crate::node::{NotNow, Protocol};
use bytes::{Bytes, BytesMut};
use futures_util::FutureExt;
use h2::RecvStream;
use h2::server::SendResponse;
use http::{HeaderMap, HeaderValue, Request, Response};
use prost::Message;
use std::sync::LazyLock;
use std::time::Duration;
use tonic::Status;

/// A `NextId` call this module can answer: POST, a gRPC protobuf content type and no request
/// compression. Anything else goes to tonic, which knows every variant.
pub(super) fn is_plain_next_id(request: &Request<RecvStream>) -> bool {
    let headers = request.headers();
    request.method() == http::Method::POST
        && request.uri().path() == NEXT_ID
        && headers
            .get(http::header::CONTENT_TYPE)
            .is_some_and(|v| v == "application/grpc" || v == "application/grpc+proto")
        && headers.get("grpc-encoding").is_none_or(|v| v == "identity")
}

/// A plain `NextId` call not answered yet: its request, what of its message has arrived, and
/// where its answer goes.
pub(super) struct Call {
    /// When its headers came in.
    started: tokio::time::Instant,
    /// The shorter of our request timeout and the client's `grpc-timeout`.
    timeout: Duration,
    parts: http::request::Parts,
    body: RecvStream,
    received: BytesMut,
    respond: SendResponse<Bytes>,
}

impl Call {
    /// A call whose headers came in at `started`.
    pub(super) fn new(
        started: tokio::time::Instant,
        timeout: Duration,
        request: Request<RecvStream>,
        respond: SendResponse<Bytes>,
    ) -> Call {
        let (parts, body) = request.into_parts();
        Call {
            started,
            timeout,
            parts,
            body,
            received: BytesMut::new(),
            respond,
        }
    }

    /// The call as tonic takes it, its message as far as it was read ahead of the rest.
    pub(super) fn into_bridged(self, idle_timeout: Duration) -> Bridged {
        let due = self.started + idle_timeout;
        let body = H2Body::with_prefix(self.received.freeze(), self.body, due);
        Bridged {
            started: self.started,
            timeout: self.timeout,
            request: Request::from_parts(self.parts, body),
            respond: self.respond,
        }
    }
}

/// A `NextId` call for tonic (a message that is not one plain frame): see [`bridge`].
pub(super) struct Bridged {
    started: tokio::time::Instant,
    timeout: Duration,
    request: Request<H2Body>,
    respond: SendResponse<Bytes>,
}

impl Bridged {
    /// Answers it through tonic.
    pub(super) async fn answer(self, shared: &Shared) {
        // Boxed: tonic's futures are large.
        Box::pin(bridge(
            shared,
            self.started,
            self.timeout,
            self.request,
            self.respond,
        ))
        .await;
    }
}

/// What [`answer_now`] left to do.
pub(super) enum Later {
    /// Nothing: the call is answered (or the client reset it).
    Done,
    /// The message has not all arrived yet: [`answer_later`].
    Read(Call),
    /// The node must wait before it issues (a clock regression, a reservation):
    /// [`answer_later`].
    Issue(Call, NotNow),
    /// The message is not one plain frame: tonic answers it ([`Call::into_bridged`]).
    Bridge(Call),
}

/// Answers a plain `NextId` on the spot, without a timer, a task or a wake-up, when its message
/// came in with its headers (h2 has read what the socket held before it hands over a call) and
/// the node issues without waiting: the common case. Anything else is left for
/// [`answer_later`] or for tonic, where it left off.
pub(super) fn answer_now(shared: &Shared, mut call: Call) -> Later {
    match read_ready(&mut call.body, &mut call.received) {
        Some(Read::Ended) => {}
        Some(Read::Reset) => return Later::Done,
        None => return Later::Read(call),
    }
    if !is_one_plain_message::<NextIdRequest>(&call.received) {
        return Later::Bridge(call);
    }
    let node = &shared.service.node;
    let result = match node.issue_one_now_counted(&shared.next_id.issued, 0) {
        Ok(id) => Ok(id),
        Err(NotNow::Refused(err)) => Err(to_status(err)),
        Err(not_now) => return Later::Issue(call, not_now),
    };
    respond(shared, call.started, call.respond, result);
    Later::Done
}

/// Answers a plain `NextId` that [`answer_now`] could not: reads the rest of its message,
/// within the request timeout and the idle timeout (a client that sends the headers and never
/// the message, or trickles it in, does not hold the stream, or a drain, for ever), and waits
/// for the node to issue, within the request timeout. A message that turns out not to be one
/// plain frame is returned, for tonic.
pub(super) async fn answer_later(shared: &Shared, later: Later) -> Option<Call> {
    let (call, not_now) = match later {
        Later::Done => return None,
        Later::Bridge(call) => return Some(call),
        Later::Issue(call, not_now) => (call, Some(not_now)),
        Later::Read(mut call) => {
            let within = call.timeout.min(shared.idle_timeout);
            let read = read_some(&mut call.body, &mut call.received);
            match tokio::time::timeout_at(call.started + within, read).await {
                Ok(Read::Ended) => {}
                Ok(Read::Reset) => return None,
                Err(_elapsed) => {
                    let status = timed_out(shared, Some(NEXT_ID), call.started);
                    let _ = call.respond.send_response(status.into_http::<()>(), true);
                    return None;
                }
            }
            if !is_one_plain_message::<NextIdRequest>(&call.received) {
                return Some(call);
            }
            (call, None)
        }
    };
    let node = &shared.service.node;
    let issue = async {
        match not_now {
            Some(not_now) => node.issue_one_after(Protocol::Grpc, not_now).await,
            None => {
                (node.issue(Protocol::Grpc, 1).await).map(|batches| batches[0].first().as_u64())
            }
        }
    };
    let result = match tokio::time::timeout_at(call.started + call.timeout, issue).await {
        Ok(Ok(id)) => Ok(id),
        Ok(Err(err)) => Err(to_status(err)),
        Err(_elapsed) => Err(Status::cancelled("Timeout expired")),
    };
    respond(shared, call.started, call.respond, result);
    None
}

/// Counts the call and sends its answer: the ID as one frame and `grpc-status` 0 in the
/// trailers, or a trailers-only response carrying the error, as tonic sends it.
fn respond(
    shared: &Shared,
    started: tokio::time::Instant,
    mut respond: SendResponse<Bytes>,
    result: Result<u64, Status>,
) {
    // (IDs are below 2^63: the sign bit is never set.)
    let result = result.map(|id| NextIdResponse {
        id: i64::try_from(id).unwrap_or(i64::MAX),
    });
    let result = match result {
        Ok(message) => {
            shared.next_id.ok(&shared.service.node, started);
            Ok(message)
        }
        Err(status) => shared
            .service
            .counted(NEXT_ID, started.into_std(), Err(status)),
    };
    match result {
        Ok(message) => {
            let mut response = Response::new(());
            *response.headers_mut() = OK_HEADERS.clone();
            let Ok(mut send) = respond.send_response(response, false) else {
                return;
            };
            let _ = send.send_data(grpc_frame(&message), false);
            let _ = send.send_trailers(OK_TRAILERS.clone());
        }
        Err(status) => {
            let _ = respond.send_response(status.into_http::<()>(), true);
        }
    }
}

/// The headers of every answer with an ID (status 200 besides), built once: h2 takes a map by
/// value, and a clone of one with its single header in place is two small allocations, where
/// building it (a map with room for six headers, its value copied) was three and 670 bytes.
static OK_HEADERS: LazyLock<HeaderMap> = LazyLock::new(|| {
    let mut headers = HeaderMap::with_capacity(1);
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    headers
});

/// The trailers of every answer with an ID, built once, as [`OK_HEADERS`].
static OK_TRAILERS: LazyLock<HeaderMap> = LazyLock::new(|| {
    let mut trailers = HeaderMap::with_capacity(1);
    trailers.insert("grpc-status", HeaderValue::from_static("0"));
    trailers
});

/// How reading a request body ended.
enum Read {
    /// The body ended, or holds more than a frame header and the largest message.
    Ended,
    /// The client reset the stream.
    Reset,
}

/// One byte past a frame header and the largest message tells "too large" apart.
const READ_LIMIT: usize = 5 + MAX_REQUEST_BYTES + 1;

/// Reads what of a request body has arrived into `received`, without waiting; `None` if more
/// is to come.
fn read_ready(body: &mut RecvStream, received: &mut BytesMut) -> Option<Read> {
    while received.len() < READ_LIMIT {
        match body.data().now_or_never()? {
            Some(Ok(chunk)) => {
                let _ = body.flow_control().release_capacity(chunk.len());
                received.extend_from_slice(&chunk);
            }
            Some(Err(err)) => {
                tracing::debug!(error = %err, "grpc: NextId request body failed");
                return Some(Read::Reset);
            }
            None => break,
        }
    }
    // (A body past the limit is tonic's to refuse, whether more is to come or not.)
    Some(Read::Ended)
}

/// Reads a request body into `received` until it ends or holds more than a frame header and
/// the largest message.
async fn read_some(body: &mut RecvStream, received: &mut BytesMut) -> Read {
    while received.len() < READ_LIMIT {
        match body.data().await {
            Some(Ok(chunk)) => {
                let _ = body.flow_control().release_capacity(chunk.len());
                received.extend_from_slice(&chunk);
            }
            Some(Err(err)) => {
                tracing::debug!(error = %err, "grpc: NextId request body failed");
                return Read::Reset;
            }
            None => break,
        }
    }
    Read::Ended
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
    fn a_response_frame_carries_the_encoded_message() {
        let frame = grpc_frame(&NextIdResponse { id: 300 });
        assert_eq!(&frame[..], &[0, 0, 0, 0, 3, 0x08, 0xac, 0x02]);
        let decoded = NextIdResponse::decode(&frame[5..]).unwrap();
        assert_eq!(decoded.id, 300);
    }
}

//! The fast `NextId` path: the call clients make most, answered without tonic. Its request
//! frame is read and decoded, the ID issued through the same [`super::SnowflakeService`] (same
//! validation, same metrics), and the response written as a gRPC frame plus `grpc-status`
//! trailers, or as a trailers-only response carrying the error. A `NextId` whose body is
//! anything but one well-formed, uncompressed message goes to tonic ([`super::bridge`]), which
//! answers it exactly as it always did.

use super::bridge::{H2Body, bridge};
use super::pb::{NextIdRequest, NextIdResponse};
use super::shared::{Shared, timed_out};
use super::{MAX_REQUEST_BYTES, NEXT_ID};
use bytes::{Bytes, BytesMut};
use h2::RecvStream;
use h2::server::SendResponse;
use http::{HeaderMap, HeaderValue, Request, Response};
use prost::Message;
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

/// Answers `NextId` in place, or hands a request body that is not one plain message to tonic.
pub(super) async fn next_id(
    shared: &Shared,
    started: tokio::time::Instant,
    timeout: Duration,
    request: Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
) {
    let (parts, mut body) = request.into_parts();
    // The request timeout covers reading the body too, as tonic's did, and so does the idle
    // timeout: a client that sends the headers and never the message, or trickles it in, does
    // not hold the stream (or a drain) for ever.
    let within = timeout.min(shared.idle_timeout);
    let received = match tokio::time::timeout(within, read_some(&mut body)).await {
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
        let due = started + shared.idle_timeout;
        let request = Request::from_parts(parts, H2Body::with_prefix(received, body, due));
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

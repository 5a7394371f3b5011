//! The gRPC protocol: one HTTP/2 channel per connection with tonic's client, `NextId` for a
//! batch of 1, `NextIds` for more, or one server-streaming `StreamIds` call per request under
//! `--stream`; every answer is checked.

use crate::config::{BenchConfig, STREAM_CHUNK};
use crate::engine::{Client, ConnectFailure, Failure};
use snowflake_proto::v1::snowflake_client::SnowflakeClient;
use snowflake_proto::v1::{NextIdRequest, NextIdsRequest, StreamIdsRequest};
use std::borrow::Cow;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

/// The most bytes one ID takes in a `repeated int64` (a 10-byte varint, or 8 bytes packed).
const BYTES_PER_ID: usize = 10;
/// Room for the message around the IDs.
const MESSAGE_OVERHEAD: usize = 4096;

/// What each request asks for.
#[derive(Debug, Clone, Copy)]
enum Call {
    /// `NextId`.
    One,
    /// `NextIds { count }`.
    Many(u32),
    /// `StreamIds { count, chunk_size }`.
    Stream { count: u32, chunk_size: u32 },
}

/// Speaks gRPC to one target; shared by every connection task.
#[derive(Debug)]
pub(crate) struct GrpcClient {
    /// The target's addresses, tried in order on every connection attempt.
    addrs: Vec<SocketAddr>,
    /// What each request asks for.
    call: Call,
    /// How long a connection attempt or a request may take.
    timeout: Duration,
    /// The largest message accepted.
    message_limit: usize,
    /// gRPC over TLS.
    tls: Option<tonic::transport::ClientTlsConfig>,
    /// The largest valid ID (the layout's).
    max_id: i64,
}

impl GrpcClient {
    /// A client for `config`'s target, at the already resolved `addrs`.
    pub(crate) fn new(config: &BenchConfig, addrs: Vec<SocketAddr>) -> GrpcClient {
        let batch = config.batch();
        let call = if config.stream() {
            Call::Stream {
                count: batch,
                chunk_size: batch.min(STREAM_CHUNK),
            }
        } else if batch == 1 {
            Call::One
        } else {
            Call::Many(batch)
        };
        let per_message = match call {
            Call::One => 1,
            Call::Many(count) => count,
            Call::Stream { chunk_size, .. } => chunk_size,
        };
        GrpcClient {
            addrs,
            call,
            timeout: config.timeout(),
            message_limit: MESSAGE_OVERHEAD + BYTES_PER_ID * per_message as usize,
            tls: config
                .tls()
                .map(|tls| tls.tonic_config(crate::tls::host(config.addr()))),
            max_id: i64::try_from(config.max_id()).unwrap_or(i64::MAX),
        }
    }

    /// Opens a channel to `addr`.
    async fn connect_to(&self, addr: SocketAddr) -> Result<Channel, ConnectFailure> {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let mut endpoint = Endpoint::from_shared(format!("{scheme}://{addr}"))
            .map_err(|err| ConnectFailure::other(err.to_string()))?
            .connect_timeout(self.timeout)
            .tcp_nodelay(true);
        if let Some(tls) = &self.tls {
            endpoint = endpoint
                .tls_config(tls.clone())
                .map_err(|err| ConnectFailure::other(format!("TLS: {err}")))?;
        }
        match tokio::time::timeout(self.timeout, endpoint.connect()).await {
            Err(_) => Err(ConnectFailure::timed_out()),
            Ok(Ok(channel)) => Ok(channel),
            Ok(Err(err)) => Err(match find_io(&err) {
                Some(io) => ConnectFailure::from_io(io),
                None => ConnectFailure::other(describe_chain(&err)),
            }),
        }
    }
}

impl Client for GrpcClient {
    type Connection = SnowflakeClient<Channel>;

    async fn connect(&self) -> Result<SnowflakeClient<Channel>, ConnectFailure> {
        let mut failure = None;
        for &addr in &self.addrs {
            match self.connect_to(addr).await {
                Ok(channel) => {
                    return Ok(
                        SnowflakeClient::new(channel).max_decoding_message_size(self.message_limit)
                    );
                }
                Err(err) => failure = Some(err),
            }
        }
        Err(failure.unwrap_or_else(|| ConnectFailure::other("no address to connect to".to_owned())))
    }

    async fn ready(&self, _connection: &mut SnowflakeClient<Channel>) -> bool {
        // A channel re-establishes a lost HTTP/2 connection by itself; a call on it that fails
        // meanwhile is counted by its status.
        true
    }

    async fn request(&self, connection: &mut SnowflakeClient<Channel>) -> Result<u64, Failure> {
        let exchange = async {
            match self.call {
                Call::One => {
                    let id = connection
                        .next_id(NextIdRequest {})
                        .await
                        .map_err(|status| status_failure(&status))?
                        .into_inner()
                        .id;
                    check(&[id], 1, self.max_id)
                }
                Call::Many(count) => {
                    let ids = connection
                        .next_ids(NextIdsRequest { count })
                        .await
                        .map_err(|status| status_failure(&status))?
                        .into_inner()
                        .ids;
                    check(&ids, count, self.max_id)
                }
                Call::Stream { count, chunk_size } => {
                    let mut stream = connection
                        .stream_ids(StreamIdsRequest {
                            count: u64::from(count),
                            chunk_size,
                        })
                        .await
                        .map_err(|status| status_failure(&status))?
                        .into_inner();
                    let mut received = 0_u64;
                    let mut valid = true;
                    while let Some(message) = stream
                        .message()
                        .await
                        .map_err(|status| status_failure(&status))?
                    {
                        received += message.ids.len() as u64;
                        valid &= !message.ids.is_empty()
                            && message.ids.iter().all(|&id| id > 0 && id <= self.max_id);
                    }
                    if valid && received == u64::from(count) {
                        Ok(received)
                    } else {
                        Err(bad_response())
                    }
                }
            }
        };
        // On a timeout the call is abandoned; the channel is replaced so that nothing of it
        // lingers into the next request.
        tokio::time::timeout(self.timeout, exchange)
            .await
            .unwrap_or_else(|_| Err(Failure::lost(Cow::Borrowed("timeout"))))
    }
}

/// The number of IDs if `ids` holds exactly `expected` positive IDs, none above `max_id`.
fn check(ids: &[i64], expected: u32, max_id: i64) -> Result<u64, Failure> {
    if ids.len() == expected as usize && ids.iter().all(|&id| id > 0 && id <= max_id) {
        Ok(u64::from(expected))
    } else {
        Err(bad_response())
    }
}

/// An answer that is not what was asked for; the channel stays usable.
fn bad_response() -> Failure {
    Failure::kept(Cow::Borrowed("bad_response"))
}

/// A call that ended with `status`, counted as `grpc_<code>`; the channel stays usable (it
/// reconnects by itself if its connection was lost).
fn status_failure(status: &Status) -> Failure {
    let kind = Cow::Borrowed(code_kind(status.code()));
    // A status tonic made from a transport error (the connection is gone), not one the server
    // sent: open a new connection, which backs off while the server is down, rather than spin on
    // calls that fail at once.
    if std::error::Error::source(status).is_some() {
        Failure::lost(kind)
    } else {
        Failure::kept(kind)
    }
}

/// The error kind for a status code, e.g. `grpc_unavailable`.
fn code_kind(code: Code) -> &'static str {
    match code {
        Code::Ok => "grpc_ok",
        Code::Cancelled => "grpc_cancelled",
        Code::Unknown => "grpc_unknown",
        Code::InvalidArgument => "grpc_invalid_argument",
        Code::DeadlineExceeded => "grpc_deadline_exceeded",
        Code::NotFound => "grpc_not_found",
        Code::AlreadyExists => "grpc_already_exists",
        Code::PermissionDenied => "grpc_permission_denied",
        Code::ResourceExhausted => "grpc_resource_exhausted",
        Code::FailedPrecondition => "grpc_failed_precondition",
        Code::Aborted => "grpc_aborted",
        Code::OutOfRange => "grpc_out_of_range",
        Code::Unimplemented => "grpc_unimplemented",
        Code::Internal => "grpc_internal",
        Code::Unavailable => "grpc_unavailable",
        Code::DataLoss => "grpc_data_loss",
        Code::Unauthenticated => "grpc_unauthenticated",
    }
}

/// The I/O error underneath `err`, if any.
fn find_io<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a io::Error> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<io::Error>() {
            return Some(io);
        }
        source = cause.source();
    }
    None
}

/// `err` and its causes, joined by `: `.
fn describe_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transport_error_reopens_the_connection_a_sent_status_does_not() {
        // Sent by the server: the connection is fine.
        assert!(!status_failure(&Status::unavailable("clock moved backwards")).reconnects());
        assert!(!status_failure(&Status::invalid_argument("count")).reconnects());
        // Made by tonic from a failed connection.
        let gone = Status::from_error(Box::new(io::Error::new(
            io::ErrorKind::ConnectionRefused,
            "connection refused",
        )));
        assert!(status_failure(&gone).reconnects(), "{gone:?}");
    }

    #[test]
    fn status_codes_name_the_error_kind() {
        assert_eq!(code_kind(Code::Unavailable), "grpc_unavailable");
        assert_eq!(code_kind(Code::InvalidArgument), "grpc_invalid_argument");
        assert_eq!(code_kind(Code::DeadlineExceeded), "grpc_deadline_exceeded");
    }

    #[test]
    fn answers_need_the_right_number_of_positive_ids() {
        assert_eq!(check(&[1, 2, 3], 3, i64::MAX).unwrap(), 3);
        assert!(check(&[1, 2], 3, i64::MAX).is_err());
        assert!(check(&[1, 0, 3], 3, i64::MAX).is_err());
        assert!(check(&[1, -2, 3], 3, i64::MAX).is_err());
        // Above the layout's largest ID (js-safe's 2^53 - 1).
        let js = (1 << 53) - 1;
        assert_eq!(check(&[1, js], 2, js).unwrap(), 2);
        assert!(check(&[1, js + 1], 2, js).is_err());
    }
}

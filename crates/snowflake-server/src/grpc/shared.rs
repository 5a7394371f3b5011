//! What the connections of one gRPC listener share (the routes, the service, the timeouts and
//! limits), and the answer to a call its request timeout cut short.

use super::SnowflakeService;
use std::time::Duration;
use tonic::Status;
use tonic::service::Routes;

/// What every connection of one listener shares.
#[derive(Debug)]
pub(super) struct Shared {
    /// Our service, health and reflection, for every call but the fast `NextId`.
    pub(super) routes: Routes,
    /// Our service, for the fast `NextId`.
    pub(super) service: SnowflakeService,
    /// How long a call may take until its response headers.
    pub(super) request_timeout: Duration,
    /// How long a new connection may take to send the HTTP/2 preface and settings.
    pub(super) handshake_timeout: Duration,
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

/// The answer to a call the request timeout cut (`CANCELLED`, as tonic's), counted and observed
/// as the method's, like every other answer: the handler that would have counted it was
/// dropped with the call.
pub(super) fn timed_out(
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

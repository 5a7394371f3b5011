//! What the connections of one gRPC listener share (the routes, the service, the timeouts and
//! limits), and the answer to a call its request timeout cut short.

use super::{NEXT_ID, SnowflakeService};
use crate::latency::Histogram;
use crate::node::{Node, Protocol};
use prometheus_client::metrics::counter::Counter;
use std::sync::{Arc, OnceLock};
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
    /// The fast `NextId`'s metrics, looked up once for the listener.
    pub(super) next_id: NextIdMetrics,
}

/// What every answered `NextId` counts: the IDs issued over gRPC, its latency and its `OK`
/// requests. Looked up once, not in the metric families on every call; the `OK` counter on
/// the first `OK` answer, so that /metrics shows it only once there is one, as before.
#[derive(Debug)]
pub(super) struct NextIdMetrics {
    /// `snowflake_ids_issued_total{protocol="grpc"}`.
    pub(super) issued: Counter,
    /// `NextId`'s latency histogram.
    latency: Arc<Histogram>,
    /// `NextId`'s requests answered `OK`.
    ok: OnceLock<Counter>,
}

impl NextIdMetrics {
    pub(super) fn new(node: &Node) -> NextIdMetrics {
        let metrics = node.metrics();
        NextIdMetrics {
            issued: metrics.ids_issued_counter(Protocol::Grpc),
            latency: metrics.latency(Protocol::Grpc, NEXT_ID),
            ok: OnceLock::new(),
        }
    }

    /// Counts one `NextId` answered `OK`, and observes how long it took.
    pub(super) fn ok(&self, node: &Node, started: tokio::time::Instant) {
        self.latency.observe(started.elapsed());
        self.ok
            .get_or_init(|| {
                let code = u16::try_from(i32::from(tonic::Code::Ok)).unwrap_or(u16::MAX);
                node.metrics()
                    .request_counter(Protocol::Grpc, NEXT_ID, code)
            })
            .inc();
    }
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

//! The gRPC front end (SPEC §5): `snowflake.v1.Snowflake` from
//! `proto/snowflake/v1/snowflake.proto`, the standard `grpc.health.v1.Health` service (SERVING
//! only while the node can issue IDs) and server reflection (`grpc.reflection.v1`, and
//! `grpc.reflection.v1alpha` for older clients).
//!
//! The handlers only translate to the [`Node`]'s calls: [`IssueError::BadRequest`] becomes
//! `INVALID_ARGUMENT`, [`IssueError::Unavailable`] becomes `UNAVAILABLE` with the node's reason
//! and a `retry-after` (seconds) trailer, [`IssueError::Exhausted`] (the node-wide queue of large
//! batches is full, see [`crate::bulk`]) `RESOURCE_EXHAUSTED`, with one too. The listener (its cap, TLS handshake and drain) is
//! `listen`'s. Each connection is served on the `h2` crate directly (`conn`): `NextId` is
//! answered on a fast path of its own (`next_id`), every other call goes to these tonic services
//! (`bridge`).

use crate::config::Config;
use crate::latency::Histogram;
use crate::listen::{self, OverCap};
use crate::node::{IssueError, Node, Protocol};
use crate::tls::Alpn;
use futures_util::Stream;
use pb::snowflake_server::{Snowflake, SnowflakeServer};
use pb::{
    DecodeRequest, DecodeResponse, GetInfoRequest, GetInfoResponse, NextIdRequest, NextIdResponse,
    NextIdsRequest, NextIdsResponse, RangeRequest, RangeResponse, StreamIdsRequest,
};
use snowflake_core::{IdBatch, SnowflakeId};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::metadata::MetadataValue;
use tonic::service::Routes;
use tonic::{Request, Response, Status};
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

mod bridge;
mod conn;
mod next_id;
mod shared;

/// The code generated from `proto/snowflake/v1/snowflake.proto` (messages, the server trait
/// and a client), from the `snowflake-proto` crate; re-exported under its old path.
pub use snowflake_proto::v1 as pb;

/// The service's full name, as used by the health service and reflection.
pub use snowflake_proto::v1::SERVICE_NAME;

/// The most IDs one `StreamIds` call may ask for.
pub const STREAM_MAX_COUNT: u64 = 100_000_000;

/// The `StreamIds` chunk size when the request leaves it 0 (capped at the max batch).
pub const STREAM_DEFAULT_CHUNK: u64 = 4096;

/// Requests are a few bytes; anything larger is refused before it is decoded.
const MAX_REQUEST_BYTES: usize = 16 * 1024;

/// How long an HTTP/2 keep-alive PING may go unanswered before the connection is dropped.
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// How often the health status follows the node's readiness.
const HEALTH_POLL: Duration = Duration::from_millis(100);

/// The method names, used as bounded metric labels.
const NEXT_ID: &str = "/snowflake.v1.Snowflake/NextId";
const NEXT_IDS: &str = "/snowflake.v1.Snowflake/NextIds";
const DECODE: &str = "/snowflake.v1.Snowflake/Decode";
const STREAM_IDS: &str = "/snowflake.v1.Snowflake/StreamIds";
const GET_INFO: &str = "/snowflake.v1.Snowflake/GetInfo";
const RANGE: &str = "/snowflake.v1.Snowflake/Range";
/// All of them.
const METHODS: [&str; 6] = [NEXT_ID, NEXT_IDS, DECODE, STREAM_IDS, GET_INFO, RANGE];

/// `snowflake.v1.Snowflake` over a [`Node`].
#[derive(Debug, Clone)]
pub struct SnowflakeService {
    node: Arc<Node>,
    shutdown: watch::Receiver<bool>,
    /// Each method's latency histogram.
    latency: Arc<[(&'static str, Arc<Histogram>)]>,
}

impl SnowflakeService {
    /// The service; `shutdown` flipping to true cuts running `StreamIds` calls short.
    pub fn new(node: Arc<Node>, shutdown: watch::Receiver<bool>) -> SnowflakeService {
        let latency = METHODS
            .into_iter()
            .map(|method| (method, node.metrics().latency(Protocol::Grpc, method)))
            .collect();
        SnowflakeService {
            node,
            shutdown,
            latency,
        }
    }

    /// Counts one call by method and gRPC status code, and observes how long it took (for
    /// `StreamIds`, until its first message was ready).
    fn counted<T>(
        &self,
        method: &'static str,
        started: Instant,
        result: Result<T, Status>,
    ) -> Result<T, Status> {
        let code = match &result {
            Ok(_) => tonic::Code::Ok,
            Err(status) => status.code(),
        };
        self.count(method, started, code);
        result
    }

    /// Counts one call of `method` answered with `code`, and observes how long it took.
    fn count(&self, method: &'static str, started: Instant, code: tonic::Code) {
        if let Some((_, latency)) = self.latency.iter().find(|(m, _)| *m == method) {
            latency.observe(started.elapsed());
        }
        let code = u16::try_from(i32::from(code)).unwrap_or(u16::MAX);
        self.node.metrics().request(Protocol::Grpc, method, code);
    }

    async fn issue(&self, count: u64) -> Result<Vec<IdBatch>, Status> {
        self.node
            .issue(Protocol::Grpc, count)
            .await
            .map_err(to_status)
    }
}

/// Set by our handlers when they run. A call of one of our methods that tonic answers without
/// running its handler (a malformed, compressed or oversized message) is then counted by the
/// bridge, from the status tonic sent, instead of by nobody.
#[derive(Debug, Clone, Default)]
struct Handled(Arc<std::sync::atomic::AtomicBool>);

impl Handled {
    /// Marks `request`'s call as counted by its handler (a no-op for calls the bridge did
    /// not tag).
    fn mark<T>(request: &Request<T>) {
        if let Some(handled) = request.extensions().get::<Handled>() {
            handled.0.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Whether a handler ran.
    fn ran(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// The shares of the node's budget for bulk replies (see [`crate::bulk`]) taken by a call's
/// handler for the messages it answers; the bridge takes them and ties each to the bytes it hands
/// to the connection, so that a share is given back only when its bytes are gone (sent, or the
/// stream reset), however long a client that does not read keeps them.
#[derive(Debug, Clone, Default)]
struct ReplyBudget(Arc<std::sync::Mutex<Vec<crate::bulk::BulkPermit>>>);

impl ReplyBudget {
    /// Hands `permit` to the bridge of `request`'s call; without one (no bridge), it is
    /// given back when the handler returns.
    fn put<T>(request: &Request<T>, permit: crate::bulk::BulkPermit) {
        if let Some(budget) = request.extensions().get::<ReplyBudget>() {
            budget
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(permit);
        }
    }

    /// The shares handed over since the last call.
    fn take(&self) -> Vec<crate::bulk::BulkPermit> {
        std::mem::take(
            &mut *self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

/// The gRPC status for a refusal.
pub fn to_status(err: IssueError) -> Status {
    match err {
        IssueError::BadRequest(message) => Status::invalid_argument(message),
        IssueError::Unavailable {
            message,
            retry_after_secs,
        } => {
            let mut status = Status::unavailable(message);
            status
                .metadata_mut()
                .insert("retry-after", MetadataValue::from(retry_after_secs));
            status
        }
        IssueError::Exhausted {
            message,
            retry_after_secs,
        } => {
            let mut status = Status::resource_exhausted(message);
            status
                .metadata_mut()
                .insert("retry-after", MetadataValue::from(retry_after_secs));
            status
        }
    }
}

fn ids_response(batches: Vec<IdBatch>, count: u64) -> NextIdsResponse {
    let mut ids = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
    ids.extend(batches.into_iter().flatten().map(SnowflakeId::as_i64));
    NextIdsResponse { ids }
}

fn to_i64(value: u64, what: &str) -> Result<i64, Status> {
    i64::try_from(value).map_err(|_| Status::internal(format!("{what} {value} does not fit int64")))
}

fn to_u32(value: u64, what: &str) -> Result<u32, Status> {
    u32::try_from(value)
        .map_err(|_| Status::internal(format!("{what} {value} does not fit uint32")))
}

/// What a running `StreamIds` call still has to send.
struct StreamState {
    node: Arc<Node>,
    shutdown: watch::Receiver<bool>,
    /// The first chunk, generated before the call was answered.
    first: Option<NextIdsResponse>,
    left: u64,
    chunk: u64,
    sent: u64,
    done: bool,
}

impl StreamState {
    /// The next message: generated only now, when the client is ready for it.
    async fn next(mut self) -> Option<(Result<NextIdsResponse, Status>, StreamState)> {
        if let Some(first) = self.first.take() {
            return Some((Ok(first), self));
        }
        if self.done || self.left == 0 {
            return None;
        }
        if *self.shutdown.borrow() {
            self.done = true;
            let status = Status::unavailable(format!(
                "shutting down: the stream stopped after {} IDs; ask another node for the remaining {}",
                self.sent, self.left
            ));
            return Some((Err(status), self));
        }
        let n = self.chunk.min(self.left);
        match self.node.issue(Protocol::Grpc, n).await {
            Ok(batches) => {
                self.left -= n;
                self.sent += n;
                Some((Ok(ids_response(batches, n)), self))
            }
            Err(err) => {
                self.done = true;
                Some((Err(to_status(err)), self))
            }
        }
    }
}

/// The message stream of one `StreamIds` call.
pub type IdStream = Pin<Box<dyn Stream<Item = Result<NextIdsResponse, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl Snowflake for SnowflakeService {
    async fn next_id(
        &self,
        request: Request<NextIdRequest>,
    ) -> Result<Response<NextIdResponse>, Status> {
        Handled::mark(&request);
        let started = Instant::now();
        let result = self.issue(1).await.map(|batches| {
            Response::new(NextIdResponse {
                id: batches[0].first().as_i64(),
            })
        });
        self.counted(NEXT_ID, started, result)
    }

    async fn next_ids(
        &self,
        request: Request<NextIdsRequest>,
    ) -> Result<Response<NextIdsResponse>, Status> {
        Handled::mark(&request);
        let started = Instant::now();
        let result = async {
            let count = self
                .node
                .check_count(u64::from(request.get_ref().count))
                .map_err(to_status)?;
            // A bulk reply takes its share of the node's budget before any ID is issued: the
            // IDs, then their encoding (8 + at most 10 bytes each), until the client has them.
            let permit = if crate::bulk::BulkGate::is_bulk(count) {
                let held = count.saturating_mul(18).saturating_add(64);
                Some(self.node.admit_bulk(held).await.map_err(to_status)?)
            } else {
                None
            };
            let batches = self.issue(count).await?;
            if let Some(mut permit) = permit {
                permit.issued();
                ReplyBudget::put(&request, permit);
            }
            Ok(Response::new(ids_response(batches, count)))
        }
        .await;
        self.counted(NEXT_IDS, started, result)
    }

    async fn decode(
        &self,
        request: Request<DecodeRequest>,
    ) -> Result<Response<DecodeResponse>, Status> {
        Handled::mark(&request);
        let started = Instant::now();
        let result = (|| {
            // Under the node's layout: above its largest ID is INVALID_ARGUMENT.
            let layout = self.node.layout();
            let decoded = SnowflakeId::try_from(request.get_ref().id)
                .and_then(|id| layout.check_id(id))
                .and_then(|id| layout.describe(id))
                .map_err(|e| Status::invalid_argument(e.to_string()))?;
            let id = decoded.id;
            Ok(Response::new(DecodeResponse {
                id: id.as_i64(),
                timestamp_ms: to_i64(decoded.timestamp_ms, "timestamp_ms")?,
                datacenter_id: to_u32(decoded.datacenter_id, "datacenter_id")?,
                worker_id: to_u32(decoded.worker_id, "worker_id")?,
                sequence: to_u32(decoded.sequence, "sequence")?,
                time: decoded.time,
            }))
        })();
        self.counted(DECODE, started, result)
    }

    type StreamIdsStream = IdStream;

    async fn stream_ids(
        &self,
        request: Request<StreamIdsRequest>,
    ) -> Result<Response<IdStream>, Status> {
        Handled::mark(&request);
        let started = Instant::now();
        let result = async {
            let StreamIdsRequest { count, chunk_size } = *request.get_ref();
            if !(1..=STREAM_MAX_COUNT).contains(&count) {
                return Err(Status::invalid_argument(format!(
                    "invalid count: expected 1..={STREAM_MAX_COUNT}, found {count}"
                )));
            }
            let max_batch = self.node.max_batch();
            let chunk = match u64::from(chunk_size) {
                0 => STREAM_DEFAULT_CHUNK.min(max_batch),
                n if n <= max_batch => n,
                n => {
                    return Err(Status::invalid_argument(format!(
                        "invalid chunk_size: expected 1..={max_batch} (0 means {}), found {n}",
                        STREAM_DEFAULT_CHUNK.min(max_batch)
                    )));
                }
            };
            // The first chunk is issued now, so a node that cannot issue answers with a status
            // rather than with an empty stream.
            let n = chunk.min(count);
            let first = ids_response(self.issue(n).await?, n);
            let state = StreamState {
                node: Arc::clone(&self.node),
                shutdown: self.shutdown.clone(),
                first: Some(first),
                left: count - n,
                chunk,
                sent: n,
                done: false,
            };
            let stream: IdStream = Box::pin(futures_util::stream::unfold(state, StreamState::next));
            Ok(Response::new(stream))
        }
        .await;
        self.counted(STREAM_IDS, started, result)
    }

    async fn get_info(
        &self,
        request: Request<GetInfoRequest>,
    ) -> Result<Response<GetInfoResponse>, Status> {
        Handled::mark(&request);
        let started = Instant::now();
        let result = (|| {
            let info = self.node.info();
            Ok(Response::new(GetInfoResponse {
                datacenter_id: to_u32(info.datacenter_id, "datacenter_id")?,
                worker_id: to_u32(info.worker_id, "worker_id")?,
                epoch_ms: to_i64(info.epoch_ms, "epoch_ms")?,
                timestamp_ms: to_i64(info.timestamp_ms, "timestamp_ms")?,
                max_batch: info.max_batch,
                ready: self.node.readiness().is_ok(),
                layout: Some(pb::Layout {
                    name: info.layout.name,
                    timestamp_bits: u32::from(info.layout.timestamp_bits),
                    datacenter_bits: u32::from(info.layout.datacenter_bits),
                    worker_bits: u32::from(info.layout.worker_bits),
                    sequence_bits: u32::from(info.layout.sequence_bits),
                    epoch_ms: to_i64(info.layout.epoch_ms, "epoch_ms")?,
                    max_id: info.layout.max_id.as_i64(),
                }),
            }))
        })();
        self.counted(GET_INFO, started, result)
    }

    async fn range(
        &self,
        request: Request<RangeRequest>,
    ) -> Result<Response<RangeResponse>, Status> {
        Handled::mark(&request);
        let started = Instant::now();
        let RangeRequest { from_ms, to_ms } = *request.get_ref();
        let result = crate::window::range_ms(self.node.layout(), from_ms, to_ms)
            .map(|range| {
                Response::new(RangeResponse {
                    min_id: range.min_id.as_i64(),
                    max_id: range.max_id.as_i64(),
                })
            })
            .map_err(Status::invalid_argument);
        self.counted(RANGE, started, result)
    }
}

/// The gRPC door: every connection of the listener shares its services and settings.
#[derive(Debug)]
struct Grpc(Arc<shared::Shared>);

impl listen::Door for Grpc {
    const ALPN: Alpn = Alpn::H2;
    // A gRPC client cannot read an answer before its first call: closed at once, it fails
    // over or reconnects.
    const OVER_CAP: OverCap = OverCap::Close;

    fn name(&self) -> &'static str {
        "grpc"
    }

    fn serve<S: listen::Io>(
        self: Arc<Self>,
        io: S,
        _peer: std::net::SocketAddr,
        stop: watch::Receiver<bool>,
    ) -> impl Future<Output = ()> + Send {
        conn::serve_connection(io, Arc::clone(&self.0), stop)
    }
}

/// Keeps the health status of "" and [`SERVICE_NAME`] in step with the node's readiness until
/// `shutdown` flips; then reports NOT_SERVING and removes both, which ends every `Watch` call
/// so the drain is not held up by them.
async fn track_health(
    node: Arc<Node>,
    mut reporter: HealthReporter,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut last = None;
    loop {
        let readiness = node.readiness();
        let serving = readiness.is_ok();
        if last != Some(serving) {
            let status = if serving {
                ServingStatus::Serving
            } else {
                ServingStatus::NotServing
            };
            if let Err(reason) = &readiness {
                tracing::debug!(%reason, "grpc health: NOT_SERVING");
            }
            reporter.set_service_status("", status).await;
            reporter.set_service_status(SERVICE_NAME, status).await;
            last = Some(serving);
        }
        tokio::select! {
            () = tokio::time::sleep(HEALTH_POLL) => {}
            _ = shutdown.wait_for(|stop| *stop) => break,
        }
    }
    reporter
        .set_service_status("", ServingStatus::NotServing)
        .await;
    reporter
        .set_service_status(SERVICE_NAME, ServingStatus::NotServing)
        .await;
    reporter.clear_service_status("").await;
    reporter.clear_service_status(SERVICE_NAME).await;
}

/// Serves gRPC on `listener` until `shutdown` flips to true; then stops accepting, lets
/// in-flight calls finish (at most `config.limits.shutdown_timeout`), and returns.
pub async fn serve(
    listener: TcpListener,
    node: Arc<Node>,
    config: &Config,
    tls: Option<Arc<crate::tls::Tls>>,
    shutdown: watch::Receiver<bool>,
) {
    let (reporter, health_service) = tonic_health::server::health_reporter();
    // Not SERVING until the node says so.
    reporter
        .set_service_status("", ServingStatus::NotServing)
        .await;
    reporter
        .set_service_status(SERVICE_NAME, ServingStatus::NotServing)
        .await;
    // Reflection in both versions: `v1`, and `v1alpha` for the clients that still ask it. Each
    // lists both (the builder would list only its own).
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_reflection::pb::v1::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(
                tonic_reflection::pb::v1alpha::FILE_DESCRIPTOR_SET,
            )
            .include_reflection_service(false)
    };
    let reflection = reflection()
        .build_v1()
        .and_then(|v1| Ok((v1, reflection().build_v1alpha()?)))
        .inspect_err(|err| tracing::warn!(error = %err, "grpc reflection disabled"))
        .ok();
    let service = SnowflakeService::new(Arc::clone(&node), shutdown.clone());
    let routes = Routes::new(health_service).add_service(
        SnowflakeServer::new(service.clone()).max_decoding_message_size(MAX_REQUEST_BYTES),
    );
    let routes = match reflection {
        Some((v1, v1alpha)) => routes.add_service(v1).add_service(v1alpha),
        None => routes,
    }
    .prepare();
    let limits = listen::Limits::of(config);
    let shared = Arc::new(shared::Shared {
        routes,
        service,
        request_timeout: config.limits.request_timeout,
        handshake_timeout: limits.handshake_timeout(),
        max_streams: config.limits.grpc_max_concurrent_streams,
        keepalive_interval: config.limits.idle_timeout / 2,
        keepalive_timeout: KEEPALIVE_TIMEOUT,
        idle_timeout: config.limits.idle_timeout,
        next_id: shared::NextIdMetrics::new(&node),
    });
    let rejected = node.metrics().connections_rejected.clone();
    let door = Arc::new(Grpc(shared));
    let server = listen::serve(listener, door, tls, limits, rejected, shutdown.clone());
    let health = track_health(node, reporter, shutdown);
    tokio::join!(server, health);
}

//! The 2010 Thrift front end: framed transport (4-byte big-endian length), binary protocol, the
//! IDL in `thrift/snowflake.thrift` verbatim, so the original's clients work unchanged.
//!
//! One task per connection reads a frame (never allocating more than the configured limit, so a
//! garbage length such as the text `this is a bad request`, read as a ~1.9 GB frame, just closes
//! that connection), runs the generated processor functions over it, and writes the reply frame.
//! Unlike the 2010 server, every error is answered with a `TApplicationException` that says what
//! went wrong, and the connection stays usable. A connection that makes no progress for the idle
//! timeout, by sending no request or by reading none of a reply, is closed, so it cannot hold one
//! of the listener's connection slots for ever.

use crate::config::Config;
use crate::latency::RouteLatencies;
use crate::listen::{self, OverCap, deadline::Progress};
use crate::node::{IssueError, Node, NotNow, Protocol};
use crate::tls::Alpn;
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use prometheus_client::metrics::counter::Counter;
use snowflake_proto::thrift::generated::{SnowflakeSyncHandler, TSnowflakeProcessFunctions};
use std::cell::Cell;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use thrift::protocol::{
    TBinaryInputProtocol, TBinaryOutputProtocol, TInputProtocol, TMessageIdentifier, TMessageType,
    TOutputProtocol,
};
use thrift::{ApplicationError, ApplicationErrorKind, TConfiguration};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::codec::{Framed, LengthDelimitedCodec};

/// The methods of the IDL, as bounded metric labels.
const METHODS: &[&str] = &[
    "get_id",
    "get_worker_id",
    "get_datacenter_id",
    "get_timestamp",
];

/// Serves Thrift on `listener` until `shutdown` flips to true; then stops accepting, lets each
/// connection finish the request it is on (at most `config.limits.shutdown_timeout`), and returns.
pub async fn serve(
    listener: TcpListener,
    node: Arc<Node>,
    config: &Config,
    shutdown: watch::Receiver<bool>,
) {
    let rejected = node.metrics().connections_rejected.clone();
    let door = Arc::new(Thrift {
        node,
        limits: Limits {
            max_frame_bytes: config.limits.thrift_max_frame_bytes,
            idle_timeout: config.limits.idle_timeout,
        },
    });
    // Thrift stays plaintext (2010 clients).
    let limits = listen::Limits::of(config);
    listen::serve(listener, door, None, limits, rejected, shutdown).await;
}

/// The Thrift door: what its connections share.
#[derive(Debug)]
struct Thrift {
    node: Arc<Node>,
    limits: Limits,
}

impl listen::Door for Thrift {
    const ALPN: Alpn = Alpn::None;
    // Thrift has no way to answer before a request arrives: closed at once.
    const OVER_CAP: OverCap = OverCap::Close;

    fn name(&self) -> &'static str {
        "thrift"
    }

    async fn serve<S: listen::Io>(
        self: Arc<Self>,
        io: S,
        peer: SocketAddr,
        stop: watch::Receiver<bool>,
    ) {
        connection(io, &self.node, self.limits, stop).await;
        tracing::debug!(%peer, "thrift connection closed");
    }
}

/// What bounds one connection.
#[derive(Debug, Clone, Copy)]
struct Limits {
    /// The largest request frame read (and reply written).
    max_frame_bytes: usize,
    /// `--idle-timeout-ms`: how long the peer may make no progress, either sending no next
    /// request or taking none of a reply, before its connection is closed.
    idle_timeout: Duration,
}

/// One connection: frame in, frame out, until the peer leaves, sends something that is not a
/// Thrift frame, idles too long (between requests, or by not reading a reply), or the service
/// stops.
async fn connection<S: listen::Io>(
    stream: S,
    node: &Node,
    limits: Limits,
    mut shutdown: watch::Receiver<bool>,
) {
    let codec = LengthDelimitedCodec::builder()
        .length_field_length(4)
        .big_endian()
        .max_frame_length(limits.max_frame_bytes)
        .new_codec();
    let mut framed = Framed::new(stream, codec);
    let mut latencies = node.metrics().route_latencies(Protocol::Thrift);
    let mut counters = Counters::new(node);
    let Some(config) = decoding(limits.max_frame_bytes) else {
        return;
    };
    // One deadline for the connection's life: a whole next request within the idle timeout of
    // the last reply (a frame trickled in does not move it), a whole reply taken within the
    // idle timeout of its start.
    let mut progress = Progress::new(limits.idle_timeout);
    loop {
        let next = tokio::select! {
            next = progress.within(framed.next()) => next,
            _ = shutdown.wait_for(|stop| *stop) => return,
        };
        let frame = match next {
            None => return,
            Some(None) => return,
            Some(Some(Err(err))) => {
                // An oversized, negative or garbage length: nothing was allocated for it.
                node.metrics().thrift_bad_frames.inc();
                tracing::debug!(error = %err, "closing a thrift connection that sent a bad frame");
                return;
            }
            Some(Some(Ok(frame))) => frame,
        };
        let answered = answer(node, &frame, &config, &mut latencies, &mut counters).await;
        let Some(reply) = answered else {
            node.metrics().thrift_bad_frames.inc();
            return;
        };
        if reply.is_empty() {
            // Nothing to send: the next request is due within the idle timeout from now.
            progress.moved();
            continue;
        }
        // A peer that pipelines requests and never reads the replies fills the socket buffers,
        // and this write then waits on it. The idle timeout bounds it (not the request timeout,
        // which bounds our own waiting for the clock or the disk): a peer that takes nothing
        // for that long is as idle as one that sends nothing, and loses its connection slot.
        progress.moved();
        match progress.within(framed.send(Bytes::from(reply))).await {
            Some(Ok(())) => {}
            Some(Err(_)) => return,
            None => {
                tracing::debug!(
                    "closing a thrift connection that took no reply within the idle timeout"
                );
                return;
            }
        }
    }
}

/// What a request's decoder may allocate: no string, list or message longer than a frame.
fn decoding(max_frame_bytes: usize) -> Option<TConfiguration> {
    TConfiguration::builder()
        .max_frame_size(Some(max_frame_bytes))
        .max_message_size(Some(max_frame_bytes))
        .max_string_size(Some(max_frame_bytes))
        .max_container_size(Some(max_frame_bytes))
        .build()
        .ok()
}

/// The reply frame for one request frame, or `None` when the frame does not even start with a
/// Thrift message header (then nobody can be answered, and the connection is closed). An empty
/// reply means a one-way message: nothing is sent back. A call's latency is observed from
/// its frame's arrival to its reply's encoding.
async fn answer(
    node: &Node,
    frame: &[u8],
    config: &TConfiguration,
    latencies: &mut RouteLatencies,
    counters: &mut Counters,
) -> Option<Vec<u8>> {
    let started = Instant::now();
    let mut waited_ms = 0;
    let mut reservations = 0;
    let mut deadline = None;
    loop {
        // Old clients send unversioned headers: read non-strictly; always reply strictly.
        let mut input = TBinaryInputProtocol::with_config(frame, false, config.clone());
        let ident = input.read_message_begin().ok()?;
        let mut out = Vec::with_capacity(64);
        let mut output = TBinaryOutputProtocol::new(&mut out, true);
        let method = METHODS
            .iter()
            .copied()
            .find(|m| *m == ident.name)
            .unwrap_or("unknown");
        match ident.message_type {
            TMessageType::Call => {}
            TMessageType::OneWay => return Some(Vec::new()),
            other => {
                let message = format!("expected a call message, found {other:?}");
                write_exception(
                    &mut output,
                    &ident,
                    ApplicationErrorKind::InvalidMessageType,
                    &message,
                );
                counters.request(node, method, 400).inc();
                latencies.get(method).observe(started.elapsed());
                return Some(out);
            }
        }
        let handler = Handler {
            node,
            waited_ms,
            retry: Cell::new(None),
            status: Cell::new(200),
            issued: &counters.issued,
            agent: Cell::new(counters.agent.take()),
        };
        let seq = ident.sequence_number;
        let processed = match method {
            "get_id" => {
                TSnowflakeProcessFunctions::process_get_id(&handler, seq, &mut input, &mut output)
            }
            "get_worker_id" => TSnowflakeProcessFunctions::process_get_worker_id(
                &handler,
                seq,
                &mut input,
                &mut output,
            ),
            "get_datacenter_id" => TSnowflakeProcessFunctions::process_get_datacenter_id(
                &handler,
                seq,
                &mut input,
                &mut output,
            ),
            "get_timestamp" => TSnowflakeProcessFunctions::process_get_timestamp(
                &handler,
                seq,
                &mut input,
                &mut output,
            ),
            _ => {
                let shown: String = ident.name.chars().take(100).collect();
                let message = format!("Invalid method name: '{shown}'");
                write_exception(
                    &mut output,
                    &ident,
                    ApplicationErrorKind::UnknownMethod,
                    &message,
                );
                handler.status.set(404);
                Ok(())
            }
        };
        if let Some(retry) = handler.retry.get() {
            // Nothing was issued: run the whole request again once the clock has caught up, or
            // once a reservation covering the clock's jump forward is on disk; within the
            // request timeout, else the exception already written is the answer.
            let deadline = *deadline.get_or_insert_with(|| Instant::now() + node.request_timeout());
            match retry {
                Retry::Wait(ms) if Instant::now() + Duration::from_millis(ms) <= deadline => {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    waited_ms += ms;
                    continue;
                }
                Retry::Reserve if reservations < 3 => {
                    let reserved = tokio::time::timeout_at(deadline, node.reserve_now()).await;
                    if reserved.is_ok() {
                        reservations += 1;
                        continue;
                    }
                }
                _ => {}
            }
        }
        if let Err(err) = processed {
            // The arguments could not be decoded (nothing was written before that happened).
            out.clear();
            let mut output = TBinaryOutputProtocol::new(&mut out, true);
            let message = format!("cannot decode the arguments of {}: {err}", ident.name);
            write_exception(
                &mut output,
                &ident,
                ApplicationErrorKind::ProtocolError,
                &message,
            );
            handler.status.set(400);
        }
        counters.agent = handler.agent.take();
        counters.request(node, method, handler.status.get()).inc();
        latencies.get(method).observe(started.elapsed());
        return Some(out);
    }
}

fn write_exception(
    output: &mut dyn TOutputProtocol,
    ident: &TMessageIdentifier,
    kind: ApplicationErrorKind,
    message: &str,
) {
    let reply = TMessageIdentifier::new(
        ident.name.clone(),
        TMessageType::Exception,
        ident.sequence_number,
    );
    let error = ApplicationError::new(kind, message.to_owned());
    // Writing to a Vec cannot fail.
    let _ = output.write_message_begin(&reply);
    let _ = thrift::Error::write_application_error_to_out_protocol(&error, output);
    let _ = output.write_message_end();
    let _ = output.flush();
}

/// Why a request is run again.
#[derive(Debug, Clone, Copy)]
enum Retry {
    /// After this many milliseconds (a small clock regression).
    Wait(u64),
    /// After a reservation is written (the clock jumped forward).
    Reserve,
}

/// The counters a connection uses, looked up once (or once per user agent) rather than for
/// every call: a label lookup takes the family's lock and hashes the labels, and the user
/// agent's label a global set's lock and two copies of the agent.
struct Counters {
    /// IDs issued over Thrift.
    issued: Counter,
    /// Requests, by method and status.
    requests: Vec<(&'static str, u16, Counter)>,
    /// The last user agent given IDs, and its counter.
    agent: Option<(String, Counter)>,
}

impl Counters {
    fn new(node: &Node) -> Counters {
        Counters {
            issued: node.metrics().ids_issued_counter(Protocol::Thrift),
            requests: Vec::new(),
            agent: None,
        }
    }

    /// The counter of `method`'s requests answered with `status`.
    fn request(&mut self, node: &Node, method: &'static str, status: u16) -> &Counter {
        let at = match self
            .requests
            .iter()
            .position(|(m, s, _)| *m == method && *s == status)
        {
            Some(at) => at,
            None => {
                let counter = node
                    .metrics()
                    .request_counter(Protocol::Thrift, method, status);
                self.requests.push((method, status, counter));
                self.requests.len() - 1
            }
        };
        &self.requests[at].2
    }
}

/// The IDL's methods over the node, for one request.
struct Handler<'a> {
    node: &'a Node,
    /// The connection's counter of IDs issued.
    issued: &'a Counter,
    /// The connection's last user agent and its counter, while the request runs.
    agent: Cell<Option<(String, Counter)>>,
    /// How long this request already waited for a lagging clock.
    waited_ms: u64,
    /// Set when the request should be retried.
    retry: Cell<Option<Retry>>,
    /// The HTTP-equivalent status for the request metric.
    status: Cell<u16>,
}

fn application_error(kind: ApplicationErrorKind, message: String) -> thrift::Error {
    thrift::Error::Application(ApplicationError::new(kind, message))
}

/// The 2010 rule for user agents: `^[a-zA-Z][a-zA-Z0-9-]*$`.
pub fn is_valid_user_agent(agent: &str) -> bool {
    let mut bytes = agent.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphabetic())
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

impl SnowflakeSyncHandler for Handler<'_> {
    fn handle_get_worker_id(&self) -> thrift::Result<i64> {
        Ok(i64::try_from(self.node.generator().worker_id()).unwrap_or(i64::MAX))
    }

    fn handle_get_datacenter_id(&self) -> thrift::Result<i64> {
        Ok(i64::try_from(self.node.generator().datacenter_id()).unwrap_or(i64::MAX))
    }

    fn handle_get_timestamp(&self) -> thrift::Result<i64> {
        Ok(i64::try_from(self.node.now_ms()).unwrap_or(i64::MAX))
    }

    fn handle_get_id(&self, useragent: String) -> thrift::Result<i64> {
        if !is_valid_user_agent(&useragent) {
            self.status.set(400);
            self.node.metrics().thrift_invalid_agents.inc();
            let shown: String = useragent.chars().take(64).collect();
            return Err(application_error(
                ApplicationErrorKind::Unknown,
                format!(
                    "InvalidUserAgentError: invalid user agent {shown:?}: expected ^[a-zA-Z][a-zA-Z0-9-]*$"
                ),
            ));
        }
        match self.node.issue_one_now_counted(self.issued, self.waited_ms) {
            Ok(id) => {
                let agent = match self.agent.take() {
                    Some((last, counter)) if last == useragent => (last, counter),
                    _ => {
                        let counter = self.node.metrics().thrift_agent_counter(&useragent);
                        (useragent, counter)
                    }
                };
                agent.1.inc();
                self.agent.set(Some(agent));
                // IDs have 63 bits at most (`Id`), so this never refuses.
                i64::try_from(id).map_err(|_| {
                    application_error(
                        ApplicationErrorKind::InternalError,
                        format!("id {id} does not fit the IDL's i64"),
                    )
                })
            }
            Err(NotNow::Wait { ms }) => {
                self.retry.set(Some(Retry::Wait(ms)));
                self.status.set(503);
                Err(application_error(
                    ApplicationErrorKind::InternalError,
                    format!(
                        "InvalidSystemClock: the clock is {ms} ms behind the last issued id and waiting \
                         it out would exceed the request timeout"
                    ),
                ))
            }
            Err(NotNow::Reserve) => {
                self.retry.set(Some(Retry::Reserve));
                self.status.set(503);
                Err(application_error(
                    ApplicationErrorKind::InternalError,
                    "Unavailable: the clock has passed the persisted high-water mark; waiting for the next reservation".into(),
                ))
            }
            // (Thrift issues single IDs: never bulk, so never `Exhausted`; answered alike.)
            Err(NotNow::Refused(
                IssueError::Unavailable { message, .. } | IssueError::Exhausted { message, .. },
            )) => {
                self.status.set(503);
                let name = if message.starts_with("clock moved backwards") {
                    "InvalidSystemClock"
                } else {
                    "Unavailable"
                };
                Err(application_error(
                    ApplicationErrorKind::InternalError,
                    format!("{name}: {message}"),
                ))
            }
            Err(NotNow::Refused(IssueError::BadRequest(message))) => {
                self.status.set(400);
                Err(application_error(ApplicationErrorKind::Unknown, message))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! Fuzzing the frame and message decoders with arbitrary bytes (property tests: cargo-fuzz
    //! needs a nightly toolchain, which this project does not use).

    use super::*;
    use bytes::BytesMut;
    use proptest::prelude::*;
    use snowflake_core::{Clock, ManualClock};
    use tokio_util::codec::Decoder;

    fn node() -> (Arc<Node>, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = Config::with_state_dir(dir.path());
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(1_790_000_000_000));
        (Node::new(&config, clock).expect("node"), dir)
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    }

    /// A strict call header for `name`, then `rest`.
    fn call(name: &str, rest: &[u8]) -> Vec<u8> {
        let mut out = 0x8001_0001_u32.to_be_bytes().to_vec();
        out.extend_from_slice(&u32::try_from(name.len()).expect("short").to_be_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&1_i32.to_be_bytes());
        out.extend_from_slice(rest);
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(600))]

        /// Arbitrary frame contents never panic: either nothing (close) or a reply that is a
        /// well-formed strict message; and memory stays bounded by the frame.
        #[test]
        fn arbitrary_messages_get_an_answer_or_a_close(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let (node, _dir) = node();
            let reply = runtime().block_on(answer(&node, &bytes, &decoding(65_536).unwrap(), &mut node.metrics().route_latencies(Protocol::Thrift), &mut Counters::new(&node)));
            if let Some(reply) = reply {
                prop_assert!(reply.is_empty() || reply[..2] == [0x80, 0x01], "{reply:?}");
                prop_assert!(reply.len() < 512);
            }
        }

        /// Arbitrary argument bytes after a valid header for each method never panic, and are
        /// always answered (a value or an exception), never a close.
        #[test]
        fn arbitrary_arguments_are_always_answered(
            method in prop_oneof![Just("get_id"), Just("get_worker_id"), Just("get_datacenter_id"), Just("get_timestamp"), Just("nope")],
            args in proptest::collection::vec(any::<u8>(), 0..128),
        ) {
            let (node, _dir) = node();
            let reply = runtime().block_on(answer(&node, &call(method, &args), &decoding(65_536).unwrap(), &mut node.metrics().route_latencies(Protocol::Thrift), &mut Counters::new(&node)));
            let reply = reply.expect("a valid header is always answered");
            prop_assert!(reply.len() >= 12 && reply[..2] == [0x80, 0x01]);
        }

        /// The frame decoder never panics on arbitrary byte streams and never buffers more than
        /// the limit, whatever length a frame claims.
        #[test]
        fn the_frame_decoder_is_bounded(chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..16)) {
            let mut codec = LengthDelimitedCodec::builder().length_field_length(4).big_endian().max_frame_length(1024).new_codec();
            let mut buffer = BytesMut::new();
            for chunk in chunks {
                buffer.extend_from_slice(&chunk);
                loop {
                    match codec.decode(&mut buffer) {
                        Ok(Some(frame)) => prop_assert!(frame.len() <= 1024),
                        Ok(None) => break,
                        Err(_) => return Ok(()),
                    }
                }
                prop_assert!(buffer.capacity() <= 64 * 1024, "buffered {} bytes", buffer.capacity());
            }
        }
    }

    #[test]
    fn user_agents_follow_the_2010_rule() {
        for good in ["infra-dm", "a", "Z9-", "abc-DEF-123"] {
            assert!(is_valid_user_agent(good), "{good}");
        }
        for bad in ["1asdf", "", "-a", "a b", "a_b", "é", "a\n"] {
            assert!(!is_valid_user_agent(bad), "{bad}");
        }
    }
}

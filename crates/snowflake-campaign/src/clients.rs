//! Clients over HTTP, gRPC, Thrift and RESP that ask one node for IDs, single and in batches, and
//! record every operation: the node, the protocol, when it was sent and answered (on the
//! campaign's monotonic clock), and the IDs or the error with its reason. In secure mode HTTP,
//! gRPC and RESP go over TLS with the campaign's client certificate (the nodes require one);
//! Thrift stays plaintext, as the service serves it.

use crate::fleet::Check;
use crate::rng::Rng;
use crate::secure::ClientTls;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use serde::Serialize;
use snowflake_proto::thrift::peer::{self, Answer};
use snowflake_proto::v1::snowflake_client::SnowflakeClient;
use snowflake_proto::v1::{NextIdRequest, NextIdsRequest};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

/// How long one request may take before it counts as failed (a stopped node never answers).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// Which front end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Http,
    Grpc,
    Thrift,
    /// Redis protocol: `INCR` for one ID, `INCRBY` for a range.
    Resp,
    /// The client library (`snowflake-client`) over every node's gRPC port, failing over
    /// between them; the op names the node that answered.
    Client,
}

/// How an operation ended.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The IDs, in the order received.
    Ids(Vec<u64>),
    /// The service answered with an error; `reason` is its message (empty: none given).
    Refused { status: String, reason: String },
    /// No answer: the connection failed or the request timed out.
    NoAnswer(String),
}

/// One request and its answer.
#[derive(Debug, Clone, Serialize)]
pub struct Op {
    /// The node (0-based slot) asked.
    pub node: usize,
    pub protocol: Protocol,
    /// How many IDs were asked for.
    pub count: u32,
    /// Microseconds since the campaign started: sent, and answered (or given up on).
    pub sent_us: u64,
    pub received_us: u64,
    /// The campaign's wall clock (Unix ms) when answered.
    pub received_unix_ms: u64,
    pub outcome: Outcome,
}

/// Every operation, appended by the clients.
pub type History = Arc<Mutex<Vec<Op>>>;

/// What a client needs.
#[derive(Debug, Clone)]
pub struct Target {
    pub node: usize,
    pub http: SocketAddr,
    pub grpc: SocketAddr,
    pub thrift: SocketAddr,
    pub resp: SocketAddr,
    /// Secure mode: TLS (with the campaign's client certificate) for HTTP, gRPC and RESP.
    pub tls: Option<Arc<ClientTls>>,
}

pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(0))
}

/// Runs a client of `protocol` against `target` until `stop` turns true, recording into
/// `history`; `pause` between requests keeps the machine from saturating.
pub async fn run(
    target: Target,
    protocol: Protocol,
    started: Instant,
    history: History,
    mut rng: Rng,
    pause: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut http: Option<HttpConn> = None;
    let mut grpc: Option<SnowflakeClient<tonic::transport::Channel>> = None;
    let mut thrift: Option<TcpStream> = None;
    let mut resp: Option<RespConn> = None;
    let tls = target.tls.as_deref();
    while !*stop.borrow() {
        // Singles half the time, else a batch of up to 64 (Thrift has no batch call).
        let count = if protocol == Protocol::Thrift || rng.below(2) == 0 {
            1
        } else {
            1 + u32::try_from(rng.below(64)).expect("small")
        };
        let sent = started.elapsed();
        let outcome = match tokio::time::timeout(REQUEST_TIMEOUT, async {
            match protocol {
                Protocol::Http => http_call(&mut http, target.http, tls, count).await,
                Protocol::Grpc => grpc_call(&mut grpc, target.grpc, tls, count).await,
                Protocol::Thrift => thrift_call(&mut thrift, target.thrift).await,
                Protocol::Resp => resp_call(&mut resp, target.resp, tls, count).await,
                // Over every node at once: `run_library`.
                Protocol::Client => Outcome::NoAnswer("not a one-node protocol".into()),
            }
        })
        .await
        {
            Ok(outcome) => outcome,
            Err(_) => {
                // The connection may be stuck mid-answer: start afresh.
                http = None;
                grpc = None;
                thrift = None;
                resp = None;
                Outcome::NoAnswer("timed out".into())
            }
        };
        let received = started.elapsed();
        history.lock().expect("history").push(Op {
            node: target.node,
            protocol,
            count,
            sent_us: u64::try_from(sent.as_micros()).unwrap_or(u64::MAX),
            received_us: u64::try_from(received.as_micros()).unwrap_or(u64::MAX),
            received_unix_ms: unix_ms(),
            outcome,
        });
        if matches!(
            history.lock().expect("history").last().map(|o| &o.outcome),
            Some(Outcome::NoAnswer(_))
        ) {
            // Do not spin on a node that is down.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            _ = stop.changed() => {}
        }
    }
}

/// The client library's client: one over every node's gRPC port, asking for 1 to 64 IDs at a
/// time, recording the node that answered; a call that no node could serve within
/// [`REQUEST_TIMEOUT`] is recorded as refused with the library's reason (each node's failure).
pub async fn run_library(
    targets: Vec<Target>,
    started: Instant,
    history: History,
    mut rng: Rng,
    pause: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut builder =
        snowflake_client::ClientBuilder::new(targets.iter().map(|t| t.grpc.to_string()))
            .call_timeout(Duration::from_millis(500))
            .give_up_after(REQUEST_TIMEOUT)
            .backoff(Duration::from_millis(50), Duration::from_secs(1))
            .max_ids_per_call(64);
    if let Some(tls) = targets.first().and_then(|t| t.tls.as_ref()) {
        // The library's own TLS options: its CA and client certificate, mutual TLS.
        builder = builder.tls(tls.library.clone());
    }
    let client = match builder.build() {
        Ok(client) => client,
        Err(e) => {
            eprintln!("campaign: the client library's client did not start: {e}");
            return;
        }
    };
    while !*stop.borrow() {
        let count = if rng.below(2) == 0 {
            1
        } else {
            1 + u32::try_from(rng.below(64)).expect("small")
        };
        let sent = started.elapsed();
        let (node, outcome) = match client.batch(count).await {
            Ok(batch) => (
                targets[batch.endpoint].node,
                Outcome::Ids(batch.ids.iter().map(|id| id.as_u64()).collect()),
            ),
            Err(e) => (
                // No node answered: the op belongs to none (the availability figures skip it).
                usize::MAX,
                Outcome::Refused {
                    status: "unavailable".into(),
                    reason: e.to_string(),
                },
            ),
        };
        let received = started.elapsed();
        history.lock().expect("history").push(Op {
            node,
            protocol: Protocol::Client,
            count,
            sent_us: u64::try_from(sent.as_micros()).unwrap_or(u64::MAX),
            received_us: u64::try_from(received.as_micros()).unwrap_or(u64::MAX),
            received_unix_ms: unix_ms(),
            outcome,
        });
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            _ = stop.changed() => {}
        }
    }
    client.close();
}

/// One request for one ID over `protocol` to `target` on a fresh connection, over `tls` (or
/// plaintext), within [`REQUEST_TIMEOUT`].
async fn one_call(target: &Target, protocol: Protocol, tls: Option<&ClientTls>) -> Outcome {
    let call = async {
        match protocol {
            Protocol::Http => http_call(&mut None, target.http, tls, 1).await,
            Protocol::Grpc => grpc_call(&mut None, target.grpc, tls, 1).await,
            Protocol::Thrift => thrift_call(&mut None, target.thrift).await,
            Protocol::Resp => resp_call(&mut None, target.resp, tls, 1).await,
            Protocol::Client => Outcome::NoAnswer("not a one-node protocol".into()),
        }
    };
    tokio::time::timeout(REQUEST_TIMEOUT, call)
        .await
        .unwrap_or_else(|_| Outcome::NoAnswer("timed out".into()))
}

/// Before the faults: one request over each protocol to `target` must get an ID, so that a
/// misconfigured client or node stops the campaign at start instead of running with no IDs.
/// In secure mode (`no_cert`: the campaign's TLS without its client certificate) also checks
/// the refusals: HTTPS, gRPC and RESP without a client certificate, and plaintext HTTP to the
/// HTTPS port, get no ID. Every answer is recorded in `history`.
pub async fn preflight(
    target: &Target,
    started: Instant,
    history: &History,
    no_cert: Option<&ClientTls>,
) -> anyhow::Result<Vec<Check>> {
    let record = |protocol, sent: Duration, outcome: &Outcome| {
        let received = started.elapsed();
        history.lock().expect("history").push(Op {
            node: target.node,
            protocol,
            count: 1,
            sent_us: u64::try_from(sent.as_micros()).unwrap_or(u64::MAX),
            received_us: u64::try_from(received.as_micros()).unwrap_or(u64::MAX),
            received_unix_ms: unix_ms(),
            outcome: outcome.clone(),
        });
    };
    let tls = target.tls.as_deref();
    for protocol in [
        Protocol::Http,
        Protocol::Grpc,
        Protocol::Thrift,
        Protocol::Resp,
    ] {
        let sent = started.elapsed();
        let outcome = one_call(target, protocol, tls).await;
        record(protocol, sent, &outcome);
        if !matches!(outcome, Outcome::Ids(_)) {
            anyhow::bail!(
                "the campaign's {protocol:?} client{} got no ID from node {}: {outcome:?}",
                if tls.is_some() && protocol != Protocol::Thrift {
                    " (TLS, client certificate)"
                } else {
                    ""
                },
                target.node + 1
            );
        }
    }
    let Some(no_cert) = no_cert else {
        return Ok(Vec::new());
    };
    let mut checks = Vec::new();
    for (protocol, tls, name) in [
        (
            Protocol::Http,
            Some(no_cert),
            "HTTPS refuses a client without a certificate",
        ),
        (
            Protocol::Grpc,
            Some(no_cert),
            "gRPC over TLS refuses a client without a certificate",
        ),
        (
            Protocol::Resp,
            Some(no_cert),
            "RESP over TLS refuses a client without a certificate",
        ),
        (
            Protocol::Http,
            None,
            "the HTTPS port refuses plaintext HTTP",
        ),
    ] {
        let sent = started.elapsed();
        let outcome = one_call(target, protocol, tls).await;
        record(protocol, sent, &outcome);
        checks.push(Check {
            name: name.to_owned(),
            passed: !matches!(outcome, Outcome::Ids(_)),
            detail: format!("{outcome:?}"),
        });
    }
    Ok(checks)
}

type HttpConn = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

/// A connection's byte stream: TCP, or TLS over TCP.
trait Io: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Io for T {}

/// A TCP connection to `addr`, over TLS with `tls` (the server verified by its IP).
async fn connect(
    addr: SocketAddr,
    tls: Option<&std::sync::Arc<rustls::ClientConfig>>,
) -> Result<Box<dyn Io>, String> {
    let tcp = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    match tls {
        Some(config) => match ClientTls::connect(config, addr, tcp).await {
            Ok(stream) => Ok(Box::new(stream)),
            Err(e) => Err(format!("tls: {e}")),
        },
        None => Ok(Box::new(tcp)),
    }
}

async fn http_call(
    conn: &mut Option<HttpConn>,
    addr: SocketAddr,
    tls: Option<&ClientTls>,
    count: u32,
) -> Outcome {
    if conn.as_ref().is_none_or(|c| c.is_closed()) {
        let io = match connect(addr, tls.map(|t| &t.http)).await {
            Ok(io) => hyper_util::rt::TokioIo::new(io),
            Err(e) => return Outcome::NoAnswer(e),
        };
        match hyper::client::conn::http1::handshake(io).await {
            Ok((send, connection)) => {
                tokio::spawn(connection);
                *conn = Some(send);
            }
            Err(e) => return Outcome::NoAnswer(format!("handshake: {e}")),
        }
    }
    let send = conn.as_mut().expect("connected");
    let path = if count == 1 {
        "/v1/id".to_owned()
    } else {
        format!("/v1/ids?count={count}")
    };
    let request = http::Request::get(path)
        .header("host", addr.to_string())
        .body(Empty::new())
        .expect("request");
    let response = match send.send_request(request).await {
        Ok(response) => response,
        Err(e) => {
            *conn = None;
            return Outcome::NoAnswer(format!("request: {e}"));
        }
    };
    let status = response.status();
    let body = match response.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(e) => {
            *conn = None;
            return Outcome::NoAnswer(format!("body: {e}"));
        }
    };
    let json: serde_json::Value = match serde_json::from_slice(&body) {
        Ok(json) => json,
        Err(e) => {
            return Outcome::Refused {
                status: status.as_u16().to_string(),
                reason: format!("(unreadable body: {e})"),
            };
        }
    };
    if !status.is_success() {
        return Outcome::Refused {
            status: status.as_u16().to_string(),
            reason: json["error"].as_str().unwrap_or("").to_owned(),
        };
    }
    let parse = |v: &serde_json::Value| v.as_str().and_then(|s| s.parse::<u64>().ok());
    let ids: Option<Vec<u64>> = if count == 1 {
        parse(&json["id"]).map(|id| vec![id])
    } else {
        json["ids"]
            .as_array()
            .and_then(|a| a.iter().map(parse).collect())
    };
    match ids {
        Some(ids) => Outcome::Ids(ids),
        None => Outcome::Refused {
            status: "200".into(),
            reason: format!("(no ids in {json})"),
        },
    }
}

async fn grpc_call(
    client: &mut Option<SnowflakeClient<tonic::transport::Channel>>,
    addr: SocketAddr,
    tls: Option<&ClientTls>,
    count: u32,
) -> Outcome {
    if client.is_none() {
        let scheme = if tls.is_some() { "https" } else { "http" };
        let endpoint = match tonic::transport::Endpoint::from_shared(format!("{scheme}://{addr}")) {
            Ok(e) => e.connect_timeout(REQUEST_TIMEOUT),
            Err(e) => return Outcome::NoAnswer(format!("endpoint: {e}")),
        };
        let endpoint = match tls.map(|t| endpoint.clone().tls_config(t.grpc())) {
            None => endpoint,
            Some(Ok(endpoint)) => endpoint,
            Some(Err(e)) => return Outcome::NoAnswer(format!("tls: {e}")),
        };
        match endpoint.connect().await {
            Ok(channel) => *client = Some(SnowflakeClient::new(channel)),
            Err(e) => return Outcome::NoAnswer(format!("connect: {e}")),
        }
    }
    let grpc = client.as_mut().expect("connected");
    let result = if count == 1 {
        grpc.next_id(NextIdRequest {})
            .await
            .map(|r| vec![u64::try_from(r.into_inner().id).unwrap_or(u64::MAX)])
    } else {
        grpc.next_ids(NextIdsRequest { count }).await.map(|r| {
            r.into_inner()
                .ids
                .into_iter()
                .map(|id| u64::try_from(id).unwrap_or(u64::MAX))
                .collect()
        })
    };
    match result {
        Ok(ids) => Outcome::Ids(ids),
        // A status tonic made from a transport error: the connection is gone.
        Err(status) if std::error::Error::source(&status).is_some() => {
            *client = None;
            Outcome::NoAnswer(format!("transport: {}", status.message()))
        }
        Err(status) => Outcome::Refused {
            status: format!("{:?}", status.code()),
            reason: status.message().to_owned(),
        },
    }
}

/// A RESP connection (TCP or TLS) and what it read beyond the last reply.
type RespConn = (Box<dyn Io>, Vec<u8>);

/// `INCR campaign` (one ID) or `INCRBY campaign N`: the N consecutive IDs ending at the reply.
async fn resp_call(
    conn: &mut Option<RespConn>,
    addr: SocketAddr,
    tls: Option<&ClientTls>,
    count: u32,
) -> Outcome {
    if conn.is_none() {
        match connect(addr, tls.map(|t| &t.plain)).await {
            Ok(io) => *conn = Some((io, Vec::new())),
            Err(e) => return Outcome::NoAnswer(e),
        }
    }
    let (tcp, buf) = conn.as_mut().expect("connected");
    let request = if count == 1 {
        "*2\r\n$4\r\nINCR\r\n$8\r\ncampaign\r\n".to_owned()
    } else {
        let n = count.to_string();
        format!(
            "*3\r\n$6\r\nINCRBY\r\n$8\r\ncampaign\r\n${}\r\n{n}\r\n",
            n.len()
        )
    };
    let answer = async {
        tcp.write_all(request.as_bytes()).await?;
        // Over TLS the request may wait in the session's buffer until flushed.
        tcp.flush().await?;
        loop {
            if let Some(end) = buf.windows(2).position(|w| w == b"\r\n") {
                let line = String::from_utf8_lossy(&buf[..end]).into_owned();
                buf.drain(..end + 2);
                return Ok(line);
            }
            if buf.len() > 64 * 1024 {
                return Err(std::io::Error::other("an overlong RESP reply"));
            }
            let mut chunk = [0u8; 512];
            let n = tcp.read(&mut chunk).await?;
            if n == 0 {
                return Err(std::io::Error::other("closed"));
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    }
    .await;
    let line = match answer {
        Ok(line) => line,
        Err(e) => {
            *conn = None;
            return Outcome::NoAnswer(format!("io: {e}"));
        }
    };
    parse_resp_reply(&line, count)
}

/// An integer reply is the last of `count` IDs; an error reply is a refusal with its reason.
fn parse_resp_reply(line: &str, count: u32) -> Outcome {
    if let Some(last) = line.strip_prefix(':').and_then(|n| n.parse::<u64>().ok()) {
        let first = last.saturating_sub(u64::from(count) - 1);
        return Outcome::Ids((first..=last).collect());
    }
    Outcome::Refused {
        status: "resp".into(),
        reason: line.strip_prefix('-').unwrap_or(line).to_owned(),
    }
}

/// The sequence id of every Thrift call (one call at a time on a connection).
const THRIFT_SEQ: i32 = 1;

/// `get_id("campaign")` in the strict binary protocol, framed.
async fn thrift_call(conn: &mut Option<TcpStream>, addr: SocketAddr) -> Outcome {
    if conn.is_none() {
        match TcpStream::connect(addr).await {
            Ok(tcp) => *conn = Some(tcp),
            Err(e) => return Outcome::NoAnswer(format!("connect: {e}")),
        }
    }
    let tcp = conn.as_mut().expect("connected");
    let mut frame = Vec::with_capacity(64);
    peer::encode_call(&mut frame, "get_id", THRIFT_SEQ, Some("campaign"));
    let answer = async {
        tcp.write_all(&frame).await?;
        let len = tcp.read_u32().await?;
        if len as usize > peer::MAX_ANSWER_BYTES {
            return Err(std::io::Error::other(format!("reply frame of {len} bytes")));
        }
        let mut reply = vec![0; len as usize];
        tcp.read_exact(&mut reply).await?;
        Ok(reply)
    }
    .await;
    let reply = match answer {
        Ok(reply) => reply,
        Err(e) => {
            *conn = None;
            return Outcome::NoAnswer(format!("io: {e}"));
        }
    };
    parse_thrift_reply(&reply)
}

/// Reads a `get_id` reply: an i64 in field 0, or an exception's message.
fn parse_thrift_reply(reply: &[u8]) -> Outcome {
    let bad = |why: &str| Outcome::Refused {
        status: "thrift".into(),
        reason: format!("(unreadable reply: {why})"),
    };
    match peer::decode_reply(reply, "get_id", THRIFT_SEQ) {
        Ok(Answer::I64(id)) => Outcome::Ids(vec![u64::try_from(id).unwrap_or(u64::MAX)]),
        Ok(Answer::Exception(message)) => Outcome::Refused {
            status: "exception".into(),
            reason: message,
        },
        Ok(Answer::Declared(field)) => bad(&format!("a declared exception in field {field}")),
        Err(why) => bad(&why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resp_replies_are_read() {
        let Outcome::Ids(ids) = parse_resp_reply(":1000", 3) else {
            panic!("not ids");
        };
        assert_eq!(ids, [998, 999, 1000]);
        let Outcome::Refused { reason, .. } = parse_resp_reply("-ERR the clock stepped", 1) else {
            panic!("not a refusal");
        };
        assert_eq!(reason, "ERR the clock stepped");
    }

    #[test]
    fn thrift_replies_are_read() {
        let mut reply = vec![0x80, 0x01, 0x00, 0x02, 0, 0, 0, 6];
        reply.extend_from_slice(b"get_id");
        reply.extend_from_slice(&1i32.to_be_bytes());
        reply.extend_from_slice(&[10, 0, 0]);
        reply.extend_from_slice(&42i64.to_be_bytes());
        reply.push(0);
        assert!(matches!(parse_thrift_reply(&reply), Outcome::Ids(ids) if ids == [42]));
        let mut exception = vec![0x80, 0x01, 0x00, 0x03, 0, 0, 0, 6];
        exception.extend_from_slice(b"get_id");
        exception.extend_from_slice(&1i32.to_be_bytes());
        exception.extend_from_slice(&[11, 0, 1, 0, 0, 0, 4]);
        exception.extend_from_slice(b"late");
        exception.push(0); // the end of the exception struct
        assert!(matches!(
            parse_thrift_reply(&exception),
            Outcome::Refused { reason, .. } if reason == "late"
        ));
        assert!(matches!(
            parse_thrift_reply(&[1, 2]),
            Outcome::Refused { .. }
        ));
    }
}

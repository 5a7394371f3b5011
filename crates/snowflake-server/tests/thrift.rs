//! The Thrift front end at the byte level: both header forms, every method, every error
//! answered with a TApplicationException on a connection that stays usable, and hostile bytes.

use crate::support::{T, TestServer, config, id_of};
use snowflake_core::ManualClock;
use std::io::ErrorKind;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const CALL: u8 = 1;
const REPLY: u8 = 2;
const EXCEPTION: u8 = 3;

/// A strict (versioned) message header.
fn strict_header(name: &str, kind: u8, seq: i32) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(0x8001_0000_u32 | u32::from(kind)).to_be_bytes());
    out.extend_from_slice(&(name.len() as i32).to_be_bytes());
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(&seq.to_be_bytes());
    out
}

/// An old unversioned header: name length, name, type byte, sequence id.
fn unversioned_header(name: &str, seq: i32) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(name.len() as i32).to_be_bytes());
    out.extend_from_slice(name.as_bytes());
    out.push(CALL);
    out.extend_from_slice(&seq.to_be_bytes());
    out
}

/// `get_id(1: string useragent)` arguments.
fn agent_args(agent: &str) -> Vec<u8> {
    let mut out = vec![11u8, 0, 1];
    out.extend_from_slice(&(agent.len() as i32).to_be_bytes());
    out.extend_from_slice(agent.as_bytes());
    out.push(0);
    out
}

fn frame(payload: &[u8]) -> Vec<u8> {
    let mut out = (payload.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(payload);
    out
}

fn call(name: &str, seq: i32, args: &[u8]) -> Vec<u8> {
    let mut payload = strict_header(name, CALL, seq);
    payload.extend_from_slice(args);
    frame(&payload)
}

/// A decoded reply: the message type, name, sequence id, and either the i64 result (field 0)
/// or the exception's message and type.
#[derive(Debug, PartialEq)]
enum Reply {
    Value {
        name: String,
        seq: i32,
        value: i64,
    },
    Exception {
        name: String,
        seq: i32,
        message: String,
        kind: i32,
    },
}

async fn read_reply(stream: &mut TcpStream) -> Reply {
    let len = tokio::time::timeout(Duration::from_secs(5), stream.read_u32())
        .await
        .expect("reply in time")
        .expect("a frame");
    let mut body = vec![0u8; len as usize];
    stream.read_exact(&mut body).await.unwrap();
    let mut at = 0usize;
    let mut take = |n: usize| {
        let bytes = body[at..at + n].to_vec();
        at += n;
        bytes
    };
    let version = u32::from_be_bytes(take(4).try_into().unwrap());
    assert_eq!(
        version & 0xFFFF_0000,
        0x8001_0000,
        "replies are always strict"
    );
    let kind = (version & 0xFF) as u8;
    let name_len = i32::from_be_bytes(take(4).try_into().unwrap()) as usize;
    let name = String::from_utf8(take(name_len)).unwrap();
    let seq = i32::from_be_bytes(take(4).try_into().unwrap());
    match kind {
        REPLY => {
            // struct { 0: i64 success }
            assert_eq!(take(3), [10, 0, 0]);
            let value = i64::from_be_bytes(take(8).try_into().unwrap());
            assert_eq!(take(1), [0]);
            Reply::Value { name, seq, value }
        }
        EXCEPTION => {
            // TApplicationException { 1: string message, 2: i32 type }
            let mut message = String::new();
            let mut error_kind = -1;
            loop {
                let field_type = take(1)[0];
                if field_type == 0 {
                    break;
                }
                let id = i16::from_be_bytes(take(2).try_into().unwrap());
                match (field_type, id) {
                    (11, 1) => {
                        let n = i32::from_be_bytes(take(4).try_into().unwrap()) as usize;
                        message = String::from_utf8(take(n)).unwrap();
                    }
                    (8, 2) => error_kind = i32::from_be_bytes(take(4).try_into().unwrap()),
                    other => panic!("unexpected field {other:?}"),
                }
            }
            Reply::Exception {
                name,
                seq,
                message,
                kind: error_kind,
            }
        }
        other => panic!("unexpected message type {other}"),
    }
}

async fn request(stream: &mut TcpStream, bytes: &[u8]) -> Reply {
    stream.write_all(bytes).await.unwrap();
    read_reply(stream).await
}

async fn server() -> (TestServer, tempfile::TempDir, std::net::SocketAddr) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.identity.datacenter_id = 3;
    config.identity.worker_id = 9;
    let server = TestServer::start(config, ManualClock::new(T)).await;
    server.wait_ready().await;
    let addr = server.thrift_addr.expect("thrift on");
    (server, dir, addr)
}

/// Whether the server closed the connection (EOF or reset) within a few seconds.
async fn closed(stream: &mut TcpStream) -> bool {
    let mut buf = [0u8; 64];
    match tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await {
        Ok(Ok(0)) => true,
        Ok(Err(e)) => matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::BrokenPipe),
        _ => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_method_over_one_connection() {
    let (server, _dir, addr) = server().await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let id = match request(&mut stream, &call("get_id", 7, &agent_args("infra-dm"))).await {
        Reply::Value { name, seq, value } => {
            assert_eq!((name.as_str(), seq), ("get_id", 7));
            value
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(((id >> 17) & 31, (id >> 12) & 31), (3, 9));
    assert_eq!((id >> 22) as u64 + 1_288_834_974_657, T);
    assert_eq!(
        request(&mut stream, &call("get_worker_id", 8, &[0])).await,
        Reply::Value {
            name: "get_worker_id".into(),
            seq: 8,
            value: 9
        }
    );
    assert_eq!(
        request(&mut stream, &call("get_datacenter_id", 9, &[0])).await,
        Reply::Value {
            name: "get_datacenter_id".into(),
            seq: 9,
            value: 3
        }
    );
    assert_eq!(
        request(&mut stream, &call("get_timestamp", 10, &[0])).await,
        Reply::Value {
            name: "get_timestamp".into(),
            seq: 10,
            value: T as i64
        }
    );
    // And the same generator as HTTP: the next HTTP ID is larger.
    assert!(id_of(&server.get("/v1/id").await) > id as u64);
    let metrics = server.get("/metrics").await.body;
    assert!(
        metrics.contains("snowflake_thrift_ids_by_agent_total{agent=\"infra-dm\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("snowflake_ids_issued_total{protocol=\"thrift\"} 1"));
    for line in [
        "snowflake_request_duration_seconds_count{protocol=\"thrift\",route=\"get_id\"} 1\n",
        "snowflake_request_duration_seconds_count{protocol=\"thrift\",route=\"get_timestamp\"} 1\n",
    ] {
        assert!(metrics.contains(line), "missing {line:?} in\n{metrics}");
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_unversioned_headers_are_read_and_answered_strictly() {
    let (server, _dir, addr) = server().await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut payload = unversioned_header("get_worker_id", 41);
    payload.push(0);
    assert_eq!(
        request(&mut stream, &frame(&payload)).await,
        Reply::Value {
            name: "get_worker_id".into(),
            seq: 41,
            value: 9
        }
    );
    let mut payload = unversioned_header("get_id", 42);
    payload.extend_from_slice(&agent_args("legacy"));
    assert!(matches!(
        request(&mut stream, &frame(&payload)).await,
        Reply::Value { seq: 42, .. }
    ));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_application_exceptions_and_the_connection_stays_usable() {
    let (server, _dir, addr) = server().await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    for (agent, shown) in [
        ("1asdf", "\"1asdf\""),
        ("", "\"\""),
        ("bad agent", "\"bad agent\""),
        ("-x", "\"-x\""),
    ] {
        match request(&mut stream, &call("get_id", 1, &agent_args(agent))).await {
            Reply::Exception { message, kind, .. } => {
                assert!(
                    message.starts_with("InvalidUserAgentError: invalid user agent")
                        && message.contains(shown),
                    "{message}"
                );
                assert_eq!(kind, 0);
            }
            other => panic!("{agent:?}: {other:?}"),
        }
    }
    // An invalid agent used no sequence: the next ID is sequence 0 of this millisecond.
    match request(&mut stream, &call("get_id", 2, &agent_args("ok-agent"))).await {
        Reply::Value { value, .. } => assert_eq!(value & 0xFFF, 0),
        other => panic!("{other:?}"),
    }
    match request(&mut stream, &call("get_ids", 3, &[0])).await {
        Reply::Exception {
            name,
            seq,
            message,
            kind,
        } => {
            assert_eq!(
                (name.as_str(), seq, message.as_str(), kind),
                ("get_ids", 3, "Invalid method name: 'get_ids'", 1)
            );
        }
        other => panic!("{other:?}"),
    }
    // Arguments that do not decode: a string field whose length runs past the frame.
    match request(
        &mut stream,
        &call("get_id", 4, &[11, 0, 1, 0, 0, 0, 50, b'x']),
    )
    .await
    {
        Reply::Exception { message, kind, .. } => {
            assert!(
                message.starts_with("cannot decode the arguments of get_id"),
                "{message}"
            );
            assert_eq!(kind, 7, "PROTOCOL_ERROR");
        }
        other => panic!("{other:?}"),
    }
    // The clock stepped back: an InvalidSystemClock message saying by how much.
    server.clock.set_ms(T - 5000);
    match request(&mut stream, &call("get_id", 5, &agent_args("infra"))).await {
        Reply::Exception { message, .. } => {
            assert!(
                message.starts_with("InvalidSystemClock: clock moved backwards")
                    && message.contains("5000 ms behind"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    server.clock.set_ms(T + 1);
    assert!(matches!(
        request(&mut stream, &call("get_id", 6, &agent_args("infra"))).await,
        Reply::Value { seq: 6, .. }
    ));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_frames_close_only_their_own_connection() {
    let (server, _dir, addr) = server().await;
    let mut good = TcpStream::connect(addr).await.unwrap();
    assert!(matches!(
        request(&mut good, &call("get_worker_id", 1, &[0])).await,
        Reply::Value { .. }
    ));
    let hostile: [&[u8]; 5] = [
        b"this is a bad request\n",    // read as a ~1.9 GB frame
        &0x7FFF_FFFFu32.to_be_bytes(), // a 2 GB frame claim
        &0xFFFF_FFFFu32.to_be_bytes(), // a negative length
        &[0, 0, 0, 0],                 // an empty frame: no message header
        &[0, 0, 0, 3, 1, 2, 3],        // a frame too short for a header
    ];
    for bytes in hostile {
        let mut bad = TcpStream::connect(addr).await.unwrap();
        bad.write_all(bytes).await.unwrap();
        assert!(
            closed(&mut bad).await,
            "{bytes:?} did not close the connection"
        );
    }
    // A frame above the limit (64 KiB by default), with its bytes actually sent.
    let mut big = TcpStream::connect(addr).await.unwrap();
    let _ = big.write_all(&frame(&vec![0u8; 70_000])).await;
    assert!(closed(&mut big).await);
    // Everyone else is still served.
    assert!(matches!(
        request(&mut good, &call("get_worker_id", 2, &[0])).await,
        Reply::Value { seq: 2, .. }
    ));
    assert!(
        server
            .get("/metrics")
            .await
            .body
            .contains("snowflake_thrift_bad_frames_total 6")
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_never_starve_new_clients() {
    let (server, _dir, addr) = server().await;
    let mut idle = Vec::new();
    for _ in 0..64 {
        idle.push(TcpStream::connect(addr).await.unwrap());
    }
    let mut fresh = TcpStream::connect(addr).await.unwrap();
    for seq in 0..2000 {
        match request(&mut fresh, &call("get_id", seq, &agent_args("fresh"))).await {
            Reply::Value { seq: got, .. } => assert_eq!(got, seq),
            other => panic!("{other:?}"),
        }
        if seq % 500 == 499 {
            server.clock.advance_ms(1);
        }
    }
    drop(idle);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_are_answered_in_order() {
    let (server, _dir, addr) = server().await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut bytes = Vec::new();
    for seq in 0..50 {
        bytes.extend_from_slice(&call("get_id", seq, &agent_args("pipe")));
    }
    stream.write_all(&bytes).await.unwrap();
    let mut last = 0;
    for seq in 0..50 {
        match read_reply(&mut stream).await {
            Reply::Value {
                seq: got, value, ..
            } => {
                assert_eq!(got, seq);
                assert!(value > last);
                last = value;
            }
            other => panic!("{other:?}"),
        }
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_for_the_clock_stay_within_the_request_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.clock.max_backwards_wait_ms = 5000;
    config.limits.request_timeout = Duration::from_millis(100);
    let server = TestServer::start(config, ManualClock::new(T)).await;
    server.wait_ready().await;
    let mut stream = TcpStream::connect(server.thrift_addr.unwrap())
        .await
        .unwrap();
    assert!(matches!(
        request(&mut stream, &call("get_id", 1, &agent_args("a"))).await,
        Reply::Value { .. }
    ));
    // 1 s behind is within --max-backwards-wait-ms, but waiting it out would exceed the
    // 100 ms request timeout: answered at once, not after a second.
    server.clock.set_ms(T - 1000);
    let started = std::time::Instant::now();
    match request(&mut stream, &call("get_id", 2, &agent_args("a"))).await {
        Reply::Exception { message, .. } => {
            assert!(
                message.starts_with("InvalidSystemClock: the clock is 1000 ms behind"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() < Duration::from_millis(900));
    // A short regression is waited out and answered with an ID.
    server.clock.set_ms(T - 20);
    let clock = server.clock.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(40));
        clock.set_ms(T + 1);
    });
    assert!(matches!(
        request(&mut stream, &call("get_id", 3, &agent_args("a"))).await,
        Reply::Value { seq: 3, .. }
    ));
    server.stop().await;
}

/// A connection remembers the counters it used (per user agent, per method and status): the
/// counts in `/metrics` are the same as when each call looked its labels up, across agents
/// taking turns on one connection and the cap on distinct agents (the rest count as `other`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_kept_per_connection_count_every_agent_and_status() {
    let (server, _dir, addr) = server().await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut seq = 0;
    for agent in ["alpha", "alpha", "beta", "alpha", "bad agent", "beta"] {
        seq += 1;
        request(&mut stream, &call("get_id", seq, &agent_args(agent))).await;
    }
    // Past the cap: the first MAX_AGENTS distinct agents get their own label.
    let mut other = TcpStream::connect(addr).await.unwrap();
    let cap = snowflake_server::metrics::MAX_AGENTS;
    for n in 0..cap {
        seq += 1;
        request(
            &mut other,
            &call("get_id", seq, &agent_args(&format!("agent{n}"))),
        )
        .await;
    }
    seq += 1;
    request(&mut stream, &call("get_id", seq, &agent_args("alpha"))).await;
    let metrics = server.get("/metrics").await.body;
    // alpha 3, beta 2, then the cap's agents; alpha's last one is counted below.
    let ids = 3 + 2 + cap;
    for line in [
        "snowflake_thrift_ids_by_agent_total{agent=\"alpha\"} 4\n".to_owned(),
        "snowflake_thrift_ids_by_agent_total{agent=\"beta\"} 2\n".to_owned(),
        // alpha and beta hold two of the labels: the last two new agents are `other`.
        "snowflake_thrift_ids_by_agent_total{agent=\"other\"} 2\n".to_owned(),
        format!(
            "snowflake_ids_issued_total{{protocol=\"thrift\"}} {}\n",
            ids + 1
        ),
        format!(
            "snowflake_requests_total{{protocol=\"thrift\",route=\"get_id\",status=\"200\"}} {}\n",
            ids + 1
        ),
        "snowflake_requests_total{protocol=\"thrift\",route=\"get_id\",status=\"400\"} 1\n"
            .to_owned(),
    ] {
        assert!(metrics.contains(&line), "missing {line:?} in\n{metrics}");
    }
    server.stop().await;
}

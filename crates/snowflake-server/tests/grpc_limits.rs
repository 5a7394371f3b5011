//! What one gRPC connection may hold, with a bare `h2` client that breaks the rules: more
//! concurrent streams than the node allows (`--grpc-max-concurrent-streams`), a flow-control
//! window that stays shut, and a request message trickled in. None keeps a call, or the
//! connection's slot, beyond its deadline.

use crate::doors::{Client, Door, grpc_call, tcp};
use crate::support::{T, TestServer, config};
use bytes::Bytes;
use snowflake_core::ManualClock;
use snowflake_server::Config;
use std::time::{Duration, Instant};

async fn start(configure: impl FnOnce(&mut Config)) -> (TestServer, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    configure(&mut config);
    let server = TestServer::start(config, ManualClock::new(T)).await;
    for _ in 0..200 {
        if server.node.readiness().is_ok() {
            return (server, dir);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("not ready after 2 s: {:?}", server.node.readiness());
}

/// An HTTP/2 connection to the gRPC door, `build` configured, driven on a task of its own
/// (which answers the server's pings).
async fn h2_client(
    server: &TestServer,
    build: impl FnOnce(&mut h2::client::Builder),
) -> (h2::client::SendRequest<Bytes>, tokio::task::JoinHandle<()>) {
    let stream = tcp(server, Door::Grpc).await;
    let mut builder = h2::client::Builder::new();
    build(&mut builder);
    let (sender, connection) = builder.handshake(stream).await.unwrap();
    let task = tokio::spawn(async move {
        let _ = connection.await;
    });
    (sender, task)
}

/// Polls a new gRPC client until one `NextId` is answered; how long that took.
async fn served_within(server: &TestServer, within: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let fresh = async {
            let stream: crate::doors::Stream = Box::new(tcp(server, Door::Grpc).await);
            Client::open(Door::Grpc, stream).await?.call().await
        };
        if tokio::time::timeout(Duration::from_secs(1), fresh)
            .await
            .is_ok_and(|served| served.is_ok())
        {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "a new client was not served within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// An HTTP/2 frame: its 9-byte header and `payload`.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap().to_be_bytes();
    let mut frame = vec![len[1], len[2], len[3], kind, flags];
    frame.extend_from_slice(&stream.to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

/// The HEADERS frame (END_HEADERS, not END_STREAM: the message is still to come) of a `NextId`
/// call on `stream`, in HPACK's plainest form: static-table entries and literals.
fn next_id_headers(stream: u32) -> Vec<u8> {
    let path = b"/snowflake.v1.Snowflake/NextId";
    let content_type = b"application/grpc";
    // :method POST, :scheme http.
    let mut block = vec![0x83, 0x86];
    // :path, a literal value of the static name 4, not indexed.
    block.push(0x04);
    block.push(u8::try_from(path.len()).unwrap());
    block.extend_from_slice(path);
    // content-type, a literal value of the static name 31 (15 + 16), not indexed.
    block.extend_from_slice(&[0x0f, 0x10, u8::try_from(content_type.len()).unwrap()]);
    block.extend_from_slice(content_type);
    frame(0x1, 0x4, stream, &block)
}

/// One connection may have 100 calls open at once (the default of
/// `--grpc-max-concurrent-streams`): a 101st gets `REFUSED_STREAM`, and the 100 go on. (At the
/// frame level: the `h2` crate, as a client, never opens more streams than the server allows
/// once it has its settings, so it cannot be the client that breaks the rule.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_over_the_cap_is_refused_and_the_others_go_on() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (server, _dir) = start(|_| {}).await;
    let mut stream = tcp(&server, Door::Grpc).await;
    stream
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .unwrap();
    stream.write_all(&frame(0x4, 0, 0, &[])).await.unwrap();
    // The node's settings, acknowledged: they apply from here on.
    let mut head = [0u8; 9];
    stream.read_exact(&mut head).await.unwrap();
    assert_eq!(head[3], 0x4, "the node's settings come first");
    let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
    let mut settings = vec![0u8; len];
    stream.read_exact(&mut settings).await.unwrap();
    // SETTINGS_MAX_CONCURRENT_STREAMS (3) is 100.
    assert!(
        settings
            .chunks(6)
            .any(|s| s[..2] == [0, 3] && s[2..] == 100u32.to_be_bytes()),
        "{settings:?}"
    );
    stream.write_all(&frame(0x4, 0x1, 0, &[])).await.unwrap();
    let calls: Vec<u8> = (0..101u32)
        .flat_map(|i| next_id_headers(2 * i + 1))
        .collect();
    stream.write_all(&calls).await.unwrap();
    // Frames until the refusal of stream 201 (RST_STREAM, REFUSED_STREAM = 7); none other
    // refused or reset.
    let refused = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let mut head = [0u8; 9];
            stream.read_exact(&mut head).await.unwrap();
            let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
            let mut payload = vec![0u8; len];
            stream.read_exact(&mut payload).await.unwrap();
            let id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]);
            match head[3] {
                0x3 => return (id, u32::from_be_bytes(payload[..4].try_into().unwrap())),
                0x7 => panic!("GOAWAY: {payload:?}"),
                _ => {}
            }
        }
    })
    .await
    .expect("the 101st stream was not refused");
    assert_eq!(refused, (201, 7), "(stream, error code) of the first reset");
    // The first hundred are open, and answered once their message comes.
    let message = frame(0x0, 0x1, 199, &[0, 0, 0, 0, 0]);
    stream.write_all(&message).await.unwrap();
    let answered = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let mut head = [0u8; 9];
            stream.read_exact(&mut head).await.unwrap();
            let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
            let mut payload = vec![0u8; len];
            stream.read_exact(&mut payload).await.unwrap();
            let id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]);
            // The answer's DATA frame on stream 199.
            if head[3] == 0x0 && id == 199 && !payload.is_empty() {
                return payload;
            }
        }
    })
    .await
    .expect("a call within the cap was not answered");
    assert_eq!(answered[0], 0, "an uncompressed gRPC message: {answered:?}");
    server.stop().await;
}

/// A client that grants no flow-control window (`SETTINGS_INITIAL_WINDOW_SIZE` 0) gets the
/// headers of its answers and never their messages: its calls (`NextId`'s fast path, and
/// `NextIds` through tonic) end within the idle timeout, and so does the connection, however
/// diligently the client answers pings, so a new client takes its only slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_grants_no_window_loses_its_slot() {
    let idle = Duration::from_millis(400);
    let (server, _dir) = start(|config| {
        config.limits.max_connections = 1;
        config.limits.idle_timeout = idle;
    })
    .await;
    server.tick();
    let (mut sender, _connection) = h2_client(&server, |builder| {
        builder.initial_window_size(0);
    })
    .await;
    let mut answers = Vec::new();
    for (method, body) in [
        ("NextId", vec![0, 0, 0, 0, 0]),
        // NextIds { count: 100 }.
        ("NextIds", vec![0, 0, 0, 0, 2, 0x08, 100]),
    ] {
        sender = sender.ready().await.unwrap();
        let (response, _send) = grpc_call(&mut sender, method, Some(body)).unwrap();
        let response = tokio::time::timeout(Duration::from_secs(5), response)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(response.status(), 200, "{method}");
        answers.push(response);
    }
    let waited = served_within(&server, idle * 4 + Duration::from_secs(5)).await;
    eprintln!("a new client was served after {waited:?}");
    drop(answers);
    server.stop().await;
}

/// A `NextId` whose message comes a while after its headers, and one whose stream ends in a
/// frame of its own after the message, are answered with an ID once it has all arrived (the
/// fast path answers on the spot only what came with the headers, and waits for the rest).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_that_comes_after_its_headers_is_answered() {
    let (server, _dir) = start(|_| {}).await;
    let (mut sender, _connection) = h2_client(&server, |_| {}).await;
    for end_apart in [false, true] {
        sender = sender.clone().ready().await.unwrap();
        let (response, mut send) = grpc_call(&mut sender, "NextId", None).unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        send.send_data(Bytes::from_static(&[0, 0, 0, 0, 0]), !end_apart)
            .unwrap();
        if end_apart {
            tokio::time::sleep(Duration::from_millis(100)).await;
            send.send_data(Bytes::new(), true).unwrap();
        }
        let response = tokio::time::timeout(Duration::from_secs(5), response)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(response.status(), 200);
        let mut body = response.into_body();
        let mut message = Vec::new();
        while let Some(chunk) = body.data().await {
            message.extend_from_slice(&chunk.unwrap());
        }
        let trailers = body.trailers().await.unwrap().expect("trailers");
        assert_eq!(trailers.get("grpc-status").unwrap(), "0", "{end_apart}");
        // One frame of a NextIdResponse whose id (field 1) is set.
        assert_eq!(message[0], 0, "{message:?}");
        assert_eq!(message[5], 0x08, "{message:?}");
        assert_eq!(usize::from(message[4]) + 5, message.len(), "{message:?}");
    }
    server.stop().await;
}

/// A call whose message trickles in a byte at a time, each byte well within the idle timeout,
/// is ended within the idle timeout of its start (not only by the longer request timeout), on
/// the fast path (`NextId`) and through tonic (`NextIds`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_trickled_in_is_cut_at_the_idle_timeout() {
    let idle = Duration::from_millis(500);
    let (server, _dir) = start(|config| {
        config.limits.idle_timeout = idle;
        config.limits.request_timeout = Duration::from_secs(30);
    })
    .await;
    let (mut sender, _connection) = h2_client(&server, |_| {}).await;
    for (method, body) in [
        ("NextId", vec![0u8, 0, 0, 0, 2, 0x08, 1]),
        ("NextIds", vec![0u8, 0, 0, 0, 2, 0x08, 100]),
    ] {
        sender = sender.clone().ready().await.unwrap();
        let (response, mut send) = grpc_call(&mut sender, method, None).unwrap();
        let started = Instant::now();
        let trickle = tokio::spawn(async move {
            // One byte every fifth of the idle timeout, never the last one.
            for byte in &body[..body.len() - 1] {
                if send
                    .send_data(Bytes::copy_from_slice(&[*byte]), false)
                    .is_err()
                {
                    return;
                }
                tokio::time::sleep(idle / 5).await;
            }
            tokio::time::sleep(Duration::from_secs(60)).await;
            drop(send);
        });
        let answer = tokio::time::timeout(idle * 4 + Duration::from_secs(3), async {
            let response = response.await.map_err(|e| e.to_string())?;
            let (parts, mut body) = response.into_parts();
            while body.data().await.is_some() {}
            let trailers = body.trailers().await.map_err(|e| e.to_string())?;
            Ok::<_, String>(
                trailers
                    .as_ref()
                    .unwrap_or(&parts.headers)
                    .get("grpc-status")
                    .map(|v| v.to_str().unwrap().to_owned()),
            )
        })
        .await
        .unwrap_or_else(|_| panic!("{method}: a trickled request still open after the deadline"));
        let took = started.elapsed();
        trickle.abort();
        // Not answered as a success: cut, with a status or a reset.
        assert_ne!(answer, Ok(Some("0".to_owned())), "{method}");
        assert!(
            took >= idle - Duration::from_millis(50),
            "{method}: cut after {took:?}"
        );
        eprintln!("{method}: cut after {took:?}: {answer:?}");
    }
    server.stop().await;
}

/// Shutdown reaches a connection that never goes quiet: a client writing `NextId` calls as fast
/// as it can (always up to 100 open, a new batch as soon as half are answered) and reading
/// every answer gets its GOAWAY once the node is told to stop, and the node stops gracefully,
/// well within the shutdown timeout. (The connection's loop selects between the shutdown and
/// the connection without a fixed order; the test guards the behaviour, whatever the order: it
/// passes too with the shutdown polled last in a biased `select!`, since tokio's coop budget
/// makes the connection pending regularly.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_reaches_a_connection_that_never_goes_quiet() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (server, _dir) = start(|_| {}).await;
    // More than one millisecond's 4096 IDs are asked for.
    server.tick();
    let stream = tcp(&server, Door::Grpc).await;
    stream.set_nodelay(true).unwrap();
    let (mut reader, mut writer) = stream.into_split();
    writer
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .unwrap();
    writer.write_all(&frame(0x4, 0, 0, &[])).await.unwrap();
    // Every frame read as it comes, until the connection ends: the answers (counted), the
    // node's settings (acknowledged by the writer) and the GOAWAY.
    let answers = Arc::new(AtomicU64::new(0));
    let settings_seen = Arc::new(AtomicBool::new(false));
    let goaway = Arc::new(AtomicBool::new(false));
    let ping = Arc::new(std::sync::Mutex::new(None::<Vec<u8>>));
    let read = tokio::spawn({
        let (answers, settings_seen, goaway, ping) = (
            Arc::clone(&answers),
            Arc::clone(&settings_seen),
            Arc::clone(&goaway),
            Arc::clone(&ping),
        );
        async move {
            loop {
                let mut head = [0u8; 9];
                if reader.read_exact(&mut head).await.is_err() {
                    return;
                }
                let len =
                    usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
                let mut payload = vec![0u8; len];
                if reader.read_exact(&mut payload).await.is_err() {
                    return;
                }
                match (head[3], head[4]) {
                    (0x7, _) => goaway.store(true, Ordering::Release),
                    // A PING to acknowledge (h2's graceful shutdown waits for one).
                    (0x6, 0) => *ping.lock().unwrap() = Some(payload),
                    (0x4, 0) => settings_seen.store(true, Ordering::Release),
                    // HEADERS with END_STREAM: a call's trailers.
                    (0x1, flags) if flags & 0x1 != 0 => {
                        answers.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {}
                }
            }
        }
    });
    while !settings_seen.load(Ordering::Acquire) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    writer.write_all(&frame(0x4, 0x1, 0, &[])).await.unwrap();
    // The whole connection window granted at once, so that the answers' DATA never waits for
    // the client (each stream's own window is far more than its one answer).
    let grant = (i32::MAX as u32 - 65_535).to_be_bytes();
    writer.write_all(&frame(0x8, 0, 0, &grant)).await.unwrap();
    // Calls, 50 to a write, for as long as the connection takes them: a batch is written as soon
    // as at most 50 calls are left unanswered (so never over the 100 a connection may have open:
    // the ones over would be refused), without waiting for the connection to go quiet.
    let write = tokio::spawn({
        let answers = Arc::clone(&answers);
        async move {
            let mut id = 1u32;
            let mut sent = 0u64;
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(20) {
                let pong = ping.lock().unwrap().take();
                if let Some(payload) = pong
                    && writer
                        .write_all(&frame(0x6, 0x1, 0, &payload))
                        .await
                        .is_err()
                {
                    return;
                }
                if sent - answers.load(Ordering::Relaxed) > 50 {
                    tokio::task::yield_now().await;
                    continue;
                }
                let mut calls = Vec::new();
                for _ in 0..50 {
                    calls.extend(next_id_headers(id));
                    calls.extend(frame(0x0, 0x1, id, &[0, 0, 0, 0, 0]));
                    id += 2;
                }
                if writer.write_all(&calls).await.is_err() {
                    return;
                }
                sent += 50;
            }
        }
    });
    // Flooding, and answered.
    let flooding = Instant::now();
    while answers.load(Ordering::Relaxed) < 2_000 {
        assert!(
            flooding.elapsed() < Duration::from_secs(10),
            "only {} answers in 10 s",
            answers.load(Ordering::Relaxed)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let stopping = tokio::spawn(server.stop());
    let asked = Instant::now();
    while !goaway.load(Ordering::Acquire) {
        assert!(
            asked.elapsed() < Duration::from_secs(5),
            "no GOAWAY within 5 s of the stop, under a client that never goes quiet"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Well within the shutdown timeout (10 s), after which connections are cut: the goodbye
    // itself went through.
    tokio::time::timeout(Duration::from_secs(5), stopping)
        .await
        .expect("the node did not stop within 5 s of the GOAWAY")
        .unwrap();
    write.abort();
    read.abort();
}

//! The listener every front door shares (`listen`), one table per behaviour, each row a door
//! (HTTP, admin, gRPC, Thrift, RESP; plain, and over TLS where the door has it): the connection
//! cap and the door's answer over it, the idle timeout, the progress deadline of a client that
//! reads nothing, the TLS handshake's refusals and time limit, and the drain on shutdown.
//! (Accept-error backoff needs a process out of file descriptors: the CLI suite tests it on the
//! real binary.)

use crate::doors::{
    Certs, Client, Door, Stream, TlsClient, closed_after, closed_within, connect, grpc_call,
    http_get, read_some, tcp, thrift_call,
};
use crate::support::{T, TestServer, config};
use snowflake_core::ManualClock;
use snowflake_server::Config;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;

/// A node with every door on, `configure`d, ready.
async fn start(configure: impl FnOnce(&mut Config)) -> (TestServer, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    configure(&mut config);
    let server = TestServer::start(config, ManualClock::new(T)).await;
    // (Not over HTTP: it may be TLS, or the door under test.)
    for _ in 0..200 {
        if server.node.readiness().is_ok() {
            return (server, dir);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("not ready after 2 s: {:?}", server.node.readiness());
}

/// `snowflake_connections_rejected_total`, from the node's metrics page.
fn rejected(server: &TestServer) -> u64 {
    let text = server.node.metrics().encode();
    text.lines()
        .find_map(|line| line.strip_prefix("snowflake_connections_rejected_total "))
        .unwrap_or_else(|| panic!("no rejection counter in\n{text}"))
        .parse()
        .unwrap()
}

/// Over the cap, each door answers its own way (HTTP a 503 with `Retry-After`, RESP Redis's
/// error, gRPC and Thrift a closed connection, at once), over TLS too; the rejection is
/// counted; the connection holding the slot is still served, and once it leaves a new one is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_the_cap_each_door_answers_its_way_and_keeps_serving() {
    let certs = Certs::new();
    let tls = certs.anonymous();
    let rows = Door::ALL
        .into_iter()
        .map(|door| (door, false))
        .chain(Door::TLS.into_iter().map(|door| (door, true)));
    for (door, with_tls) in rows {
        let row = format!("{door:?}{}", if with_tls { " over TLS" } else { "" });
        let (server, _dir) = start(|config| {
            config.limits.max_connections = 1;
            config.listeners.tls = with_tls.then(|| certs.server_files(false));
        })
        .await;
        let tls = with_tls.then_some(&tls);
        let mut holder = Client::served_over(&server, door, tls).await;

        let over = connect(&server, door, tls).await;
        let started = Instant::now();
        match door {
            Door::Http | Door::Admin => {
                let Client::Http(mut sender, _) = Client::open(door, over.unwrap()).await.unwrap()
                else {
                    unreachable!()
                };
                let (status, headers, body) = http_get(&mut sender, "/v1/id").await.unwrap();
                assert_eq!(status, 503, "{row}: {body}");
                assert!(body.contains("too many connections"), "{row}: {body}");
                assert_eq!(headers["retry-after"], "1", "{row}");
            }
            Door::Grpc => {
                // Closed at once: the TLS handshake, the HTTP/2 preface or the call fails.
                let refused = match over {
                    Err(_) => true,
                    Ok(stream) => match Client::open(door, stream).await {
                        Err(_) => true,
                        Ok(mut client) => client.call().await.is_err(),
                    },
                };
                assert!(refused, "{row}: a second connection was served");
            }
            Door::Thrift => {
                let mut stream = over.unwrap();
                let _ = stream.write_all(&thrift_call("get_worker_id", 1)).await;
                assert!(
                    closed_within(&mut stream, Duration::from_secs(2)).await,
                    "{row}: not closed at once"
                );
            }
            Door::Resp => {
                let mut stream = over.unwrap();
                let refused = read_some(&mut stream, 64, Duration::from_secs(2)).await;
                assert!(
                    refused.starts_with(b"-ERR max number of clients reached"),
                    "{row}: {:?}",
                    String::from_utf8_lossy(&refused)
                );
                assert!(closed_within(&mut stream, Duration::from_secs(2)).await);
            }
        }
        // At once, not after the idle timeout (60 s).
        assert!(started.elapsed() < Duration::from_secs(5), "{row}");
        assert!(rejected(&server) >= 1, "{row}");
        // The connection holding the slot is still served; once it leaves, a new one is.
        holder.call().await.unwrap_or_else(|e| panic!("{row}: {e}"));
        drop(holder);
        Client::served_over(&server, door, tls).await;
        server.stop().await;
    }
}

/// When the silence starts.
#[derive(Debug, Clone, Copy)]
enum Silence {
    /// The client connects and never sends a byte.
    FromTheStart,
    /// The client is served once (keep-alive), then sends nothing more while answering what the
    /// protocol asks of it (gRPC's pings).
    AfterARequest,
}

/// A connection that sends nothing is closed after the idle timeout (not before), and its slot
/// serves the next client: from the start (HTTP's header-read timeout, gRPC's HTTP/2 preface
/// deadline, Thrift's and RESP's idle deadlines) and between requests (keep-alive).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_is_closed_after_the_idle_timeout_and_frees_its_slot() {
    let idle = Duration::from_millis(400);
    for silence in [Silence::FromTheStart, Silence::AfterARequest] {
        for door in Door::ALL {
            let row = format!("{door:?}, silent {silence:?}");
            let (server, _dir) = start(|config| {
                config.limits.max_connections = 1;
                config.limits.idle_timeout = idle;
            })
            .await;
            let (closed, waited) = match silence {
                Silence::FromTheStart => {
                    let started = Instant::now();
                    let mut silent = tcp(&server, door).await;
                    let sent = closed_after(&mut silent, Duration::from_secs(5)).await;
                    // Closed without an answer (gRPC's server speaks first: its settings).
                    if let Some(sent) = &sent
                        && door != Door::Grpc
                    {
                        assert!(sent.is_empty(), "{row}: answered {sent:?}");
                    }
                    (sent.is_some(), started.elapsed())
                }
                Silence::AfterARequest => {
                    let client = Client::served(&server, door).await;
                    let started = Instant::now();
                    let closed = client.closed_within(Duration::from_secs(5)).await;
                    (closed, started.elapsed())
                }
            };
            assert!(closed, "{row}: still open after 5 s");
            // Not before the idle timeout (less the time the request took to end, after one).
            let least = match silence {
                Silence::FromTheStart => idle,
                Silence::AfterARequest => idle - Duration::from_millis(100),
            };
            assert!(waited >= least, "{row}: closed after {waited:?}");
            // And its slot is free again.
            Client::served(&server, door).await;
            server.stop().await;
        }
    }
}

/// The idle deadline moves with every request: a client that keeps asking for many idle
/// timeouts keeps its connection, on every door.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_connection_outlives_many_idle_timeouts() {
    let (server, _dir) =
        start(|config| config.limits.idle_timeout = Duration::from_millis(300)).await;
    for door in Door::ALL {
        let mut busy = Client::served(&server, door).await;
        let started = Instant::now();
        let mut calls = 0;
        while calls < 10 || started.elapsed() < Duration::from_millis(1_500) {
            busy.call().await.unwrap_or_else(|e| {
                panic!("{door:?}: call {calls} after {:?}: {e}", started.elapsed())
            });
            calls += 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    server.stop().await;
}

/// A client that asks and never reads the answers fills the socket buffers (or, over HTTP/2,
/// its stream's window), and the answer then waits on it: bounded by the idle timeout, so with
/// one connection slot a new client is served soon after, not never, and the greedy connection
/// (or its stream) is cut: the door's own deadline (gRPC's stream window, Thrift's and RESP's
/// writes), or the listener's write deadline under every door (HTTP, whose hyper has none).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_its_replies_loses_its_slot() {
    for door in [Door::Http, Door::Grpc, Door::Thrift, Door::Resp] {
        let (server, _dir) = start(|config| {
            config.limits.max_connections = 1;
            config.limits.idle_timeout =
                Duration::from_millis(if door == Door::Grpc { 400 } else { 500 });
        })
        .await;
        // A clock that moves, for the gRPC stream of many milliseconds' worth of IDs.
        server.tick();
        let greedy: Box<dyn FnOnce() -> tokio::task::JoinHandle<bool> + Send> = match door {
            Door::Grpc => {
                let Client::Grpc(mut sender, _connection, _) = Client::served(&server, door).await
                else {
                    unreachable!()
                };
                // StreamIds { count: 100_000_000 }, in chunks of 4096; never read.
                let body = vec![0, 0, 0, 0, 5, 0x08, 0x80, 0xc2, 0xd7, 0x2f];
                let (response, _send) = grpc_call(&mut sender, "StreamIds", Some(body)).unwrap();
                let response = response.await.unwrap();
                assert_eq!(response.status(), 200);
                let mut stream = response.into_body();
                // Reading again (once the cut is due) finds the stream cut short.
                Box::new(move || {
                    tokio::spawn(async move {
                        for _ in 0..10_000 {
                            match stream.data().await {
                                Some(Ok(chunk)) => {
                                    let _ = stream.flow_control().release_capacity(chunk.len());
                                }
                                Some(Err(_)) | None => {
                                    return !matches!(stream.trailers().await, Ok(Some(t)) if t["grpc-status"] == "0");
                                }
                            }
                        }
                        false
                    })
                })
            }
            Door::Http | Door::Thrift | Door::Resp => {
                let stream = tcp(&server, door).await;
                let (_never_read, mut writer) = stream.into_split();
                // Each answer is as large as its request (an unknown Thrift method's name is
                // echoed in the exception; RESP's ECHO), or far larger (HTTP's largest batch):
                // the buffers fill in a moment.
                let word = "x".repeat(16 * 1024);
                let calls = match door {
                    Door::Http => {
                        b"GET /v1/ids?count=100000 HTTP/1.1\r\nHost: x\r\n\r\n".repeat(64)
                    }
                    Door::Thrift => thrift_call(&word, 1).repeat(64),
                    _ => format!("*2\r\n$4\r\nECHO\r\n${}\r\n{word}\r\n", word.len())
                        .repeat(16)
                        .into_bytes(),
                };
                let pusher = tokio::spawn(async move {
                    while writer.write_all(&calls).await.is_ok() {}
                    drop(_never_read);
                    true
                });
                // Its writes fail once the connection is cut.
                Box::new(move || pusher)
            }
            _ => unreachable!(),
        };

        let started = Instant::now();
        loop {
            let fresh = async {
                let stream: Stream = Box::new(tcp(&server, door).await);
                Client::open(door, stream).await?.call().await
            };
            if tokio::time::timeout(Duration::from_secs(1), fresh)
                .await
                .is_ok_and(|served| served.is_ok())
            {
                break;
            }
            // (HTTP: the kernel grows the socket buffers to megabytes as they fill.)
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{door:?}: a client that never reads held the only connection slot for 30 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let cut = tokio::time::timeout(Duration::from_secs(5), greedy())
            .await
            .unwrap_or_else(|_| panic!("{door:?}: the greedy connection was not cut"))
            .unwrap();
        assert!(cut, "{door:?}: the unread stream went on");
        server.stop().await;
    }
}

/// A request trickled in a byte at a time, each byte well within the idle timeout, is cut at
/// the idle timeout counted from its first byte (not from its last), and its slot serves the
/// next client: HTTP's headers (hyper's header-read timeout), a Thrift frame, a RESP command.
/// (gRPC's message: `grpc_limits`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_trickled_in_is_cut_at_the_idle_timeout_from_its_first_byte() {
    let idle = Duration::from_millis(500);
    for door in [Door::Http, Door::Admin, Door::Thrift, Door::Resp] {
        let (server, _dir) = start(|config| {
            config.limits.max_connections = 1;
            config.limits.idle_timeout = idle;
        })
        .await;
        let request = match door {
            Door::Http | Door::Admin => b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
            Door::Thrift => thrift_call("get_worker_id", 1),
            _ => b"*2\r\n$4\r\nECHO\r\n$5\r\nhello\r\n".to_vec(),
        };
        let (mut reader, mut writer) = tcp(&server, door).await.into_split();
        let started = Instant::now();
        let trickle = tokio::spawn(async move {
            // A byte every fifth of the idle timeout, never the last one.
            for byte in &request[..request.len() - 1] {
                if writer.write_all(&[*byte]).await.is_err() {
                    return;
                }
                tokio::time::sleep(idle / 5).await;
            }
            tokio::time::sleep(Duration::from_secs(60)).await;
        });
        let closed = closed_within(&mut reader, idle * 4).await;
        let took = started.elapsed();
        trickle.abort();
        assert!(
            closed,
            "{door:?}: a trickled request still open after {took:?}"
        );
        assert!(
            took >= idle - Duration::from_millis(50),
            "{door:?}: cut after {took:?}"
        );
        Client::served(&server, door).await;
        server.stop().await;
    }
}

/// A request the node holds up (a batch with the clock standing still, a call whose message
/// never comes, a clock behind the last ID), sent before the shutdown, and what answers it.
async fn stall(server: &TestServer, door: Door) -> Option<tokio::task::JoinHandle<String>> {
    let stalled: tokio::task::JoinHandle<String> = match door {
        Door::Admin => return None,
        Door::Http => {
            let Client::Http(mut sender, _task) = Client::served(server, door).await else {
                unreachable!()
            };
            tokio::spawn(async move {
                match http_get(&mut sender, "/v1/ids?count=100000").await {
                    Ok((status, _, body)) => format!("{status} {body}"),
                    Err(err) => err,
                }
            })
        }
        Door::Grpc => {
            let Client::Grpc(mut sender, _task, mut ping) = Client::served(server, door).await
            else {
                unreachable!()
            };
            let (response, body_never_sent) = grpc_call(&mut sender, "NextId", None).unwrap();
            // The server answers a PING after the frames before it: once the pong is in, it
            // has the call's headers.
            ping.ping(h2::Ping::opaque()).await.unwrap();
            tokio::spawn(async move {
                let answer = match response.await {
                    Ok(response) => format!("grpc-status {:?}", response.headers()["grpc-status"]),
                    Err(err) => err.to_string(),
                };
                drop((body_never_sent, sender));
                answer
            })
        }
        Door::Thrift | Door::Resp => {
            // Thrift: the clock 1 s behind the last ID, waited out for as long as the request
            // timeout allows; RESP: a large batch while the clock stands still.
            let mut stream = tcp(server, door).await;
            let request = match door {
                Door::Thrift => {
                    server
                        .node
                        .issue(snowflake_server::Protocol::Thrift, 1)
                        .await
                        .unwrap();
                    server.clock.set_ms(T - 1000);
                    let mut call = thrift_call("get_id", 1);
                    // The useragent argument: field 1, a string.
                    call.pop();
                    call.extend_from_slice(&[11, 0, 1, 0, 0, 0, 1, b'a', 0]);
                    let len = u32::try_from(call.len() - 4).unwrap();
                    call[..4].copy_from_slice(&len.to_be_bytes());
                    call
                }
                _ => b"SNOWFLAKE.NEXT 100000\r\n".to_vec(),
            };
            stream.write_all(&request).await.unwrap();
            tokio::spawn(async move {
                let answer = read_some(&mut stream, 4096, Duration::from_secs(60)).await;
                String::from_utf8_lossy(&answer).into_owned()
            })
        }
    };
    // Until the node has the request.
    tokio::time::sleep(Duration::from_millis(300)).await;
    Some(stalled)
}

/// On shutdown every door stops accepting (new connections are refused), closes its idle
/// kept-alive connections at once, and answers the request it holds before the drain ends
/// (well within the shutdown timeout, here once the request timeout cuts the request).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_door_refuses_new_connections_closes_idle_ones_and_answers_what_it_holds() {
    for door in Door::ALL {
        let (server, _dir) = start(|config| {
            config.limits.request_timeout = Duration::from_millis(1500);
            config.clock.max_backwards_wait_ms = 5000;
        })
        .await;
        let addr = door.addr(&server);
        let idle = Client::served(&server, door).await;
        let stalled = stall(&server, door).await;

        let stopping = tokio::spawn(server.stop());
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            tokio::net::TcpStream::connect(addr).await.is_err(),
            "{door:?}: the listener still accepts while draining"
        );
        assert!(
            idle.closed_within(Duration::from_secs(1)).await,
            "{door:?}: an idle connection was left open while draining"
        );
        if let Some(stalled) = stalled {
            assert!(
                !stopping.is_finished(),
                "{door:?}: the stalled request is in flight"
            );
            let answer = tokio::time::timeout(Duration::from_secs(5), stalled)
                .await
                .unwrap_or_else(|_| panic!("{door:?}: not answered within the request timeout"))
                .unwrap();
            let expected = match door {
                Door::Http => "503 {\"error\":\"request timed out",
                // CANCELLED, as tonic's timeout.
                Door::Grpc => "grpc-status \"1\"",
                Door::Resp => "-ERR request timed out",
                _ => "InvalidSystemClock",
            };
            assert!(answer.contains(expected), "{door:?}: {answer:?}");
        }
        // The drain ended with the last answer, well before the 10 s shutdown timeout.
        tokio::time::timeout(Duration::from_secs(5), stopping)
            .await
            .unwrap_or_else(|_| panic!("{door:?}: the drain did not end"))
            .unwrap();
    }
}

/// What is still busy when the shutdown timeout passes is cut: the drain does not wait for a
/// request the node would hold for longer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shutdown_timeout_cuts_what_is_still_busy() {
    for door in [Door::Http, Door::Grpc, Door::Thrift, Door::Resp] {
        let (server, _dir) = start(|config| {
            config.limits.request_timeout = Duration::from_secs(30);
            config.clock.max_backwards_wait_ms = 5000;
            config.limits.shutdown_timeout = Duration::from_millis(800);
        })
        .await;
        let stalled = stall(&server, door).await.unwrap();
        let started = Instant::now();
        tokio::time::timeout(Duration::from_secs(10), server.stop())
            .await
            .unwrap_or_else(|_| panic!("{door:?}: the drain waited for the request"));
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(700),
            "{door:?}: drained after {took:?}"
        );
        // The stalled request got no answer: its connection was closed.
        let answer = tokio::time::timeout(Duration::from_secs(5), stalled)
            .await
            .unwrap_or_else(|_| panic!("{door:?}: the connection was left open"))
            .unwrap();
        assert!(
            !answer.contains("timed out") && !answer.contains("InvalidSystemClock"),
            "{door:?}: {answer:?}"
        );
    }
}

/// Every TLS door refuses plaintext; with mutual TLS also a client without a certificate and
/// one with a certificate of another CA; and stays unharmed for its own clients.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_doors_refuse_plaintext_and_strangers() {
    let certs = Certs::new();
    for mutual in [false, true] {
        let (server, _dir) =
            start(|config| config.listeners.tls = Some(certs.server_files(mutual))).await;
        let (good, refused) = if mutual {
            let refused: Vec<(&str, Option<TlsClient>)> = vec![
                ("no client certificate", Some(certs.anonymous())),
                ("a certificate of another CA", Some(certs.stranger())),
                ("plaintext", None),
            ];
            (certs.member(), refused)
        } else {
            (certs.anonymous(), vec![("plaintext", None)])
        };
        for door in Door::TLS {
            let row = format!("{door:?}{}", if mutual { ", mutual TLS" } else { "" });
            Client::served_over(&server, door, Some(&good)).await;
            for (what, tls) in &refused {
                let served = async {
                    let stream = connect(&server, door, tls.as_ref())
                        .await
                        .map_err(|e| e.to_string())?;
                    Client::open(door, stream).await?.call().await
                };
                let served = tokio::time::timeout(Duration::from_secs(10), served).await;
                assert!(!matches!(served, Ok(Ok(()))), "{row}: served {what}");
            }
            // Unharmed by the refusals.
            Client::served_over(&server, door, Some(&good)).await;
        }
        server.stop().await;
    }
}

/// A client that connects to a TLS door and never starts the handshake is closed within the
/// handshake timeout (the idle timeout, at most 10 s), not before, and frees its slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_handshake_that_does_not_come_is_cut_and_frees_its_slot() {
    let certs = Certs::new();
    let idle = Duration::from_millis(400);
    for door in Door::TLS {
        let (server, _dir) = start(|config| {
            config.listeners.tls = Some(certs.server_files(false));
            config.limits.max_connections = 1;
            config.limits.idle_timeout = idle;
        })
        .await;
        let started = Instant::now();
        let mut silent = tcp(&server, door).await;
        assert!(
            closed_within(&mut silent, Duration::from_secs(5)).await,
            "{door:?}: a silent TLS client kept its connection"
        );
        let waited = started.elapsed();
        assert!(waited >= idle, "{door:?}: closed after {waited:?}");
        Client::served_over(&server, door, Some(&certs.anonymous())).await;
        server.stop().await;
    }
}

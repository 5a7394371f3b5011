//! Memory under hostile clients, on the real binary (issue #28, "Memory" and "Bulk fairness"):
//! large replies are written in pieces and give their buffers back, the node-wide budget for bulk
//! replies bounds what slow readers hold, large batches queue node-wide instead of all timing out,
//! and with the Kubernetes manifests' settings every door at its cap of hostile connections stays
//! within the memory the manifests allow (RSS from `/proc/<pid>/status`).

use crate::support::{Serve, ServeProcess, temp_dir};
use snowflake_proto::v1::NextIdsRequest;
use snowflake_proto::v1::snowflake_client::SnowflakeClient;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// The largest batch under the default layout.
const LARGEST: u64 = 100_000;

/// The node's resident memory, in MiB.
fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("a Linux /proc");
    let kib: f64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .expect("VmRSS in /proc/<pid>/status");
    kib / 1024.0
}

/// The resident memory once it stops growing (two readings 300 ms apart within 0.25 MiB, at
/// most 8 s): the largest reading.
fn settled_rss(pid: u32) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(8);
    let mut last = rss_mib(pid);
    let mut most = last;
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let now = rss_mib(pid);
        most = most.max(now);
        if (now - last).abs() < 0.25 || Instant::now() > deadline {
            return most;
        }
        last = now;
    }
}

/// The sum of the series of `name` (with `labels` in them, if any), from the HTTP listener.
fn metric(node: &ServeProcess, name: &str, labels: &str) -> f64 {
    node.get("/metrics")
        .body
        .lines()
        .filter(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with([' ', '{']))
                && line.contains(labels)
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A client that sends `payload` and then does not read (a small receive buffer, so that the
/// kernel takes little of a reply off the node's hands).
fn hostile(addr: SocketAddr, payload: &[u8]) -> TcpStream {
    let mut stream = TcpStream::connect(addr).expect("connect");
    rustix::net::sockopt::set_socket_recv_buffer_size(&stream, 4096).expect("SO_RCVBUF");
    stream.write_all(payload).expect("send");
    stream
}

/// A client that sends `payload` (and reads at its own pace, later).
fn client(addr: SocketAddr, payload: &[u8]) -> TcpStream {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.write_all(payload).expect("send");
    stream
}

/// Reads a RESP array reply of integers to its end: how many it had, or the error line of a
/// large batch refused because too many were in progress.
fn read_resp_integers(stream: &mut TcpStream) -> Result<usize, String> {
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut lines = 0usize;
    let mut expected = None;
    let mut header = Vec::new();
    let mut buf = vec![0; 64 * 1024];
    loop {
        let n = stream.read(&mut buf).expect("the reply");
        assert!(n > 0, "closed after {lines} lines");
        for &b in &buf[..n] {
            if expected.is_none() {
                header.push(b);
            }
            if b == b'\n' {
                lines += 1;
                if expected.is_none() {
                    let text = String::from_utf8_lossy(&header);
                    if text.starts_with("-ERR too many large batches in progress") {
                        return Err(text.into_owned());
                    }
                    let count = text.trim().trim_start_matches('*').parse::<usize>();
                    expected = Some(count.unwrap_or_else(|_| panic!("not an array: {text:?}")));
                }
            }
        }
        if expected.is_some_and(|count| lines > count) {
            return Ok(lines - 1);
        }
    }
}

#[test]
fn resp_largest_batches_are_written_in_pieces_and_their_buffers_given_back() {
    let dir = temp_dir();
    let node = Serve::new(dir.path())
        .args(["--resp-addr", "127.0.0.1:0", "--worker-id", "1"])
        .env("SNOWFLAKE_THRIFT_ADDR", "off")
        .start();
    let resp = node.logged_addr("resp listening");
    let before = settled_rss(node.pid());
    // 40 clients ask for the largest batch (a 2.2 MB reply each) and do not read yet.
    let command = format!("SNOWFLAKE.NEXT {LARGEST}\r\n");
    let mut clients: Vec<TcpStream> = (0..40).map(|_| client(resp, command.as_bytes())).collect();
    let unread = settled_rss(node.pid()) - before;
    // Then they read their replies, and stay connected. Those refused at once (more large
    // batches than the node takes at a time) ask again, one at a time, so that every connection
    // has had its 2.2 MB reply.
    let mut refused = 0;
    for client in &mut clients {
        if let Err(line) = read_resp_integers(client) {
            refused += 1;
            assert!(line.contains("try again"), "{line}");
            client.write_all(command.as_bytes()).unwrap();
            assert_eq!(read_resp_integers(client), Ok(LARGEST as usize));
        }
    }
    assert!(refused < 40, "all 40 refused");
    let read = settled_rss(node.pid()) - before;
    eprintln!(
        "40 RESP slow readers of {LARGEST} IDs: +{unread:.1} MiB; read and kept open: +{read:.1} MiB"
    );
    // Whole replies were 40 x 2.2 MB (kept for the connections' life: about 90 MB); in pieces
    // and within the budget for bulk replies, a few MiB.
    assert!(unread <= 16.0, "+{unread:.1} MiB while unread");
    assert!(read <= 16.0, "+{read:.1} MiB once read");
}

#[test]
fn grpc_300_concurrent_largest_batches_finish_or_are_refused_before_any_id() {
    let dir = temp_dir();
    let node = Serve::new(dir.path())
        .args(["--worker-id", "2"])
        .env("SNOWFLAKE_THRIFT_ADDR", "off")
        .start();
    let grpc = node.logged_addr("grpc listening");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let codes: Vec<Result<usize, tonic::Code>> = runtime.block_on(async {
        let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{grpc}")).unwrap();
        let mut calls = tokio::task::JoinSet::new();
        // 300 clients, a connection each.
        for _ in 0..300 {
            let channel = endpoint.connect().await.expect("connect");
            let mut client =
                SnowflakeClient::new(channel).max_decoding_message_size(8 * 1024 * 1024);
            calls.spawn(async move {
                client
                    .next_ids(NextIdsRequest {
                        count: LARGEST as u32,
                    })
                    .await
                    .map(|response| response.into_inner().ids.len())
                    .map_err(|status| status.code())
            });
        }
        calls.join_all().await
    });
    let ok: Vec<usize> = codes
        .iter()
        .filter_map(|r| r.as_ref().ok().copied())
        .collect();
    let refused = codes
        .iter()
        .filter(|r| **r == Err(tonic::Code::ResourceExhausted))
        .count();
    let other: Vec<_> = codes
        .iter()
        .filter(|r| matches!(r, Err(code) if *code != tonic::Code::ResourceExhausted))
        .collect();
    eprintln!(
        "300 concurrent NextIds({LARGEST}): {} OK, {refused} RESOURCE_EXHAUSTED",
        ok.len()
    );
    // Every call accepted finishes; the others are refused at once; none runs out of time
    // half-done (it was 298 of 300 CANCELLED, 19.2 M IDs issued and thrown away).
    assert!(
        other.is_empty(),
        "neither OK nor RESOURCE_EXHAUSTED: {other:?}\n{}",
        node.stderr()
    );
    assert!(ok.len() >= 8, "only {} finished", ok.len());
    assert!(ok.iter().all(|&n| n == LARGEST as usize));
    assert_eq!(ok.len() + refused, 300);
    // No ID was issued for a refused call.
    let issued = metric(&node, "snowflake_ids_issued_total", "protocol=\"grpc\"");
    assert_eq!(issued as usize, ok.len() * LARGEST as usize);
    assert_eq!(
        metric(&node, "snowflake_bulk_refused_total", "") as usize,
        refused
    );
    assert_eq!(metric(&node, "snowflake_bulk_waiting", ""), 0.0);
}

/// The bytes of an HTTP/2 client that opens a `NextIds(count)` call and then grants the server
/// no flow-control window at all (initial window 0): the reply can never be sent.
fn stalled_next_ids(count: u32) -> Vec<u8> {
    fn frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
        out.extend_from_slice(&u32::try_from(payload.len()).unwrap().to_be_bytes()[1..]);
        out.extend_from_slice(&[kind, flags]);
        out.extend_from_slice(&stream.to_be_bytes());
        out.extend_from_slice(payload);
    }
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    // SETTINGS: INITIAL_WINDOW_SIZE = 0.
    frame(&mut out, 0x4, 0, 0, &[0, 4, 0, 0, 0, 0]);
    // HEADERS (END_HEADERS), each a literal without indexing, new name, no Huffman.
    let mut block = Vec::new();
    for (name, value) in [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", "/snowflake.v1.Snowflake/NextIds"),
        (":authority", "localhost"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ] {
        block.push(0);
        block.push(u8::try_from(name.len()).unwrap());
        block.extend_from_slice(name.as_bytes());
        block.push(u8::try_from(value.len()).unwrap());
        block.extend_from_slice(value.as_bytes());
    }
    frame(&mut out, 0x1, 0x4, 1, &block);
    // DATA (END_STREAM): one gRPC message, NextIdsRequest { count } (field 1, a varint).
    let mut message = vec![0x08];
    let mut n = count;
    while n >= 0x80 {
        message.push(u8::try_from(n & 0x7f).unwrap() | 0x80);
        n >>= 7;
    }
    message.push(u8::try_from(n).unwrap());
    let mut data = vec![0];
    data.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
    data.extend_from_slice(&message);
    frame(&mut out, 0x0, 0x1, 1, &data);
    out
}

#[test]
fn every_door_at_its_cap_of_hostile_connections_fits_the_manifests_memory() {
    // The Kubernetes manifests' settings (deploy/kubernetes/common): 1024 connections per
    // listener, two worker threads, Thrift off; every client door and the admin listener on.
    const CAP: usize = 1024;
    // 96 MiB is the target for the release build the manifests ship. This test runs the debug
    // build, whose tasks (futures) are larger: idle at the cap it already takes about 88 MiB
    // (the release build measured 93.0 MiB in all, docs/reliability.md), so it is held to 16 MiB more.
    const LIMIT_MIB: f64 = if cfg!(debug_assertions) { 112.0 } else { 96.0 };
    let dir = temp_dir();
    let node = Serve::new(dir.path())
        .args(["--worker-id", "3", "--resp-addr", "127.0.0.1:0"])
        .args(["--admin-addr", "127.0.0.1:0"])
        .env("SNOWFLAKE_THRIFT_ADDR", "off")
        .env("SNOWFLAKE_MAX_CONNECTIONS", CAP.to_string())
        .env("SNOWFLAKE_WORKER_THREADS", "2")
        .start();
    let (http, admin) = (node.addr(), node.admin_addr());
    let (grpc, resp) = (
        node.logged_addr("grpc listening"),
        node.logged_addr("resp listening"),
    );
    let started = Instant::now();
    let mut open = Vec::with_capacity(4 * CAP);
    let mut report = Vec::new();
    let mut last = settled_rss(node.pid());
    report.push(format!("idle: {last:.1} MiB"));
    let largest = format!("GET /v1/ids?count={LARGEST} HTTP/1.1\r\nHost: x\r\n\r\n");
    let resp_largest = format!("SNOWFLAKE.NEXT {LARGEST}\r\n");
    // An unfinished request head, just under what hyper buffers (8 KiB), and an unfinished
    // RESP bulk, just under its limit (4 KiB): the most each may hold without being refused.
    let mut head = b"GET /healthz HTTP/1.1\r\nX-Pad: ".to_vec();
    head.resize(7 * 1024, b'a');
    let mut bulk = b"*2\r\n$4\r\nECHO\r\n$4000\r\n".to_vec();
    bulk.resize(bulk.len() + 3990, b'x');
    let stalled = stalled_next_ids(LARGEST as u32);
    let kinds: [(&str, SocketAddr, &[u8], usize); 5] = [
        (
            "HTTP slow readers of the largest batch",
            http,
            largest.as_bytes(),
            CAP,
        ),
        ("admin unfinished request heads", admin, &head, CAP),
        (
            "RESP slow readers of the largest batch",
            resp,
            resp_largest.as_bytes(),
            CAP / 2,
        ),
        ("RESP unfinished bulks", resp, &bulk, CAP / 2),
        ("gRPC stalled NextIds streams", grpc, &stalled, CAP),
    ];
    for (kind, addr, payload, n) in kinds {
        open.extend((0..n).map(|_| hostile(addr, payload)));
        let now = settled_rss(node.pid());
        let per = (now - last) * 1024.0 / n as f64;
        report.push(format!(
            "{n} {kind}: +{:.1} MiB ({per:.1} KiB each), {now:.1} MiB",
            now - last
        ));
        last = now;
    }
    let total = settled_rss(node.pid());
    report.push(format!("all {} connections: {total:.1} MiB", open.len()));
    eprintln!("{}", report.join("\n"));
    assert!(
        total <= LIMIT_MIB,
        "RSS {total:.1} MiB > {LIMIT_MIB} MiB with every door at its cap:\n{}",
        report.join("\n")
    );
    assert!(started.elapsed() < Duration::from_secs(60));
    drop(open);
}

//! The RESP front end's connection handling at the byte level: the idle timeout closes a silent
//! connection and one that never reads its replies, and never a busy one.

use crate::support::{T, TestServer, config};
use snowflake_core::ManualClock;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Reads until `want` bytes arrived, the peer closed (fewer), or `within` passed.
async fn read_some(stream: &mut TcpStream, want: usize, within: Duration) -> Vec<u8> {
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + within;
    let mut buf = [0u8; 4096];
    while got.len() < want {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_is_closed_after_the_idle_timeout_and_frees_its_slot() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.max_connections = 1;
    config.idle_timeout = Duration::from_millis(400);
    let server = TestServer::start(config, ManualClock::new(T)).await;
    server.wait_ready().await;
    let addr = server.resp_addr.unwrap();

    let started = Instant::now();
    let mut silent = TcpStream::connect(addr).await.unwrap();
    // While it holds the only slot, a second client is told so and closed.
    let mut second = TcpStream::connect(addr).await.unwrap();
    let refused = read_some(&mut second, 64, Duration::from_secs(2)).await;
    assert!(
        refused.starts_with(b"-ERR max number of clients reached"),
        "{:?}",
        String::from_utf8_lossy(&refused)
    );
    // The silent one is closed after the idle timeout, not before.
    let mut buf = [0u8; 16];
    let n = tokio::time::timeout(Duration::from_secs(5), silent.read(&mut buf))
        .await
        .expect("the silent connection is closed within 5 s")
        .unwrap_or(0);
    assert_eq!(n, 0, "closed without a reply");
    let after = started.elapsed();
    assert!(
        after >= Duration::from_millis(400),
        "closed after {after:?}"
    );
    // And its slot is free again.
    let mut fresh = TcpStream::connect(addr).await.unwrap();
    fresh.write_all(b"PING\r\n").await.unwrap();
    assert_eq!(
        read_some(&mut fresh, 7, Duration::from_secs(5)).await,
        b"+PONG\r\n"
    );
    server.stop().await;
}

/// The idle deadline moves with every command: a client that keeps talking for many idle
/// timeouts keeps its connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_connection_outlives_many_idle_timeouts() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.idle_timeout = Duration::from_millis(300);
    let server = TestServer::start(config, ManualClock::new(T)).await;
    server.wait_ready().await;
    let mut busy = TcpStream::connect(server.resp_addr.unwrap()).await.unwrap();
    let started = Instant::now();
    let mut pings = 0;
    while started.elapsed() < Duration::from_millis(1_500) {
        busy.write_all(b"PING\r\n").await.unwrap();
        assert_eq!(
            read_some(&mut busy, 7, Duration::from_secs(5)).await,
            b"+PONG\r\n",
            "ping {pings} after {:?}",
            started.elapsed()
        );
        pings += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(pings >= 10, "{pings} pings");
    server.stop().await;
}

/// A client that pipelines commands and never reads a reply fills the socket buffers, and the
/// reply write then waits on it: bounded by the idle timeout, so with one connection slot a new
/// client is served soon after, not never.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_its_replies_loses_its_slot() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.max_connections = 1;
    config.idle_timeout = Duration::from_millis(500);
    let server = TestServer::start(config, ManualClock::new(T)).await;
    server.wait_ready().await;
    let addr = server.resp_addr.unwrap();

    // Each ECHO of 16 KiB is answered with the same 16 KiB: the buffers fill in a moment.
    let greedy = TcpStream::connect(addr).await.unwrap();
    let (_never_read, mut writer) = greedy.into_split();
    let word = "x".repeat(16 * 1024);
    let echo = format!("*2\r\n$4\r\nECHO\r\n${}\r\n{word}\r\n", word.len()).repeat(16);
    let pusher =
        tokio::spawn(async move { while writer.write_all(echo.as_bytes()).await.is_ok() {} });

    let started = Instant::now();
    loop {
        let mut fresh = TcpStream::connect(addr).await.unwrap();
        let _ = fresh.write_all(b"PING\r\n").await;
        if read_some(&mut fresh, 7, Duration::from_secs(1)).await == b"+PONG\r\n" {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "a client that never reads held the only connection slot for 10 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::timeout(Duration::from_secs(5), pusher)
        .await
        .expect("the greedy connection was closed")
        .unwrap();
    server.stop().await;
}

/// Pipelined commands each count in the latency histogram, observed when their batch's
/// replies are written (one read, one write: the time from one to the other).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_commands_each_count_in_the_latency_histogram() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(config(dir.path()), ManualClock::new(T)).await;
    server.wait_ready().await;
    let mut stream = TcpStream::connect(server.resp_addr.unwrap()).await.unwrap();
    stream
        .write_all(b"PING\r\nINCR a\r\nINCR a\r\nINCR b\r\nPING\r\n")
        .await
        .unwrap();
    let replies = read_some(&mut stream, 7 * 2 + 3 * 22, Duration::from_secs(5)).await;
    assert!(replies.starts_with(b"+PONG\r\n:"), "{replies:?}");
    // The replies are written before they are observed: poll for a moment.
    server
        .wait_for_metrics(&[
            "snowflake_request_duration_seconds_count{protocol=\"resp\",route=\"incr\"} 3\n",
            "snowflake_request_duration_seconds_count{protocol=\"resp\",route=\"ping\"} 2\n",
            "snowflake_request_duration_seconds_bucket{le=\"+Inf\",protocol=\"resp\",route=\"incr\"} 3\n",
        ])
        .await;
    server.stop().await;
}

/// Commands answered in the same batch as a malformed request are observed too: their replies
/// go out with the error, before the connection closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_before_a_protocol_error_are_observed() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(config(dir.path()), ManualClock::new(T)).await;
    server.wait_ready().await;
    let mut stream = TcpStream::connect(server.resp_addr.unwrap()).await.unwrap();
    stream
        .write_all(b"INCR a\r\nINCR a\r\n*abc\r\n")
        .await
        .unwrap();
    let mut replies = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut replies))
        .await
        .expect("closed after the error")
        .unwrap();
    let text = String::from_utf8_lossy(&replies);
    assert_eq!(
        text.matches("\r\n:").count() + usize::from(text.starts_with(':')),
        2,
        "{text}"
    );
    assert!(text.contains("-ERR"), "{text}");
    server
        .wait_for_metrics(&[
            "snowflake_request_duration_seconds_count{protocol=\"resp\",route=\"incr\"} 2\n",
            "snowflake_requests_total{protocol=\"resp\",route=\"protocol_error\",status=\"400\"} 1\n",
        ])
        .await;
    server.stop().await;
}

/// A command the node cannot answer now (the clock behind the last ID) counts as 503, as HTTP
/// answers it; a bad one as 400: the alert on ID requests without IDs tells them apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_by_the_node_count_as_503_and_bad_commands_as_400() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(config(dir.path()), ManualClock::new(T)).await;
    server.wait_ready().await;
    let mut stream = TcpStream::connect(server.resp_addr.unwrap()).await.unwrap();
    stream.write_all(b"INCR a\r\n").await.unwrap();
    assert!(
        read_some(&mut stream, 22, Duration::from_secs(5))
            .await
            .starts_with(b":")
    );
    server.clock.set_ms(T - 5000);
    stream.write_all(b"INCR a\r\nINCRBY a 0\r\n").await.unwrap();
    let replies = read_some(&mut stream, 40, Duration::from_secs(5)).await;
    assert!(
        replies.starts_with(b"-ERR"),
        "{}",
        String::from_utf8_lossy(&replies)
    );
    server
        .wait_for_metrics(&[
            "snowflake_requests_total{protocol=\"resp\",route=\"incr\",status=\"200\"} 1\n",
            "snowflake_requests_total{protocol=\"resp\",route=\"incr\",status=\"503\"} 1\n",
            "snowflake_requests_total{protocol=\"resp\",route=\"incrby\",status=\"400\"} 1\n",
        ])
        .await;
    server.clock.set_ms(T);
    server.stop().await;
}

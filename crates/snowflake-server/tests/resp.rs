//! The RESP front end at the byte level: pipelined commands and their latency metrics, a
//! protocol error after good commands, refusals by the node. (Its connection cap, idle timeout
//! and drain are the listener's: `listen.rs`.)

use crate::support::{T, TestServer, config};
use snowflake_core::ManualClock;
use std::time::Duration;
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
            "snowflake_ids_issued_total{protocol=\"resp\"} 3\n",
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
            "snowflake_ids_issued_total{protocol=\"resp\"} 1\n",
        ])
        .await;
    server.clock.set_ms(T);
    server.stop().await;
}

/// `INCR` while the clock is a little behind the last ID (within `max_backwards_wait_ms`) waits
/// for it and answers a larger ID, counted once; the connection keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incr_waits_out_a_small_clock_regression() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.clock.max_backwards_wait_ms = 5000;
    let server = TestServer::start(config, ManualClock::new(T)).await;
    server.wait_ready().await;
    let mut stream = TcpStream::connect(server.resp_addr.unwrap()).await.unwrap();
    let id = |reply: &[u8]| -> u64 {
        let text = String::from_utf8_lossy(reply);
        text.trim_start_matches(':')
            .trim_end()
            .parse()
            .unwrap_or_else(|_| panic!("{text}"))
    };
    stream.write_all(b"INCR a\r\n").await.unwrap();
    let first = id(&read_some(&mut stream, 21, Duration::from_secs(5)).await);
    server.clock.set_ms(T - 300);
    let clock = server.clock.clone();
    let back = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        clock.set_ms(T + 1);
    });
    stream.write_all(b"INCR a\r\n").await.unwrap();
    let second = id(&read_some(&mut stream, 21, Duration::from_secs(5)).await);
    back.await.unwrap();
    assert!(second > first, "{second} after {first}");
    stream.write_all(b"INCR a\r\n").await.unwrap();
    let third = id(&read_some(&mut stream, 21, Duration::from_secs(5)).await);
    assert!(third > second);
    server
        .wait_for_metrics(&[
            "snowflake_ids_issued_total{protocol=\"resp\"} 3\n",
            "snowflake_requests_total{protocol=\"resp\",route=\"incr\",status=\"200\"} 3\n",
            "snowflake_clock_backwards_waits_total 1\n",
        ])
        .await;
    server.stop().await;
}

//! Bulk requests under a small layout (js-safe: 64 IDs a millisecond, so 16,000 IDs take 250 of
//! them), woken each millisecond by the node's pacer: a request whose client is gone, or whose
//! time is up, stops taking IDs at once, so that none are issued for nobody and the node's
//! milliseconds go to the requests still waiting.

use crate::support::{T, TestServer, config};
use snowflake_core::{Layout, ManualClock};
use snowflake_server::grpc::pb::NextIdsRequest;
use snowflake_server::grpc::pb::snowflake_client::SnowflakeClient;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A js-safe node, ready, with this request timeout.
async fn js_safe(request_timeout: Duration) -> (TestServer, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.layout = Layout::JS_SAFE;
    config.limits.request_timeout = request_timeout;
    let server = TestServer::start(config, ManualClock::new(T)).await;
    server.wait_ready().await;
    (server, dir)
}

/// The node's count of issued IDs once it holds still for 300 ms (waiting at most 10 s: a
/// count that keeps growing fails).
async fn settled(server: &TestServer) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last = server.node.metrics().ids_issued_total();
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = server.node.metrics().ids_issued_total();
        if now == last {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "still issuing ids after 10 s: {last}, then {now}"
        );
        last = now;
    }
}

/// A gRPC `NextIds(16000)` whose client gives up (its stream reset) stops taking IDs, and the
/// next request gets the node's milliseconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_bulk_request_whose_client_is_gone_stops_taking_ids() {
    let (server, _dir) = js_safe(Duration::from_secs(30)).await;
    server.tick();
    let addr = server.grpc_addr.expect("grpc on");
    let mut grpc = SnowflakeClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    // 250 ms of the clock's milliseconds at the least; the client leaves after 60 ms.
    let gave_up = tokio::time::timeout(
        Duration::from_millis(60),
        grpc.next_ids(NextIdsRequest { count: 16_000 }),
    )
    .await;
    assert!(gave_up.is_err(), "answered in 60 ms: {gave_up:?}");
    let taken = settled(&server).await;
    assert!(
        (1..16_000).contains(&taken),
        "a request whose client left took {taken} ids"
    );
    let ids = grpc
        .next_ids(NextIdsRequest { count: 2_000 })
        .await
        .unwrap()
        .into_inner()
        .ids;
    assert_eq!(ids.len(), 2_000);
    assert_eq!(settled(&server).await, taken + 2_000);
    server.stop().await;
}

/// An HTTP `/v1/ids?count=16000` whose connection closes stops taking IDs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_bulk_request_whose_client_is_gone_stops_taking_ids() {
    let (server, _dir) = js_safe(Duration::from_secs(30)).await;
    server.tick();
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream
        .write_all(b"GET /v1/ids?count=16000 HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    // Issuing has begun, then the client leaves.
    let begun = Instant::now() + Duration::from_secs(10);
    while server.node.metrics().ids_issued_total() == 0 {
        assert!(Instant::now() < begun, "no id issued in 10 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    drop(stream);
    let taken = settled(&server).await;
    assert!(
        (1..16_000).contains(&taken),
        "a request whose client left took {taken} ids"
    );
    server.stop().await;
}

/// A bulk request that cannot finish within the request timeout (the clock stands still after
/// its first millisecond) is answered 503 naming the timeout, and takes no more IDs after it,
/// when the clock moves again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_request_past_its_timeout_is_refused_and_takes_no_more() {
    let (server, _dir) = js_safe(Duration::from_millis(300)).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream
        .write_all(b"GET /v1/ids?count=16000 HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut reply = vec![0u8; 64 * 1024];
    let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut reply))
        .await
        .expect("answered within the request timeout, not hung")
        .unwrap();
    let reply = String::from_utf8_lossy(&reply[..n]);
    assert!(reply.starts_with("HTTP/1.1 503"), "{reply}");
    assert!(reply.contains("request timed out after 300 ms"), "{reply}");
    // The one millisecond the clock read was taken, and nothing after it.
    let taken = server.node.metrics().ids_issued_total();
    assert_eq!(taken, Layout::JS_SAFE.max_ids_per_ms());
    server.clock.advance_ms(1);
    tokio::time::sleep(Duration::from_millis(20)).await;
    server.clock.advance_ms(1);
    assert_eq!(settled(&server).await, taken);
    server.stop().await;
}

/// Bulk requests served at once by the pacer's thread (four gRPC `NextIds(3000)`, the clock
/// moving): every reply is in increasing order, no ID is in two replies, and the node counted
/// exactly the IDs it handed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_bulk_requests_get_unique_ids_in_increasing_order() {
    let (server, _dir) = js_safe(Duration::from_secs(30)).await;
    server.tick();
    let addr = server.grpc_addr.expect("grpc on");
    let mut requests = Vec::new();
    for _ in 0..4 {
        let mut grpc = SnowflakeClient::connect(format!("http://{addr}"))
            .await
            .unwrap();
        requests.push(tokio::spawn(async move {
            grpc.next_ids(NextIdsRequest { count: 3_000 })
                .await
                .unwrap()
                .into_inner()
                .ids
        }));
    }
    let mut all = std::collections::HashSet::new();
    for request in requests {
        let ids = tokio::time::timeout(Duration::from_secs(30), request)
            .await
            .expect("answered")
            .unwrap();
        assert_eq!(ids.len(), 3_000);
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "in increasing order");
        for id in ids {
            assert!(all.insert(id), "{id} was handed out twice");
        }
    }
    assert_eq!(all.len(), 12_000);
    assert_eq!(settled(&server).await, 12_000);
    server.stop().await;
}

/// A clock regression beyond `--max-backwards-wait-ms` met by the pacer's thread while it
/// takes a bulk request's IDs reaches the request: it is refused naming the regression, and
/// nothing more is taken for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clock_regression_met_by_the_pacer_refuses_the_bulk_request() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.layout = Layout::JS_SAFE;
    config.limits.request_timeout = Duration::from_secs(30);
    config.clock.max_backwards_wait_ms = 5;
    let server = TestServer::start(config, ManualClock::new(T)).await;
    server.wait_ready().await;
    let addr = server.grpc_addr.expect("grpc on");
    let mut grpc = SnowflakeClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let request = tokio::spawn(async move { grpc.next_ids(NextIdsRequest { count: 1_000 }).await });
    // The clock stands still: the millisecond it reads is taken, then the request waits.
    let begun = Instant::now() + Duration::from_secs(10);
    while server.node.metrics().ids_issued_total() < Layout::JS_SAFE.max_ids_per_ms() {
        assert!(Instant::now() < begun, "no id issued in 10 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    server.clock.set_ms(T - 1_000);
    let refused = tokio::time::timeout(Duration::from_secs(10), request)
        .await
        .expect("answered, not hung")
        .unwrap()
        .expect_err("refused");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    assert!(
        refused.message().contains("clock moved backwards"),
        "{refused:?}"
    );
    assert_eq!(
        settled(&server).await,
        Layout::JS_SAFE.max_ids_per_ms(),
        "taken after the refusal"
    );
    server.stop().await;
}

//! Every route and every error of the HTTP/JSON API (SPEC §5).

use crate::support::{T, TestServer, config, get, id_of};
use hyper::StatusCode;
use snowflake_core::ManualClock;

async fn server() -> (TestServer, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(config(dir.path()), ManualClock::new(T)).await;
    server.wait_ready().await;
    (server, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn next_id_as_json_and_as_text() {
    let (server, _dir) = server().await;
    let reply = server.get("/v1/id").await;
    assert_eq!(reply.headers["content-type"], "application/json");
    let id = id_of(&reply);
    assert_eq!((id >> 22) + 1_288_834_974_657, T);
    let text = get(server.addr, "/v1/id", &[("accept", "text/plain")]).await;
    assert_eq!(text.status, StatusCode::OK);
    assert!(
        text.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    assert_eq!(text.body.parse::<u64>().unwrap(), id + 1);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn next_ids_returns_count_strings_in_order() {
    let (server, _dir) = server().await;
    server.tick();
    let reply = server.get("/v1/ids?count=5000").await;
    assert_eq!(reply.status, StatusCode::OK);
    let ids: Vec<u64> = reply.json()["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().parse().unwrap())
        .collect();
    assert_eq!(ids.len(), 5000);
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_counts_are_400_naming_the_problem() {
    let (server, _dir) = server().await;
    for (query, message) in [
        (
            "/v1/ids?count=0",
            "invalid count: expected 1..=100000, found 0",
        ),
        (
            "/v1/ids?count=-5",
            "invalid count: expected 1..=100000, found -5",
        ),
        (
            "/v1/ids?count=ten",
            "invalid count: expected a decimal integer in 1..=100000, found \"ten\"",
        ),
        (
            "/v1/ids?count=100001",
            "invalid count: expected 1..=100000, found 100001",
        ),
        (
            "/v1/ids?count=99999999999999999999999",
            "invalid count: expected 1..=100000, found 99999999999999999999999",
        ),
        (
            "/v1/ids?count=",
            "invalid count: expected a decimal integer in 1..=100000, found \"\"",
        ),
        ("/v1/ids", "missing query parameter count"),
        ("/v1/ids?size=3", "missing query parameter count"),
    ] {
        let reply = server.get(query).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{query}");
        assert!(
            reply.error().contains(message),
            "{query}: {}",
            reply.error()
        );
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decode_matches_the_cli_json() {
    let (server, _dir) = server().await;
    let reply = server.get("/v1/decode/1724551110457221119").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(
        reply.body,
        r#"{"id":"1724551110457221119","timestamp_ms":1700000000000,"time":"2023-11-14T22:13:20.000Z","datacenter_id":7,"worker_id":13,"sequence":4095}"#
    );
    for (path, message) in [
        (
            "/v1/decode/-1",
            "invalid snowflake id: expected 0..=9223372036854775807, found -1",
        ),
        (
            "/v1/decode/9223372036854775808",
            "found 9223372036854775808",
        ),
        ("/v1/decode/abc", "expected a decimal integer"),
        ("/v1/decode/%FF", "not valid UTF-8"),
    ] {
        let reply = server.get(path).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{path}");
        assert!(reply.error().contains(message), "{path}: {}", reply.error());
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_health_readiness_and_unknown_routes() {
    let (server, _dir) = server().await;
    let info = server.get("/v1/info").await.json();
    assert_eq!(info["datacenter_id"], 0);
    assert_eq!(info["worker_id"], 0);
    assert_eq!(info["epoch_ms"], 1_288_834_974_657_u64);
    assert_eq!(info["timestamp_ms"], T);
    assert_eq!(info["ready"], true);
    assert_eq!(server.get("/healthz").await.status, StatusCode::OK);
    assert_eq!(server.get("/readyz").await.status, StatusCode::OK);
    let missing = server.get("/v2/nothing").await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert!(missing.error().contains("no such route: GET /v2/nothing"));
    server.stop().await;
}

/// Each listener's 404 lists the routes that listener serves: the admin port's never names
/// the ID routes it does not serve (a newcomer tried them there and got 404 again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_listeners_404_lists_only_its_own_routes() {
    let (server, _dir) = server().await;
    let admin = server.admin_addr.expect("admin on");
    let admin_routes = [
        "/healthz",
        "/readyz",
        "/metrics",
        "/",
        "/status.js",
        "/v1/status",
    ];
    let id_routes = [
        "/v1/id",
        "/v1/ids",
        "/v1/decode/{id}",
        "/v1/info",
        "/v1/range",
    ];
    let routes_in = |error: &str| -> Vec<String> {
        let (_, list) = error.split_once("; routes: ").expect("a route list");
        list.split(", ").map(str::to_owned).collect()
    };
    let missing = get(admin, "/v2/nothing", &[]).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert!(missing.error().contains("no such route: GET /v2/nothing"));
    let listed = routes_in(&missing.error());
    for route in admin_routes {
        assert!(
            listed.iter().any(|r| r == route),
            "{route} not in {listed:?}"
        );
    }
    assert_eq!(listed.len(), admin_routes.len(), "{listed:?}");
    // The ID routes answer 404 on the admin port, and the list does not offer them.
    assert_eq!(
        get(admin, "/v1/id", &[]).await.status,
        StatusCode::NOT_FOUND
    );
    let listed = routes_in(&get(admin, "/v1/id", &[]).await.error());
    for route in id_routes {
        assert!(!listed.iter().any(|r| r == route), "{route} in {listed:?}");
    }
    // The HTTP listener lists every route it serves.
    let listed = routes_in(&server.get("/v2/nothing").await.error());
    for route in admin_routes.into_iter().chain(id_routes) {
        assert!(
            listed.iter().any(|r| r == route),
            "{route} not in {listed:?}"
        );
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_ids_requests_and_refusals() {
    let (server, _dir) = server().await;
    server.get("/v1/ids?count=10").await;
    server.get("/v1/ids?count=0").await;
    server.clock.set_ms(T - 5000);
    assert_eq!(
        server.get("/v1/id").await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    let metrics = server.get("/metrics").await;
    assert_eq!(metrics.status, StatusCode::OK);
    let text = metrics.body;
    for line in [
        "snowflake_ids_issued_total{protocol=\"http\"} 10",
        "snowflake_requests_total{protocol=\"http\",route=\"/v1/ids\",status=\"400\"} 1",
        "snowflake_requests_total{protocol=\"http\",route=\"/v1/id\",status=\"503\"} 1",
        "snowflake_clock_backwards_refusals_total 1",
        "snowflake_sequence_exhaustion_waits_total",
        "snowflake_node{datacenter_id=\"0\",worker_id=\"0\",identity_source=\"static\"} 1",
        // The clock is behind the last ID now: not ready, and why.
        "\nsnowflake_ready 0\n",
        "\nsnowflake_not_ready_reason{reason=\"clock_behind\"} 1\n",
        "\nsnowflake_not_ready_reason{reason=\"starting\"} 0\n",
        "snowflake_restart_mark_waiting 0",
        "snowflake_high_water_mark_ms ",
        // Each route's latency: two /v1/ids requests, one /v1/id (the refused one counts too).
        "snowflake_request_duration_seconds_count{protocol=\"http\",route=\"/v1/ids\"} 2",
        "snowflake_request_duration_seconds_count{protocol=\"http\",route=\"/v1/id\"} 1",
        "snowflake_request_duration_seconds_bucket{le=\"0.00001\",protocol=\"http\",route=\"/v1/id\"}",
        "snowflake_request_duration_seconds_bucket{le=\"+Inf\",protocol=\"http\",route=\"/v1/id\"} 1",
        "# TYPE snowflake_request_duration_seconds histogram",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    server.clock.set_ms(T);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clock_stepped_back_refuses_with_503_then_resumes_above_the_old_maximum() {
    let (server, _dir) = server().await;
    let before = id_of(&server.get("/v1/id").await);
    server.clock.set_ms(T - 5000);
    let refused = server.get("/v1/id").await;
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refused.headers["retry-after"], "5");
    let message = refused.error();
    assert!(
        message.contains("clock moved backwards") && message.contains("5000 ms behind"),
        "{message}"
    );
    assert_eq!(
        server.get("/v1/ids?count=3").await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    let ready = server.get("/readyz").await;
    assert_eq!(ready.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(ready.error().contains("clock moved backwards"));
    // Health is about the process, not the clock.
    assert_eq!(server.get("/healthz").await.status, StatusCode::OK);

    server.clock.set_ms(T + 1);
    server.wait_ready().await;
    let after = id_of(&server.get("/v1/id").await);
    assert!(after > before, "{after} <= {before}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_regressions_are_waited_out_when_configured() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.clock.max_backwards_wait_ms = 1000;
    let server = TestServer::start(config, ManualClock::new(T)).await;
    server.wait_ready().await;
    let before = id_of(&server.get("/v1/id").await);
    server.clock.set_ms(T - 20);
    // The manual clock catches up 100 ms of real time later; the request waits, then succeeds.
    let clock = server.clock.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        clock.set_ms(T + 1);
    });
    let after = id_of(&server.get("/v1/id").await);
    assert!(after > before);
    assert!(
        server
            .get("/metrics")
            .await
            .body
            .contains("snowflake_clock_backwards_waits_total")
    );
    // Beyond the bound: refused at once.
    server.clock.set_ms(T - 5000);
    assert_eq!(
        server.get("/v1/id").await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    server.clock.set_ms(T + 2);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_parallel_clients_never_see_a_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(config(dir.path()), ManualClock::new(T)).await;
    server.wait_ready().await;
    server.tick();
    let mut clients = Vec::new();
    for _ in 0..8 {
        let addr = server.addr;
        clients.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for i in 0..100 {
                if i % 2 == 0 {
                    ids.push(id_of(&get(addr, "/v1/id", &[]).await));
                } else {
                    let reply = get(addr, "/v1/ids?count=50", &[]).await;
                    ids.extend(
                        reply.json()["ids"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|v| v.as_str().unwrap().parse::<u64>().unwrap()),
                    );
                }
            }
            ids
        }));
    }
    let mut all = Vec::new();
    for client in clients {
        let ids = client.await.unwrap();
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "one client's ids went down"
        );
        all.extend(ids);
    }
    let total = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), total);
    assert_eq!(total, 8 * (50 + 50 * 50));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_clock_jump_only_leaves_a_gap() {
    let (server, dir) = server().await;
    let before = id_of(&server.get("/v1/id").await);
    // Far past the reservation: the request waits for a new one to be written, then succeeds.
    server.clock.set_ms(T + 10_000);
    let after = id_of(&server.get("/v1/id").await);
    assert!(after > before);
    assert_eq!((after >> 22) + 1_288_834_974_657, T + 10_000);
    let mark: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("node-0-0.json")).unwrap())
            .unwrap();
    assert!(mark["high_water_ms"].as_u64().unwrap() >= T + 10_000);
    assert_eq!(server.get("/readyz").await.status, StatusCode::OK);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_clock_step_is_refused_until_it_held_then_only_leaves_a_gap() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = crate::support::config(dir.path());
    config.clock.max_clock_step_ms = 1000;
    config.clock.clock_step_trust = std::time::Duration::from_millis(1000);
    let server = TestServer::start(config, ManualClock::new(T)).await;
    let before = id_of(&server.get("/v1/id").await);
    // 600 ms at once: within --max-clock-step-ms, trusted.
    server.clock.advance_ms(600);
    assert_eq!(server.get("/v1/id").await.status, StatusCode::OK);
    server.clock.set_ms(T + 10_000);
    let stepped_at = std::time::Instant::now();
    let refused = server.get("/v1/id").await;
    assert_eq!(
        refused.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{refused:?}"
    );
    let message = refused.json()["error"].as_str().unwrap().to_owned();
    assert!(
        message.contains("the clock stepped forward by"),
        "{message}"
    );
    assert!(message.contains("--clock-step-trust-secs"), "{message}");
    assert_eq!(
        server.get("/readyz").await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert!(
        server
            .get("/metrics")
            .await
            .body
            .contains("snowflake_clock_forward_steps_total 1")
    );
    // Nothing on disk beyond trusted time.
    let mark: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("node-0-0.json")).unwrap())
            .unwrap();
    assert!(
        mark["high_water_ms"].as_u64().unwrap() < T + 5_000,
        "{mark}"
    );
    // Held for the trust time: the stepped clock keeps pace with real time (a clock that
    // stood still meanwhile would be a step that keeps moving, watched again from each move).
    let keep_pace = || {
        let elapsed = u64::try_from(stepped_at.elapsed().as_millis()).unwrap();
        server.clock.set_ms(T + 10_000 + elapsed);
    };
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        keep_pace();
        if server.get("/readyz").await.status == StatusCode::OK {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not ready 10 s after the step held: {:?}",
            server.get("/readyz").await
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    keep_pace();
    let after = id_of(&server.get("/v1/id").await);
    assert!(after > before);
    assert!((after >> 22) + 1_288_834_974_657 >= T + 10_000);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_batch_leaves_a_quarter_of_each_millisecond_to_single_ids() {
    let (server, _dir) = server().await;
    // 10,000 IDs need four milliseconds at 3072 a millisecond; the clock stands still at T.
    let addr = server.addr;
    let bulk =
        tokio::spawn(async move { crate::support::get(addr, "/v1/ids?count=10000", &[]).await });
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert!(!bulk.is_finished());
    // A single ID is still issued in this millisecond, at once, beside the waiting batch.
    let single = tokio::time::timeout(std::time::Duration::from_secs(2), server.get("/v1/id"))
        .await
        .expect("a single ID waited behind the batch");
    let single = id_of(&single);
    assert_eq!((single >> 22) + 1_288_834_974_657, T);
    for _ in 0..3 {
        server.clock.advance_ms(1);
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let reply = tokio::time::timeout(std::time::Duration::from_secs(5), bulk)
        .await
        .expect("the batch finished")
        .unwrap();
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    let ids: Vec<u64> = reply.json()["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_str().unwrap().parse().unwrap())
        .collect();
    assert_eq!(ids.len(), 10_000);
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    assert!(!ids.contains(&single));
    let mut per_ms = std::collections::BTreeMap::<u64, u64>::new();
    for id in &ids {
        *per_ms.entry(id >> 22).or_default() += 1;
    }
    assert!(per_ms.values().all(|&n| n <= 3072), "{per_ms:?}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_and_metrics_agree_with_readiness_while_the_clock_is_behind() {
    let (server, _dir) = server().await;
    server.get("/v1/id").await;
    server.clock.set_ms(T - 1000);
    assert_eq!(
        server.get("/readyz").await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(server.get("/v1/info").await.json()["ready"], false);
    assert!(
        server
            .get("/metrics")
            .await
            .body
            .contains("snowflake_ready 0")
    );
    server.clock.set_ms(T + 1);
    server.wait_ready().await;
    assert_eq!(server.get("/v1/info").await.json()["ready"], true);
    server.stop().await;
}

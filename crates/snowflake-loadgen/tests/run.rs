//! Runs against the in-test server: counts, bounds, error kinds, the startup failure, reports.

use crate::support::{Mode, TestServer};
use snowflake_loadgen::{BenchConfig, Error, StopReason};
use std::time::{Duration, Instant};

/// A config for `server` with few connections and no progress line.
fn config(addr: &str) -> snowflake_loadgen::BenchConfigBuilder {
    BenchConfig::builder().addr(addr).connections(4)
}

/// A free loopback port with nothing listening on it.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

#[tokio::test]
async fn a_count_bounded_run_sends_exactly_that_many_requests() {
    let server = TestServer::start(Mode::Good).await;
    let config = config(&server.addr())
        .connections(8)
        .requests(1000)
        .build()
        .unwrap();
    let report = snowflake_loadgen::run(config).await.unwrap();
    assert_eq!(report.stopped_by, StopReason::Requests);
    assert_eq!(report.requests, 1000);
    assert_eq!(report.requests_ok, 1000);
    assert_eq!(report.requests_failed, 0);
    assert_eq!(report.errors_total, 0, "{:?}", report.errors);
    assert_eq!(report.ids, 1000);
    assert_eq!(report.latency_us.samples, 1000);
    assert!(report.latency_us.p50 <= report.latency_us.p99);
    assert!(report.latency_us.p99 <= report.latency_us.max);
    assert_eq!(server.requests(), 1000);
}

#[tokio::test]
async fn a_batch_run_receives_requests_times_batch_ids() {
    let server = TestServer::start(Mode::Good).await;
    let config = config(&server.addr())
        .requests(200)
        .batch(50)
        .build()
        .unwrap();
    let report = snowflake_loadgen::run(config).await.unwrap();
    assert_eq!(report.requests_ok, 200);
    assert_eq!(report.ids, 200 * 50);
    assert_eq!(report.errors_total, 0, "{:?}", report.errors);
    assert_eq!(server.ids(), 200 * 50);
}

#[tokio::test]
async fn a_duration_bounded_run_stops_in_time() {
    let server = TestServer::start(Mode::Good).await;
    let config = config(&server.addr())
        .duration(Duration::from_millis(300))
        .build()
        .unwrap();
    let started = Instant::now();
    let report = snowflake_loadgen::run(config).await.unwrap();
    let wall = started.elapsed();
    assert_eq!(report.stopped_by, StopReason::Duration);
    assert!(
        report.elapsed >= Duration::from_millis(300),
        "{:?}",
        report.elapsed
    );
    assert!(wall < Duration::from_secs(3), "took {wall:?}");
    assert!(report.requests_ok > 0);
    assert_eq!(report.errors_total, 0, "{:?}", report.errors);
    assert!(report.requests_per_sec > 0.0);
    assert_eq!(report.ids, report.requests_ok);
}

#[tokio::test]
async fn with_both_bounds_the_count_can_end_the_run_first() {
    let server = TestServer::start(Mode::Good).await;
    let config = config(&server.addr())
        .requests(20)
        .duration(Duration::from_secs(30))
        .build()
        .unwrap();
    let report = snowflake_loadgen::run(config).await.unwrap();
    assert_eq!(report.stopped_by, StopReason::Requests);
    assert_eq!(report.requests_ok, 20);
}

#[tokio::test]
async fn warm_up_requests_are_not_recorded() {
    let server = TestServer::start(Mode::Good).await;
    let config = config(&server.addr())
        .warmup(Duration::from_millis(200))
        .requests(50)
        .build()
        .unwrap();
    let report = snowflake_loadgen::run(config).await.unwrap();
    assert_eq!(report.requests_ok, 50);
    assert!(
        server.requests() > 50,
        "warm-up sent {}",
        server.requests() - 50
    );
}

#[tokio::test]
async fn non_200_answers_count_as_errors_by_status() {
    let server = TestServer::start(Mode::Status(503)).await;
    let config = config(&server.addr()).requests(100).build().unwrap();
    let report = snowflake_loadgen::run(config).await.unwrap();
    assert_eq!(report.requests, 100);
    assert_eq!(report.requests_ok, 0);
    assert_eq!(report.requests_failed, 100);
    assert_eq!(report.errors_total, 100);
    assert_eq!(
        report.errors.get("http_503"),
        Some(&100),
        "{:?}",
        report.errors
    );
    assert_eq!(report.errors.len(), 1);
    assert_eq!(report.ids, 0);
    assert_eq!(report.latency_us.samples, 0);
}

#[tokio::test]
async fn a_wrong_number_of_ids_is_a_bad_response() {
    let server = TestServer::start(Mode::WrongIds).await;
    let config = config(&server.addr())
        .requests(40)
        .batch(10)
        .build()
        .unwrap();
    let report = snowflake_loadgen::run(config).await.unwrap();
    assert_eq!(report.requests_ok, 0);
    assert_eq!(
        report.errors.get("bad_response"),
        Some(&40),
        "{:?}",
        report.errors
    );
    assert_eq!(report.ids, 0);
}

#[tokio::test]
async fn an_id_that_is_not_a_decimal_string_is_a_bad_response() {
    let server = TestServer::start(Mode::WrongIds).await;
    let config = config(&server.addr()).requests(10).build().unwrap();
    let report = snowflake_loadgen::run(config).await.unwrap();
    assert_eq!(
        report.errors.get("bad_response"),
        Some(&10),
        "{:?}",
        report.errors
    );
}

#[tokio::test]
async fn connections_the_server_closes_are_reopened_without_errors() {
    let server = TestServer::start(Mode::GoodNoKeepAlive).await;
    let config = config(&server.addr()).requests(100).build().unwrap();
    let report = snowflake_loadgen::run(config).await.unwrap();
    assert_eq!(report.requests_ok, 100);
    assert_eq!(report.errors_total, 0, "{:?}", report.errors);
}

#[tokio::test]
async fn a_server_that_hangs_up_at_once_yields_errors_not_a_busy_loop() {
    let server = TestServer::start(Mode::Hangup).await;
    let config = config(&server.addr())
        .duration(Duration::from_millis(300))
        .build()
        .unwrap();
    let report = snowflake_loadgen::run(config).await.unwrap();
    assert_eq!(report.requests_ok, 0);
    assert!(report.errors_total > 0, "{report}");
    // Each connection backs off between attempts instead of spinning.
    assert!(report.errors_total < 200, "{report}");
    assert!(
        report.errors.keys().all(|kind| kind.starts_with("connect")
            || kind == "connection_closed"
            || kind == "connection_reset"),
        "{:?}",
        report.errors
    );
}

#[tokio::test]
async fn a_slow_answer_is_a_timeout() {
    let server = TestServer::start(Mode::Slow(Duration::from_secs(5))).await;
    let config = config(&server.addr())
        .connections(2)
        .timeout(Duration::from_millis(100))
        .duration(Duration::from_millis(450))
        .build()
        .unwrap();
    let report = snowflake_loadgen::run(config).await.unwrap();
    assert_eq!(report.requests_ok, 0);
    let timeouts = report.errors.get("timeout").copied().unwrap_or(0);
    assert!(timeouts >= 2, "{:?}", report.errors);
}

#[tokio::test]
async fn a_run_in_which_no_request_finished_says_so() {
    // Answers take longer than the run: nothing finished, nothing failed.
    let server = TestServer::start(Mode::Slow(Duration::from_secs(5))).await;
    let config = config(&server.addr())
        .connections(2)
        .duration(Duration::from_millis(300))
        .build()
        .unwrap();
    let report = snowflake_loadgen::run(config).await.unwrap();
    assert_eq!(report.requests, 0);
    assert_eq!(report.errors_total, 0, "{:?}", report.errors);
    let text = report.to_string();
    assert!(
        text.ends_with(
            "errors      none, but no request finished: the service answered none within the run"
        ),
        "{text}"
    );
}

#[tokio::test]
async fn connection_refused_at_start_is_a_clear_error() {
    let port = closed_port();
    let config = config(&format!("127.0.0.1:{port}")).build().unwrap();
    let err = snowflake_loadgen::run(config).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Connect {
                kind: std::io::ErrorKind::ConnectionRefused,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!("cannot connect to 127.0.0.1:{port}: Connection refused")
    );
}

#[tokio::test]
async fn shutdown_ends_the_run_early_with_a_report() {
    let server = TestServer::start(Mode::Good).await;
    let config = config(&server.addr())
        .duration(Duration::from_secs(30))
        .build()
        .unwrap();
    let started = Instant::now();
    let report = snowflake_loadgen::run_with_shutdown(
        config,
        tokio::time::sleep(Duration::from_millis(200)),
    )
    .await
    .unwrap();
    assert_eq!(report.stopped_by, StopReason::Interrupted);
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(report.requests_ok > 0);
}

#[tokio::test]
async fn shutdown_during_warm_up_is_an_error() {
    let server = TestServer::start(Mode::Good).await;
    let config = config(&server.addr())
        .warmup(Duration::from_secs(30))
        .build()
        .unwrap();
    let err = snowflake_loadgen::run_with_shutdown(
        config,
        tokio::time::sleep(Duration::from_millis(100)),
    )
    .await
    .unwrap_err();
    assert_eq!(err, Error::Interrupted);
}

#[tokio::test]
async fn the_report_prints_as_text_and_as_one_json_object() {
    let server = TestServer::start(Mode::Good).await;
    let config = config(&server.addr())
        .requests(10)
        .batch(3)
        .build()
        .unwrap();
    let report = snowflake_loadgen::run(config).await.unwrap();

    let text = report.to_string();
    assert!(text.contains("10 ok, 0 failed"), "{text}");
    assert!(text.contains("load        closed loop"), "{text}");
    assert!(text.contains("ids         30"), "{text}");
    assert!(text.contains("p99.9"), "{text}");
    assert!(text.contains("stopped by requests"), "{text}");
    assert!(text.ends_with("errors      none"), "{text}");

    let json = serde_json::to_string(&report).unwrap();
    assert!(!json.contains('\n'));
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(value["protocol"], "http");
    assert_eq!(value["addr"], server.addr());
    assert_eq!(value["batch"], 3);
    assert_eq!(value["offered_rate"], serde_json::Value::Null);
    assert_eq!(value["stopped_by"], "requests");
    assert_eq!(value["requests_ok"], 10);
    assert_eq!(value["ids"], 30);
    assert_eq!(value["errors"], serde_json::json!({}));
    assert!(value["elapsed_secs"].as_f64().unwrap() > 0.0);
    assert!(value["ids_per_sec"].as_f64().unwrap() > 0.0);
    for key in ["samples", "p50", "p90", "p99", "p99_9", "max"] {
        assert!(value["latency_us"][key].is_u64(), "{key} in {json}");
    }
}

#[tokio::test]
async fn a_fixed_rate_run_sends_about_rate_times_duration_requests() {
    let server = TestServer::start(Mode::Good).await;
    let config = config(&server.addr())
        .rate(200)
        .duration(Duration::from_secs(1))
        .build()
        .unwrap();
    let report = snowflake_loadgen::run(config).await.unwrap();
    assert_eq!(report.stopped_by, StopReason::Duration);
    assert_eq!(report.offered_rate, Some(200));
    assert_eq!(report.errors_total, 0, "{:?}", report.errors);
    // 200 requests are due within the second; a noisy machine may fall a little behind, but a
    // connection never runs ahead of its schedule.
    assert!((150..=250).contains(&report.requests_ok), "{report}");
    assert!((150..=250).contains(&server.requests()), "{report}");
    assert!(
        (150.0..=250.0).contains(&report.requests_per_sec),
        "{report}"
    );
    assert_eq!(report.latency_us.samples, report.requests_ok);

    let text = report.to_string();
    assert!(
        text.contains("200 requests/s offered on a fixed schedule"),
        "{text}"
    );
    assert!(text.contains("scheduled send time"), "{text}");
    let value = serde_json::to_value(&report).unwrap();
    assert_eq!(value["offered_rate"], 200);
}

#[tokio::test]
async fn a_count_bounded_run_at_a_rate_never_runs_ahead_of_its_schedule() {
    let server = TestServer::start(Mode::Good).await;
    // 100/s over 2 connections: the 20th request is due 190 ms after the start.
    let config = config(&server.addr())
        .connections(2)
        .rate(100)
        .requests(20)
        .build()
        .unwrap();
    let report = snowflake_loadgen::run(config).await.unwrap();
    assert_eq!(report.stopped_by, StopReason::Requests);
    assert_eq!(report.requests_ok, 20);
    assert_eq!(server.requests(), 20);
    assert!(
        report.elapsed >= Duration::from_millis(150),
        "{:?}",
        report.elapsed
    );
}

#[tokio::test]
async fn under_a_rate_a_slow_server_shows_the_schedule_delay_in_the_latency() {
    // Each answer takes 50 ms, so one connection manages about 20 of the 100 requests/s asked
    // for. Measured from when they were sent, latencies would be about 50 ms; measured from the
    // schedule, request k waits behind the k before it: about 50 + 40 k ms.
    let server = TestServer::start(Mode::Slow(Duration::from_millis(50))).await;
    let config = config(&server.addr())
        .connections(1)
        .rate(100)
        .duration(Duration::from_secs(1))
        .build()
        .unwrap();
    let report = snowflake_loadgen::run(config).await.unwrap();
    assert_eq!(report.errors_total, 0, "{:?}", report.errors);
    assert!(report.requests_ok >= 3, "{report}");
    assert!(report.requests_ok <= 25, "{report}");
    assert!(report.requests_per_sec < 50.0, "{report}");
    assert!(report.latency_us.p50 > 150_000, "{report}");
    assert!(report.latency_us.max > 300_000, "{report}");
}

#[tokio::test]
async fn shutdown_ends_a_rate_run_while_connections_wait_for_their_turn() {
    let server = TestServer::start(Mode::Good).await;
    // 2 requests/s over 4 connections: most connections wait seconds for their first request.
    let config = config(&server.addr())
        .rate(2)
        .warmup(Duration::from_millis(100))
        .duration(Duration::from_secs(30))
        .build()
        .unwrap();
    let started = Instant::now();
    let report = snowflake_loadgen::run_with_shutdown(
        config,
        tokio::time::sleep(Duration::from_millis(700)),
    )
    .await
    .unwrap();
    assert_eq!(report.stopped_by, StopReason::Interrupted);
    assert!(started.elapsed() < Duration::from_secs(3));
    // Requests 0 and 1 of the run are due at 0 and 0.5 s: the first during the warm-up.
    assert!(report.requests_ok <= 2, "{report}");
    assert!(server.requests() <= 3, "{report}");
}

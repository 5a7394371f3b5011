//! Bounded runs over every protocol against the real service in-process.

use crate::service::Service;
use snowflake_loadgen::{BenchConfig, Protocol, Report, StopReason};
use std::net::SocketAddr;

async fn bench(protocol: Protocol, addr: SocketAddr, batch: u32, stream: bool) -> Report {
    let config = BenchConfig::builder()
        .protocol(protocol)
        .addr(addr.to_string())
        .connections(4)
        .requests(500)
        .batch(batch)
        .stream(stream)
        .build()
        .unwrap();
    snowflake_loadgen::run(config)
        .await
        .expect("the run happens")
}

fn assert_clean(report: &Report, ids_per_request: u64) {
    assert_eq!(report.stopped_by, StopReason::Requests, "{report}");
    assert_eq!(report.errors_total, 0, "{:?}", report.errors);
    assert_eq!(report.requests, 500);
    assert_eq!(report.requests_ok, 500);
    assert_eq!(report.ids, 500 * ids_per_request);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_thrift_and_grpc_runs_against_the_real_service() {
    let service = Service::start().await;
    let report = bench(Protocol::Http, service.http, 1, false).await;
    assert_clean(&report, 1);

    let report = bench(Protocol::Thrift, service.thrift, 1, false).await;
    assert_clean(&report, 1);
    assert_eq!(report.protocol, Protocol::Thrift);

    let report = bench(Protocol::Grpc, service.grpc, 1, false).await;
    assert_clean(&report, 1);
    assert_eq!(report.protocol, Protocol::Grpc);

    let report = bench(Protocol::Grpc, service.grpc, 100, false).await;
    assert_clean(&report, 100);

    let report = bench(Protocol::Grpc, service.grpc, 10_000, true).await;
    assert_clean(&report, 10_000);
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_statuses_are_counted_by_code() {
    let service = Service::start().await;
    // Above the service's default max batch (100000): every call is refused.
    let config = BenchConfig::builder()
        .protocol(Protocol::Grpc)
        .addr(service.grpc.to_string())
        .connections(2)
        .requests(20)
        .batch(200_000)
        .build()
        .unwrap();
    let report = snowflake_loadgen::run(config).await.unwrap();
    assert_eq!(report.requests_failed, 20);
    assert_eq!(
        report.errors.get("grpc_invalid_argument"),
        Some(&20),
        "{:?}",
        report.errors
    );
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wrong_protocol_is_counted_not_hung_on() {
    let service = Service::start().await;
    // Thrift bytes to the gRPC port, and to the HTTP port: errors, within the timeout.
    for addr in [service.grpc, service.http] {
        let config = BenchConfig::builder()
            .protocol(Protocol::Thrift)
            .addr(addr.to_string())
            .connections(1)
            .requests(3)
            .timeout(std::time::Duration::from_millis(500))
            .duration(std::time::Duration::from_secs(3))
            .build()
            .unwrap();
        let report = snowflake_loadgen::run(config).await.unwrap();
        assert_eq!(report.requests_ok, 0, "{addr}: {report}");
        assert!(report.errors_total > 0, "{addr}: {report}");
    }
    service.stop().await;
}

#[tokio::test]
async fn nothing_listening_fails_the_run_for_thrift_and_grpc() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    for protocol in [Protocol::Thrift, Protocol::Grpc] {
        let config = BenchConfig::builder()
            .protocol(protocol)
            .addr(format!("127.0.0.1:{port}"))
            .connections(2)
            .requests(10)
            .build()
            .unwrap();
        let err = snowflake_loadgen::run(config).await.unwrap_err();
        assert!(
            matches!(
                err,
                snowflake_loadgen::Error::Connect {
                    kind: std::io::ErrorKind::ConnectionRefused,
                    ..
                }
            ),
            "{protocol}: {err:?}"
        );
    }
}

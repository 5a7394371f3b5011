//! The gRPC API (SPEC §5) against the real server in-process: every method, every error,
//! health that follows the node's readiness, reflection, streaming, and IDs shared with HTTP.

use crate::support::{T, TestServer, config, get, id_of};
use snowflake_core::ManualClock;
use snowflake_server::grpc::pb::snowflake_client::SnowflakeClient;
use snowflake_server::grpc::pb::{
    DecodeRequest, GetInfoRequest, NextIdRequest, NextIdsRequest, StreamIdsRequest,
};
use snowflake_server::grpc::{SERVICE_NAME, STREAM_MAX_COUNT};
use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tonic::transport::Channel;
use tonic::{Code, Status};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

const EPOCH: u64 = 1_288_834_974_657;

/// Advances the manual clock 1 ms per real millisecond from an OS thread of its own, until
/// dropped. A tokio task would not do: a handler that has used up a millisecond's 4096 IDs spins
/// on its worker thread until the clock moves, and a ticker task queued behind it on that worker
/// would never run.
struct Ticker {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Ticker {
    fn start(server: &TestServer) -> Ticker {
        let stop = Arc::new(AtomicBool::new(false));
        let clock = server.clock.clone();
        let thread = std::thread::spawn({
            let stop = Arc::clone(&stop);
            move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(1));
                    clock.advance_ms(1);
                }
            }
        });
        Ticker {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn server() -> (TestServer, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.identity.datacenter_id = 3;
    config.identity.worker_id = 5;
    let server = TestServer::start(config, ManualClock::new(T)).await;
    server.wait_ready().await;
    (server, dir)
}

fn endpoint(server: &TestServer) -> String {
    let addr: SocketAddr = server.grpc_addr.expect("grpc on");
    format!("http://{addr}")
}

async fn channel(server: &TestServer) -> Channel {
    Channel::from_shared(endpoint(server))
        .expect("a valid URI")
        .connect()
        .await
        .expect("grpc connects")
}

async fn client(server: &TestServer) -> SnowflakeClient<Channel> {
    SnowflakeClient::connect(endpoint(server))
        .await
        .expect("grpc connects")
}

async fn health(server: &TestServer) -> HealthClient<Channel> {
    HealthClient::new(channel(server).await)
}

async fn check(health: &mut HealthClient<Channel>, service: &str) -> ServingStatus {
    health
        .check(HealthCheckRequest {
            service: service.into(),
        })
        .await
        .expect("health check answers")
        .into_inner()
        .status()
}

/// Polls (in real time, bounded) until both health names report `want`.
async fn wait_health(health: &mut HealthClient<Channel>, want: ServingStatus) {
    for _ in 0..300 {
        if check(health, "").await == want && check(health, SERVICE_NAME).await == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("health never became {want:?}");
}

fn assert_status(result: Result<impl std::fmt::Debug, Status>, code: Code, needle: &str) -> Status {
    let status = result.expect_err("the call fails");
    assert_eq!(status.code(), code, "{status:?}");
    assert!(
        status.message().contains(needle),
        "{needle:?} not in {:?}",
        status.message()
    );
    status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn next_id_next_ids_decode_and_info() {
    let (server, _dir) = server().await;
    let mut grpc = client(&server).await;

    let id = grpc
        .next_id(NextIdRequest {})
        .await
        .unwrap()
        .into_inner()
        .id;
    assert!(id > 0);
    assert_eq!((id as u64 >> 22) + EPOCH, T);
    assert_eq!((id >> 17) & 0x1F, 3);
    assert_eq!((id >> 12) & 0x1F, 5);

    let ids = grpc
        .next_ids(NextIdsRequest { count: 5 })
        .await
        .unwrap()
        .into_inner()
        .ids;
    assert_eq!(ids.len(), 5);
    assert!(ids[0] > id);
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");

    // The worked example of SPEC §2.
    let decoded = grpc
        .decode(DecodeRequest {
            id: 1_724_551_110_457_221_119,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(decoded.id, 1_724_551_110_457_221_119);
    assert_eq!(decoded.timestamp_ms, 1_700_000_000_000);
    assert_eq!(
        (decoded.datacenter_id, decoded.worker_id, decoded.sequence),
        (7, 13, 4095)
    );
    assert_eq!(decoded.time, "2023-11-14T22:13:20.000Z");

    let mine = grpc
        .decode(DecodeRequest { id: ids[4] })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(mine.timestamp_ms, T as i64);
    assert_eq!((mine.datacenter_id, mine.worker_id), (3, 5));
    for edge in [0, i64::MAX] {
        let decoded = grpc.decode(DecodeRequest { id: edge }).await.unwrap();
        assert_eq!(decoded.into_inner().id, edge);
    }

    let info = grpc.get_info(GetInfoRequest {}).await.unwrap().into_inner();
    assert_eq!((info.datacenter_id, info.worker_id), (3, 5));
    assert_eq!(info.epoch_ms, EPOCH as i64);
    assert_eq!(info.timestamp_ms, T as i64);
    assert_eq!(info.max_batch, 100_000);
    assert!(info.ready);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_arguments_are_invalid_argument_naming_the_value() {
    let (server, _dir) = server().await;
    let mut grpc = client(&server).await;
    for (count, message) in [
        (0, "invalid count: expected 1..=100000, found 0"),
        (100_001, "invalid count: expected 1..=100000, found 100001"),
        (
            u32::MAX,
            "invalid count: expected 1..=100000, found 4294967295",
        ),
    ] {
        assert_status(
            grpc.next_ids(NextIdsRequest { count }).await,
            Code::InvalidArgument,
            message,
        );
    }
    for id in [-1, i64::MIN] {
        let status = assert_status(
            grpc.decode(DecodeRequest { id }).await,
            Code::InvalidArgument,
            &id.to_string(),
        );
        assert!(
            status.message().contains("9223372036854775807"),
            "the range is named: {status:?}"
        );
    }
    for (request, message) in [
        (
            StreamIdsRequest {
                count: 0,
                chunk_size: 0,
            },
            "invalid count: expected 1..=100000000, found 0".to_owned(),
        ),
        (
            StreamIdsRequest {
                count: STREAM_MAX_COUNT + 1,
                chunk_size: 0,
            },
            format!(
                "invalid count: expected 1..={STREAM_MAX_COUNT}, found {}",
                STREAM_MAX_COUNT + 1
            ),
        ),
        (
            StreamIdsRequest {
                count: 10,
                chunk_size: 100_001,
            },
            "invalid chunk_size: expected 1..=100000 (0 means 4096), found 100001".to_owned(),
        ),
    ] {
        assert_status(
            grpc.stream_ids(request).await,
            Code::InvalidArgument,
            &message,
        );
    }
    // Nothing was issued by the refusals: the next ID is the first.
    let id = grpc
        .next_id(NextIdRequest {})
        .await
        .unwrap()
        .into_inner()
        .id;
    assert_eq!(id & 0xFFF, 0);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clock_stepped_back_is_unavailable_and_health_follows() {
    let (server, _dir) = server().await;
    let mut grpc = client(&server).await;
    let mut health = health(&server).await;
    wait_health(&mut health, ServingStatus::Serving).await;
    let mut watch = health
        .watch(HealthCheckRequest {
            service: SERVICE_NAME.into(),
        })
        .await
        .unwrap()
        .into_inner();
    let first = watch.message().await.unwrap().unwrap();
    assert_eq!(first.status(), ServingStatus::Serving);

    let before = grpc
        .next_id(NextIdRequest {})
        .await
        .unwrap()
        .into_inner()
        .id;
    server.clock.set_ms(T - 5000);
    let status = assert_status(
        grpc.next_id(NextIdRequest {}).await,
        Code::Unavailable,
        "clock moved backwards",
    );
    assert!(status.message().contains("5000 ms behind"), "{status:?}");
    assert_eq!(status.metadata().get("retry-after").unwrap(), "5");
    assert_status(
        grpc.next_ids(NextIdsRequest { count: 3 }).await,
        Code::Unavailable,
        "clock moved backwards",
    );
    assert_status(
        grpc.stream_ids(StreamIdsRequest {
            count: 10,
            chunk_size: 0,
        })
        .await,
        Code::Unavailable,
        "clock moved backwards",
    );
    wait_health(&mut health, ServingStatus::NotServing).await;
    let changed = tokio::time::timeout(Duration::from_secs(2), watch.message())
        .await
        .expect("the watch sees the change")
        .unwrap()
        .unwrap();
    assert_eq!(changed.status(), ServingStatus::NotServing);
    // Decoding and info need no clock.
    grpc.decode(DecodeRequest { id: before }).await.unwrap();
    assert!(
        !grpc
            .get_info(GetInfoRequest {})
            .await
            .unwrap()
            .into_inner()
            .ready
    );

    server.clock.set_ms(T + 1);
    wait_health(&mut health, ServingStatus::Serving).await;
    let changed = tokio::time::timeout(Duration::from_secs(2), watch.message())
        .await
        .expect("the watch sees the change")
        .unwrap()
        .unwrap();
    assert_eq!(changed.status(), ServingStatus::Serving);
    let after = grpc
        .next_id(NextIdRequest {})
        .await
        .unwrap()
        .into_inner()
        .id;
    assert!(after > before, "{after} <= {before}");
    server.stop().await;
}

/// A clock a little behind (within `--max-backwards-wait-ms`) is waited out on `NextId` as on
/// the other doors: the call is answered with a later ID once the clock has caught up, after a
/// wait counted by the metric (the fast path tries the node without waiting first, then waits
/// where that attempt left off).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_regression_is_waited_out_on_next_id() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.clock.max_backwards_wait_ms = 1000;
    let server = TestServer::start(config, ManualClock::new(T)).await;
    server.wait_ready().await;
    let mut grpc = client(&server).await;
    let before = grpc
        .next_id(NextIdRequest {})
        .await
        .unwrap()
        .into_inner()
        .id;
    server.clock.set_ms(T - 20);
    let clock = server.clock.clone();
    let catch_up = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        clock.set_ms(T + 1);
    });
    let started = std::time::Instant::now();
    let after = grpc
        .next_id(NextIdRequest {})
        .await
        .unwrap()
        .into_inner()
        .id;
    let waited = started.elapsed();
    catch_up.join().unwrap();
    assert!(after > before, "{after} <= {before}");
    assert!(
        waited >= Duration::from_millis(90),
        "answered after {waited:?}"
    );
    let text = server.get("/metrics").await.body;
    let waits: u64 = text
        .lines()
        .find_map(|line| line.strip_prefix("snowflake_clock_backwards_waits_total "))
        .expect("the wait counter")
        .parse()
        .unwrap();
    assert!(waits >= 1, "{text}");
    assert!(
        text.contains("snowflake_requests_total{protocol=\"grpc\",route=\"/snowflake.v1.Snowflake/NextId\",status=\"0\"} 2"),
        "{text}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_of_an_unknown_service_is_not_found() {
    let (server, _dir) = server().await;
    let mut health = health(&server).await;
    let status = health
        .check(HealthCheckRequest {
            service: "no.such.Service".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_of_20000_ids_arrives_in_order_without_duplicates() {
    let (server, _dir) = server().await;
    let _ticker = Ticker::start(&server);
    let mut grpc = client(&server).await;
    for (chunk_size, messages) in [(0, 5), (1000, 20), (20_000, 1)] {
        let mut stream = grpc
            .stream_ids(StreamIdsRequest {
                count: 20_000,
                chunk_size,
            })
            .await
            .unwrap()
            .into_inner();
        let mut ids = Vec::new();
        let mut sizes = Vec::new();
        while let Some(message) = stream.message().await.unwrap() {
            sizes.push(message.ids.len());
            ids.extend(message.ids);
        }
        assert_eq!(sizes.len(), messages, "chunk_size {chunk_size}: {sizes:?}");
        if chunk_size == 0 {
            assert_eq!(sizes, [4096, 4096, 4096, 4096, 3616]);
        }
        assert_eq!(ids.len(), 20_000);
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "not strictly increasing"
        );
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_over_grpc_and_http_never_collide() {
    let (server, _dir) = server().await;
    let _ticker = Ticker::start(&server);
    let addr = server.addr;
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..4 {
        let mut grpc = client(&server).await;
        tasks.spawn(async move {
            let mut ids = Vec::new();
            for round in 0..50 {
                match (worker + round) % 4 {
                    0 => ids.push(
                        grpc.next_id(NextIdRequest {})
                            .await
                            .unwrap()
                            .into_inner()
                            .id as u64,
                    ),
                    1 => ids.extend(
                        grpc.next_ids(NextIdsRequest { count: 100 })
                            .await
                            .unwrap()
                            .into_inner()
                            .ids
                            .into_iter()
                            .map(|id| id as u64),
                    ),
                    2 => ids.push(id_of(&get(addr, "/v1/id", &[]).await)),
                    _ => {
                        let reply = get(addr, "/v1/ids?count=100", &[]).await;
                        ids.extend(
                            reply.json()["ids"]
                                .as_array()
                                .unwrap()
                                .iter()
                                .map(|v| v.as_str().unwrap().parse::<u64>().unwrap()),
                        );
                    }
                }
            }
            ids
        });
    }
    let mut all = Vec::new();
    while let Some(ids) = tasks.join_next().await {
        all.extend(ids.unwrap());
    }
    // 4 workers × 50 rounds: 100 single IDs and 100 batches of 100.
    assert_eq!(all.len(), 100 + 100 * 100);
    let unique: HashSet<u64> = all.iter().copied().collect();
    assert_eq!(unique.len(), all.len(), "duplicate IDs across protocols");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_grpc_calls_by_method_and_code() {
    let (server, _dir) = server().await;
    let mut grpc = client(&server).await;
    grpc.next_ids(NextIdsRequest { count: 10 }).await.unwrap();
    grpc.next_ids(NextIdsRequest { count: 0 })
        .await
        .unwrap_err();
    grpc.next_id(NextIdRequest {}).await.unwrap();
    server.clock.set_ms(T - 5000);
    grpc.next_id(NextIdRequest {}).await.unwrap_err();
    let text = server.get("/metrics").await.body;
    for line in [
        "snowflake_ids_issued_total{protocol=\"grpc\"} 11",
        "snowflake_requests_total{protocol=\"grpc\",route=\"/snowflake.v1.Snowflake/NextIds\",status=\"0\"} 1",
        "snowflake_requests_total{protocol=\"grpc\",route=\"/snowflake.v1.Snowflake/NextIds\",status=\"3\"} 1",
        "snowflake_requests_total{protocol=\"grpc\",route=\"/snowflake.v1.Snowflake/NextId\",status=\"0\"} 1",
        "snowflake_requests_total{protocol=\"grpc\",route=\"/snowflake.v1.Snowflake/NextId\",status=\"14\"} 1",
        // The fast path (NextId) and tonic's (NextIds) both observe their latency.
        "snowflake_request_duration_seconds_count{protocol=\"grpc\",route=\"/snowflake.v1.Snowflake/NextId\"} 2\n",
        "snowflake_request_duration_seconds_count{protocol=\"grpc\",route=\"/snowflake.v1.Snowflake/NextIds\"} 2\n",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    server.clock.set_ms(T);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_lists_the_services() {
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

    let (server, _dir) = server().await;
    let mut reflection = ServerReflectionClient::new(channel(&server).await);
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut replies = reflection
        .server_reflection_info(futures_util::stream::iter([request]))
        .await
        .unwrap()
        .into_inner();
    let reply = replies.message().await.unwrap().unwrap();
    let Some(MessageResponse::ListServicesResponse(list)) = reply.message_response else {
        panic!("not a service list: {reply:?}");
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    for name in [SERVICE_NAME, "grpc.health.v1.Health"] {
        assert!(names.iter().any(|n| n == name), "{name} not in {names:?}");
    }
    server.stop().await;
}

/// Clients that still ask the older `grpc.reflection.v1alpha` service (grpcurl before 1.9,
/// many IDE plugins) get the same answers as `v1` clients, not UNIMPLEMENTED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_answers_v1alpha_clients_too() {
    use tonic_reflection::pb::v1alpha::ServerReflectionRequest;
    use tonic_reflection::pb::v1alpha::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1alpha::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1alpha::server_reflection_response::MessageResponse;

    let (server, _dir) = server().await;
    let mut reflection = ServerReflectionClient::new(channel(&server).await);
    let requests = [
        MessageRequest::ListServices(String::new()),
        MessageRequest::FileContainingSymbol(SERVICE_NAME.to_owned()),
    ]
    .map(|message| ServerReflectionRequest {
        host: String::new(),
        message_request: Some(message),
    });
    let mut replies = reflection
        .server_reflection_info(futures_util::stream::iter(requests))
        .await
        .expect("v1alpha is served")
        .into_inner();
    let reply = replies.message().await.unwrap().unwrap();
    let Some(MessageResponse::ListServicesResponse(list)) = reply.message_response else {
        panic!("not a service list: {reply:?}");
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    for name in [
        SERVICE_NAME,
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
    ] {
        assert!(names.iter().any(|n| n == name), "{name} not in {names:?}");
    }
    let reply = replies.message().await.unwrap().unwrap();
    let Some(MessageResponse::FileDescriptorResponse(files)) = reply.message_response else {
        panic!("not a file descriptor: {reply:?}");
    };
    assert!(!files.file_descriptor_proto.is_empty());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_watches_and_running_streams_promptly() {
    let (server, _dir) = server().await;
    let _ticker = Ticker::start(&server);
    let mut health = health(&server).await;
    let mut watch = health
        .watch(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        watch.message().await.unwrap().unwrap().status(),
        ServingStatus::Serving
    );
    let mut grpc = client(&server).await;
    let mut stream = grpc
        .stream_ids(StreamIdsRequest {
            count: STREAM_MAX_COUNT,
            chunk_size: 0,
        })
        .await
        .unwrap()
        .into_inner();
    stream.message().await.unwrap().unwrap();
    let reader = tokio::spawn(async move {
        let mut last = 0;
        loop {
            match stream.message().await {
                Ok(Some(message)) => {
                    assert!(message.ids[0] > last);
                    last = *message.ids.last().unwrap();
                }
                Ok(None) => return None,
                Err(status) => return Some(status),
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The default shutdown timeout is 10 s; neither the watch nor the stream may hold it up.
    tokio::time::timeout(Duration::from_secs(5), server.stop())
        .await
        .expect("stopped promptly");
    let ended = tokio::time::timeout(Duration::from_secs(5), reader)
        .await
        .expect("the stream ended")
        .unwrap();
    let status = ended.expect("the stream was cut with a status");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(status.message().contains("shutting down"), "{status:?}");
}

fn grpc_ids_issued(metrics: &str) -> u64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix("snowflake_ids_issued_total{protocol=\"grpc\"} "))
        .map_or(0, |n| n.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_nobody_reads_stops_generating() {
    let (server, _dir) = server().await;
    let _ticker = Ticker::start(&server);
    let mut grpc = client(&server).await;
    let mut stream = grpc
        .stream_ids(StreamIdsRequest {
            count: STREAM_MAX_COUNT,
            chunk_size: 0,
        })
        .await
        .unwrap()
        .into_inner();
    stream.message().await.unwrap().unwrap();
    // The clock runs at 4096 IDs per ms; without back-pressure the server would issue millions
    // of IDs while this waits. With it, generation stops once the HTTP/2 windows are full:
    // wait (bounded) until two readings 300 ms apart agree.
    let mut stalled = grpc_ids_issued(&server.get("/metrics").await.body);
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let later = grpc_ids_issued(&server.get("/metrics").await.body);
        if later == stalled {
            break;
        }
        assert!(later < 1_000_000, "{later} IDs issued ahead of the reader");
        stalled = later;
    }
    assert_eq!(
        stalled,
        grpc_ids_issued(&server.get("/metrics").await.body),
        "still generating for a reader that does not read"
    );
    assert!(
        stalled < 1_000_000,
        "{stalled} IDs issued ahead of the reader"
    );
    // Reading resumes the stream where it stopped.
    let next = stream.message().await.unwrap().unwrap();
    assert_eq!(next.ids.len(), 4096);
    drop(stream);
    server.stop().await;
}

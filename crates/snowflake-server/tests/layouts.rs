//! Layouts at the front doors (SPEC §9), against the real server in-process: a `js-safe` node's
//! HTTP, gRPC and RESP answers follow its widths; `format=number`; ID ranges of a time window.

use crate::support::{T, TestServer, config, get};
use hyper::StatusCode;
use snowflake_core::{Layout, MAX_SAFE_INTEGER, ManualClock, SnowflakeId};
use snowflake_server::grpc::pb::snowflake_client::SnowflakeClient;
use snowflake_server::grpc::pb::{DecodeRequest, GetInfoRequest, RangeRequest};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tonic::Code;

/// A node under `layout` with the pair (3, 15), ready.
async fn server(layout: Layout) -> (TestServer, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.layout = layout;
    config.identity.datacenter_id = 3;
    config.identity.worker_id = 15;
    let server = TestServer::start(config, ManualClock::new(T)).await;
    server.wait_ready().await;
    (server, dir)
}

async fn grpc(server: &TestServer) -> SnowflakeClient<tonic::transport::Channel> {
    let addr = server.grpc_addr.expect("grpc on");
    SnowflakeClient::connect(format!("http://{addr}"))
        .await
        .expect("grpc connects")
}

/// Sends one RESP command (inline) and reads one reply line.
async fn resp(stream: &mut TcpStream, command: &str) -> String {
    stream
        .write_all(format!("{command}\r\n").as_bytes())
        .await
        .unwrap();
    let mut reply = Vec::new();
    let mut byte = [0u8; 1];
    while !reply.ends_with(b"\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut byte))
            .await
            .expect("a reply within 5 s")
            .unwrap();
        assert_eq!(n, 1, "connection closed after {reply:?}");
        reply.push(byte[0]);
    }
    String::from_utf8(reply).unwrap().trim_end().to_owned()
}

/// The IDs of a JSON answer whose IDs are numbers.
fn numbers(value: &serde_json::Value) -> Vec<u64> {
    value
        .as_array()
        .expect("an array")
        .iter()
        .map(|v| v.as_u64().expect("a JSON number"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_js_safe_node_shows_its_layout_and_decodes_with_it() {
    let (server, _dir) = server(Layout::JS_SAFE).await;
    let info = server.get("/v1/info").await.json();
    assert_eq!(
        info["layout"],
        serde_json::json!({
            "name": "js-safe",
            "timestamp_bits": 41,
            "datacenter_bits": 2,
            "worker_bits": 4,
            "sequence_bits": 6,
            "epoch_ms": 1_288_834_974_657_u64,
            "max_id": "9007199254740991",
        })
    );
    assert_eq!(
        server.get("/v1/status").await.json()["layout"]["max_id"],
        "9007199254740991"
    );

    // An issued ID decodes with the node's widths.
    let id: u64 = server.get("/v1/id").await.json()["id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(id <= MAX_SAFE_INTEGER);
    let decoded = server.get(&format!("/v1/decode/{id}")).await.json();
    assert_eq!(decoded["timestamp_ms"], T);
    assert_eq!(
        (
            decoded["datacenter_id"].clone(),
            decoded["worker_id"].clone()
        ),
        (3.into(), 15.into())
    );

    // Above the layout's largest ID: refused, not decoded past the layout's end.
    for path in [
        "/v1/decode/9007199254740992",
        "/v1/decode/9223372036854775807",
    ] {
        let reply = server.get(path).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{path}");
        assert!(
            reply
                .error()
                .starts_with("invalid snowflake id: expected 0..=9007199254740991, found"),
            "{}",
            reply.error()
        );
    }
    let page = server.get("/?decode=9007199254740992").await.body;
    assert!(page.contains("expected 0..=9007199254740991"), "{page}");
    assert!(page.contains("<b id=\"layout\">js-safe</b>"));

    // gRPC: GetInfo and Decode.
    let mut grpc = grpc(&server).await;
    let layout = grpc
        .get_info(GetInfoRequest {})
        .await
        .unwrap()
        .into_inner()
        .layout
        .expect("a layout");
    assert_eq!(
        (
            layout.name.as_str(),
            layout.timestamp_bits,
            layout.datacenter_bits,
            layout.worker_bits,
            layout.sequence_bits,
            layout.epoch_ms,
            layout.max_id
        ),
        (
            "js-safe",
            41,
            2,
            4,
            6,
            1_288_834_974_657,
            9_007_199_254_740_991
        )
    );
    let fields = grpc
        .decode(DecodeRequest { id: id as i64 })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((fields.datacenter_id, fields.worker_id), (3, 15));
    let status = grpc
        .decode(DecodeRequest {
            id: 9_007_199_254_740_992,
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(
        status.message(),
        "invalid snowflake id: expected 0..=9007199254740991, found 9007199254740992"
    );

    // RESP: SNOWFLAKE.DECODE refuses the same.
    let mut stream = TcpStream::connect(server.resp_addr.unwrap()).await.unwrap();
    assert_eq!(
        resp(&mut stream, "SNOWFLAKE.DECODE 9007199254740992").await,
        "-ERR invalid snowflake id: expected 0..=9007199254740991, found 9007199254740992"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resp_incrby_takes_up_to_one_js_safe_millisecond_and_no_more() {
    let (server, _dir) = server(Layout::JS_SAFE).await;
    server.tick();
    let mut stream = TcpStream::connect(server.resp_addr.unwrap()).await.unwrap();
    assert_eq!(
        resp(&mut stream, "INCRBY k 65").await,
        "-ERR invalid increment: expected 1..=64 (consecutive IDs of one millisecond), found \"65\""
    );
    // 64 consecutive IDs of one millisecond: the reply is the last, its sequence 63.
    for _ in 0..3 {
        let reply = resp(&mut stream, "INCRBY k 64").await;
        let last: u64 = reply.strip_prefix(':').expect(&reply).parse().unwrap();
        let parts = Layout::JS_SAFE
            .decode(SnowflakeId::try_from(last).unwrap())
            .unwrap();
        assert_eq!(
            (parts.datacenter_id, parts.worker_id, parts.sequence),
            (3, 15, 63)
        );
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn format_number_writes_json_numbers_under_js_safe() {
    let (server, _dir) = server(Layout::JS_SAFE).await;
    server.tick();
    let one = server.get("/v1/id?format=number").await;
    assert_eq!(one.status, StatusCode::OK, "{one:?}");
    assert!(one.body.starts_with("{\"id\":") && !one.body.starts_with("{\"id\":\""));
    let id = one.json()["id"].as_u64().expect("a JSON number");
    assert!(id <= MAX_SAFE_INTEGER);
    // format=string is the default, spelled out.
    assert!(server.get("/v1/id?format=string").await.json()["id"].is_string());
    // Small batches, and large ones formatted a piece at a time (above 64 per millisecond).
    for count in [1, 10, 64, 1000] {
        let reply = server
            .get(&format!("/v1/ids?count={count}&format=number"))
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{count}: {reply:?}");
        let ids = numbers(&reply.json()["ids"]);
        assert_eq!(ids.len(), count);
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
        assert!(ids.iter().all(|&id| id <= MAX_SAFE_INTEGER && id > 0));
        // Every ID is the decimal the server would have sent as a string.
        let reprinted: Vec<String> = ids.iter().map(u64::to_string).collect();
        assert!(
            reprinted
                .iter()
                .all(|text| reply.body.contains(text.as_str()))
        );
        assert_eq!(
            reply.headers["content-length"].to_str().unwrap(),
            reply.body.len().to_string()
        );
    }
    let reply = server.get("/v1/ids?format=number&count=3").await;
    assert_eq!(numbers(&reply.json()["ids"]).len(), 3);
    let bad = server.get("/v1/ids?count=3&format=numbers").await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        bad.error(),
        "invalid format: expected string or number, found \"numbers\""
    );
    let bad = server.get("/v1/id?format=").await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn format_number_is_refused_where_ids_outgrow_javascript_numbers() {
    let (server, _dir) = server(Layout::TWITTER).await;
    let info = server.get("/v1/info").await.json();
    assert_eq!(info["layout"]["name"], "twitter");
    assert_eq!(info["layout"]["max_id"], "9223372036854775807");
    for path in ["/v1/id?format=number", "/v1/ids?count=3&format=number"] {
        let reply = server.get(path).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{path}");
        assert_eq!(
            reply.error(),
            "format=number needs a layout whose ids all fit a JavaScript number (at most \
             9007199254740991), and this node's layout twitter has ids up to \
             9223372036854775807; read the ids as strings (format=string, the default), or run \
             a fleet under --layout js-safe"
        );
    }
    // Nothing was issued for the refused requests: the next ID is the first of T.
    let next = server.get("/v1/id?format=string").await;
    let id: u64 = next.json()["id"].as_str().unwrap().parse().unwrap();
    assert_eq!(
        Layout::TWITTER
            .decode(SnowflakeId::try_from(id).unwrap())
            .unwrap()
            .sequence,
        0,
        "{}",
        next.body
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranges_answer_every_door_and_name_the_bad_bound() {
    let (server, _dir) = server(Layout::JS_SAFE).await;
    let expected = Layout::JS_SAFE.id_range(T, T + 999).unwrap();
    let want = serde_json::json!({
        "min_id": expected.min_id.to_string(),
        "max_id": expected.max_id.to_string(),
    });
    // Unix ms, RFC 3339 with Z, with an escaped and an unescaped + offset.
    for query in [
        format!("from={T}&to={}", T + 999),
        "from=2026-09-21T14:13:20Z&to=2026-09-21T14:13:20.999Z".to_owned(),
        "from=2026-09-21T16:13:20%2B02:00&to=2026-09-21T14:13:20.999Z".to_owned(),
        "from=2026-09-21T16:13:20+02:00&to=2026-09-21T15:13:20.999%2b01:00".to_owned(),
    ] {
        let reply = server.get(&format!("/v1/range?{query}")).await;
        assert_eq!(reply.status, StatusCode::OK, "{query}: {reply:?}");
        assert_eq!(reply.json(), want, "{query}");
    }
    for (query, message) in [
        (
            "from=1700000000000".to_owned(),
            "missing query parameter from or to".to_owned(),
        ),
        (
            format!("from={}&to={T}", T + 1),
            format!("invalid range: from {} is after to {T} (unix ms)", T + 1),
        ),
        (
            format!("from=5&to={T}"),
            "invalid from (unix ms): expected 1288834974657..=3487858230208, found 5".to_owned(),
        ),
        (
            format!("from={T}&to=2090-01-01T00:00:00Z"),
            "invalid to (unix ms): expected 1288834974657..=3487858230208, found 3786912000000 \
             (2090-01-01T00:00:00Z)"
                .to_owned(),
        ),
        (
            format!("from=soon&to={T}"),
            "invalid from: expected unix milliseconds or an RFC 3339 time".to_owned(),
        ),
        (
            "from=%FF&to=1".to_owned(),
            "invalid from: expected unix milliseconds".to_owned(),
        ),
        ("from=1&from=2&to=3".to_owned(), "invalid query".to_owned()),
    ] {
        let reply = server.get(&format!("/v1/range?{query}")).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{query}");
        assert!(
            reply.error().starts_with(&message),
            "{query}: {}",
            reply.error()
        );
    }

    // gRPC Range.
    let mut grpc = grpc(&server).await;
    let range = grpc
        .range(RangeRequest {
            from_ms: T as i64,
            to_ms: T as i64 + 999,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (range.min_id, range.max_id),
        (expected.min_id.as_i64(), expected.max_id.as_i64())
    );
    for (from_ms, to_ms, message) in [
        (
            T as i64 + 1,
            T as i64,
            format!("invalid range: from {} is after to {T} (unix ms)", T + 1),
        ),
        (
            -1,
            T as i64,
            "invalid from (unix ms): expected 1288834974657..=3487858230208, found -1".to_owned(),
        ),
        (
            T as i64,
            i64::MAX,
            format!(
                "invalid to (unix ms): expected 1288834974657..=3487858230208, found {}",
                i64::MAX
            ),
        ),
    ] {
        let status = grpc
            .range(RangeRequest { from_ms, to_ms })
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument);
        assert_eq!(status.message(), message);
    }
    server
        .wait_for_metrics(&[
            "snowflake_requests_total{protocol=\"grpc\",route=\"/snowflake.v1.Snowflake/Range\",status=\"0\"} 1\n",
            "snowflake_requests_total{protocol=\"http\",route=\"/v1/range\",status=\"200\"} 4\n",
        ])
        .await;
    server.stop().await;
}

/// A small deterministic generator (splitmix64): the seed is printed, so a failure reproduces
/// with `SNOWFLAKE_TEST_SEED`.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// For random windows and random issued IDs: `min_id ≤ id ≤ max_id` exactly when the ID's time
/// lies in the window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_range_holds_an_issued_id_exactly_when_its_time_is_in_the_window() {
    let seed = std::env::var("SNOWFLAKE_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("SNOWFLAKE_TEST_SEED={seed}");
    let mut rng = Rng(seed);
    for layout in [Layout::JS_SAFE, Layout::TWITTER] {
        let (server, _dir) = server(layout).await;
        // IDs issued at random times (the clock only moves forward), some in bursts of one
        // millisecond.
        let mut issued = Vec::new();
        let mut now = T;
        for _ in 0..120 {
            now += rng.below(40);
            server.clock.set_ms(now);
            let count = 1 + rng.below(3);
            let reply = server.get(&format!("/v1/ids?count={count}")).await;
            assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
            for id in reply.json()["ids"].as_array().unwrap() {
                let id: u64 = id.as_str().unwrap().parse().unwrap();
                let time = layout
                    .decode(SnowflakeId::try_from(id).unwrap())
                    .unwrap()
                    .timestamp_ms;
                issued.push((id, time));
            }
        }
        let (first, last) = (T, now);
        for _ in 0..60 {
            // Windows with ends on, next to, or between issued times.
            let mut end = || match rng.below(3) {
                0 => issued[rng.below(issued.len() as u64) as usize].1,
                1 => issued[rng.below(issued.len() as u64) as usize].1 + rng.below(3) - 1,
                _ => first - 50 + rng.below(last - first + 100),
            };
            let (a, b) = (end(), end());
            let (from, to) = (a.min(b), a.max(b));
            let reply = get(server.addr, &format!("/v1/range?from={from}&to={to}"), &[]).await;
            assert_eq!(reply.status, StatusCode::OK, "seed {seed}: {reply:?}");
            let range = reply.json();
            let min: u64 = range["min_id"].as_str().unwrap().parse().unwrap();
            let max: u64 = range["max_id"].as_str().unwrap().parse().unwrap();
            for &(id, time) in &issued {
                assert_eq!(
                    (min..=max).contains(&id),
                    (from..=to).contains(&time),
                    "seed {seed}, layout {}: id {id} at {time}, window {from}..={to} -> \
                     {min}..={max}",
                    layout.name()
                );
            }
        }
        server.stop().await;
    }
}

//! The gRPC door at the HTTP/2 frame level, with a bare `h2` client: `NextId` bodies of every
//! shape (the fast path's answer, and tonic's for the rest), and calls the request timeout cuts,
//! each counted and observed.

use crate::support::{T, TestServer, config};
use snowflake_core::ManualClock;
use std::time::Duration;

async fn server() -> (TestServer, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.identity.datacenter_id = 3;
    config.identity.worker_id = 5;
    let server = TestServer::start(config, ManualClock::new(T)).await;
    server.wait_ready().await;
    (server, dir)
}

/// What a raw HTTP/2 `NextId` call got back: the response headers, the body bytes and the
/// trailers (none for a trailers-only answer).
struct RawAnswer {
    headers: http::HeaderMap,
    body: Vec<u8>,
    trailers: Option<http::HeaderMap>,
}

impl RawAnswer {
    /// `grpc-status` and `grpc-message`, from the trailers or (trailers-only) the headers.
    fn status(&self) -> (String, String) {
        let from = self.trailers.as_ref().unwrap_or(&self.headers);
        let get = |name: &str| {
            from.get(name)
                .map(|v| v.to_str().unwrap().to_owned())
                .unwrap_or_default()
        };
        (get("grpc-status"), percent_decode(&get("grpc-message")))
    }
}

/// `grpc-message` is percent-encoded (gRPC over HTTP/2).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A `NextId` call made with a bare HTTP/2 client, so that the body and headers can be anything.
async fn raw_next_id(server: &TestServer, headers: &[(&str, &str)], body: Vec<u8>) -> RawAnswer {
    let tcp = tokio::net::TcpStream::connect(server.grpc_addr.unwrap())
        .await
        .unwrap();
    let (mut client, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let mut request = http::Request::builder()
        .method("POST")
        .uri(format!(
            "http://{}/snowflake.v1.Snowflake/NextId",
            server.grpc_addr.unwrap()
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let (response, mut send) = client
        .send_request(request.body(()).unwrap(), false)
        .unwrap();
    // The server may answer from the headers alone (an unsupported grpc-encoding) and end the
    // stream before the body is sent: the send then fails, and the answer is still there.
    let _ = send.send_data(body.into(), true);
    let response = response.await.unwrap();
    assert_eq!(response.status(), 200);
    let (parts, mut recv) = response.into_parts();
    let mut body = Vec::new();
    while let Some(chunk) = recv.data().await {
        let chunk = chunk.unwrap();
        let _ = recv.flow_control().release_capacity(chunk.len());
        body.extend_from_slice(&chunk);
    }
    let trailers = recv.trailers().await.unwrap();
    RawAnswer {
        headers: parts.headers,
        body,
        trailers,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn next_id_frames_of_every_shape_get_the_grpc_answer() {
    use prost::Message;
    let (server, _dir) = server().await;

    // One empty message: an ID in one frame, then grpc-status 0.
    let ok = raw_next_id(&server, &[], vec![0, 0, 0, 0, 0]).await;
    assert_eq!(ok.status().0, "0");
    assert_eq!(ok.headers.get("content-type").unwrap(), "application/grpc");
    assert_eq!(ok.body[0], 0, "uncompressed");
    let len = u32::from_be_bytes(ok.body[1..5].try_into().unwrap()) as usize;
    assert_eq!(ok.body.len(), 5 + len);
    let id = snowflake_server::grpc::pb::NextIdResponse::decode(&ok.body[5..])
        .unwrap()
        .id;
    assert_eq!(id >> 12 & 0x3ff, (3 << 5) | 5, "datacenter 3, worker 5");

    // Whatever is not one plain message gets tonic's own answers, and never an ID.
    // Headers, body, the grpc-status expected and a word of its message.
    type Case<'a> = (&'a [(&'a str, &'a str)], Vec<u8>, &'a str, &'a str);
    let cases: [Case<'_>; 4] = [
        (&[], vec![], "13", "Missing request message"),
        (&[], vec![1, 0, 0, 0, 0], "13", "compressed"),
        (
            &[],
            {
                let mut big = vec![0, 0, 0, 0x40, 1];
                big.resize(5 + 0x4001, 0);
                big
            },
            "11",
            "too large",
        ),
        (
            &[("grpc-encoding", "gzip")],
            vec![0, 0, 0, 0, 0],
            "12",
            "gzip",
        ),
    ];
    for (headers, body, code, needle) in cases {
        let answer = raw_next_id(&server, headers, body).await;
        let (status, message) = answer.status();
        assert_eq!(status, code, "{message}");
        assert!(message.contains(needle), "{needle:?} not in {message:?}");
        assert!(answer.body.is_empty(), "no ID with an error");
    }

    // Each is counted with its code (tonic answered them before our handler ran).
    let text = server.get("/metrics").await.body;
    for (code, n) in [("13", 2), ("11", 1), ("12", 1)] {
        let line = format!(
            "snowflake_requests_total{{protocol=\"grpc\",route=\"/snowflake.v1.Snowflake/NextId\",status=\"{code}\"}} {n}\n"
        );
        assert!(text.contains(&line), "missing {line:?} in\n{text}");
    }
    assert!(
        text.contains("snowflake_request_duration_seconds_count{protocol=\"grpc\",route=\"/snowflake.v1.Snowflake/NextId\"} 5\n"),
        "{text}"
    );
    // The node cannot issue: UNAVAILABLE with the reason and retry-after, trailers-only.
    server.clock.set_ms(T - 5_000);
    let refused = raw_next_id(&server, &[], vec![0, 0, 0, 0, 0]).await;
    assert!(refused.trailers.is_none(), "trailers-only");
    let (status, message) = refused.status();
    assert_eq!(status, "14", "{message}");
    assert!(message.contains("backwards"), "{message}");
    assert!(refused.headers.get("retry-after").is_some());
}

/// A call the request timeout cuts (its message never comes) is answered `CANCELLED`, and
/// counted and observed like any other: on the fast path (`NextId`) and on tonic's (`NextIds`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cut_by_the_request_timeout_is_counted_and_observed() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.limits.request_timeout = Duration::from_millis(300);
    let server = TestServer::start(config, ManualClock::new(T)).await;
    server.wait_ready().await;
    let addr = server.grpc_addr.unwrap();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut h2, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let mut unsent = Vec::new();
    for method in ["NextId", "NextIds"] {
        let request = http::Request::builder()
            .method("POST")
            .uri(format!("http://{addr}/snowflake.v1.Snowflake/{method}"))
            .header("content-type", "application/grpc")
            .body(())
            .unwrap();
        let (response, body_never_sent) = h2.send_request(request, false).unwrap();
        unsent.push(body_never_sent);
        let response = tokio::time::timeout(Duration::from_secs(5), response)
            .await
            .expect("answered within the request timeout")
            .unwrap();
        assert_eq!(
            response.headers().get("grpc-status").unwrap(),
            "1",
            "{method}"
        );
    }
    let text = server.get("/metrics").await.body;
    for line in [
        "snowflake_requests_total{protocol=\"grpc\",route=\"/snowflake.v1.Snowflake/NextId\",status=\"1\"} 1\n",
        "snowflake_requests_total{protocol=\"grpc\",route=\"/snowflake.v1.Snowflake/NextIds\",status=\"1\"} 1\n",
        "snowflake_request_duration_seconds_count{protocol=\"grpc\",route=\"/snowflake.v1.Snowflake/NextId\"} 1\n",
        "snowflake_request_duration_seconds_count{protocol=\"grpc\",route=\"/snowflake.v1.Snowflake/NextIds\"} 1\n",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    server.stop().await;
}

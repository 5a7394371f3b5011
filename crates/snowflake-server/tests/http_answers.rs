//! The exact answers of `/v1/id` on the wire (status line, every header but `date`'s value, in
//! order, and the body), for a table of requests: methods, queries, `Accept` variants, bodies,
//! a refusal. Pinned from the axum router's answers before `/v1/id` got a service of its own
//! ahead of it (`http::fast`), so that the two are byte for byte the same; and the metrics
//! those requests leave.

use crate::support::{T, TestServer, config};
use snowflake_core::ManualClock;
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The ID every answer's body shows, in place of the digits (they advance with each request).
const ID: &str = "<id>";

/// One request as sent, and its answer as pinned: `\n`-separated lines of the head, the body
/// after an empty line, IDs as [`ID`], the date as `date: <date>`; `kept` when the connection
/// then answers a second request (`GET /healthz`), false when the server closes it.
struct Case {
    request: &'static str,
    answer: &'static str,
    kept: bool,
}

const fn case(request: &'static str, answer: &'static str, kept: bool) -> Case {
    Case {
        request,
        answer,
        kept,
    }
}

/// The table, with the node's clock where it was at start. Each request goes on a fresh
/// connection (`{BIG}` stands for 20,000 bytes, over the 16 KiB body limit); a second request
/// follows it on the same connection, so that what a body or an error leaves of it shows.
const CASES: &[Case] = &[
    case(
        "GET /v1/id HTTP/1.1\r\nhost: x\r\n\r\n",
        concat!(
            "HTTP/1.1 200 OK\n",
            "content-type: application/json\n",
            "content-length: 28\n",
            "date: <date>\n",
            "\n",
            "{\"id\":\"<id>\"}"
        ),
        true,
    ),
    case(
        "HEAD /v1/id HTTP/1.1\r\nhost: x\r\n\r\n",
        concat!(
            "HTTP/1.1 200 OK\n",
            "content-type: application/json\n",
            "content-length: 28\n",
            "date: <date>\n",
            "\n"
        ),
        true,
    ),
    case(
        "GET /v1/id HTTP/1.1\r\nhost: x\r\naccept: text/plain\r\n\r\n",
        concat!(
            "HTTP/1.1 200 OK\n",
            "content-type: text/plain; charset=utf-8\n",
            "content-length: 19\n",
            "date: <date>\n",
            "\n",
            "<id>"
        ),
        true,
    ),
    case(
        "HEAD /v1/id HTTP/1.1\r\nhost: x\r\naccept: text/plain\r\n\r\n",
        concat!(
            "HTTP/1.1 200 OK\n",
            "content-type: text/plain; charset=utf-8\n",
            "content-length: 19\n",
            "date: <date>\n",
            "\n"
        ),
        true,
    ),
    case(
        "GET /v1/id HTTP/1.1\r\nhost: x\r\naccept: text/*\r\n\r\n",
        concat!(
            "HTTP/1.1 200 OK\n",
            "content-type: text/plain; charset=utf-8\n",
            "content-length: 19\n",
            "date: <date>\n",
            "\n",
            "<id>"
        ),
        true,
    ),
    case(
        "GET /v1/id HTTP/1.1\r\nhost: x\r\naccept: text/html, text/plain;q=0.5\r\n\r\n",
        concat!(
            "HTTP/1.1 200 OK\n",
            "content-type: text/plain; charset=utf-8\n",
            "content-length: 19\n",
            "date: <date>\n",
            "\n",
            "<id>"
        ),
        true,
    ),
    case(
        "GET /v1/id HTTP/1.1\r\nhost: x\r\naccept: application/json, text/plain\r\n\r\n",
        concat!(
            "HTTP/1.1 200 OK\n",
            "content-type: application/json\n",
            "content-length: 28\n",
            "date: <date>\n",
            "\n",
            "{\"id\":\"<id>\"}"
        ),
        true,
    ),
    case(
        "GET /v1/id HTTP/1.1\r\nhost: x\r\naccept: */*\r\n\r\n",
        concat!(
            "HTTP/1.1 200 OK\n",
            "content-type: application/json\n",
            "content-length: 28\n",
            "date: <date>\n",
            "\n",
            "{\"id\":\"<id>\"}"
        ),
        true,
    ),
    case(
        "GET /v1/id HTTP/1.1\r\nhost: x\r\naccept: image/png\r\n\r\n",
        concat!(
            "HTTP/1.1 200 OK\n",
            "content-type: application/json\n",
            "content-length: 28\n",
            "date: <date>\n",
            "\n",
            "{\"id\":\"<id>\"}"
        ),
        true,
    ),
    case(
        "GET /v1/id HTTP/1.1\r\nhost: x\r\naccept: image/png\r\naccept: text/plain\r\n\r\n",
        concat!(
            "HTTP/1.1 200 OK\n",
            "content-type: text/plain; charset=utf-8\n",
            "content-length: 19\n",
            "date: <date>\n",
            "\n",
            "<id>"
        ),
        true,
    ),
    case(
        "GET /v1/id HTTP/1.1\r\nhost: x\r\naccept: TEXT/PLAIN\r\n\r\n",
        concat!(
            "HTTP/1.1 200 OK\n",
            "content-type: application/json\n",
            "content-length: 28\n",
            "date: <date>\n",
            "\n",
            "{\"id\":\"<id>\"}"
        ),
        true,
    ),
    case(
        "GET /v1/id?format=string HTTP/1.1\r\nhost: x\r\n\r\n",
        concat!(
            "HTTP/1.1 200 OK\n",
            "content-type: application/json\n",
            "content-length: 28\n",
            "date: <date>\n",
            "\n",
            "{\"id\":\"<id>\"}"
        ),
        true,
    ),
    case(
        "GET /v1/id?format=number HTTP/1.1\r\nhost: x\r\n\r\n",
        concat!(
            "HTTP/1.1 400 Bad Request\n",
            "content-type: application/json\n",
            "content-length: 264\n",
            "date: <date>\n",
            "\n",
            "{\"error\":\"format=number needs a layout whose ids all fit a JavaScript number (at most <id>), and this node's layout twitter has ids up to <id>; read the ids as strings (format=string, the default), or run a fleet under --layout js-safe\"}"
        ),
        true,
    ),
    case(
        "GET /v1/id?format=bogus HTTP/1.1\r\nhost: x\r\n\r\n",
        concat!(
            "HTTP/1.1 400 Bad Request\n",
            "content-type: application/json\n",
            "content-length: 70\n",
            "date: <date>\n",
            "\n",
            "{\"error\":\"invalid format: expected string or number, found \\\"bogus\\\"\"}"
        ),
        true,
    ),
    case(
        "HEAD /v1/id?format=bogus HTTP/1.1\r\nhost: x\r\n\r\n",
        concat!(
            "HTTP/1.1 400 Bad Request\n",
            "content-type: application/json\n",
            "content-length: 70\n",
            "date: <date>\n",
            "\n"
        ),
        true,
    ),
    case(
        "GET /v1/id?format=bogus HTTP/1.1\r\nhost: x\r\naccept: text/plain\r\n\r\n",
        concat!(
            "HTTP/1.1 400 Bad Request\n",
            "content-type: application/json\n",
            "content-length: 70\n",
            "date: <date>\n",
            "\n",
            "{\"error\":\"invalid format: expected string or number, found \\\"bogus\\\"\"}"
        ),
        true,
    ),
    case(
        "GET /v1/id?format= HTTP/1.1\r\nhost: x\r\n\r\n",
        concat!(
            "HTTP/1.1 400 Bad Request\n",
            "content-type: application/json\n",
            "content-length: 65\n",
            "date: <date>\n",
            "\n",
            "{\"error\":\"invalid format: expected string or number, found \\\"\\\"\"}"
        ),
        true,
    ),
    case(
        "GET /v1/id? HTTP/1.1\r\nhost: x\r\n\r\n",
        concat!(
            "HTTP/1.1 200 OK\n",
            "content-type: application/json\n",
            "content-length: 28\n",
            "date: <date>\n",
            "\n",
            "{\"id\":\"<id>\"}"
        ),
        true,
    ),
    case(
        "GET /v1/id?x=1&format=string HTTP/1.1\r\nhost: x\r\n\r\n",
        concat!(
            "HTTP/1.1 200 OK\n",
            "content-type: application/json\n",
            "content-length: 28\n",
            "date: <date>\n",
            "\n",
            "{\"id\":\"<id>\"}"
        ),
        true,
    ),
    case(
        "GET /v1/id?format=number&format=string HTTP/1.1\r\nhost: x\r\n\r\n",
        concat!(
            "HTTP/1.1 400 Bad Request\n",
            "content-type: application/json\n",
            "content-length: 264\n",
            "date: <date>\n",
            "\n",
            "{\"error\":\"format=number needs a layout whose ids all fit a JavaScript number (at most <id>), and this node's layout twitter has ids up to <id>; read the ids as strings (format=string, the default), or run a fleet under --layout js-safe\"}"
        ),
        true,
    ),
    case(
        "POST /v1/id HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n",
        concat!(
            "HTTP/1.1 405 Method Not Allowed\n",
            "content-type: application/json\n",
            "allow: GET\n",
            "content-length: 57\n",
            "date: <date>\n",
            "\n",
            "{\"error\":\"method POST is not allowed on /v1/id; use GET\"}"
        ),
        true,
    ),
    case(
        "POST /v1/id HTTP/1.1\r\nhost: x\r\n\r\n",
        concat!(
            "HTTP/1.1 405 Method Not Allowed\n",
            "content-type: application/json\n",
            "allow: GET\n",
            "content-length: 57\n",
            "date: <date>\n",
            "\n",
            "{\"error\":\"method POST is not allowed on /v1/id; use GET\"}"
        ),
        true,
    ),
    case(
        "PUT /v1/id HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\n\r\nabc",
        concat!(
            "HTTP/1.1 405 Method Not Allowed\n",
            "content-type: application/json\n",
            "allow: GET\n",
            "content-length: 56\n",
            "date: <date>\n",
            "\n",
            "{\"error\":\"method PUT is not allowed on /v1/id; use GET\"}"
        ),
        true,
    ),
    case(
        "DELETE /v1/id HTTP/1.1\r\nhost: x\r\n\r\n",
        concat!(
            "HTTP/1.1 405 Method Not Allowed\n",
            "content-type: application/json\n",
            "allow: GET\n",
            "content-length: 59\n",
            "date: <date>\n",
            "\n",
            "{\"error\":\"method DELETE is not allowed on /v1/id; use GET\"}"
        ),
        true,
    ),
    case(
        "OPTIONS /v1/id HTTP/1.1\r\nhost: x\r\n\r\n",
        concat!(
            "HTTP/1.1 405 Method Not Allowed\n",
            "content-type: application/json\n",
            "allow: GET\n",
            "content-length: 60\n",
            "date: <date>\n",
            "\n",
            "{\"error\":\"method OPTIONS is not allowed on /v1/id; use GET\"}"
        ),
        true,
    ),
    case(
        "PATCH /v1/id?format=bogus HTTP/1.1\r\nhost: x\r\n\r\n",
        concat!(
            "HTTP/1.1 405 Method Not Allowed\n",
            "content-type: application/json\n",
            "allow: GET\n",
            "content-length: 58\n",
            "date: <date>\n",
            "\n",
            "{\"error\":\"method PATCH is not allowed on /v1/id; use GET\"}"
        ),
        true,
    ),
    case(
        "GET /v1/id HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\nhello",
        concat!(
            "HTTP/1.1 200 OK\n",
            "content-type: application/json\n",
            "content-length: 28\n",
            "date: <date>\n",
            "\n",
            "{\"id\":\"<id>\"}"
        ),
        true,
    ),
    case(
        "GET /v1/id HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        concat!(
            "HTTP/1.1 200 OK\n",
            "content-type: application/json\n",
            "content-length: 28\n",
            "date: <date>\n",
            "\n",
            "{\"id\":\"<id>\"}"
        ),
        true,
    ),
    case(
        "GET /v1/id HTTP/1.1\r\nhost: x\r\ncontent-length: 20000\r\n\r\n{BIG}",
        concat!(
            "HTTP/1.1 413 Payload Too Large\n",
            "content-type: text/plain; charset=utf-8\n",
            "content-length: 21\n",
            "date: <date>\n",
            "\n",
            "length limit exceeded"
        ),
        false,
    ),
    case(
        "HEAD /v1/id HTTP/1.1\r\nhost: x\r\ncontent-length: 20000\r\n\r\n{BIG}",
        concat!(
            "HTTP/1.1 413 Payload Too Large\n",
            "content-type: text/plain; charset=utf-8\n",
            "content-length: 21\n",
            "date: <date>\n",
            "\n"
        ),
        false,
    ),
    case(
        "POST /v1/id HTTP/1.1\r\nhost: x\r\ncontent-length: 20000\r\n\r\n{BIG}",
        concat!(
            "HTTP/1.1 413 Payload Too Large\n",
            "content-type: text/plain; charset=utf-8\n",
            "allow: GET,HEAD\n",
            "content-length: 21\n",
            "date: <date>\n",
            "\n",
            "length limit exceeded"
        ),
        false,
    ),
    case(
        "GET /v1/id/ HTTP/1.1\r\nhost: x\r\n\r\n",
        concat!(
            "HTTP/1.1 404 Not Found\n",
            "content-type: application/json\n",
            "content-length: 157\n",
            "date: <date>\n",
            "\n",
            "{\"error\":\"no such route: GET /v1/id/; routes: /v1/id, /v1/ids, /v1/decode/{id}, /v1/info, /v1/range, /healthz, /readyz, /metrics, /, /status.js, /v1/status\"}"
        ),
        true,
    ),
    case(
        "GET /v1/ID HTTP/1.1\r\nhost: x\r\n\r\n",
        concat!(
            "HTTP/1.1 404 Not Found\n",
            "content-type: application/json\n",
            "content-length: 156\n",
            "date: <date>\n",
            "\n",
            "{\"error\":\"no such route: GET /v1/ID; routes: /v1/id, /v1/ids, /v1/decode/{id}, /v1/info, /v1/range, /healthz, /readyz, /metrics, /, /status.js, /v1/status\"}"
        ),
        true,
    ),
    case(
        "GET /v1/%69d HTTP/1.1\r\nhost: x\r\n\r\n",
        concat!(
            "HTTP/1.1 404 Not Found\n",
            "content-type: application/json\n",
            "content-length: 158\n",
            "date: <date>\n",
            "\n",
            "{\"error\":\"no such route: GET /v1/%69d; routes: /v1/id, /v1/ids, /v1/decode/{id}, /v1/info, /v1/range, /healthz, /readyz, /metrics, /, /status.js, /v1/status\"}"
        ),
        true,
    ),
    case(
        "GET http://x/v1/id HTTP/1.1\r\nhost: x\r\n\r\n",
        concat!(
            "HTTP/1.1 200 OK\n",
            "content-type: application/json\n",
            "content-length: 28\n",
            "date: <date>\n",
            "\n",
            "{\"id\":\"<id>\"}"
        ),
        true,
    ),
    case(
        "GET /v1/id HTTP/1.0\r\n\r\n",
        concat!(
            "HTTP/1.0 200 OK\n",
            "content-type: application/json\n",
            "content-length: 28\n",
            "date: <date>\n",
            "\n",
            "{\"id\":\"<id>\"}"
        ),
        false,
    ),
    case(
        "GET /v1/id HTTP/1.0\r\nconnection: keep-alive\r\n\r\n",
        concat!(
            "HTTP/1.0 200 OK\n",
            "content-type: application/json\n",
            "content-length: 28\n",
            "connection: keep-alive\n",
            "date: <date>\n",
            "\n",
            "{\"id\":\"<id>\"}"
        ),
        true,
    ),
    case(
        "GET /v1/id HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
        concat!(
            "HTTP/1.1 200 OK\n",
            "content-type: application/json\n",
            "content-length: 28\n",
            "connection: close\n",
            "date: <date>\n",
            "\n",
            "{\"id\":\"<id>\"}"
        ),
        false,
    ),
];

/// A digit run of 10 or more (an ID) becomes [`ID`].
fn ids_masked(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut digits = String::new();
    for c in text.chars().chain(std::iter::once('\0')) {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        if digits.len() >= 10 {
            out.push_str(ID);
        } else {
            out.push_str(&digits);
        }
        digits.clear();
        if c != '\0' {
            out.push(c);
        }
    }
    out
}

/// Reads one answer from `stream` (`head_only` for an answer to HEAD), as pinned text; `None`
/// when the connection is closed before any of it.
async fn answer(stream: &mut TcpStream, input: &mut Vec<u8>, head_only: bool) -> Option<String> {
    let answer = answer_as_sent(stream, input, head_only).await?;
    Some(ids_masked(&answer))
}

/// [`answer`], its IDs as they are.
async fn answer_as_sent(
    stream: &mut TcpStream,
    input: &mut Vec<u8>,
    head_only: bool,
) -> Option<String> {
    let end = loop {
        if let Some(at) = input.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        let mut chunk = [0; 4096];
        let n = tokio::time::timeout(std::time::Duration::from_secs(5), stream.read(&mut chunk))
            .await
            .expect("an answer within 5 s")
            .unwrap_or(0);
        if n == 0 {
            assert!(input.is_empty(), "closed mid-answer: {input:?}");
            return None;
        }
        input.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8(input[..end].to_vec()).expect("an ASCII head");
    let mut lines = Vec::new();
    let mut length = 0;
    for (i, line) in head.split("\r\n").enumerate() {
        let Some((name, value)) = line.split_once(": ").filter(|_| i > 0) else {
            lines.push(line.to_owned());
            continue;
        };
        if name.eq_ignore_ascii_case("content-length") {
            length = value.parse().expect("a length");
        }
        if name.eq_ignore_ascii_case("date") {
            lines.push(format!("{name}: <date>"));
        } else {
            lines.push(line.to_owned());
        }
    }
    input.drain(..end + 4);
    let length = if head_only { 0 } else { length };
    while input.len() < length {
        let mut chunk = [0; 4096];
        let n = stream.read(&mut chunk).await.expect("the body");
        assert!(n > 0, "closed mid-body");
        input.extend_from_slice(&chunk[..n]);
    }
    let body: Vec<u8> = input.drain(..length).collect();
    let body = String::from_utf8(body).expect("a UTF-8 body");
    Some(format!("{}\n\n{body}", lines.join("\n")))
}

/// `request` on a fresh connection to `addr`, then `GET /healthz` on it: the first answer, and
/// whether the second came.
async fn exchange(addr: SocketAddr, request: &str) -> (String, bool) {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let request = request.replace("{BIG}", &"a".repeat(20_000));
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut input = Vec::new();
    let head_only = request.starts_with("HEAD ");
    let first = answer(&mut stream, &mut input, head_only)
        .await
        .unwrap_or_else(|| panic!("no answer to {request:?}"));
    let _ = stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await;
    let second = answer(&mut stream, &mut input, false).await;
    if let Some(second) = &second {
        assert!(second.contains("{\"status\":\"ok\"}"), "{second}");
    }
    (first, second.is_some())
}

/// Every case of `cases` against `addr`: a description of each that differs.
async fn differences(addr: SocketAddr, cases: &[Case]) -> Vec<String> {
    let mut failures = Vec::new();
    for case in cases {
        let (got, kept) = exchange(addr, case.request).await;
        if got != case.answer || kept != case.kept {
            failures.push(format!(
                "{:?}\nexpected (kept: {}):\n{}\ngot (kept: {kept}):\n{got}",
                case.request, case.kept, case.answer
            ));
        }
    }
    failures
}

/// The answers while the node's clock is behind its last ID: 503 with `retry-after`, and the
/// query still checked first.
const REFUSED: &[Case] = &[
    case(
        "GET /v1/id HTTP/1.1\r\nhost: x\r\n\r\n",
        concat!(
            "HTTP/1.1 503 Service Unavailable\n",
            "content-type: application/json\n",
            "retry-after: 5\n",
            "content-length: 176\n",
            "date: <date>\n",
            "\n",
            "{\"error\":\"clock moved backwards: it reads <id> (unix ms), 5000 ms behind the last ",
            "issued timestamp <id>; refusing to issue ids until it passes <id>\"}",
        ),
        true,
    ),
    case(
        "HEAD /v1/id HTTP/1.1\r\nhost: x\r\n\r\n",
        concat!(
            "HTTP/1.1 503 Service Unavailable\n",
            "content-type: application/json\n",
            "retry-after: 5\n",
            "content-length: 176\n",
            "date: <date>\n",
            "\n",
        ),
        true,
    ),
    case(
        "GET /v1/id HTTP/1.1\r\nhost: x\r\naccept: text/plain\r\n\r\n",
        concat!(
            "HTTP/1.1 503 Service Unavailable\n",
            "content-type: application/json\n",
            "retry-after: 5\n",
            "content-length: 176\n",
            "date: <date>\n",
            "\n",
            "{\"error\":\"clock moved backwards: it reads <id> (unix ms), 5000 ms behind the last ",
            "issued timestamp <id>; refusing to issue ids until it passes <id>\"}",
        ),
        true,
    ),
    case(
        "GET /v1/id?format=bogus HTTP/1.1\r\nhost: x\r\n\r\n",
        concat!(
            "HTTP/1.1 400 Bad Request\n",
            "content-type: application/json\n",
            "content-length: 70\n",
            "date: <date>\n",
            "\n",
            "{\"error\":\"invalid format: expected string or number, found \\\"bogus\\\"\"}",
        ),
        true,
    ),
    case(
        "POST /v1/id HTTP/1.1\r\nhost: x\r\n\r\n",
        concat!(
            "HTTP/1.1 405 Method Not Allowed\n",
            "content-type: application/json\n",
            "allow: GET\n",
            "content-length: 57\n",
            "date: <date>\n",
            "\n",
            "{\"error\":\"method POST is not allowed on /v1/id; use GET\"}",
        ),
        true,
    ),
];

/// What the tables leave in `/metrics` for `/v1/id`, sorted (the 413s are answered by the body
/// limit before any route, and counted by none).
const METRICS: &[&str] = &[
    "snowflake_request_duration_seconds_count{protocol=\"http\",route=\"/v1/id\"} 37",
    "snowflake_requests_total{protocol=\"http\",route=\"/v1/id\",status=\"200\"} 20",
    "snowflake_requests_total{protocol=\"http\",route=\"/v1/id\",status=\"400\"} 7",
    "snowflake_requests_total{protocol=\"http\",route=\"/v1/id\",status=\"405\"} 7",
    "snowflake_requests_total{protocol=\"http\",route=\"/v1/id\",status=\"503\"} 3",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_id_answers_are_pinned_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(config(dir.path()), ManualClock::new(T)).await;
    server.wait_ready().await;
    let mut failures = differences(server.addr, CASES).await;
    server.clock.set_ms(T - 5000);
    failures.extend(differences(server.addr, REFUSED).await);
    server.clock.set_ms(T + 1);
    let metrics = server.get("/metrics").await.body;
    let mut lines: Vec<&str> = metrics
        .lines()
        .filter(|line| {
            line.starts_with("snowflake_requests_total{protocol=\"http\",route=\"/v1/id\"")
                || line.starts_with(
                    "snowflake_request_duration_seconds_count{protocol=\"http\",route=\"/v1/id\"}",
                )
        })
        .collect();
    lines.sort_unstable();
    if lines != METRICS {
        failures.push(format!("metrics: expected {METRICS:#?}\ngot {lines:#?}"));
    }
    server.stop().await;
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Requests pipelined in one write are answered in order, those `/v1/id`'s own loop answers and
/// those it hands to hyper alike (another route, a query it leaves to hyper, a `Connection`
/// header), each with the pinned answer, every ID new; and a request sent a byte at a time
/// gets the same answer as one sent whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_and_trickled_requests_get_the_pinned_answers_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(config(dir.path()), ManualClock::new(T)).await;
    server.wait_ready().await;
    let get = CASES[0].request;
    let head = CASES[1].request;
    let text = CASES[2].request;
    let healthz = "GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n";
    let bogus = "GET /v1/id?format=bogus HTTP/1.1\r\nhost: x\r\n\r\n";
    let keep_alive = "GET /v1/id HTTP/1.1\r\nhost: x\r\nconnection: keep-alive\r\n\r\n";
    let pinned = |request: &str| {
        let case = CASES.iter().chain(REFUSED).find(|c| c.request == request);
        case.map(|c| c.answer)
    };
    for sequence in [
        vec![get, get, get, head, text, get],
        vec![get, head, healthz, get, text, head],
        vec![text, bogus, get, head, bogus],
        vec![get, keep_alive, get, text],
    ] {
        let mut stream = TcpStream::connect(server.addr).await.expect("connect");
        stream
            .write_all(sequence.concat().as_bytes())
            .await
            .unwrap();
        let mut input = Vec::new();
        let mut ids = Vec::new();
        for request in &sequence {
            let got = answer_as_sent(&mut stream, &mut input, request.starts_with("HEAD "))
                .await
                .unwrap_or_else(|| panic!("{sequence:?}: closed before {request:?}"));
            let masked = ids_masked(&got);
            if *request == healthz {
                assert!(masked.contains("{\"status\":\"ok\"}"), "{masked}");
            } else if *request == keep_alive {
                assert_eq!(masked, CASES[0].answer, "{sequence:?}");
            } else {
                assert_eq!(Some(masked.as_str()), pinned(request), "{sequence:?}");
            }
            let body = got.split("\n\n").nth(1).unwrap_or("");
            let digits: String = body.chars().filter(char::is_ascii_digit).collect();
            if digits.len() >= 10 {
                ids.push(digits.parse::<u64>().unwrap());
            }
        }
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{sequence:?}: {ids:?}");
        drop(stream);
    }
    // A byte at a time, then the same connection asks again whole.
    let mut stream = TcpStream::connect(server.addr).await.expect("connect");
    for byte in text.as_bytes() {
        stream.write_all(&[*byte]).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    let mut input = Vec::new();
    let got = answer(&mut stream, &mut input, false)
        .await
        .expect("an answer");
    assert_eq!(got, CASES[2].answer);
    stream.write_all(get.as_bytes()).await.unwrap();
    let got = answer(&mut stream, &mut input, false)
        .await
        .expect("an answer");
    assert_eq!(got, CASES[0].answer);
    server.stop().await;
}

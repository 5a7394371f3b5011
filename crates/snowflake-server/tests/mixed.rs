//! Mixed load over all four front ends at once: HTTP, gRPC (unary, batch and streaming), Thrift
//! and RESP (pipelined INCR, INCRBY and SNOWFLAKE.NEXT) clients draw from the one generator
//! concurrently; no ID is ever issued twice, and each client sees its own IDs strictly increase.

use crate::support::{T, TestServer, config, get};
use hyper::StatusCode;
use snowflake_core::ManualClock;
use snowflake_proto::thrift::peer;
use snowflake_server::grpc::pb::snowflake_client::SnowflakeClient;
use snowflake_server::grpc::pb::{NextIdRequest, NextIdsRequest, StreamIdsRequest};
use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinSet;

const CLIENTS_PER_PROTOCOL: usize = 3;
const ROUNDS: usize = 40;
const BATCH: u32 = 50;
const STREAM_COUNT: u64 = 300;

/// One framed, strict binary `get_id(useragent)` call (proto's codec).
fn thrift_get_id(seq: i32, agent: &str) -> Vec<u8> {
    let mut out = Vec::new();
    peer::encode_call(&mut out, "get_id", seq, Some(agent));
    out
}

/// Reads one framed reply to `get_id` with sequence id `seq` and returns its i64 result.
async fn thrift_read_id(stream: &mut TcpStream, seq: i32) -> i64 {
    let len = tokio::time::timeout(Duration::from_secs(5), stream.read_u32())
        .await
        .expect("reply in time")
        .expect("a frame");
    let mut body = vec![0u8; len as usize];
    stream.read_exact(&mut body).await.unwrap();
    match peer::decode_reply(&body, "get_id", seq) {
        Ok(peer::Answer::I64(id)) => id,
        other => panic!("reply {other:?}: {body:?}"),
    }
}

fn ids_of(body: &str) -> Vec<i64> {
    let json: serde_json::Value = serde_json::from_str(body).expect("JSON");
    if let Some(id) = json.get("id") {
        vec![id.as_str().expect("a string").parse().expect("decimal")]
    } else {
        json["ids"]
            .as_array()
            .expect("ids")
            .iter()
            .map(|id| id.as_str().expect("a string").parse().expect("decimal"))
            .collect()
    }
}

async fn http_client(addr: SocketAddr) -> Vec<i64> {
    let mut ids = Vec::new();
    for round in 0..ROUNDS {
        let path = if round % 2 == 0 {
            "/v1/id".to_owned()
        } else {
            format!("/v1/ids?count={BATCH}")
        };
        let reply = get(addr, &path, &[]).await;
        assert_eq!(reply.status, StatusCode::OK, "{path}: {reply:?}");
        let got = ids_of(&reply.body);
        assert_eq!(got.len(), if round % 2 == 0 { 1 } else { BATCH as usize });
        ids.extend(got);
    }
    ids
}

async fn grpc_client(addr: SocketAddr) -> Vec<i64> {
    let mut grpc = SnowflakeClient::connect(format!("http://{addr}"))
        .await
        .expect("grpc connects");
    let mut ids = Vec::new();
    for round in 0..ROUNDS {
        match round % 3 {
            0 => ids.push(
                grpc.next_id(NextIdRequest {})
                    .await
                    .expect("NextId")
                    .into_inner()
                    .id,
            ),
            1 => {
                let got = grpc
                    .next_ids(NextIdsRequest { count: BATCH })
                    .await
                    .expect("NextIds")
                    .into_inner()
                    .ids;
                assert_eq!(got.len(), BATCH as usize);
                ids.extend(got);
            }
            _ => {
                let mut stream = grpc
                    .stream_ids(StreamIdsRequest {
                        count: STREAM_COUNT,
                        chunk_size: 64,
                    })
                    .await
                    .expect("StreamIds")
                    .into_inner();
                let before = ids.len();
                while let Some(message) = stream.message().await.expect("a stream message") {
                    ids.extend(message.ids);
                }
                assert_eq!(ids.len() - before, STREAM_COUNT as usize);
            }
        }
    }
    ids
}

async fn thrift_client(addr: SocketAddr, client: usize) -> Vec<i64> {
    let mut stream = TcpStream::connect(addr).await.expect("thrift connects");
    let agent = format!("mixed-{client}");
    let mut ids = Vec::new();
    for round in 0..ROUNDS * 2 {
        let seq = i32::try_from(round).unwrap();
        stream.write_all(&thrift_get_id(seq, &agent)).await.unwrap();
        ids.push(thrift_read_id(&mut stream, seq).await);
    }
    ids
}

/// Reads RESP replies from `stream` until `wanted` top-level replies are complete: each an
/// integer or an array of integers.
async fn resp_read(stream: &mut TcpStream, buf: &mut Vec<u8>, wanted: usize) -> Vec<Vec<i64>> {
    let mut replies = Vec::new();
    loop {
        // Parse what is complete.
        let mut at = 0;
        let mut parsed = Vec::new();
        let line = |from: usize| -> Option<(String, usize)> {
            let end = buf[from..].windows(2).position(|w| w == b"\r\n")? + from;
            Some((
                String::from_utf8_lossy(&buf[from..end]).into_owned(),
                end + 2,
            ))
        };
        while parsed.len() + replies.len() < wanted {
            let Some((head, next)) = line(at) else { break };
            if let Some(n) = head.strip_prefix(':') {
                parsed.push(vec![n.parse().unwrap()]);
                at = next;
            } else if let Some(n) = head.strip_prefix('*') {
                let n: usize = n.parse().unwrap();
                let mut items = Vec::with_capacity(n);
                let mut cursor = next;
                let mut complete = true;
                for _ in 0..n {
                    match line(cursor) {
                        Some((item, after)) => {
                            items
                                .push(item.strip_prefix(':').expect("an integer").parse().unwrap());
                            cursor = after;
                        }
                        None => {
                            complete = false;
                            break;
                        }
                    }
                }
                if !complete {
                    break;
                }
                parsed.push(items);
                at = cursor;
            } else {
                panic!("unexpected RESP reply {head:?}");
            }
        }
        buf.drain(..at);
        replies.extend(parsed);
        if replies.len() == wanted {
            return replies;
        }
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut chunk))
            .await
            .expect("a reply in time")
            .unwrap();
        assert!(n > 0, "the RESP connection closed");
        buf.extend_from_slice(&chunk[..n]);
    }
}

async fn resp_client(addr: SocketAddr, client: usize) -> Vec<i64> {
    let mut stream = TcpStream::connect(addr).await.expect("resp connects");
    let mut buf = Vec::new();
    let mut ids = Vec::new();
    for _ in 0..ROUNDS / 2 {
        // Three commands before reading any answer.
        let key = format!("mixed-{client}");
        let pipeline = format!(
            "*2\r\n$4\r\nINCR\r\n${}\r\n{key}\r\n*3\r\n$6\r\nINCRBY\r\n${}\r\n{key}\r\n$2\r\n{BATCH}\r\nSNOWFLAKE.NEXT {BATCH}\r\n",
            key.len(),
            key.len()
        );
        stream.write_all(pipeline.as_bytes()).await.unwrap();
        let replies = resp_read(&mut stream, &mut buf, 3).await;
        ids.push(replies[0][0]);
        // INCRBY: the caller owns the BATCH IDs ending at the reply.
        let last = replies[1][0];
        ids.extend((0..i64::from(BATCH)).rev().map(|back| last - back));
        assert_eq!(replies[2].len(), BATCH as usize);
        ids.extend(&replies[2]);
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_grpc_thrift_and_resp_clients_at_once_never_share_an_id() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(config(dir.path()), ManualClock::new(T)).await;
    server.wait_ready().await;
    server.tick();
    let http = server.addr;
    let grpc = server.grpc_addr.expect("grpc on");
    let thrift = server.thrift_addr.expect("thrift on");
    let resp = server.resp_addr.expect("resp on");

    let mut tasks = JoinSet::new();
    for client in 0..CLIENTS_PER_PROTOCOL {
        tasks.spawn(async move { (format!("http-{client}"), http_client(http).await) });
        tasks.spawn(async move { (format!("grpc-{client}"), grpc_client(grpc).await) });
        tasks.spawn(async move {
            (
                format!("thrift-{client}"),
                thrift_client(thrift, client).await,
            )
        });
        tasks.spawn(async move { (format!("resp-{client}"), resp_client(resp, client).await) });
    }
    let all = tokio::time::timeout(Duration::from_secs(20), tasks.join_all())
        .await
        .expect("the mixed load finishes in time");

    let mut seen = HashSet::new();
    let mut total = 0;
    for (client, ids) in &all {
        assert!(!ids.is_empty(), "{client} got no IDs");
        assert!(
            ids.iter().all(|&id| id > 0),
            "{client} got a non-positive ID"
        );
        if let Some(pair) = ids.windows(2).find(|w| w[0] >= w[1]) {
            panic!(
                "{client}: its IDs do not increase: {} then {}",
                pair[0], pair[1]
            );
        }
        for &id in ids {
            assert!(
                seen.insert(id),
                "ID {id} issued twice (last seen by {client})"
            );
        }
        total += ids.len();
    }
    let per_http = ROUNDS / 2 + ROUNDS / 2 * BATCH as usize;
    let per_grpc =
        ROUNDS.div_ceil(3) + (ROUNDS + 1) / 3 * BATCH as usize + ROUNDS / 3 * STREAM_COUNT as usize;
    let per_thrift = ROUNDS * 2;
    let per_resp = ROUNDS / 2 * (1 + 2 * BATCH as usize);
    assert_eq!(
        total,
        CLIENTS_PER_PROTOCOL * (per_http + per_grpc + per_thrift + per_resp)
    );
    server.stop().await;
}

//! Mixed load over all three front ends at once: HTTP, gRPC (unary, batch and streaming) and
//! Thrift clients draw from the one generator concurrently; no ID is ever issued twice, and
//! each client sees its own IDs strictly increase.

use crate::support::{T, TestServer, config, get};
use hyper::StatusCode;
use snowflake_core::ManualClock;
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

/// One framed, strict binary `get_id(useragent)` call.
fn thrift_get_id(seq: i32, agent: &str) -> Vec<u8> {
    let mut payload = Vec::new();
    payload.extend_from_slice(&0x8001_0001_u32.to_be_bytes());
    payload.extend_from_slice(&6_i32.to_be_bytes());
    payload.extend_from_slice(b"get_id");
    payload.extend_from_slice(&seq.to_be_bytes());
    payload.extend_from_slice(&[11, 0, 1]);
    payload.extend_from_slice(&i32::try_from(agent.len()).unwrap().to_be_bytes());
    payload.extend_from_slice(agent.as_bytes());
    payload.push(0);
    let mut out = u32::try_from(payload.len()).unwrap().to_be_bytes().to_vec();
    out.extend_from_slice(&payload);
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
    let name = b"get_id";
    // Header: version|REPLY, name, seq id; then struct { 0: i64 success }, stop.
    let mut expected = 0x8001_0002_u32.to_be_bytes().to_vec();
    expected.extend_from_slice(&6_i32.to_be_bytes());
    expected.extend_from_slice(name);
    expected.extend_from_slice(&seq.to_be_bytes());
    expected.extend_from_slice(&[10, 0, 0]);
    assert_eq!(body.len(), expected.len() + 8 + 1, "reply {body:?}");
    assert_eq!(body[..expected.len()], expected[..], "reply {body:?}");
    assert_eq!(body[body.len() - 1], 0, "reply {body:?}");
    i64::from_be_bytes(body[expected.len()..expected.len() + 8].try_into().unwrap())
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_grpc_and_thrift_clients_at_once_never_share_an_id() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(config(dir.path()), ManualClock::new(T)).await;
    server.wait_ready().await;
    server.tick();
    let http = server.addr;
    let grpc = server.grpc_addr.expect("grpc on");
    let thrift = server.thrift_addr.expect("thrift on");

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
    assert_eq!(
        total,
        CLIENTS_PER_PROTOCOL * (per_http + per_grpc + per_thrift)
    );
    server.stop().await;
}

//! The Rust client against in-process nodes of other layouts: it reads each node's layout from
//! `GetInfo` instead of assuming Twitter's, checks IDs against it, asks for ranges, and never
//! mixes two layouts.

use crate::support::{T, TestServer, config};
use snowflake_client::{ClientBuilder, Error, Event, Layout};
use snowflake_core::ManualClock;
use std::sync::{Arc, Mutex};
use std::time::Duration;

async fn node(layout: Layout, worker_id: u64) -> (TestServer, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.layout = layout;
    config.identity.worker_id = worker_id;
    let server = TestServer::start(config, ManualClock::new(T)).await;
    server.wait_ready().await;
    server.tick();
    (server, dir)
}

fn endpoint(server: &TestServer) -> String {
    server.grpc_addr.expect("grpc on").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_learns_a_js_safe_layout_and_asks_for_ranges() {
    let (server, _dir) = node(Layout::JS_SAFE, 9).await;
    let client = ClientBuilder::new([endpoint(&server)])
        .give_up_after(Duration::from_secs(5))
        .build()
        .unwrap();
    let layout = client.layout().await.unwrap();
    assert_eq!(layout, Layout::JS_SAFE);
    let ids = client.next_ids(500).await.unwrap();
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    for id in &ids {
        assert!(id.as_u64() <= layout.max_id().as_u64());
        assert_eq!(layout.decode(*id).unwrap().worker_id, 9);
    }
    let range = client.range(T, T + 999).await.unwrap();
    assert_eq!(range, Layout::JS_SAFE.id_range(T, T + 999).unwrap());
    assert_eq!(
        client.range(T + 1, T).await.unwrap_err(),
        Error::Rejected(format!(
            "invalid range: from {} is after to {T} (unix ms)",
            T + 1
        ))
    );
    assert_eq!(
        client.range(5, T).await.unwrap_err(),
        Error::Rejected(
            "invalid from (unix ms): expected 1288834974657..=3487858230208, found 5".into()
        )
    );
    assert_eq!(
        client.range(T, u64::MAX).await.unwrap_err(),
        Error::Rejected(format!(
            "invalid to (unix ms): expected 1288834974657..=3487858230208, found {}",
            i64::MAX
        ))
    );
    // Only ID calls count as fetches.
    assert_eq!(client.stats().fetched_ids, 500);
    client.close();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_never_mixes_two_layouts() {
    let (twitter, _d1) = node(Layout::TWITTER, 1).await;
    let (js, _d2) = node(Layout::JS_SAFE, 2).await;
    let failures = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&failures);
    let client = ClientBuilder::new([endpoint(&twitter), endpoint(&js)])
        .give_up_after(Duration::from_secs(5))
        .backoff(Duration::from_millis(10), Duration::from_millis(50))
        .on_event(move |event| {
            if let Event::Failover {
                endpoint, error, ..
            } = event
            {
                seen.lock().unwrap().push(format!("{endpoint}: {error}"));
            }
        })
        .build()
        .unwrap();
    // The first node asked decides the client's layout (round robin starts at the first).
    assert_eq!(client.layout().await.unwrap(), Layout::TWITTER);
    for _ in 0..20 {
        let ids = client.next_ids(10).await.unwrap();
        for id in ids {
            // Every ID is the Twitter node's (worker 1); none of the js-safe node's.
            assert_eq!(Layout::TWITTER.decode(id).unwrap().worker_id, 1);
        }
    }
    let failures = failures.lock().unwrap().clone();
    let js_name = endpoint(&js);
    assert!(!failures.is_empty());
    for failure in &failures {
        assert!(
            failure.starts_with(&format!(
                "{js_name}: {js_name} issues IDs under the layout js-safe (epoch 1288834974657), \
                 another endpoint under twitter (epoch 1288834974657): IDs of two layouts can \
                 collide"
            )),
            "{failure}"
        );
    }
    client.close();
    twitter.stop().await;
    js.stop().await;
}

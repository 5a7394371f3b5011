//! Fencing by a coordination service: the node obeys a fake coordinator's fence,
//! stays above the mark a claim read, never issues above a mark the coordinator has not
//! accepted, and on a graceful stop stores the exact mark before releasing the pair.

use crate::fleet_fake::*;
use crate::support::{T, TestServer, config, id_of};
use hyper::StatusCode;
use snowflake_core::{Clock, ManualClock};
use snowflake_fleet::Fence;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lease_issues_ids_and_info_shows_the_lease() {
    let dir = tempfile::tempdir().unwrap();
    let lease = FakeLease::new(held(0));
    let server = start(dir.path(), T, &lease).await;
    wait_ready(&server).await;
    let id = id_of(&get(&server, "/v1/id").await);
    assert_eq!(ms_of(id), T);
    // The reservation was accepted by the coordinator before the ID was issued.
    assert!(lease.stored() >= T + 200, "{:?}", lease.calls());

    let info = get(&server, "/v1/info").await.json();
    assert_eq!(info["identity_source"], "etcd", "{info}");
    assert_eq!(info["ready"], true, "{info}");
    let lease_info = &info["lease"];
    assert_eq!(lease_info["state"], "held", "{info}");
    assert_eq!(lease_info["lease_id"], "694d7b3c1a2b0001", "{info}");
    assert_eq!(lease_info["key"], "/snowflake/workers/0/0", "{info}");
    assert_eq!(lease_info["ttl_secs"], 10, "{info}");
    assert_eq!(lease_info["renewals"], 7, "{info}");
    assert!(lease_info.get("reason").is_none(), "{info}");

    let metrics = get(&server, "/metrics").await.body;
    assert!(metrics.contains("identity_source=\"etcd\""), "{metrics}");
    assert!(metrics.contains("snowflake_lease_held 1"), "{metrics}");
    assert!(
        metrics.contains("snowflake_lease_renewals_total 7"),
        "{metrics}"
    );
    stop(server).await;

    // A node without a coordinator shows neither.
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(config(dir.path()), ManualClock::new(T)).await;
    let info = get(&server, "/v1/info").await.json();
    assert_eq!(info["identity_source"], "static", "{info}");
    assert!(info.get("lease").is_none(), "{info}");
    stop(server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_stops_issuing_until_it_is_held_again() {
    let dir = tempfile::tempdir().unwrap();
    let lease = FakeLease::new(held(0));
    let server = start(dir.path(), T, &lease).await;
    wait_ready(&server).await;
    let before = id_of(&get(&server, "/v1/id").await);

    let reason = "etcd unreachable for 7 s (test)";
    lease.set(Fence::Lost {
        reason: reason.into(),
    });
    let refused = get_until(&server, "/v1/id", StatusCode::SERVICE_UNAVAILABLE).await;
    let message = refused.error();
    assert!(
        message.contains("cannot prove it still holds its worker id") && message.contains(reason),
        "{message}"
    );
    assert_eq!(refused.headers["retry-after"], "1");
    let batch = get(&server, "/v1/ids?count=3").await;
    assert_eq!(batch.status, StatusCode::SERVICE_UNAVAILABLE, "{batch:?}");
    let ready = get(&server, "/readyz").await;
    assert_eq!(ready.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(ready.error().contains(reason), "{}", ready.error());
    let info = get(&server, "/v1/info").await.json();
    assert_eq!(info["ready"], false, "{info}");
    assert_eq!(info["lease"]["state"], "lost", "{info}");
    assert!(
        get(&server, "/metrics")
            .await
            .body
            .contains("snowflake_ready 0")
    );

    lease.set(held(0));
    get_until(&server, "/readyz", StatusCode::OK).await;
    let after = id_of(&get(&server, "/v1/id").await);
    assert!(after > before, "{after} <= {before}");
    stop(server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_that_is_not_renewed_closes_the_node_by_itself() {
    let dir = tempfile::tempdir().unwrap();
    let lease = FakeLease::new(held(0));
    // A long reservation makes the keeper tick once a second, so no tick lands at the deadline
    // (when one does, the deadline is missed: see
    // `a_lease_that_runs_out_during_a_reservation_write_still_closes_the_node`).
    let mut config = config(dir.path());
    config.clock.reserve_ms = 60_000;
    let server = start_with(config, T, &lease).await;
    wait_ready(&server).await;
    // The last renewal before the coordination service went out of reach: held 300 ms more.
    // (Sent once the node is open, so a slow start cannot use up the 300 ms.)
    let until = Instant::now() + Duration::from_millis(300);
    lease.set(Fence::Held { until, floor_ms: 0 });
    assert_eq!(ms_of(id_of(&get(&server, "/v1/id").await)), T);

    // The manual clock never moves, so the wall-clock issue limit alone would never stop the
    // node: only the monotonic deadline does, with no further change sent on the fence.
    let refused = loop {
        let reply = get(&server, "/v1/id").await;
        if reply.status == StatusCode::SERVICE_UNAVAILABLE {
            break reply;
        }
        assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
        assert!(
            Instant::now() < until + Duration::from_secs(3),
            "still issuing 3 s after the lease ran out"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(Instant::now() >= until, "refused before the lease ran out");
    assert!(
        refused.error().contains("could not be renewed in time"),
        "{}",
        refused.error()
    );
    assert_eq!(refused.headers["retry-after"], "1");
    assert_eq!(
        get(&server, "/readyz").await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    // It stays closed.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        get(&server, "/v1/id").await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(server.clock.now_ms(), T);
    stop(server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_waits_for_the_clock_to_pass_the_previous_holders_mark() {
    let dir = tempfile::tempdir().unwrap();
    let floor = T + 5000;
    let lease = FakeLease::new(held(floor));
    let server = start(dir.path(), T, &lease).await;

    let refused = get(&server, "/v1/id").await;
    assert_eq!(
        refused.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{refused:?}"
    );
    assert!(
        refused.error().contains(&format!("passes {floor}")),
        "{}",
        refused.error()
    );
    assert_eq!(refused.headers["retry-after"], "6");
    assert_eq!(
        get(&server, "/readyz").await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(
        get(&server, "/v1/info").await.json()["high_water_mark_ms"],
        floor
    );

    let ids = opens_only_above(&server, floor).await;
    assert_eq!(ids.len(), 50);
    stop(server).await;
    // Nothing at or below the floor was ever written to the coordinator: a successor that
    // read such a mark could reissue the previous holder's IDs.
    let marks = lease.marks();
    assert!(!marks.is_empty());
    assert!(marks.iter().all(|m| *m > floor), "{marks:?} vs {floor}");
}

/// After a claim above `floor` (Unix ms): nothing at the floor itself (the previous holder may
/// have used that millisecond), IDs from `floor + 1`, and never one at or below the floor even
/// when the clock steps back before it. Returns 50 IDs issued there.
async fn opens_only_above(server: &TestServer, floor: u64) -> Vec<u64> {
    server.clock.set_ms(floor);
    tokio::time::sleep(Duration::from_millis(120)).await;
    assert_eq!(
        get(server, "/v1/id").await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );

    server.clock.set_ms(floor + 1);
    wait_ready(server).await;
    server.clock.set_ms(floor - 1000);
    let refused = get(server, "/v1/id").await;
    assert_eq!(
        refused.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{refused:?}"
    );
    assert!(refused.error().contains("backwards"), "{}", refused.error());
    server.clock.set_ms(floor + 1);
    let ids = ids_of(&get(server, "/v1/ids?count=50").await);
    for id in &ids {
        assert!(ms_of(*id) > floor, "{id} at {} <= {floor}", ms_of(*id));
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reclaim_with_a_higher_floor_moves_the_node_above_it() {
    let dir = tempfile::tempdir().unwrap();
    let lease = FakeLease::new(held(0));
    let server = start(dir.path(), T, &lease).await;
    wait_ready(&server).await;
    let before = id_of(&get(&server, "/v1/id").await);
    assert_eq!(ms_of(before), T);

    // Lost and re-claimed: meanwhile another holder went up to `floor`.
    let floor = T + 2000;
    lease.set(held(floor));
    let refused = get_until(&server, "/v1/id", StatusCode::SERVICE_UNAVAILABLE).await;
    assert!(
        refused.error().contains(&format!("passes {floor}")),
        "{}",
        refused.error()
    );
    let ids = opens_only_above(&server, floor).await;
    for id in &ids {
        assert!(*id > before);
    }
    // Every ID is covered by a mark the coordinator accepted.
    let stored = lease.stored();
    assert!(
        ids.iter().all(|id| ms_of(*id) <= stored),
        "{stored}: {:?}",
        lease.calls()
    );
    stop(server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_id_is_issued_above_a_mark_the_coordinator_has_not_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let lease = FakeLease::new(held(0));
    let server = start(dir.path(), T, &lease).await;
    wait_ready(&server).await;

    // Steps large enough that the keeper's reservations and on-demand ones both happen.
    let mut last = 0;
    for step in [1, 37, 90, 150, 250, 5, 180, 400, 60, 120, 1000, 30] {
        server.clock.advance_ms(step);
        for id in ids_of(&get(&server, "/v1/ids?count=5").await) {
            assert!(id > last);
            last = id;
            let stored = lease.stored();
            assert!(
                ms_of(id) <= stored,
                "id at {} above the accepted mark {stored}",
                ms_of(id)
            );
        }
    }
    let marks = lease.marks();
    assert!(marks.len() >= 3, "{marks:?}");
    assert!(marks.windows(2).all(|w| w[0] <= w[1]), "{marks:?}");

    // The coordinator refuses marks from now on: the node may use what was accepted, no more.
    lease.refuse_marks(true);
    let accepted = lease.stored();
    server.clock.set_ms(accepted);
    assert_eq!(ms_of(id_of(&get(&server, "/v1/id").await)), accepted);
    server.clock.set_ms(accepted + 1);
    for _ in 0..5 {
        let refused = get(&server, "/v1/id").await;
        assert_eq!(
            refused.status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{refused:?}"
        );
        assert!(
            refused
                .error()
                .contains("cannot persist the high-water mark")
                && refused.error().contains(MARK_REFUSED),
            "{}",
            refused.error()
        );
        assert_eq!(
            get(&server, "/readyz").await.status,
            StatusCode::SERVICE_UNAVAILABLE
        );
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    // Even far past the reservation.
    server.clock.set_ms(accepted + 10_000);
    tokio::time::sleep(Duration::from_millis(120)).await;
    assert_eq!(
        get(&server, "/v1/ids?count=2").await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert!(lease.refused_count() >= 1, "{:?}", lease.calls());
    assert_eq!(lease.stored(), accepted);
    assert!(
        get(&server, "/metrics")
            .await
            .body
            .contains("snowflake_lease_mark_write_errors_total")
    );

    // Why, for the alerts: the mark write failed while the lease holds...
    let metrics = get(&server, "/metrics").await.body;
    assert!(
        metrics.contains("snowflake_not_ready_reason{reason=\"mark_write_failed\"} 1\n"),
        "{metrics}"
    );
    // ...and once the lease cannot be proven either, the lease is the reason (the write failed
    // because of it), in /readyz's sentence and in the reason label.
    lease.set(Fence::Lost {
        reason: "etcd is out of reach (test)".into(),
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let ready = get(&server, "/readyz").await;
        let metrics = get(&server, "/metrics").await.body;
        if ready
            .error()
            .contains("cannot prove it still holds its worker id")
            && metrics.contains("snowflake_not_ready_reason{reason=\"lease_not_proven\"} 1\n")
            && metrics.contains("snowflake_not_ready_reason{reason=\"mark_write_failed\"} 0\n")
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{}\n{metrics}",
            ready.error()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    lease.set(held(0));

    // Accepted again: the node recovers by itself.
    lease.refuse_marks(false);
    wait_ready(&server).await;
    let id = id_of(&get(&server, "/v1/id").await);
    assert_eq!(ms_of(id), accepted + 10_000);
    assert!(ms_of(id) <= lease.stored());
    stop(server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_stores_the_exact_mark_then_releases_the_pair() {
    let dir = tempfile::tempdir().unwrap();
    let lease = FakeLease::new(held(0));
    let server = start(dir.path(), T, &lease).await;
    wait_ready(&server).await;
    server.clock.set_ms(T + 10);
    let ids = ids_of(&get(&server, "/v1/ids?count=20").await);
    let highest = ids.iter().map(|id| ms_of(*id)).max().unwrap();
    assert_eq!(highest, T + 10);
    assert!(!lease.calls().contains(&Call::Release));
    stop(server).await;

    let calls = lease.calls();
    let n = calls.len();
    assert!(n >= 3, "{calls:?}");
    assert_eq!(
        calls[n - 3..],
        [
            Call::Mark {
                ms: T + 10,
                accepted: true
            },
            // The keep-alive loop stops before the release: beside a revoke it could take
            // the revoked lease for an expired one and claim the pair again.
            Call::RunStopped,
            Call::Release
        ],
        "{calls:?}"
    );
    assert_eq!(
        calls.iter().filter(|c| **c == Call::Release).count(),
        1,
        "{calls:?}"
    );
    // The local file records the same point.
    let local: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("node-0-0.json")).unwrap())
            .unwrap();
    assert_eq!(local["kind"], "shutdown");
    assert_eq!(local["high_water_ms"], T + 10);
}

/// Starts a node whose first reservation is held up in `store_mark`, changes the fence while
/// it is (the node is built but its keeper is not running yet), then lets the write finish.
async fn start_and_change_the_fence_while_opening(
    dir: &std::path::Path,
    lease: &Arc<FakeLease>,
    fence: Fence,
) -> TestServer {
    lease.hold_marks(true);
    let server = start_opening(config(dir), T, lease).await;
    let deadline = Instant::now() + Duration::from_secs(3);
    while lease.marks_started.load(Ordering::SeqCst) == 0 {
        assert!(
            Instant::now() < deadline,
            "the first reservation never started"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    lease.set(fence);
    lease.hold_marks(false);
    server
}

/// Waits until the node wrote its first mark (it opened), then gives its keeper 200 ms.
async fn opened(lease: &FakeLease) {
    let deadline = Instant::now() + Duration::from_secs(3);
    while lease.stored() == 0 {
        assert!(Instant::now() < deadline, "{:?}", lease.calls());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
}

/// Makes the keeper's next reservation due (the clock at `T + 150`) and holds it up in the
/// coordinator until `lease.hold_marks(false)`; returns once it has started.
async fn hold_up_the_next_reservation(server: &TestServer, lease: &FakeLease) {
    let started = lease.marks_started.load(Ordering::SeqCst);
    lease.hold_marks(true);
    server.clock.set_ms(T + 150);
    let deadline = Instant::now() + Duration::from_secs(3);
    while lease.marks_started.load(Ordering::SeqCst) == started {
        assert!(Instant::now() < deadline, "no reservation started");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

// Regression test; the bug it found, since fixed (node.rs, `Node::keep`): the keeper subscribed to
// the fence only when it starts, after `Node::start` has written the first reservation, and
// `watch::Sender::subscribe` marks the value current at that moment as seen; the keeper never
// applies it. A fence change sent between `Node::with_coordinator` reading the fence and the keeper
// starting is ignored until the next change: here the node keeps issuing IDs although the lease is
// lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_lost_while_the_node_opens_stops_it() {
    let dir = tempfile::tempdir().unwrap();
    let lease = FakeLease::new(held(0));
    let reason = "lost while opening (test)";
    let server = start_and_change_the_fence_while_opening(
        dir.path(),
        &lease,
        Fence::Lost {
            reason: reason.into(),
        },
    )
    .await;
    // Give the node time to open (it would, were the fence held) and its keeper time to start.
    opened(&lease).await;
    let reply = get(&server, "/v1/id").await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE, "{reply:?}");
    assert!(reply.error().contains(reason), "{}", reply.error());
    stop(server).await;
}

// Regression test; the bug it found, since fixed (same cause): a re-claim with a higher floor sent
// while the node opens is missed, so the node issues IDs at or below the floor, which the previous
// holder may have issued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reclaim_while_the_node_opens_moves_it_above_the_floor() {
    let dir = tempfile::tempdir().unwrap();
    let lease = FakeLease::new(held(0));
    let floor = T + 2000;
    let server = start_and_change_the_fence_while_opening(dir.path(), &lease, held(floor)).await;
    opened(&lease).await;
    let reply = get(&server, "/v1/id").await;
    if reply.status == StatusCode::OK {
        let at = ms_of(id_of(&reply));
        assert!(at > floor, "issued at {at}, at or below the floor {floor}");
    }
    server.clock.set_ms(floor + 1);
    wait_ready(&server).await;
    assert!(ms_of(id_of(&get(&server, "/v1/id").await)) > floor);
    stop(server).await;
}

// Regression test; the bug it found, since fixed (node.rs, `Node::keep`): fence changes are applied
// only by the keeper's loop, which also awaits its own reservations (`tick` → `reserve` → `store` →
// `Coordinator::store_mark`). While a mark write is slow (etcd bounds it by a third of the TTL), a
// lost lease is not applied: the node keeps issuing IDs and reports ready although the fence is
// down. (Uniqueness still holds: those IDs are at or below a mark the coordinator accepted.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_lost_during_a_slow_mark_write_stops_the_node_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let lease = FakeLease::new(held(0));
    let server = start(dir.path(), T, &lease).await;
    wait_ready(&server).await;
    // The keeper's next reservation is due, and the coordinator is slow to take it.
    hold_up_the_next_reservation(&server, &lease).await;
    let reason = "the claim was taken away (test)";
    lease.set(Fence::Lost {
        reason: reason.into(),
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let id = get(&server, "/v1/id").await;
    let ready = get(&server, "/readyz").await;
    lease.hold_marks(false);
    assert_eq!(id.status, StatusCode::SERVICE_UNAVAILABLE, "{id:?}");
    assert_eq!(ready.status, StatusCode::SERVICE_UNAVAILABLE, "{ready:?}");
    stop(server).await;
}

// Regression test; found by review, since fixed (node.rs, `Node::reserve`): a reservation computes
// its target, then awaits the write; a re-claim with a higher floor applied meanwhile raised the
// persisted mark and put the node to waiting for it, and the write's completion undid both: it
// set the persisted mark back to its lower target (what `/v1/info` and the metrics report as the
// mark no ID is above) and the phase to ready, while the generator (resumed above the floor)
// could issue nothing. (The coordinators' half of it, a mark written below the floor, is tested
// against real etcd and ZooKeeper: etcd_mark.rs, zookeeper_marks.rs.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reclaim_during_a_reservation_write_is_not_undone_when_the_write_completes() {
    let dir = tempfile::tempdir().unwrap();
    let lease = FakeLease::new(held(0));
    let server = start(dir.path(), T, &lease).await;
    wait_ready(&server).await;
    hold_up_the_next_reservation(&server, &lease).await;
    let floor = T + 60_000;
    lease.set(held(floor));
    tokio::time::sleep(Duration::from_millis(100)).await;
    lease.hold_marks(false);
    // The held write completes; let the keeper go round a few times on the same clock.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let ready = get(&server, "/readyz").await;
    let id = get(&server, "/v1/id").await;
    let info = get(&server, "/v1/info").await.json();
    let metrics = get(&server, "/metrics").await.body;
    assert_eq!(
        ready.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "ready below the floor: {ready:?}"
    );
    assert_eq!(id.status, StatusCode::SERVICE_UNAVAILABLE, "{id:?}");
    assert!(
        info["high_water_mark_ms"].as_u64() >= Some(floor),
        "the mark went back below the floor {floor}: {info}"
    );
    assert!(
        metrics.contains("snowflake_restart_mark_waiting 1"),
        "not waiting for the floor: {}",
        metrics
            .lines()
            .filter(|l| l.contains("mark"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    server.clock.set_ms(floor + 1);
    wait_ready(&server).await;
    assert!(ms_of(id_of(&get(&server, "/v1/id").await)) > floor);
    stop(server).await;
}

// Regression test; the bug it found, since fixed (node.rs, `Node::keep`): the keeper armed its
// deadline timer only while the deadline is still ahead (`Fence::Held { until, .. } if *until >
// Instant::now()`). When the deadline passes while the keeper is busy elsewhere (here a reservation
// write held up in `store_mark`; also a tick that wins the `select!` against the timer at the
// deadline), the next loop drops it, and nothing closes the node: it keeps issuing IDs and reports
// ready with the lease run out, until the wall-clock issue limit (frozen here) stops it.
// (Uniqueness still holds: IDs stay at or below marks the coordinator accepted.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_that_runs_out_during_a_reservation_write_still_closes_the_node() {
    let dir = tempfile::tempdir().unwrap();
    let lease = FakeLease::new(held(0));
    let server = start(dir.path(), T, &lease).await;
    wait_ready(&server).await;
    let until = Instant::now() + Duration::from_millis(300);
    lease.set(Fence::Held { until, floor_ms: 0 });
    // Let the keeper apply it, then hold up its next reservation across the deadline.
    tokio::time::sleep(Duration::from_millis(50)).await;
    hold_up_the_next_reservation(&server, &lease).await;
    assert!(Instant::now() < until, "the reservation started too late");
    tokio::time::sleep(
        until.saturating_duration_since(Instant::now()) + Duration::from_millis(100),
    )
    .await;
    lease.hold_marks(false);
    get_until(&server, "/v1/id", StatusCode::SERVICE_UNAVAILABLE).await;
    assert_eq!(
        get(&server, "/readyz").await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    stop(server).await;
}

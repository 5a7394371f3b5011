//! The ZooKeeper coordinator as a library, against a real ZooKeeper: marks of the previous
//! release, claimants skipping workers whose mark cannot be used, the operator functions
//! behind `snowflake state show` / `lower-mark`, and the fence when the registration znode is
//! deleted by hand.

use crate::support::now_ms;
use crate::zookeeper_fleet::{EPOCH_MS, MARKS, PATH, mark, mark_json};
use crate::zookeeper_server::{ZooKeeper, quote};
use snowflake_core::Layout;
use snowflake_fleet::zookeeper::{RegisterError, ZooKeeperRegistration};
use snowflake_fleet::{Coordinator, Fence, LowerMark, StoredMark, ZooKeeperConfig};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The address the test registrations advertise (nothing listens there: no peer checks run
/// against it, since each test registers one worker at a time or none is reachable).
const DATA: &str = "127.0.0.1:1";

fn config(zk: &ZooKeeper) -> ZooKeeperConfig {
    let mut config = ZooKeeperConfig::new(vec![zk.connect_string()]);
    config.session_timeout = Duration::from_secs(6);
    config.claim_timeout = Duration::from_secs(3);
    config
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

async fn register(
    zk: &ZooKeeper,
    worker_id: Option<u64>,
) -> Result<ZooKeeperRegistration, RegisterError> {
    let now = now_ms();
    ZooKeeperRegistration::register(
        &config(zk),
        &Layout::TWITTER,
        0,
        worker_id,
        DATA.into(),
        &snowflake_core::ManualClock::new(now),
    )
    .await
}

/// `snowflake state show`'s library call for worker `worker_id`, its error as the tool
/// prints it.
async fn read_mark(
    config: &ZooKeeperConfig,
    layout: &Layout,
    worker_id: u64,
) -> Result<StoredMark, String> {
    snowflake_fleet::zookeeper::read_mark(config, layout, worker_id)
        .await
        .map_err(|e| e.to_string())
}

/// `snowflake state lower-mark`'s library call, its error as the tool prints it.
async fn lower_mark(
    config: &ZooKeeperConfig,
    layout: &Layout,
    worker_id: u64,
    to_ms: u64,
    by: &str,
    now_ms: u64,
) -> Result<StoredMark, String> {
    let lowering = LowerMark { to_ms, by, now_ms };
    snowflake_fleet::zookeeper::lower_mark(config, layout, worker_id, &lowering)
        .await
        .map_err(|e| e.to_string())
}

fn floor_of(registration: &ZooKeeperRegistration) -> u64 {
    match &*registration.fence().borrow() {
        Fence::Held { floor_ms, .. } => *floor_ms,
        lost => panic!("not held: {lost:?}"),
    }
}

fn session_of(registration: &ZooKeeperRegistration) -> String {
    registration.info().lease_id.expect("a session")
}

/// Creates the registration and mark parents, as a node would.
fn parents(zk: &ZooKeeper) {
    zk.create(PATH, "", false);
    zk.create(MARKS, "", false);
}

#[test]
fn a_mark_in_the_previous_format_is_the_floor_and_is_claimed() {
    let started = Instant::now();
    let zk = ZooKeeper::start();
    parents(&zk);
    let floor = now_ms() + 60_000;
    // Exactly what the previous release wrote.
    let old = format!(
        r#"{{"high_water_ms":{floor},"time":"{}","epoch_ms":{EPOCH_MS},"session":"100000a1b2c0000"}}"#,
        snowflake_core::format_unix_ms(floor)
    );
    zk.create(&format!("{MARKS}/0"), &old, false);
    runtime().block_on(async {
        let a = register(&zk, Some(0)).await.expect("registered");
        assert_eq!(floor_of(&a), floor, "the old mark is the floor");
        // Claimed: the same mark, with this session as its writer.
        let claimed = mark_json(&zk, 0);
        assert_eq!(claimed["high_water_ms"], floor, "{claimed}");
        assert_eq!(claimed["session"], session_of(&a), "{claimed}");
        assert_eq!(
            claimed["time"],
            snowflake_core::format_unix_ms(floor),
            "{claimed}"
        );

        let shown = read_mark(&config(&zk), &Layout::TWITTER, 0)
            .await
            .expect("read");
        assert_eq!(shown.high_water_ms, floor);
        assert_eq!(shown.location, format!("{MARKS}/0"));
        let holder = shown.holder.expect("held");
        assert!(
            holder.contains(DATA) && holder.contains(&session_of(&a)),
            "{holder}"
        );

        a.store_mark(floor + 1000).await.expect("the holder writes");
        assert_eq!(mark(&zk, 0), floor + 1000);
        a.release().await;
        assert_eq!(zk.children(PATH), Vec::<String>::new(), "released");
    });
    eprintln!(
        "zookeeper_marks: old-format test took {:?}",
        started.elapsed()
    );
}

#[test]
fn claimants_skip_workers_whose_mark_cannot_be_used_and_a_pinned_one_refuses() {
    let started = Instant::now();
    let zk = ZooKeeper::start();
    parents(&zk);
    // A path of this release records its layout: the marks below are per-pair trouble then
    // (without the record, the other epoch's mark would stop the first registrant from
    // recording Twitter's layout at all: `layouts_fleet`).
    zk.create(
        &format!("{PATH}-layout"),
        r#"{"name":"twitter","timestamp_bits":41,"datacenter_bits":5,"worker_bits":5,"sequence_bits":12,"epoch_ms":1288834974657,"max_id":"9223372036854775807"}"#,
        false,
    );
    zk.create(&format!("{MARKS}/0"), "garbage", false);
    zk.create(
        &format!("{MARKS}/1"),
        r#"{"high_water_ms":1700000000000,"epoch_ms":0,"session":"1"}"#,
        false,
    );
    let last_ms = Layout::TWITTER.max_timestamp_ms();
    zk.create(
        &format!("{MARKS}/2"),
        &format!(r#"{{"high_water_ms":{last_ms},"epoch_ms":{EPOCH_MS},"session":"1"}}"#),
        false,
    );
    runtime().block_on(async {
        let a = register(&zk, None).await.expect("a usable worker");
        assert_eq!(a.worker_id(), 3, "0, 1 and 2 skipped");
        assert_eq!(zk.children(PATH), ["3"], "nothing else registered");

        for (worker, needle) in [
            (0, "not JSON"),
            (1, "epoch 0"),
            (2, "at or past the layout's last millisecond"),
        ] {
            let err = register(&zk, Some(worker))
                .await
                .expect_err("an unusable mark");
            let message = err.to_string();
            assert!(
                matches!(err, RegisterError::BadMark { worker_id, .. } if worker_id == worker),
                "{message}"
            );
            assert!(
                message.contains(needle) && message.contains("snowflake state lower-mark"),
                "{message}"
            );
        }
        assert_eq!(zk.children(PATH), ["3"], "no pinned attempt registered");
        // The marks are left as they were.
        assert_eq!(zk.get(&format!("{MARKS}/0")).as_deref(), Some("garbage"));
        a.release().await;
    });
    eprintln!("zookeeper_marks: skip test took {:?}", started.elapsed());
}

#[test]
fn lower_mark_is_refused_while_a_node_holds_the_worker_and_lowers_it_afterwards() {
    let started = Instant::now();
    let zk = ZooKeeper::start();
    let config = config(&zk);
    let layout = Layout::TWITTER;
    runtime().block_on(async {
        let a = register(&zk, Some(0)).await.expect("registered");
        let poisoned = now_ms() + 10 * 86_400_000;
        a.store_mark(poisoned).await.expect("stored");
        let to = now_ms();

        let refused = lower_mark(&config, &layout, 0, to, "alice", to)
            .await
            .expect_err("held");
        assert!(
            refused.contains(&format!(
                "worker 0 is held by {DATA} (session {}",
                session_of(&a)
            )) && refused.contains("stop that node first"),
            "{refused}"
        );
        assert_eq!(mark(&zk, 0), poisoned, "untouched");
        a.release().await;

        for not_lower in [poisoned, poisoned + 1] {
            let refused = lower_mark(&config, &layout, 0, not_lower, "alice", to)
                .await
                .expect_err("not lower");
            assert!(refused.contains("is not below it"), "{refused}");
        }
        let none = lower_mark(&config, &layout, 5, to, "alice", to)
            .await
            .expect_err("no mark");
        assert!(none.contains("nothing to lower"), "{none}");

        let previous = lower_mark(&config, &layout, 0, to, "alice", to)
            .await
            .expect("lowered");
        assert_eq!(previous.high_water_ms, poisoned);
        assert_eq!(previous.holder, None);
        let shown = read_mark(&config, &layout, 0).await.expect("read");
        assert_eq!(shown.high_water_ms, to);
        assert_eq!(shown.holder, None, "its own registration is gone");
        let json: serde_json::Value = serde_json::from_str(&shown.value).expect("JSON");
        assert_eq!(json["lowered"]["from_ms"], poisoned, "{json}");
        assert_eq!(json["lowered"]["by"], "alice", "{json}");
        assert_eq!(zk.children(PATH), Vec::<String>::new());

        // The next holder starts above the lowered mark.
        let b = register(&zk, Some(0)).await.expect("registered again");
        assert_eq!(floor_of(&b), to);
        b.release().await;
    });
    eprintln!(
        "zookeeper_marks: lower-mark test took {:?}",
        started.elapsed()
    );
}

#[test]
fn a_holder_fences_at_once_when_its_znode_is_deleted_and_registers_again() {
    let started = Instant::now();
    let zk = ZooKeeper::start();
    runtime().block_on(async {
        let a = Arc::new(register(&zk, Some(0)).await.expect("registered"));
        let first_session = session_of(&a);
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let keeper = tokio::spawn({
            let a = Arc::clone(&a);
            async move { a.run(stop_rx).await }
        });
        let mut fence = a.fence();
        // Let the keeper take its watch over.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(matches!(*fence.borrow_and_update(), Fence::Held { .. }));

        let zk_ref = &zk;
        let deleted = tokio::task::block_in_place(|| {
            zk_ref.cli(&[&format!("delete {PATH}/0")]);
            Instant::now()
        });
        // The session timeout is 6 s (a stat every 2 s): only the watch is this fast. (It may
        // be held again, by a new session, before the fence is looked at: count the losses.)
        let lost_after = tokio::time::timeout(Duration::from_secs(1), async {
            while a.info().losses == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            deleted.elapsed()
        })
        .await
        .unwrap_or_else(|_| panic!("still held 1 s after {PATH}/0 was deleted"));
        eprintln!("zookeeper_marks: fenced {lost_after:?} after zkCli returned");
        // The worker is free: registered again, under a new session, with a new proof.
        tokio::time::timeout(Duration::from_secs(10), async {
            while !matches!(*fence.borrow_and_update(), Fence::Held { .. }) {
                fence.changed().await.expect("the fence");
            }
        })
        .await
        .expect("held again within 10 s");
        let second_session = session_of(&a);
        assert_ne!(second_session, first_session);
        assert_eq!(mark_json(&zk, 0)["session"], second_session);
        a.store_mark(now_ms())
            .await
            .expect("the new session writes");
        stop_tx.send(true).expect("stop");
        keeper.await.expect("the keeper").expect("no error");
        a.release().await;
    });
    eprintln!(
        "zookeeper_marks: deletion-fence test took {:?}",
        started.elapsed()
    );
}

// Found by review (the etcd twin is in etcd_mark.rs): a reservation the node computed before a
// re-registration, written after it, went through under the new session and put a mark below the
// floor the registration read, that is below IDs another holder had issued.
#[test]
fn a_mark_written_after_a_reregistration_never_goes_below_the_floor_it_read() {
    let started = Instant::now();
    let zk = ZooKeeper::start();
    runtime().block_on(async {
        let a = Arc::new(register(&zk, Some(0)).await.expect("registered"));
        let first_session = session_of(&a);
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let keeper = tokio::spawn({
            let a = Arc::clone(&a);
            async move { a.run(stop_rx).await }
        });
        // Let the keeper take its watch over.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let base = now_ms();
        a.store_mark(base).await.expect("a first mark");

        // While this node is out (its znode gone), another holder issued up to `floor`.
        let floor = base + 60_000;
        let other =
            format!("{{\"high_water_ms\":{floor},\"epoch_ms\":{EPOCH_MS},\"session\":\"b0b\"}}");
        let zk_ref = &zk;
        tokio::task::block_in_place(|| {
            zk_ref.cli(&[
                &format!("set {MARKS}/0 {}", quote(&other)),
                &format!("delete {PATH}/0"),
            ]);
        });
        let mut fence = a.fence();
        tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                let again = a.info().lease_id.is_some_and(|s| s != first_session);
                if again && matches!(*fence.borrow_and_update(), Fence::Held { .. }) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("registered again within 10 s");
        assert_eq!(
            floor_of(&a),
            floor,
            "the registration read the other holder's mark"
        );

        // The reservation computed before the re-registration lands now.
        a.store_mark(base + 1000)
            .await
            .expect("the write goes through");
        let stored = mark(&zk, 0);
        assert!(
            stored >= floor,
            "the mark in ZooKeeper went down to {stored}, below the floor {floor}"
        );
        stop_tx.send(true).expect("stop");
        keeper.await.expect("the keeper").expect("no error");
        a.release().await;
    });
    eprintln!(
        "zookeeper_marks: write-after-reregistration test took {:?}",
        started.elapsed()
    );
}

//! The wall clock stepping forward (SPEC §8, "Clock steps forward"), on the real binary with
//! libfaketime moving the child's clock: a step of years for a moment must leave nothing behind
//! (no ID and no mark dated in the future), a lasting step is trusted once it has held, and a
//! crash during or right after a step costs no more than the reservation.

use crate::etcd_cluster::EtcdCluster;
use crate::support::{FakeClock, Serve, ServeProcess, state_file};
use crate::support::{assert_exit, now_ms, temp_dir, timestamp_ms, worker_of};
use crate::zookeeper_fleet::{PATH, mark, zk_node_with_session};
use crate::zookeeper_server::ZooKeeper;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What a load thread saw: every ID, and every refusal's message.
#[derive(Debug, Default)]
struct Seen {
    ids: Vec<u64>,
    refusals: Vec<String>,
}

/// Requests batches from `node` as fast as it answers, until `stop`.
fn load(
    addr: std::net::SocketAddr,
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Seen>>,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let Ok(response) = crate::support::try_get(addr, "/v1/ids?count=100") else {
                continue;
            };
            let mut seen = seen.lock().unwrap();
            if response.status == 200 {
                seen.ids.extend(response.ids());
            } else {
                seen.refusals.push(response.error());
            }
        }
    })
}

/// The latest time any ID or mark may carry when the real clock reads `real_now_ms`: the
/// reservation ahead, and a second of slack for the test's own reading.
fn latest_allowed(real_now_ms: u64, reserve_ms: u64) -> u64 {
    real_now_ms + reserve_ms + 1000
}

/// Steps the child's clock by each offset for two seconds under load, then back; returns what
/// the load saw.
fn step_twice_under_load(node: &ServeProcess, clock: &FakeClock, offsets: &[&str]) -> Seen {
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let loader = load(node.addr(), Arc::clone(&stop), Arc::clone(&seen));
    std::thread::sleep(Duration::from_millis(300));
    for offset in offsets {
        clock.set(offset);
        std::thread::sleep(Duration::from_secs(2));
        clock.set("+0");
        std::thread::sleep(Duration::from_millis(500));
    }
    stop.store(true, Ordering::Relaxed);
    loader.join().unwrap();
    Arc::try_unwrap(seen).unwrap().into_inner().unwrap()
}

fn assert_nothing_dated_ahead(seen: &Seen, reserve_ms: u64, what: &str) {
    let limit = latest_allowed(now_ms(), reserve_ms);
    assert!(!seen.ids.is_empty(), "{what}: no id at all under load");
    let ahead: Vec<u64> = seen
        .ids
        .iter()
        .copied()
        .filter(|&id| timestamp_ms(id) > limit)
        .collect();
    assert!(
        ahead.is_empty(),
        "{what}: {} of {} ids are dated in the future, e.g. {} at {} (now {})",
        ahead.len(),
        seen.ids.len(),
        ahead[0],
        snowflake_core::format_unix_ms(timestamp_ms(ahead[0])),
        snowflake_core::format_unix_ms(now_ms())
    );
    let mut sorted = seen.ids.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), seen.ids.len(), "{what}: a duplicate id");
}

/// Polls `/readyz` until 200; returns how long it took.
fn ready_within(node: &ServeProcess, limit: Duration) -> Duration {
    let started = Instant::now();
    node.poll("/readyz", limit, |r| r.status == 200);
    started.elapsed()
}

#[test]
fn a_clock_20_and_60_years_ahead_for_two_seconds_leaves_nothing_behind_even_after_kill_9() {
    const RESERVE_MS: u64 = 1000;
    let clock = FakeClock::new();
    let dir = temp_dir();
    let serve = || {
        Serve::new(dir.path())
            .args(["--reserve-ms", &RESERVE_MS.to_string()])
            .faketime(&clock)
    };
    let node = serve().start();
    let seen = step_twice_under_load(&node, &clock, &["+20y", "+60y"]);
    assert_nothing_dated_ahead(&seen, RESERVE_MS, "while the clock stepped");
    assert!(
        seen.refusals.iter().any(|m| m.contains("stepped forward")),
        "the refusals during the step say the clock stepped forward: {:?}",
        seen.refusals.iter().take(3).collect::<Vec<_>>()
    );
    // The node serves again at once with the real clock.
    let after = node.get("/v1/id");
    assert_eq!(after.status, 200, "{after:?}");
    let old_max = after.ids()[0].max(*seen.ids.iter().max().unwrap());
    node.kill9();

    let mark = state_file(dir.path(), 0, 0);
    let mark_ms = mark["high_water_ms"].as_u64().unwrap();
    assert!(
        mark_ms <= latest_allowed(now_ms(), RESERVE_MS),
        "the mark on disk is dated in the future: {mark}"
    );

    let restarted = serve().start();
    let waited = ready_within(&restarted, Duration::from_millis(RESERVE_MS + 3000));
    assert!(
        waited <= Duration::from_millis(RESERVE_MS + 3000),
        "ready after {waited:?}"
    );
    let next = restarted.get("/v1/id").ids()[0];
    assert!(next > old_max, "{next} after {old_max}");
    assert_exit(&restarted.stop_with("TERM"), 0);
}

#[test]
fn a_fleet_node_whose_clock_steps_years_ahead_writes_no_future_mark_in_etcd() {
    const RESERVE_MS: u64 = 1000;
    let etcd = EtcdCluster::start(1);
    let clock = FakeClock::new();
    let dir = temp_dir();
    let serve = || {
        Serve::new(dir.path())
            .args(["--etcd-endpoints", &etcd.endpoints()])
            .args(["--etcd-prefix", "/sf", "--datacenter-id", "3"])
            .args([
                "--lease-ttl-secs",
                "3",
                "--reserve-ms",
                &RESERVE_MS.to_string(),
            ])
            .faketime(&clock)
    };
    let node = serve().start();
    node.poll("/readyz", Duration::from_secs(10), |r| r.status == 200);
    let seen = step_twice_under_load(&node, &clock, &["+20y", "+60y"]);
    assert_nothing_dated_ahead(&seen, RESERVE_MS, "a fleet node while its clock stepped");
    let old_max = *seen.ids.iter().max().unwrap();
    node.kill9();

    let marks = etcd.get_prefix("/sf/marks/3/");
    assert!(!marks.is_empty(), "no mark in etcd");
    for (key, value) in &marks {
        let mark: serde_json::Value = serde_json::from_str(value).unwrap();
        let mark_ms = mark["high_water_ms"].as_u64().unwrap();
        assert!(
            mark_ms <= latest_allowed(now_ms(), RESERVE_MS),
            "{key} is dated in the future: {value}"
        );
    }
    // A restart (after the dead node's lease expires) serves within the TTL and the reservation.
    let restarted = serve().start();
    let waited = ready_within(&restarted, Duration::from_secs(12));
    assert!(waited <= Duration::from_secs(12), "ready after {waited:?}");
    let next = restarted.get("/v1/id").ids()[0];
    assert!(next > old_max, "{next} after {old_max}");
    assert_exit(&restarted.stop_with("TERM"), 0);
}

// Found by the fault campaign (RELIABILITY.md): a node restarting in a ZooKeeper fleet spends
// seconds in the 2010 peer check when a crashed peer's znode lingers (each silent peer costs a
// 2 s call timeout). A clock stepped years ahead in that window was taken for the starting
// reading: the node issued IDs, and wrote marks locally and in ZooKeeper, dated 20 years ahead.
// The time the node trusts must be anchored when the process starts, so a step during the start
// is a step like any other.
#[test]
fn a_clock_stepped_ahead_during_a_slow_zookeeper_start_is_not_trusted() {
    const RESERVE_MS: u64 = 1000;
    let zk = ZooKeeper::start();
    // A registered peer that accepts connections (the kernel's backlog) and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    zk.create(PATH, "", false);
    zk.create(
        &format!("{PATH}/9"),
        &silent.local_addr().unwrap().to_string(),
        false,
    );
    let clock = FakeClock::new();
    let dir = temp_dir();
    let mut node = zk_node_with_session(&zk, dir.path(), 4000)
        .args(["--reserve-ms", &RESERVE_MS.to_string()])
        .faketime(&clock)
        .spawn();
    // Registration begins with the peer check, which waits on the silent peer.
    node.wait_for_line("registering a worker id in ZooKeeper");
    clock.set("+20y");
    node.wait_listening();
    let worker = worker_of(&node);

    // While the clock reads 20 years ahead: nothing dated then, and a refusal that says why.
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let loader = load(node.addr(), Arc::clone(&stop), Arc::clone(&seen));
    std::thread::sleep(Duration::from_millis(1500));
    clock.set("+0");
    // With the clock back, the node serves at once.
    let back = Instant::now();
    node.poll("/readyz", Duration::from_secs(5), |r| r.status == 200);
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    loader.join().unwrap();
    let seen = Arc::try_unwrap(seen).unwrap().into_inner().unwrap();
    assert_nothing_dated_ahead(
        &seen,
        RESERVE_MS,
        "a node whose clock stepped while starting",
    );
    assert!(
        seen.refusals.iter().any(|m| m.contains("stepped forward")),
        "the refusals while the clock was ahead say it stepped forward: {:?}",
        seen.refusals.iter().take(3).collect::<Vec<_>>()
    );
    assert!(back.elapsed() < Duration::from_secs(5));

    // Neither mark was dated ahead: ZooKeeper's, and (after a graceful stop) the local one.
    let zk_mark = mark(&zk, worker);
    assert!(
        zk_mark <= latest_allowed(now_ms(), RESERVE_MS),
        "the mark in ZooKeeper is dated in the future: {}",
        snowflake_core::format_unix_ms(zk_mark)
    );
    assert_exit(&node.stop_with("TERM"), 0);
    let local = state_file(dir.path(), 0, u32::try_from(worker).unwrap());
    assert!(
        local["high_water_ms"].as_u64().unwrap() <= latest_allowed(now_ms(), RESERVE_MS),
        "the local mark is dated in the future: {local}"
    );
    drop(silent);
}

// Found by the fault campaign: a node that stops by itself (it lost its lease) is restarted at
// once by its supervisor (systemd's `Restart=on-failure`, Kubernetes). When its clock read 20
// years ahead at that moment, the new process trusted its first reading: it issued IDs, and
// wrote marks, dated 2046. A restart on the same boot is no operator's word that the clock is
// right: the kernel's boot-time clock says how long the node was down, so the wall clock can be
// checked against the last time the previous run trusted.
#[test]
fn a_restart_while_the_clock_is_years_ahead_is_not_trusted_on_the_same_boot() {
    const RESERVE_MS: u64 = 1000;
    let clock = FakeClock::new();
    let dir = temp_dir();
    let serve = || {
        Serve::new(dir.path())
            .args(["--reserve-ms", &RESERVE_MS.to_string()])
            .faketime(&clock)
    };
    for stop in ["KILL", "TERM"] {
        let node = serve().start();
        ready_within(&node, Duration::from_secs(5));
        let before = node.get("/v1/id").ids()[0];
        if stop == "KILL" {
            node.kill9();
        } else {
            assert_exit(&node.stop_with("TERM"), 0);
        }
        clock.set("+20y");
        let restarted = serve().start();
        let stop_load = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Seen::default()));
        let loader = load(restarted.addr(), Arc::clone(&stop_load), Arc::clone(&seen));
        std::thread::sleep(Duration::from_millis(1500));
        let unready = restarted.get("/readyz");
        clock.set("+0");
        let waited = ready_within(&restarted, Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(300));
        stop_load.store(true, Ordering::Relaxed);
        loader.join().unwrap();
        let seen = Arc::try_unwrap(seen).unwrap().into_inner().unwrap();
        let what = format!("restarted after {stop} with the clock 20 years ahead");
        assert_nothing_dated_ahead(&seen, RESERVE_MS, &what);
        assert_eq!(unready.status, 503, "{what}: ready on a stepped clock");
        assert!(
            unready.body.contains("stepped forward"),
            "{what}: /readyz says why: {unready:?}"
        );
        assert!(
            waited < Duration::from_secs(5),
            "{what}: ready after {waited:?}"
        );
        let after = restarted.get("/v1/id").ids()[0];
        assert!(after > before, "{what}: {after} after {before}");
        assert_exit(&restarted.stop_with("TERM"), 0);
        let mark = state_file(dir.path(), 0, 0);
        assert!(
            mark["high_water_ms"].as_u64().unwrap() <= latest_allowed(now_ms(), RESERVE_MS),
            "{what}: the mark on disk is dated in the future: {mark}"
        );
    }
    // The documented way out when a step of more than a day is right: remove clock.json.
    clock.set("+20y");
    std::fs::remove_file(dir.path().join("clock.json")).expect("clock.json is there");
    let trusted = serve().start();
    ready_within(&trusted, Duration::from_secs(5));
    let id = trusted.get("/v1/id").ids()[0];
    assert!(
        timestamp_ms(id) > now_ms() + 600_000_000_000,
        "the operator's word trusts the new time: {}",
        snowflake_core::format_unix_ms(timestamp_ms(id))
    );
    assert_exit(&trusted.stop_with("TERM"), 0);
}

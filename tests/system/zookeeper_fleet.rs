//! Real `snowflake serve` processes registering their worker ids in a real ZooKeeper, as the
//! 2010 Snowflake did (`--zookeeper`): the ephemeral znode `PATH/W` holding the node's Thrift
//! address, the 2010 peer checks (worker id, datacenter id, clock skew), takeover after a crash
//! above the dead node's mark, fencing while ZooKeeper is frozen and a new session afterwards,
//! no duplicate across nodes, the release at a graceful stop; and the host-based worker ids
//! (`--worker-id-from-hostname`, the config file's `[worker_id_map]`), which need no ZooKeeper.

use crate::support::{
    FakeClock, Finished, Serve, ServeProcess, assert_exit, first_id, get, info, insert_all, now_ms,
    temp_dir, timestamp_ms, try_get, worker_in, worker_of,
};
use crate::zookeeper_server::ZooKeeper;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The session timeout the test nodes ask for, in ms: short, so expiry-based tests stay quick
/// (the harness's ZooKeeper accepts 1000..=60000).
const SESSION_MS: u64 = 2000;
/// The 2010 registration path (the default of `--zookeeper-path`).
pub(crate) const PATH: &str = "/snowflake-servers";
/// Where the high-water marks live: a sibling of [`PATH`].
pub(crate) const MARKS: &str = "/snowflake-servers-marks";
/// Twitter's epoch, the default layout's.
pub(crate) const EPOCH_MS: u64 = 1_288_834_974_657;

/// `snowflake serve` registering in `zk` with a session of `session_ms`, its own state dir.
pub(crate) fn zk_node_with_session(zk: &ZooKeeper, state_dir: &Path, session_ms: u64) -> Serve {
    Serve::new(state_dir).args([
        "--zookeeper",
        &zk.connect_string(),
        "--zookeeper-session-timeout-ms",
        &session_ms.to_string(),
    ])
}

/// `snowflake serve` registering in `zk` with the test session timeout.
fn zk_node(zk: &ZooKeeper, state_dir: &Path) -> Serve {
    zk_node_with_session(zk, state_dir, SESSION_MS)
}

/// The ZooKeeper session a node says it holds (hex, as `/v1/info` shows it).
pub(crate) fn session_of(node: &ServeProcess) -> String {
    let info = info(node);
    info["lease"]["lease_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no session in {info}"))
        .to_owned()
}

pub(crate) fn assert_mentions(finished: &Finished, needles: &[&str]) {
    for needle in needles {
        assert!(
            finished.stderr.contains(needle),
            "stderr lacks {needle:?}:\n{}",
            finished.stderr
        );
    }
}

/// The mark znode of `worker` as JSON.
pub(crate) fn mark_json(zk: &ZooKeeper, worker: u64) -> serde_json::Value {
    let path = format!("{MARKS}/{worker}");
    let text = zk
        .get(&path)
        .unwrap_or_else(|| panic!("no mark znode {path}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path} is not JSON ({e}): {text:?}"))
}

/// The high-water mark of `worker` in ZooKeeper (Unix ms).
pub(crate) fn mark(zk: &ZooKeeper, worker: u64) -> u64 {
    let json = mark_json(zk, worker);
    json["high_water_ms"]
        .as_u64()
        .unwrap_or_else(|| panic!("no high_water_ms in {json}"))
}

/// How many ephemeral znodes the server holds, from `mntr` (a four-letter word: no client
/// session, so it answers in milliseconds).
fn ephemerals(zk: &ZooKeeper) -> u64 {
    let mntr = zk.four_letter("mntr");
    mntr.lines()
        .find_map(|l| l.strip_prefix("zk_ephemerals_count"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no zk_ephemerals_count in mntr:\n{mntr}"))
}

#[test]
fn a_node_registers_its_thrift_address_under_an_ephemeral_znode() {
    let zk = ZooKeeper::start();
    let dir = temp_dir();
    let node = zk_node(&zk, dir.path()).start();
    let thrift = node.thrift_addr();
    assert!(thrift.ip().is_loopback() && thrift.port() != 0, "{thrift}");
    let ids = node.get("/v1/ids?count=100").ids();
    assert!(ids.iter().all(|&id| worker_in(id) == 0));

    // Read back with ZooKeeper's own client: the 2010 layout.
    assert_eq!(zk.children(PATH), ["0"], "only workers under {PATH}");
    assert_eq!(
        zk.get(&format!("{PATH}/0")).as_deref(),
        Some(thrift.to_string().as_str()),
        "the znode holds the node's Thrift address"
    );
    let owner = zk
        .ephemeral_owner(&format!("{PATH}/0"))
        .expect("the znode exists");
    assert!(
        owner.starts_with("0x") && owner != "0x0",
        "ephemeral: {owner}"
    );

    let info = info(&node);
    assert_eq!(info["identity_source"], "zookeeper", "{info}");
    assert_eq!(info["worker_id"], 0, "{info}");
    assert_eq!(info["datacenter_id"], 0, "{info}");
    let lease = &info["lease"];
    assert!(lease.is_object(), "{info}");
    assert_eq!(lease["state"], "held", "{info}");
    assert_eq!(lease["key"], format!("{PATH}/0"), "{info}");
    assert_eq!(
        format!("0x{}", lease["lease_id"].as_str().unwrap()),
        owner,
        "the session that owns the znode: {info}"
    );
    assert_eq!(lease["ttl_secs"], SESSION_MS / 1000, "{info}");
    let remaining = lease["remaining_ms"].as_u64().unwrap();
    assert!(remaining > 0 && remaining <= SESSION_MS, "{info}");
    let metrics = node.get("/metrics").body;
    assert!(
        metrics.contains("identity_source=\"zookeeper\""),
        "{metrics}"
    );
    // The datacenter's held workers, read from the znodes.
    assert!(
        metrics.contains("snowflake_fleet_pairs_held{datacenter_id=\"0\"} 1\n")
            && metrics.contains("snowflake_fleet_pairs_free{datacenter_id=\"0\"} 31\n"),
        "{metrics}"
    );

    // The mark: a persistent sibling, written before use by this session.
    let mark = mark_json(&zk, 0);
    let high_water = mark["high_water_ms"].as_u64().expect("high_water_ms");
    let max = *ids.iter().max().unwrap();
    assert!(high_water >= timestamp_ms(max), "{mark} below {max}");
    assert_eq!(mark["epoch_ms"], EPOCH_MS, "{mark}");
    assert_eq!(mark["session"], lease["lease_id"], "{mark}");
    assert_eq!(
        zk.ephemeral_owner(&format!("{MARKS}/0")).as_deref(),
        Some("0x0"),
        "the mark outlives the session"
    );
}

#[test]
fn a_node_pinned_to_a_registered_worker_never_serves_it() {
    let zk = ZooKeeper::start();
    let dirs: Vec<_> = (0..3).map(|_| temp_dir()).collect();
    let a = zk_node(&zk, dirs[0].path()).start();
    let a_thrift = a.thrift_addr().to_string();
    assert_eq!(worker_of(&a), 0);
    let a_session = session_of(&a);

    let started = Instant::now();
    let b = zk_node(&zk, dirs[1].path())
        .args(["--worker-id", "0", "--claim-timeout-secs", "2"])
        .run_to_exit();
    let took = started.elapsed();
    assert_exit(&b, 1);
    assert!(took >= Duration::from_secs(2), "retried first: {took:?}");
    assert!(took < Duration::from_secs(8), "gave up late: {took:?}");
    assert_mentions(
        &b,
        &[
            &format!("worker 0 is registered by another node at {a_thrift}"),
            &format!("({PATH}/0, session {a_session})"),
        ],
    );
    assert!(!b.stderr.contains("http listening"), "never served");

    // The holder is untouched.
    assert_eq!(zk.get(&format!("{PATH}/0")), Some(a_thrift));
    assert_eq!(session_of(&a), a_session);
    assert_eq!(a.get("/v1/id").status, 200);

    // Without --worker-id, the lowest free worker.
    let c = zk_node(&zk, dirs[2].path()).start();
    assert_eq!(worker_of(&c), 1);
    let ids = c.get("/v1/ids?count=10").ids();
    assert!(ids.iter().all(|&id| worker_in(id) == 1));
    assert_eq!(zk.children(PATH), ["0", "1"]);
    assert_eq!(
        zk.get(&format!("{PATH}/1")),
        Some(c.thrift_addr().to_string())
    );
}

#[test]
fn peers_refuse_another_datacenter_and_a_distant_clock() {
    let zk = ZooKeeper::start();
    let dirs: Vec<_> = (0..3).map(|_| temp_dir()).collect();
    let a = zk_node(&zk, dirs[0].path()).start();
    let a_thrift = a.thrift_addr().to_string();

    // One path holds one datacenter's workers.
    let other_dc = zk_node(&zk, dirs[1].path())
        .args(["--datacenter-id", "1"])
        .run_to_exit();
    assert_exit(&other_dc, 1);
    assert_mentions(
        &other_dc,
        &[
            "peer check failed",
            &format!("the peer at {a_thrift} ({PATH}/0) is in datacenter 0"),
            "this node in 1",
        ],
    );
    assert!(!other_dc.stderr.contains("http listening"));

    // A clock 20 s ahead of the peers' (the default allows 10 s).
    let clock = FakeClock::new();
    clock.set("+20");
    let skewed = zk_node(&zk, dirs[2].path()).faketime(&clock).run_to_exit();
    assert_exit(&skewed, 1);
    assert_mentions(
        &skewed,
        &[
            "peer check failed",
            "ahead of the mean of its 1 peers' clocks",
            &a_thrift,
            "at most 10000 ms is allowed (--max-peer-skew-ms)",
        ],
    );
    let skew_ms: u64 = skewed
        .stderr
        .split("this node's clock is ")
        .nth(1)
        .and_then(|rest| rest.split(" ms").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no skew in:\n{}", skewed.stderr));
    assert!(
        (18_000..=22_000).contains(&skew_ms),
        "a 20 s skew measured as {skew_ms} ms"
    );
    assert!(!skewed.stderr.contains("http listening"));
    assert_eq!(zk.children(PATH), ["0"], "neither registered");

    // Allowed with a wider tolerance.
    let tolerant = zk_node(&zk, dirs[2].path())
        .args(["--max-peer-skew-ms", "30000"])
        .faketime(&clock)
        .start();
    assert_eq!(worker_of(&tolerant), 1);
    let id = tolerant.get("/v1/id").ids()[0];
    assert!(timestamp_ms(id) > now_ms() + 15_000, "its clock is ahead");
    assert_eq!(zk.children(PATH), ["0", "1"]);
}

// Found by the fault campaign: a node killed and restarted at the same address registers a new
// worker while its old znode lingers (until the dead session expires), so the old znode's address
// answers another worker id. Every other node refused to start until the session expired ("the
// peer at ... registered as worker 3 says its worker id is 0"), though the peer is consistent:
// it is registered under the worker it names, at that same address.
#[test]
fn the_peer_check_skips_a_lingering_znode_whose_address_now_serves_its_own_worker() {
    let zk = ZooKeeper::start();
    let dirs: Vec<_> = (0..3).map(|_| temp_dir()).collect();
    let a = zk_node(&zk, dirs[0].path()).start();
    let a_thrift = a.thrift_addr().to_string();
    assert_eq!(worker_of(&a), 0);
    // What the crashed previous run at a's address left: its znode, worker 3.
    zk.create(&format!("{PATH}/3"), &a_thrift, false);

    let b = zk_node(&zk, dirs[1].path()).start();
    assert_eq!(worker_of(&b), 1, "b registered the lowest free worker");
    assert_eq!(b.get("/v1/id").status, 200);
    let warned = b
        .stderr()
        .lines()
        .any(|l| l.contains("skipping") && l.contains(&format!("{PATH}/3")));
    assert!(warned, "b says it skipped {PATH}/3:\n{}", b.stderr());

    // A real mismatch still stops the start: a znode pointing at a node that is not registered
    // under the worker it answers at that address (here, one registered under another path).
    let other = zk_node(&zk, dirs[2].path())
        .args(["--zookeeper-path", "/elsewhere"])
        .start();
    let other_thrift = other.thrift_addr().to_string();
    assert_eq!(worker_of(&other), 0);
    zk.create(&format!("{PATH}/4"), &other_thrift, false);
    let c_dir = temp_dir();
    let c = zk_node(&zk, c_dir.path()).run_to_exit();
    assert_exit(&c, 1);
    assert_mentions(
        &c,
        &[
            "peer check failed",
            &format!(
                "the peer at {other_thrift} registered as worker 4 ({PATH}/4) says its worker id is 0"
            ),
        ],
    );
    assert!(!c.stderr.contains("http listening"));
}

#[test]
fn after_kill_9_the_znode_lingers_until_the_session_expires_and_the_successor_stays_above() {
    // Long enough for ZooKeeper's own client to look at the lingering znode after the kill.
    let session_ms = 4000;
    let zk = ZooKeeper::start();
    let (a_dir, b_dir) = (temp_dir(), temp_dir());
    // The dead node's clock ran 10 s ahead: its IDs are from the future, so only the mark it
    // left in ZooKeeper keeps its successor above them.
    let clock = FakeClock::new();
    clock.set("+10");
    let a = zk_node_with_session(&zk, a_dir.path(), session_ms)
        .args(["--worker-id", "0", "--reserve-ms", "500"])
        .faketime(&clock)
        .start();
    let a_session = session_of(&a);
    let mut before = Vec::new();
    let until = Instant::now() + Duration::from_millis(1000);
    while Instant::now() < until {
        before.extend(a.get("/v1/ids?count=100").ids());
    }
    let old_max = *before.iter().max().unwrap();
    assert!(
        timestamp_ms(old_max) > now_ms() + 8000,
        "the dead node's ids are from 10 s ahead"
    );
    a.kill9();
    let killed = Instant::now();

    // The znode outlives the process, owned by the dead session.
    assert_eq!(ephemerals(&zk), 1, "still registered right after the kill");
    assert_eq!(
        zk.ephemeral_owner(&format!("{PATH}/0")),
        Some(format!("0x{a_session}")),
        "the dead node's znode lingers (checked {:?} after the kill)",
        killed.elapsed()
    );
    let mark_ms = mark(&zk, 0);
    assert!(
        mark_ms >= timestamp_ms(old_max),
        "the mark {mark_ms} covers every id up to {old_max}"
    );
    // Until the session expires.
    let deadline = killed + Duration::from_millis(session_ms) + Duration::from_secs(5);
    while ephemerals(&zk) > 0 {
        assert!(
            Instant::now() < deadline,
            "the znode is still there {:?} after the kill",
            killed.elapsed()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let gone_after = killed.elapsed();
    assert!(
        gone_after >= Duration::from_millis(session_ms / 2),
        "gone {gone_after:?} after the kill, before the session could expire"
    );
    assert_eq!(zk.get(&format!("{PATH}/0")), None);

    // Another machine pinned to the same worker.
    let b = zk_node_with_session(&zk, b_dir.path(), session_ms)
        .args(["--worker-id", "0", "--claim-timeout-secs", "10"])
        .start();
    let b_session = session_of(&b);
    assert_ne!(b_session, a_session);
    assert_eq!(
        zk.ephemeral_owner(&format!("{PATH}/0")),
        Some(format!("0x{b_session}"))
    );
    assert_eq!(
        zk.get(&format!("{PATH}/0")),
        Some(b.thrift_addr().to_string())
    );
    let (first, refusals) = first_id(&b, Duration::from_secs(20));
    let mut after = vec![first];
    after.extend(b.get("/v1/ids?count=1000").ids());
    let lowest = *after.iter().min().unwrap();
    assert!(
        lowest > old_max && timestamp_ms(lowest) > mark_ms,
        "the successor issued {lowest} (at {}), not above the dead node's last id {old_max} \
         (at {}) and its mark {mark_ms}",
        timestamp_ms(lowest),
        timestamp_ms(old_max)
    );
    // It waited for its clock to pass the mark, and said so.
    assert!(
        !refusals.is_empty(),
        "the successor waited for the dead node's mark"
    );
    assert!(
        refusals[0].contains("high-water mark"),
        "explains the wait: {:?}",
        refusals[0]
    );
    assert!(after.iter().all(|&id| worker_in(id) == 0));
}

/// One poll of a node: when the request was sent and answered (since the test's start), the
/// status, and the ID or the refusal.
struct Poll {
    sent: Duration,
    answered: Duration,
    status: u16,
    id: Option<u64>,
    error: Option<String>,
}

#[test]
fn while_zookeeper_is_frozen_the_node_stops_before_its_session_could_expire() {
    // A little longer than the other tests' session, so that a loaded machine still gets to
    // see the node refuse before the timeout is up (it stops a fifth of the timeout early).
    let session_ms = 3000;
    let session = Duration::from_millis(session_ms);
    let zk = ZooKeeper::start();
    let dir = temp_dir();
    // A reservation far ahead, so that only the fence can stop the node while ZooKeeper is
    // frozen (with the default, failing mark writes would stop it too).
    let node = zk_node_with_session(&zk, dir.path(), session_ms)
        .args(["--reserve-ms", "30000"])
        .start();
    let worker = worker_of(&node);
    let session_before = session_of(&node);
    let addr: SocketAddr = node.addr();
    let start = Instant::now();
    let resumed = AtomicBool::new(false);
    let (frozen, resumed_at, polls) = std::thread::scope(|scope| {
        let poller = scope.spawn(|| {
            let mut polls = Vec::new();
            // Consecutive IDs since ZooKeeper resumed.
            let mut ok_after_resume = 0;
            let deadline = Instant::now() + Duration::from_secs(40);
            while ok_after_resume < 20 && Instant::now() < deadline {
                let sent = start.elapsed();
                // The node may stop; the main thread reports why, with its stderr.
                let response = match try_get(addr, "/v1/id") {
                    Ok(response) => response,
                    Err(err) => return (polls, Some(format!("GET /v1/id: {err}"))),
                };
                let answered = start.elapsed();
                let (id, error) = match response.status {
                    200 => (Some(response.ids()[0]), None),
                    503 => (None, Some(response.error())),
                    _ => panic!("{response:?}"),
                };
                if resumed.load(Ordering::SeqCst) {
                    ok_after_resume = if id.is_some() { ok_after_resume + 1 } else { 0 };
                }
                polls.push(Poll {
                    sent,
                    answered,
                    status: response.status,
                    id,
                    error,
                });
                std::thread::sleep(Duration::from_millis(5));
            }
            (polls, None)
        });
        std::thread::sleep(Duration::from_millis(1000));
        let frozen = start.elapsed();
        zk.stop();
        // Past twice the timeout: long enough for an id issued after the timeout to show, and
        // for the node's client to give its session up (about 1.5 timeouts after the freeze),
        // so that it registers again with a new one.
        std::thread::sleep(2 * session + Duration::from_secs(1));
        let resumed_at = start.elapsed();
        zk.cont();
        resumed.store(true, Ordering::SeqCst);
        (frozen, resumed_at, poller.join().unwrap())
    });
    let (polls, failed) = polls;
    if let Some(failed) = failed {
        panic!(
            "{failed} ({:?} after the freeze, ZooKeeper resumed {:?} after it); stderr:\n{}",
            polls.last().map(|p| p.answered.saturating_sub(frozen)),
            resumed_at - frozen,
            node.stderr()
        );
    }
    let ok_before = polls
        .iter()
        .filter(|p| p.answered < frozen && p.status == 200)
        .count();
    assert!(ok_before > 0, "served before the freeze");
    // Every ID issued while ZooKeeper was frozen: asked for before the timeout was up.
    let late = polls
        .iter()
        .filter(|p| p.status == 200 && p.sent >= frozen + session && p.answered <= resumed_at)
        .map(|p| p.sent - frozen)
        .max();
    assert!(
        late.is_none(),
        "issued an id asked for {late:?} after ZooKeeper froze (session timeout {session:?})"
    );
    let last_ok = polls
        .iter()
        .filter(|p| p.status == 200 && p.sent >= frozen && p.answered <= resumed_at)
        .map(|p| p.answered - frozen)
        .max();
    let first_refusal = polls
        .iter()
        .find(|p| p.status == 503 && p.sent >= frozen)
        .map(|p| p.answered.saturating_sub(frozen));
    assert!(
        first_refusal.is_some_and(|t| t < session),
        "refused first {first_refusal:?} after the freeze, last id {last_ok:?} after it \
         (session timeout {session:?})"
    );
    let fenced: Vec<&String> = polls
        .iter()
        .filter(|p| p.sent >= frozen + session && p.answered <= resumed_at)
        .filter_map(|p| p.error.as_ref())
        .collect();
    assert!(!fenced.is_empty(), "refused until ZooKeeper resumed");
    assert!(
        fenced
            .iter()
            .all(|m| m.contains("cannot prove it still holds its worker id")),
        "the refusals say why: {fenced:?}"
    );
    // Served again after ZooKeeper came back.
    assert!(
        polls.iter().rev().take(20).all(|p| p.status == 200),
        "did not resume within 40 s; stderr:\n{}",
        node.stderr()
    );
    let mut all = HashSet::new();
    let ids: Vec<u64> = polls.iter().filter_map(|p| p.id).collect();
    insert_all(&mut all, &ids);
    assert!(ids.iter().all(|&id| worker_in(id) == worker));

    // Registered again: a new session, the same worker.
    let info = info(&node);
    assert_eq!(info["worker_id"], worker, "{info}");
    let lease = &info["lease"];
    assert_eq!(lease["state"], "held", "{info}");
    assert_eq!(lease["losses"], 1, "{info}");
    let session_after = lease["lease_id"].as_str().unwrap().to_owned();
    assert_ne!(session_after, session_before, "a new session: {info}");
    assert_eq!(
        zk.ephemeral_owner(&format!("{PATH}/{worker}")),
        Some(format!("0x{session_after}"))
    );
    assert_eq!(
        zk.get(&format!("{PATH}/{worker}")),
        Some(node.thrift_addr().to_string())
    );
    assert!(
        node.stderr().contains("registered the worker id again"),
        "{}",
        node.stderr()
    );
}

/// Polls `GET /v1/id` until it answers 200 (at most `timeout`); panics with the node's stderr
/// if it stops answering (exits) meanwhile.
fn serving_again(node: &ServeProcess, timeout: Duration) -> u64 {
    let deadline = Instant::now() + timeout;
    loop {
        match try_get(node.addr(), "/v1/id") {
            Ok(response) if response.status == 200 => return response.ids()[0],
            Ok(response) => assert_eq!(response.status, 503, "{response:?}"),
            Err(err) => panic!(
                "the node stopped answering ({err}); stderr:\n{}",
                node.stderr()
            ),
        }
        assert!(
            Instant::now() < deadline,
            "not serving again within {timeout:?}; stderr:\n{}",
            node.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn after_zookeeper_restarts_the_node_registers_its_worker_again() {
    let mut zk = ZooKeeper::start();
    let dir = temp_dir();
    let node = zk_node(&zk, dir.path()).start();
    let worker = worker_of(&node);
    let session_before = session_of(&node);
    let before = node.get("/v1/ids?count=100").ids();
    zk.kill();
    // The node gives its session up once it cannot reach ZooKeeper for the timeout.
    let lost = node.poll("/v1/info", Duration::from_secs(15), |r| {
        r.json()["lease"]["reason"]
            .as_str()
            .is_some_and(|reason| reason.contains("expired"))
    });
    assert_eq!(lost.json()["lease"]["state"], "lost", "{}", lost.body);
    // A restarted server restores the sessions it knew, with their znodes, and expires them a
    // timeout later: the node's old znode is still there, owned by its own previous session.
    // That is not another node holding the worker: the node waits for it to go.
    zk.restart();
    let first = serving_again(&node, Duration::from_secs(20));
    assert!(first > *before.iter().max().unwrap());
    let info = info(&node);
    assert_eq!(info["worker_id"], worker, "{info}");
    let lease = &info["lease"];
    assert_eq!(lease["state"], "held", "{info}");
    let session_after = lease["lease_id"].as_str().unwrap().to_owned();
    assert_ne!(session_after, session_before, "a new session: {info}");
    assert_eq!(
        zk.ephemeral_owner(&format!("{PATH}/{worker}")),
        Some(format!("0x{session_after}"))
    );
}

#[test]
fn three_nodes_register_distinct_workers_and_never_repeat_an_id() {
    let zk = ZooKeeper::start();
    let dirs: Vec<_> = (0..3).map(|_| temp_dir()).collect();
    // One at a time, so that each sees the others as peers.
    let nodes: Vec<ServeProcess> = dirs
        .iter()
        .map(|d| zk_node(&zk, d.path()).start())
        .collect();
    let workers: Vec<u64> = nodes.iter().map(worker_of).collect();
    assert_eq!(workers, [0, 1, 2], "the lowest free workers");
    assert_eq!(zk.children(PATH), ["0", "1", "2"]);
    for (node, worker) in nodes.iter().zip(&workers) {
        assert_eq!(
            zk.get(&format!("{PATH}/{worker}")),
            Some(node.thrift_addr().to_string())
        );
    }

    // Three clients per node, 30 requests of 100 IDs each, all in parallel.
    let addrs: Vec<SocketAddr> = nodes.iter().map(ServeProcess::addr).collect();
    let per_client: Vec<(usize, Vec<u64>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..9)
            .map(|client| {
                let node = client % 3;
                let addr = addrs[node];
                scope.spawn(move || {
                    let mut ids = Vec::with_capacity(3000);
                    for _ in 0..30 {
                        ids.extend(get(addr, "/v1/ids?count=100").ids());
                    }
                    (node, ids)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut all = HashSet::new();
    for (node, ids) in &per_client {
        assert_eq!(ids.len(), 3000);
        assert!(
            ids.iter().all(|&id| worker_in(id) == workers[*node]),
            "an id without its node's worker id"
        );
        insert_all(&mut all, ids);
    }
    assert_eq!(all.len(), 27_000);
}

#[test]
fn a_graceful_stop_removes_the_znode_at_once_and_leaves_an_exact_mark() {
    // A session far longer than the test: only the node closing its session can remove the
    // znode (it never deletes it: a delete could remove another session's znode).
    let zk = ZooKeeper::start();
    let dir = temp_dir();
    let node = zk_node_with_session(&zk, dir.path(), 30_000).start();
    let worker = worker_of(&node);
    let mut ids = Vec::new();
    for _ in 0..20 {
        ids.extend(node.get("/v1/ids?count=100").ids());
    }
    let max = *ids.iter().max().unwrap();
    assert_eq!(ephemerals(&zk), 1);
    let stopping = Instant::now();
    let finished = node.stop_with("TERM");
    assert_exit(&finished, 0);
    // Gone at once: the node closed its session (and waited for ZooKeeper to confirm it) after
    // storing its last mark.
    assert_eq!(ephemerals(&zk), 0, "the znode is removed at shutdown");
    let gone_after = stopping.elapsed();
    assert!(
        gone_after < Duration::from_secs(10),
        "gone {gone_after:?} after SIGTERM"
    );
    assert_eq!(zk.get(&format!("{PATH}/{worker}")), None);
    assert_eq!(zk.children(PATH), Vec::<String>::new());
    assert_mentions(&finished, &["released the worker id (session closed)"]);
    let mark = mark(&zk, worker);
    assert!(
        mark >= timestamp_ms(max),
        "mark {mark} below the last id's time {}",
        timestamp_ms(max)
    );
    assert!(mark <= now_ms(), "an exact mark, not a reservation: {mark}");
}

#[test]
fn host_names_give_worker_ids_by_ordinal_or_by_map() {
    let dir = temp_dir();
    let serve = || Serve::new(dir.path());

    // A StatefulSet pod's ordinal.
    let node = serve()
        .args(["--worker-id-from-hostname", "--hostname", "snowflake-7"])
        .start();
    let info7 = info(&node);
    assert_eq!(info7["worker_id"], 7, "{info7}");
    assert_eq!(info7["identity_source"], "hostname-ordinal", "{info7}");
    assert!(info7.get("lease").is_none(), "{info7}");
    let ids = node.get("/v1/ids?count=10").ids();
    assert!(ids.iter().all(|&id| worker_in(id) == 7));
    assert_exit(&node.stop_with("TERM"), 0);

    let no_ordinal = serve()
        .args(["--worker-id-from-hostname", "--hostname", "web"])
        .run_to_exit();
    assert_exit(&no_ordinal, 2);
    assert_mentions(&no_ordinal, &["\"web\"", "does not end in -N", "ordinal"]);
    let too_big = serve()
        .args(["--worker-id-from-hostname", "--hostname", "snowflake-40"])
        .run_to_exit();
    assert_exit(&too_big, 2);
    assert_mentions(&too_big, &["ordinal 40", "\"snowflake-40\"", "0..=31"]);

    // The config file's map.
    let config = dir.path().join("snowflake.toml");
    std::fs::write(&config, "[worker_id_map]\n\"host-a\" = 3\n\"host-b\" = 4\n").unwrap();
    let node = serve()
        .arg("--config")
        .arg(&config)
        .args(["--hostname", "host-b"])
        .start();
    let info4 = info(&node);
    assert_eq!(info4["worker_id"], 4, "{info4}");
    assert_eq!(info4["identity_source"], "hostname-map", "{info4}");
    assert!(
        node.get("/v1/ids?count=10")
            .ids()
            .iter()
            .all(|&id| worker_in(id) == 4)
    );
    assert_exit(&node.stop_with("TERM"), 0);

    let unmapped = serve()
        .arg("--config")
        .arg(&config)
        .args(["--hostname", "host-c"])
        .run_to_exit();
    assert_exit(&unmapped, 2);
    assert_mentions(
        &unmapped,
        &["host name \"host-c\" is not in", "[worker_id_map]"],
    );

    let shared = dir.path().join("shared.toml");
    std::fs::write(&shared, "[worker_id_map]\n\"host-a\" = 3\n\"host-b\" = 3\n").unwrap();
    let twice = serve()
        .arg("--config")
        .arg(&shared)
        .args(["--hostname", "host-a"])
        .run_to_exit();
    assert_exit(&twice, 2);
    assert_mentions(
        &twice,
        &["\"host-a\"", "\"host-b\"", "both map to worker 3"],
    );

    // One source of the worker id at a time.
    let both = serve()
        .args([
            "--worker-id",
            "3",
            "--worker-id-from-hostname",
            "--hostname",
            "snowflake-3",
        ])
        .run_to_exit();
    assert_exit(&both, 2);
    assert_mentions(&both, &["--worker-id and --worker-id-from-hostname"]);
    for finished in [&no_ordinal, &too_big, &unmapped, &twice, &both] {
        assert!(
            !finished.stderr.contains("listening"),
            "refused before binding:\n{}",
            finished.stderr
        );
    }
}

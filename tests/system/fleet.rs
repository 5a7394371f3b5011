//! A fleet of real `snowflake serve` processes leasing their (datacenter, worker) pairs from a
//! real etcd (SPEC §4): distinct pairs, a held pair never served twice, takeover after a crash
//! (also of a node whose clock ran ahead), fencing while etcd is frozen, a three-member etcd
//! losing its leader, and restarts under load, never a duplicate ID.

use crate::etcd_cluster::EtcdCluster;
use crate::support::{
    FakeClock, Serve, ServeProcess, assert_exit, first_id, get, info, insert_all, now_ms, temp_dir,
    timestamp_ms, try_get, worker_in, worker_of,
};
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The lease TTL of the test fleets, in seconds: short, so expiry-based tests stay quick.
const TTL_SECS: u64 = 3;

/// `snowflake serve` leasing from `etcd` with the test TTL and its own state directory.
fn fleet_node(etcd: &EtcdCluster, state_dir: &Path) -> Serve {
    Serve::new(state_dir).args([
        "--etcd-endpoints",
        &etcd.endpoints(),
        "--lease-ttl-secs",
        &TTL_SECS.to_string(),
    ])
}

/// The claim key's value as JSON.
fn holder(etcd: &EtcdCluster, datacenter: u64, worker: u64) -> Option<serde_json::Value> {
    etcd.get(&format!("/snowflake/workers/{datacenter}/{worker}"))
        .map(|v| serde_json::from_str(&v).unwrap_or_else(|e| panic!("holder {v:?}: {e}")))
}

/// The pair's high-water mark in etcd.
fn mark(etcd: &EtcdCluster, datacenter: u64, worker: u64) -> u64 {
    let text = etcd
        .get(&format!("/snowflake/marks/{datacenter}/{worker}"))
        .unwrap_or_else(|| panic!("no mark for {datacenter}/{worker}"));
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    json["high_water_ms"].as_u64().expect("high_water_ms")
}

#[test]
fn three_nodes_lease_distinct_workers_and_never_repeat_an_id() {
    let etcd = EtcdCluster::start(1);
    let dirs: Vec<_> = (0..3).map(|_| temp_dir()).collect();
    // The first node with a RESP port too: every listener is in its claim.
    let nodes: Vec<ServeProcess> = dirs
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let node = fleet_node(&etcd, d.path());
            if i == 0 {
                node.args(["--resp-addr", "127.0.0.1:0"]).start()
            } else {
                node.start()
            }
        })
        .collect();
    let workers: Vec<u64> = nodes.iter().map(worker_of).collect();
    let distinct: HashSet<u64> = workers.iter().copied().collect();
    assert_eq!(
        distinct,
        HashSet::from([0, 1, 2]),
        "the lowest free workers"
    );
    let first = holder(&etcd, 0, workers[0]).expect("claim key");
    let resp = nodes[0].logged_addr("resp listening");
    assert!(
        first["addresses"]
            .to_string()
            .contains(&format!("resp={resp}")),
        "{first}"
    );

    // Each claim says who holds it, for operators using etcdctl.
    for (node, &worker) in nodes.iter().zip(&workers) {
        let holder = holder(&etcd, 0, worker).expect("claim key");
        assert_eq!(
            holder["pid"].as_u64(),
            Some(u64::from(node.pid())),
            "{holder}"
        );
        assert!(
            holder["host"].as_str().is_some_and(|h| !h.is_empty()),
            "{holder}"
        );
        let addresses = holder["addresses"].to_string();
        assert!(addresses.contains(&node.addr().to_string()), "{holder}");
        assert!(holder["started_at"].as_str().is_some(), "{holder}");
    }

    // /v1/info and the metrics show the lease.
    let info = info(&nodes[0]);
    assert_eq!(info["identity_source"], "etcd", "{info}");
    let lease = &info["lease"];
    assert_eq!(lease["state"], "held", "{info}");
    assert_eq!(lease["ttl_secs"], TTL_SECS, "{info}");
    let remaining = lease["remaining_ms"].as_u64().unwrap();
    assert!(remaining > 0 && remaining <= TTL_SECS * 1000, "{info}");
    assert_eq!(
        lease["key"],
        format!("/snowflake/workers/0/{}", workers[0]),
        "{info}"
    );
    let metrics = nodes[0].get("/metrics").body;
    for needle in [
        "snowflake_lease_held 1",
        "snowflake_lease_remaining_ms ",
        "snowflake_lease_ttl_seconds 3",
        "snowflake_lease_renewals_total ",
        "identity_source=\"etcd\"",
    ] {
        assert!(
            metrics.contains(needle),
            "metrics lack {needle:?}:\n{metrics}"
        );
    }
    // The held pairs of the datacenter, read again every 10 s (the first node's first read
    // saw only itself).
    let deadline = Instant::now() + Duration::from_secs(25);
    loop {
        let metrics = nodes[0].get("/metrics").body;
        if metrics.contains("snowflake_fleet_pairs_held{datacenter_id=\"0\"} 3\n")
            && metrics.contains("snowflake_fleet_pairs_free{datacenter_id=\"0\"} 29\n")
        {
            break;
        }
        assert!(Instant::now() < deadline, "no fleet of 3 seen:\n{metrics}");
        std::thread::sleep(Duration::from_millis(500));
    }

    // 30,000 IDs from all three, two clients each, in parallel.
    let addrs: Vec<SocketAddr> = nodes.iter().map(ServeProcess::addr).collect();
    let per_client: Vec<(usize, Vec<u64>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..6)
            .map(|client| {
                let addr = addrs[client % 3];
                scope.spawn(move || {
                    let mut ids = Vec::with_capacity(5000);
                    for i in 0..50 {
                        if i % 2 == 0 {
                            ids.extend(get(addr, "/v1/ids?count=99").ids());
                            ids.extend(get(addr, "/v1/id").ids());
                        } else {
                            ids.extend(get(addr, "/v1/ids?count=100").ids());
                        }
                    }
                    (client % 3, ids)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut all = HashSet::new();
    let mut max_by_node = [0u64; 3];
    for (node, ids) in &per_client {
        assert_eq!(ids.len(), 5000);
        assert!(
            ids.iter().all(|&id| worker_in(id) == workers[*node]),
            "an id without its node's worker id"
        );
        max_by_node[*node] = max_by_node[*node].max(*ids.iter().max().unwrap());
        insert_all(&mut all, ids);
    }
    assert_eq!(all.len(), 30_000);

    // Graceful stop: the exact mark is in etcd and the pair is free at once.
    for (i, node) in nodes.into_iter().enumerate() {
        assert_exit(&node.stop_with("TERM"), 0);
        assert!(
            holder(&etcd, 0, workers[i]).is_none(),
            "the pair is released at once"
        );
        let mark = mark(&etcd, 0, workers[i]);
        assert!(mark >= timestamp_ms(max_by_node[i]), "mark {mark}");
        assert!(mark <= now_ms(), "an exact mark, not a reservation: {mark}");
    }
}

#[test]
fn a_node_pinned_to_a_held_pair_never_serves_it() {
    let etcd = EtcdCluster::start(1);
    let (a_dir, b_dir) = (temp_dir(), temp_dir());
    let a = fleet_node(&etcd, a_dir.path())
        .args(["--worker-id", "4"])
        .start();
    assert_eq!(worker_of(&a), 4);
    let started = Instant::now();
    let b = fleet_node(&etcd, b_dir.path())
        .args(["--worker-id", "4", "--claim-timeout-secs", "2"])
        .run_to_exit();
    assert_exit(&b, 1);
    assert!(started.elapsed() >= Duration::from_secs(2), "retried first");
    for needle in [
        "worker 4 of datacenter 0 is held by another node",
        &format!("\"pid\":{}", a.pid()),
        "/snowflake/workers/0/4",
    ] {
        assert!(b.stderr.contains(needle), "lacks {needle:?}:\n{}", b.stderr);
    }
    assert!(
        !b.stderr.contains("http listening"),
        "never served:\n{}",
        b.stderr
    );
    // The holder is untouched.
    let holder = holder(&etcd, 0, 4).unwrap();
    assert_eq!(holder["pid"].as_u64(), Some(u64::from(a.pid())));
    assert_eq!(a.get("/v1/id").status, 200);
    assert_eq!(info(&a)["lease"]["state"], "held");
}

#[test]
fn a_full_datacenter_or_an_unusable_mark_is_refused_at_start() {
    let etcd = EtcdCluster::start(1);
    // Datacenter 3 is full: 32 claims under one lease.
    let grant = etcd.etcdctl(&["lease", "grant", "60"]);
    let text = String::from_utf8_lossy(&grant.stdout);
    let lease = text.split_whitespace().nth(1).expect("lease id").to_owned();
    for worker in 0..32 {
        let out = etcd.etcdctl(&[
            "put",
            &format!("--lease={lease}"),
            &format!("/snowflake/workers/3/{worker}"),
            "{\"host\":\"elsewhere\"}",
        ]);
        assert!(out.status.success(), "{out:?}");
    }
    let dir = temp_dir();
    let full = fleet_node(&etcd, dir.path())
        .args(["--datacenter-id", "3"])
        .run_to_exit();
    assert_exit(&full, 1);
    assert!(
        full.stderr
            .contains("all 32 worker ids of datacenter 3 are held"),
        "{}",
        full.stderr
    );

    // Garbage where a pair's mark should be: without it the node could repeat ids.
    let out = etcd.etcdctl(&["put", "/snowflake/marks/0/9", "not json"]);
    assert!(out.status.success(), "{out:?}");
    let bad = fleet_node(&etcd, dir.path())
        .args(["--worker-id", "9"])
        .run_to_exit();
    assert_exit(&bad, 1);
    for needle in ["/snowflake/marks/0/9", "unusable", "not JSON"] {
        assert!(
            bad.stderr.contains(needle),
            "lacks {needle:?}:\n{}",
            bad.stderr
        );
    }
    assert!(holder(&etcd, 0, 9).is_none(), "the claim was given back");
    // A mark from a node with another epoch is refused the same way.
    let out = etcd.etcdctl(&[
        "put",
        "/snowflake/marks/0/10",
        "{\"high_water_ms\":1,\"epoch_ms\":0}",
    ]);
    assert!(out.status.success(), "{out:?}");
    let other = fleet_node(&etcd, dir.path())
        .args(["--worker-id", "10"])
        .run_to_exit();
    assert_exit(&other, 1);
    assert!(
        other.stderr.contains("epoch 0"),
        "names the other epoch:\n{}",
        other.stderr
    );
}

#[test]
fn after_kill_9_the_pair_is_claimable_after_the_ttl_and_the_newcomer_stays_above() {
    let etcd = EtcdCluster::start(1);
    let (a_dir, b_dir) = (temp_dir(), temp_dir());
    let a = fleet_node(&etcd, a_dir.path())
        .args(["--worker-id", "7", "--reserve-ms", "500"])
        .start();
    let mut before = Vec::new();
    let until = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < until {
        before.extend(a.get("/v1/ids?count=100").ids());
    }
    let old_max = *before.iter().max().unwrap();
    let a_pid = a.pid();
    a.kill9();
    let killed = Instant::now();
    // The lease outlives the process until its TTL runs out.
    assert_eq!(
        holder(&etcd, 0, 7).expect("still claimed")["pid"].as_u64(),
        Some(u64::from(a_pid))
    );
    let mark_ms = mark(&etcd, 0, 7);
    assert!(mark_ms >= timestamp_ms(old_max), "the mark covers every id");

    // Another machine (its own state directory) pinned to the same pair.
    let b = fleet_node(&etcd, b_dir.path())
        .args(["--worker-id", "7", "--claim-timeout-secs", "15"])
        .start();
    let waited = killed.elapsed();
    assert!(
        waited <= Duration::from_secs(TTL_SECS + 3),
        "claimed {waited:?} after the kill"
    );
    assert_eq!(
        holder(&etcd, 0, 7).unwrap()["pid"].as_u64(),
        Some(u64::from(b.pid()))
    );
    let (first, _) = first_id(&b, Duration::from_secs(10));
    let mut after = vec![first];
    after.extend(b.get("/v1/ids?count=500").ids());
    assert!(
        after
            .iter()
            .all(|&id| id > old_max && timestamp_ms(id) > mark_ms),
        "an id at or below the dead node's mark"
    );
    assert_exit(&b.stop_with("TERM"), 0);
}

#[test]
fn while_etcd_is_frozen_every_node_stops_before_its_lease_could_expire() {
    let etcd = EtcdCluster::start(1);
    let dirs: Vec<_> = (0..3).map(|_| temp_dir()).collect();
    // A reservation far ahead, so that only the fence can stop the nodes while etcd is frozen
    // (with the default, the failing mark writes would stop them too).
    let nodes: Vec<ServeProcess> = dirs
        .iter()
        .map(|d| {
            fleet_node(&etcd, d.path())
                .args(["--reserve-ms", "30000"])
                .start()
        })
        .collect();
    let workers: Vec<u64> = nodes.iter().map(worker_of).collect();
    let start = Instant::now();
    let frozen_at = Arc::new(Mutex::new(None::<Instant>));
    let resumed = Arc::new(AtomicBool::new(false));
    // One poller per node: (time since start, status, id).
    let fenced_messages = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen: Vec<Vec<(Duration, u16, Option<u64>)>> = std::thread::scope(|scope| {
        let pollers: Vec<_> = nodes
            .iter()
            .map(|node| {
                let (addr, resumed) = (node.addr(), Arc::clone(&resumed));
                let messages = Arc::clone(&fenced_messages);
                scope.spawn(move || {
                    let mut seen = Vec::new();
                    // Consecutive IDs since etcd resumed.
                    let mut ok_after_resume = 0;
                    let deadline = Instant::now() + Duration::from_secs(40);
                    while ok_after_resume < 20 && Instant::now() < deadline {
                        let response = get(addr, "/v1/id");
                        let id = (response.status == 200).then(|| response.ids()[0]);
                        if response.status == 503 {
                            messages.lock().unwrap().push(response.error());
                        } else {
                            assert_eq!(response.status, 200, "{response:?}");
                        }
                        if resumed.load(Ordering::SeqCst) {
                            ok_after_resume = if id.is_some() { ok_after_resume + 1 } else { 0 };
                        }
                        seen.push((start.elapsed(), response.status, id));
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    seen
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(1500));
        *frozen_at.lock().unwrap() = Some(Instant::now());
        etcd.stop(0);
        std::thread::sleep(Duration::from_secs(TTL_SECS + 2));
        etcd.cont(0);
        resumed.store(true, Ordering::SeqCst);
        pollers.into_iter().map(|p| p.join().unwrap()).collect()
    });
    let frozen = frozen_at.lock().unwrap().unwrap() - start;
    let ttl = Duration::from_secs(TTL_SECS);
    let mut all = HashSet::new();
    for (i, seen) in seen.iter().enumerate() {
        let ok_before = seen
            .iter()
            .filter(|(t, status, _)| *t < frozen && *status == 200)
            .count();
        assert!(ok_before > 0, "node {i} served before the freeze");
        // The last ID issued while etcd was frozen: before the TTL ran out.
        let last_ok = seen
            .iter()
            .filter(|(t, status, _)| {
                *t >= frozen && *t < frozen + ttl + Duration::from_secs(2) && *status == 200
            })
            .map(|(t, _, _)| *t)
            .max();
        if let Some(last_ok) = last_ok {
            assert!(
                last_ok < frozen + ttl,
                "node {i} issued an id {:?} after etcd froze (TTL {ttl:?})",
                last_ok - frozen
            );
        }
        let refused = seen
            .iter()
            .filter(|(t, status, _)| *t >= frozen + ttl && *status == 503)
            .count();
        assert!(refused > 0, "node {i} was fenced");
        // And served again after etcd came back.
        assert!(
            seen.iter()
                .rev()
                .take(20)
                .all(|(_, status, _)| *status == 200),
            "node {i} did not resume: {:?}",
            seen.iter().rev().take(5).collect::<Vec<_>>()
        );
        let ids: Vec<u64> = seen.iter().filter_map(|(_, _, id)| *id).collect();
        insert_all(&mut all, &ids);
    }
    let messages = fenced_messages.lock().unwrap();
    assert!(
        messages
            .iter()
            .any(|m| m.contains("cannot prove it still holds its worker id")),
        "the refusals say why: {:?}",
        messages.iter().take(3).collect::<Vec<_>>()
    );
    // Each node got its own pair back.
    let again: Vec<u64> = nodes.iter().map(worker_of).collect();
    assert_eq!(again, workers);
    for node in &nodes {
        let info = info(node);
        assert_eq!(info["lease"]["state"], "held", "{info}");
        assert!(info["lease"]["losses"].as_u64().unwrap() <= 1, "{info}");
    }
}

#[test]
fn a_three_member_etcd_losing_its_leader_keeps_the_fleet_serving() {
    let mut etcd = EtcdCluster::start(3);
    let dirs: Vec<_> = (0..3).map(|_| temp_dir()).collect();
    // The default TTL (10 s) rides out an etcd election.
    let endpoints = etcd.endpoints();
    let serve = |dir: &Path| Serve::new(dir).args(["--etcd-endpoints", &endpoints]);
    let nodes: Vec<ServeProcess> = dirs[..2].iter().map(|d| serve(d.path()).start()).collect();
    let mut all = HashSet::new();
    for node in &nodes {
        insert_all(&mut all, &node.get("/v1/ids?count=100").ids());
    }
    let renewals_before: Vec<u64> = nodes
        .iter()
        .map(|n| info(n)["lease"]["renewals"].as_u64().unwrap())
        .collect();
    let leader = etcd.leader().expect("a leader");
    etcd.kill(leader);
    let killed = Instant::now();
    // For the next 8 s (longer than an election and several renewals), keep asking.
    let mut served = [0usize; 2];
    while killed.elapsed() < Duration::from_secs(8) {
        for (i, node) in nodes.iter().enumerate() {
            let response = node.get("/v1/ids?count=10");
            if response.status == 200 {
                served[i] += 1;
                insert_all(&mut all, &response.ids());
            } else {
                assert_eq!(response.status, 503, "{response:?}");
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    for (i, node) in nodes.iter().enumerate() {
        assert!(served[i] > 50, "node {i} served {} times", served[i]);
        let info = info(node);
        let lease = &info["lease"];
        assert_eq!(lease["losses"], 0, "node {i} never lost its lease: {info}");
        assert_eq!(lease["state"], "held", "{info}");
        assert!(
            lease["renewals"].as_u64().unwrap() > renewals_before[i],
            "node {i} renewed through the surviving members: {info}"
        );
        assert_eq!(node.get("/readyz").status, 200);
    }
    // A new node can still join through the survivors.
    let third = serve(dirs[2].path()).start();
    insert_all(&mut all, &third.get("/v1/ids?count=100").ids());
    let mut workers: Vec<u64> = nodes.iter().chain([&third]).map(worker_of).collect();
    workers.sort_unstable();
    assert_eq!(workers, [0, 1, 2]);
}

#[test]
fn takeover_after_a_node_whose_clock_ran_8s_ahead_stays_above_its_ids() {
    let etcd = EtcdCluster::start(1);
    let clock = FakeClock::new();
    clock.set("+8");
    let (a_dir, b_dir) = (temp_dir(), temp_dir());
    let a = fleet_node(&etcd, a_dir.path())
        .args(["--worker-id", "5"])
        .faketime(&clock)
        .start();
    let before: Vec<u64> = (0..20)
        .flat_map(|_| a.get("/v1/ids?count=50").ids())
        .collect();
    let old_max = *before.iter().max().unwrap();
    assert!(
        timestamp_ms(old_max) > now_ms() + 6000,
        "the dead node's ids are from 8 s ahead"
    );
    a.kill9();
    let b = fleet_node(&etcd, b_dir.path())
        .args(["--worker-id", "5", "--claim-timeout-secs", "15"])
        .start();
    let (first, refusals) = first_id(&b, Duration::from_secs(20));
    assert!(
        !refusals.is_empty(),
        "the newcomer waited for the dead node's mark"
    );
    assert!(
        refusals[0].contains("high-water mark"),
        "explains the wait: {:?}",
        refusals[0]
    );
    let mut after = vec![first];
    after.extend(b.get("/v1/ids?count=1000").ids());
    assert!(
        after.iter().all(|&id| id > old_max),
        "an id at or below the dead node's last id {old_max}"
    );
    assert_exit(&b.stop_with("TERM"), 0);
}

#[test]
fn restarting_every_node_under_load_never_repeats_an_id() {
    let etcd = EtcdCluster::start(1);
    let dirs: Vec<_> = (0..3).map(|_| temp_dir()).collect();
    let serve = |dir: &Path| fleet_node(&etcd, dir).args(["--reserve-ms", "500"]);
    let mut nodes: Vec<ServeProcess> = dirs.iter().map(|d| serve(d.path()).start()).collect();
    let addrs = Arc::new(Mutex::new(
        nodes.iter().map(ServeProcess::addr).collect::<Vec<_>>(),
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let collected: Vec<Vec<u64>> = std::thread::scope(|scope| {
        let clients: Vec<_> = (0..4)
            .map(|client| {
                let (addrs, stop) = (Arc::clone(&addrs), Arc::clone(&stop));
                scope.spawn(move || {
                    let mut ids = Vec::new();
                    let mut turn = client;
                    while !stop.load(Ordering::SeqCst) {
                        let addr = {
                            let addrs = addrs.lock().unwrap();
                            addrs[turn % addrs.len()]
                        };
                        turn += 1;
                        // A node being restarted refuses connections or answers 503.
                        if let Ok(response) = try_get(addr, "/v1/ids?count=20")
                            && response.status == 200
                        {
                            ids.extend(response.ids());
                        }
                    }
                    ids
                })
            })
            .collect();
        // Each node in turn: a graceful restart; then a crash and a restart of one.
        for (i, dir) in dirs.iter().enumerate() {
            std::thread::sleep(Duration::from_millis(700));
            let node = nodes.remove(i);
            assert_exit(&node.stop_with("TERM"), 0);
            let restarted = serve(dir.path()).start();
            addrs.lock().unwrap()[i] = restarted.addr();
            nodes.insert(i, restarted);
        }
        std::thread::sleep(Duration::from_millis(700));
        let crashed = nodes.remove(0);
        crashed.kill9();
        let restarted = serve(dirs[0].path()).start();
        addrs.lock().unwrap()[0] = restarted.addr();
        nodes.insert(0, restarted);
        std::thread::sleep(Duration::from_millis(1000));
        stop.store(true, Ordering::SeqCst);
        clients.into_iter().map(|c| c.join().unwrap()).collect()
    });
    let mut all = HashSet::new();
    let mut per_worker: HashMap<u64, usize> = HashMap::new();
    for ids in &collected {
        insert_all(&mut all, ids);
        for &id in ids {
            *per_worker.entry(worker_in(id)).or_default() += 1;
        }
    }
    assert!(all.len() > 10_000, "only {} ids", all.len());
    // The crashed node's pair was still leased, so its restart took another worker id.
    assert!(per_worker.len() >= 4, "workers seen: {per_worker:?}");
    for node in nodes {
        assert_exit(&node.stop_with("TERM"), 0);
    }
}

// Found by review: etcd mode did not watch the claim key. An operator wiping the prefix (claims
// and marks) while a node served left that node issuing until its next mark write, up to half a
// reservation later; a node starting meanwhile found the pair free, with no mark, and issued the
// same milliseconds: duplicates. Now the holder's watch fences it at once.
#[test]
fn wiping_the_prefix_while_a_node_serves_never_repeats_an_id() {
    let etcd = EtcdCluster::start(1);
    let (dir_a, dir_b) = (temp_dir(), temp_dir());
    // A long reservation: without the watch, the holder went on for up to half of it.
    let serve = |dir: &Path| fleet_node(&etcd, dir).args(["--reserve-ms", "4000"]);
    let a = serve(dir_a.path()).start();
    first_id(&a, Duration::from_secs(10));
    assert_eq!(worker_of(&a), 0);
    let stop = Arc::new(AtomicBool::new(false));
    let load = |addr: SocketAddr, stop: Arc<AtomicBool>| {
        std::thread::spawn(move || {
            let mut ids = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                if let Ok(response) = try_get(addr, "/v1/ids?count=50")
                    && response.status == 200
                {
                    ids.extend(response.ids());
                }
            }
            ids
        })
    };
    let on_a = load(a.addr(), Arc::clone(&stop));
    std::thread::sleep(Duration::from_millis(300));
    let wiped = etcd.etcdctl(&["del", "--prefix", "/snowflake/"]);
    assert!(wiped.status.success(), "{wiped:?}");
    let b = serve(dir_b.path()).start();
    let on_b = load(b.addr(), Arc::clone(&stop));
    std::thread::sleep(Duration::from_millis(3000));
    stop.store(true, Ordering::SeqCst);
    let (from_a, from_b) = (on_a.join().unwrap(), on_b.join().unwrap());
    let mut all = HashSet::new();
    insert_all(&mut all, &from_a);
    insert_all(&mut all, &from_b);
    eprintln!(
        "fleet: {} ids from A, {} from B (worker {})",
        from_a.len(),
        from_b.len(),
        worker_of(&b)
    );
    assert!(!from_b.is_empty(), "B issued nothing");
    for node in [a, b] {
        let _ = node.stop_with("TERM");
    }
}

//! Who owns a worker in ZooKeeper, against a real ZooKeeper and real `snowflake serve`
//! processes: a registration znode deleted by hand (an operator, a script) while its holder's
//! session lives, then taken by another node, must never let the two issue the same ID, and a
//! graceful stop must never delete a znode that belongs to another session.
//!
//! The holder is frozen (SIGSTOP) while its znode is deleted and the other node registers, so
//! that the other node gets the worker while the holder's session is still alive: unfrozen, a
//! holder would notice the deletion and register the worker again itself first.

use crate::support::{ServeProcess, assert_exit, temp_dir, try_get, worker_in, worker_of};
use crate::zookeeper_fleet::{MARKS, PATH, mark, session_of, zk_node_with_session};
use crate::zookeeper_server::ZooKeeper;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// A session far longer than each test, so that only what the test does (and not an expiry)
/// can take a znode away; the holder's periodic stat comes only every third of it.
const LONG_SESSION_MS: u64 = 60_000;

/// Waits (at most 10 s) until `PATH/worker` is owned by `node`'s session; returns that owner.
fn wait_owned_by(zk: &ZooKeeper, node: &ServeProcess, worker: u64) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let owner = zk.ephemeral_owner(&format!("{PATH}/{worker}"));
        if let Some(owner) = &owner
            && let Some(info) = try_get(node.addr(), "/v1/info").ok()
            && let Some(session) = info.json()["lease"]["lease_id"].as_str()
            && *owner == format!("0x{session}")
        {
            return owner.clone();
        }
        assert!(
            Instant::now() < deadline,
            "{PATH}/{worker} is not the node's within 10 s (owner {owner:?}); stderr:\n{}",
            node.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// What one node answered while loaded.
#[derive(Default)]
struct Load {
    ids: Vec<u64>,
    /// When (since the start of the load) each batch of IDs was answered.
    answered: Vec<Duration>,
    /// When the first refusal (503, or no answer at all) came, since the start of the load.
    first_refusal: Option<Duration>,
    refusals: Vec<String>,
}

/// Loads the node at `addr` with `/v1/ids?count=200` from two clients until `until`.
fn load(addr: SocketAddr, start: Instant, until: Instant) -> Load {
    let parts: Vec<Load> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..2)
            .map(|_| {
                scope.spawn(move || {
                    let mut load = Load::default();
                    while Instant::now() < until {
                        match try_get(addr, "/v1/ids?count=200") {
                            Ok(response) if response.status == 200 => {
                                load.ids.extend(response.ids());
                                load.answered.push(start.elapsed());
                            }
                            Ok(response) => {
                                assert_eq!(response.status, 503, "{response:?}");
                                load.first_refusal.get_or_insert(start.elapsed());
                                if load.refusals.len() < 3 {
                                    load.refusals.push(response.error());
                                }
                                std::thread::sleep(Duration::from_millis(5));
                            }
                            Err(err) => {
                                // The node stopped (it lost its worker for good).
                                load.first_refusal.get_or_insert(start.elapsed());
                                load.refusals.push(format!("no answer: {err}"));
                                break;
                            }
                        }
                    }
                    load
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut all = Load::default();
    for part in parts {
        all.ids.extend(part.ids);
        all.answered.extend(part.answered);
        all.first_refusal = match (all.first_refusal, part.first_refusal) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        all.refusals.extend(part.refusals);
    }
    all
}

/// The IDs that occur more than once in `lists` (each list's own repeats included).
fn duplicates(lists: &[&[u64]]) -> Vec<u64> {
    let mut seen: HashMap<u64, u32> = HashMap::new();
    for list in lists {
        for &id in *list {
            *seen.entry(id).or_default() += 1;
        }
    }
    let mut dups: Vec<u64> = seen
        .into_iter()
        .filter(|&(_, n)| n > 1)
        .map(|(id, _)| id)
        .collect();
    dups.sort_unstable();
    dups
}

#[test]
fn a_deleted_znode_taken_by_another_node_never_lets_the_old_holder_repeat_ids() {
    let test_started = Instant::now();
    let zk = ZooKeeper::start();
    let (a_dir, b_dir) = (temp_dir(), temp_dir());
    let pinned = |dir: &std::path::Path| {
        zk_node_with_session(&zk, dir, LONG_SESSION_MS).args([
            "--worker-id",
            "0",
            "--reserve-ms",
            "500",
            "--claim-timeout-secs",
            "10",
        ])
    };
    let a = pinned(a_dir.path()).start();
    let a_owner = wait_owned_by(&zk, &a, 0);
    let mut a_before = Vec::new();
    for _ in 0..20 {
        a_before.extend(a.get("/v1/ids?count=500").ids());
    }

    // A pauses (a GC pause, a VM migration) while an operator deletes its znode; its session
    // stays alive (60 s) and B registers worker 0.
    a.signal("STOP");
    let output = zk.cli(&[&format!("delete {PATH}/0")]);
    assert_eq!(zk.get(&format!("{PATH}/0")), None, "deleted:\n{output}");
    let b = pinned(b_dir.path()).start();
    let b_owner = wait_owned_by(&zk, &b, 0);
    assert_ne!(a_owner, b_owner);

    // Both loaded at once for 4 s.
    let (a_addr, b_addr) = (a.addr(), b.addr());
    let start = Instant::now();
    a.signal("CONT");
    let until = start + Duration::from_secs(4);
    let (a_after, b_load) = std::thread::scope(|scope| {
        let a_load = scope.spawn(|| load(a_addr, start, until));
        let b_load = scope.spawn(|| load(b_addr, start, until));
        (a_load.join().unwrap(), b_load.join().unwrap())
    });
    let dups = duplicates(&[&a_before, &a_after.ids, &b_load.ids]);
    let a_last_id = a_after.answered.iter().max().copied();
    eprintln!(
        "zookeeper_ownership: after A resumed, A issued {} ids (the last answered {a_last_id:?} \
         after it), first refused {:?} after it ({:?}); B issued {}; {} duplicates; test took \
         {:?}",
        a_after.ids.len(),
        a_after.first_refusal,
        a_after.refusals.first(),
        b_load.ids.len(),
        dups.len(),
        test_started.elapsed()
    );
    assert!(!b_load.ids.is_empty(), "B served: {:?}", b_load.refusals);
    assert!(
        a_before
            .iter()
            .chain(&a_after.ids)
            .chain(&b_load.ids)
            .all(|&id| worker_in(id) == 0)
    );
    assert!(
        dups.is_empty(),
        "{} ids issued twice by the old and the new holder of worker 0 (e.g. {:?}); A issued {} \
         after it resumed, the last {a_last_id:?} after; A's stderr:\n{}",
        dups.len(),
        &dups[..dups.len().min(5)],
        a_after.ids.len(),
        a.stderr()
    );
    // A stops at once: what it still issues is covered by the mark it stored before B came.
    let a_stopped = a_after
        .first_refusal
        .unwrap_or_else(|| panic!("A never stopped issuing; stderr:\n{}", a.stderr()));
    assert!(
        a_stopped < Duration::from_secs(2),
        "A stopped only {a_stopped:?} after it resumed"
    );
    assert!(
        a_last_id.is_none_or(|t| t < Duration::from_secs(2)),
        "A issued ids {a_last_id:?} after it resumed"
    );
    // B's registration is untouched.
    assert_eq!(zk.ephemeral_owner(&format!("{PATH}/0")), Some(b_owner));
}

#[test]
fn a_graceful_stop_never_deletes_a_znode_another_session_owns() {
    let zk = ZooKeeper::start();
    let (a_dir, b_dir) = (temp_dir(), temp_dir());
    let pinned = |dir: &std::path::Path| {
        zk_node_with_session(&zk, dir, LONG_SESSION_MS).args([
            "--worker-id",
            "0",
            "--claim-timeout-secs",
            "10",
        ])
    };
    let mut a = pinned(a_dir.path()).start();
    let a_owner = wait_owned_by(&zk, &a, 0);
    assert_eq!(a.get("/v1/id").status, 200);

    // A's znode is deleted while A is paused, and B registers worker 0.
    a.signal("STOP");
    zk.cli(&[&format!("delete {PATH}/0")]);
    let b = pinned(b_dir.path()).start();
    let b_owner = wait_owned_by(&zk, &b, 0);
    assert_ne!(a_owner, b_owner);
    let b_session = session_of(&b);

    // A is asked to stop, then resumes: whatever it does, B's znode stays.
    let stopping = Instant::now();
    a.signal("TERM");
    a.signal("CONT");
    let status = a.wait_exit(Duration::from_secs(20));
    let stderr = a.stderr();
    eprintln!(
        "zookeeper_ownership: A exited ({status}) {:?} after SIGTERM",
        stopping.elapsed()
    );
    assert_eq!(
        zk.ephemeral_owner(&format!("{PATH}/0")),
        Some(b_owner),
        "A's shutdown removed B's registration; A's stderr:\n{stderr}"
    );
    assert!(!stderr.contains("znode deleted"), "{stderr}");
    assert_eq!(session_of(&b), b_session);
    let info = crate::support::info(&b);
    assert_eq!(info["lease"]["state"], "held", "{info}");
    let finished = b.stop_with("TERM");
    assert_exit(&finished, 0);
    assert_eq!(zk.get(&format!("{PATH}/0")), None, "B released its own");
}

/// A digest identity file (0600) holding `line`.
fn auth_file(dir: &std::path::Path, name: &str, line: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("{line}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

// SPEC §8 "Security": with `--zookeeper-auth-file`, every znode the node creates (its
// registration, its mark, and the parents it creates) is `world:anyone:r` plus all rights for
// its digest identity only: the 2010 tooling still reads the layout, nobody else can delete a
// registration or change a mark (the deletion that once let two nodes share a worker).
#[test]
fn with_a_digest_identity_others_read_the_2010_layout_but_cannot_change_it() {
    let zk = ZooKeeper::start();
    let secrets = temp_dir();
    let identity = auth_file(secrets.path(), "zk-auth", "snowflake:zk-pass-7");
    let (a_dir, b_dir, c_dir) = (temp_dir(), temp_dir(), temp_dir());
    let a = zk_node_with_session(&zk, a_dir.path(), 4000)
        .arg("--allow-cleartext-credentials")
        .arg("--zookeeper-auth-file")
        .arg(&identity)
        .start();
    assert_eq!(worker_of(&a), 0);
    let registration = format!("{PATH}/0");
    let mark_znode = format!("{MARKS}/0");
    // The 2010 view, without any identity.
    assert_eq!(zk.children(PATH), ["0"]);
    assert_eq!(zk.get(&registration), Some(a.thrift_addr().to_string()));
    let mark_before = mark(&zk, 0);
    for path in [PATH, MARKS, registration.as_str(), mark_znode.as_str()] {
        let acl = zk.cli(&[&format!("getAcl {path}")]);
        assert!(
            acl.contains("'world,'anyone\n: r") && acl.contains("'digest,'snowflake:"),
            "{path}: {acl}"
        );
        assert!(!acl.contains("'world,'anyone\n: cdrwa"), "{path}: {acl}");
    }
    // Without the identity: no deletion of the registration, no write or deletion of the mark.
    let refused = zk.cli(&[
        &format!("delete {registration}"),
        &format!("set {mark_znode} {{\"high_water_ms\":0}}"),
        &format!("delete {mark_znode}"),
    ]);
    assert_eq!(
        refused.matches("Insufficient permission").count(),
        3,
        "each change refused (NoAuth):\n{refused}"
    );
    assert_eq!(zk.get(&registration), Some(a.thrift_addr().to_string()));
    assert!(mark(&zk, 0) >= mark_before);
    assert_eq!(a.get("/v1/id").status, 200);

    // Another node with the same identity joins the fleet under the protected parents.
    let b = zk_node_with_session(&zk, b_dir.path(), 4000)
        .arg("--allow-cleartext-credentials")
        .arg("--zookeeper-auth-file")
        .arg(&identity)
        .start();
    assert_eq!(worker_of(&b), 1);
    assert_eq!(b.get("/v1/id").status, 200);

    // A node with another password cannot register there, and says why.
    let wrong = auth_file(secrets.path(), "zk-wrong", "snowflake:not-it");
    let c = zk_node_with_session(&zk, c_dir.path(), 4000)
        .args(["--claim-timeout-secs", "2"])
        .arg("--allow-cleartext-credentials")
        .arg("--zookeeper-auth-file")
        .arg(&wrong)
        .run_to_exit();
    assert_exit(&c, 1);
    assert!(
        c.stderr.contains("NoAuth") || c.stderr.contains("no auth"),
        "{}",
        c.stderr
    );
    assert!(
        !c.stderr.contains("not-it") && !c.stderr.contains("zk-pass-7"),
        "{}",
        c.stderr
    );
    assert!(!a.stderr().contains("zk-pass-7"));
    assert_exit(&a.stop_with("TERM"), 0);
    assert_exit(&b.stop_with("TERM"), 0);
}

// SPEC §8 "Security": TLS to ZooKeeper's secure client port, with a client certificate (the
// port requires one), together with the digest identity.
#[test]
fn a_node_registers_over_tls_and_without_a_client_certificate_is_refused() {
    let certs = crate::certs::Certs::new();
    certs.issue("zk", "zookeeper", "ca", true, 30);
    certs.issue("client", "snowflake-node", "ca", false, 30);
    let key_and_cert = certs.path("zk.pem");
    let pem = [
        std::fs::read_to_string(certs.path("zk.key")).unwrap(),
        std::fs::read_to_string(certs.path("zk.crt")).unwrap(),
    ]
    .concat();
    std::fs::write(&key_and_cert, pem).unwrap();
    let zk = ZooKeeper::start_secure(&key_and_cert, &certs.path("ca.crt"));
    let secrets = temp_dir();
    let identity = auth_file(secrets.path(), "zk-auth", "snowflake:zk-tls-9");
    // With the fleet's digest identity file `identity` and, `with_cert`, its client certificate.
    let tls_node = |dir: &std::path::Path, identity: &std::path::Path, with_cert: bool| {
        let mut serve = crate::support::Serve::new(dir)
            .args(["--zookeeper", &zk.secure_connect_string()])
            .args([
                "--zookeeper-session-timeout-ms",
                "4000",
                "--claim-timeout-secs",
                "3",
            ])
            .arg("--zookeeper-auth-file")
            .arg(identity)
            .arg("--zookeeper-ca")
            .arg(certs.path("ca.crt"));
        if with_cert {
            serve = serve
                .arg("--zookeeper-cert")
                .arg(certs.path("client.crt"))
                .arg("--zookeeper-key")
                .arg(certs.path("client.key"));
        }
        serve
    };
    let dir = temp_dir();
    let node = tls_node(dir.path(), &identity, true).start();
    assert_eq!(worker_of(&node), 0);
    assert_eq!(node.get("/v1/id").status, 200);
    // Seen through the plaintext port: the registration and its protected mark.
    assert_eq!(zk.children(PATH), ["0"]);
    assert!(mark(&zk, 0) > 0);
    // Protected for the digest identity only: over TLS, ZooKeeper also adds the certificate's
    // subject to the session's identities, and an `auth` ACL would grant it too.
    for path in [PATH, MARKS, &format!("{PATH}/0"), &format!("{MARKS}/0")] {
        let acl = zk.cli(&[&format!("getAcl {path}")]);
        assert!(
            acl.contains("'world,'anyone\n: r") && acl.contains("'digest,'snowflake:"),
            "{path}: {acl}"
        );
        assert!(
            !acl.contains("x509"),
            "{path} grants the certificate: {acl}"
        );
    }
    // The fleet's certificate with a wrong password: the digest identity is what counts.
    let wrong = auth_file(secrets.path(), "zk-wrong", "snowflake:not-it");
    let wrong_dir = temp_dir();
    let intruder = tls_node(wrong_dir.path(), &wrong, true).run_to_exit();
    assert_exit(&intruder, 1);
    assert!(
        intruder.stderr.contains("NoAuth") || intruder.stderr.contains("not authorized"),
        "{}",
        intruder.stderr
    );
    assert_eq!(zk.children(PATH), ["0"], "the intruder registered");

    // No client certificate: the secure port refuses the handshake.
    let other = temp_dir();
    let refused = tls_node(other.path(), &identity, false).run_to_exit();
    assert_exit(&refused, 1);
    assert!(
        refused
            .stderr
            .contains("cannot register a worker id in ZooKeeper"),
        "{}",
        refused.stderr
    );
    assert!(!refused.stderr.contains("zk-tls-9"));
    // A plaintext client on the secure port gets nowhere either.
    let plain = crate::support::Serve::new(other.path())
        .args(["--zookeeper", &zk.secure_connect_string()])
        .args([
            "--zookeeper-session-timeout-ms",
            "4000",
            "--claim-timeout-secs",
            "3",
        ])
        .arg("--allow-cleartext-credentials")
        .arg("--zookeeper-auth-file")
        .arg(&identity)
        .run_to_exit();
    assert_exit(&plain, 1);
    assert!(
        plain
            .stderr
            .contains("cannot register a worker id in ZooKeeper"),
        "{}",
        plain.stderr
    );
    assert_exit(&node.stop_with("TERM"), 0);
}

// Znodes an earlier version created over TLS granted the certificate's x509 identity too (its
// `auth` ACL), or someone widened them by hand: whoever such an entry names could lower the
// mark. With a digest identity, a registering node brings its paths and its mark back to
// world:anyone:r plus that identity only.
#[test]
fn a_registering_node_narrows_znodes_that_grant_more_than_its_identity() {
    let zk = ZooKeeper::start();
    let hash = "5ZvEtu0UOpFmetCdLlpab3owKiM="; // snowflake:zk-pass-7, as openssl computes it
    let mark_znode = format!("{MARKS}/0");
    let wide = format!("world:anyone:r,digest:snowflake:{hash}:cdrwa,ip:127.0.0.1:cdrwa");
    let setup = zk.cli(&[
        "addauth digest snowflake:zk-pass-7",
        &format!("create {PATH} \"\""),
        &format!("create {MARKS} \"\""),
        &format!("create {mark_znode} \"\""),
        &format!("setAcl {PATH} {wide}"),
        &format!("setAcl {MARKS} {wide}"),
        &format!("setAcl {mark_znode} {wide}"),
    ]);
    for path in [PATH, MARKS, mark_znode.as_str()] {
        let acl = zk.cli(&[&format!("getAcl {path}")]);
        assert!(
            acl.contains("'ip,'127.0.0.1"),
            "{path} setup: {acl}\n{setup}"
        );
    }
    let secrets = temp_dir();
    let identity = auth_file(secrets.path(), "zk-auth", "snowflake:zk-pass-7");
    let dir = temp_dir();
    let node = zk_node_with_session(&zk, dir.path(), 4000)
        .arg("--allow-cleartext-credentials")
        .arg("--zookeeper-auth-file")
        .arg(&identity)
        .start();
    assert_eq!(worker_of(&node), 0);
    for path in [PATH, MARKS, mark_znode.as_str()] {
        let acl = zk.cli(&[&format!("getAcl {path}")]);
        assert!(
            !acl.contains("'ip,")
                && acl.contains("'digest,'snowflake:")
                && acl.contains("'world,'anyone\n: r"),
            "{path} still grants more than the identity: {acl}"
        );
    }
    assert!(
        node.stderr()
            .contains("its ACL is now world:anyone:r plus that identity only"),
        "{}",
        node.stderr()
    );
    assert_exit(&node.stop_with("TERM"), 0);
}

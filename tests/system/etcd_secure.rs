//! The fleet against an etcd as production runs it (SPEC §8 "Security", COMPONENTS.md §7):
//! TLS with client certificates (`--client-cert-auth`) and etcd's user authentication, the node
//! holding a role with readwrite on its prefix only. Real etcd 3.4, certificates by openssl.

use crate::certs::Certs;
use crate::etcd_cluster::{find_binary, free_ports};
use crate::support::{
    Finished, Serve, ServeProcess, assert_exit, first_id, info, insert_all, temp_dir, worker_of,
};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The node's etcd user and its password.
const USER: &str = "snowflake";
const PASSWORD: &str = "sf-pass-3";
/// The prefix the node's role may read and write.
const PREFIX: &str = "/sf";

/// One etcd member with TLS, client-certificate auth and user auth enabled: `root` (for the
/// test's own etcdctl), `snowflake` with readwrite on `/sf/` only, `stranger` with readwrite
/// on `/other/` only.
struct SecureEtcd {
    certs: Certs,
    dir: tempfile::TempDir,
    client_port: u16,
    peer_port: u16,
    child: Option<Child>,
}

impl SecureEtcd {
    fn start() -> SecureEtcd {
        let certs = Certs::new();
        certs.issue("etcd", "etcd-server", "ca", true, 30);
        certs.issue("client", "snowflake-node", "ca", false, 30);
        certs.issue("root", "root", "ca", false, 30);
        certs.ca("other-ca");
        certs.issue("foreign", "snowflake-node", "other-ca", false, 30);
        let ports = free_ports(2);
        let mut etcd = SecureEtcd {
            certs,
            dir: tempfile::tempdir().unwrap(),
            client_port: ports[0],
            peer_port: ports[1],
            child: None,
        };
        etcd.spawn();
        etcd.wait_healthy();
        // Users, roles, then auth on (3.4 needs the root user with the root role).
        for args in [
            vec!["user", "add", "root:rootpass"],
            vec!["role", "add", "root"],
            vec!["user", "grant-role", "root", "root"],
            vec!["user", "add", &format!("{USER}:{PASSWORD}")],
            vec!["role", "add", "snowflake-rw"],
            vec![
                "role",
                "grant-permission",
                "snowflake-rw",
                "--prefix=true",
                "readwrite",
                "/sf/",
            ],
            vec!["user", "grant-role", USER, "snowflake-rw"],
            vec!["user", "add", "stranger:strangerpass"],
            vec!["role", "add", "other-rw"],
            vec![
                "role",
                "grant-permission",
                "other-rw",
                "--prefix=true",
                "readwrite",
                "/other/",
            ],
            vec!["user", "grant-role", "stranger", "other-rw"],
            vec!["auth", "enable"],
        ] {
            etcd.etcdctl(&args);
        }
        etcd
    }

    fn endpoint(&self) -> String {
        format!("https://127.0.0.1:{}", self.client_port)
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("etcd.log"))
            .unwrap();
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let child = Command::new(find_binary("etcd"))
            .args(["--name", "s1", "--data-dir"])
            .arg(self.dir.path().join("data"))
            .args(["--listen-client-urls", &self.endpoint()])
            .args(["--advertise-client-urls", &self.endpoint()])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("s1={peer}")])
            .arg("--cert-file")
            .arg(self.certs.path("etcd.crt"))
            .arg("--key-file")
            .arg(self.certs.path("etcd.key"))
            .arg("--trusted-ca-file")
            .arg(self.certs.path("ca.crt"))
            .arg("--client-cert-auth")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start etcd");
        self.child = Some(child);
    }

    /// `etcdctl` to this member over TLS with root's certificate (etcd takes its CN, `root`,
    /// for the user while no password is sent).
    fn root_etcdctl(&self) -> Command {
        let mut cmd = Command::new(find_binary("etcdctl"));
        cmd.env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", self.endpoint()))
            .arg("--cacert")
            .arg(self.certs.path("ca.crt"))
            .arg("--cert")
            .arg(self.certs.path("root.crt"))
            .arg("--key")
            .arg(self.certs.path("root.key"));
        cmd
    }

    /// etcdctl as root, over TLS with root's certificate (and root's password once auth is on).
    fn etcdctl(&self, args: &[&str]) -> String {
        let out = self
            .root_etcdctl()
            .args(["--dial-timeout=2s", "--command-timeout=3s"])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "etcdctl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn wait_healthy(&self) {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let out = self
                .root_etcdctl()
                .args(["--dial-timeout=1s", "endpoint", "health"])
                .output()
                .unwrap();
            if out.status.success() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "etcd not healthy: {}\n{}",
                String::from_utf8_lossy(&out.stderr),
                std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Sets `user`'s password (etcd then invalidates every token of that user).
    fn set_password(&self, user: &str, password: &str) {
        use std::io::Write;
        let mut child = self
            .root_etcdctl()
            .args([
                "--user",
                "root:rootpass",
                "user",
                "passwd",
                user,
                "--interactive=false",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(format!("{password}\n").as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "etcdctl user passwd: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Kills the member and starts it again on the same data.
    fn restart(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.spawn();
        self.wait_healthy();
    }

    fn path(&self, name: &str) -> PathBuf {
        self.certs.path(name)
    }
}

impl Drop for SecureEtcd {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A password file (0600) holding `password`.
fn password_file(dir: &Path, password: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(format!("password-{}", password.len()));
    std::fs::write(&path, format!("{password}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

/// A node of datacenter 1 on the secure etcd, with the right certificate, user and password
/// unless `tweak` changes them.
fn node(etcd: &SecureEtcd, state: &Path, secrets: &Path, tweak: &[(&str, String)]) -> Serve {
    let mut flags: Vec<(&str, String)> = vec![
        ("--etcd-endpoints", etcd.endpoint()),
        ("--etcd-prefix", PREFIX.into()),
        ("--etcd-ca", etcd.path("ca.crt").display().to_string()),
        ("--etcd-cert", etcd.path("client.crt").display().to_string()),
        ("--etcd-key", etcd.path("client.key").display().to_string()),
        ("--etcd-user", USER.into()),
        (
            "--etcd-password-file",
            password_file(secrets, PASSWORD).display().to_string(),
        ),
        ("--datacenter-id", "1".into()),
        ("--lease-ttl-secs", "6".into()),
        ("--claim-timeout-secs", "2".into()),
    ];
    for (flag, value) in tweak {
        match flags.iter_mut().find(|(f, _)| f == flag) {
            Some(entry) => entry.1.clone_from(value),
            None => flags.push((flag, value.clone())),
        }
    }
    let mut serve = Serve::new(state);
    for (flag, value) in flags {
        serve = serve.arg(flag).arg(value);
    }
    serve
}

#[test]
fn a_fleet_leases_distinct_pairs_over_mutual_tls_as_a_user_with_rights_on_its_prefix_only() {
    let etcd = SecureEtcd::start();
    let secrets = temp_dir();
    let dirs: Vec<_> = (0..3).map(|_| temp_dir()).collect();
    let nodes: Vec<ServeProcess> = dirs
        .iter()
        .map(|d| node(&etcd, d.path(), secrets.path(), &[]).start())
        .collect();
    let mut workers = HashSet::new();
    let mut all = HashSet::new();
    for node in &nodes {
        let (first, _) = first_id(node, Duration::from_secs(15));
        workers.insert(worker_of(node));
        insert_all(&mut all, &[first]);
        insert_all(&mut all, &node.get("/v1/ids?count=1000").ids());
        assert_eq!(info(node)["datacenter_id"], 1);
        // The password is nowhere in what the node says.
        assert!(!node.stderr().contains(PASSWORD), "{}", node.stderr());
        assert!(!node.get("/v1/info").body.contains(PASSWORD));
        assert!(!node.get("/metrics").body.contains(PASSWORD));
    }
    assert_eq!(workers.len(), 3, "distinct workers: {workers:?}");
    // The claims and marks are where the role allows.
    let claims = etcd.etcdctl(&["get", "--prefix", "--keys-only", "/sf/workers/1/"]);
    assert_eq!(
        claims.lines().filter(|l| !l.is_empty()).count(),
        3,
        "{claims}"
    );
    for node in nodes {
        assert_exit(&node.stop_with("TERM"), 0);
    }
}

fn refused(finished: &Finished, needles: &[&str]) {
    assert_exit(finished, 1);
    for needle in needles {
        assert!(
            finished.stderr.contains(needle),
            "stderr lacks {needle:?}:\n{}",
            finished.stderr
        );
    }
    assert!(!finished.stderr.contains("http listening") || !finished.stderr.contains("ready"));
    assert!(!finished.stderr.contains(PASSWORD));
}

#[test]
fn a_wrong_password_no_certificate_a_wrong_ca_and_a_role_elsewhere_each_fail_clearly() {
    let etcd = SecureEtcd::start();
    let secrets = temp_dir();
    let dir = temp_dir();
    let run =
        |tweak: &[(&str, String)]| node(&etcd, dir.path(), secrets.path(), tweak).run_to_exit();

    let wrong = password_file(secrets.path(), "not-the-password");
    let finished = run(&[("--etcd-password-file", wrong.display().to_string())]);
    refused(
        &finished,
        &[
            "cannot authenticate as etcd user \"snowflake\"",
            "authentication failed",
        ],
    );
    assert!(!finished.stderr.contains("not-the-password"));

    // No client certificate: etcd (--client-cert-auth) refuses the handshake.
    let no_cert = Serve::new(dir.path())
        .args([
            "--etcd-endpoints",
            &etcd.endpoint(),
            "--etcd-prefix",
            PREFIX,
        ])
        .arg("--etcd-ca")
        .arg(etcd.path("ca.crt"))
        .args(["--etcd-user", USER, "--etcd-password-file"])
        .arg(password_file(secrets.path(), PASSWORD))
        .args(["--datacenter-id", "1", "--claim-timeout-secs", "2"])
        .run_to_exit();
    refused(
        &no_cert,
        &["cannot claim a worker id from etcd", &etcd.endpoint()],
    );

    // A client certificate from a CA etcd does not trust.
    let foreign = run(&[
        (
            "--etcd-cert",
            etcd.path("foreign.crt").display().to_string(),
        ),
        ("--etcd-key", etcd.path("foreign.key").display().to_string()),
    ]);
    refused(
        &foreign,
        &["cannot claim a worker id from etcd", &etcd.endpoint()],
    );

    // Our CA file does not hold etcd's CA: the node refuses etcd's certificate.
    let wrong_ca = run(&[("--etcd-ca", etcd.path("other-ca.crt").display().to_string())]);
    refused(
        &wrong_ca,
        &["cannot claim a worker id from etcd", &etcd.endpoint()],
    );

    // A user whose role covers another prefix only.
    let stranger = run(&[
        ("--etcd-user", "stranger".into()),
        (
            "--etcd-password-file",
            password_file(secrets.path(), "strangerpass")
                .display()
                .to_string(),
        ),
    ]);
    refused(&stranger, &["permission denied"]);
}

/// How many times the node authenticated to etcd so far.
fn authentications(node: &ServeProcess) -> usize {
    node.stderr().matches("authenticated to etcd").count()
}

/// Requests IDs until the node answers again (at most 20 s), adding them to `all`.
fn serving_again(node: &ServeProcess, all: &mut HashSet<u64>) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(response) = crate::support::try_get(node.addr(), "/v1/ids?count=100")
            && response.status == 200
        {
            insert_all(all, &response.ids());
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not serving again:\n{}",
            node.stderr()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn an_invalidated_auth_token_is_renewed_with_no_lost_lease_and_no_duplicate() {
    let mut etcd = SecureEtcd::start();
    let secrets = temp_dir();
    let dir = temp_dir();
    let node = node(
        &etcd,
        dir.path(),
        secrets.path(),
        &[("--lease-ttl-secs", "10".into())],
    )
    .start();
    let (first, _) = first_id(&node, Duration::from_secs(15));
    let lease = info(&node)["lease"]["lease_id"].clone();
    let mut all = HashSet::new();
    insert_all(&mut all, &[first]);
    assert_eq!(authentications(&node), 1, "{}", node.stderr());

    // etcd invalidates every token of a user whose password is set (here to the same one).
    etcd.set_password(USER, PASSWORD);
    let deadline = Instant::now() + Duration::from_secs(10);
    while authentications(&node) < 2 {
        assert!(
            Instant::now() < deadline,
            "never authenticated again:\n{}",
            node.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    serving_again(&node, &mut all);

    // And a restart of etcd itself.
    etcd.restart();
    serving_again(&node, &mut all);
    // Keep-alives and marks go on for more than a TTL.
    std::thread::sleep(Duration::from_secs(4));
    insert_all(&mut all, &node.get("/v1/ids?count=1000").ids());
    assert_eq!(info(&node)["lease"]["lease_id"], lease, "{}", node.stderr());
    assert!(
        !node.stderr().contains("lost the lease"),
        "{}",
        node.stderr()
    );
    let finished = node.stop_with("TERM");
    assert_exit(&finished, 0);
    assert!(!finished.stderr.contains(PASSWORD));
}

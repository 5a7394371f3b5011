//! Secrets and access (issue 28): credentials never sent in the clear (an etcd password over
//! `http://` and a ZooKeeper digest identity without TLS are refused before anything connects,
//! by `serve`, `pg-keeper` and the state tools alike, unless `--allow-cleartext-credentials`
//! says the network is trusted), and the admin listener's status page can be turned off.

use crate::support::{Finished, Serve, assert_exit, get, temp_dir};
use std::path::{Path, PathBuf};

/// An etcd endpoint nothing listens on: a node that got past its settings fails to claim.
const DEAD_ETCD: &str = "http://127.0.0.1:1";
/// A ZooKeeper server nothing listens on.
const DEAD_ZOOKEEPER: &str = "127.0.0.1:1";

/// A 0600 file holding `line`.
fn secret_file(dir: &Path, name: &str, line: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("{line}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

/// Refused at its settings (exit 2 or 1 as the command says), naming the risk and the way out.
fn refused_cleartext(finished: &Finished, code: i32, names: &str) {
    assert_exit(finished, code);
    let err = &finished.stderr;
    for needle in ["cleartext", names, "--allow-cleartext-credentials"] {
        assert!(err.contains(needle), "no {needle:?} in:\n{err}");
    }
    for never in ["cannot claim", "cannot register", "hunter2", "zk-pass"] {
        assert!(!err.contains(never), "{never:?} in:\n{err}");
    }
}

#[test]
fn serve_refuses_an_etcd_password_over_http_unless_the_network_is_trusted() {
    let dir = temp_dir();
    let secrets = temp_dir();
    let password = secret_file(secrets.path(), "etcd-password", "hunter2");
    let node = || {
        Serve::new(dir.path())
            .args(["--etcd-endpoints", DEAD_ETCD, "--etcd-user", "snowflake"])
            .arg("--etcd-password-file")
            .arg(&password)
            .args(["--claim-timeout-secs", "1"])
    };
    refused_cleartext(&node().run_to_exit(), 2, DEAD_ETCD);
    // The password from the environment is refused alike.
    let from_env = Serve::new(dir.path())
        .args(["--etcd-endpoints", DEAD_ETCD, "--etcd-user", "snowflake"])
        .args(["--claim-timeout-secs", "1"])
        .env("SNOWFLAKE_ETCD_PASSWORD", "hunter2")
        .run_to_exit();
    refused_cleartext(&from_env, 2, DEAD_ETCD);
    // Trusted (flag, environment, config file): past the settings, to the claim.
    let config = secrets.path().join("snowflake.toml");
    std::fs::write(&config, "allow_cleartext_credentials = true\n").unwrap();
    for trusted in [
        node().arg("--allow-cleartext-credentials"),
        node().env("SNOWFLAKE_ALLOW_CLEARTEXT_CREDENTIALS", "true"),
        node().arg("--config").arg(&config),
    ] {
        let finished = trusted.run_to_exit();
        assert_exit(&finished, 1);
        assert!(
            finished
                .stderr
                .contains("cannot claim a worker id from etcd"),
            "{}",
            finished.stderr
        );
    }
}

#[test]
fn serve_refuses_a_zookeeper_digest_identity_without_tls_unless_the_network_is_trusted() {
    let dir = temp_dir();
    let secrets = temp_dir();
    let auth = secret_file(secrets.path(), "zk-auth", "snowflake:zk-pass-7");
    let node = || {
        Serve::new(dir.path())
            .args(["--zookeeper", DEAD_ZOOKEEPER, "--zookeeper-auth-file"])
            .arg(&auth)
            .args(["--claim-timeout-secs", "1"])
    };
    refused_cleartext(&node().run_to_exit(), 2, "--zookeeper-auth-file");
    let finished = node().arg("--allow-cleartext-credentials").run_to_exit();
    assert_exit(&finished, 1);
    assert!(
        finished
            .stderr
            .contains("cannot register a worker id in ZooKeeper"),
        "{}",
        finished.stderr
    );
}

#[test]
fn the_operator_tools_and_pg_keeper_refuse_cleartext_credentials_too() {
    let dir = temp_dir();
    let secrets = temp_dir();
    let password = secret_file(secrets.path(), "etcd-password", "hunter2");
    let auth = secret_file(secrets.path(), "zk-auth", "snowflake:zk-pass-7");
    let etcd = |words: &[&str]| {
        Serve::subcommand(words.iter().copied())
            .args(["--etcd-endpoints", DEAD_ETCD, "--etcd-user", "snowflake"])
            .arg("--etcd-password-file")
            .arg(&password)
    };
    // `state show` and `state lower-mark` (usage and settings errors exit 1).
    let show = etcd(&["state", "show"])
        .args(["--datacenter-id", "0", "--worker-id", "0"])
        .run_to_exit();
    refused_cleartext(&show, 1, DEAD_ETCD);
    let lower = etcd(&["state", "lower-mark"])
        .args([
            "--datacenter-id",
            "0",
            "--worker-id",
            "0",
            "--to",
            "1",
            "--yes",
        ])
        .run_to_exit();
    refused_cleartext(&lower, 1, DEAD_ETCD);
    let zookeeper = Serve::subcommand(["state", "show"])
        .args(["--zookeeper", DEAD_ZOOKEEPER, "--zookeeper-auth-file"])
        .arg(&auth)
        .args(["--datacenter-id", "0", "--worker-id", "0"])
        .arg("--state-dir")
        .arg(dir.path())
        .run_to_exit();
    refused_cleartext(&zookeeper, 1, "--zookeeper-auth-file");
    // pg-keeper: a settings error (exit 2), before the database or etcd is dialled.
    let keeper = etcd(&["pg-keeper"])
        .args([
            "--postgres",
            "host=127.0.0.1 port=1 user=postgres dbname=app",
        ])
        .run_to_exit();
    refused_cleartext(&keeper, 2, DEAD_ETCD);
    // Trusted: pg-keeper gets past its settings (and waits for the database: stopped here).
    let mut trusted = etcd(&["pg-keeper"])
        .args([
            "--postgres",
            "host=127.0.0.1 port=1 user=postgres dbname=app",
        ])
        .env("SNOWFLAKE_ALLOW_CLEARTEXT_CREDENTIALS", "true")
        .spawn();
    trusted.wait_for_line("pg-keeper starting");
    trusted.signal("TERM");
    trusted.wait_exit(std::time::Duration::from_secs(10));
}

#[test]
fn the_admin_listener_can_leave_out_the_status_page_and_keep_probes_and_metrics() {
    let dir = temp_dir();
    let page_routes = ["/", "/status.js", "/v1/status"];
    let probes = ["/healthz", "/readyz", "/metrics"];
    // By default the admin listener serves the page and /v1/status too.
    let node = Serve::new(dir.path())
        .args(["--admin-addr", "127.0.0.1:0"])
        .start();
    let admin = node.admin_addr();
    for path in page_routes.iter().chain(&probes) {
        assert_eq!(get(admin, path).status, 200, "{path} on the admin listener");
    }
    assert_exit(&node.stop_with("TERM"), 0);
    // Off (flag, environment): 404 for the page and /v1/status there, probes and metrics as
    // before; the HTTP listener keeps its page.
    for off in [
        Serve::new(dir.path()).args(["--admin-addr", "127.0.0.1:0", "--admin-status-page", "off"]),
        Serve::new(dir.path())
            .args(["--admin-addr", "127.0.0.1:0"])
            .env("SNOWFLAKE_ADMIN_STATUS_PAGE", "off"),
    ] {
        let node = off.start();
        let admin = node.admin_addr();
        for path in page_routes {
            let response = get(admin, path);
            assert_eq!(response.status, 404, "{path} on the admin listener");
            // Its 404 lists only what it serves.
            assert!(
                response
                    .body
                    .contains(r#"routes: /healthz, /readyz, /metrics"}"#),
                "{}",
                response.body
            );
        }
        for path in probes {
            assert_eq!(get(admin, path).status, 200, "{path} on the admin listener");
        }
        assert_eq!(node.get("/v1/status").status, 200, "the HTTP listener's");
        assert_exit(&node.stop_with("TERM"), 0);
    }
    // A bad value names the setting and what is valid.
    let bad = Serve::new(dir.path())
        .args([
            "--admin-addr",
            "127.0.0.1:0",
            "--admin-status-page",
            "maybe",
        ])
        .run_to_exit();
    assert_exit(&bad, 2);
    for needle in ["--admin-status-page", "on or off", "maybe"] {
        assert!(bad.stderr.contains(needle), "{needle:?}: {}", bad.stderr);
    }
}

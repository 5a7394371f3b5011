//! TLS on the service's own listeners (SPEC §8 "Security"), on the real binary with
//! certificates made by openssl and curl as the client: HTTPS and mutual TLS, the admin listener
//! that never asks for a client certificate, bad files at start, and renewed files picked up
//! without a restart (gRPC over TLS and keep-alive connections across a renewal are tested with
//! grpcio and Python's own TLS in tests/peers; what every TLS door refuses, and its handshake
//! timeout, in the server's `listen` tests).

use crate::certs::Certs;
use crate::support::{Serve, ServeProcess, assert_exit, get, temp_dir};
use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

/// What one curl run did.
#[derive(Debug)]
struct Curl {
    code: i32,
    stdout: String,
    stderr: String,
}

/// `curl -sS ARGS… https://ADDR/PATH` (with `-v` when `verbose`), at most 10 s.
fn curl(addr: SocketAddr, path: &str, args: &[&str]) -> Curl {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10"])
        .args(args)
        .arg(format!("https://{addr}{path}"))
        .output()
        .expect("curl is installed (scripts/test installs it)");
    Curl {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn tls_node(certs: &Certs, dir: &std::path::Path, extra: &[&str]) -> ServeProcess {
    Serve::new(dir)
        .arg("--tls-cert")
        .arg(certs.path("server.crt"))
        .arg("--tls-key")
        .arg(certs.path("server.key"))
        .args(extra.iter().copied())
        .start()
}

fn path_str(certs: &Certs, name: &str) -> String {
    certs.path(name).to_string_lossy().into_owned()
}

#[test]
fn curl_gets_ids_over_https_and_mutual_tls() {
    let certs = Certs::new();
    certs.issue("server", "snowflake-server", "ca", true, 30);
    certs.issue("client", "snowflake-client", "ca", false, 30);
    let ca = path_str(&certs, "ca.crt");

    // TLS only: any client that trusts the CA.
    let dir = temp_dir();
    let node = tls_node(&certs, dir.path(), &[]);
    let served = curl(node.addr(), "/v1/id", &["--cacert", &ca]);
    assert_eq!(served.code, 0, "{served:?}");
    assert!(served.stdout.contains("\"id\""), "{served:?}");
    let untrusted = curl(node.addr(), "/v1/id", &[]);
    assert_ne!(
        untrusted.code, 0,
        "a client that does not trust the CA: {untrusted:?}"
    );
    assert!(node.stderr().contains("tls=\"on\""), "{}", node.stderr());
    assert_exit(&node.stop_with("TERM"), 0);

    // Mutual TLS.
    let dir = temp_dir();
    let node = tls_node(&certs, dir.path(), &["--tls-client-ca", &ca]);
    let client = [
        "--cacert",
        ca.as_str(),
        "--cert",
        &path_str(&certs, "client.crt"),
        "--key",
        &path_str(&certs, "client.key"),
    ];
    let served = curl(node.addr(), "/v1/ids?count=3", &client);
    assert_eq!(served.code, 0, "{served:?}");
    assert!(served.stdout.contains("\"ids\""), "{served:?}");
    assert!(node.stderr().contains("tls=\"mutual\""));
    assert_exit(&node.stop_with("TERM"), 0);
}

#[test]
fn the_admin_listener_serves_probes_and_metrics_without_client_certificates() {
    let certs = Certs::new();
    certs.issue("server", "snowflake-server", "ca", true, 30);
    let ca = path_str(&certs, "ca.crt");
    let dir = temp_dir();
    let node = tls_node(
        &certs,
        dir.path(),
        &["--tls-client-ca", &ca, "--admin-addr", "127.0.0.1:0"],
    );
    let admin = node.admin_addr();
    assert_eq!(get(admin, "/healthz").status, 200);
    let ready = get(admin, "/readyz");
    assert_eq!(ready.status, 200, "{ready:?}");
    let metrics = get(admin, "/metrics");
    assert_eq!(metrics.status, 200);
    let expiry: f64 = metrics
        .body
        .lines()
        .find_map(|l| l.strip_prefix("snowflake_tls_certificate_expiry_timestamp_seconds "))
        .unwrap_or_else(|| panic!("no expiry metric:\n{}", metrics.body))
        .trim()
        .parse()
        .unwrap();
    let in_days = (expiry - (crate::support::now_ms() / 1000) as f64) / 86_400.0;
    assert!(
        (29.0..=31.0).contains(&in_days),
        "expires in {in_days} days"
    );
    assert!(
        metrics
            .body
            .contains("snowflake_tls_reloads_total{result=\"error\"} 0")
    );
    // Only the probes: no IDs on the admin listener.
    assert_eq!(get(admin, "/v1/id").status, 404);
    assert_exit(&node.stop_with("TERM"), 0);
}

#[test]
fn bad_tls_files_and_flags_stop_the_start_with_one_clear_line() {
    let certs = Certs::new();
    certs.issue("server", "snowflake-server", "ca", true, 30);
    certs.issue("other", "another-server", "ca", true, 30);
    certs.issue_expired("expired", "ca");
    std::fs::write(certs.path("garbage.pem"), "not a certificate\n").unwrap();
    let dir = temp_dir();
    let start = |args: &[String]| {
        Serve::new(dir.path())
            .args(args.iter().map(String::as_str))
            .run_to_exit()
    };
    let p = |name: &str| path_str(&certs, name);
    let cases: Vec<(Vec<String>, i32, String)> = vec![
        (
            vec!["--tls-cert".into(), p("server.crt")],
            2,
            "--tls-cert needs --tls-key".into(),
        ),
        (
            vec!["--tls-client-ca".into(), p("ca.crt")],
            2,
            "--tls-client-ca needs --tls-cert and --tls-key".into(),
        ),
        (
            vec![
                "--tls-cert".into(),
                p("missing.crt"),
                "--tls-key".into(),
                p("server.key"),
            ],
            1,
            format!("cannot read --tls-cert {}", p("missing.crt")),
        ),
        (
            vec![
                "--tls-cert".into(),
                p("garbage.pem"),
                "--tls-key".into(),
                p("server.key"),
            ],
            1,
            format!("--tls-cert {} holds no PEM certificate", p("garbage.pem")),
        ),
        (
            vec![
                "--tls-cert".into(),
                p("server.crt"),
                "--tls-key".into(),
                p("garbage.pem"),
            ],
            1,
            format!(
                "--tls-key {} holds no usable PEM private key",
                p("garbage.pem")
            ),
        ),
        (
            vec![
                "--tls-cert".into(),
                p("server.crt"),
                "--tls-key".into(),
                p("other.key"),
            ],
            1,
            format!(
                "the key in --tls-key {} does not go with the certificate in --tls-cert {}",
                p("other.key"),
                p("server.crt")
            ),
        ),
        (
            vec![
                "--tls-cert".into(),
                p("expired.crt"),
                "--tls-key".into(),
                p("expired.key"),
            ],
            1,
            format!(
                "the certificate in --tls-cert {} expired at",
                p("expired.crt")
            ),
        ),
        (
            vec![
                "--tls-cert".into(),
                p("server.crt"),
                "--tls-key".into(),
                p("server.key"),
                "--tls-client-ca".into(),
                p("garbage.pem"),
            ],
            1,
            format!(
                "--tls-client-ca {} holds no PEM certificate",
                p("garbage.pem")
            ),
        ),
    ];
    for (args, code, message) in cases {
        let finished = start(&args);
        assert_exit(&finished, code);
        let errors: Vec<&str> = finished
            .stderr
            .lines()
            .filter(|l| l.starts_with("error: "))
            .collect();
        assert_eq!(errors.len(), 1, "{args:?}: one line:\n{}", finished.stderr);
        assert!(
            errors[0].contains(&message),
            "{args:?}: expected {message:?} in {:?}",
            errors[0]
        );
        assert!(!finished.stderr.contains("http listening"), "{args:?}");
        assert!(!finished.stderr.contains("panicked"), "{args:?}");
    }
}

/// The subject CN of the certificate the node presents to a new connection.
fn served_cn(addr: SocketAddr, ca: &str) -> String {
    let run = curl(addr, "/healthz", &["-v", "--cacert", ca]);
    assert_eq!(run.code, 0, "{run:?}");
    run.stderr
        .lines()
        .find_map(|l| l.split("subject: ").nth(1))
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|| panic!("no subject in curl -v:\n{}", run.stderr))
}

/// Waits (at most 10 s) until new connections get a certificate whose subject contains `cn`.
fn wait_for_cn(addr: SocketAddr, ca: &str, cn: &str) -> Duration {
    let started = Instant::now();
    loop {
        let served = served_cn(addr, ca);
        if served.contains(cn) {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "still serving {served:?}, not {cn:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Replaces `to` with a copy of `from`, atomically (write a temporary file, rename).
fn replace(from: &std::path::Path, to: &std::path::Path) {
    let tmp = to.with_extension("tmp");
    std::fs::copy(from, &tmp).unwrap();
    std::fs::rename(&tmp, to).unwrap();
}

#[test]
fn renewed_files_are_picked_up_and_a_half_renewed_pair_keeps_the_current_one() {
    let certs = Certs::new();
    certs.issue("one", "renewal-one", "ca", true, 30);
    certs.issue("two", "renewal-two", "ca", true, 30);
    certs.issue("three", "renewal-three", "ca", true, 30);
    let ca = path_str(&certs, "ca.crt");
    // What cert-manager does in a pod: the files are symlinks into `..data`, itself a symlink
    // to a timestamped directory that is swapped atomically.
    let mount = temp_dir();
    let m = mount.path();
    let version = |name: &str, from: &str| {
        let dir = m.join(name);
        std::fs::create_dir(&dir).unwrap();
        std::fs::copy(certs.path(&format!("{from}.crt")), dir.join("tls.crt")).unwrap();
        std::fs::copy(certs.path(&format!("{from}.key")), dir.join("tls.key")).unwrap();
    };
    version("..2026_12_01", "one");
    std::os::unix::fs::symlink("..2026_12_01", m.join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/tls.crt", m.join("tls.crt")).unwrap();
    std::os::unix::fs::symlink("..data/tls.key", m.join("tls.key")).unwrap();

    let dir = temp_dir();
    let node = Serve::new(dir.path())
        .arg("--tls-cert")
        .arg(m.join("tls.crt"))
        .arg("--tls-key")
        .arg(m.join("tls.key"))
        .start();
    assert!(served_cn(node.addr(), &ca).contains("renewal-one"));

    // The `..data` swap.
    version("..2026_12_02", "two");
    std::os::unix::fs::symlink("..2026_12_02", m.join("..data_tmp")).unwrap();
    std::fs::rename(m.join("..data_tmp"), m.join("..data")).unwrap();
    let took = wait_for_cn(node.addr(), &ca, "renewal-two");
    assert!(took < Duration::from_secs(5), "picked up after {took:?}");

    // Caught half renewed: a new certificate beside the old key. The current pair stays, the
    // failure is counted once, and the pair loads as soon as the key arrives.
    let files = m.join("..2026_12_02");
    replace(&certs.path("three.crt"), &files.join("tls.crt"));
    std::thread::sleep(Duration::from_millis(2500));
    assert!(served_cn(node.addr(), &ca).contains("renewal-two"));
    assert!(
        node.stderr()
            .contains("the renewed TLS files do not load; keeping the current certificate"),
        "{}",
        node.stderr()
    );
    replace(&certs.path("three.key"), &files.join("tls.key"));
    let took = wait_for_cn(node.addr(), &ca, "renewal-three");
    assert!(took < Duration::from_secs(5), "picked up after {took:?}");
    let metrics = curl(node.addr(), "/metrics", &["--cacert", &ca]);
    assert!(
        metrics
            .stdout
            .contains("snowflake_tls_reloads_total{result=\"error\"} 1"),
        "{}",
        metrics.stdout
    );
    assert!(
        metrics
            .stdout
            .contains("snowflake_tls_reloads_total{result=\"ok\"} 2"),
        "{}",
        metrics.stdout
    );
    assert_exit(&node.stop_with("TERM"), 0);
}

/// `snowflake bench ARGS… --json` against `addr`: its exit code and report.
fn bench(addr: SocketAddr, args: &[&str]) -> (i32, serde_json::Value, String) {
    let out = Command::new(crate::support::binary())
        .args(["bench", "--addr", &addr.to_string(), "-c", "4", "-d", "1s"])
        .args(["--json", "--no-progress"])
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let report = serde_json::from_str(&stdout).unwrap_or(serde_json::Value::Null);
    (
        out.status.code().unwrap_or(-1),
        report,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn snowflake_bench_speaks_https_and_grpc_over_mutual_tls() {
    let certs = Certs::new();
    certs.issue("server", "snowflake-server", "ca", true, 30);
    certs.issue("client", "bench-client", "ca", false, 30);
    let ca = path_str(&certs, "ca.crt");
    let (cert, key) = (
        path_str(&certs, "client.crt"),
        path_str(&certs, "client.key"),
    );
    let dir = temp_dir();
    let node = tls_node(&certs, dir.path(), &["--tls-client-ca", &ca]);
    let mutual = [
        "--tls-ca",
        ca.as_str(),
        "--tls-client-cert",
        cert.as_str(),
        "--tls-client-key",
        key.as_str(),
    ];
    let (code, report, stderr) = bench(node.addr(), &mutual);
    assert_eq!(code, 0, "{stderr}\n{report}");
    assert!(report["requests_ok"].as_u64().unwrap() > 100, "{report}");
    assert_eq!(report["errors_total"], 0, "{report}");
    assert_eq!(report["protocol"], "http", "{report}");
    assert_eq!(report["tls"], "mutual", "{report}");

    let grpc = node.logged_addr("grpc listening");
    let mut args = vec!["--protocol", "grpc", "--batch", "10"];
    args.extend(mutual);
    let (code, report, stderr) = bench(grpc, &args);
    assert_eq!(code, 0, "{stderr}\n{report}");
    assert!(report["requests_ok"].as_u64().unwrap() > 100, "{report}");
    assert_eq!(report["tls"], "mutual", "{report}");

    // The text report names the transport actually spoken: https, not http.
    for (addr, protocol, expected) in [
        (node.addr(), "http", "over https (mutual tls)"),
        (grpc, "grpc", "over grpc (mutual tls)"),
    ] {
        let out = Command::new(crate::support::binary())
            .args(["bench", "--addr", &addr.to_string(), "--protocol", protocol])
            .args(["-c", "1", "-n", "5", "--no-progress"])
            .args(mutual)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{text}");
        assert!(
            text.lines().next().unwrap_or("").contains(expected),
            "{text}"
        );
    }

    // Without the client certificate the service refuses every connection, and bench says so.
    let (code, report, stderr) = bench(node.addr(), &["--tls-ca", &ca]);
    assert_ne!(code, 0, "{report}");
    assert_eq!(
        report["requests_ok"].as_u64().unwrap_or(0),
        0,
        "{report}\n{stderr}"
    );
    // Bad flags: one line, exit 2.
    let (code, _, stderr) = bench(node.addr(), &["--tls-client-cert", &cert]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--tls-ca"), "{stderr}");
    let (code, _, stderr) = bench(node.addr(), &["--protocol", "thrift", "--tls-ca", &ca]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("Thrift has no TLS"), "{stderr}");
    assert_exit(&node.stop_with("TERM"), 0);
}

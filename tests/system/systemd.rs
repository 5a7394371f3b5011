//! The systemd unit (deploy/systemd/snowflake.service) checked offline with systemd-analyze, and
//! the readiness protocol it relies on (`Type=notify`) tested without systemd: a `NOTIFY_SOCKET`
//! the test owns.

use crate::support::{Serve, assert_exit, temp_dir};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn unit_path() -> PathBuf {
    deploy("snowflake.service")
}

fn deploy(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/systemd")
        .join(name)
}

/// Unit `name` as shipped, with `ExecStart` (which must start with `exec`) pointed at the
/// binary under test (systemd-analyze wants an executable there).
fn unit_for_test(dir: &Path, name: &str, exec: &str) -> PathBuf {
    let unit = std::fs::read_to_string(deploy(name)).unwrap();
    assert!(unit.contains(&format!("ExecStart={exec}")), "{unit}");
    let bin = crate::support::binary();
    let path = dir.join(name);
    std::fs::write(
        &path,
        unit.replace("/usr/bin/snowflake", &bin.to_string_lossy()),
    )
    .unwrap();
    path
}

/// `systemd-analyze verify` passes without a word, and `security --offline=yes` rates the unit
/// at most 2.0, the score docs/deploy.md states in its section `heading`.
fn verify_and_rate(unit: &Path, heading: &str) {
    let verify = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(unit)
        .output()
        .expect("systemd-analyze (the systemd package)");
    let stderr = String::from_utf8_lossy(&verify.stderr);
    assert!(
        verify.status.success() && stderr.trim().is_empty(),
        "{stderr}"
    );

    let security = Command::new("systemd-analyze")
        .args(["security", "--offline=yes"])
        .arg(unit)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&security.stdout);
    let line = out
        .lines()
        .find(|l| l.contains("Overall exposure level"))
        .unwrap_or_else(|| panic!("no score in {out}"));
    let score: f64 = line
        .split(':')
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no score in {line:?}"));
    assert!(score <= 2.0, "exposure {score} > 2.0: {line}");
    // docs/deploy.md states the score, in the section headed `heading`: keep it true.
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/deploy.md"))
            .unwrap();
    let section = readme
        .split_once(&format!("\n{heading}\n"))
        .map(|(_, rest)| rest.split("\n#").next().unwrap_or(rest))
        .unwrap_or_else(|| panic!("docs/deploy.md has no section {heading:?}"));
    let stated = format!("exposure {score:.1}");
    assert!(
        section.contains(&stated),
        "docs/deploy.md should state `{stated}` under {heading:?}"
    );
}

#[test]
fn the_unit_verifies_and_its_sandbox_rates_ok() {
    let dir = temp_dir();
    let unit = unit_for_test(dir.path(), "snowflake.service", "/usr/bin/snowflake serve");
    verify_and_rate(&unit, "## systemd (`deploy/systemd/`)");
}

#[test]
fn the_pg_keeper_unit_verifies_and_its_sandbox_rates_ok() {
    let dir = temp_dir();
    let unit = unit_for_test(
        dir.path(),
        "snowflake-pg-keeper.service",
        "/usr/bin/snowflake pg-keeper",
    );
    verify_and_rate(
        &unit,
        "### The PostgreSQL keeper (`snowflake-pg-keeper.service`)",
    );
    let text = std::fs::read_to_string(&unit).unwrap();
    // Running as postgres, removing the user's IPC objects would remove the database's.
    assert!(text.lines().any(|l| l == "RemoveIPC=no"), "{text}");
}

/// The environment file shipped beside the keeper's unit, read as systemd reads it (`KEY=VALUE`,
/// double quotes removed, `#` comments), is one `snowflake pg-keeper` starts with: it logs its
/// database and etcd, then waits for the database (none runs here).
#[test]
fn the_shipped_keeper_environment_starts_the_keeper() {
    let text = std::fs::read_to_string(deploy("snowflake-pg-keeper.env")).unwrap();
    let mut cmd = Command::new(crate::support::binary());
    cmd.arg("pg-keeper").env_clear();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (key, value) = line.split_once('=').unwrap_or_else(|| panic!("{line}"));
        cmd.env(key, value.trim_matches('"'));
    }
    let mut child = cmd
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (lines_tx, lines) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = lines_tx.send(line);
        }
    });
    // Waiting for the database: its signal handlers are in place by then.
    let mut log = String::new();
    while !log.contains("trying again") {
        match lines.recv_timeout(Duration::from_secs(30)) {
            Ok(line) => log.push_str(&(line + "\n")),
            Err(e) => panic!("{e}: {log}"),
        }
    }
    crate::support::send_signal(child.id(), "TERM");
    let status = child.wait().unwrap();
    reader.join().unwrap();
    log.extend(lines.try_iter().map(|l| l + "\n"));
    assert!(status.success(), "{status}: {log}");
    assert!(log.contains("pg-keeper starting"), "{log}");
    assert!(
        log.contains("postgresql://postgres@/var/run/postgresql/.s.PGSQL.5432/app"),
        "{log}"
    );
    assert!(log.contains("etcd http://127.0.0.1:2379"), "{log}");
}

/// Every datagram received so far (non-blocking).
fn received(socket: &UnixDatagram, into: &mut Vec<String>) {
    let mut buf = [0u8; 4096];
    while let Ok(n) = socket.recv(&mut buf) {
        into.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
}

#[test]
fn ready_is_notified_only_once_the_node_can_issue_and_stopping_on_sigterm() {
    let state = temp_dir();
    // A reservation 3 s ahead, then a crash: the next start must wait for the clock to pass the
    // mark, not ready meanwhile.
    let first = Serve::new(state.path())
        .args(["--reserve-ms", "3000"])
        .start();
    first.poll("/readyz", Duration::from_secs(10), |r| r.status == 200);
    first.kill9();

    let sock_dir = temp_dir();
    let sock_path = sock_dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&sock_path).unwrap();
    socket.set_nonblocking(true).unwrap();
    let node = Serve::new(state.path())
        .env("NOTIFY_SOCKET", &sock_path)
        .start();
    let mut messages = Vec::new();
    let mut saw_not_ready = false;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        // The order matters: readiness first, then the datagrams sent before that answer.
        let ready_now = node.get("/readyz").status == 200;
        received(&socket, &mut messages);
        let notified_ready = messages.iter().any(|m| m.lines().any(|l| l == "READY=1"));
        if !ready_now {
            saw_not_ready = true;
            assert!(
                !notified_ready,
                "READY=1 while /readyz is not 200: {messages:?}"
            );
        }
        if notified_ready {
            break;
        }
        assert!(Instant::now() < deadline, "no READY=1: {messages:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        saw_not_ready,
        "the node was never seen not ready: {messages:?}"
    );
    assert!(
        messages
            .iter()
            .any(|m| m.contains("STATUS=not ready: ") && !m.contains("READY=1")),
        "{messages:?}"
    );
    assert!(
        messages
            .iter()
            .any(|m| m.contains("STATUS=ready: issuing ids")),
        "{messages:?}"
    );
    assert_eq!(node.get("/readyz").status, 200);

    let finished = node.stop_with("TERM");
    assert_exit(&finished, 0);
    received(&socket, &mut messages);
    assert!(
        messages
            .iter()
            .any(|m| m.lines().any(|l| l == "STOPPING=1")),
        "{messages:?}"
    );
}

/// Without NOTIFY_SOCKET nothing is sent and nothing is logged about it.
#[test]
fn without_notify_socket_nothing_is_sent() {
    let state = temp_dir();
    let node = Serve::new(state.path()).start();
    node.poll("/readyz", Duration::from_secs(10), |r| r.status == 200);
    let finished = node.stop_with("TERM");
    assert_exit(&finished, 0);
    assert!(
        !finished.stderr.contains("NOTIFY_SOCKET"),
        "{}",
        finished.stderr
    );
}

/// The config file shipped beside the unit is one `snowflake serve` accepts (addresses moved to
/// loopback ports for the test, as the unit's --state-dir is).
#[test]
fn the_shipped_config_starts_a_node() {
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/systemd/snowflake.toml");
    let state = temp_dir();
    let node = Serve::bare()
        .arg("--config")
        .arg(&config)
        .args(["--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0"])
        .arg("--state-dir")
        .arg(state.path())
        .start();
    node.poll("/readyz", Duration::from_secs(10), |r| r.status == 200);
    let info = crate::support::info(&node);
    assert_eq!(info["datacenter_id"], 0, "{info}");
    assert_exit(&node.stop_with("TERM"), 0);
}

/// The unit's view of `/proc` (its `ProtectProc=` and `ProcSubset=`) as the options of a proc
/// mount: systemd gives the service a proc instance mounted with them.
fn unit_proc_mount_options() -> Vec<&'static str> {
    let unit = std::fs::read_to_string(unit_path()).unwrap();
    let setting = |key: &str| {
        unit.lines()
            .filter_map(|l| l.trim().strip_prefix(key)?.strip_prefix('='))
            .next_back()
            .map(|v| v.trim().to_owned())
    };
    let mut options = Vec::new();
    match setting("ProtectProc").as_deref() {
        None | Some("default") => {}
        Some("invisible") => options.push("hidepid=invisible"),
        Some("noaccess") => options.push("hidepid=noaccess"),
        Some("ptraceable") => options.push("hidepid=ptraceable"),
        Some(other) => panic!("ProtectProc={other}: not a value this test knows"),
    }
    match setting("ProcSubset").as_deref() {
        None | Some("all") => {}
        Some("pid") => options.push("subset=pid"),
        Some(other) => panic!("ProcSubset={other}: not a value this test knows"),
    }
    options
}

/// `unshare` running the binary in a mount namespace of its own whose `/proc` is mounted as the
/// unit's sandbox mounts it (the binary is `exec`ed: same pid, signals reach it).
fn under_the_units_proc() -> Vec<String> {
    let options = unit_proc_mount_options();
    let mount = if options.is_empty() {
        "mount -t proc proc /proc".to_owned()
    } else {
        format!("mount -t proc -o {} proc /proc", options.join(","))
    };
    ["unshare", "--mount", "--propagation", "private", "sh", "-c"]
        .into_iter()
        .map(str::to_owned)
        .chain([format!("{mount} && exec \"$@\""), "sh".to_owned()])
        .collect()
}

// Found by review: the unit had `ProcSubset=pid`, which hides /proc/sys, so the node could not
// read the boot id. Without it the node wrote no clock.json and checked nothing at a restart:
// `Restart=on-failure` bringing the node back while its clock read 20 years ahead trusted the
// clock, which SPEC §8 forbids (on the same boot, after a crash too).
#[test]
fn under_the_units_view_of_proc_a_restart_years_ahead_is_not_trusted() {
    let clock = crate::support::FakeClock::new();
    let dir = temp_dir();
    let serve = || {
        Serve::new(dir.path())
            .args(["--reserve-ms", "1000"])
            .faketime(&clock)
            .wrapped(under_the_units_proc())
    };
    let node = serve().start();
    node.poll("/readyz", Duration::from_secs(10), |r| r.status == 200);
    let before = node.get("/v1/id").ids()[0];
    let stderr = node.stderr();
    node.kill9();
    assert!(
        !stderr.contains("boot id"),
        "the node cannot read the boot id under the unit's /proc ({:?}):\n{stderr}",
        unit_proc_mount_options()
    );
    clock.set("+20y");
    let restarted = serve().start();
    std::thread::sleep(Duration::from_millis(1500));
    let unready = restarted.get("/readyz");
    let refused = restarted.get("/v1/id");
    clock.set("+0");
    assert_eq!(
        unready.status, 503,
        "restarted 20 years ahead under the unit's /proc, and ready: {unready:?}"
    );
    assert!(unready.body.contains("stepped forward"), "{unready:?}");
    assert_eq!(
        refused.status, 503,
        "an ID dated 20 years ahead: {refused:?}"
    );
    restarted.poll("/readyz", Duration::from_secs(5), |r| r.status == 200);
    let after = restarted.get("/v1/id").ids()[0];
    assert!(after > before, "{after} after {before}");
    assert_exit(&restarted.stop_with("TERM"), 0);
}

//! The fleet beside the clusters, for the fleet-mode tests: a real one-member etcd (Debian's
//! `etcd` and `etcdctl`) on free loopback ports in a temporary directory, and the main
//! workspace's `snowflake` processes (`pg-keeper`, `serve`) run against it. Every process is
//! killed (continued first, if frozen) and reaped when its handle is dropped.

use crate::{free_port, snowflake_cli};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// The longest an etcd member may take to answer its first health check.
const ETCD_START: Duration = Duration::from_secs(20);

fn find(name: &str) -> PathBuf {
    for dir in ["/usr/bin", "/usr/local/bin", "/usr/sbin"] {
        let path = Path::new(dir).join(name);
        if path.exists() {
            return path;
        }
    }
    panic!("{name} is missing: apt-get install etcd-server etcd-client (scripts/pg-ext deps does)");
}

/// Sends `signal` (`STOP`, `CONT`, `TERM`, `KILL`) to `pid`.
pub fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {pid} failed");
}

/// A one-member etcd on loopback.
#[derive(Debug)]
pub struct Etcd {
    child: Child,
    client_port: u16,
    dir: tempfile::TempDir,
}

impl Etcd {
    /// Starts it and waits until it answers.
    pub fn start() -> Etcd {
        let etcd = find("etcd");
        let dir = tempfile::Builder::new()
            .prefix("snowflake-etcd-")
            .tempdir()
            .expect("temp dir");
        let (client_port, peer_port) = (free_port(), free_port());
        let client = format!("http://127.0.0.1:{client_port}");
        let peer = format!("http://127.0.0.1:{peer_port}");
        let log = fs::File::create(dir.path().join("etcd.log")).unwrap();
        let child = Command::new(etcd)
            .args(["--name", "m0", "--data-dir"])
            .arg(dir.path().join("data"))
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("m0={peer}")])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start etcd");
        let etcd = Etcd {
            child,
            client_port,
            dir,
        };
        let start = Instant::now();
        while !etcd.etcdctl(&["endpoint", "health"]).status.success() {
            assert!(
                start.elapsed() < ETCD_START,
                "etcd did not come up:\n{}",
                fs::read_to_string(etcd.dir.path().join("etcd.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        etcd
    }

    /// `http://127.0.0.1:PORT`, for `--etcd-endpoints`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    fn etcdctl(&self, args: &[&str]) -> Output {
        Command::new(find("etcdctl"))
            .arg(format!("--endpoints=127.0.0.1:{}", self.client_port))
            .args(["--dial-timeout=2s", "--command-timeout=3s"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run etcdctl")
    }

    /// The value of `key`, if any.
    pub fn get(&self, key: &str) -> Option<String> {
        let out = self.etcdctl(&["get", "--print-value-only", key]);
        assert!(
            out.status.success(),
            "etcdctl get {key}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let value = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        (!value.is_empty()).then_some(value)
    }

    /// Writes `key` = `value` under a new lease of `ttl_secs` (`etcdctl lease grant`, then
    /// `etcdctl put --lease`), as another process's claim: the key is gone when the lease
    /// expires or this etcd stops. Its lease (hex).
    /// Each call is tried again for up to 20 s (a loaded machine can hold etcd's disk writes
    /// past etcdctl's timeout).
    pub fn put_leased(&self, key: &str, value: &str, ttl_secs: u64) -> String {
        let ttl = ttl_secs.to_string();
        let text = self.etcdctl_retried(&["lease", "grant", &ttl]);
        // "lease 694d7a1b granted with TTL(60s)"
        let lease = text
            .split_whitespace()
            .nth(1)
            .unwrap_or_else(|| panic!("etcdctl lease grant printed {text:?}"))
            .to_owned();
        self.etcdctl_retried(&["put", &format!("--lease={lease}"), key, value]);
        lease
    }

    /// `etcdctl ARGS…` until it succeeds (at most 20 s); its output.
    fn etcdctl_retried(&self, args: &[&str]) -> String {
        let start = Instant::now();
        loop {
            let out = self.etcdctl(args);
            if out.status.success() {
                return String::from_utf8_lossy(&out.stdout).into_owned();
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "etcdctl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The pair's high-water mark in the fleet (`PREFIX/marks/D/W`, default prefix), 0 when
    /// none.
    pub fn mark_ms(&self, datacenter_id: u64, worker_id: u64) -> u64 {
        self.get(&format!("/snowflake/marks/{datacenter_id}/{worker_id}"))
            .map_or(0, |json| json_u64(&json, "high_water_ms"))
    }

    /// The seconds etcd says lease `lease` (hex) has left, as `etcdctl lease timetolive`
    /// prints them; `None` once it expired.
    pub fn remaining_secs(&self, lease: &str) -> Option<u64> {
        let out = self.etcdctl(&["lease", "timetolive", lease]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if text.contains("already expired") {
            return None;
        }
        let at = text
            .find("remaining(")
            .unwrap_or_else(|| panic!("etcdctl lease timetolive {lease}: {text}"))
            + "remaining(".len();
        Some(
            text[at..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
                .parse()
                .unwrap(),
        )
    }

    /// Waits until etcd has just renewed lease `lease` (its remaining TTL went up between two
    /// readings) and returns when the reading before the renewal started: the renewal was
    /// processed after it, so the lease cannot expire before that instant plus its TTL.
    pub fn just_renewed(&self, lease: &str) -> Instant {
        let start = Instant::now();
        let mut before = (Instant::now(), self.remaining_secs(lease));
        loop {
            let asked = Instant::now();
            let now = self.remaining_secs(lease);
            if now.is_some() && before.1.is_some() && now > before.1 {
                return before.0;
            }
            before = (asked, now);
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "lease {lease} was not renewed within 30 s"
            );
        }
    }

    /// Freezes etcd (SIGSTOP): its ports stay open, it answers nothing.
    pub fn freeze(&self) {
        signal(self.child.id(), "STOP");
    }

    /// Lets a frozen etcd run again.
    pub fn thaw(&self) {
        signal(self.child.id(), "CONT");
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = signal_quietly(self.child.id(), "CONT");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn signal_quietly(pid: u32, signal: &str) -> std::io::Result<ExitStatus> {
    Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .stderr(Stdio::null())
        .status()
}

/// The number after `"field":` in a JSON text (the marks and claims are flat objects).
pub fn json_u64(json: &str, field: &str) -> u64 {
    let needle = format!("\"{field}\":");
    let at = json
        .find(&needle)
        .unwrap_or_else(|| panic!("no {field} in {json}"))
        + needle.len();
    json[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap_or_else(|_| panic!("{field} is not a number in {json}"))
}

/// A `snowflake` process of the main workspace (`pg-keeper`, `serve`), its stderr in a file.
#[derive(Debug)]
pub struct Snowflake {
    child: Option<Child>,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Snowflake {
    /// Starts `snowflake ARGS…`.
    pub fn start(args: &[&str]) -> Snowflake {
        Snowflake::start_with(args, &[])
    }

    /// Starts `snowflake ARGS…` with `env` added to its environment.
    pub fn start_with(args: &[&str], env: &[(&str, &Path)]) -> Snowflake {
        let dir = tempfile::Builder::new()
            .prefix("snowflake-proc-")
            .tempdir()
            .expect("temp dir");
        let log = dir.path().join("stderr.log");
        let child = Command::new(snowflake_cli())
            .args(args)
            .env("SNOWFLAKE_LOG", "info")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(&log).unwrap())
            .spawn()
            .expect("start snowflake");
        Snowflake {
            child: Some(child),
            log,
            _dir: dir,
        }
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until its log has `needle` (at most `limit`), failing with the log otherwise.
    pub fn wait_for_log(&mut self, needle: &str, limit: Duration) {
        let start = Instant::now();
        while !self.log().contains(needle) {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().unwrap()) {
                panic!(
                    "exited ({status}) before logging {needle:?}:\n{}",
                    self.log()
                );
            }
            assert!(
                start.elapsed() < limit,
                "no {needle:?} within {limit:?}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sends `signal` and waits for the exit (at most `limit`).
    pub fn stop(&mut self, signal_name: &str, limit: Duration) -> ExitStatus {
        signal(self.pid(), signal_name);
        self.wait_exit(limit)
    }

    /// Waits for the exit (at most `limit`).
    pub fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        let start = Instant::now();
        let child = self.child.as_mut().expect("running");
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                self.child = None;
                return status;
            }
            assert!(
                start.elapsed() < limit,
                "still running after {limit:?}:\n{}",
                fs::read_to_string(&self.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Snowflake {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = signal_quietly(child.id(), "CONT");
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `count` IDs from running `snowflake serve` nodes over gRPC (`snowflake next --endpoints`).
pub fn ids_from(grpc: &str, count: u64) -> Vec<i64> {
    let out = Command::new(snowflake_cli())
        .args(["next", "--endpoints", grpc, "--count", &count.to_string()])
        .args(["--timeout-secs", "20"])
        .stdin(Stdio::null())
        .output()
        .expect("run snowflake next");
    assert!(
        out.status.success(),
        "snowflake next --endpoints {grpc}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.parse().unwrap())
        .collect()
}

//! A real etcd cluster for tests: `etcd` processes (Debian's `etcd-server`, 3.4) on random
//! loopback ports, their data and logs in a temporary directory, driven and inspected through
//! the real `etcdctl` (Debian's `etcd-client`). Blocking, std only; every member is killed with
//! SIGKILL and the directory removed when the [`EtcdCluster`] is dropped.
//!
//! Both binaries are required: a missing one fails the test with a message pointing at
//! `scripts/test`, which installs them. Nothing is ever skipped.

use crate::ports::free_ports;
use crate::process::{continue_process, drain, send_signal};
use std::fmt::Write as _;
use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long every member (or a restarted one) may take to answer `etcdctl endpoint health`.
pub const ETCD_START_TIMEOUT: Duration = Duration::from_secs(15);
/// How many times [`EtcdCluster::start`] tries again with fresh ports when a member could not
/// bind its port (another process took it between our probe and etcd's bind).
const START_ATTEMPTS: usize = 4;
/// `--dial-timeout` of [`EtcdCluster::etcdctl`].
const DIAL_TIMEOUT: &str = "--dial-timeout=2s";
/// `--command-timeout` of [`EtcdCluster::etcdctl`]: how long one request may wait.
const COMMAND_TIMEOUT: &str = "--command-timeout=3s";
/// A safety net: any `etcdctl` run that has not exited after this long is killed, and the test
/// fails (the timeouts above should always end it much earlier).
const ETCDCTL_HARD_TIMEOUT: Duration = Duration::from_secs(20);
/// How many lines of each member's log a start-up failure shows.
const LOG_TAIL_LINES: usize = 40;

/// A running etcd cluster of real `etcd` processes on loopback. Dropping it SIGKILLs every
/// member (continuing stopped ones first), reaps them and removes their data and logs.
#[derive(Debug)]
pub struct EtcdCluster {
    members: Vec<Member>,
    etcd: PathBuf,
    etcdctl: PathBuf,
    token: String,
    // Last field, so it is removed after `Drop::drop` has killed the members.
    dir: tempfile::TempDir,
}

/// One member: its fixed identity (name, ports, data dir), and its process while it runs.
#[derive(Debug)]
struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    data_dir: PathBuf,
    log_path: PathBuf,
    /// `None` once killed (and reaped) by [`EtcdCluster::kill`].
    child: Option<Child>,
}

impl Member {
    fn client_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    fn peer_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.peer_port)
    }
}

/// Why one start attempt failed.
enum StartFailure {
    /// A member exited because its port was taken: try again with other ports.
    PortTaken(String),
    /// Anything else: give up.
    Fatal(String),
}

impl EtcdCluster {
    /// Starts a cluster of `members` members (1 or 3, typically) named `m0`, `m1`, … on free
    /// loopback ports, with a unique `--initial-cluster-token`, and waits (at most
    /// [`ETCD_START_TIMEOUT`]) until every member answers `etcdctl endpoint health` on its own.
    /// A member that loses a port race is retried with fresh ports a few times. Panics with
    /// the members' log tails if the cluster does not come up, and with a pointer to
    /// `scripts/test` if `etcd` or `etcdctl` is not installed.
    pub fn start(members: usize) -> EtcdCluster {
        assert!(members >= 1, "an etcd cluster needs at least one member");
        let etcd = find_binary("etcd");
        let etcdctl = find_binary("etcdctl");
        let mut last = String::new();
        for attempt in 1..=START_ATTEMPTS {
            match EtcdCluster::try_start(members, &etcd, &etcdctl) {
                Ok(cluster) => return cluster,
                Err(StartFailure::PortTaken(report)) => {
                    eprintln!(
                        "etcd_cluster: attempt {attempt}/{START_ATTEMPTS}: a port was taken, \
                         retrying with new ports"
                    );
                    last = report;
                }
                Err(StartFailure::Fatal(report)) => panic!("{report}"),
            }
        }
        panic!("etcd could not bind its ports in {START_ATTEMPTS} attempts; last one:\n{last}")
    }

    /// One attempt at [`EtcdCluster::start`]; on failure the partial cluster is dropped (so
    /// killed and removed) and the report says why.
    fn try_start(members: usize, etcd: &Path, etcdctl: &Path) -> Result<EtcdCluster, StartFailure> {
        let dir = tempfile::Builder::new()
            .prefix("etcd-cluster-")
            .tempdir()
            .expect("create a temp dir for etcd");
        let ports = free_ports(2 * members);
        let members = (0..members)
            .map(|i| {
                let name = format!("m{i}");
                Member {
                    data_dir: dir.path().join(&name),
                    log_path: dir.path().join(format!("{name}.log")),
                    name,
                    client_port: ports[2 * i],
                    peer_port: ports[2 * i + 1],
                    child: None,
                }
            })
            .collect();
        let mut cluster = EtcdCluster {
            members,
            etcd: etcd.to_path_buf(),
            etcdctl: etcdctl.to_path_buf(),
            token: unique_token(),
            dir,
        };
        for i in 0..cluster.members.len() {
            cluster.spawn(i);
        }
        let all: Vec<usize> = (0..cluster.members.len()).collect();
        cluster.wait_healthy(&all)?;
        Ok(cluster)
    }

    /// The client URLs of ALL members (killed ones included), comma-separated: the value for
    /// `--etcd-endpoints`.
    pub fn endpoints(&self) -> String {
        self.members
            .iter()
            .map(Member::client_url)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Member `i`'s client URL, `http://127.0.0.1:PORT`.
    pub fn endpoint(&self, i: usize) -> String {
        self.member(i).client_url()
    }

    /// The number of members (killed ones included).
    pub fn member_count(&self) -> usize {
        self.members.len()
    }

    /// The temporary directory holding the members' data dirs and logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The index of the current leader, as the live members see it (`etcdctl endpoint
    /// status`); `None` if no live member answers or none knows a leader (e.g. during an
    /// election).
    pub fn leader(&self) -> Option<usize> {
        let output = self.etcdctl(&["endpoint", "status", "-w", "json"]);
        // With some endpoint down etcdctl exits 1 but still prints the others' status.
        let text = String::from_utf8_lossy(&output.stdout);
        let statuses: serde_json::Value = serde_json::from_str(text.trim()).ok()?;
        let statuses = statuses.as_array()?;
        let leader_id = statuses
            .iter()
            .filter_map(|s| s["Status"]["leader"].as_u64())
            .find(|&id| id != 0)?;
        let endpoint = statuses
            .iter()
            .find(|s| s["Status"]["header"]["member_id"].as_u64() == Some(leader_id))?["Endpoint"]
            .as_str()?;
        self.members.iter().position(|m| m.client_url() == endpoint)
    }

    /// SIGKILLs member `i` and reaps it. Panics if it is already killed.
    pub fn kill(&mut self, i: usize) {
        let member = self.member_mut(i);
        let mut child = member
            .child
            .take()
            .unwrap_or_else(|| panic!("etcd member {i} is already killed"));
        // SIGKILL also ends a stopped (SIGSTOP) process.
        let _ = child.kill();
        child
            .wait()
            .unwrap_or_else(|e| panic!("wait for etcd member {i}: {e}"));
    }

    /// Freezes member `i` with SIGSTOP: its ports stay open but it answers nothing.
    pub fn stop(&self, i: usize) {
        self.signal(i, "STOP");
    }

    /// Resumes member `i` (SIGCONT) after [`EtcdCluster::stop`].
    pub fn cont(&self, i: usize) {
        self.signal(i, "CONT");
    }

    /// Starts killed member `i` again with the same name, ports and data dir, and waits (at
    /// most [`ETCD_START_TIMEOUT`]) until it answers `endpoint health`; panics with its log
    /// tail otherwise. Panics if the member is still running.
    pub fn restart(&mut self, i: usize) {
        assert!(
            self.member(i).child.is_none(),
            "etcd member {i} is still running: kill it before restarting it"
        );
        self.spawn(i);
        if let Err(StartFailure::PortTaken(report) | StartFailure::Fatal(report)) =
            self.wait_healthy(&[i])
        {
            panic!("restarting etcd member {i} failed: {report}");
        }
    }

    /// Runs `etcdctl` with `args` against every live (not killed) member, stopped ones
    /// included, with `--dial-timeout=2s --command-timeout=3s` (later flags in `args` win).
    /// If `args` has its own `--endpoints`, only that one is used. Returns whatever etcdctl did;
    /// panics only if it cannot be run, or if it is still running after 20 s.
    pub fn etcdctl(&self, args: &[&str]) -> Output {
        let own_endpoints = args
            .iter()
            .any(|a| *a == "--endpoints" || a.starts_with("--endpoints="));
        let mut cmd = self.etcdctl_command();
        if !own_endpoints {
            let live: Vec<String> = self
                .members
                .iter()
                .filter(|m| m.child.is_some())
                .map(Member::client_url)
                .collect();
            assert!(!live.is_empty(), "every etcd member is killed");
            cmd.arg(format!("--endpoints={}", live.join(",")));
        }
        cmd.args([DIAL_TIMEOUT, COMMAND_TIMEOUT]).args(args);
        run_bounded(cmd, &format!("etcdctl {}", args.join(" ")))
    }

    /// The value of `key` (`None` if absent, `Some("")` if empty), read from the live members.
    /// Panics with etcdctl's stderr if the read fails.
    pub fn get(&self, key: &str) -> Option<String> {
        let mut kvs = self.get_json(&["get", "-w", "json", "--", key]);
        assert!(kvs.len() <= 1, "etcdctl get {key:?} returned {kvs:?}");
        kvs.pop().map(|(found, value)| {
            assert_eq!(found, key, "etcdctl get {key:?} returned another key");
            value
        })
    }

    /// Every key under `prefix` (`""`: all keys) with its value, sorted by key. Panics with
    /// etcdctl's stderr if the read fails.
    pub fn get_prefix(&self, prefix: &str) -> Vec<(String, String)> {
        let mut kvs = self.get_json(&["get", "--prefix", "-w", "json", "--", prefix]);
        kvs.sort();
        kvs
    }

    /// Member `i`'s log (etcd's stdout and stderr, across restarts), for diagnostics.
    pub fn log(&self, i: usize) -> String {
        let path = &self.member(i).log_path;
        let bytes = fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        String::from_utf8_lossy(&bytes).into_owned()
    }

    fn member(&self, i: usize) -> &Member {
        let count = self.members.len();
        self.members
            .get(i)
            .unwrap_or_else(|| panic!("no etcd member {i}: the cluster has {count}"))
    }

    fn member_mut(&mut self, i: usize) -> &mut Member {
        let count = self.members.len();
        self.members
            .get_mut(i)
            .unwrap_or_else(|| panic!("no etcd member {i}: the cluster has {count}"))
    }

    /// `etcdctl` with no `ETCDCTL_*` variable inherited from the test's environment.
    fn etcdctl_command(&self) -> Command {
        let mut cmd = Command::new(&self.etcdctl);
        remove_env_with_prefix(&mut cmd, "ETCDCTL");
        cmd
    }

    /// Runs an `etcdctl get … -w json` and decodes its key/value pairs.
    fn get_json(&self, args: &[&str]) -> Vec<(String, String)> {
        let output = self.etcdctl(args);
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "etcdctl {} failed ({}): {}{}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr),
            stdout
        );
        let json: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
            panic!("etcdctl {} printed no JSON ({e}): {stdout}", args.join(" "))
        });
        let Some(kvs) = json.get("kvs") else {
            return Vec::new();
        };
        let kvs = kvs
            .as_array()
            .unwrap_or_else(|| panic!("kvs is not an array: {json}"));
        kvs.iter()
            .map(|kv| {
                let field = |name: &str| match kv.get(name) {
                    // etcd omits an empty value (and would omit an empty key).
                    None => String::new(),
                    Some(v) => {
                        let text = v
                            .as_str()
                            .unwrap_or_else(|| panic!("{name} is not a string: {kv}"));
                        String::from_utf8(base64_decode(text))
                            .unwrap_or_else(|e| panic!("{name} of {kv} is not UTF-8: {e}"))
                    }
                };
                (field("key"), field("value"))
            })
            .collect()
    }

    /// Starts member `i`'s process, appending its output to its log.
    fn spawn(&mut self, i: usize) {
        let initial_cluster = self
            .members
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer_url()))
            .collect::<Vec<_>>()
            .join(",");
        let member = &self.members[i];
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&member.log_path)
            .unwrap_or_else(|e| panic!("open {}: {e}", member.log_path.display()));
        let log_err = log.try_clone().expect("clone the log file handle");
        let mut cmd = Command::new(&self.etcd);
        remove_env_with_prefix(&mut cmd, "ETCD");
        let client_url = member.client_url();
        let peer_url = member.peer_url();
        cmd.arg("--name")
            .arg(&member.name)
            .arg("--data-dir")
            .arg(&member.data_dir)
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &initial_cluster])
            // Ignored when the data dir already holds a member (a restart).
            .args(["--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", &self.token])
            .args(["--logger", "zap", "--log-outputs", "stderr"])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err);
        let child = cmd.spawn().unwrap_or_else(|e| {
            panic!(
                "spawn {} for member {}: {e}",
                self.etcd.display(),
                member.name
            )
        });
        self.members[i].child = Some(child);
    }

    /// Waits until each of `indices` answers `endpoint health` on its own endpoint.
    fn wait_healthy(&mut self, indices: &[usize]) -> Result<(), StartFailure> {
        let deadline = Instant::now() + ETCD_START_TIMEOUT;
        let mut pending: Vec<usize> = indices.to_vec();
        let mut last_error = String::new();
        loop {
            for &i in &pending {
                let child = self.members[i].child.as_mut().expect("a spawned member");
                if let Some(status) = child.try_wait().expect("try_wait on etcd") {
                    let log = self.log(i);
                    let report = format!(
                        "etcd member {i} exited ({status}) before it was healthy\n{}",
                        self.log_tails()
                    );
                    self.members[i].child = None;
                    return Err(if log.contains("address already in use") {
                        StartFailure::PortTaken(report)
                    } else {
                        StartFailure::Fatal(report)
                    });
                }
            }
            let mut still = Vec::new();
            for &i in &pending {
                let mut cmd = self.etcdctl_command();
                cmd.arg(format!("--endpoints={}", self.endpoint(i)))
                    .args(["--dial-timeout=1s", "--command-timeout=2s"])
                    .args(["endpoint", "health"]);
                let output = run_bounded(cmd, "etcdctl endpoint health");
                if !output.status.success() {
                    last_error = String::from_utf8_lossy(&output.stderr).into_owned();
                    still.push(i);
                }
            }
            pending = still;
            if pending.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(StartFailure::Fatal(format!(
                    "etcd members {pending:?} not healthy within {ETCD_START_TIMEOUT:?}; last \
                     etcdctl error: {last_error}\n{}",
                    self.log_tails()
                )));
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// The last lines of every member's log, labelled.
    fn log_tails(&self) -> String {
        let mut out = String::new();
        for (i, member) in self.members.iter().enumerate() {
            let log = fs::read(&member.log_path)
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_else(|e| format!("(cannot read: {e})"));
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(LOG_TAIL_LINES)..];
            let _ = writeln!(
                out,
                "--- etcd member {i} ({}), last {} lines of {} ---\n{}",
                member.name,
                tail.len(),
                member.log_path.display(),
                tail.join("\n")
            );
        }
        out
    }

    /// `kill -NAME pid` for a live member.
    fn signal(&self, i: usize, name: &str) {
        let child = self
            .member(i)
            .child
            .as_ref()
            .unwrap_or_else(|| panic!("etcd member {i} is killed: cannot send SIG{name}"));
        send_signal(child.id(), name);
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        // SIGKILL, never SIGTERM: a 3-member leader would spend ~7 s handing over leadership.
        for member in &mut self.members {
            if let Some(child) = member.child.as_mut() {
                continue_process(child);
                let _ = child.kill();
            }
        }
        for member in &mut self.members {
            if let Some(mut child) = member.child.take() {
                let _ = child.wait();
            }
        }
    }
}

/// The path of `name` on `PATH`; panics saying how to install it.
pub fn find_binary(name: &str) -> PathBuf {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
        .unwrap_or_else(|| {
            panic!(
                "`{name}` is not on PATH: the etcd tests need real etcd 3.4 binaries. Run the \
                 tests with scripts/test, which installs Debian's etcd-server (etcd) and \
                 etcd-client (etcdctl) packages, or `apt-get install etcd-server etcd-client`"
            )
        })
}

/// A token no other cluster (in this or any other test process) uses.
fn unique_token() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "sf-test-{}-{}-{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Removes every inherited variable whose name starts with `prefix` followed by `_`.
fn remove_env_with_prefix(cmd: &mut Command, prefix: &str) {
    for (key, _) in std::env::vars_os() {
        if key
            .to_str()
            .and_then(|k| k.strip_prefix(prefix))
            .is_some_and(|rest| rest.starts_with('_'))
        {
            cmd.env_remove(&key);
        }
    }
}

/// Runs a command that should end by itself, capturing its output; kills it and panics if it
/// runs longer than [`ETCDCTL_HARD_TIMEOUT`].
fn run_bounded(mut cmd: Command, what: &str) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {what}: {e}"));
    let stdout = drain(child.stdout.take().expect("piped stdout"));
    let stderr = drain(child.stderr.take().expect("piped stderr"));
    let deadline = Instant::now() + ETCDCTL_HARD_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not exit within {ETCDCTL_HARD_TIMEOUT:?}");
        }
        thread::sleep(Duration::from_millis(5));
    };
    Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    }
}

/// Decodes standard base64 (with or without `=` padding), as Go's encoding/json writes
/// `[]byte`; panics on any other character.
fn base64_decode(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.bytes().take_while(|&c| c != b'=') {
        let sextet = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not base64: {text:?}"),
        };
        acc = (acc << 6) | u32::from(sextet);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::base64_decode;

    #[test]
    fn etcd_cluster_base64_decoder() {
        assert_eq!(base64_decode(""), b"");
        assert_eq!(base64_decode("MQ=="), b"1");
        assert_eq!(base64_decode("L2EveA=="), b"/a/x");
        assert_eq!(base64_decode("aGk/Pz4+"), b"hi??>>");
        assert_eq!(base64_decode("YWJj"), b"abc");
        assert_eq!(base64_decode("YWI="), b"ab");
    }
}

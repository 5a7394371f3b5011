//! Real PostgreSQL clusters for the extension's tests: `initdb` (once, then copied), `pg_ctl`,
//! `psql`, `pg_basebackup` and `pgbench` from Debian's PostgreSQL 15, on 127.0.0.1 with a free
//! port, in temporary directories that are removed afterwards. As root (CI), every server
//! command runs as the `postgres` user (`initdb` refuses root); a server's clock can be moved
//! with libfaketime, preloaded into the server only.
//!
//! The extension must be installed into that PostgreSQL (`cargo pgrx install`); the harness
//! checks and names the command when it is not.

pub mod fleet;

use std::fs;
use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// PostgreSQL's binaries (`SNOWFLAKE_PG_BINDIR`, default Debian's PostgreSQL 15).
pub fn bin_dir() -> PathBuf {
    std::env::var_os("SNOWFLAKE_PG_BINDIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/lib/postgresql/15/bin"))
}

fn bin(name: &str) -> PathBuf {
    bin_dir().join(name)
}

/// Whether this process is root (then servers run as `postgres`).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc_geteuid() == 0 }
}

unsafe extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}

/// The `postgres` user's uid and gid.
fn postgres_ids() -> (u32, u32) {
    let passwd = fs::read_to_string("/etc/passwd").expect("read /etc/passwd");
    for line in passwd.lines() {
        let f: Vec<&str> = line.split(':').collect();
        if f.len() > 3 && f[0] == "postgres" {
            return (f[2].parse().unwrap(), f[3].parse().unwrap());
        }
    }
    panic!("no postgres user: install Debian's postgresql package");
}

/// Makes `path` the postgres user's, when running as root.
fn give(path: &Path) {
    if is_root() {
        let (uid, gid) = postgres_ids();
        std::os::unix::fs::chown(path, Some(uid), Some(gid)).expect("chown to postgres");
    }
}

/// A command run as the server's user, with `env` set for it only.
fn server_command(program: &Path, env: &[(String, String)]) -> Command {
    let mut cmd = if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--", "env"]);
        c
    } else {
        Command::new("env")
    };
    for (k, v) in env {
        cmd.arg(format!("{k}={v}"));
    }
    cmd.arg(program);
    cmd
}

fn run(mut cmd: Command) -> Output {
    cmd.stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

fn check(cmd: Command) -> String {
    let desc = format!("{cmd:?}");
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{desc} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A port nobody listens on now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind 127.0.0.1:0")
}

/// Checks that the extension is installed into this PostgreSQL.
pub fn require_extension() {
    let share = check({
        let mut c = Command::new(bin("pg_config"));
        c.arg("--sharedir");
        c
    });
    let control = Path::new(share.trim()).join("extension/snowflake.control");
    assert!(
        control.exists(),
        "{} is missing: install the extension first (cd extensions/postgres && cargo pgrx install --release --pg-config {})",
        control.display(),
        bin("pg_config").display()
    );
}

/// A data directory made by initdb once (kept in the extension's `target/`, reused by later
/// runs) and copied for each cluster.
fn template() -> &'static Path {
    static TEMPLATE: OnceLock<PathBuf> = OnceLock::new();
    TEMPLATE.get_or_init(|| {
        require_extension();
        let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target");
        let root = target.join("pg-template");
        let data = root.join("data");
        if data.join("PG_VERSION").exists() {
            return data;
        }
        // Made aside and renamed into place, so an interrupted initdb is never reused.
        let making = target.join(format!("pg-template.{}", std::process::id()));
        let _ = fs::remove_dir_all(&making);
        fs::create_dir_all(&making).unwrap();
        give(&making);
        let mut cmd = server_command(&bin("initdb"), &[]);
        cmd.arg("-D").arg(making.join("data")).args([
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        ]);
        check(cmd);
        let _ = fs::remove_dir_all(&root);
        fs::rename(&making, &root).unwrap();
        data
    })
}

/// The clock a server runs with.
#[derive(Debug, Clone)]
pub enum ServerClock {
    /// The real clock.
    Real,
    /// libfaketime with an offset read from a file the test can rewrite (e.g. `-5`, `+3600`).
    Fake(PathBuf),
}

/// One PostgreSQL cluster.
#[derive(Debug)]
pub struct Cluster {
    dir: tempfile::TempDir,
    /// Its data directory.
    pub data: PathBuf,
    /// Its port on 127.0.0.1.
    pub port: u16,
    running: bool,
    clock: ServerClock,
}

impl Cluster {
    /// A new cluster (not started) whose `postgresql.conf` gets `conf` appended.
    pub fn new(conf: &[&str]) -> Cluster {
        let template = template();
        let dir = tempfile::Builder::new()
            .prefix("snowflake-pg-")
            .tempdir()
            .expect("temp dir");
        give(dir.path());
        let data = dir.path().join("data");
        let mut cp = Command::new("cp");
        cp.arg("-a").arg(template).arg(&data);
        check(cp);
        let mut cluster = Cluster {
            dir,
            data,
            port: free_port(),
            running: false,
            clock: ServerClock::Real,
        };
        cluster.configure(conf);
        cluster
    }

    /// A streaming replica of `primary` (which must be running with a replication-capable
    /// configuration), made with `pg_basebackup -R`; not started.
    pub fn replica_of(primary: &Cluster, conf: &[&str]) -> Cluster {
        let dir = tempfile::Builder::new()
            .prefix("snowflake-pg-replica-")
            .tempdir()
            .expect("temp dir");
        give(dir.path());
        let data = dir.path().join("data");
        let mut cmd = server_command(&bin("pg_basebackup"), &[]);
        cmd.args([
            "-h",
            "127.0.0.1",
            "-U",
            "postgres",
            "-X",
            "stream",
            "-R",
            "-c",
            "fast",
        ])
        .arg("-p")
        .arg(primary.port.to_string())
        .arg("-D")
        .arg(&data);
        check(cmd);
        let mut cluster = Cluster {
            dir,
            data,
            port: free_port(),
            running: false,
            clock: ServerClock::Real,
        };
        cluster.configure(conf);
        cluster
    }

    /// Appends lines to `postgresql.conf` (later lines win).
    pub fn configure(&mut self, conf: &[&str]) {
        let mut f = fs::OpenOptions::new()
            .append(true)
            .open(self.data.join("postgresql.conf"))
            .unwrap();
        for line in conf {
            writeln!(f, "{line}").unwrap();
        }
    }

    /// A directory for the test's own files (readable by the server).
    pub fn scratch(&self) -> &Path {
        self.dir.path()
    }

    /// Runs the server under libfaketime from the next start, with offset `offset` (seconds,
    /// e.g. `-5`); returns the offset file, which the test may rewrite while it runs.
    pub fn fake_clock(&mut self, offset: &str) -> PathBuf {
        let file = self.dir.path().join("faketime-offset");
        set_offset(&file, offset);
        self.clock = ServerClock::Fake(file.clone());
        file
    }

    /// Back to the real clock from the next start.
    pub fn real_clock(&mut self) {
        self.clock = ServerClock::Real;
    }

    fn env(&self) -> Vec<(String, String)> {
        match &self.clock {
            ServerClock::Real => vec![],
            ServerClock::Fake(file) => {
                let lib = std::env::var("SNOWFLAKE_TEST_LIBFAKETIME").unwrap_or_else(|_| {
                    "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1".to_owned()
                });
                assert!(
                    Path::new(&lib).exists(),
                    "{lib} is missing: apt-get install libfaketime"
                );
                vec![
                    ("LD_PRELOAD".into(), lib),
                    ("FAKETIME_TIMESTAMP_FILE".into(), file.display().to_string()),
                    ("FAKETIME_NO_CACHE".into(), "1".into()),
                    ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
                ]
            }
        }
    }

    /// Starts the server and waits until it accepts connections (a standby too).
    pub fn start(&mut self) {
        for attempt in 0..5 {
            let mut cmd = server_command(&bin("pg_ctl"), &self.env());
            cmd.arg("-D")
                .arg(&self.data)
                .arg("-l")
                .arg(self.dir.path().join("server.log"))
                .args(["-w", "-t", "60", "-o"])
                .arg(format!(
                    "-c listen_addresses=127.0.0.1 -p {} -k {}",
                    self.port,
                    self.dir.path().display()
                ))
                .arg("start");
            let out = run(cmd);
            if out.status.success() {
                self.running = true;
                return;
            }
            let log = self.log();
            if attempt < 4 && log.contains("could not bind") {
                self.port = free_port();
                continue;
            }
            panic!(
                "pg_ctl start failed: {}{}\nserver log:\n{log}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    /// Stops the server: `fast` (clean) or `immediate` (as a crash: no shutdown checkpoint).
    pub fn stop(&mut self, mode: &str) {
        let mut cmd = server_command(&bin("pg_ctl"), &[]);
        cmd.arg("-D")
            .arg(&self.data)
            .args(["-w", "-t", "60", "-m", mode, "stop"]);
        check(cmd);
        self.running = false;
    }

    /// Kills the postmaster and every process it started with SIGKILL, as a machine crash
    /// would end them (no exit callback runs; the files stay as the page cache has them).
    pub fn kill9(&mut self) {
        let pid_file = fs::read_to_string(self.data.join("postmaster.pid")).unwrap();
        let postmaster: i32 = pid_file.lines().next().unwrap().trim().parse().unwrap();
        let mut pids = vec![postmaster];
        for entry in fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let stat = fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            // "pid (comm) state ppid ...": the ppid is the second field after the comm.
            let ppid = stat
                .rsplit(')')
                .next()
                .and_then(|rest| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<i32>().ok());
            if ppid == Some(postmaster) {
                pids.push(pid);
            }
        }
        for pid in &pids {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
        }
        let start = Instant::now();
        while pids
            .iter()
            .any(|p| Path::new(&format!("/proc/{p}")).exists())
        {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "processes {pids:?} survive SIGKILL"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        self.running = false;
    }

    /// Promotes a standby and waits until it is out of recovery.
    pub fn promote(&mut self) {
        let mut cmd = server_command(&bin("pg_ctl"), &[]);
        cmd.arg("-D")
            .arg(&self.data)
            .args(["-w", "-t", "60", "promote"]);
        check(cmd);
    }

    /// The server log so far.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    fn psql(&self, db: &str, sql: &str) -> Output {
        let mut cmd = Command::new(bin("psql"));
        cmd.args([
            "-X",
            "-q",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-v",
            "VERBOSITY=verbose",
        ])
        .args(["-h", "127.0.0.1", "-U", "postgres", "-d", db])
        .arg("-p")
        .arg(self.port.to_string())
        .arg("-c")
        .arg(sql);
        run(cmd)
    }

    /// Runs SQL (one or more statements in one session); `Ok(stdout)` or `Err(stderr)` (with
    /// the SQLSTATE, as `ERROR:  55000: …`).
    pub fn try_sql(&self, sql: &str) -> Result<String, String> {
        self.try_sql_in("postgres", sql)
    }

    /// [`Cluster::try_sql`] in database `db`.
    pub fn try_sql_in(&self, db: &str, sql: &str) -> Result<String, String> {
        let out = self.psql(db, sql);
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// Runs SQL that must succeed; its output, trimmed.
    pub fn sql(&self, sql: &str) -> String {
        self.try_sql(sql).unwrap_or_else(|e| {
            panic!(
                "{sql}\nfailed: {e}\nserver log tail:\n{}",
                tail(&self.log())
            )
        })
    }

    /// Runs SQL that must succeed in database `db`; its output, trimmed.
    pub fn sql_in(&self, db: &str, sql: &str) -> String {
        self.try_sql_in(db, sql)
            .unwrap_or_else(|e| panic!("{sql}\nfailed in {db}: {e}"))
    }

    /// Runs SQL that must fail; its error text.
    pub fn sql_error(&self, sql: &str) -> String {
        match self.try_sql(sql) {
            Ok(out) => panic!("{sql}\nshould have failed, printed: {out}"),
            Err(e) => e,
        }
    }

    /// One number from SQL.
    pub fn int(&self, sql: &str) -> i64 {
        let out = self.sql(sql);
        out.parse()
            .unwrap_or_else(|_| panic!("{sql}: expected a number, found {out:?}"))
    }

    /// Waits until `sql` succeeds (at most `limit`); its output.
    pub fn sql_eventually(&self, sql: &str, limit: Duration) -> String {
        let start = Instant::now();
        loop {
            match self.try_sql(sql) {
                Ok(out) => return out,
                Err(e) if start.elapsed() > limit => {
                    panic!("{sql} still failing after {limit:?}: {e}")
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// Waits until `sql` prints `expected` (at most `limit`).
    pub fn wait_for(&self, sql: &str, expected: &str, limit: Duration) {
        let start = Instant::now();
        loop {
            let out = self.try_sql(sql);
            if out.as_deref() == Ok(expected) {
                return;
            }
            assert!(
                start.elapsed() < limit,
                "{sql} still gives {out:?} after {limit:?}, not {expected:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Runs pgbench against this cluster with `args` (e.g. `-c 8 -T 10 -f FILE`); its output.
    pub fn pgbench(&self, args: &[&str]) -> String {
        let mut cmd = Command::new(bin("pgbench"));
        cmd.args(["-h", "127.0.0.1", "-U", "postgres", "-n"])
            .arg("-p")
            .arg(self.port.to_string())
            .args(args)
            .arg("postgres");
        check(cmd)
    }

    /// Writes `text` to a file in the scratch directory (readable by the server and clients).
    pub fn write_file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        fs::write(&path, text).unwrap();
        path
    }

    /// `COPY … TO STDOUT` of a query, as lines.
    pub fn copy_out(&self, query: &str, to: &Path) {
        let mut cmd = Command::new(bin("psql"));
        cmd.args([
            "-X",
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            "-h",
            "127.0.0.1",
            "-U",
            "postgres",
        ])
        .arg("-p")
        .arg(self.port.to_string())
        .arg("-c")
        .arg(format!("\\copy ({query}) TO '{}'", to.display()));
        check(cmd);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.running {
            let mut cmd = server_command(&bin("pg_ctl"), &[]);
            cmd.arg("-D")
                .arg(&self.data)
                .args(["-w", "-m", "immediate", "stop"]);
            let _ = run(cmd);
        }
    }
}

/// Rewrites a libfaketime offset file atomically.
pub fn set_offset(file: &Path, offset: &str) {
    let tmp = file.with_extension("tmp");
    fs::write(&tmp, format!("{offset}\n")).unwrap();
    fs::rename(&tmp, file).unwrap();
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// The `snowflake` CLI of the main workspace (`SNOWFLAKE_BIN`, default `target/debug/snowflake`
/// at the repository root).
pub fn snowflake_cli() -> PathBuf {
    let path = std::env::var_os("SNOWFLAKE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../target/debug/snowflake")
        });
    assert!(
        path.exists(),
        "{} is missing: build the CLI first (cargo build -p snowflake-cli at the repository root) or set SNOWFLAKE_BIN",
        path.display()
    );
    path
}

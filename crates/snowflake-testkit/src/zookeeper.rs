//! A real ZooKeeper server for tests: one standalone ZooKeeper 3.8 (Debian's `zookeeper`
//! package) run as a plain `java` process on a random loopback port, its config, data and log
//! in a temporary directory, inspected through four-letter-word commands over TCP and through
//! the real command-line client (`org.apache.zookeeper.ZooKeeperMain`, what `zkCli.sh` runs).
//! Blocking, std only; the server is killed with SIGKILL and the directory removed when the
//! [`ZooKeeper`] is dropped.
//!
//! `java` and `/usr/share/java/zookeeper.jar` are required: a missing one fails the test with a
//! message pointing at `scripts/test`, which installs them. Nothing is ever skipped.

use crate::ports::free_port;
use crate::process::{continue_process, drain, send_signal};
use std::fmt::Write as _;
use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// How long the server (or a restarted one) may take to answer `ruok` with `imok` and `srvr`
/// with its version.
pub const ZOOKEEPER_START_TIMEOUT: Duration = Duration::from_secs(20);
/// The server's `tickTime`, in milliseconds. Sessions may time out after as little as
/// `2 * tickTime` (1 s) and at most [`MAX_SESSION_TIMEOUT_MS`].
pub const TICK_TIME_MS: u64 = 500;
/// The server's `maxSessionTimeout`, in milliseconds (the default, `20 * tickTime`, would be
/// only 10 s): a client asking for more gets this.
pub const MAX_SESSION_TIMEOUT_MS: u64 = 60_000;
/// A safety net: a command-line client still running after this long is killed and the test
/// fails. The client gives up on a request after about its `-timeout` ([`CLI_SESSION_TIMEOUT`])
/// when the server does not answer, so this only fires when something else is wrong.
pub const CLI_HARD_TIMEOUT: Duration = Duration::from_secs(30);
/// How long [`ZooKeeper::four_letter`] waits to connect and for the whole answer.
pub const FOUR_LETTER_TIMEOUT: Duration = Duration::from_secs(5);
/// The jar of Debian's `libzookeeper-java` (pulled in by `zookeeper`); its manifest's
/// `Class-Path` brings in the other jars it needs.
const ZOOKEEPER_JAR: &str = "/usr/share/java/zookeeper.jar";
/// SLF4J's simple binding (Debian's `libslf4j-java`, a dependency of `libzookeeper-java`): on the
/// server's class path it makes the server log to stderr, so to its log file. Without it the
/// server logs nothing (SLF4J's NOP logger), which only makes failures harder to read.
const SLF4J_SIMPLE_JAR: &str = "/usr/share/java/slf4j-simple.jar";
/// The command-line client's `-timeout` (the session timeout it asks for), in milliseconds: also
/// how long it tries to connect before failing a request with `ConnectionLoss`.
const CLI_SESSION_TIMEOUT: &str = "10000";
/// How many times [`ZooKeeper::start`] tries again with a fresh port when the server could not
/// bind its port (another process took it between our probe and the server's bind).
const START_ATTEMPTS: usize = 4;
/// How many lines of the server's log a start-up failure shows.
const LOG_TAIL_LINES: usize = 40;
/// What the command-line client's `printwatches` (without argument) prints: [`ZooKeeper`]
/// runs it before each command, so that the output can be split per command.
const CLI_MARKER: &str = "printwatches is on";

/// One running standalone ZooKeeper server on `127.0.0.1`, a real `java` process. Dropping it
/// SIGKILLs the server (continuing it first if it is stopped), reaps it and removes its
/// config, data and log.
#[derive(Debug)]
pub struct ZooKeeper {
    port: u16,
    /// The TLS client port, when started with [`ZooKeeper::start_secure`].
    secure_port: Option<u16>,
    java: PathBuf,
    config_dir: PathBuf,
    log_path: PathBuf,
    /// `None` once killed (and reaped) by [`ZooKeeper::kill`].
    child: Option<Child>,
    // Last field, so it is removed after `Drop::drop` has killed the server.
    dir: tempfile::TempDir,
}

/// What ZooKeeper's Netty server needs on the class path for TLS (Debian's `libnetty-java`,
/// a dependency of the `zookeeper` package).
const NETTY_JARS: [&str; 3] = [
    "/usr/share/java/netty-codec.jar",
    "/usr/share/java/netty-resolver.jar",
    "/usr/share/java/netty-transport-native-unix-common.jar",
];

/// Why one start attempt failed.
enum StartFailure {
    /// The server exited because its port was taken: try again with another port.
    PortTaken(String),
    /// Anything else: give up.
    Fatal(String),
}

/// What one run of the command-line client printed.
struct CliOutput {
    stdout: String,
    stderr: String,
}

impl CliOutput {
    fn both(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

impl ZooKeeper {
    /// Starts a standalone server on a free loopback port (`tickTime=500`, the AdminServer off,
    /// the four-letter words `ruok,srvr,stat,mntr,cons` allowed) and waits (at most
    /// [`ZOOKEEPER_START_TIMEOUT`]) until it answers `ruok` with `imok` and serves requests.
    /// A port race is retried with a fresh port a few times. Panics with the log tail if the
    /// server does not come up, and with a pointer to `scripts/test` if `java` or ZooKeeper's
    /// jar is not installed.
    pub fn start() -> ZooKeeper {
        ZooKeeper::start_with(None)
    }

    /// [`ZooKeeper::start`] with a TLS client port too (COMPONENTS.md §8): Netty, the server's
    /// key and certificate in one PEM file, the CA clients must chain to (client certificates
    /// are required); the plaintext port stays for the test's own tools.
    pub fn start_secure(key_and_cert: &Path, ca: &Path) -> ZooKeeper {
        ZooKeeper::start_with(Some((key_and_cert, ca)))
    }

    fn start_with(tls: Option<(&Path, &Path)>) -> ZooKeeper {
        let java = find_java();
        require_file(ZOOKEEPER_JAR);
        let mut last = String::new();
        for attempt in 1..=START_ATTEMPTS {
            match ZooKeeper::try_start(&java, tls) {
                Ok(server) => return server,
                Err(StartFailure::PortTaken(report)) => {
                    eprintln!(
                        "zookeeper_server: attempt {attempt}/{START_ATTEMPTS}: the port was \
                         taken, retrying with a new port"
                    );
                    last = report;
                }
                Err(StartFailure::Fatal(report)) => panic!("{report}"),
            }
        }
        panic!("ZooKeeper could not bind its port in {START_ATTEMPTS} attempts; last one:\n{last}")
    }

    /// One attempt at [`ZooKeeper::start`]; on failure the server is dropped (so killed and
    /// its directory removed) and the report says why.
    fn try_start(java: &Path, tls: Option<(&Path, &Path)>) -> Result<ZooKeeper, StartFailure> {
        let dir = tempfile::Builder::new()
            .prefix("zookeeper-")
            .tempdir()
            .expect("create a temp dir for ZooKeeper");
        let port = free_port();
        let config_dir = dir.path().join("conf");
        let data_dir = dir.path().join("data");
        for d in [&config_dir, &data_dir] {
            fs::create_dir(d).unwrap_or_else(|e| panic!("create {}: {e}", d.display()));
        }
        let config = format!(
            "tickTime={TICK_TIME_MS}\n\
             initLimit=10\n\
             syncLimit=5\n\
             maxSessionTimeout={MAX_SESSION_TIMEOUT_MS}\n\
             dataDir={}\n\
             clientPort={port}\n\
             clientPortAddress=127.0.0.1\n\
             admin.enableServer=false\n\
             4lw.commands.whitelist=ruok,srvr,stat,mntr,cons\n",
            data_dir.display()
        );
        let secure_port = tls.map(|_| free_port());
        let config = match (tls, secure_port) {
            (Some((key_and_cert, ca)), Some(secure)) => format!(
                "{config}secureClientPort={secure}\n\
                 secureClientPortAddress=127.0.0.1\n\
                 serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n\
                 ssl.keyStore.location={}\n\
                 ssl.keyStore.type=PEM\n\
                 ssl.trustStore.location={}\n\
                 ssl.trustStore.type=PEM\n",
                key_and_cert.display(),
                ca.display()
            ),
            _ => config,
        };
        let config_path = config_dir.join("zoo.cfg");
        fs::write(&config_path, config)
            .unwrap_or_else(|e| panic!("write {}: {e}", config_path.display()));
        let mut server = ZooKeeper {
            port,
            secure_port,
            java: java.to_path_buf(),
            config_dir,
            log_path: dir.path().join("zookeeper.log"),
            child: None,
            dir,
        };
        server.spawn();
        server.wait_ready()?;
        Ok(server)
    }

    /// `127.0.0.1:PORT`: the connect string for a ZooKeeper client.
    pub fn connect_string(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `127.0.0.1:PORT` of the TLS client port ([`ZooKeeper::start_secure`]).
    pub fn secure_connect_string(&self) -> String {
        format!(
            "127.0.0.1:{}",
            self.secure_port
                .expect("started with ZooKeeper::start_secure")
        )
    }

    /// The client port (the same across [`ZooKeeper::restart`]s).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The temporary directory holding `conf/zoo.cfg`, the `data` dir and `zookeeper.log`.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Freezes the server with SIGSTOP: its port stays open (the kernel still accepts
    /// connections) but it answers nothing, and its sessions' clients time out. Returns once
    /// every thread of it is stopped (see [`crate::process::wait_stopped`]).
    pub fn stop(&self) {
        self.signal("STOP");
        if let Some(child) = &self.child {
            assert!(
                crate::process::wait_stopped(child.id(), std::time::Duration::from_secs(5)),
                "the ZooKeeper server did not stop within 5 s of SIGSTOP"
            );
        }
    }

    /// Resumes the server (SIGCONT) after [`ZooKeeper::stop`].
    pub fn cont(&self) {
        self.signal("CONT");
    }

    /// SIGKILLs the server (a stopped one too) and reaps it. Panics if it is already killed.
    pub fn kill(&mut self) {
        let mut child = self
            .child
            .take()
            .expect("the ZooKeeper server is already killed");
        let _ = child.kill();
        child
            .wait()
            .unwrap_or_else(|e| panic!("wait for the ZooKeeper server: {e}"));
    }

    /// Starts the server again on the same port with the same data dir (so persistent znodes
    /// survive; sessions, hence ephemeral znodes, expire as usual), SIGKILLing it first if it
    /// is still running, and waits (at most [`ZOOKEEPER_START_TIMEOUT`]) until it answers
    /// `ruok` and serves requests; panics with its log tail otherwise (e.g. if another process
    /// took the port meanwhile).
    pub fn restart(&mut self) {
        if let Some(child) = &self.child {
            continue_process(child);
            self.kill();
        }
        self.spawn();
        if let Err(StartFailure::PortTaken(report) | StartFailure::Fatal(report)) =
            self.wait_ready()
        {
            panic!("restarting ZooKeeper failed: {report}");
        }
    }

    /// Sends the four-letter-word command `cmd` (e.g. `ruok`, `srvr`, `stat`, `mntr`, `cons`)
    /// and returns the server's whole answer. Panics if there is none within
    /// [`FOUR_LETTER_TIMEOUT`] (use [`ZooKeeper::try_four_letter`] to expect a failure).
    pub fn four_letter(&self, cmd: &str) -> String {
        self.try_four_letter(cmd, FOUR_LETTER_TIMEOUT)
            .unwrap_or_else(|e| panic!("four-letter word {cmd:?} to {}: {e}", self.port))
    }

    /// Sends the four-letter-word command `cmd` and returns the server's whole answer (the
    /// server closes the connection after it), or the error if connecting, sending or reading
    /// it to the end fails or takes longer than `timeout` (each of the three).
    pub fn try_four_letter(&self, cmd: &str, timeout: Duration) -> io::Result<String> {
        four_letter(self.port, cmd, timeout)
    }

    /// The server's log (its stdout and stderr, across restarts), for diagnostics.
    pub fn log(&self) -> String {
        let bytes = fs::read(&self.log_path)
            .unwrap_or_else(|e| panic!("read {}: {e}", self.log_path.display()));
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// Runs ZooKeeper's command-line client (`org.apache.zookeeper.ZooKeeperMain`, what
    /// `zkCli.sh` runs, called directly) against the server with `commands` (e.g. `"create
    /// /a x"`, `"ls /"`) on its stdin, one per line, all in ONE session, followed by `quit`.
    /// Returns its stdout followed by its stderr (zkCli prints data on stdout and both
    /// `Created /a` and errors like `Node does not exist: /a` on stderr). Takes about half a
    /// second. Panics if it cannot be run or is still running after [`CLI_HARD_TIMEOUT`].
    pub fn cli(&self, commands: &[&str]) -> String {
        let commands: Vec<String> = commands.iter().map(|c| (*c).to_owned()).collect();
        self.run_cli(&commands).both()
    }

    /// The data of znode `path` (`Some("")` if empty), or `None` if it does not exist. Panics
    /// with the client's output on any other failure.
    pub fn get(&self, path: &str) -> Option<String> {
        let (lines, output) = self.cli_one(&format!("get {}", check_path(path)));
        if lines.is_empty() {
            assert_absent(&output, path, "get");
            None
        } else {
            Some(lines.join("\n"))
        }
    }

    /// The names (not paths) of the children of `path`, sorted; empty if it has none, and
    /// also empty if `path` does not exist. Panics with the client's output on any failure.
    pub fn children(&self, path: &str) -> Vec<String> {
        let (lines, output) = self.cli_one(&format!("ls {}", check_path(path)));
        match lines.as_slice() {
            [] => {
                assert_absent(&output, path, "ls");
                Vec::new()
            }
            [line] => {
                let inner = line
                    .strip_prefix('[')
                    .and_then(|l| l.strip_suffix(']'))
                    .unwrap_or_else(|| {
                        panic!("zkCli `ls {path}` printed no [..] list:\n{}", output.both())
                    });
                let mut names: Vec<String> = inner
                    .split(", ")
                    .filter(|n| !n.is_empty())
                    .map(str::to_owned)
                    .collect();
                names.sort();
                names
            }
            _ => panic!(
                "zkCli `ls {path}` printed more than a list:\n{}",
                output.both()
            ),
        }
    }

    /// The `ephemeralOwner` of znode `path` as `stat` prints it: `"0x0"` for a persistent
    /// znode, the owning session id (e.g. `"0x10000931f040000"`) for an ephemeral one; `None`
    /// if it does not exist. Panics with the client's output on any other failure.
    pub fn ephemeral_owner(&self, path: &str) -> Option<String> {
        let (lines, output) = self.cli_one(&format!("stat {}", check_path(path)));
        if lines.is_empty() {
            assert_absent(&output, path, "stat");
            return None;
        }
        let owner = lines
            .iter()
            .find_map(|l| l.strip_prefix("ephemeralOwner = "))
            .unwrap_or_else(|| {
                panic!(
                    "zkCli `stat {path}` printed no ephemeralOwner:\n{}",
                    output.both()
                )
            });
        Some(owner.trim().to_owned())
    }

    /// Creates znode `path` (its parent must exist; zkCli creates no parents) holding `data`
    /// (any single line: spaces, quotes, a leading `-` are fine, but not both `'` and `"`).
    /// An `ephemeral` znode belongs to the client's session, which ends right after the
    /// command, so it is deleted at once: ephemeral nodes are only useful inside one
    /// [`ZooKeeper::cli`] session; this is mostly for persistent ones. Panics with the
    /// client's output if the znode was not created (e.g. it already exists).
    pub fn create(&self, path: &str, data: &str, ephemeral: bool) {
        let flag = if ephemeral { "-e " } else { "" };
        // `--` ends the options, so data starting with `-` is not taken for one.
        let command = format!("create {flag}{} -- {}", check_path(path), quote(data));
        let (_, output) = self.cli_one(&command);
        assert!(
            output
                .stderr
                .lines()
                .any(|l| l == format!("Created {path}")),
            "zkCli `{command}` did not create {path}:\n{}",
            output.both()
        );
    }

    /// Runs one command in the client and returns what it printed on stdout (watch events
    /// left out), as lines, with the whole output.
    fn cli_one(&self, command: &str) -> (Vec<String>, CliOutput) {
        let (mut sections, output) = self.cli_sections(&[command.to_owned()]);
        (sections.pop().expect("one section per command"), output)
    }

    /// Runs `commands` in one client session, each after a `printwatches` whose output
    /// ([`CLI_MARKER`]) separates them, and returns the stdout lines of each command (watch
    /// events left out). Panics if the markers are not all there.
    fn cli_sections(&self, commands: &[String]) -> (Vec<Vec<String>>, CliOutput) {
        let mut with_markers = Vec::with_capacity(2 * commands.len());
        for command in commands {
            with_markers.push("printwatches".to_owned());
            with_markers.push(command.clone());
        }
        let output = self.run_cli(&with_markers);
        let lines = without_watch_events(&output.stdout);
        let mut sections: Vec<Vec<String>> = Vec::new();
        for line in lines {
            if line == CLI_MARKER {
                sections.push(Vec::new());
            } else if let Some(section) = sections.last_mut() {
                section.push(line.to_owned());
            }
        }
        assert_eq!(
            sections.len(),
            commands.len(),
            "zkCli did not run every command of {commands:?}:\n{}",
            output.both()
        );
        (sections, output)
    }

    /// Runs the command-line client with `commands` then `quit` on its stdin.
    fn run_cli(&self, commands: &[String]) -> CliOutput {
        for command in commands {
            assert!(
                !command.contains(['\n', '\r']),
                "a zkCli command must be one line: {command:?}"
            );
        }
        let mut input = commands.join("\n");
        input.push_str("\nquit\n");
        let mut cmd = self.java_command();
        cmd.args(["-Xmx64m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"])
            .args(["-cp", ZOOKEEPER_JAR, "org.apache.zookeeper.ZooKeeperMain"])
            .args(["-server", &self.connect_string()])
            .args(["-timeout", CLI_SESSION_TIMEOUT])
            .current_dir(self.dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let what = format!("zkCli {commands:?}");
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {} for {what}: {e}", self.java.display()));
        let stdout = drain(child.stdout.take().expect("piped stdout"));
        let stderr = drain(child.stderr.take().expect("piped stderr"));
        let mut stdin = child.stdin.take().expect("piped stdin");
        let feeder = thread::spawn(move || {
            // Fails only if the client died, which the output will show.
            let _ = stdin.write_all(input.as_bytes());
        });
        let deadline = Instant::now() + CLI_HARD_TIMEOUT;
        let status = loop {
            if let Some(status) = child.try_wait().expect("try_wait on zkCli") {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                let _ = feeder.join();
                let stdout = stdout.join().unwrap_or_default();
                let stderr = stderr.join().unwrap_or_default();
                panic!(
                    "{what} did not exit within {CLI_HARD_TIMEOUT:?} (is the server stopped or \
                     killed?):\n{}{}",
                    String::from_utf8_lossy(&stdout),
                    String::from_utf8_lossy(&stderr)
                );
            }
            thread::sleep(Duration::from_millis(5));
        };
        let _ = feeder.join();
        let output = CliOutput {
            stdout: String::from_utf8_lossy(&stdout.join().unwrap_or_default()).into_owned(),
            stderr: String::from_utf8_lossy(&stderr.join().unwrap_or_default()).into_owned(),
        };
        // `quit` exits with the status of the last command; a failed one is not an error here.
        assert!(
            status.code().is_some(),
            "{what} was killed ({status}):\n{}",
            output.both()
        );
        output
    }

    /// `java` with no option-injecting variable inherited from the test's environment.
    fn java_command(&self) -> Command {
        let mut cmd = Command::new(&self.java);
        for var in [
            "JAVA_TOOL_OPTIONS",
            "JDK_JAVA_OPTIONS",
            "_JAVA_OPTIONS",
            "CLASSPATH",
        ] {
            cmd.env_remove(var);
        }
        cmd
    }

    /// Starts the server's process, appending its output to its log.
    fn spawn(&mut self) {
        assert!(self.child.is_none(), "the ZooKeeper server is running");
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .unwrap_or_else(|e| panic!("open {}: {e}", self.log_path.display()));
        let log_err = log.try_clone().expect("clone the log file handle");
        let mut class_path = format!("{}:{ZOOKEEPER_JAR}", self.config_dir.display());
        if Path::new(SLF4J_SIMPLE_JAR).is_file() {
            class_path.push(':');
            class_path.push_str(SLF4J_SIMPLE_JAR);
        }
        if self.secure_port.is_some() {
            // The Netty connection factory's jars beyond those ZooKeeper's manifest names.
            for jar in NETTY_JARS {
                require_file(jar);
                class_path.push(':');
                class_path.push_str(jar);
            }
        }
        let mut cmd = self.java_command();
        cmd.args(["-Xmx256m", "-XX:+UseSerialGC"])
            .arg("-Dzookeeper.admin.enableServer=false")
            // Every write still reaches the OS before it is acknowledged, so it survives a
            // SIGKILL; only a machine crash could lose it.
            .arg("-Dzookeeper.forceSync=no")
            .arg(format!("-Dzookeeper.log.dir={}", self.dir.path().display()))
            .arg("-Dorg.slf4j.simpleLogger.showDateTime=true")
            .arg("-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS")
            .args(["-cp", &class_path])
            .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
            .arg(self.config_dir.join("zoo.cfg"))
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {} for ZooKeeper: {e}", self.java.display()));
        self.child = Some(child);
    }

    /// Waits until the server answers `ruok` with `imok` and `srvr` with its version (the
    /// port opens, and `ruok` answers, before the data is loaded; `srvr` then says "not
    /// currently serving requests").
    fn wait_ready(&mut self) -> Result<(), StartFailure> {
        let deadline = Instant::now() + ZOOKEEPER_START_TIMEOUT;
        loop {
            let child = self.child.as_mut().expect("a spawned server");
            if let Some(status) = child.try_wait().expect("try_wait on ZooKeeper") {
                self.child = None;
                let report = format!(
                    "the ZooKeeper server exited ({status}) before it was ready\n{}",
                    self.log_tail()
                );
                return Err(if self.log().contains("Address already in use") {
                    StartFailure::PortTaken(report)
                } else {
                    StartFailure::Fatal(report)
                });
            }
            let short = Duration::from_secs(1);
            let last = match self.try_four_letter("ruok", short) {
                Ok(answer) if answer == "imok" => match self.try_four_letter("srvr", short) {
                    Ok(answer) if answer.contains("Zookeeper version:") => return Ok(()),
                    Ok(answer) => format!("srvr answered {answer:?}"),
                    Err(e) => format!("srvr: {e}"),
                },
                Ok(answer) => format!("ruok answered {answer:?}"),
                Err(e) => format!("ruok: {e}"),
            };
            if Instant::now() >= deadline {
                return Err(StartFailure::Fatal(format!(
                    "ZooKeeper on port {} not ready within {ZOOKEEPER_START_TIMEOUT:?}; last \
                     try: {last}\n{}",
                    self.port,
                    self.log_tail()
                )));
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// The last lines of the server's log, labelled.
    fn log_tail(&self) -> String {
        let log = fs::read(&self.log_path)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_else(|e| format!("(cannot read: {e})"));
        let lines: Vec<&str> = log.lines().collect();
        let tail = &lines[lines.len().saturating_sub(LOG_TAIL_LINES)..];
        let mut out = String::new();
        let _ = writeln!(
            out,
            "--- ZooKeeper log, last {} lines of {} ---\n{}",
            tail.len(),
            self.log_path.display(),
            tail.join("\n")
        );
        out
    }

    /// `kill -NAME pid` for the running server.
    fn signal(&self, name: &str) {
        let child = self
            .child
            .as_ref()
            .unwrap_or_else(|| panic!("the ZooKeeper server is killed: cannot send SIG{name}"));
        send_signal(child.id(), name);
    }
}

impl Drop for ZooKeeper {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            continue_process(&child);
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The path of `java` on `PATH`; panics saying how to install it.
fn find_java() -> PathBuf {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("java"))
        .find(|path| path.is_file())
        .unwrap_or_else(|| {
            panic!(
                "`java` is not on PATH: the ZooKeeper tests run a real ZooKeeper 3.8 server. Run \
                 the tests with scripts/test, which installs Debian's zookeeper package (it \
                 depends on a Java runtime), or `apt-get install zookeeper`"
            )
        })
}

/// Panics, saying how to install it, if `path` is missing.
fn require_file(path: &str) {
    assert!(
        Path::new(path).is_file(),
        "{path} is missing: the ZooKeeper tests run a real ZooKeeper 3.8 server. Run the tests \
         with scripts/test, which installs Debian's zookeeper package, or `apt-get install \
         zookeeper`"
    );
}

/// Sends a four-letter word to `127.0.0.1:port` and reads the answer to its end.
fn four_letter(port: u16, cmd: &str, timeout: Duration) -> io::Result<String> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_write_timeout(Some(timeout))?;
    stream.set_read_timeout(Some(timeout))?;
    stream.write_all(cmd.as_bytes())?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer)?;
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

/// The lines of the client's stdout without its watch events. The client prints each of
/// `WATCHER::` and `WatchedEvent state:…` (e.g. on connecting and closing) with one `println`
/// of `"\n" + message`, from its event thread, so a pair (empty line, event line) may appear
/// anywhere between other lines: the pair is removed, never an empty line of data alone.
fn without_watch_events(stdout: &str) -> Vec<&str> {
    let mut lines: Vec<&str> = Vec::new();
    for line in stdout.lines() {
        if (line == "WATCHER::" || line.starts_with("WatchedEvent state:"))
            && lines.last() == Some(&"")
        {
            lines.pop();
        } else {
            lines.push(line);
        }
    }
    lines
}

/// Panics unless the client said `path` does not exist.
fn assert_absent(output: &CliOutput, path: &str, command: &str) {
    assert!(
        output
            .stderr
            .lines()
            .any(|l| l == format!("Node does not exist: {path}")),
        "zkCli `{command} {path}` printed nothing on stdout, and not that the node does not \
         exist:\n{}",
        output.both()
    );
}

/// Returns `path` if zkCli can take it as one argument; panics otherwise.
fn check_path(path: &str) -> &str {
    assert!(
        path.starts_with('/')
            && !path.contains(|c: char| c.is_whitespace() || c == '\'' || c == '"'),
        "not a znode path zkCli can take: {path:?}"
    );
    path
}

/// Quotes `data` as one zkCli argument (its parser strips one pair of `'` or `"`).
pub fn quote(data: &str) -> String {
    assert!(
        !data.contains(['\n', '\r']),
        "zkCli data must be one line: {data:?}"
    );
    if !data.contains('\'') {
        format!("'{data}'")
    } else if !data.contains('"') {
        format!("\"{data}\"")
    } else {
        panic!("zkCli data cannot hold both ' and \": {data:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zookeeper_server_cli_output_parsing() {
        let stdout = "Connecting to x\n\nWATCHER::\n\nWatchedEvent state:SyncConnected type:None \
                      path:null\nprintwatches is on\n\n\nWATCHER::\n\nWatchedEvent state:Closed \
                      type:None path:null\n";
        assert_eq!(
            without_watch_events(stdout),
            ["Connecting to x", "printwatches is on", ""]
        );
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), "\"it's\"");
        assert_eq!(quote(""), "''");
    }
}

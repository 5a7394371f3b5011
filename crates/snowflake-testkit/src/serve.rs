//! A `snowflake serve` process for tests: its command line (args, environment, a wrapper, another
//! build), spawned with its output captured, waited for until it listens, stopped by signal, and
//! always killed on drop.

use crate::binary;
use crate::faketime::FakeClock;
use crate::http::{Response, get};
use crate::process::{drain, send_signal};
use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long the service may take to log its listening address.
pub const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a process may take to exit once it should.
pub const EXIT_TIMEOUT: Duration = Duration::from_secs(10);

/// A `snowflake serve` command line: `--http-addr 127.0.0.1:0`, a state directory, and no
/// `SNOWFLAKE_*` variable inherited from the test's environment.
#[derive(Debug, Clone)]
pub struct Serve {
    args: Vec<OsString>,
    envs: Vec<(OsString, OsString)>,
    /// A command the binary runs under (its path and arguments follow the wrapper's), which
    /// must `exec` it, so that signals reach the binary itself.
    wrapper: Vec<OsString>,
    /// Another `snowflake` binary to run instead of this build's (the previous release).
    program: Option<PathBuf>,
}

impl Serve {
    /// `snowflake serve --http-addr 127.0.0.1:0 --state-dir STATE_DIR`.
    pub fn new(state_dir: &Path) -> Serve {
        Serve::bare()
            .args(["--http-addr", "127.0.0.1:0", "--state-dir"])
            .arg(state_dir)
    }

    /// `snowflake serve` with no flags at all (the caller adds them). Any other listener the
    /// service grows (gRPC, Thrift) is put on an ephemeral loopback port through its
    /// environment variable, so parallel tests never fight over the fixed default ports; a
    /// version without those listeners ignores the variables.
    pub fn bare() -> Serve {
        Serve {
            args: vec!["serve".into()],
            envs: Vec::new(),
            wrapper: Vec::new(),
            program: None,
        }
        .env("SNOWFLAKE_GRPC_ADDR", "127.0.0.1:0")
        .env("SNOWFLAKE_THRIFT_ADDR", "127.0.0.1:0")
    }

    /// `snowflake WORDS…` (another subcommand, e.g. `pg-keeper` or `state show`), with no flag
    /// and no environment added.
    pub fn subcommand<I, S>(words: I) -> Serve
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        Serve {
            args: words.into_iter().map(Into::into).collect(),
            envs: Vec::new(),
            wrapper: Vec::new(),
            program: None,
        }
    }

    /// Appends one argument.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Serve {
        self.args.push(arg.into());
        self
    }

    /// Appends arguments.
    pub fn args<I, S>(mut self, args: I) -> Serve
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets an environment variable of the child.
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Serve {
        self.envs.push((key.into(), value.into()));
        self
    }

    /// Runs the child's clock through libfaketime, driven by `clock`'s timestamp file.
    pub fn faketime(mut self, clock: &FakeClock) -> Serve {
        for (key, value) in clock.env() {
            self = self.env(key, value);
        }
        self
    }

    /// Runs the binary under `wrapper` (e.g. `unshare … sh -c '…; exec "$@"' sh`), which must
    /// `exec` it.
    pub fn wrapped<I, S>(mut self, wrapper: I) -> Serve
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.wrapper = wrapper.into_iter().map(Into::into).collect();
        self
    }

    /// Runs `program` (another `snowflake` binary: the previous release) instead of this
    /// build's.
    pub fn program(mut self, program: &Path) -> Serve {
        self.program = Some(program.to_owned());
        self
    }

    fn command(&self) -> Command {
        let binary = self.program.clone().unwrap_or_else(binary::snowflake);
        let mut cmd = match self.wrapper.split_first() {
            None => Command::new(binary),
            Some((program, args)) => {
                let mut cmd = Command::new(program);
                cmd.args(args).arg(binary);
                cmd
            }
        };
        for (key, _) in std::env::vars_os() {
            let name = key.to_string_lossy();
            if name.starts_with("SNOWFLAKE_")
                || name.starts_with("FAKETIME")
                || name == "LD_PRELOAD"
            {
                cmd.env_remove(&key);
            }
        }
        cmd.args(&self.args)
            .envs(self.envs.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null());
        cmd
    }

    /// Starts the service and waits (at most [`START_TIMEOUT`]) for its `http listening`
    /// line; panics with everything it wrote to stderr if it exits or times out first.
    pub fn start(self) -> ServeProcess {
        let mut process = self.spawn();
        process.wait_listening();
        process
    }

    /// Starts the process without waiting for anything.
    pub fn spawn(self) -> ServeProcess {
        let mut child = self
            .command()
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn snowflake serve");
        let (tx, lines) = mpsc::channel();
        let captured = Arc::new(Mutex::new(String::new()));
        let stderr = child.stderr.take().expect("piped stderr");
        let stderr_reader = std::thread::spawn({
            let captured = Arc::clone(&captured);
            move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    {
                        let mut all = captured.lock().unwrap();
                        all.push_str(&line);
                        all.push('\n');
                    }
                    // The receiver may be gone; keep draining so the child never blocks.
                    let _ = tx.send(line);
                }
            }
        });
        let stdout = child.stdout.take().expect("piped stdout");
        let stdout_reader = drain(stdout);
        ServeProcess {
            child,
            addr: None,
            lines,
            captured,
            stderr_reader: Some(stderr_reader),
            stdout_reader: Some(stdout_reader),
        }
    }

    /// Runs a process that is expected to exit by itself (within [`EXIT_TIMEOUT`]).
    pub fn run_to_exit(self) -> Finished {
        let mut process = self.spawn();
        let status = process.wait_exit(EXIT_TIMEOUT);
        process.finish(status)
    }
}

/// The address in a `http listening addr=IP:PORT` log line.
fn listening_addr(line: &str) -> Option<SocketAddr> {
    logged_addr(line, "http listening")
}

/// The address in a `<message> addr=IP:PORT` log line.
fn logged_addr(line: &str, message: &str) -> Option<SocketAddr> {
    if !line.contains(message) {
        return None;
    }
    let rest = &line[line.find("addr=")? + "addr=".len()..];
    let text = rest.split_whitespace().next()?;
    text.parse().ok()
}

/// What a process that has exited left behind.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// A running `snowflake serve`; killed on drop if still running.
#[derive(Debug)]
pub struct ServeProcess {
    child: Child,
    addr: Option<SocketAddr>,
    lines: mpsc::Receiver<String>,
    captured: Arc<Mutex<String>>,
    stderr_reader: Option<JoinHandle<()>>,
    stdout_reader: Option<JoinHandle<Vec<u8>>>,
}

impl ServeProcess {
    /// Waits (at most [`START_TIMEOUT`]) for a stderr line containing `needle` that was not
    /// consumed by an earlier wait, and returns it; panics with everything the process wrote to
    /// stderr if it exits or times out first.
    pub fn wait_for_line(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return line,
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => {
                    let _ = self.child.kill();
                    panic!(
                        "snowflake serve logged no {needle:?} within {START_TIMEOUT:?}; \
                         stderr:\n{}",
                        self.stderr()
                    );
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let status = self.wait_exit(EXIT_TIMEOUT);
                    panic!(
                        "snowflake serve exited ({status}) before logging {needle:?}; \
                         stderr:\n{}",
                        self.stderr()
                    );
                }
            }
        }
    }

    /// Waits for the `http listening` line of a [`Serve::spawn`]ed process and takes its
    /// address (see [`ServeProcess::wait_for_line`]).
    pub fn wait_listening(&mut self) {
        let line = self.wait_for_line("http listening");
        self.addr = Some(listening_addr(&line).unwrap_or_else(|| panic!("no address in {line:?}")));
    }

    /// The bound HTTP address.
    pub fn addr(&self) -> SocketAddr {
        self.addr.expect("started with Serve::start")
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything the process wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.captured.lock().unwrap().clone()
    }

    /// The bound Thrift address, from the `thrift listening addr=IP:PORT` line (logged right
    /// after the HTTP one); waits for it at most [`START_TIMEOUT`].
    pub fn thrift_addr(&self) -> SocketAddr {
        self.logged_addr("thrift listening")
    }

    /// The admin address, from its `admin listening addr=IP:PORT` line.
    pub fn admin_addr(&self) -> SocketAddr {
        self.logged_addr("admin listening")
    }

    /// The address in the first `<message> addr=IP:PORT` line; waits for it at most
    /// [`START_TIMEOUT`].
    pub fn logged_addr(&self, message: &str) -> SocketAddr {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let logged = self
                .stderr()
                .lines()
                .find_map(|line| logged_addr(line, message));
            if let Some(addr) = logged {
                return addr;
            }
            assert!(
                Instant::now() < deadline,
                "no `{message}` line within {START_TIMEOUT:?}; stderr:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Sends a signal by name (`TERM`, `INT`, `KILL`, ...; see [`crate::process::signal_named`]).
    pub fn signal(&self, name: &str) {
        send_signal(self.pid(), name);
    }

    /// Waits for the process to exit; panics (after killing it) if it takes longer than
    /// `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "snowflake serve did not exit within {timeout:?}; stderr:\n{}",
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Signals the process and waits for it to exit; returns what it left behind.
    pub fn stop_with(mut self, signal: &str) -> Finished {
        self.signal(signal);
        let status = self.wait_exit(EXIT_TIMEOUT);
        self.finish(status)
    }

    /// `kill -9`, and waits until the process is gone (so its locks are released).
    pub fn kill9(mut self) -> ExitStatus {
        self.signal("KILL");
        self.wait_exit(EXIT_TIMEOUT)
    }

    /// Collects the output of an exited process.
    pub fn finish(&mut self, status: ExitStatus) -> Finished {
        // The pipes close when the process exits, so both readers end promptly.
        if let Some(reader) = self.stderr_reader.take() {
            let _ = reader.join();
        }
        let stdout = self
            .stdout_reader
            .take()
            .and_then(|reader| reader.join().ok())
            .unwrap_or_default();
        Finished {
            status,
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: self.stderr(),
        }
    }

    /// `GET path`.
    pub fn get(&self, path: &str) -> Response {
        get(self.addr(), path)
    }

    /// Polls `GET path` until `done` accepts the response (at most `timeout`); returns it.
    pub fn poll(
        &self,
        path: &str,
        timeout: Duration,
        mut done: impl FnMut(&Response) -> bool,
    ) -> Response {
        let deadline = Instant::now() + timeout;
        loop {
            let response = self.get(path);
            if done(&response) {
                return response;
            }
            assert!(
                Instant::now() < deadline,
                "GET {path}: still {} {} after {timeout:?}; stderr:\n{}",
                response.status,
                response.body,
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

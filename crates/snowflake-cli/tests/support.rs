//! Helpers for running the real `snowflake serve` binary: a child process that is always
//! killed, a tiny blocking HTTP/1.1 client, and a libfaketime clock for the child only.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long the service may take to log its listening address.
pub const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a process may take to exit once it should.
pub const EXIT_TIMEOUT: Duration = Duration::from_secs(10);
/// Socket read/write timeout of the HTTP client.
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);

/// The `snowflake` binary cargo built for these tests.
pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_snowflake"))
}

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
    pub fn faketime(self, clock: &FakeClock) -> Serve {
        self.env("LD_PRELOAD", &clock.library)
            .env("FAKETIME_TIMESTAMP_FILE", &clock.file)
            .env("FAKETIME_NO_CACHE", "1")
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
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
        let binary = self.program.clone().unwrap_or_else(binary);
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

    /// Sends a signal by name (`TERM`, `INT`, `KILL`) with `kill(1)`.
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

/// An HTTP response.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    /// Header names lowercased.
    pub headers: HashMap<String, String>,
    pub body: String,
}

impl Response {
    /// A header's value, by lowercase name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    /// The body as JSON; panics with the body if it is not JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }

    /// The `error` of a JSON error body; checks the content type and shape.
    pub fn error(&self) -> String {
        assert_eq!(
            self.header("content-type"),
            Some("application/json"),
            "{self:?}"
        );
        let json = self.json();
        let object = json.as_object().expect("an object");
        assert_eq!(object.len(), 1, "only `error`: {json}");
        object["error"]
            .as_str()
            .unwrap_or_else(|| panic!("error is not a string: {json}"))
            .to_owned()
    }

    /// The IDs of a 200 `/v1/id` or `/v1/ids` JSON answer; each must be a JSON string.
    pub fn ids(&self) -> Vec<u64> {
        assert_eq!(self.status, 200, "{self:?}");
        let json = self.json();
        let strings: Vec<&serde_json::Value> = if let Some(id) = json.get("id") {
            vec![id]
        } else {
            json["ids"]
                .as_array()
                .unwrap_or_else(|| panic!("neither id nor ids: {json}"))
                .iter()
                .collect()
        };
        strings
            .into_iter()
            .map(|v| {
                v.as_str()
                    .unwrap_or_else(|| panic!("an id that is not a JSON string: {v}"))
                    .parse()
                    .unwrap_or_else(|e| panic!("an id that is not a number ({e}): {v}"))
            })
            .collect()
    }
}

/// `GET path` on a fresh connection.
pub fn get(addr: SocketAddr, path: &str) -> Response {
    request(addr, "GET", path, &[])
}

/// `GET path` on a fresh connection; an I/O error (e.g. the server is restarting) is returned,
/// not a panic.
pub fn try_get(addr: SocketAddr, path: &str) -> std::io::Result<Response> {
    try_request(addr, "GET", path, &[])
}

/// One request on a fresh connection with `Connection: close`, read to EOF.
pub fn request(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> Response {
    try_request(addr, method, path, headers)
        .unwrap_or_else(|e| panic!("{method} http://{addr}{path}: {e}"))
}

/// [`request`], with I/O errors returned.
pub fn try_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> std::io::Result<Response> {
    let try_once = || -> std::io::Result<Response> {
        let mut stream = TcpStream::connect_timeout(&addr, HTTP_TIMEOUT)?;
        stream.set_read_timeout(Some(HTTP_TIMEOUT))?;
        stream.set_write_timeout(Some(HTTP_TIMEOUT))?;
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: 0\r\n"
        );
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes())?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw)?;
        // A server shutting down may close the connection without answering.
        if !raw.windows(4).any(|w| w == b"\r\n\r\n") {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!(
                    "connection closed after {} bytes, before a response",
                    raw.len()
                ),
            ));
        }
        Ok(parse_response(&raw))
    };
    try_once()
}

fn parse_response(raw: &[u8]) -> Response {
    let text = String::from_utf8_lossy(raw);
    let split = text
        .find("\r\n\r\n")
        .unwrap_or_else(|| panic!("no end of headers in {text:?}"));
    let (head, body) = (&text[..split], &text[split + 4..]);
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    assert!(
        version.starts_with("HTTP/1."),
        "status line {status_line:?}"
    );
    let status = parts
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("status line {status_line:?}"));
    let headers: HashMap<String, String> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let body = if headers
        .get("transfer-encoding")
        .is_some_and(|te| te.eq_ignore_ascii_case("chunked"))
    {
        dechunk(body)
    } else {
        if let Some(length) = headers.get("content-length") {
            let length: usize = length.parse().expect("numeric content-length");
            assert_eq!(body.len(), length, "body length vs content-length");
        }
        body.to_owned()
    };
    Response {
        status,
        headers,
        body,
    }
}

fn dechunk(mut rest: &str) -> String {
    let mut body = String::new();
    loop {
        let (size_line, after) = rest.split_once("\r\n").expect("chunk size line");
        let size_text = size_line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16).expect("hex chunk size");
        if size == 0 {
            return body;
        }
        body.push_str(&after[..size]);
        rest = &after[size + 2..];
    }
}

/// The timestamp (Unix ms) of a Snowflake ID under the default layout.
pub fn timestamp_ms(id: u64) -> u64 {
    (id >> 22) + 1_288_834_974_657
}

/// The `node-<dc>-<worker>.json` state file of a state directory, as JSON.
pub fn state_file(state_dir: &Path, datacenter_id: u32, worker_id: u32) -> serde_json::Value {
    let path = state_dir.join(format!("node-{datacenter_id}-{worker_id}.json"));
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON ({e})", path.display()))
}

/// The library the child's clock is faked with: `$SNOWFLAKE_TEST_LIBFAKETIME`, else the
/// Debian path of the multi-threaded build. Missing means the environment is broken: fail.
pub fn libfaketime() -> PathBuf {
    let path = std::env::var_os("SNOWFLAKE_TEST_LIBFAKETIME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"));
    assert!(
        path.is_file(),
        "libfaketime not found at {} (set by SNOWFLAKE_TEST_LIBFAKETIME): run the tests with \
         scripts/test, which installs the faketime and libfaketime packages and sets it",
        path.display()
    );
    path
}

/// A clock offset for child processes, through libfaketime's timestamp file.
#[derive(Debug)]
pub struct FakeClock {
    library: PathBuf,
    dir: tempfile::TempDir,
    file: PathBuf,
}

impl FakeClock {
    /// A timestamp file that says `+0` (the real time).
    pub fn new() -> FakeClock {
        let library = libfaketime();
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("faketime");
        let clock = FakeClock { library, dir, file };
        clock.set("+0");
        clock
    }

    /// Atomically replaces the offset (e.g. `-5`, `+0`): write a temporary file, rename it.
    pub fn set(&self, offset: &str) {
        let tmp = self.dir.path().join("faketime.tmp");
        fs::write(&tmp, format!("{offset}\n")).expect("write faketime file");
        fs::rename(&tmp, &self.file).expect("rename faketime file");
    }
}

// Shared by the serve and fleet tests.

/// The wall clock in Unix ms.
pub fn now_ms() -> u64 {
    let elapsed = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    u64::try_from(elapsed.as_millis()).unwrap()
}

/// A fresh temporary directory, removed when dropped.
pub fn temp_dir() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

/// The process exited with `code`; its stderr otherwise.
pub fn assert_exit(finished: &Finished, code: i32) {
    assert_eq!(
        finished.status.code(),
        Some(code),
        "exit status {}; stderr:\n{}",
        finished.status,
        finished.stderr
    );
}

/// `GET /v1/info`, which must answer 200.
pub fn info(node: &ServeProcess) -> serde_json::Value {
    let response = node.get("/v1/info");
    assert_eq!(response.status, 200, "{response:?}");
    response.json()
}

/// The worker id inside an ID (default layout).
pub fn worker_in(id: u64) -> u64 {
    (id >> 12) & 31
}

/// The worker id a node reports in `/v1/info`.
pub fn worker_of(node: &ServeProcess) -> u64 {
    info(node)["worker_id"].as_u64().expect("worker_id")
}

/// Polls `GET /v1/id` until it answers 200 (at most `timeout`); the 503 messages seen before.
pub fn first_id(node: &ServeProcess, timeout: Duration) -> (u64, Vec<String>) {
    let deadline = Instant::now() + timeout;
    let mut refusals = Vec::new();
    loop {
        let response = node.get("/v1/id");
        if response.status == 200 {
            return (response.ids()[0], refusals);
        }
        assert_eq!(response.status, 503, "{response:?}");
        refusals.push(response.error());
        assert!(
            Instant::now() < deadline,
            "no id within {timeout:?}; last refusal {:?}; stderr:\n{}",
            refusals.last(),
            node.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Asserts every ID is new to `all`, and adds it.
pub fn insert_all(all: &mut HashSet<u64>, ids: &[u64]) {
    for &id in ids {
        assert!(all.insert(id), "duplicate id {id}");
    }
}

/// `kill -NAME pid`, which must succeed.
pub fn send_signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{name} {pid} failed");
}

/// SIGCONT, best effort, so that a stopped process dies at once when killed.
pub fn continue_process(child: &Child) {
    let _ = Command::new("kill")
        .arg("-CONT")
        .arg(child.id().to_string())
        .stderr(Stdio::null())
        .status();
}

/// Reads a child's pipe to its end on a thread of its own, so the child never blocks on it.
pub fn drain(mut pipe: impl Read + Send + 'static) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        bytes
    })
}

//! Clients that hold a connection slot without making progress, on the real binary: readers
//! that ask for large answers (or pipeline thousands of small ones) and never read them, over
//! plain TCP and TLS, and a RESP client that sends its command a byte at a time. Each must lose
//! its slot after the idle timeout, so that a new client is served, not refused. (The same
//! behaviours on every door, in-process, are rows of the server crate's `listen` tables.)

use crate::certs::Certs;
use crate::support::{Serve, ServeProcess, assert_exit, temp_dir, try_get};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The idle timeout of these nodes.
const IDLE: Duration = Duration::from_millis(2000);

/// How long a slot may stay held after the idle timeout, on a busy machine.
const SLACK: Duration = Duration::from_secs(8);

/// How long the greedy HTTP clients may hold the slots: the time for their replies to fill the
/// socket buffers (the kernel grows them, up to megabytes, while the node writes, slowly in a
/// debug build on a busy machine), then the idle timeout. Before the write deadline they held
/// them for ever (the review saw them still established after 40 s).
const FILL_AND_IDLE: Duration = Duration::from_secs(40);

/// What the greedy clients send: `--max-connections` of them, three asking for the largest
/// batch many times over, one pipelining many thousands of single IDs.
fn greedy_requests(i: usize) -> Vec<u8> {
    if i == 0 {
        b"GET /v1/id HTTP/1.1\r\nHost: x\r\n\r\n".repeat(100_000)
    } else {
        b"GET /v1/ids?count=100000 HTTP/1.1\r\nHost: x\r\n\r\n".repeat(32)
    }
}

/// Writes `bytes` to `to` on a thread of its own (the server stops reading once its replies
/// back up); errors end the write.
fn send_in_background(mut to: impl Write + Send + 'static, bytes: Vec<u8>) {
    std::thread::spawn(move || {
        let _ = to.write_all(&bytes);
        let _ = to.flush();
        // Kept open (an openssl client would close its session at end of input).
        std::thread::sleep(Duration::from_secs(60));
    });
}

/// How many connections to local port `port` are established, from `/proc/net/tcp` (the
/// server's side of each: reading the client's would take some of the replies, which is
/// progress).
fn established_to(port: u16) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // local_address is IP:PORT in hex; state 01 is ESTABLISHED.
            fields.len() > 3
                && fields[1].rsplit(':').next() == Some(&format!("{port:04X}"))
                && fields[3] == "01"
        })
        .count()
}

/// A connection that asked and reads nothing: a socket, or an `openssl s_client` whose output
/// nobody reads (so it stops reading the socket once its pipe is full).
enum Greedy {
    /// Kept open, never read.
    Plain {
        _open: TcpStream,
    },
    Tls(Child),
}

impl Greedy {
    fn open(addr: SocketAddr, ca: Option<&std::path::Path>, requests: Vec<u8>) -> Greedy {
        match ca {
            None => {
                let stream = TcpStream::connect(addr).unwrap();
                send_in_background(stream.try_clone().unwrap(), requests);
                Greedy::Plain { _open: stream }
            }
            Some(ca) => {
                let mut child = Command::new("openssl")
                    .args([
                        "s_client",
                        "-quiet",
                        "-connect",
                        &addr.to_string(),
                        "-CAfile",
                    ])
                    .arg(ca)
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("openssl is installed");
                send_in_background(child.stdin.take().unwrap(), requests);
                Greedy::Tls(child)
            }
        }
    }
}

impl Drop for Greedy {
    fn drop(&mut self) {
        if let Greedy::Tls(child) = self {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `GET /healthz` on a new connection, plain or over TLS (curl): its status, or why none came.
fn new_client(addr: SocketAddr, ca: Option<&std::path::Path>) -> Result<u16, String> {
    match ca {
        None => try_get(addr, "/healthz")
            .map(|r| r.status)
            .map_err(|e| e.to_string()),
        Some(ca) => {
            let out = Command::new("curl")
                .args([
                    "-sS",
                    "--max-time",
                    "5",
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{http_code}",
                ])
                .arg("--cacert")
                .arg(ca)
                .arg(format!("https://{addr}/healthz"))
                .output()
                .expect("curl is installed");
            let code = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            code.parse()
                .map_err(|_| format!("{code:?} {}", String::from_utf8_lossy(&out.stderr)))
        }
    }
}

/// Polls a new client until it is served (200); how long that took.
fn served_within(node: &ServeProcess, ca: Option<&std::path::Path>, within: Duration) -> Duration {
    let started = Instant::now();
    let mut last = Err(String::new());
    while started.elapsed() < within {
        last = new_client(node.addr(), ca);
        if last == Ok(200) {
            return started.elapsed();
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!(
        "a new client was not served within {within:?} of the greedy clients (last: {last:?}); \
         stderr:\n{}",
        node.stderr()
    );
}

/// HTTP slow readers: with `--max-connections 4 --idle-timeout-ms 2000`, four connections that
/// ask for `GET /v1/ids?count=100000` (or pipeline 100,000 `GET /v1/id`) and never read hold
/// every slot only until their writes have made no progress for the idle timeout; then they are
/// closed and a new client is served (not refused with 503), over plain TCP and TLS alike (over
/// TLS with a 6 s idle timeout, which also bounds the test's own slow TLS handshakes).
#[test]
fn http_readers_that_never_read_lose_their_slots_plain_and_tls() {
    let certs = Certs::new();
    certs.issue("server", "snowflake-server", "ca", true, 30);
    for tls in [false, true] {
        let row = if tls { "TLS" } else { "plain" };
        // Over TLS, the handshake gets the idle timeout too: an openssl or curl process started
        // on a busy machine may take longer than 2 s to complete one, and would then lose its
        // slot (or its answer) before the test could see the slots full.
        let idle = if tls { IDLE * 3 } else { IDLE };
        let dir = temp_dir();
        let mut serve = Serve::new(dir.path())
            .args(["--max-connections", "4"])
            .args(["--idle-timeout-ms", &idle.as_millis().to_string()]);
        if tls {
            serve = serve
                .arg("--tls-cert")
                .arg(certs.path("server.crt"))
                .arg("--tls-key")
                .arg(certs.path("server.key"));
        }
        let node = serve.start();
        let ca = tls.then(|| certs.path("ca.crt"));
        let ca = ca.as_deref();

        let greedy: Vec<Greedy> = (0..4)
            .map(|i| Greedy::open(node.addr(), ca, greedy_requests(i)))
            .collect();
        // All four connected before the first probe: an `openssl s_client` is a process that
        // connects when it has started, and a probe that got in first would take a slot and
        // have a greedy client refused (503, closed), leaving slots free for every later probe.
        let port = node.addr().port();
        let started = Instant::now();
        while established_to(port) < 4 {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{row}: only {} of the 4 greedy clients connected within 10 s",
                established_to(port)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // Until they hold every slot: a new client is refused.
        let started = Instant::now();
        loop {
            let answer = new_client(node.addr(), ca);
            if answer == Ok(503) {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{row}: the greedy clients never held every slot (a new client: {answer:?}); \
                 stderr:\n{}",
                node.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let waited = served_within(&node, ca, FILL_AND_IDLE);
        eprintln!("{row}: a new client was served {waited:?} after the slots were full");
        // Every greedy connection was cut (none lost its slot by leaving on its own: they are
        // all still open on the client's side).
        let started = Instant::now();
        while established_to(port) > 0 {
            assert!(
                started.elapsed() < FILL_AND_IDLE,
                "{row}: {} greedy connections still established after {FILL_AND_IDLE:?}",
                established_to(port)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        eprintln!(
            "{row}: every greedy connection was cut {:?} later",
            started.elapsed()
        );
        drop(greedy);
        assert_exit(&node.stop_with("TERM"), 0);
    }
}

/// RESP slowloris: a client that sends a command one byte at a time, each well within the idle
/// timeout, is closed once the command has been unfinished for the idle timeout counted from
/// its first byte (not from the last one), and its slot serves the next client.
#[test]
fn a_resp_command_sent_a_byte_at_a_time_is_cut_at_the_idle_timeout() {
    let dir = temp_dir();
    let node = Serve::new(dir.path())
        .args(["--resp-addr", "127.0.0.1:0", "--max-connections", "1"])
        .args(["--idle-timeout-ms", &IDLE.as_millis().to_string()])
        .start();
    let addr = node.logged_addr("resp listening");
    let mut slow = TcpStream::connect(addr).unwrap();
    let command = format!("*2\r\n$4\r\nECHO\r\n$100\r\n{}\r\n", "x".repeat(100));
    // Reading with a timeout of a quarter of the idle timeout paces the bytes: each one well
    // within the idle timeout of the one before.
    slow.set_read_timeout(Some(IDLE / 4)).unwrap();
    let started = Instant::now();
    let mut cut = None;
    for byte in command.bytes() {
        let closed = match slow.write_all(&[byte]) {
            Err(_) => true,
            Ok(()) => match slow.read(&mut [0; 64]) {
                Ok(0) => true,
                Ok(n) => panic!("answered {n} bytes to an unfinished command"),
                Err(e) => !matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ),
            },
        };
        if closed {
            cut = Some(started.elapsed());
            break;
        }
        if started.elapsed() > IDLE + SLACK {
            break;
        }
    }
    let cut = cut.unwrap_or_else(|| {
        panic!(
            "a command trickled in a byte at a time still held its connection after {:?}",
            started.elapsed()
        )
    });
    assert!(cut >= IDLE, "cut after {cut:?}, before the idle timeout");
    // Its slot serves the next client.
    let mut next = TcpStream::connect(addr).unwrap();
    next.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    next.write_all(b"PING\r\n").unwrap();
    let mut pong = [0; 7];
    next.read_exact(&mut pong).unwrap();
    assert_eq!(&pong, b"+PONG\r\n");
    drop((slow, next));
    assert_exit(&node.stop_with("TERM"), 0);
}

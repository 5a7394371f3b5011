//! The listener every front door shares, where only the real binary can show it: a process out
//! of file descriptors, whose accepts fail until some are free. (Everything else the listener
//! does is tested in-process, one table per behaviour, in the server crate's `listen` tests.)

use crate::support::{Serve, assert_exit, temp_dir};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

/// The pause after a failed accept (`listen::accept::BACKOFF`).
const BACKOFF: Duration = Duration::from_millis(50);

/// The soft limit on open files of process `pid`, from `/proc/PID/limits`.
fn soft_nofile(pid: u32) -> String {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap_or_else(|| panic!("no open files limit in\n{limits}"));
    line["Max open files".len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}

/// Sets the soft limit on open files of process `pid` (`prlimit`, util-linux).
fn set_soft_nofile(pid: u32, soft: &str) {
    let out = Command::new("prlimit")
        .args(["--pid", &pid.to_string(), &format!("--nofile={soft}:")])
        .output()
        .expect("prlimit is installed (util-linux)");
    assert!(out.status.success(), "prlimit: {out:?}");
}

/// The lowest file descriptor number process `pid` does not use: with the soft limit there, it
/// can open nothing more.
fn lowest_free_fd(pid: u32) -> u64 {
    let used: std::collections::HashSet<u64> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    (0..).find(|fd| !used.contains(fd)).unwrap()
}

/// One request on `stream` that `door` answers, and whether the answer came.
fn served(door: &str, stream: &mut TcpStream) -> Result<(), String> {
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    // The request, how many bytes of the answer to read, and what they must be.
    type Check = fn(&[u8]) -> bool;
    let (request, len, check): (Vec<u8>, usize, Check) = match door {
        "http" | "admin" => (
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_vec(),
            12,
            |got| got == b"HTTP/1.1 200",
        ),
        // The HTTP/2 preface and empty settings: the server's settings frame comes back.
        "grpc" => (
            [
                &b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"[..],
                &[0, 0, 0, 4, 0, 0, 0, 0, 0],
            ]
            .concat(),
            9,
            |got| got[3] == 4,
        ),
        // `get_worker_id()`, framed (proto's codec): a strict reply header comes back after
        // the length.
        "thrift" => {
            let mut call = Vec::new();
            snowflake_proto::thrift::peer::encode_call(&mut call, "get_worker_id", 1, None);
            (call, 8, |got| got[4..] == [0x80, 1, 0, 2])
        }
        _ => (b"PING\r\n".to_vec(), 7, |got| got == b"+PONG\r\n"),
    };
    stream.write_all(&request).map_err(|e| e.to_string())?;
    let mut got = vec![0u8; len];
    stream.read_exact(&mut got).map_err(|e| e.to_string())?;
    if check(&got) {
        Ok(())
    } else {
        Err(format!("answered {got:?}"))
    }
}

/// Out of file descriptors, every door's accept fails: each failure is logged and retried after
/// a pause, about 20 times a second rather than in a busy loop that burns a core; once
/// descriptors are free again, the connections that waited meanwhile are served.
#[test]
fn out_of_file_descriptors_every_door_backs_off_then_serves_who_waited() {
    let dir = temp_dir();
    let node = Serve::new(dir.path())
        .args(["--resp-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"])
        .start();
    let doors: [(&str, SocketAddr); 5] = [
        ("http", node.addr()),
        ("admin", node.admin_addr()),
        ("grpc", node.logged_addr("grpc listening")),
        ("thrift", node.thrift_addr()),
        ("resp", node.logged_addr("resp listening")),
    ];
    let pid = node.pid();
    let soft = soft_nofile(pid);

    set_soft_nofile(pid, &lowest_free_fd(pid).to_string());
    let started = Instant::now();
    // The kernel completes each handshake; the node cannot take the connection.
    let mut waiting: Vec<(&str, TcpStream)> = doors
        .iter()
        .map(|&(door, addr)| (door, TcpStream::connect(addr).unwrap()))
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    let log = node.stderr();
    let elapsed = started.elapsed();
    set_soft_nofile(pid, &soft);

    let most = elapsed.as_millis() / BACKOFF.as_millis() + 2;
    for (door, _) in &doors {
        let failures = log
            .lines()
            .filter(|line| {
                line.contains("accept failed") && line.contains(&format!("door=\"{door}\""))
            })
            .count();
        assert!(failures >= 1, "{door}: no failed accept logged:\n{log}");
        assert!(
            failures as u128 <= most,
            "{door}: {failures} failed accepts in {elapsed:?}: no pause between them"
        );
    }
    for (door, stream) in &mut waiting {
        served(door, stream).unwrap_or_else(|e| panic!("{door}: the waiting client: {e}"));
    }
    // (A bare HTTP/2 client that never acknowledges the GOAWAY would hold the drain.)
    drop(waiting);
    assert_exit(&node.stop_with("TERM"), 0);
}

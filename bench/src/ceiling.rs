//! `ceiling`: the zero-work servers in C that our single-ID doors are measured against, each
//! with the same client in the same run: HTTP/1.1 (`bench/c/zero_work_http.c`, under wrk) and
//! RESP (`bench/c/zero_work_resp.c`, under redis-benchmark), built here with `cc -O2` and run
//! on loopback. (The HTTP/2 one is nghttpd, which `service` starts.)

use crate::server::run_cmd;
use anyhow::{Context, Result, bail};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The zero-work HTTP/1.1 server under the same `wrk` command as our `GET /v1/id`.
pub const HTTP1: &str = "reference: zero-work HTTP/1.1 server in C (epoll, wrk)";
/// The zero-work RESP server under the same `redis-benchmark` command as our RESP port.
pub const RESP: &str = "zero-work RESP server in C (epoll)";

/// The sources, carried by the harness so that a run builds what it was built with.
const HTTP1_SOURCE: &str = include_str!("../c/zero_work_http.c");
const RESP_SOURCE: &str = include_str!("../c/zero_work_resp.c");

/// Compiles `source` with `cc -O2` into `dir/name`.
fn build(dir: &Path, name: &str, source: &str) -> Result<PathBuf> {
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, source)?;
    let bin = dir.join(name);
    run_cmd(
        Command::new("cc")
            .args(["-O2", "-Wall", "-o"])
            .arg(&bin)
            .arg(&c),
    )
    .with_context(|| format!("building {name} with cc (apt-get install gcc)"))?;
    Ok(bin)
}

/// One zero-work server on a loopback port, killed on drop.
#[derive(Debug)]
pub struct ZeroWork {
    child: Child,
    pub port: u16,
}

impl ZeroWork {
    /// Starts `bin PORT` and waits until it accepts connections.
    fn start(bin: &Path, port: u16) -> Result<ZeroWork> {
        let child = Command::new(bin)
            .arg(port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        // Constructed first, so that one that never listens is stopped on drop.
        let mut server = ZeroWork { child, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(status) = server.child.try_wait()? {
                bail!("{} exited ({status}) before listening", bin.display());
            }
            if Instant::now() > deadline {
                bail!("{} not listening on {port} after 10 s", bin.display());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(server)
    }
}

impl Drop for ZeroWork {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The zero-work HTTP/1.1 and RESP servers, built into `dir` and listening on the given ports.
#[derive(Debug)]
pub struct Ceilings {
    pub http: ZeroWork,
    pub resp: ZeroWork,
}

impl Ceilings {
    pub fn start(dir: &Path, http_port: u16, resp_port: u16) -> Result<Ceilings> {
        let http = build(dir, "zero_work_http", HTTP1_SOURCE)?;
        let resp = build(dir, "zero_work_resp", RESP_SOURCE)?;
        Ok(Ceilings {
            http: ZeroWork::start(&http, http_port)?,
            resp: ZeroWork::start(&resp, resp_port)?,
        })
    }
}

/// The answer to `GET /v1/id` on `port`, with its date header's value blanked (its length
/// kept): what a ceiling must match in size to be one.
pub fn id_answer(port: u16) -> Result<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(b"GET /v1/id HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)
        .with_context(|| format!("reading the answer to GET /v1/id on {port}"))?;
    let text = String::from_utf8(raw).context("a GET /v1/id answer that is not UTF-8")?;
    // Our answer to `Connection: close` says so; the ceiling's keep-alive answer does not.
    Ok(text
        .split("\r\n")
        .filter(|line| !line.eq_ignore_ascii_case("connection: close"))
        .map(|line| match line.split_once(": ") {
            Some((name, value)) if name.eq_ignore_ascii_case("date") => {
                format!("{name}: {}", "x".repeat(value.len()))
            }
            _ => line.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\r\n"))
}

/// Fails unless the zero-work server's answer to `GET /v1/id` has the shape of ours: the same
/// status line, the same header names in the same order with values of the same lengths, and
/// a body of the same length (only the digits of the ID differ). A ceiling that sends less
/// than we do would not be one.
pub fn check_same_shape(ours: &str, ceiling: &str) -> Result<()> {
    let shape = |answer: &str| -> Vec<(String, usize)> {
        answer
            .split("\r\n")
            .map(|line| match line.split_once(": ") {
                Some((name, value)) => (name.to_ascii_lowercase(), value.len()),
                None => (String::new(), line.len()),
            })
            .collect()
    };
    let status = |answer: &str| answer.split("\r\n").next().unwrap_or("").to_owned();
    if status(ours) != status(ceiling) || shape(ours) != shape(ceiling) {
        bail!(
            "the zero-work HTTP/1.1 server's answer to GET /v1/id is not shaped like ours (bench/c/zero_work_http.c must send the same headers, values of the same lengths and a body of the same length):\nours:\n{ours}\nceiling:\n{ceiling}"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn started() -> (tempfile::TempDir, ZeroWork) {
        let dir = tempfile::tempdir().unwrap();
        let bin = build(dir.path(), "zero_work_http", HTTP1_SOURCE).unwrap();
        let port = snowflake_testkit::ports::try_free_ports(1).unwrap()[0];
        let server = ZeroWork::start(&bin, port).unwrap();
        (dir, server)
    }

    /// Reads from `s` until `want` bytes came (or fails on a timeout).
    fn read_exactly(s: &mut TcpStream, want: usize) -> Vec<u8> {
        let mut got = vec![0; want];
        s.read_exact(&mut got).unwrap();
        got
    }

    const ANSWER_LEN: usize = 136;

    #[test]
    fn the_http_ceiling_answers_pipelined_and_split_requests_in_order() {
        let (_dir, server) = started();
        let mut s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let req = "GET /v1/id HTTP/1.1\r\nHost: x\r\n\r\n";
        let other = "GET /v1/info HTTP/1.1\r\nHost: x\r\n\r\n";
        // Three requests in one write, a stray one in the middle.
        s.write_all(format!("{req}{other}{req}").as_bytes())
            .unwrap();
        let one = String::from_utf8(read_exactly(&mut s, ANSWER_LEN)).unwrap();
        assert!(one.starts_with("HTTP/1.1 200 OK\r\n"), "{one}");
        assert!(
            one.ends_with("\r\n\r\n{\"id\":\"1999999999999999999\"}"),
            "{one}"
        );
        let not_found = "HTTP/1.1 404 Not Found\r\n";
        let two = read_exactly(&mut s, not_found.len());
        assert_eq!(two, not_found.as_bytes());
        // The rest of the 404, then the third answer, the same as the first.
        let mut rest = Vec::new();
        while !rest.ends_with(b"not found") {
            rest.extend(read_exactly(&mut s, 1));
        }
        assert_eq!(read_exactly(&mut s, ANSWER_LEN), one.as_bytes());
        // A request split across writes is answered once it is whole.
        s.write_all(&req.as_bytes()[..7]).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        s.write_all(&req.as_bytes()[7..]).unwrap();
        assert_eq!(read_exactly(&mut s, ANSWER_LEN), one.as_bytes());
        // 200 requests in one write: 200 answers in order.
        s.write_all(req.repeat(200).as_bytes()).unwrap();
        let all = read_exactly(&mut s, 200 * ANSWER_LEN);
        assert!(all.chunks(ANSWER_LEN).all(|a| a == one.as_bytes()));
    }

    #[test]
    fn the_http_ceiling_refuses_bodies_and_closes_when_asked() {
        let (_dir, server) = started();
        let mut s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(b"POST /v1/id HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}")
            .unwrap();
        let mut all = String::new();
        s.read_to_string(&mut all).unwrap();
        assert!(all.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{all}");
        let answer = id_answer(server.port).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert!(
            answer.contains("\r\ndate: xxxxxxxxxxxxxxxxxxxxxxxxxxxxx\r\n"),
            "{answer}"
        );
    }

    #[test]
    fn the_shape_check_names_both_answers_when_they_differ() {
        let ours = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 28\r\n\r\n{\"id\":\"1999999999999999999\"}";
        check_same_shape(ours, ours).unwrap();
        let shorter = ours.replace("1999999999999999999", "1");
        let err = check_same_shape(ours, &shorter).unwrap_err().to_string();
        assert!(err.contains("not shaped like ours"), "{err}");
    }
}

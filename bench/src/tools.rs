//! `tools`: the outside programs the benchmarks run (wrk, h2load, redis-benchmark, pgbench,
//! cyclictest, `snowflake bench`), installed with apt when missing, and one run of each.

use crate::parse;
use crate::server::run_cmd;
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

/// nghttpd lives in /usr/sbin, which is not on every user's PATH.
pub const NGHTTPD_BIN: &str = "/usr/sbin/nghttpd";

/// An absolute path that exists, or a name found on PATH.
fn on_path(name: &str) -> bool {
    if name.starts_with('/') {
        return Path::new(name).is_file();
    }
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
}

/// The PostgreSQL server binaries: 15 as on the project's machines, else the newest installed.
fn pg_bin_dir() -> Option<PathBuf> {
    let preferred = PathBuf::from("/usr/lib/postgresql/15/bin");
    if preferred.join("initdb").is_file() {
        return Some(preferred);
    }
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| Some(e.ok()?.path().join("bin")))
        .filter(|d| d.join("initdb").is_file())
        .collect();
    dirs.sort();
    dirs.pop()
}

/// Installs missing tools with apt-get, or fails saying what is missing: never skips.
pub fn ensure_tools() -> Result<PathBuf> {
    let mut missing = missing_packages(&[
        ("redis-server", "redis-server"),
        ("redis-benchmark", "redis-tools"),
        ("redis-cli", "redis-tools"),
        ("wrk", "wrk"),
        ("h2load", "nghttp2-client"),
        (NGHTTPD_BIN, "nghttp2-server"),
        ("cyclictest", "rt-tests"),
        ("pgbench", "postgresql-client"),
        ("psql", "postgresql-client"),
        ("runuser", "util-linux"),
        ("openssl", "openssl"),
        // The zero-work servers in C (bench/c), built by the harness.
        ("cc", "gcc"),
    ]);
    if pg_bin_dir().is_none() {
        missing.push("postgresql");
    }
    apt_install("service", &missing)?;
    pg_bin_dir().context("PostgreSQL server binaries (initdb) still missing after install")
}

/// `wrk`, installed with apt-get if it is missing (all `soak` needs besides our binary).
pub fn ensure_wrk() -> Result<()> {
    apt_install("soak", &missing_packages(&[("wrk", "wrk")]))
}

/// The packages of the `(binary, package)` pairs whose binary is not on PATH.
fn missing_packages<'a>(tools: &[(&str, &'a str)]) -> Vec<&'a str> {
    let mut missing = Vec::new();
    for &(bin, pkg) in tools {
        if !on_path(bin) && !missing.contains(&pkg) {
            missing.push(pkg);
        }
    }
    missing
}

fn apt_install(who: &str, missing: &[&str]) -> Result<()> {
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!("{who}: installing {missing:?} with apt-get");
    let is_root = run_cmd(Command::new("id").arg("-u")).is_ok_and(|s| s.trim() == "0");
    if !is_root {
        bail!("missing {missing:?}: run as root (or install them) so apt-get can install them");
    }
    run_cmd(Command::new("apt-get").args(["update", "-qq"]))?;
    run_cmd(
        Command::new("apt-get")
            .env("DEBIAN_FRONTEND", "noninteractive")
            .args(["install", "-y", "-qq", "--no-install-recommends"])
            .args(missing),
    )?;
    Ok(())
}

/// `wrk -t1 -cN -dSs` against our server's `GET /v1/id`.
pub fn wrk(http_port: u16, connections: u32, secs: u64) -> Result<parse::Wrk> {
    parse::wrk(&run_wrk(http_port, connections, secs, &[])?)
}

/// `wrk -t1` with `connections` against our `GET /v1/id` for `secs`, plus `extra` flags; its
/// output.
fn run_wrk(http_port: u16, connections: u32, secs: u64, extra: &[&str]) -> Result<String> {
    run_cmd(
        Command::new("wrk")
            .args(["-t1", &format!("-c{connections}"), &format!("-d{secs}s")])
            .args(extra)
            .arg(format!("http://127.0.0.1:{http_port}/v1/id")),
    )
}

/// `h2load` (nghttp2's C load generator, the HTTP/2 counterpart of wrk) against our gRPC
/// `NextId`: one stream at a time on each of N connections, the request body a gRPC frame of an
/// empty `NextIdRequest`. It checks the HTTP status only (not `grpc-status`).
pub fn h2load_grpc(
    grpc_port: u16,
    connections: u32,
    secs: u64,
    work: &Path,
) -> Result<parse::H2load> {
    let body = work.join("next-id-request.bin");
    // Uncompressed, zero-length message.
    std::fs::write(&body, [0u8; 5])?;
    let out = run_cmd(Command::new("h2load").args([
        "-c",
        &connections.to_string(),
        "-m",
        "1",
        "-D",
        &secs.to_string(),
        "-d",
        &body.to_string_lossy(),
        "-H",
        "content-type: application/grpc",
        "-H",
        "te: trailers",
        &format!("http://127.0.0.1:{grpc_port}/snowflake.v1.Snowflake/NextId"),
    ]))?;
    parse::h2load(&out)
}

/// A gRPC frame (uncompressed, 4-byte big-endian length) of `NextIdResponse { id }`.
pub fn next_id_response_frame(id: u64) -> Vec<u8> {
    // Field 1, varint.
    let mut message = vec![0x08];
    let mut rest = id;
    while rest >= 0x80 {
        message.push((rest as u8 & 0x7f) | 0x80);
        rest >>= 7;
    }
    message.push(rest as u8);
    let mut frame = vec![0];
    frame.extend_from_slice(&(message.len() as u32).to_be_bytes());
    frame.extend_from_slice(&message);
    frame
}

/// `wrk --latency` against our `GET /v1/id`: throughput and latency percentiles.
pub fn wrk_latency(
    http_port: u16,
    connections: u32,
    secs: u64,
) -> Result<(parse::Wrk, parse::WrkLatency)> {
    let out = run_wrk(http_port, connections, secs, &["--latency"])?;
    Ok((parse::wrk(&out)?, parse::wrk_latency(&out)?))
}

/// How late a sleeping thread wakes on this machine: `cyclictest`, one thread, a 200 µs
/// interval, `loops` wake-ups (run while nothing else of ours is busy).
pub fn cyclictest(loops: u64) -> Result<parse::Cyclictest> {
    let out = run_cmd(Command::new("cyclictest").args([
        "-t1",
        "-i",
        "200",
        "-l",
        &loops.to_string(),
        "-q",
        "-h",
        "20000",
    ]))?;
    parse::cyclictest(&out)
}

/// Where `redis-benchmark` connects: a port, over TLS (verified with a CA) or not.
pub struct RedisTarget {
    port: u16,
    tls_ca: Option<PathBuf>,
}

impl RedisTarget {
    pub fn plain(port: u16) -> RedisTarget {
        RedisTarget { port, tls_ca: None }
    }

    pub fn tls(port: u16, ca: &Path) -> RedisTarget {
        RedisTarget {
            port,
            tls_ca: Some(ca.to_owned()),
        }
    }
}

/// `redis-benchmark` with `connections`, `pipeline` commands in flight per connection and
/// `requests` in all: `INCR` (`-t incr`), or `command` (e.g. `SNOWFLAKE.NEXT 4096`).
pub fn redis_benchmark(
    target: &RedisTarget,
    connections: u32,
    pipeline: u32,
    requests: u64,
    command: Option<&[&str]>,
) -> Result<parse::RedisRow> {
    let mut cmd = Command::new("redis-benchmark");
    cmd.args(["-h", "127.0.0.1", "-p", &target.port.to_string()])
        .args(["-c", &connections.to_string(), "-n", &requests.to_string()])
        .args(["-P", &pipeline.to_string(), "--csv"]);
    if let Some(ca) = &target.tls_ca {
        cmd.args(["--tls", "--cacert"]).arg(ca);
    }
    let test = match command {
        None => {
            cmd.args(["-t", "incr"]);
            "INCR".to_owned()
        }
        Some(words) => {
            cmd.args(words);
            words.join(" ")
        }
    };
    let out = run_cmd(&mut cmd)?;
    parse::redis_csv(&out, &test)
}

/// `snowflake bench` against our server.
pub fn sf_bench(
    bin: &Path,
    protocol: &str,
    port: u16,
    args: &[&str],
    secs: f64,
) -> Result<parse::SfBench> {
    let out = run_cmd(
        Command::new(bin)
            .args(["bench", "--no-progress", "--json", "--protocol", protocol])
            .args(["--addr", &format!("127.0.0.1:{port}")])
            .args([
                "-d",
                &format!("{}ms", (secs * 1000.0).round().max(100.0) as u64),
            ])
            .args(args),
    )?;
    parse::sf_bench(&out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_id_response_frame_is_a_grpc_frame_of_field_1() {
        // 300 = 0b10_0101100: varint bytes 0xac 0x02.
        assert_eq!(
            next_id_response_frame(300),
            [0, 0, 0, 0, 3, 0x08, 0xac, 0x02]
        );
        let big = next_id_response_frame(1_999_999_999_999_999_999);
        assert_eq!(&big[..5], &[0, 0, 0, 0, 10]);
        assert_eq!(big.len(), 15);
    }
}

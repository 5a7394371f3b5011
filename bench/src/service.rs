//! `service`: our server against Redis INCR and a PostgreSQL sequence, each started here on
//! loopback with random free ports and temporary directories, measured with their own tools.

use crate::model::Run;
use crate::parse;
use crate::server::{SfServer, run_cmd, sf_binary};
use anyhow::{Context, Result, bail};
use std::collections::HashMap;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const REDIS: &str = "Redis INCR (redis-benchmark)";
pub const PG: &str = "PostgreSQL nextval (pgbench)";
pub const WRK: &str = "snowflake HTTP /v1/id (wrk)";
/// A zero-work HTTP/2 server in C answering `NextId`'s path with a fixed gRPC frame: the most
/// any gRPC server can do on this machine with the same client.
pub const NGHTTPD: &str = "reference: zero-work HTTP/2 server in C (nghttpd, h2load)";
/// The latency subjects: closed loop (wrk) and fixed rate (snowflake bench --rate).
pub const LATENCY_CLOSED: &str = "snowflake HTTP /v1/id at half of peak, closed loop (wrk)";
pub const LATENCY_RATE: &str = "snowflake HTTP /v1/id at half of peak";
pub const CONNECTIONS: [u32; 3] = [1, 10, 50];

/// nghttpd lives in /usr/sbin, which is not on every user's PATH.
const NGHTTPD_BIN: &str = "/usr/sbin/nghttpd";

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

/// `N` distinct free ports: each is held until all are picked, so no two are the same. For
/// servers that cannot bind port 0 and say which port they got (ours does, see
/// [`SfServer::start_with`]).
fn free_ports<const N: usize>() -> Result<[u16; N]> {
    let held = (0..N)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()?;
    let mut ports = [0; N];
    for (port, listener) in ports.iter_mut().zip(&held) {
        *port = listener.local_addr()?.port();
    }
    Ok(ports)
}

/// VmRSS of a process in KiB.
pub fn rss_kib(pid: u32) -> Result<f64> {
    status_kib(pid, "VmRSS")
}

/// A `KEY: N kB` line of `/proc/PID/status` (e.g. `VmRSS`, `VmHWM`) in KiB.
pub fn status_kib(pid: u32, key: &str) -> Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    parse_status_kib(&status, key).with_context(|| format!("no {key} line for pid {pid}"))
}

pub fn parse_status_kib(status: &str, key: &str) -> Option<f64> {
    status.lines().find_map(|l| {
        l.strip_prefix(key)?
            .strip_prefix(':')?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    })
}

fn wait_until(what: &str, timeout: Duration, mut ready: impl FnMut() -> bool) -> Result<()> {
    let deadline = Instant::now() + timeout;
    while !ready() {
        if Instant::now() > deadline {
            bail!("{what} not ready after {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
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

/// CPU seconds (user + system) used by this process's finished, waited-for children: the
/// `cutime` and `cstime` fields of `/proc/self/stat`, in USER_HZ (100 per second on Linux).
fn children_cpu_secs() -> Result<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    parse_children_cpu_secs(&stat).context("no cutime/cstime in /proc/self/stat")
}

fn parse_children_cpu_secs(stat: &str) -> Option<f64> {
    // cutime and cstime are fields 16 and 17.
    stat_ticks(stat, 16, 17)
}

/// CPU seconds (user + system) a running process has used so far: `utime` and `stime`
/// (fields 14 and 15) of `/proc/PID/stat`.
pub fn process_cpu_secs(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    stat_ticks(&stat, 14, 15).with_context(|| format!("no utime/stime in /proc/{pid}/stat"))
}

/// The sum of two clock-tick fields of a `/proc/.../stat` line (numbered from 1 as in
/// proc(5)), in seconds.
fn stat_ticks(stat: &str, first: usize, second: usize) -> Option<f64> {
    // Fields after the command name, which ends at the last ')', start with field 3.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let a: f64 = fields.get(first.checked_sub(3)?)?.parse().ok()?;
    let b: f64 = fields.get(second.checked_sub(3)?)?.parse().ok()?;
    Some((a + b) / 100.0)
}

/// A gRPC frame (uncompressed, 4-byte big-endian length) of `NextIdResponse { id }`.
fn next_id_response_frame(id: u64) -> Vec<u8> {
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

/// Redis, PostgreSQL, nghttpd and our server (plaintext, and a second one with TLS on its HTTP,
/// gRPC and RESP ports), stopped (and their directories removed) on drop.
struct Services {
    work: tempfile::TempDir,
    pg_bin: PathBuf,
    redis: Option<Child>,
    redis_port: u16,
    /// Redis's `--tls-port` (the same server).
    redis_tls_port: u16,
    pg_data: Option<PathBuf>,
    pg_port: u16,
    nghttpd: Option<Child>,
    nghttpd_port: u16,
    sf: Option<SfServer>,
    sf_tls: Option<SfServer>,
}

/// A CA and a server certificate for 127.0.0.1 (RSA 2048, as most deployments have), made with
/// openssl in `dir`: `ca.crt`, `server.crt`, `server.key`.
fn make_certs(dir: &Path) -> Result<()> {
    use snowflake_testcerts::Usage;
    snowflake_testcerts::ca(dir, "ca", "compare-ca", 2)?;
    snowflake_testcerts::issue(
        dir,
        "server",
        "compare",
        "ca",
        Usage::Server(&["IP:127.0.0.1"]),
        2,
    )?;
    Ok(())
}

impl Services {
    fn start(pg_bin: PathBuf, sf_bin: &Path) -> Result<Services> {
        let work = tempfile::Builder::new()
            .prefix("snowflake-compare-")
            .tempdir()?;
        // PostgreSQL runs as the postgres user, which must reach its data directory.
        run_cmd(Command::new("chmod").arg("755").arg(work.path()))?;
        let [redis_port, redis_tls_port, pg_port, nghttpd_port] = free_ports()?;
        let mut s = Services {
            work,
            pg_bin,
            redis: None,
            redis_port,
            redis_tls_port,
            pg_data: None,
            pg_port,
            nghttpd: None,
            nghttpd_port,
            sf: None,
            sf_tls: None,
        };
        let dir = s.work.path().to_owned();
        make_certs(&dir).context("making the TLS certificates")?;
        let cert = |name: &str| dir.join(name).to_string_lossy().into_owned();

        let redis_log = std::fs::File::create(dir.join("redis.log"))?;
        s.redis = Some(
            Command::new("redis-server")
                .args(["--bind", "127.0.0.1", "--port", &s.redis_port.to_string()])
                .args(["--tls-port", &s.redis_tls_port.to_string()])
                .args(["--tls-cert-file", &cert("server.crt")])
                .args(["--tls-key-file", &cert("server.key")])
                .args(["--tls-ca-cert-file", &cert("ca.crt")])
                .args(["--tls-auth-clients", "no"])
                .args(["--save", "", "--appendonly", "no", "--dir"])
                .arg(&dir)
                .stdout(redis_log)
                .stderr(Stdio::null())
                .spawn()
                .context("starting redis-server")?,
        );

        let pg_dir = dir.join("pg");
        std::fs::create_dir(&pg_dir)?;
        run_cmd(Command::new("chown").arg("postgres:").arg(&pg_dir))?;
        let data = pg_dir.join("data");
        run_cmd(
            Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(s.pg_bin.join("initdb"))
                .arg("-D")
                .arg(&data)
                .args(["-U", "postgres", "--auth=trust", "-E", "UTF8"]),
        )
        .context("initdb")?;
        run_cmd(
            Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(s.pg_bin.join("pg_ctl"))
                .arg("-D")
                .arg(&data)
                .arg("-l")
                .arg(pg_dir.join("log"))
                .arg("-w")
                .arg("-o")
                .arg(format!(
                    "-c listen_addresses=127.0.0.1 -p {} -k {} -c max_connections=120",
                    s.pg_port,
                    pg_dir.display()
                ))
                .arg("start"),
        )
        .context("pg_ctl start")?;
        s.pg_data = Some(data);
        run_cmd(
            Command::new("psql")
                .args(s.pg_args())
                .args(["-q", "-c", "CREATE SEQUENCE s"]),
        )?;
        std::fs::write(dir.join("nextval.sql"), "SELECT nextval('s');\n")?;

        // nghttpd serves files: NextId's path holds a gRPC frame of a NextIdResponse.
        let docroot = dir.join("nghttpd");
        std::fs::create_dir_all(docroot.join("snowflake.v1.Snowflake"))?;
        std::fs::write(
            docroot.join("snowflake.v1.Snowflake/NextId"),
            next_id_response_frame(1_999_999_999_999_999_999),
        )?;
        s.nghttpd = Some(
            Command::new(NGHTTPD_BIN)
                .args(["--no-tls", "-n", "1", "-d"])
                .arg(&docroot)
                .arg(s.nghttpd_port.to_string())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("starting nghttpd")?,
        );

        let redis_port = s.redis_port;
        wait_until("redis-server", Duration::from_secs(10), || {
            Command::new("redis-cli")
                .args(["-p", &redis_port.to_string(), "ping"])
                .output()
                .is_ok_and(|o| o.stdout.starts_with(b"PONG"))
        })?;
        let nghttpd_port = s.nghttpd_port;
        wait_until("nghttpd", Duration::from_secs(10), || {
            TcpStream::connect(("127.0.0.1", nghttpd_port)).is_ok()
        })?;
        // Ours only once the others listen: port 0 could otherwise get a port one of them is
        // about to bind.
        s.sf = Some(SfServer::start(sf_bin, &dir)?);
        s.sf_tls = Some(SfServer::start_with(
            sf_bin,
            &dir,
            "tls",
            2,
            &[
                "--tls-cert".into(),
                cert("server.crt"),
                "--tls-key".into(),
                cert("server.key"),
            ],
        )?);
        Ok(s)
    }

    fn pg_args(&self) -> Vec<String> {
        vec![
            "-h".into(),
            "127.0.0.1".into(),
            "-p".into(),
            self.pg_port.to_string(),
            "-U".into(),
            "postgres".into(),
            "postgres".into(),
        ]
    }

    fn redis(&self, connections: u32, requests: u64) -> Result<parse::RedisRow> {
        redis_benchmark(
            &RedisTarget::plain(self.redis_port),
            connections,
            1,
            requests,
            None,
        )
    }

    fn ca(&self) -> PathBuf {
        self.work.path().join("ca.crt")
    }

    fn pgbench(&self, clients: u32, secs: u64) -> Result<parse::Pgbench> {
        let out = run_cmd(
            Command::new("pgbench")
                .args([
                    "-h",
                    "127.0.0.1",
                    "-p",
                    &self.pg_port.to_string(),
                    "-U",
                    "postgres",
                    "-n",
                ])
                .args([
                    "-c",
                    &clients.to_string(),
                    "-j",
                    &clients.min(2).to_string(),
                ])
                .args(["-T", &secs.to_string(), "-f"])
                .arg(self.work.path().join("nextval.sql"))
                .arg("postgres"),
        )?;
        parse::pgbench(&out)
    }

    fn sf(&self) -> &SfServer {
        self.sf.as_ref().expect("started in Services::start")
    }

    fn wrk(&self, connections: u32, secs: u64) -> Result<parse::Wrk> {
        wrk(self.sf().http_port, connections, secs)
    }

    fn sf_pid(&self) -> u32 {
        self.sf().pid()
    }

    fn redis_pid(&self) -> u32 {
        self.redis.as_ref().map_or(0, Child::id)
    }
}

impl Drop for Services {
    fn drop(&mut self) {
        // Our servers first (TERM, then KILL), as before their state directories go.
        drop(self.sf.take());
        drop(self.sf_tls.take());
        for mut child in [self.redis.take(), self.nghttpd.take()]
            .into_iter()
            .flatten()
        {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(data) = self.pg_data.take() {
            let _ = Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(self.pg_bin.join("pg_ctl"))
                .arg("-D")
                .arg(&data)
                .args(["-m", "immediate", "-w", "stop"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// The group of the TLS measurements: plaintext against TLS, same server build, same client.
pub const TLS_GROUP: &str = "tls";
/// The group of the RESP measurements: our RESP port against redis-server, same client.
pub const RESP_GROUP: &str = "resp";
pub const RESP_OURS: &str = "snowflake RESP INCR";
pub const RESP_REDIS: &str = "redis-server INCR";
/// `SNOWFLAKE.NEXT 4096` over RESP, in IDs/s.
pub const RESP_BATCH: &str = "snowflake RESP SNOWFLAKE.NEXT 4096, 4 connections";

/// redis-benchmark counts requests, not seconds: each run is sized from the last rate seen
/// for the same measurement (or a guess), so that it lasts about the measurement's seconds.
#[derive(Default)]
struct Sized(HashMap<String, f64>);

impl Sized {
    fn run(
        &mut self,
        key: &str,
        guess: f64,
        secs: f64,
        bench: impl FnOnce(u64) -> Result<parse::RedisRow>,
    ) -> Result<parse::RedisRow> {
        let rate = self.0.get(key).copied().unwrap_or(guess);
        let row = bench(((rate * secs) as u64).max(1000))?;
        self.0.insert(key.to_owned(), row.rps);
        Ok(row)
    }
}

/// One round of the TLS and RESP measurements: each pair back to back, so that the machine's
/// noise hits both sides alike.
fn tls_and_resp(
    run: &mut Run,
    svc: &Services,
    bin: &Path,
    secs: f64,
    sized: &mut Sized,
    errors: &mut Vec<String>,
) -> Result<()> {
    let (plain, tls) = (svc.sf(), svc.sf_tls.as_ref().expect("started"));
    let ca = svc.ca();
    let ca_arg = ca.to_string_lossy().into_owned();
    let mut bench = |run: &mut Run, subject: &str, protocol: &str, args: &[&str]| -> Result<()> {
        for (param, server, tls_args) in [
            ("plaintext", plain, &[][..]),
            ("TLS", tls, &["--tls-ca", ca_arg.as_str()][..]),
        ] {
            let all: Vec<&str> = args.iter().chain(tls_args).copied().collect();
            let r = sf_bench(bin, protocol, server.port(protocol), &all, secs)?;
            if r.errors_total > 0 {
                errors.push(format!(
                    "{subject} ({param}): {} errors in one round",
                    r.errors_total
                ));
            }
            run.record(TLS_GROUP, subject, param, "IDs/s", r.ids_per_sec);
        }
        Ok(())
    };
    bench(
        run,
        "single IDs, HTTP keep-alive, 50 connections (snowflake bench)",
        "http",
        &["-c", "50"],
    )?;
    bench(
        run,
        "single IDs, gRPC NextId, 50 connections (snowflake bench)",
        "grpc",
        &["-c", "50"],
    )?;
    bench(
        run,
        "batches of 4096, HTTP, 4 connections (snowflake bench)",
        "http",
        &["-c", "4", "--batch", "4096"],
    )?;
    for (subject, plain_port, tls_port) in [
        (
            "Redis INCR, 50 connections (redis-benchmark)",
            svc.redis_port,
            svc.redis_tls_port,
        ),
        (
            "snowflake RESP INCR, 50 connections (redis-benchmark)",
            plain.resp_port,
            tls.resp_port,
        ),
    ] {
        for (param, target) in [
            ("plaintext", RedisTarget::plain(plain_port)),
            ("TLS", RedisTarget::tls(tls_port, &ca)),
        ] {
            let key = format!("{subject} {param}");
            let row = sized.run(&key, 60_000.0, secs, |n| {
                redis_benchmark(&target, 50, 1, n, None)
            })?;
            run.record(TLS_GROUP, subject, param, "IDs/s", row.rps);
        }
    }

    // RESP against Redis: the same client, INCR without and with pipelining.
    for (param, pipeline, guess) in [("c=50", 1, 60_000.0), ("c=50 -P 16", 16, 600_000.0)] {
        for (subject, port) in [(RESP_OURS, plain.resp_port), (RESP_REDIS, svc.redis_port)] {
            let row = sized.run(&format!("{subject} {param}"), guess, secs, |n| {
                redis_benchmark(&RedisTarget::plain(port), 50, pipeline, n, None)
            })?;
            run.record(RESP_GROUP, subject, param, "requests/s", row.rps);
        }
    }
    let row = sized.run(RESP_BATCH, 500.0, secs, |n| {
        redis_benchmark(
            &RedisTarget::plain(plain.resp_port),
            4,
            1,
            n,
            Some(&["SNOWFLAKE.NEXT", "4096"]),
        )
    })?;
    run.record(RESP_GROUP, RESP_BATCH, "c=4", "IDs/s", row.rps * 4096.0);
    Ok(())
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

pub fn run(root: &Path, secs: f64, rounds: usize) -> Result<Run> {
    let started = Instant::now();
    let pg_bin = ensure_tools()?;
    let bin = sf_binary(root)?;
    let mut run = Run::new("service", secs, rounds);
    let mut sized = Sized::default();
    if std::env::var_os("SNOWFLAKE_BIN").is_some() {
        run.notes.push(format!(
            "Measured {} (SNOWFLAKE_BIN), not the release build: these numbers say nothing about performance.",
            bin.display()
        ));
    }
    // wrk and pgbench count whole seconds: every tool gets the same whole number of seconds.
    let whole = (secs.round() as u64).max(1);
    if whole as f64 != secs {
        run.notes.push(format!(
            "Every service measurement ran {whole} s (wrk and pgbench take whole seconds)."
        ));
    }
    let secs = whole as f64;
    let svc = Services::start(pg_bin, &bin)?;
    run.record(
        "memory",
        "snowflake serve",
        "idle",
        "KiB",
        rss_kib(svc.sf_pid())?,
    );
    run.record(
        "memory",
        "redis-server",
        "idle",
        "KiB",
        rss_kib(svc.redis_pid())?,
    );

    // redis-benchmark counts requests, not seconds: each run sized from the last rate seen.
    let redis = |run: &mut Run, sized: &mut Sized, c: u32| -> Result<f64> {
        let guess = if c == 1 { 15_000.0 } else { 60_000.0 };
        let row = sized.run(&format!("Redis INCR c={c}"), guess, secs, |n| {
            svc.redis(c, n)
        })?;
        if c == 50 {
            run.record("single-id", REDIS, "c=50", "IDs/s", row.rps);
            if let Some(p99) = row.p99_ms {
                run.record("redis-latency", REDIS, "p99", "us", p99 * 1000.0);
            }
        }
        run.record(
            "connections",
            "Redis INCR",
            &format!("c={c}"),
            "IDs/s",
            row.rps,
        );
        Ok(row.rps)
    };
    let mut errors: Vec<String> = Vec::new();
    let mut tls_errors: Vec<String> = Vec::new();
    let mut sf =
        |run: &mut Run, group: &str, subject: &str, protocol: &str, args: &[&str]| -> Result<()> {
            let r = sf_bench(&bin, protocol, svc.sf().port(protocol), args, secs)?;
            if r.errors_total > 0 {
                errors.push(format!("{subject}: {} errors in one round", r.errors_total));
            }
            run.record(group, subject, "c=50", "IDs/s", r.ids_per_sec);
            Ok(())
        };

    for round in 1..=rounds {
        eprintln!("service: round {round}/{rounds}");
        redis(&mut run, &mut sized, 50)?;
        let p = svc.pgbench(50, whole)?;
        run.record("single-id", PG, "c=50", "IDs/s", p.tps);
        run.record("connections", "PostgreSQL nextval", "c=50", "IDs/s", p.tps);
        let w = svc.wrk(50, whole)?;
        if w.non_2xx + w.socket_errors > 0 {
            run.notes.push(format!(
                "wrk round {round}: {} non-2xx, {} socket errors",
                w.non_2xx, w.socket_errors
            ));
        }
        run.record("single-id", WRK, "c=50", "IDs/s", w.requests_per_sec);
        run.record(
            "connections",
            "snowflake HTTP (wrk)",
            "c=50",
            "IDs/s",
            w.requests_per_sec,
        );
        sf(
            &mut run,
            "single-id",
            "snowflake HTTP /v1/id (snowflake bench)",
            "http",
            &["-c", "50"],
        )?;
        sf(
            &mut run,
            "single-id",
            "snowflake Thrift get_id (snowflake bench)",
            "thrift",
            &["-c", "50"],
        )?;
        sf(
            &mut run,
            "single-id",
            "snowflake gRPC NextId (snowflake bench)",
            "grpc",
            &["-c", "50"],
        )?;
        let h = h2load_grpc(svc.sf().port("grpc"), 50, whole, svc.work.path())?;
        if h.failed > 0 {
            run.notes.push(format!(
                "h2load round {round}: {} failed requests",
                h.failed
            ));
        }
        run.record(
            "single-id",
            "snowflake gRPC NextId (h2load)",
            "c=50",
            "IDs/s",
            h.requests_per_sec,
        );
        let n = h2load_grpc(svc.nghttpd_port, 50, whole, svc.work.path())?;
        if n.failed > 0 {
            bail!("h2load against nghttpd: {} failed requests", n.failed);
        }
        run.record("single-id", NGHTTPD, "c=50", "IDs/s", n.requests_per_sec);
        sf(
            &mut run,
            "batch",
            "HTTP /v1/ids?count=4096, 4 connections",
            "http",
            &["-c", "4", "--batch", "4096"],
        )?;
        sf(
            &mut run,
            "batch",
            "gRPC NextIds 4096, 4 connections",
            "grpc",
            &["-c", "4", "--batch", "4096"],
        )?;
        sf(
            &mut run,
            "batch",
            "gRPC StreamIds 1,000,000, 2 connections",
            "grpc",
            &["-c", "2", "--batch", "1000000", "--stream"],
        )?;
        tls_and_resp(&mut run, &svc, &bin, secs, &mut sized, &mut tls_errors)?;
        // The client library: 10 s paced in a full run (4 s measurements).
        crate::client::round(&mut run, svc.sf().grpc_port, secs, secs * 2.5)?;
        for c in [1u32, 10] {
            redis(&mut run, &mut sized, c)?;
            let w = svc.wrk(c, whole)?;
            run.record(
                "connections",
                "snowflake HTTP (wrk)",
                &format!("c={c}"),
                "IDs/s",
                w.requests_per_sec,
            );
            let p = svc.pgbench(c, whole)?;
            run.record(
                "connections",
                "PostgreSQL nextval",
                &format!("c={c}"),
                "IDs/s",
                p.tps,
            );
        }
    }
    run.record(
        "memory",
        "snowflake serve",
        "after load",
        "KiB",
        rss_kib(svc.sf_pid())?,
    );
    run.record(
        "memory",
        "redis-server",
        "after load",
        "KiB",
        rss_kib(svc.redis_pid())?,
    );

    // How late this machine wakes a sleeping thread: the floor under any latency measured here.
    let wake = cyclictest(if secs < 2.0 { 5_000 } else { 25_000 })?;
    for (p, v) in [
        ("p50", wake.p50),
        ("p99", wake.p99),
        ("p99.9", wake.p99_9),
        ("max", wake.max),
    ] {
        run.record("machine-wakeup", "cyclictest", p, "us", v);
    }

    // Latency at half of the measured peak (wrk, 50 connections), two ways.
    let peak = run.median("single-id", WRK, "c=50").unwrap_or(f64::NAN);
    let half = (peak / 2.0).round().max(1.0) as u64;
    // Closed loop: wrk with the fewest connections whose throughput reaches half of the peak.
    let mut closed_connections = 1;
    while closed_connections < 16 {
        let w = svc.wrk(closed_connections, 1)?;
        if w.requests_per_sec >= half as f64 {
            break;
        }
        closed_connections += 1;
    }
    run.notes.push(format!("Latency was measured at half of the median wrk peak ({half} requests/s) two ways. Closed loop: `wrk -t1 -c{closed_connections} --latency`, the fewest connections that reached half of the peak in a 1 s probe; each connection sends its next request when the previous answer arrived, so a stall delays the requests behind it without being measured (coordinated omission). Fixed rate: `snowflake bench -c 50 --rate {half}`, every request on a fixed schedule and its latency measured from the scheduled time, so stalls of the client, the server or the machine all count."));
    for round in 1..=rounds {
        eprintln!("service: latency round {round}/{rounds}");
        let cpu_before = (children_cpu_secs()?, process_cpu_secs(svc.sf_pid())?);
        let (w, l) = wrk_latency(svc.sf().http_port, closed_connections, whole)?;
        run.record(
            "latency-client-cpu",
            LATENCY_CLOSED,
            "cpu",
            "% of a core",
            100.0 * (children_cpu_secs()? - cpu_before.0) / secs,
        );
        run.record(
            "latency-server-cpu",
            LATENCY_CLOSED,
            "cpu",
            "% of a core",
            100.0 * (process_cpu_secs(svc.sf_pid())? - cpu_before.1) / secs,
        );
        for (p, v) in [
            ("p50", l.p50),
            ("p75", l.p75),
            ("p90", l.p90),
            ("p99", l.p99),
        ] {
            run.record("latency-closed", LATENCY_CLOSED, p, "us", v);
        }
        run.record(
            "latency-closed-rate",
            LATENCY_CLOSED,
            &format!("c={closed_connections}"),
            "requests/s",
            w.requests_per_sec,
        );
        if w.non_2xx + w.socket_errors > 0 {
            errors.push(format!(
                "{LATENCY_CLOSED}: {} non-2xx, {} socket errors in one round",
                w.non_2xx, w.socket_errors
            ));
        }
        let cpu_before = (children_cpu_secs()?, process_cpu_secs(svc.sf_pid())?);
        let r = sf_bench(
            &bin,
            "http",
            svc.sf().http_port,
            &["-c", "50", "--rate", &half.to_string()],
            secs,
        )?;
        run.record(
            "latency-client-cpu",
            LATENCY_RATE,
            "cpu",
            "% of a core",
            100.0 * (children_cpu_secs()? - cpu_before.0) / secs,
        );
        run.record(
            "latency-server-cpu",
            LATENCY_RATE,
            "cpu",
            "% of a core",
            100.0 * (process_cpu_secs(svc.sf_pid())? - cpu_before.1) / secs,
        );
        for (p, v) in [
            ("p50", r.latency_us.p50),
            ("p90", r.latency_us.p90),
            ("p99", r.latency_us.p99),
            ("p99.9", r.latency_us.p99_9),
            ("max", r.latency_us.max),
        ] {
            run.record("latency", LATENCY_RATE, p, "us", v);
        }
        run.record(
            "latency-rate",
            LATENCY_RATE,
            "achieved",
            "requests/s",
            r.requests_per_sec,
        );
        if r.errors_total > 0 {
            errors.push(format!(
                "{LATENCY_RATE}: {} errors in one round",
                r.errors_total
            ));
        }
    }
    run.notes.extend(errors);
    run.notes.extend(tls_errors);
    drop(svc);
    run.machine.loadavg_after = crate::model::loadavg();
    run.wall_secs = started.elapsed().as_secs_f64();
    Ok(run)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_cpu_from_proc_self_stat() {
        // pid (comm with ") " inside) state ppid ... utime stime cutime cstime ...
        let stat = "4242 (a) b) S 1 4242 4242 0 -1 4194560 100 0 0 0 7 3 250 130 20 0 1 0 5 0 0";
        assert_eq!(parse_children_cpu_secs(stat), Some(3.8));
        assert_eq!(parse_children_cpu_secs("4242 (x) S 1"), None);
        assert!(children_cpu_secs().is_ok());
        assert!(process_cpu_secs(std::process::id()).is_ok());
        assert_eq!(stat_ticks(stat, 14, 15), Some(0.1));
    }

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

    #[test]
    fn vmrss_from_proc_status() {
        let status = "Name:\tsnowflake\nVmPeak:\t  100 kB\nVmRSS:\t    8420 kB\nThreads:\t3\n";
        assert_eq!(parse_status_kib(status, "VmRSS"), Some(8420.0));
        assert_eq!(parse_status_kib("Name: x\n", "VmRSS"), None);
        assert_eq!(
            parse_status_kib("VmHWM:\t  9000 kB\n", "VmHWM"),
            Some(9000.0)
        );
        assert_eq!(parse_status_kib("VmHWMx: 1 kB\n", "VmHWM"), None);
        assert!(rss_kib(std::process::id()).unwrap() > 0.0);
    }
}

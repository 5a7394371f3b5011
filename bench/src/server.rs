//! `server`: our own `snowflake serve` as the benchmarks measure it: the binary (built or
//! given), the process on loopback ports it picks itself, its readiness, and its stop.

use anyhow::{Context, Result, bail};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Runs a command to completion; a non-zero exit is an error carrying its output.
pub fn run_cmd(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {cmd:?}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}): {stdout}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(stdout)
}

/// True once `GET path` on the HTTP port answers 200.
fn http_ok(port: u16, path: &str) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
    if s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .is_err()
    {
        return false;
    }
    let mut buf = [0u8; 32];
    let n = s.read(&mut buf).unwrap_or(0);
    buf[..n].starts_with(b"HTTP/1.1 200") || buf[..n].starts_with(b"HTTP/1.0 200")
}

/// The port of the first `MESSAGE addr=IP:PORT` line of a server log, as `snowflake serve`
/// logs each listener it has bound.
fn logged_port(log: &str, message: &str) -> Option<u16> {
    log.lines().find_map(|line| {
        let rest = line.split_once(message)?.1;
        let addr = rest.split_once("addr=")?.1.split_whitespace().next()?;
        addr.parse::<std::net::SocketAddr>().ok().map(|a| a.port())
    })
}

/// `snowflake serve --worker-threads 1` on loopback with free ports (HTTP, gRPC, Thrift and
/// RESP), its state directory and log in a directory of the caller's; stopped (TERM, then KILL
/// after 5 s) on drop.
pub struct SfServer {
    child: Child,
    log: PathBuf,
    pub http_port: u16,
    pub grpc_port: u16,
    pub thrift_port: u16,
    pub resp_port: u16,
}

impl SfServer {
    /// Starts the server with its state in `dir/state` and its log in `dir/serve.log`, and waits
    /// until `/readyz` answers.
    pub fn start(bin: &Path, dir: &Path) -> Result<SfServer> {
        SfServer::start_with(bin, dir, "", 1, &[])
    }

    /// [`SfServer::start`] under `dir/NAME` (state and log), as worker `worker_id`, with
    /// `extra` flags; with `--tls-cert` among them, `/readyz` is asked over plaintext on the
    /// admin port `--admin-addr` (which `extra` must not set).
    pub fn start_with(
        bin: &Path,
        dir: &Path,
        name: &str,
        worker_id: u32,
        extra: &[String],
    ) -> Result<SfServer> {
        let dir = dir.join(name);
        std::fs::create_dir_all(&dir)?;
        let tls = extra.iter().any(|a| a == "--tls-cert");
        let log = dir.join("serve.log");
        let mut cmd = Command::new(bin);
        // Port 0 everywhere: the kernel picks ports nothing holds, and the server logs them.
        // (Ports picked here and bound later could be taken in between, by another server of
        // this harness or by a client's connection.)
        cmd.arg("serve")
            .args(["--http-addr", "127.0.0.1:0"])
            .args(["--grpc-addr", "127.0.0.1:0"])
            .args(["--thrift-addr", "127.0.0.1:0"])
            .args(["--resp-addr", "127.0.0.1:0"])
            .arg("--state-dir")
            .arg(dir.join("state"))
            .args([
                "--worker-threads",
                "1",
                "--datacenter-id",
                "1",
                "--worker-id",
                &worker_id.to_string(),
            ])
            .args(extra);
        if tls {
            cmd.args(["--admin-addr", "127.0.0.1:0"]);
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .context("starting snowflake serve")?;
        // Constructed before waiting, so a server that never gets ready is stopped on drop.
        let mut sf = SfServer {
            child,
            log,
            http_port: 0,
            grpc_port: 0,
            thrift_port: 0,
            resp_port: 0,
        };
        let deadline = Instant::now() + Duration::from_secs(15);
        let ports = loop {
            let ports = ["http", "grpc", "thrift", "resp", "admin"]
                .map(|front| logged_port(&sf.log_text(), &format!("{front} listening")));
            if ports[..4].iter().all(Option::is_some) && (!tls || ports[4].is_some()) {
                break ports.map(Option::unwrap_or_default);
            }
            sf.check_running()?;
            if Instant::now() > deadline {
                bail!(
                    "snowflake serve logged no listening ports after 15 s: {}",
                    sf.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        [sf.http_port, sf.grpc_port, sf.thrift_port, sf.resp_port] =
            [ports[0], ports[1], ports[2], ports[3]];
        let admin_port = if tls { ports[4] } else { sf.http_port };
        while !http_ok(admin_port, "/readyz") {
            sf.check_running()?;
            if Instant::now() > deadline {
                bail!("snowflake serve not ready after 15 s: {}", sf.log_tail());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(sf)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The port of a `snowflake bench --protocol` (`http`, `grpc` or `thrift`), or `resp`.
    pub fn port(&self, protocol: &str) -> u16 {
        match protocol {
            "grpc" => self.grpc_port,
            "thrift" => self.thrift_port,
            "resp" => self.resp_port,
            _ => self.http_port,
        }
    }

    /// An error (with the end of the server's log) if the server has exited.
    pub fn check_running(&mut self) -> Result<()> {
        match self.child.try_wait()? {
            None => Ok(()),
            Some(status) => bail!("snowflake serve exited ({status}): {}", self.log_tail()),
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn log_tail(&self) -> String {
        let log = self.log_text();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for SfServer {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `snowflake` binary to measure: `$SNOWFLAKE_BIN` when set (the CI smoke run measures the
/// debug build it already has, since its numbers are never used), else the release build,
/// brought up to date with cargo (a stale binary would be measured otherwise).
pub fn sf_binary(root: &Path) -> Result<PathBuf> {
    if let Some(bin) = std::env::var_os("SNOWFLAKE_BIN") {
        let bin = PathBuf::from(bin);
        anyhow::ensure!(
            bin.is_file(),
            "SNOWFLAKE_BIN={} is not a file",
            bin.display()
        );
        return Ok(bin);
    }
    eprintln!("service: cargo build --release -p snowflake-cli");
    run_cmd(Command::new("cargo").current_dir(root).args([
        "build",
        "--release",
        "--locked",
        "-p",
        "snowflake-cli",
    ]))?;
    Ok(root.join("target/release/snowflake"))
}

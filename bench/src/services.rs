//! The servers `service` measures, started on loopback with random free ports and temporary
//! directories: Redis, PostgreSQL, nghttpd, the zero-work gRPC server on h2, the zero-work
//! servers in C and ours (plaintext, and a second one with TLS), stopped on drop.

use crate::ceiling::{self, Ceilings};
use crate::parse;
use crate::server::{SfServer, run_cmd};
use crate::tools::{NGHTTPD_BIN, RedisTarget, next_id_response_frame, redis_benchmark, wrk};
use anyhow::{Context, Result, bail};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `N` distinct free ports (the test kit's), for servers that cannot bind port 0 and say which
/// port they got (ours does, see [`SfServer::start_with`]).
fn free_ports<const N: usize>() -> Result<[u16; N]> {
    let ports = snowflake_testkit::ports::try_free_ports(N)?;
    Ok(ports.try_into().expect("N ports"))
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

/// Redis, PostgreSQL, nghttpd, the zero-work servers in C and our server (plaintext, and a
/// second one with TLS on its HTTP, gRPC and RESP ports), stopped (and their directories
/// removed) on drop.
pub(crate) struct Services {
    pub(crate) work: tempfile::TempDir,
    pub(crate) pg_bin: PathBuf,
    pub(crate) redis: Option<Child>,
    pub(crate) redis_port: u16,
    /// Redis's `--tls-port` (the same server).
    pub(crate) redis_tls_port: u16,
    pub(crate) pg_data: Option<PathBuf>,
    pub(crate) pg_port: u16,
    pub(crate) nghttpd: Option<Child>,
    pub(crate) nghttpd_port: u16,
    pub(crate) h2_zero: Option<Child>,
    pub(crate) h2_zero_port: u16,
    pub(crate) ceilings: Option<Ceilings>,
    pub(crate) sf: Option<SfServer>,
    pub(crate) sf_tls: Option<SfServer>,
}

/// A CA and a server certificate for 127.0.0.1 (RSA 2048, as most deployments have: the keys
/// from openssl, the certificates from the test kit) in `dir`: `ca.crt`, `server.crt`, `server.key`.
fn make_certs(dir: &Path) -> Result<()> {
    use snowflake_testkit::certs::{self, Key, Usage};
    certs::ca_with_key(dir, "ca", "compare-ca", 2, Key::Rsa2048)?;
    certs::issue_with_key(
        dir,
        "server",
        "compare",
        "ca",
        Usage::Server(&["IP:127.0.0.1"]),
        2,
        Key::Rsa2048,
    )?;
    Ok(())
}

impl Services {
    pub(crate) fn start(pg_bin: PathBuf, sf_bin: &Path) -> Result<Services> {
        let work = tempfile::Builder::new()
            .prefix("snowflake-compare-")
            .tempdir()?;
        // PostgreSQL runs as the postgres user, which must reach its data directory.
        run_cmd(Command::new("chmod").arg("755").arg(work.path()))?;
        let [
            redis_port,
            redis_tls_port,
            pg_port,
            nghttpd_port,
            h2_zero_port,
            http1_port,
            resp_port,
        ] = free_ports()?;
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
            h2_zero: None,
            h2_zero_port,
            ceilings: None,
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
        // The zero-work server on h2 is this harness itself, on a hidden subcommand.
        s.h2_zero = Some(
            Command::new(std::env::current_exe().context("the harness's own path")?)
                .arg("zero-work-h2")
                .arg(format!("127.0.0.1:{}", s.h2_zero_port))
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(dir.join("zero-work-h2.log"))?)
                .spawn()
                .context("starting the zero-work gRPC server on h2")?,
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
        let h2_zero_port = s.h2_zero_port;
        wait_until(
            "the zero-work gRPC server on h2",
            Duration::from_secs(10),
            || TcpStream::connect(("127.0.0.1", h2_zero_port)).is_ok(),
        )?;
        s.ceilings = Some(Ceilings::start(&dir, http1_port, resp_port)?);
        // Ours only once the others listen: port 0 could otherwise get a port one of them is
        // about to bind.
        s.sf = Some(SfServer::start(sf_bin, &dir)?);
        let ours = ceiling::id_answer(s.sf().http_port)?;
        ceiling::check_same_shape(&ours, &ceiling::id_answer(http1_port)?)?;
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

    pub(crate) fn pg_args(&self) -> Vec<String> {
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

    pub(crate) fn redis(&self, connections: u32, requests: u64) -> Result<parse::RedisRow> {
        redis_benchmark(
            &RedisTarget::plain(self.redis_port),
            connections,
            1,
            requests,
            None,
        )
    }

    pub(crate) fn ca(&self) -> PathBuf {
        self.work.path().join("ca.crt")
    }

    pub(crate) fn pgbench(&self, clients: u32, secs: u64) -> Result<parse::Pgbench> {
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

    pub(crate) fn sf(&self) -> &SfServer {
        self.sf.as_ref().expect("started in Services::start")
    }

    pub(crate) fn wrk(&self, connections: u32, secs: u64) -> Result<parse::Wrk> {
        wrk(self.sf().http_port, connections, secs)
    }

    pub(crate) fn ceilings(&self) -> &Ceilings {
        self.ceilings.as_ref().expect("started in Services::start")
    }

    pub(crate) fn sf_pid(&self) -> u32 {
        self.sf().pid()
    }

    pub(crate) fn redis_pid(&self) -> u32 {
        self.redis.as_ref().map_or(0, Child::id)
    }
}

impl Drop for Services {
    fn drop(&mut self) {
        // Our servers first (TERM, then KILL), as before their state directories go.
        drop(self.sf.take());
        drop(self.sf_tls.take());
        drop(self.ceilings.take());
        for mut child in [self.redis.take(), self.nghttpd.take(), self.h2_zero.take()]
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

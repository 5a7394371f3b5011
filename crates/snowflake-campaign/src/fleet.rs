//! The fleet under test: a 3-member etcd and `snowflake serve` nodes, each in its own
//! namespace of the [`Lab`], node clocks under libfaketime; in secure mode with TLS and
//! credentials everywhere (see `secure.rs`).

use crate::lab::{Lab, Proc, run};
use crate::mode::Mode;
use crate::secure::{EtcdUser, Secure};
use anyhow::{Context, bail};
use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod access;
mod marks;
mod members;
mod refusals;

pub use access::Access;
pub use marks::MarkReader;
use members::{ZOOKEEPER_JAR, endpoints, etcd_args, zookeeper_args};
pub use refusals::Check;

/// The etcd key prefix of the campaign's fleet.
pub const PREFIX: &str = "/campaign";
/// The ZooKeeper path of the campaign's fleet (its marks are under `PATH-marks`).
pub const ZK_PATH: &str = "/campaign-servers";
/// The nodes' ZooKeeper session timeout: short, so that takeovers happen within a campaign.
pub const ZK_SESSION_TIMEOUT_MS: u64 = 4000;

/// Lease TTL of the nodes: short, so that takeovers happen within a campaign.
pub const LEASE_TTL_SECS: u64 = 3;
/// How long a forward clock step must hold before a node trusts it.
pub const TRUST_SECS: u64 = 3;
/// The size of each node's state filesystem (a tmpfs of its own, so that it can be filled).
pub const STATE_FS_BYTES: usize = 1 << 20;
/// How far ahead of the clock marks are reserved (the service's default).
pub const RESERVE_MS: u64 = 3000;
/// A forward step up to this is trusted at once (the service's default).
pub const MAX_CLOCK_STEP_MS: u64 = 1000;

/// What the fleet needs from the machine.
#[derive(Debug, Clone)]
pub struct Tools {
    pub snowflake: PathBuf,
    pub etcd: PathBuf,
    pub etcdctl: PathBuf,
    pub java: PathBuf,
    pub libfaketime: PathBuf,
}

impl Tools {
    /// Finds the tools: `snowflake` beside this binary (or `$SNOWFLAKE_BIN`), etcd and etcdctl
    /// on the PATH, libfaketime at `$SNOWFLAKE_TEST_LIBFAKETIME` or Debian's place.
    pub fn find() -> anyhow::Result<Tools> {
        let snowflake = snowflake_testkit::binary::try_snowflake().map_err(anyhow::Error::msg)?;
        let which = |name: &str| -> anyhow::Result<PathBuf> {
            let out = Command::new("sh")
                .args(["-c", &format!("command -v {name}")])
                .output()?;
            let path = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            if path.is_empty() {
                bail!("{name} is not installed (Debian: etcd-server, etcd-client)");
            }
            Ok(PathBuf::from(path))
        };
        let libfaketime = std::env::var_os("SNOWFLAKE_TEST_LIBFAKETIME").map_or_else(
            || PathBuf::from("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"),
            PathBuf::from,
        );
        if !libfaketime.exists() {
            bail!("{} is missing (Debian: libfaketime)", libfaketime.display());
        }
        for tool in ["nft", "ip"] {
            which(tool)?;
        }
        if !Path::new(ZOOKEEPER_JAR).exists() {
            bail!("{ZOOKEEPER_JAR} is missing (Debian: zookeeper)");
        }
        Ok(Tools {
            snowflake,
            etcd: which("etcd")?,
            etcdctl: which("etcdctl")?,
            java: which("java")?,
            libfaketime,
        })
    }
}

/// An etcd member.
#[derive(Debug)]
pub struct Member {
    pub name: String,
    pub ip: Ipv4Addr,
    pub proc: Proc,
}

/// A `snowflake serve` node.
#[derive(Debug)]
pub struct Node {
    pub name: String,
    pub ip: Ipv4Addr,
    /// Where readiness is asked: the HTTP listener, or in secure mode the admin listener
    /// (plaintext, no client certificate).
    probe: SocketAddr,
    args: Vec<String>,
    envs: Vec<(String, String)>,
    pub clock_file: PathBuf,
    pub state_dir: PathBuf,
    pub proc: Option<Proc>,
    /// How many times it was started, for log names.
    starts: u32,
    dir: PathBuf,
}

impl Node {
    pub fn http(&self) -> SocketAddr {
        SocketAddr::from((self.ip, 8080))
    }
    pub fn grpc(&self) -> SocketAddr {
        SocketAddr::from((self.ip, 50051))
    }
    pub fn thrift(&self) -> SocketAddr {
        SocketAddr::from((self.ip, 7609))
    }
    pub fn resp(&self) -> SocketAddr {
        SocketAddr::from((self.ip, 6380))
    }
}

/// What an operator's deletion of a claim did.
#[derive(Debug, Clone)]
pub struct Deleted {
    /// Secure mode: whether the same deletion without credentials was refused first
    /// (`None`: not tried, or the claim was gone meanwhile).
    pub refused_without_auth: Option<bool>,
}

/// The fleet, and the lab it runs in (dropped last: it kills what is left).
#[derive(Debug)]
pub struct Fleet {
    pub mode: Mode,
    /// The secure mode's files and secrets; `None`: plaintext, no credentials.
    pub secure: Option<Arc<Secure>>,
    /// How the campaign reaches the coordination service.
    pub access: Access,
    /// The secure mode's checks made at start.
    pub checks: Vec<Check>,
    /// The coordination service's members: etcd members or ZooKeeper servers.
    pub members: Vec<Member>,
    pub nodes: Vec<Node>,
    pub tools: Tools,
    /// The state filesystems mounted, unmounted when dropped.
    mounts: Vec<PathBuf>,
    pub lab: Lab,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        // The processes first (their files keep a mount busy).
        for node in &mut self.nodes {
            if let Some(mut proc) = node.proc.take() {
                let _ = proc.signal("CONT");
                let _ = proc.child.kill();
                let _ = proc.child.wait();
            }
        }
        for mount in &self.mounts {
            let _ = run("umount", &["-l", mount.to_str().unwrap_or_default()]);
        }
    }
}

impl Fleet {
    /// Starts a 3-member etcd (or ZooKeeper) and `nodes` nodes; returns once the coordination
    /// service is healthy and every node is ready. `secure`: TLS and credentials everywhere
    /// (`secure.rs`), with `break_node_auth` the last node given a wrong password (it must stop
    /// the start, with its log).
    pub fn start(
        tools: Tools,
        mode: Mode,
        nodes: usize,
        dir: &Path,
        secure: bool,
        break_node_auth: bool,
        layout: &snowflake_core::Layout,
    ) -> anyhow::Result<Fleet> {
        let mut lab = Lab::new()?;
        lab.connect_self()?;
        let letter = match mode {
            Mode::Etcd => "e",
            Mode::Zookeeper => "z",
        };
        let names: Vec<String> = (1..=3).map(|i| format!("{letter}{i}")).collect();
        let ips: Vec<Ipv4Addr> = (0..3)
            .map(|i| lab.add_host(&names[i], 11 + u8::try_from(i).expect("3")))
            .collect::<anyhow::Result<_>>()?;
        let node_octets: Vec<u8> = (0..nodes)
            .map(|i| u8::try_from(i).ok().and_then(|i| i.checked_add(21)))
            .collect::<Option<_>>()
            .context("too many nodes")?;
        let secure = if secure {
            let node_ips: Vec<Ipv4Addr> = node_octets.iter().map(|&o| lab.address(o)).collect();
            let secure = Secure::create(&dir.join("secure"), &ips, &node_ips)
                .context("making the secure mode's certificates")?;
            if break_node_auth {
                secure.write_wrong_password()?;
            }
            Some(Arc::new(secure))
        } else {
            None
        };
        let mut members = Vec::new();
        for (i, (name, ip)) in names.iter().zip(&ips).enumerate() {
            let (program, args, envs) = match mode {
                Mode::Etcd => (
                    tools.etcd.clone(),
                    etcd_args(name, *ip, &names, &ips, dir, secure.as_deref())?,
                    vec![],
                ),
                Mode::Zookeeper => (
                    tools.java.clone(),
                    zookeeper_args(i, *ip, &ips, dir, secure.as_deref())?,
                    vec![],
                ),
            };
            let proc = lab.spawn(
                name,
                &program,
                &args,
                &envs,
                &dir.join(format!("{name}.log")),
            )?;
            members.push(Member {
                name: name.clone(),
                ip: *ip,
                proc,
            });
        }
        let access = Access {
            endpoints: endpoints(mode, &ips, secure.is_some()),
            etcdctl: tools.etcdctl.clone(),
            four_letter: match &secure {
                Some(secure) => Some(secure.client_tls(true)?.plain),
                None => None,
            },
            secure: secure.clone(),
        };
        let mut fleet = Fleet {
            mode,
            secure,
            access,
            checks: Vec::new(),
            members,
            nodes: Vec::new(),
            tools,
            mounts: Vec::new(),
            lab,
        };
        fleet.wait_coordinator(Duration::from_secs(40))?;
        if let (Some(secure), Mode::Etcd) = (&fleet.secure, mode) {
            fleet.checks = fleet
                .secure_etcd(secure)
                .context("turning etcd's auth on")?;
        }
        let endpoints = fleet.endpoints();
        for (i, &octet) in node_octets.iter().enumerate() {
            let name = format!("n{}", i + 1);
            let ip = fleet.lab.add_host(&name, octet)?;
            let clock_file = dir.join(format!("{name}.faketime"));
            set_clock_file(&clock_file, "+0")?;
            let state_dir = dir.join(format!("{name}.state"));
            std::fs::create_dir_all(&state_dir)?;
            run(
                "mount",
                &[
                    "-t",
                    "tmpfs",
                    "-o",
                    &format!("size={STATE_FS_BYTES}"),
                    "campaign",
                    state_dir.to_str().context("path")?,
                ],
            )?;
            fleet.mounts.push(state_dir.clone());
            let args: Vec<String> = [
                "serve",
                "--http-addr",
                &format!("{ip}:8080"),
                "--grpc-addr",
                &format!("{ip}:50051"),
                "--thrift-addr",
                &format!("{ip}:7609"),
                "--resp-addr",
                &format!("{ip}:6380"),
                "--advertise-addr",
                &format!("{ip}:7609"),
                match mode {
                    Mode::Etcd => "--etcd-endpoints",
                    Mode::Zookeeper => "--zookeeper",
                },
                &endpoints,
                match mode {
                    Mode::Etcd => "--etcd-prefix",
                    Mode::Zookeeper => "--zookeeper-path",
                },
                match mode {
                    Mode::Etcd => PREFIX,
                    Mode::Zookeeper => ZK_PATH,
                },
                match mode {
                    Mode::Etcd => "--lease-ttl-secs",
                    Mode::Zookeeper => "--zookeeper-session-timeout-ms",
                },
                &match mode {
                    Mode::Etcd => LEASE_TTL_SECS.to_string(),
                    Mode::Zookeeper => ZK_SESSION_TIMEOUT_MS.to_string(),
                },
                "--clock-step-trust-secs",
                &TRUST_SECS.to_string(),
                "--max-clock-step-ms",
                &MAX_CLOCK_STEP_MS.to_string(),
                "--reserve-ms",
                &RESERVE_MS.to_string(),
                "--state-dir",
                state_dir.to_str().context("path")?,
                "--worker-threads",
                "1",
                "--shutdown-timeout-ms",
                "3000",
                "--layout",
                &layout.name(),
            ]
            .iter()
            .map(ToString::to_string)
            .collect();
            let mut args = args;
            let mut probe = SocketAddr::from((ip, 8080));
            if let Some(secure) = &fleet.secure {
                args.extend(secure.node_args(mode, ip, break_node_auth && i + 1 == nodes));
                probe = SocketAddr::from((ip, crate::secure::ADMIN_PORT));
            }
            let envs = vec![
                (
                    "LD_PRELOAD".into(),
                    fleet.tools.libfaketime.display().to_string(),
                ),
                (
                    "FAKETIME_TIMESTAMP_FILE".into(),
                    clock_file.display().to_string(),
                ),
                ("FAKETIME_NO_CACHE".into(), "1".into()),
                ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
                ("RUST_LOG".into(), "info".into()),
            ];
            fleet.nodes.push(Node {
                name,
                ip,
                probe,
                args,
                envs,
                clock_file,
                state_dir,
                proc: None,
                starts: 0,
                dir: dir.to_path_buf(),
            });
            fleet.start_node(i)?;
        }
        for i in 0..nodes {
            fleet.wait_ready(i, Duration::from_secs(30))?;
        }
        if let (Some(secure), Mode::Zookeeper) = (&fleet.secure, mode) {
            let checks = fleet.secure_zookeeper_checks(secure)?;
            fleet.checks.extend(checks);
        }
        Ok(fleet)
    }

    /// The nodes' `--etcd-endpoints` (`http://IP:2379,…`, `https://` in secure mode) or
    /// `--zookeeper` (`IP:2181,…`, the TLS port 2281 in secure mode).
    pub fn endpoints(&self) -> String {
        self.access.endpoints.clone()
    }

    /// An operator deletes one held claim: an etcd claim key, or a node's ephemeral znode.
    /// Returns `None` when nothing was held. In secure mode the operator first
    /// tries without credentials (a client certificate only), which must be refused, then as
    /// itself: etcd's operator user, or ZooKeeper's fleet identity (the znodes' ACL grants only
    /// it).
    pub fn delete_claim(&self, pick: u64) -> anyhow::Result<Option<Deleted>> {
        let secure = self.secure.clone();
        match self.mode {
            Mode::Etcd => {
                let keys = self.etcdctl(&[
                    "get",
                    "--prefix",
                    "--keys-only",
                    &format!("{PREFIX}/workers/"),
                ])?;
                let keys: Vec<&str> = keys.lines().filter(|l| !l.is_empty()).collect();
                if keys.is_empty() {
                    return Ok(None);
                }
                let key = keys[usize::try_from(pick % keys.len() as u64).unwrap_or(0)];
                let refused_without_auth = match secure {
                    Some(_) => match self.access.etcdctl(EtcdUser::Nobody, &["del", key]) {
                        // Deleted without credentials: the fault happened, the check failed.
                        Ok(_) => Some(false),
                        Err(e) => Some(format!("{e:#}").contains("permission denied")),
                    },
                    None => None,
                };
                if refused_without_auth != Some(false) {
                    self.etcdctl(&["del", key])?;
                }
                Ok(Some(Deleted {
                    refused_without_auth,
                }))
            }
            Mode::Zookeeper => self.access.zookeeper(async |client| {
                let mut workers = client.list_children(ZK_PATH).await?;
                if workers.is_empty() {
                    return Ok(None);
                }
                workers.sort();
                let path = format!(
                    "{ZK_PATH}/{}",
                    workers[usize::try_from(pick % workers.len() as u64).unwrap_or(0)]
                );
                let mut refused_without_auth = None;
                if let Some(secure) = &secure {
                    match client.delete(&path, None).await {
                        Err(zookeeper_client::Error::NoAuth) => refused_without_auth = Some(true),
                        Err(zookeeper_client::Error::NoNode) => {}
                        Err(e) => return Err(e.into()),
                        Ok(()) => {
                            return Ok(Some(Deleted {
                                refused_without_auth: Some(false),
                            }));
                        }
                    }
                    client.auth("digest", secure.zk_auth().as_bytes()).await?;
                }
                match client.delete(&path, None).await {
                    Ok(()) | Err(zookeeper_client::Error::NoNode) => Ok(Some(Deleted {
                        refused_without_auth,
                    })),
                    Err(e) => Err(e.into()),
                }
            }),
        }
    }

    /// The index of the member that leads.
    pub fn leader(&self) -> Option<usize> {
        match self.mode {
            Mode::Etcd => {
                let out = self.etcdctl(&["endpoint", "status", "-w", "json"]).ok()?;
                let statuses: serde_json::Value = serde_json::from_str(&out).ok()?;
                for status in statuses.as_array()? {
                    let id = status["Status"]["header"]["member_id"].as_u64()?;
                    let leader = status["Status"]["leader"].as_u64()?;
                    if id == leader {
                        let endpoint = status["Endpoint"].as_str()?;
                        return self
                            .members
                            .iter()
                            .position(|m| endpoint.contains(&m.ip.to_string()));
                    }
                }
                None
            }
            Mode::Zookeeper => self.members.iter().position(|m| {
                self.access
                    .four_letter(m.ip, "srvr")
                    .contains("Mode: leader")
            }),
        }
    }

    /// etcdctl against every member (as the operator in secure mode); its stdout.
    pub fn etcdctl(&self, args: &[&str]) -> anyhow::Result<String> {
        self.access.etcdctl(EtcdUser::Operator, args)
    }

    fn wait_coordinator(&self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let healthy = match self.mode {
                // Before auth is on (secure mode): the client certificate only.
                Mode::Etcd => self
                    .access
                    .etcdctl(EtcdUser::Nobody, &["put", &format!("{PREFIX}/ping"), "1"])
                    .is_ok(),
                Mode::Zookeeper => self.leader().is_some(),
            };
            if healthy {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "the coordination service did not become healthy in {timeout:?}: {}",
                    self.members[0].proc.tail(20)
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Starts node `i` (again) with its state directory and clock.
    pub fn start_node(&mut self, i: usize) -> anyhow::Result<()> {
        let node = &mut self.nodes[i];
        node.starts += 1;
        let log = node.dir.join(format!("{}.{}.log", node.name, node.starts));
        let proc = self.lab.spawn(
            &node.name,
            &self.tools.snowflake,
            &node.args,
            &node.envs,
            &log,
        )?;
        node.proc = Some(proc);
        Ok(())
    }

    /// The supervisor's round (as systemd's `Restart=on-failure` or a Kubernetes pod would do):
    /// restarts every node whose process exited by itself, e.g. after it lost its pair to
    /// another node, which the service answers by stopping. Returns what it restarted.
    pub fn restart_exited(&mut self) -> Vec<String> {
        let mut restarted = Vec::new();
        for i in 0..self.nodes.len() {
            let exited = match &mut self.nodes[i].proc {
                Some(proc) => proc.child.try_wait().ok().flatten(),
                None => None,
            };
            if let Some(status) = exited {
                self.nodes[i].proc = None;
                let note = format!("{} exited by itself ({status})", self.nodes[i].name);
                match self.start_node(i) {
                    Ok(()) => restarted.push(format!("{note}; restarted")),
                    Err(e) => restarted.push(format!("{note}; cannot restart it: {e:#}")),
                }
            }
        }
        restarted
    }

    /// Waits until node `i` answers `/readyz` with 200 (on its admin listener in secure
    /// mode); fails at once, with its log, when the process exited.
    pub fn wait_ready(&mut self, i: usize, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        let addr = self.nodes[i].probe;
        loop {
            if http_status(addr, "/readyz") == Some(200) {
                return Ok(());
            }
            let node = &mut self.nodes[i];
            if let Some(proc) = &mut node.proc
                && let Ok(Some(status)) = proc.child.try_wait()
            {
                bail!(
                    "node {} exited ({status}) instead of becoming ready:\n{}",
                    node.name,
                    proc.tail(20)
                );
            }
            if Instant::now() > deadline {
                let tail = self.nodes[i]
                    .proc
                    .as_ref()
                    .map_or(String::new(), |p| p.tail(20));
                bail!(
                    "node {} not ready in {timeout:?}:\n{tail}",
                    self.nodes[i].name
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// What reads the marks, usable without holding the fleet (reads can take seconds while
    /// the coordination service is faulty).
    pub fn mark_reader(&self) -> MarkReader {
        MarkReader {
            mode: self.mode,
            access: self.access.clone(),
            state_dirs: self.nodes.iter().map(|n| n.state_dir.clone()).collect(),
        }
    }

    /// The highest mark of each pair in the coordination service.
    pub fn fleet_marks(&self) -> anyhow::Result<HashMap<(u64, u64), u64>> {
        self.mark_reader().coordination()
    }

    /// The marks in every node's state directory: (node, datacenter, worker) → ms.
    pub fn local_marks(&self) -> HashMap<(usize, u64, u64), u64> {
        self.mark_reader().local()
    }
}

/// Writes a libfaketime offset (`+0`, `-5`, `+631152000`) atomically.
pub fn set_clock_file(path: &Path, offset: &str) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("{offset}\n"))?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

/// The status of `GET path` (blocking, short timeouts), or `None` without an answer.
pub fn http_status(addr: SocketAddr, path: &str) -> Option<u16> {
    use std::io::{Read, Write};
    let mut tcp = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(300)).ok()?;
    tcp.set_read_timeout(Some(Duration::from_millis(500)))
        .ok()?;
    write!(
        tcp,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut head = [0u8; 12];
    tcp.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

/// Best effort: heal everything that a fault may have left (for the end of a campaign).
pub fn heal_all(fleet: &Fleet) {
    for member in &fleet.members {
        let _ = member.proc.signal("CONT");
        let _ = fleet.lab.set_link(&member.name, true);
        let _ = fleet.lab.unblock(&member.name);
    }
    for node in &fleet.nodes {
        if let Some(proc) = &node.proc {
            let _ = proc.signal("CONT");
        }
        let _ = fleet.lab.set_link(&node.name, true);
        let _ = fleet.lab.unblock(&node.name);
        let _ = set_clock_file(&node.clock_file, "+0");
    }
    let _ = run("true", &[]);
}

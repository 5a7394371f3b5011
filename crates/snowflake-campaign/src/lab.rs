//! The lab: one network namespace per process on a private bridge, and the processes in them.
//!
//! A switch namespace holds a bridge; every host (an etcd member, a node) is a namespace with a
//! veth into it and an address in a private /24 that exists only inside this lab. The campaign
//! itself reaches them through one more veth from its own namespace into the bridge (a route to
//! that /24 only). Faults are applied with the tools an operator has: `ip link set … down` cuts
//! a host off, an nftables table in a host's namespace drops its traffic to chosen peers, and
//! signals stop, continue and kill processes. Everything is removed when the lab is dropped:
//! processes first (`ip netns del` does not kill them), then namespaces and the host veth.

use anyhow::{Context, bail};
use std::fs::File;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Runs a command to completion; its stderr in the error.
pub fn run(program: &str, args: &[&str]) -> anyhow::Result<()> {
    let output = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {program}"))?;
    if !output.status.success() {
        bail!(
            "{program} {} failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(())
}

/// The namespaces, the bridge and the address plan.
#[derive(Debug)]
pub struct Lab {
    /// Prefix of every namespace and interface name (short: interface names have 15 bytes).
    prefix: String,
    /// The third octet of the lab's 10.213.X.0/24.
    subnet: u8,
    /// Host namespaces created so far (names without the prefix).
    hosts: Vec<String>,
    /// The campaign's own veth, once added.
    host_link: bool,
}

impl Lab {
    /// A new, empty lab for this process.
    pub fn new() -> anyhow::Result<Lab> {
        if !rustix::process::geteuid().is_root() {
            bail!("the campaign creates network namespaces: run it as root");
        }
        let pid = std::process::id();
        let lab = Lab {
            prefix: format!("sf{:x}", pid & 0xffff),
            subnet: u8::try_from(20 + pid % 200).expect("below 256"),
            hosts: Vec::new(),
            host_link: false,
        };
        let sw = lab.switch();
        run("ip", &["netns", "add", &sw])?;
        run("ip", &["-n", &sw, "link", "add", "br0", "type", "bridge"])?;
        run("ip", &["-n", &sw, "link", "set", "br0", "up"])?;
        Ok(lab)
    }

    fn switch(&self) -> String {
        format!("{}sw", self.prefix)
    }

    /// The namespace of host `name`.
    pub fn namespace(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// The address of the host numbered `octet`.
    pub fn address(&self, octet: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, 213, self.subnet, octet)
    }

    /// Adds host `name` (a few letters) at address number `octet`.
    pub fn add_host(&mut self, name: &str, octet: u8) -> anyhow::Result<Ipv4Addr> {
        let ns = self.namespace(name);
        let sw = self.switch();
        let addr = self.address(octet);
        run("ip", &["netns", "add", &ns])?;
        self.hosts.push(name.to_owned());
        run(
            "ip",
            &[
                "link", "add", "eth0", "netns", &ns, "type", "veth", "peer", "name", name, "netns",
                &sw,
            ],
        )?;
        run("ip", &["-n", &sw, "link", "set", name, "master", "br0"])?;
        run("ip", &["-n", &sw, "link", "set", name, "up"])?;
        run(
            "ip",
            &[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                "eth0",
            ],
        )?;
        run("ip", &["-n", &ns, "link", "set", "eth0", "up"])?;
        run("ip", &["-n", &ns, "link", "set", "lo", "up"])?;
        Ok(addr)
    }

    /// Connects the campaign's own namespace to the bridge at address number 254.
    pub fn connect_self(&mut self) -> anyhow::Result<()> {
        let link = format!("{}h", self.prefix);
        let sw = self.switch();
        run(
            "ip",
            &[
                "link", "add", &link, "type", "veth", "peer", "name", "self", "netns", &sw,
            ],
        )?;
        self.host_link = true;
        run("ip", &["-n", &sw, "link", "set", "self", "master", "br0"])?;
        run("ip", &["-n", &sw, "link", "set", "self", "up"])?;
        let addr = format!("{}/24", self.address(254));
        run("ip", &["addr", "add", &addr, "dev", &link])?;
        run("ip", &["link", "set", &link, "up"])?;
        Ok(())
    }

    /// Cuts host `name` off the bridge (`up = false`) or reconnects it.
    pub fn set_link(&self, name: &str, up: bool) -> anyhow::Result<()> {
        let state = if up { "up" } else { "down" };
        run("ip", &["-n", &self.switch(), "link", "set", name, state])
    }

    /// Drops every packet between host `name` and `peers` (both ways), until [`Lab::unblock`].
    pub fn block(&self, name: &str, peers: &[Ipv4Addr]) -> anyhow::Result<()> {
        let set = peers
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        let rules = format!(
            "table inet chaos {{\n\
             chain out {{ type filter hook output priority 0; ip daddr {{ {set} }} drop; }}\n\
             chain in {{ type filter hook input priority 0; ip saddr {{ {set} }} drop; }}\n\
             }}\n"
        );
        let file = tempfile::NamedTempFile::new()?;
        std::fs::write(file.path(), rules)?;
        let path = file.path().to_str().context("temp path")?;
        run(
            "ip",
            &["netns", "exec", &self.namespace(name), "nft", "-f", path],
        )
    }

    /// Removes what [`Lab::block`] added.
    pub fn unblock(&self, name: &str) -> anyhow::Result<()> {
        run(
            "ip",
            &[
                "netns",
                "exec",
                &self.namespace(name),
                "nft",
                "delete",
                "table",
                "inet",
                "chaos",
            ],
        )
    }

    /// Starts `program args` in host `name`'s namespace with `envs`, its output in `log`.
    pub fn spawn(
        &self,
        name: &str,
        program: &Path,
        args: &[String],
        envs: &[(String, String)],
        log: &Path,
    ) -> anyhow::Result<Proc> {
        let out = File::create(log).with_context(|| format!("cannot create {}", log.display()))?;
        let err = out.try_clone()?;
        let child = Command::new("ip")
            .args(["netns", "exec", &self.namespace(name)])
            .arg(program)
            .args(args)
            .envs(envs.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("cannot start {} in {name}", program.display()))?;
        Ok(Proc {
            child,
            log: log.to_path_buf(),
        })
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for name in &self.hosts {
            let ns = self.namespace(name);
            if let Ok(out) = Command::new("ip").args(["netns", "pids", &ns]).output() {
                for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                    // Continue first: a stopped process does not die of SIGKILL until continued
                    // on some kernels' accounting, and a continued one surely does.
                    let _ = run("kill", &["-CONT", pid]);
                    let _ = run("kill", &["-KILL", pid]);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(200));
        for name in &self.hosts {
            let _ = run("ip", &["netns", "del", &self.namespace(name)]);
        }
        let _ = run("ip", &["netns", "del", &self.switch()]);
        if self.host_link {
            let _ = run("ip", &["link", "del", &format!("{}h", self.prefix)]);
        }
    }
}

/// A process started in the lab.
#[derive(Debug)]
pub struct Proc {
    pub child: Child,
    pub log: PathBuf,
}

impl Proc {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (`KILL`, `TERM`, `STOP`, `CONT`).
    pub fn signal(&self, signal: &str) -> anyhow::Result<()> {
        run("kill", &[&format!("-{signal}"), &self.pid().to_string()])
    }

    /// Waits for the process to exit, at most `timeout`; kills it after that.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.signal("CONT");
        let _ = self.child.kill();
        self.child.wait().ok()
    }

    /// The last `lines` lines of the process's output.
    pub fn tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

//! Access: how the campaign itself reaches the coordination service (etcdctl, a ZooKeeper
//! session, the four-letter words), in secure mode with its TLS identity and credentials.

use crate::secure::{EtcdUser, Secure, ZK_SECURE_PORT};
use anyhow::{Context, bail};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

/// How the campaign itself reaches the coordination service (its etcdctl and ZooKeeper
/// sessions): the endpoints, and in secure mode its TLS identity and credentials. Cloned into
/// the mark reader, so usable without holding the fleet.
#[derive(Debug, Clone)]
pub struct Access {
    /// etcd's client URLs or ZooKeeper's connect string.
    pub(super) endpoints: String,
    pub(super) etcdctl: PathBuf,
    pub(super) secure: Option<Arc<Secure>>,
    /// TLS for ZooKeeper's four-letter words (secure mode: there is no plaintext port).
    pub(super) four_letter: Option<Arc<rustls::ClientConfig>>,
}

impl Access {
    /// etcdctl against every member as `who` (ignored without secure mode); its stdout.
    pub fn etcdctl(&self, who: EtcdUser, args: &[&str]) -> anyhow::Result<String> {
        self.etcdctl_with_input(who, args, None)
    }

    /// [`Access::etcdctl`] with `input` on its stdin (a new user's password).
    pub(super) fn etcdctl_with_input(
        &self,
        who: EtcdUser,
        args: &[&str],
        input: Option<&str>,
    ) -> anyhow::Result<String> {
        use std::io::Write;
        use std::process::Stdio;
        let mut command = Command::new(&self.etcdctl);
        command
            .env("ETCDCTL_API", "3")
            .env_remove("ETCDCTL_USER")
            .arg(format!("--endpoints={}", self.endpoints))
            .args(["--dial-timeout=1s", "--command-timeout=3s"]);
        if let Some(secure) = &self.secure {
            command.args(secure.etcdctl_tls_args());
            if let Some(user) = secure.etcdctl_user(who) {
                // In the environment: a command line is visible to every user.
                command.env("ETCDCTL_USER", user);
            }
        }
        let mut child = command
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let mut stdin = child.stdin.take().context("etcdctl's stdin")?;
        if let Some(input) = input {
            stdin.write_all(input.as_bytes())?;
        }
        drop(stdin);
        let out = child.wait_with_output()?;
        if !out.status.success() {
            bail!(
                "etcdctl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// A ZooKeeper session (over TLS with the campaign's certificate in secure mode, without
    /// the fleet's digest identity: add it with `Client::auth` where needed), run to
    /// completion.
    pub fn zookeeper<T>(
        &self,
        call: impl AsyncFnOnce(&zookeeper_client::Client) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        let tls = match &self.secure {
            Some(secure) => Some(secure.zookeeper_tls()?),
            None => None,
        };
        with_zookeeper(&self.endpoints, tls, call)
    }

    /// A ZooKeeper four-letter word to the server at `ip`.
    pub(super) fn four_letter(&self, ip: Ipv4Addr, command: &str) -> String {
        match &self.four_letter {
            Some(tls) => {
                crate::secure::four_letter_tls(tls, SocketAddr::from((ip, ZK_SECURE_PORT)), command)
            }
            None => four_letter(SocketAddr::from((ip, 2181)), command),
        }
    }
}

/// A ZooKeeper session on `servers` (over TLS with `tls`) for the campaign's own reads and
/// deletions, run to completion.
fn with_zookeeper<T>(
    servers: &str,
    tls: Option<zookeeper_client::TlsOptions>,
    call: impl AsyncFnOnce(&zookeeper_client::Client) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut connector = zookeeper_client::Client::connector();
        connector = connector.with_session_timeout(Duration::from_secs(6));
        let connect = async {
            match tls {
                Some(tls) => connector.with_tls(tls).secure_connect(servers).await,
                None => connector.connect(servers).await,
            }
        };
        let client = tokio::time::timeout(Duration::from_secs(8), connect)
            .await
            .context("no ZooKeeper session within 8 s")??;
        tokio::time::timeout(Duration::from_secs(8), call(&client))
            .await
            .context("ZooKeeper did not answer within 8 s")?
    })
}

/// A ZooKeeper four-letter command's answer (empty without one).
fn four_letter(addr: SocketAddr, command: &str) -> String {
    use std::io::{Read, Write};
    let Ok(mut tcp) = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500))
    else {
        return String::new();
    };
    let _ = tcp.set_read_timeout(Some(Duration::from_secs(1)));
    let _ = tcp.write_all(command.as_bytes());
    let mut out = String::new();
    let _ = tcp.read_to_string(&mut out);
    out
}

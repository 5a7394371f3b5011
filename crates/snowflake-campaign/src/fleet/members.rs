//! The coordination service's members: the endpoints the nodes and the campaign use, and the
//! command lines of etcd members and ZooKeeper servers (in secure mode with TLS).
//!
//! Not `snowflake_testkit`'s `EtcdCluster` and `ZooKeeper`, on purpose: those start members
//! on loopback at random ports (ZooKeeper standalone, where the campaign runs an ensemble of
//! three), own the child processes and check health from the host, which is what a test wants. Here each member is a host of the lab (its own network namespace,
//! started by `ip netns exec`, at a fixed address the faults partition and the nodes' flags
//! name), with the secure mode's TLS arguments, and its process belongs to the lab, which
//! pauses, kills and restarts it as the faults say. What both share, the test certificates
//! and the `snowflake` binary's lookup, comes from the testkit.

use super::Mode;
use crate::secure::{Secure, ZK_SECURE_PORT};
use anyhow::{Context, bail};
use std::net::Ipv4Addr;
use std::path::Path;

/// ZooKeeper's jar and SLF4J's simple binding (Debian's `zookeeper`, `libslf4j-java`).
pub(super) const ZOOKEEPER_JAR: &str = "/usr/share/java/zookeeper.jar";

const SLF4J_SIMPLE_JAR: &str = "/usr/share/java/slf4j-simple.jar";

/// What ZooKeeper's Netty server needs on the class path for a TLS client port (Debian's
/// `libnetty-java`), beyond the jars ZooKeeper's manifest names (COMPONENTS.md §8).
const NETTY_JARS: [&str; 3] = [
    "/usr/share/java/netty-codec.jar",
    "/usr/share/java/netty-resolver.jar",
    "/usr/share/java/netty-transport-native-unix-common.jar",
];

/// The coordination service's client endpoints for members at `ips`: etcd's client URLs
/// (`http://IP:2379,…`, `https://` in secure mode) or ZooKeeper's connect string (`IP:2181,…`,
/// the TLS port 2281 in secure mode).
pub(super) fn endpoints(mode: Mode, ips: &[Ipv4Addr], secure: bool) -> String {
    ips.iter()
        .map(|ip| match (mode, secure) {
            (Mode::Etcd, false) => format!("http://{ip}:2379"),
            (Mode::Etcd, true) => format!("https://{ip}:2379"),
            (Mode::Zookeeper, false) => format!("{ip}:2181"),
            (Mode::Zookeeper, true) => format!("{ip}:{ZK_SECURE_PORT}"),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// An etcd member's command line; with `secure`, clients over https with client certificates
/// (peers stay http inside the lab).
pub(super) fn etcd_args(
    name: &str,
    ip: Ipv4Addr,
    names: &[String],
    ips: &[Ipv4Addr],
    dir: &Path,
    secure: Option<&Secure>,
) -> anyhow::Result<Vec<String>> {
    let cluster = names
        .iter()
        .zip(ips)
        .map(|(n, ip)| format!("{n}=http://{ip}:2380"))
        .collect::<Vec<_>>()
        .join(",");
    let data = dir.join(format!("{name}.etcd"));
    let client_url = endpoints(Mode::Etcd, &[ip], secure.is_some());
    let mut args: Vec<String> = [
        "--name",
        name,
        "--data-dir",
        data.to_str().context("path")?,
        "--listen-client-urls",
        &client_url,
        "--advertise-client-urls",
        &client_url,
        "--listen-peer-urls",
        &format!("http://{ip}:2380"),
        "--initial-advertise-peer-urls",
        &format!("http://{ip}:2380"),
        "--initial-cluster",
        &cluster,
        "--initial-cluster-state",
        "new",
        "--initial-cluster-token",
        "campaign",
        "--heartbeat-interval",
        "100",
        "--election-timeout",
        "1000",
    ]
    .iter()
    .map(ToString::to_string)
    .collect();
    if let Some(secure) = secure {
        args.extend(secure.etcd_member_args());
    }
    Ok(args)
}

/// A ZooKeeper server's command line: server `index` (0-based) of an ensemble
/// of `ips`, tick 200 ms, its configuration and data under `dir`.
pub(super) fn zookeeper_args(
    index: usize,
    ip: Ipv4Addr,
    ips: &[Ipv4Addr],
    dir: &Path,
    secure: Option<&Secure>,
) -> anyhow::Result<Vec<String>> {
    let home = dir.join(format!("z{}.zk", index + 1));
    let data = home.join("data");
    std::fs::create_dir_all(&data)?;
    std::fs::write(data.join("myid"), format!("{}\n", index + 1))?;
    let mut config = format!(
        "tickTime=200\ninitLimit=50\nsyncLimit=10\nmaxSessionTimeout=20000\n\
         dataDir={}\nadmin.enableServer=false\n4lw.commands.whitelist=ruok,srvr,stat,mntr\n",
        data.display()
    );
    match secure {
        // A TLS client port only: nobody reaches the ensemble in plaintext.
        Some(secure) => config.push_str(&secure.zookeeper_config(ip)),
        None => config.push_str(&format!("clientPort=2181\nclientPortAddress={ip}\n")),
    }
    for (i, peer) in ips.iter().enumerate() {
        config.push_str(&format!("server.{}={peer}:2888:3888\n", i + 1));
    }
    let config_path = home.join("zoo.cfg");
    std::fs::write(&config_path, config)?;
    let mut class_path = format!("{}:{ZOOKEEPER_JAR}", home.display());
    if Path::new(SLF4J_SIMPLE_JAR).exists() {
        class_path.push(':');
        class_path.push_str(SLF4J_SIMPLE_JAR);
    }
    if secure.is_some() {
        // The Netty connection factory's jars beyond those ZooKeeper's manifest names.
        for jar in NETTY_JARS {
            if !Path::new(jar).exists() {
                bail!("{jar} is missing (Debian: libnetty-java, a dependency of zookeeper)");
            }
            class_path.push(':');
            class_path.push_str(jar);
        }
    }
    let args = [
        "-Xmx192m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        "-Dzookeeper.admin.enableServer=false",
        "-Dzookeeper.forceSync=no",
        // Times on every line, to line the servers' elections up with the nodes' logs.
        "-Dorg.slf4j.simpleLogger.showDateTime=true",
        "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
        "-cp",
        &class_path,
        "org.apache.zookeeper.server.quorum.QuorumPeerMain",
        config_path.to_str().context("path")?,
    ]
    .iter()
    .map(ToString::to_string)
    .collect();
    Ok(args)
}

//! `mode`: which coordination service the campaign's fleet keeps its worker ids in.

/// Where the nodes keep their worker ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// A 3-member etcd cluster: leases, claim keys, marks.
    Etcd,
    /// A 3-server ZooKeeper ensemble: ephemeral znodes, mark znodes (the 2010 layout).
    Zookeeper,
}

//! Free loopback ports, for servers that must be told their port (etcd, ZooKeeper, a node that
//! restarts on the same address). A port picked this way can be taken by another process before
//! the server binds it: callers that can retry on "address in use" do (see [`crate::etcd`]).

use std::net::TcpListener;

/// A free loopback port: bound on 127.0.0.1:0, then released.
pub fn free_port() -> u16 {
    free_ports(1)[0]
}

/// `count` distinct free loopback ports: all bound at once on 127.0.0.1:0, then released.
pub fn free_ports(count: usize) -> Vec<u16> {
    try_free_ports(count).unwrap_or_else(|e| panic!("bind 127.0.0.1:0: {e}"))
}

/// [`free_ports`], with a failure to bind as an error.
pub fn try_free_ports(count: usize) -> std::io::Result<Vec<u16>> {
    let listeners = (0..count)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()?;
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn free_ports_are_distinct_and_not_zero() {
        let ports = super::free_ports(8);
        let mut sorted = ports.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 8, "{ports:?}");
        assert!(ports.iter().all(|&p| p != 0));
    }
}

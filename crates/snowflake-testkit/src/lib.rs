//! The workspace's test kit: what the in-process tests, the system suite (`tests/system`), the
//! comparison harness (`bench/`) and the fault campaign share to run the real thing. Never part
//! of the product.
//!
//! - [`ports`]: free loopback ports;
//! - [`binary`]: where the `snowflake` binary under test is;
//! - [`serve`]: a `snowflake serve` process (spawn, wait until it listens, stop, logs, killed on
//!   drop);
//! - [`http`]: a tiny blocking HTTP/1.1 client;
//! - [`node`]: a running node and its IDs (timestamps, workers, `/v1/info`, state files);
//! - [`process`]: signals and pipes of child processes;
//! - [`faketime`]: libfaketime clocks for child processes;
//! - [`etcd`], [`zookeeper`]: real etcd clusters and ZooKeeper servers on loopback, in
//!   temporary directories, killed and removed on drop;
//! - [`certs`]: test certificates, made in-process.
//!
//! Anything a test needs that is missing (etcd, Java and ZooKeeper, libfaketime, the binary)
//! fails it with a message saying how to install it; nothing is ever skipped.

pub mod binary;
pub mod certs;
pub mod etcd;
pub mod faketime;
pub mod http;
pub mod node;
pub mod ports;
pub mod process;
pub mod serve;
pub mod zookeeper;

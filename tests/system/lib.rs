//! The system suite, one test binary: `snowflake serve` run as a real process (signals, clocks
//! moved by libfaketime, TLS, listeners, a stalled disk, systemd, Prometheus, Kubernetes), and
//! fleets of them leasing worker ids from a real etcd or registering them in a real ZooKeeper.
//! Every component a test needs must be there (scripts/test installs them): a missing one fails
//! the test, never skips it. The binary is the one cargo built in this target directory
//! (`snowflake_testkit::binary`).

mod certs;
mod client;
mod clock_steps;
mod etcd_cluster;
mod etcd_mark;
mod etcd_secure;
mod fleet;
mod fleet_edges;
mod kubernetes;
mod kubernetes_render;
mod layouts_fleet;
mod listen;
mod memory;
mod previous_release;
mod prometheus;
mod resp;
mod secrets;
mod serve;
mod serve_clock;
mod slow_clients;
mod stalled_disk;
mod start_line;
mod start_signals;
mod state_tool;
mod support;
mod systemd;
mod tls;
mod zookeeper_fleet;
mod zookeeper_marks;
mod zookeeper_ownership;
mod zookeeper_server;
mod zookeeper_version;

//! One test binary for the `snowflake` command: the CLI subcommands, `snowflake serve` run as a
//! real process, and fleets of them leasing worker ids from a real etcd or registering them in a
//! real ZooKeeper.

mod audit;
mod certs;
mod cli;
mod client;
mod clock_steps;
mod etcd_cluster;
mod etcd_mark;
mod etcd_secure;
mod fleet;
mod fleet_edges;
mod kubernetes;
mod layouts_fleet;
mod listen;
mod memory;
mod previous_release;
mod prometheus;
mod resp;
mod secrets;
mod serve;
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

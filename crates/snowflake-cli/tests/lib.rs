//! The `snowflake` command's own tests, with nothing but the toolchain: its subcommands
//! (`encode`, `decode`, `next`, `audit`, ...) and `--help`, run as the real binary. The tests
//! that need etcd, ZooKeeper, libfaketime or other components are the system suite
//! (`tests/system`, run by scripts/test).

mod audit;
mod cli;
mod support;

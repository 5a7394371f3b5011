//! The extension against real PostgreSQL 15 clusters (see the harness in `src/lib.rs`).
//!
//! Needs the extension installed (`cargo pgrx install`), PostgreSQL 15's server and client
//! binaries, libfaketime and the main workspace's `snowflake` CLI; `scripts/test` provides all
//! of them. A missing piece fails the test that needs it, naming the fix.

mod durability;
mod fleet;
mod fleet_layout;
mod functions;
mod issue;
mod keeper;
mod settings;
mod upgrade;

use snowflake_pg_tests::Cluster;

/// The lines every test cluster's `postgresql.conf` gets: the library preloaded and a pair.
pub const PRELOADED: &[&str] = &[
    "shared_preload_libraries = 'snowflake'",
    "snowflake.datacenter_id = 7",
    "snowflake.worker_id = 13",
];

/// A started cluster with the extension created.
pub fn started(extra: &[&str]) -> Cluster {
    let mut conf = PRELOADED.to_vec();
    conf.extend_from_slice(extra);
    let mut cluster = Cluster::new(&conf);
    cluster.start();
    cluster.sql("CREATE EXTENSION snowflake");
    cluster
}

/// The SQLSTATE of a psql error printed with `VERBOSITY=verbose` (`ERROR:  55000: …`).
pub fn sqlstate(error: &str) -> &str {
    error
        .split("ERROR:")
        .nth(1)
        .map(|rest| rest.trim_start())
        .and_then(|rest| rest.get(..5))
        .unwrap_or_else(|| panic!("no sqlstate in {error:?}"))
}

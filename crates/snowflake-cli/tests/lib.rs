//! One test binary for the `snowflake` command: the CLI subcommands, and `snowflake serve` run
//! as a real process.

mod cli;
mod serve;
mod support;

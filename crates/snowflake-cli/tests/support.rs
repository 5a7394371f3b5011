//! What the CLI's tests share, from the test kit (as the system suite's `support.rs`).

pub use snowflake_testkit::binary::snowflake as binary;
pub use snowflake_testkit::node::*;
pub use snowflake_testkit::serve::Serve;

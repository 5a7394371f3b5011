//! What the tests of the real `snowflake` binary share, from the test kit (re-exported, so a test
//! names one place): the process, the HTTP client, the clock, helpers about nodes and IDs.

pub use snowflake_testkit::binary::snowflake as binary;
pub use snowflake_testkit::faketime::{FakeClock, libfaketime};
pub use snowflake_testkit::http::{Response, get, request, try_get};
pub use snowflake_testkit::node::*;
pub use snowflake_testkit::process::send_signal;
pub use snowflake_testkit::serve::{Finished, Serve, ServeProcess};

//! The PostgreSQL extension's logic that needs no PostgreSQL: its settings, the identity and
//! durable mark it keeps (as a file in the data directory and as a WAL record), and the
//! clock-step policy. The extension crate only wires these to PostgreSQL's hooks, so everything
//! here is tested with plain `cargo test`.
//!
//! Layout, encode, decode and validation are `snowflake-core`'s; nothing here re-implements them.

#![deny(missing_docs)]

pub mod mark;
pub mod record;
pub mod settings;
pub mod trust;

pub use mark::{Identity, MarkFile};
pub use record::Reservation;
pub use settings::{Config, RawSettings};
pub use trust::{ClockTrust, Previous, Reading, Step, TrustPolicy};

//! Snowflake IDs: unique, time-ordered 63-bit integers minted by many nodes without talking to
//! each other per ID, as Twitter designed them in 2010.
//!
//! This crate is the pure core: the [`SnowflakeId`] type, its [`Layout`] (Twitter's 41-bit
//! millisecond timestamp since 1288834974657, 5-bit datacenter, 5-bit worker, 12-bit sequence by
//! default; `js-safe`'s 41 | 2 | 4 | 6, or any widths of [`Bits`]), and a lock-free
//! [`Generator`]. It does no I/O and holds no global state; time enters
//! only through the [`Clock`] trait.
//!
//! ```
//! use snowflake_core::{Generator, Layout, SnowflakeId};
//!
//! // Encode and decode, exactly as the 2010 layout defines them.
//! let id = Layout::TWITTER.encode(1_700_000_000_000, 7, 13, 4095)?;
//! assert_eq!(id, SnowflakeId::try_from(1_724_551_110_457_221_119_u64)?);
//! assert_eq!(Layout::TWITTER.describe(id)?.time, "2023-11-14T22:13:20.000Z");
//!
//! // Generate: one generator per node, shared by every thread.
//! let generator = Generator::new(7, 13)?;
//! let ids = generator.next_ids(10_000)?;
//! assert!(ids.windows(2).all(|w| w[0] < w[1]));
//! # Ok::<(), snowflake_core::Error>(())
//! ```
//!
//! Features: `serde` serializes IDs as decimal strings in human-readable formats and as integers
//! in binary ones.

#![deny(missing_docs)]

mod bits;
mod clock;
mod error;
mod generator;
mod id;
mod layout;
mod record;
#[cfg(feature = "serde")]
mod serde_impl;
mod sync;
mod time;

pub use bits::{Bits, MAX_ID_BITS, MIN_TIMESTAMP_BITS};
pub use clock::{Clock, ManualClock, SystemClock};
pub use error::{Error, Field};
pub use generator::{Generator, GeneratorBuilder, GeneratorStats, IdBatch, IdBatchIter};
pub use id::SnowflakeId;
pub use layout::{Decoded, IdRange, Layout, MAX_SAFE_INTEGER, Parts, TWITTER_EPOCH_MS};
pub use record::LayoutRecord;
pub use time::{format_unix_ms, unix_ms_to_system_time, write_unix_ms};

/// Parses a count of IDs asked for at once: decimal, in `1..=max`.
///
/// ```
/// assert_eq!(snowflake_core::parse_count("10", 100), Ok(10));
/// let err = snowflake_core::parse_count("0", 100).unwrap_err();
/// assert_eq!(err.to_string(), "invalid count: expected 1..=100, found 0");
/// ```
pub fn parse_count(text: &str, max: u64) -> Result<u64, Error> {
    error::parse_in_range(Field::Count, text, 1, max)
}

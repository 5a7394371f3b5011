//! The ID type.

use crate::error::{Error, Field, check_range, parse_in_range};
use crate::layout::{Layout, Parts};
use std::fmt;
use std::str::FromStr;
use std::time::SystemTime;

/// A Snowflake ID: a 63-bit non-negative integer, so it always fits a signed 64-bit `BIGINT`.
///
/// The field accessors decode under Twitter's 2010 layout ([`Layout::TWITTER`]); for a custom
/// layout use [`Layout::decode`].
///
/// ```
/// use snowflake_core::SnowflakeId;
/// let id: SnowflakeId = "1724551110457221119".parse()?;
/// assert_eq!(id.timestamp_ms(), 1_700_000_000_000);
/// assert_eq!((id.datacenter_id(), id.worker_id(), id.sequence()), (7, 13, 4095));
/// assert_eq!(id.to_string(), "1724551110457221119");
/// assert!("-1".parse::<SnowflakeId>().is_err());
/// # Ok::<(), snowflake_core::Error>(())
/// ```
#[repr(transparent)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SnowflakeId(u64);

impl SnowflakeId {
    /// The smallest ID, 0 (the epoch, datacenter 0, worker 0, sequence 0).
    pub const MIN: SnowflakeId = SnowflakeId(0);
    /// The largest ID of any layout, 2^63 − 1 (a layout's own is [`Layout::max_id`]).
    pub const MAX: SnowflakeId = SnowflakeId(i64::MAX as u64);

    /// The ID with this value, or `None` if it is 2^63 or more.
    pub const fn new(value: u64) -> Option<SnowflakeId> {
        if value <= Self::MAX.0 {
            Some(SnowflakeId(value))
        } else {
            None
        }
    }

    /// Only for values already known to be below 2^63.
    pub(crate) const fn from_raw(value: u64) -> SnowflakeId {
        debug_assert!(value <= Self::MAX.0);
        SnowflakeId(value)
    }

    /// The value as `u64`.
    pub const fn as_u64(self) -> u64 {
        self.0
    }

    /// The value as `i64` (never negative).
    pub const fn as_i64(self) -> i64 {
        self.0 as i64
    }

    /// The fields under Twitter's layout.
    pub const fn parts(self) -> Parts {
        Layout::TWITTER.split(self.0)
    }

    /// The ID's time in Unix milliseconds (Twitter's layout).
    pub const fn timestamp_ms(self) -> u64 {
        self.parts().timestamp_ms
    }

    /// The datacenter id (Twitter's layout).
    pub const fn datacenter_id(self) -> u64 {
        self.parts().datacenter_id
    }

    /// The worker id (Twitter's layout).
    pub const fn worker_id(self) -> u64 {
        self.parts().worker_id
    }

    /// The sequence within the millisecond (Twitter's layout).
    pub const fn sequence(self) -> u64 {
        self.parts().sequence
    }

    /// The ID's time as a `SystemTime` (Twitter's layout).
    ///
    /// ```
    /// use snowflake_core::SnowflakeId;
    /// use std::time::{Duration, UNIX_EPOCH};
    /// assert_eq!(SnowflakeId::MIN.system_time(), UNIX_EPOCH + Duration::from_millis(1_288_834_974_657));
    /// ```
    pub fn system_time(self) -> SystemTime {
        // Under Twitter's layout every ID is well inside SystemTime's range.
        crate::time::unix_ms_to_system_time(self.timestamp_ms()).unwrap_or(SystemTime::UNIX_EPOCH)
    }

    fn out_of_range(found: impl fmt::Display) -> Error {
        Error::OutOfRange {
            field: Field::Id,
            found: found.to_string(),
            min: 0,
            max: Self::MAX.0,
        }
    }
}

impl fmt::Display for SnowflakeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl FromStr for SnowflakeId {
    type Err = Error;

    /// Decimal digits only, 0 ..= 2^63 − 1.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        parse_in_range(Field::Id, text, 0, Self::MAX.0).map(SnowflakeId)
    }
}

impl TryFrom<u64> for SnowflakeId {
    type Error = Error;

    fn try_from(value: u64) -> Result<Self, Self::Error> {
        check_range(Field::Id, value, 0, Self::MAX.0).map(SnowflakeId)
    }
}

impl TryFrom<i64> for SnowflakeId {
    type Error = Error;

    fn try_from(value: i64) -> Result<Self, Self::Error> {
        u64::try_from(value)
            .map(SnowflakeId)
            .map_err(|_| Self::out_of_range(value))
    }
}

impl TryFrom<&str> for SnowflakeId {
    type Error = Error;

    fn try_from(text: &str) -> Result<Self, Self::Error> {
        text.parse()
    }
}

impl From<SnowflakeId> for u64 {
    fn from(id: SnowflakeId) -> u64 {
        id.0
    }
}

impl From<SnowflakeId> for i64 {
    fn from(id: SnowflakeId) -> i64 {
        id.as_i64()
    }
}

impl From<SnowflakeId> for i128 {
    fn from(id: SnowflakeId) -> i128 {
        i128::from(id.0)
    }
}

impl From<SnowflakeId> for u128 {
    fn from(id: SnowflakeId) -> u128 {
        u128::from(id.0)
    }
}

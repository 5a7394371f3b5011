//! The bit layout of an ID: epoch and field widths.

use crate::error::{Error, Field, check_range, parse_in_range};
use crate::id::SnowflakeId;
use crate::time::format_unix_ms;
use std::fmt;

/// The epoch of Twitter's 2010 layout: 1288834974657 Unix ms = 2010-11-04T01:42:54.657Z.
pub const TWITTER_EPOCH_MS: u64 = 1_288_834_974_657;

/// The widths of the four fields of an ID, most significant first. They sum to 63.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Bits {
    /// Milliseconds since the epoch.
    pub timestamp: u8,
    /// Datacenter id.
    pub datacenter: u8,
    /// Worker (machine) id.
    pub worker: u8,
    /// Sequence within one millisecond.
    pub sequence: u8,
}

impl Bits {
    /// Twitter's 2010 widths: 41 / 5 / 5 / 12.
    pub const TWITTER: Bits = Bits {
        timestamp: 41,
        datacenter: 5,
        worker: 5,
        sequence: 12,
    };
}

impl Default for Bits {
    fn default() -> Self {
        Bits::TWITTER
    }
}

/// The fields of an ID, decoded under some layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Parts {
    /// The ID's time, in Unix milliseconds (the epoch already added).
    pub timestamp_ms: u64,
    /// Datacenter id.
    pub datacenter_id: u64,
    /// Worker id.
    pub worker_id: u64,
    /// Sequence within the millisecond.
    pub sequence: u64,
}

/// Where each field of an ID sits: the epoch and the bit widths.
///
/// [`Layout::TWITTER`] (41/5/5/12 bits, epoch 1288834974657) is the default everywhere. Custom
/// layouts are validated: widths sum to 63 and the epoch is not in the future.
///
/// ```
/// use snowflake_core::Layout;
/// let layout = Layout::TWITTER;
/// let id = layout.encode(1_700_000_000_000, 7, 13, 4095)?;
/// assert_eq!(id.as_u64(), 1_724_551_110_457_221_119);
/// assert_eq!(layout.node_count(), 1024);
/// assert_eq!(layout.max_ids_per_second(), 4_096_000);
/// # Ok::<(), snowflake_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Layout {
    epoch_ms: u64,
    bits: Bits,
}

impl Default for Layout {
    fn default() -> Self {
        Layout::TWITTER
    }
}

const fn mask(bits: u8) -> u64 {
    if bits == 0 {
        0
    } else {
        u64::MAX >> (64 - bits as u32)
    }
}

impl Layout {
    /// Twitter's 2010 layout: 41-bit milliseconds since 1288834974657, 5-bit datacenter,
    /// 5-bit worker, 12-bit sequence.
    pub const TWITTER: Layout = Layout {
        epoch_ms: TWITTER_EPOCH_MS,
        bits: Bits::TWITTER,
    };

    /// A custom layout, checked against the system clock: the widths must sum to 63, the
    /// timestamp field needs at least one bit, and the epoch must not be in the future.
    ///
    /// ```
    /// use snowflake_core::{Bits, Layout};
    /// let bits = Bits { timestamp: 42, datacenter: 0, worker: 10, sequence: 11 };
    /// let layout = Layout::new(1_600_000_000_000, bits)?;
    /// assert_eq!(layout.node_count(), 1024);
    /// assert!(Layout::new(1_600_000_000_000, Bits { timestamp: 41, ..bits }).is_err());
    /// # Ok::<(), snowflake_core::Error>(())
    /// ```
    pub fn new(epoch_ms: u64, bits: Bits) -> Result<Layout, Error> {
        use crate::clock::{Clock, SystemClock};
        Layout::new_at(epoch_ms, bits, SystemClock.now_ms())
    }

    /// Like [`Layout::new`], with "now" given rather than read from the system clock.
    pub fn new_at(epoch_ms: u64, bits: Bits, now_ms: u64) -> Result<Layout, Error> {
        let Bits {
            timestamp,
            datacenter,
            worker,
            sequence,
        } = bits;
        let sum =
            u32::from(timestamp) + u32::from(datacenter) + u32::from(worker) + u32::from(sequence);
        if sum != 63 {
            return Err(Error::InvalidLayout(format!(
                "bit widths must sum to 63, found {timestamp}+{datacenter}+{worker}+{sequence}={sum}"
            )));
        }
        if timestamp == 0 {
            return Err(Error::InvalidLayout(
                "the timestamp field needs at least 1 bit".into(),
            ));
        }
        if epoch_ms.checked_add(mask(timestamp)).is_none() {
            return Err(Error::InvalidLayout(format!(
                "epoch {epoch_ms} plus the {timestamp}-bit timestamp range overflows 64 bits"
            )));
        }
        if epoch_ms > now_ms {
            return Err(Error::InvalidLayout(format!(
                "epoch {epoch_ms} ({}) is in the future (now is {now_ms})",
                format_unix_ms(epoch_ms)
            )));
        }
        Ok(Layout { epoch_ms, bits })
    }

    /// Twitter's bit widths with another epoch (not in the future).
    pub fn with_epoch(epoch_ms: u64) -> Result<Layout, Error> {
        Layout::new(epoch_ms, Bits::TWITTER)
    }

    /// The epoch, in Unix milliseconds.
    pub const fn epoch_ms(&self) -> u64 {
        self.epoch_ms
    }

    /// The field widths.
    pub const fn bits(&self) -> Bits {
        self.bits
    }

    /// The largest timestamp offset (milliseconds since the epoch) the layout can hold.
    pub const fn max_offset_ms(&self) -> u64 {
        mask(self.bits.timestamp)
    }

    /// The last representable time, in Unix ms: for Twitter's layout 2080-07-10T17:30:30.208Z.
    /// An ID one millisecond later would overflow the timestamp field.
    pub const fn max_timestamp_ms(&self) -> u64 {
        self.epoch_ms.saturating_add(self.max_offset_ms())
    }

    /// The largest datacenter id (31 for Twitter's layout).
    pub const fn max_datacenter_id(&self) -> u64 {
        mask(self.bits.datacenter)
    }

    /// The largest worker id (31 for Twitter's layout).
    pub const fn max_worker_id(&self) -> u64 {
        mask(self.bits.worker)
    }

    /// The largest sequence number (4095 for Twitter's layout).
    pub const fn max_sequence(&self) -> u64 {
        mask(self.bits.sequence)
    }

    /// How many distinct (datacenter, worker) pairs exist (1024 for Twitter's layout).
    pub const fn node_count(&self) -> u64 {
        1 << (self.bits.datacenter + self.bits.worker)
    }

    /// How many IDs one node can issue per millisecond (4096 for Twitter's layout).
    pub const fn max_ids_per_ms(&self) -> u64 {
        1 << self.bits.sequence
    }

    /// How many IDs one node can issue per second: the layout's physical limit
    /// (4,096,000 for Twitter's layout).
    pub const fn max_ids_per_second(&self) -> u64 {
        self.max_ids_per_ms().saturating_mul(1000)
    }

    pub(crate) const fn worker_shift(&self) -> u32 {
        self.bits.sequence as u32
    }

    pub(crate) const fn datacenter_shift(&self) -> u32 {
        (self.bits.sequence + self.bits.worker) as u32
    }

    pub(crate) const fn timestamp_shift(&self) -> u32 {
        (self.bits.sequence + self.bits.worker + self.bits.datacenter) as u32
    }

    /// The valid range of `field` under this layout, e.g. `(0, 31)` for the worker id.
    pub const fn range(&self, field: Field) -> (u64, u64) {
        match field {
            Field::Timestamp => (self.epoch_ms, self.max_timestamp_ms()),
            Field::DatacenterId => (0, self.max_datacenter_id()),
            Field::WorkerId => (0, self.max_worker_id()),
            Field::Sequence => (0, self.max_sequence()),
            Field::Id => (0, SnowflakeId::MAX.as_u64()),
            Field::Count => (1, u64::MAX),
            Field::Epoch => (0, u64::MAX),
        }
    }

    /// Checks `value` against the valid range of `field`.
    ///
    /// ```
    /// use snowflake_core::{Field, Layout};
    /// assert_eq!(Layout::TWITTER.check(Field::Sequence, 4095), Ok(4095));
    /// let err = Layout::TWITTER.check(Field::Sequence, 4096).unwrap_err();
    /// assert_eq!(err.to_string(), "invalid sequence: expected 0..=4095, found 4096");
    /// ```
    pub fn check(&self, field: Field, value: u64) -> Result<u64, Error> {
        let (min, max) = self.range(field);
        check_range(field, value, min, max)
    }

    /// Parses decimal text for `field` and checks it against the field's range; the one place
    /// where the CLI and the service turn text into field values.
    ///
    /// ```
    /// use snowflake_core::{Field, Layout};
    /// assert_eq!(Layout::TWITTER.parse(Field::WorkerId, "13"), Ok(13));
    /// let err = Layout::TWITTER.parse(Field::DatacenterId, "-1").unwrap_err();
    /// assert_eq!(err.to_string(), "invalid datacenter id: expected 0..=31, found -1");
    /// ```
    pub fn parse(&self, field: Field, text: &str) -> Result<u64, Error> {
        let (min, max) = self.range(field);
        parse_in_range(field, text, min, max)
    }

    /// Builds the ID for a timestamp (Unix ms), datacenter, worker and sequence; every value
    /// outside its range is rejected, nothing is masked.
    pub fn encode(
        &self,
        timestamp_ms: u64,
        datacenter_id: u64,
        worker_id: u64,
        sequence: u64,
    ) -> Result<SnowflakeId, Error> {
        let timestamp_ms = self.check(Field::Timestamp, timestamp_ms)?;
        let datacenter_id = self.check(Field::DatacenterId, datacenter_id)?;
        let worker_id = self.check(Field::WorkerId, worker_id)?;
        let sequence = self.check(Field::Sequence, sequence)?;
        let offset = timestamp_ms - self.epoch_ms;
        let raw = (offset << self.timestamp_shift())
            | (datacenter_id << self.datacenter_shift())
            | (worker_id << self.worker_shift())
            | sequence;
        Ok(SnowflakeId::from_raw(raw))
    }

    /// Builds the ID from its parts (see [`Layout::encode`]).
    pub fn encode_parts(&self, parts: Parts) -> Result<SnowflakeId, Error> {
        self.encode(
            parts.timestamp_ms,
            parts.datacenter_id,
            parts.worker_id,
            parts.sequence,
        )
    }

    /// Splits an ID into its fields. Every 63-bit value decodes under every layout.
    pub const fn decode(&self, id: SnowflakeId) -> Parts {
        let raw = id.as_u64();
        Parts {
            timestamp_ms: (raw >> self.timestamp_shift()) + self.epoch_ms,
            datacenter_id: (raw >> self.datacenter_shift()) & self.max_datacenter_id(),
            worker_id: (raw >> self.worker_shift()) & self.max_worker_id(),
            sequence: raw & self.max_sequence(),
        }
    }

    /// The decoded form used by `snowflake decode` and `GET /v1/decode/{id}`.
    pub fn describe(&self, id: SnowflakeId) -> Decoded {
        let parts = self.decode(id);
        Decoded {
            id,
            timestamp_ms: parts.timestamp_ms,
            time: format_unix_ms(parts.timestamp_ms),
            datacenter_id: parts.datacenter_id,
            worker_id: parts.worker_id,
            sequence: parts.sequence,
        }
    }
}

impl fmt::Display for Layout {
    /// One line: epoch, widths, and when the timestamp field runs out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Bits {
            timestamp,
            datacenter,
            worker,
            sequence,
        } = self.bits;
        write!(
            f,
            "epoch {} ({}), bits {timestamp}/{datacenter}/{worker}/{sequence}, last time {}",
            self.epoch_ms,
            format_unix_ms(self.epoch_ms),
            format_unix_ms(self.max_timestamp_ms())
        )
    }
}

/// An ID and its decoded fields, with its time as ISO-8601 text: the object printed by
/// `snowflake decode --json` and served by `GET /v1/decode/{id}`.
///
/// With the `serde` feature it serializes with exactly these field names, in this order, and the
/// ID as a decimal string.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Decoded {
    /// The ID.
    pub id: SnowflakeId,
    /// Its time in Unix milliseconds.
    pub timestamp_ms: u64,
    /// Its time as ISO-8601 UTC with milliseconds, e.g. `2023-11-14T22:13:20.000Z`.
    pub time: String,
    /// Datacenter id.
    pub datacenter_id: u64,
    /// Worker id.
    pub worker_id: u64,
    /// Sequence within the millisecond.
    pub sequence: u64,
}

impl fmt::Display for Decoded {
    /// `id timestamp_ms=… time=… datacenter_id=… worker_id=… sequence=…` on one line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} timestamp_ms={} time={} datacenter_id={} worker_id={} sequence={}",
            self.id,
            self.timestamp_ms,
            self.time,
            self.datacenter_id,
            self.worker_id,
            self.sequence
        )
    }
}

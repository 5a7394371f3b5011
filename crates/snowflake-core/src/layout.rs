//! The layout of an ID: its epoch and field widths, and everything measured against them
//! (each field's range, the largest ID, the last millisecond, the IDs of a time window).

use crate::bits::Bits;
use crate::error::{Error, Field, check_range, parse_in_range};
use crate::id::SnowflakeId;
use crate::time::format_unix_ms;
use std::fmt;

/// The epoch of Twitter's 2010 layout: 1288834974657 Unix ms = 2010-11-04T01:42:54.657Z.
pub const TWITTER_EPOCH_MS: u64 = 1_288_834_974_657;

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
/// [`Layout::TWITTER`] (41 | 5 | 5 | 12 bits, epoch 1288834974657) is the default everywhere;
/// [`Layout::JS_SAFE`] keeps every ID within 2^53 − 1. Other layouts are checked: the widths
/// follow [`Bits::check`], the epoch is not in the future, and the layout's last millisecond
/// has not passed.
///
/// ```
/// use snowflake_core::Layout;
/// let layout = Layout::TWITTER;
/// let id = layout.encode(1_700_000_000_000, 7, 13, 4095)?;
/// assert_eq!(id.as_u64(), 1_724_551_110_457_221_119);
/// assert_eq!(layout.node_count(), 1024);
/// assert_eq!(layout.max_ids_per_second(), 4_096_000);
///
/// let js = Layout::JS_SAFE;
/// assert_eq!(js.name(), "js-safe");
/// assert_eq!(js.max_id().as_u64(), (1 << 53) - 1);
/// assert_eq!((js.node_count(), js.max_ids_per_second()), (64, 64_000));
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

const fn mask(bits: u32) -> u64 {
    if bits == 0 {
        0
    } else {
        u64::MAX >> (64 - bits)
    }
}

/// The largest integer a JavaScript number (an IEEE 754 double) holds exactly: 2^53 − 1.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// The smallest and largest ID any node could issue in a time window: for
/// `WHERE id BETWEEN min_id AND max_id`, which scans the primary key's index instead of a time
/// column ([`Layout::id_range`]).
///
/// With the `serde` feature it serializes as `{"min_id":"…","max_id":"…"}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct IdRange {
    /// The window's first millisecond, datacenter 0, worker 0, sequence 0.
    pub min_id: SnowflakeId,
    /// The window's last millisecond, every other field at its maximum.
    pub max_id: SnowflakeId,
}

impl IdRange {
    /// Whether `id` lies in the range (both ends included).
    pub fn contains(&self, id: SnowflakeId) -> bool {
        (self.min_id..=self.max_id).contains(&id)
    }
}

impl Layout {
    /// Twitter's 2010 layout: 41-bit milliseconds since 1288834974657, 5-bit datacenter,
    /// 5-bit worker, 12-bit sequence.
    pub const TWITTER: Layout = Layout {
        epoch_ms: TWITTER_EPOCH_MS,
        bits: Bits::TWITTER,
    };

    /// The JavaScript-safe layout with Twitter's epoch: 41-bit milliseconds, 2-bit datacenter,
    /// 4-bit worker, 6-bit sequence; every ID is at most 2^53 − 1 until 2080-07-10.
    pub const JS_SAFE: Layout = Layout {
        epoch_ms: TWITTER_EPOCH_MS,
        bits: Bits::JS_SAFE,
    };

    /// A layout checked against the system clock: the widths follow [`Bits::check`], the
    /// epoch is not in the future, and the layout's last millisecond has not passed.
    ///
    /// ```
    /// use snowflake_core::{Bits, Layout};
    /// let bits = Bits { timestamp: 42, datacenter: 0, worker: 10, sequence: 11 };
    /// let layout = Layout::new(1_600_000_000_000, bits)?;
    /// assert_eq!(layout.node_count(), 1024);
    /// assert_eq!(layout.name(), "custom:42,0,10,11");
    /// assert!(Layout::new(1_600_000_000_000, Bits { timestamp: 43, ..bits }).is_err());
    /// # Ok::<(), snowflake_core::Error>(())
    /// ```
    pub fn new(epoch_ms: u64, bits: Bits) -> Result<Layout, Error> {
        use crate::clock::{Clock, SystemClock};
        Layout::new_at(epoch_ms, bits, SystemClock.now_ms())
    }

    /// Like [`Layout::new`], with "now" given rather than read from the system clock.
    ///
    /// ```
    /// use snowflake_core::{Bits, Layout};
    /// // 30 timestamp bits from 2020-09-13 last about 12 days.
    /// let short = Bits { timestamp: 30, datacenter: 5, worker: 5, sequence: 12 };
    /// assert!(Layout::new_at(1_600_000_000_000, short, 1_600_000_000_000).is_ok());
    /// let err = Layout::new_at(1_600_000_000_000, short, 1_700_000_000_000).unwrap_err();
    /// assert_eq!(
    ///     err.to_string(),
    ///     "invalid layout: custom:30,5,5,12 with epoch 1600000000000 ran out at \
    ///      2020-09-25T22:42:21.823Z (its last millisecond, 1601073741823); now is 1700000000000"
    /// );
    /// ```
    pub fn new_at(epoch_ms: u64, bits: Bits, now_ms: u64) -> Result<Layout, Error> {
        let bits = bits.check()?;
        let layout = Layout { epoch_ms, bits };
        if epoch_ms.checked_add(layout.max_offset_ms()).is_none() {
            return Err(Error::InvalidLayout(format!(
                "epoch {epoch_ms} plus the {}-bit timestamp range overflows 64 bits",
                bits.timestamp
            )));
        }
        if epoch_ms > now_ms {
            return Err(Error::InvalidLayout(format!(
                "epoch {epoch_ms} ({}) is in the future (now is {now_ms})",
                format_unix_ms(epoch_ms)
            )));
        }
        let last_ms = layout.max_timestamp_ms();
        if last_ms < now_ms {
            return Err(Error::InvalidLayout(format!(
                "{bits} with epoch {epoch_ms} ran out at {} (its last millisecond, {last_ms}); \
                 now is {now_ms}",
                format_unix_ms(last_ms)
            )));
        }
        Ok(layout)
    }

    /// Twitter's bit widths with another epoch (not in the future).
    pub fn with_epoch(epoch_ms: u64) -> Result<Layout, Error> {
        Layout::new(epoch_ms, Bits::TWITTER)
    }

    /// The layout's name, from its widths alone: `twitter`, `js-safe` or `custom:T,D,W,S`
    /// (see [`Bits`]).
    pub fn name(&self) -> String {
        self.bits.to_string()
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
        mask(self.bits.timestamp as u32)
    }

    /// The last representable time, in Unix ms (the layout's last millisecond): for Twitter's
    /// layout 2080-07-10T17:30:30.208Z. An ID one millisecond later would overflow the
    /// timestamp field.
    pub const fn max_timestamp_ms(&self) -> u64 {
        self.epoch_ms.saturating_add(self.max_offset_ms())
    }

    /// The largest datacenter id (31 for Twitter's layout).
    pub const fn max_datacenter_id(&self) -> u64 {
        mask(self.bits.datacenter as u32)
    }

    /// The largest worker id (31 for Twitter's layout).
    pub const fn max_worker_id(&self) -> u64 {
        mask(self.bits.worker as u32)
    }

    /// The largest sequence number (4095 for Twitter's layout).
    pub const fn max_sequence(&self) -> u64 {
        mask(self.bits.sequence as u32)
    }

    /// The largest ID the layout can hold: every field at its maximum, the bits above them 0
    /// (2^63 − 1 for Twitter's layout, 2^53 − 1 for `js-safe`).
    pub const fn max_id(&self) -> SnowflakeId {
        SnowflakeId::from_raw(mask(self.bits.total()))
    }

    /// Whether every ID of the layout is a JavaScript-safe integer (at most 2^53 − 1), so that
    /// it may be sent as a JSON number.
    pub const fn ids_fit_js_number(&self) -> bool {
        self.max_id().as_u64() <= MAX_SAFE_INTEGER
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

    /// Where the worker id starts: the sequence's width (12 for Twitter's layout).
    pub const fn worker_shift(&self) -> u32 {
        self.bits.sequence as u32
    }

    /// Where the datacenter id starts (17 for Twitter's layout).
    pub const fn datacenter_shift(&self) -> u32 {
        (self.bits.sequence + self.bits.worker) as u32
    }

    /// Where the timestamp starts (22 for Twitter's layout).
    pub const fn timestamp_shift(&self) -> u32 {
        (self.bits.sequence + self.bits.worker + self.bits.datacenter) as u32
    }

    /// The valid range of `field` under this layout, e.g. `(0, 31)` for the worker id.
    pub const fn range(&self, field: Field) -> (u64, u64) {
        match field {
            Field::Timestamp | Field::From | Field::To => (self.epoch_ms, self.max_timestamp_ms()),
            Field::DatacenterId => (0, self.max_datacenter_id()),
            Field::WorkerId => (0, self.max_worker_id()),
            Field::Sequence => (0, self.max_sequence()),
            Field::Id => (0, self.max_id().as_u64()),
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
    /// let err = Layout::JS_SAFE.parse(Field::DatacenterId, "4").unwrap_err();
    /// assert_eq!(err.to_string(), "invalid datacenter id: expected 0..=3, found 4");
    /// ```
    pub fn parse(&self, field: Field, text: &str) -> Result<u64, Error> {
        let (min, max) = self.range(field);
        parse_in_range(field, text, min, max)
    }

    /// Checks that `id` is one the layout can hold: at most [`Layout::max_id`].
    ///
    /// ```
    /// use snowflake_core::{Layout, SnowflakeId};
    /// let big = SnowflakeId::try_from(1_724_551_110_457_221_119_u64)?;
    /// assert_eq!(Layout::TWITTER.check_id(big), Ok(big));
    /// assert_eq!(
    ///     Layout::JS_SAFE.check_id(big).unwrap_err().to_string(),
    ///     "invalid snowflake id: expected 0..=9007199254740991, found 1724551110457221119"
    /// );
    /// # Ok::<(), snowflake_core::Error>(())
    /// ```
    pub fn check_id(&self, id: SnowflakeId) -> Result<SnowflakeId, Error> {
        self.check(Field::Id, id.as_u64())
            .map(SnowflakeId::from_raw)
    }

    /// Parses a decimal ID and checks it against the layout (see [`Layout::check_id`]).
    pub fn parse_id(&self, text: &str) -> Result<SnowflakeId, Error> {
        self.parse(Field::Id, text).map(SnowflakeId::from_raw)
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

    /// Splits an ID into its fields. An ID above [`Layout::max_id`] is refused rather than
    /// decoded to a time past the layout's end.
    ///
    /// ```
    /// use snowflake_core::{Layout, SnowflakeId};
    /// let id = SnowflakeId::try_from((1_u64 << 53) - 1)?;
    /// assert_eq!(Layout::JS_SAFE.decode(id)?.sequence, 63);
    /// assert!(Layout::JS_SAFE.decode(SnowflakeId::try_from(1_u64 << 53)?).is_err());
    /// # Ok::<(), snowflake_core::Error>(())
    /// ```
    pub fn decode(&self, id: SnowflakeId) -> Result<Parts, Error> {
        self.check_id(id).map(|id| self.split(id.as_u64()))
    }

    /// The fields of a raw value already known to fit the layout.
    pub(crate) const fn split(&self, raw: u64) -> Parts {
        Parts {
            timestamp_ms: (raw >> self.timestamp_shift()) + self.epoch_ms,
            datacenter_id: (raw >> self.datacenter_shift()) & self.max_datacenter_id(),
            worker_id: (raw >> self.worker_shift()) & self.max_worker_id(),
            sequence: raw & self.max_sequence(),
        }
    }

    /// The decoded form used by `snowflake decode` and `GET /v1/decode/{id}`; an ID above
    /// [`Layout::max_id`] is refused.
    pub fn describe(&self, id: SnowflakeId) -> Result<Decoded, Error> {
        let parts = self.decode(id)?;
        Ok(Decoded {
            id,
            timestamp_ms: parts.timestamp_ms,
            time: format_unix_ms(parts.timestamp_ms),
            datacenter_id: parts.datacenter_id,
            worker_id: parts.worker_id,
            sequence: parts.sequence,
        })
    }

    /// The smallest and largest ID any node could issue from `from_ms` to `to_ms` (Unix ms,
    /// both included). A bound outside the layout's lifetime (its epoch to its last
    /// millisecond), or `from_ms` after `to_ms`, is refused, naming the bound.
    ///
    /// ```
    /// use snowflake_core::Layout;
    /// let range = Layout::TWITTER.id_range(1_700_000_000_000, 1_700_000_000_999)?;
    /// assert_eq!(range.min_id.as_u64(), 1_724_551_110_456_246_272);
    /// assert_eq!(range.max_id.as_u64(), 1_724_551_114_650_550_271);
    /// let err = Layout::TWITTER.id_range(5, 1_700_000_000_000).unwrap_err();
    /// assert_eq!(
    ///     err.to_string(),
    ///     "invalid from (unix ms): expected 1288834974657..=3487858230208, found 5"
    /// );
    /// let err = Layout::TWITTER.id_range(1_700_000_000_001, 1_700_000_000_000).unwrap_err();
    /// assert_eq!(
    ///     err.to_string(),
    ///     "invalid range: from 1700000000001 is after to 1700000000000 (unix ms)"
    /// );
    /// # Ok::<(), snowflake_core::Error>(())
    /// ```
    pub fn id_range(&self, from_ms: u64, to_ms: u64) -> Result<IdRange, Error> {
        let from_ms = self.check(Field::From, from_ms)?;
        let to_ms = self.check(Field::To, to_ms)?;
        if from_ms > to_ms {
            return Err(Error::InvalidRange { from_ms, to_ms });
        }
        let min_id = self.encode(from_ms, 0, 0, 0)?;
        let max_id = self.encode(
            to_ms,
            self.max_datacenter_id(),
            self.max_worker_id(),
            self.max_sequence(),
        )?;
        Ok(IdRange { min_id, max_id })
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

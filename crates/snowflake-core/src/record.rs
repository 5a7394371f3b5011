//! A layout written down: the object `/v1/info` and `snowflake layout --json` show, and what a
//! state directory or a fleet records, read back only when it is consistent.

use crate::bits::Bits;
use crate::error::Error;
use crate::id::SnowflakeId;
use crate::layout::Layout;

/// A layout as a record: its name, widths, epoch and largest ID.
///
/// With the `serde` feature it serializes as
/// `{"name","timestamp_bits","datacenter_bits","worker_bits","sequence_bits","epoch_ms","max_id"}`
/// (SPEC §9; `max_id` a decimal string in JSON). The widths and the largest ID repeat what the
/// name says, so that a reader needs no table of names; reading a record back
/// ([`LayoutRecord::to_layout_at`]) checks that they agree.
///
/// ```
/// use snowflake_core::{Layout, LayoutRecord};
/// let record = LayoutRecord::from(Layout::JS_SAFE);
/// assert_eq!(record.name, "js-safe");
/// assert_eq!(record.max_id.as_u64(), 9_007_199_254_740_991);
/// assert_eq!(record.to_layout_at(1_700_000_000_000)?, Layout::JS_SAFE);
///
/// let lying = LayoutRecord { sequence_bits: 12, ..record };
/// assert_eq!(
///     lying.to_layout_at(1_700_000_000_000).unwrap_err().to_string(),
///     "invalid layout: the record names js-safe (widths 41,2,4,6) but gives the widths 41,2,4,12"
/// );
/// # Ok::<(), snowflake_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct LayoutRecord {
    /// `twitter`, `js-safe` or `custom:T,D,W,S`: the widths' name (never the epoch).
    pub name: String,
    /// Width of the timestamp (milliseconds since the epoch).
    pub timestamp_bits: u8,
    /// Width of the datacenter id.
    pub datacenter_bits: u8,
    /// Width of the worker id.
    pub worker_bits: u8,
    /// Width of the sequence.
    pub sequence_bits: u8,
    /// The epoch, in Unix milliseconds.
    pub epoch_ms: u64,
    /// The largest ID the layout can hold.
    pub max_id: SnowflakeId,
}

impl From<Layout> for LayoutRecord {
    fn from(layout: Layout) -> LayoutRecord {
        let bits = layout.bits();
        LayoutRecord {
            name: bits.to_string(),
            timestamp_bits: bits.timestamp,
            datacenter_bits: bits.datacenter,
            worker_bits: bits.worker,
            sequence_bits: bits.sequence,
            epoch_ms: layout.epoch_ms(),
            max_id: layout.max_id(),
        }
    }
}

impl From<&Layout> for LayoutRecord {
    fn from(layout: &Layout) -> LayoutRecord {
        LayoutRecord::from(*layout)
    }
}

impl LayoutRecord {
    /// The widths the record gives (whatever its name says).
    pub const fn bits(&self) -> Bits {
        Bits {
            timestamp: self.timestamp_bits,
            datacenter: self.datacenter_bits,
            worker: self.worker_bits,
            sequence: self.sequence_bits,
        }
    }

    /// The layout the record describes, checked as [`Layout::new_at`] checks one at `now_ms`,
    /// after checking that the name, the widths and the largest ID agree.
    pub fn to_layout_at(&self, now_ms: u64) -> Result<Layout, Error> {
        let named: Bits = self.name.parse()?;
        let given = self.bits();
        if named != given {
            let widths = |b: Bits| {
                format!(
                    "{},{},{},{}",
                    b.timestamp, b.datacenter, b.worker, b.sequence
                )
            };
            return Err(Error::InvalidLayout(format!(
                "the record names {} (widths {}) but gives the widths {}",
                self.name,
                widths(named),
                widths(given)
            )));
        }
        let layout = Layout::new_at(self.epoch_ms, named, now_ms)?;
        if layout.max_id() != self.max_id {
            return Err(Error::InvalidLayout(format!(
                "the record's max_id {} is not its widths' largest id {}",
                self.max_id,
                layout.max_id()
            )));
        }
        Ok(layout)
    }

    /// [`LayoutRecord::to_layout_at`] with the system clock's time.
    pub fn to_layout(&self) -> Result<Layout, Error> {
        use crate::clock::{Clock, SystemClock};
        self.to_layout_at(SystemClock.now_ms())
    }
}

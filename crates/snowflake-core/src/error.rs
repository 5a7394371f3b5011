//! The one error type of the core crate.

use std::fmt;

/// The input fields the core validates, named in error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Field {
    /// A Unix timestamp in milliseconds.
    Timestamp,
    /// The datacenter id of a node.
    DatacenterId,
    /// The worker (machine) id of a node.
    WorkerId,
    /// The sequence number within one millisecond.
    Sequence,
    /// A whole Snowflake ID.
    Id,
    /// A number of IDs asked for at once.
    Count,
    /// A layout's epoch, in Unix milliseconds.
    Epoch,
    /// The first millisecond (Unix ms) of a time window.
    From,
    /// The last millisecond (Unix ms) of a time window.
    To,
}

impl Field {
    /// The lowercase name used in error messages, e.g. `"worker id"`.
    pub const fn name(self) -> &'static str {
        match self {
            Field::Timestamp => "timestamp (unix ms)",
            Field::DatacenterId => "datacenter id",
            Field::WorkerId => "worker id",
            Field::Sequence => "sequence",
            Field::Id => "snowflake id",
            Field::Count => "count",
            Field::Epoch => "epoch (unix ms)",
            Field::From => "from (unix ms)",
            Field::To => "to (unix ms)",
        }
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Everything that can go wrong in the core: bad input, a bad layout, or a clock the generator
/// cannot issue IDs from right now.
///
/// Messages are lowercase and name the field, the value and the valid range:
///
/// ```
/// use snowflake_core::Layout;
/// let err = Layout::TWITTER.encode(1_700_000_000_000, 7, 40, 0).unwrap_err();
/// assert_eq!(err.to_string(), "invalid worker id: expected 0..=31, found 40");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A number outside the valid range of its field.
    #[error("invalid {field}: expected {min}..={max}, found {found}")]
    OutOfRange {
        /// The field that was given a bad value.
        field: Field,
        /// The value as given (possibly negative or huge, so kept as text; long input is cut).
        found: String,
        /// The smallest valid value.
        min: u64,
        /// The largest valid value.
        max: u64,
    },
    /// Text that is not a decimal integer at all.
    #[error("invalid {field}: expected a decimal integer in {min}..={max}, found {found:?}")]
    NotANumber {
        /// The field that was given a bad value.
        field: Field,
        /// The text as given (long input is cut).
        found: String,
        /// The smallest valid value.
        min: u64,
        /// The largest valid value.
        max: u64,
    },
    /// A time window that ends before it starts.
    #[error("invalid range: from {from_ms} is after to {to_ms} (unix ms)")]
    InvalidRange {
        /// The window's first millisecond (Unix ms).
        from_ms: u64,
        /// The window's last millisecond (Unix ms).
        to_ms: u64,
    },
    /// Field widths that break a rule of SPEC §9 (see [`Bits::check`](crate::Bits::check)).
    #[error("invalid layout {name}: {rule}")]
    InvalidWidths {
        /// The widths' name, `custom:T,D,W,S`.
        name: String,
        /// The rule they break, and how.
        rule: String,
    },
    /// A layout whose epoch does not work, or a name that is no layout's.
    #[error("invalid layout: {0}")]
    InvalidLayout(String),
    /// The clock reads earlier than the last issued ID's timestamp: issuing now could repeat an
    /// ID, so the generator refuses until the clock passes that timestamp.
    #[error(
        "clock moved backwards: it reads {now_ms} (unix ms), {behind_ms} ms behind the last issued \
         timestamp {last_ms}; refusing to issue ids until it passes {last_ms}"
    )]
    ClockMovedBackwards {
        /// How far the clock is behind the last issued timestamp, in milliseconds.
        behind_ms: u64,
        /// The timestamp of the last issued ID (Unix ms).
        last_ms: u64,
        /// What the clock reads now (Unix ms).
        now_ms: u64,
    },
    /// The clock reads a time past the generator's issue limit: IDs beyond it are not permitted
    /// (yet). A service sets the limit to what it has durably reserved, or closes it entirely
    /// while it cannot prove it may issue.
    #[error(
        "clock reads {now_ms} (unix ms), past the issue limit {limit_ms}: ids beyond it are not permitted yet"
    )]
    PastIssueLimit {
        /// What the clock reads now (Unix ms).
        now_ms: u64,
        /// The last timestamp (Unix ms) the generator may issue at.
        limit_ms: u64,
    },
    /// The clock reads a time before the layout's epoch.
    #[error("clock reads {now_ms} (unix ms), before the layout's epoch {epoch_ms}")]
    ClockBeforeEpoch {
        /// What the clock reads now (Unix ms).
        now_ms: u64,
        /// The layout's epoch (Unix ms).
        epoch_ms: u64,
    },
    /// The clock reads a time past the last one the layout's timestamp field can hold.
    #[error("clock reads {now_ms} (unix ms), past the layout's last representable time {max_ms}")]
    LayoutExhausted {
        /// What the clock reads now (Unix ms).
        now_ms: u64,
        /// The last representable timestamp (Unix ms).
        max_ms: u64,
    },
}

/// The longest piece of user input repeated in an error message.
const MAX_ECHO_CHARS: usize = 40;

/// Cuts user input for an error message so a hostile megabyte never reaches a log line.
pub(crate) fn echo(text: &str) -> String {
    if text.chars().count() <= MAX_ECHO_CHARS {
        text.to_owned()
    } else {
        let mut cut: String = text.chars().take(MAX_ECHO_CHARS).collect();
        cut.push('…');
        cut
    }
}

/// Parses decimal text for `field`, checking it against `min..=max`.
///
/// Only ASCII digits are accepted (with a leading `-` reported as out of range rather than as
/// not-a-number, because "found -5" is the clearer message).
pub(crate) fn parse_in_range(field: Field, text: &str, min: u64, max: u64) -> Result<u64, Error> {
    let digits = text.strip_prefix('-');
    let is_decimal = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    match digits {
        Some(rest) if is_decimal(rest) => {
            if rest.bytes().all(|b| b == b'0') && min == 0 {
                // "-0" is zero.
                return Ok(0);
            }
            return Err(Error::OutOfRange {
                field,
                found: echo(text),
                min,
                max,
            });
        }
        Some(_) => {
            return Err(Error::NotANumber {
                field,
                found: echo(text),
                min,
                max,
            });
        }
        None => {}
    }
    if !is_decimal(text) {
        return Err(Error::NotANumber {
            field,
            found: echo(text),
            min,
            max,
        });
    }
    match text.parse::<u64>() {
        Ok(value) if (min..=max).contains(&value) => Ok(value),
        // Either outside the range or beyond u64 altogether: both are "out of range".
        _ => Err(Error::OutOfRange {
            field,
            found: echo(text),
            min,
            max,
        }),
    }
}

/// Checks an integer for `field` against `min..=max`.
pub(crate) fn check_range(field: Field, value: u64, min: u64, max: u64) -> Result<u64, Error> {
    if (min..=max).contains(&value) {
        Ok(value)
    } else {
        Err(Error::OutOfRange {
            field,
            found: value.to_string(),
            min,
            max,
        })
    }
}

//! The widths of an ID's four fields, and their names: `twitter`, `js-safe`, `custom:T,D,W,S`.

use crate::error::{Error, echo};
use std::fmt;
use std::str::FromStr;

/// The widths of the four fields of an ID, most significant first: timestamp | datacenter |
/// worker | sequence. The bits above them (at least the sign bit) are always 0.
///
/// Its text form is the layout's name (SPEC §9): `twitter` (41 | 5 | 5 | 12, the default),
/// `js-safe` (41 | 2 | 4 | 6: every ID ≤ 2^53 − 1, so a JavaScript number holds it exactly) or
/// `custom:T,D,W,S`. A name describes the widths only; the epoch is the [`Layout`]'s.
///
/// ```
/// use snowflake_core::Bits;
/// let bits: Bits = "js-safe".parse()?;
/// assert_eq!((bits.timestamp, bits.datacenter, bits.worker, bits.sequence), (41, 2, 4, 6));
/// let custom: Bits = "custom:40,3,5,10".parse()?;
/// assert_eq!(custom.to_string(), "custom:40,3,5,10");
/// // Twitter's widths are called twitter, however they are spelled.
/// assert_eq!("custom:41,5,5,12".parse::<Bits>()?.to_string(), "twitter");
/// let err = "custom:41,5,5,13".parse::<Bits>().unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     "invalid layout custom:41,5,5,13: the widths must sum to at most 63 (the sign bit \
///      stays 0), found 41+5+5+13=64"
/// );
/// # Ok::<(), snowflake_core::Error>(())
/// ```
///
/// [`Layout`]: crate::Layout
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

/// The fewest timestamp bits a layout may have: 2^30 ms is about 12 days.
pub const MIN_TIMESTAMP_BITS: u8 = 30;

/// The most bits an ID may use: the sign bit of a signed 64-bit integer stays 0.
pub const MAX_ID_BITS: u8 = 63;

impl Bits {
    /// Twitter's 2010 widths: 41 | 5 | 5 | 12 (the default, exactly the seed's).
    pub const TWITTER: Bits = Bits {
        timestamp: 41,
        datacenter: 5,
        worker: 5,
        sequence: 12,
    };

    /// The JavaScript-safe widths: 41 | 2 | 4 | 6, 53 bits in all, so every ID is at most
    /// 2^53 − 1 = 9007199254740991; 4 datacenters × 16 workers, 64 IDs per millisecond per node.
    pub const JS_SAFE: Bits = Bits {
        timestamp: 41,
        datacenter: 2,
        worker: 4,
        sequence: 6,
    };

    /// The named profiles, by name.
    pub const PROFILES: [(&'static str, Bits); 2] =
        [("twitter", Bits::TWITTER), ("js-safe", Bits::JS_SAFE)];

    /// How many bits the four fields take together (the rest, above them, are 0).
    pub const fn total(&self) -> u32 {
        self.timestamp as u32 + self.datacenter as u32 + self.worker as u32 + self.sequence as u32
    }

    /// Checks the rules of SPEC §9, and says which one the widths break: at least 30 timestamp
    /// bits, at least 1 sequence bit, at least 1 bit of datacenter and worker together, at most
    /// 63 bits in all.
    ///
    /// ```
    /// use snowflake_core::Bits;
    /// assert!(Bits::JS_SAFE.check().is_ok());
    /// let err = Bits { timestamp: 41, datacenter: 0, worker: 0, sequence: 12 }.check().unwrap_err();
    /// assert_eq!(
    ///     err.to_string(),
    ///     "invalid layout custom:41,0,0,12: the datacenter and worker ids need at least 1 bit \
    ///      together, found 0+0"
    /// );
    /// ```
    pub fn check(&self) -> Result<Bits, Error> {
        let Bits {
            timestamp,
            datacenter,
            worker,
            sequence,
        } = *self;
        let broken = if timestamp < MIN_TIMESTAMP_BITS {
            format!(
                "the timestamp needs at least {MIN_TIMESTAMP_BITS} bits (about 12 days of \
                 milliseconds), found {timestamp}"
            )
        } else if sequence == 0 {
            "the sequence needs at least 1 bit, found 0".to_owned()
        } else if datacenter == 0 && worker == 0 {
            "the datacenter and worker ids need at least 1 bit together, found 0+0".to_owned()
        } else if self.total() > u32::from(MAX_ID_BITS) {
            format!(
                "the widths must sum to at most {MAX_ID_BITS} (the sign bit stays 0), found \
                 {timestamp}+{datacenter}+{worker}+{sequence}={}",
                self.total()
            )
        } else {
            return Ok(*self);
        };
        Err(Error::InvalidWidths {
            name: self.to_string(),
            rule: broken,
        })
    }
}

impl Default for Bits {
    fn default() -> Self {
        Bits::TWITTER
    }
}

impl fmt::Display for Bits {
    /// The layout's name: `twitter`, `js-safe`, or `custom:T,D,W,S`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some((name, _)) = Bits::PROFILES.iter().find(|(_, bits)| bits == self) {
            return f.write_str(name);
        }
        write!(
            f,
            "custom:{},{},{},{}",
            self.timestamp, self.datacenter, self.worker, self.sequence
        )
    }
}

impl FromStr for Bits {
    type Err = Error;

    /// A layout's name (`twitter`, `js-safe`, `custom:T,D,W,S`), checked by [`Bits::check`].
    fn from_str(text: &str) -> Result<Bits, Error> {
        if let Some((_, bits)) = Bits::PROFILES.iter().find(|(name, _)| *name == text) {
            return Ok(*bits);
        }
        let Some(widths) = text.strip_prefix("custom:") else {
            return Err(Error::InvalidLayout(format!(
                "expected twitter, js-safe or custom:T,D,W,S (timestamp, datacenter, worker and \
                 sequence widths), found {:?}",
                echo(text)
            )));
        };
        let mut parsed = [0u8; 4];
        let mut parts = widths.split(',');
        for slot in &mut parsed {
            let part = parts.next().unwrap_or("");
            *slot = part
                .parse::<u8>()
                .ok()
                .filter(|w| *w <= MAX_ID_BITS && !part.starts_with('+'))
                .ok_or_else(|| {
                    Error::InvalidLayout(format!(
                        "expected custom:T,D,W,S with four widths in 0..={MAX_ID_BITS}, found {:?}",
                        echo(text)
                    ))
                })?;
        }
        if parts.next().is_some() {
            return Err(Error::InvalidLayout(format!(
                "expected custom:T,D,W,S with four widths in 0..={MAX_ID_BITS}, found {:?}",
                echo(text)
            )));
        }
        let [timestamp, datacenter, worker, sequence] = parsed;
        Bits {
            timestamp,
            datacenter,
            worker,
            sequence,
        }
        .check()
    }
}

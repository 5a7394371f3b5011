//! The WAL record of a reservation: what a standby (and crash recovery) replays to learn the
//! mark. Fixed-size, little-endian, versioned by its first byte.

use crate::mark::Identity;

/// The record's size in bytes.
pub const LEN: usize = 48;
/// The format version in the first byte.
const VERSION: u8 = 1;

/// One reservation: from now on the mark of `identity` is `mark_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reservation {
    /// The identity the mark belongs to.
    pub identity: Identity,
    /// The new mark (Unix ms).
    pub mark_ms: u64,
    /// The writer's trusted time then (Unix ms).
    pub trusted_ms: u64,
}

impl Reservation {
    /// The record's bytes.
    pub fn encode(&self) -> [u8; LEN] {
        let mut out = [0u8; LEN];
        out[0] = VERSION;
        out[4..8].copy_from_slice(&self.identity.bits);
        out[8..16].copy_from_slice(&self.identity.datacenter_id.to_le_bytes());
        out[16..24].copy_from_slice(&self.identity.worker_id.to_le_bytes());
        out[24..32].copy_from_slice(&self.identity.epoch_ms.to_le_bytes());
        out[32..40].copy_from_slice(&self.mark_ms.to_le_bytes());
        out[40..48].copy_from_slice(&self.trusted_ms.to_le_bytes());
        out
    }

    /// Reads a record; `Err` says why it is not one this version understands.
    pub fn decode(bytes: &[u8]) -> Result<Reservation, String> {
        if bytes.len() != LEN {
            return Err(format!(
                "snowflake wal record of {} bytes, expected {LEN}",
                bytes.len()
            ));
        }
        if bytes[0] != VERSION {
            return Err(format!(
                "snowflake wal record of format version {}, this extension reads {VERSION}",
                bytes[0]
            ));
        }
        let u64_at = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[at..at + 8]);
            u64::from_le_bytes(b)
        };
        Ok(Reservation {
            identity: Identity {
                datacenter_id: u64_at(8),
                worker_id: u64_at(16),
                bits: [bytes[4], bytes[5], bytes[6], bytes[7]],
                epoch_ms: u64_at(24),
            },
            mark_ms: u64_at(32),
            trusted_ms: u64_at(40),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_refusals() {
        let r = Reservation {
            identity: Identity {
                datacenter_id: 31,
                worker_id: 1,
                bits: [41, 5, 5, 12],
                epoch_ms: 1_288_834_974_657,
            },
            mark_ms: 1_800_000_003_000,
            trusted_ms: 1_800_000_000_000,
        };
        assert_eq!(Reservation::decode(&r.encode()), Ok(r));
        assert!(
            Reservation::decode(&r.encode()[..40])
                .unwrap_err()
                .contains("40 bytes")
        );
        let mut other = r.encode();
        other[0] = 9;
        assert!(
            Reservation::decode(&other)
                .unwrap_err()
                .contains("format version 9")
        );
    }
}

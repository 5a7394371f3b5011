//! Property tests: every valid combination round-trips, every invalid one is rejected.

use proptest::prelude::*;
use snowflake_core::{Field, Layout, SnowflakeId, TWITTER_EPOCH_MS};

const MAX_TS: u64 = TWITTER_EPOCH_MS + (1 << 41) - 1;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn encode_then_decode_round_trips(
        ts in TWITTER_EPOCH_MS..=MAX_TS, dc in 0u64..=31, w in 0u64..=31, seq in 0u64..=4095
    ) {
        let id = Layout::TWITTER.encode(ts, dc, w, seq).unwrap();
        let parts = Layout::TWITTER.decode(id);
        prop_assert_eq!((parts.timestamp_ms, parts.datacenter_id, parts.worker_id, parts.sequence), (ts, dc, w, seq));
        // The spec's formula, literally.
        prop_assert_eq!(id.as_u64(), ((ts - TWITTER_EPOCH_MS) << 22) | (dc << 17) | (w << 12) | seq);
        prop_assert_eq!(id.to_string().parse::<SnowflakeId>().unwrap(), id);
    }

    #[test]
    fn every_63_bit_value_decodes_and_re_encodes(raw in 0u64..=i64::MAX as u64) {
        let id = SnowflakeId::try_from(raw).unwrap();
        let parts = Layout::TWITTER.decode(id);
        prop_assert_eq!(Layout::TWITTER.encode_parts(parts).unwrap(), id);
        prop_assert_eq!(parts.sequence, raw & 0xFFF);
        prop_assert_eq!(parts.worker_id, (raw >> 12) & 0x1F);
        prop_assert_eq!(parts.datacenter_id, (raw >> 17) & 0x1F);
        prop_assert_eq!(parts.timestamp_ms, (raw >> 22) + TWITTER_EPOCH_MS);
    }

    #[test]
    fn out_of_range_timestamps_are_rejected(ts in prop_oneof![0..TWITTER_EPOCH_MS, (MAX_TS + 1)..]) {
        let err = Layout::TWITTER.encode(ts, 0, 0, 0).unwrap_err().to_string();
        prop_assert_eq!(err, format!("invalid timestamp (unix ms): expected {TWITTER_EPOCH_MS}..={MAX_TS}, found {ts}"));
    }

    #[test]
    fn out_of_range_node_ids_and_sequences_are_rejected(bad in 32u64.., seq in 4096u64..) {
        prop_assert!(Layout::TWITTER.encode(TWITTER_EPOCH_MS, bad, 0, 0).is_err());
        prop_assert!(Layout::TWITTER.encode(TWITTER_EPOCH_MS, 0, bad, 0).is_err());
        prop_assert!(Layout::TWITTER.encode(TWITTER_EPOCH_MS, 0, 0, seq).is_err());
    }

    #[test]
    fn out_of_range_ids_are_rejected(raw in (1u64 << 63).., neg in i64::MIN..0) {
        prop_assert!(SnowflakeId::try_from(raw).is_err());
        prop_assert!(raw.to_string().parse::<SnowflakeId>().is_err());
        prop_assert!(SnowflakeId::try_from(neg).is_err());
        prop_assert!(neg.to_string().parse::<SnowflakeId>().is_err());
    }

    #[test]
    fn arbitrary_text_never_panics(text in ".{0,64}") {
        let parsed = text.parse::<SnowflakeId>();
        if let Ok(id) = parsed {
            let printed = id.to_string();
            prop_assert_eq!(printed.trim_start_matches('0'), text.trim_start_matches('0'));
        }
        for field in [Field::Timestamp, Field::DatacenterId, Field::WorkerId, Field::Sequence] {
            let _ = Layout::TWITTER.parse(field, &text);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let text = String::from_utf8_lossy(&bytes);
        let _ = text.parse::<SnowflakeId>();
    }
}

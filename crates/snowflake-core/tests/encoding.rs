//! The ID type, the layout, encode and decode (SPEC §2).

use snowflake_core::{Bits, Error, Field, Layout, SnowflakeId, TWITTER_EPOCH_MS, format_unix_ms};

const EXAMPLE_ID: u64 = 1_724_551_110_457_221_119;

#[test]
fn seed_worked_example_encodes() {
    let id = Layout::TWITTER
        .encode(1_700_000_000_000, 7, 13, 4095)
        .unwrap();
    assert_eq!(id.as_u64(), EXAMPLE_ID);
    assert_eq!(id.as_i64(), EXAMPLE_ID as i64);
    // The intermediate value the seed quotes.
    assert_eq!(1_700_000_000_000 - TWITTER_EPOCH_MS, 411_165_025_343);
    assert_eq!(411_165_025_343_u64 << 22, 1_724_551_110_456_246_272);
}

#[test]
fn seed_worked_example_decodes() {
    let id: SnowflakeId = "1724551110457221119".parse().unwrap();
    assert_eq!(id.timestamp_ms(), 1_700_000_000_000);
    assert_eq!(id.datacenter_id(), 7);
    assert_eq!(id.worker_id(), 13);
    assert_eq!(id.sequence(), 4095);
    let decoded = Layout::TWITTER.describe(id).unwrap();
    assert_eq!(decoded.time, "2023-11-14T22:13:20.000Z");
    assert_eq!(
        decoded.to_string(),
        "1724551110457221119 timestamp_ms=1700000000000 time=2023-11-14T22:13:20.000Z \
         datacenter_id=7 worker_id=13 sequence=4095"
    );
}

#[test]
fn id_zero_is_the_epoch() {
    let decoded = Layout::TWITTER.describe(SnowflakeId::MIN).unwrap();
    assert_eq!(decoded.timestamp_ms, 1_288_834_974_657);
    assert_eq!(decoded.time, "2010-11-04T01:42:54.657Z");
    assert_eq!(
        (decoded.datacenter_id, decoded.worker_id, decoded.sequence),
        (0, 0, 0)
    );
}

#[test]
fn the_timestamp_field_runs_out_in_2080() {
    let layout = Layout::TWITTER;
    assert_eq!(layout.max_timestamp_ms(), TWITTER_EPOCH_MS + (1 << 41) - 1);
    assert_eq!(
        format_unix_ms(layout.max_timestamp_ms()),
        "2080-07-10T17:30:30.208Z"
    );
    assert_eq!(layout.node_count(), 1024);
    assert_eq!(layout.max_ids_per_ms(), 4096);
    assert_eq!(layout.max_ids_per_second(), 4_096_000);
    let last = layout
        .encode(layout.max_timestamp_ms(), 31, 31, 4095)
        .unwrap();
    assert_eq!(last, SnowflakeId::MAX);
}

// The 2010 IdWorkerSpec's mask cases: each field at its maximum lands in its own bits only.

#[test]
fn worker_id_mask() {
    let id = Layout::TWITTER
        .encode(TWITTER_EPOCH_MS, 0, 0x1F, 0)
        .unwrap()
        .as_u64();
    assert_eq!((id & 0x1F000) >> 12, 0x1F);
    assert_eq!(id, 0x1F << 12);
}

#[test]
fn datacenter_id_mask() {
    let id = Layout::TWITTER
        .encode(TWITTER_EPOCH_MS, 0x1F, 0, 0)
        .unwrap()
        .as_u64();
    assert_eq!((id & 0x3E0000) >> 17, 0x1F);
    assert_eq!(id, 0x1F << 17);
}

#[test]
fn sequence_mask() {
    let id = Layout::TWITTER
        .encode(TWITTER_EPOCH_MS, 0, 0, 0xFFF)
        .unwrap()
        .as_u64();
    assert_eq!(id, 0xFFF);
}

#[test]
fn timestamp_mask() {
    let max = Layout::TWITTER.max_timestamp_ms();
    let id = Layout::TWITTER.encode(max, 0, 0, 0).unwrap().as_u64();
    assert_eq!(id >> 22, (1 << 41) - 1);
    assert_eq!(id & 0x3F_FFFF, 0);
    assert_eq!(SnowflakeId::try_from(id).unwrap().timestamp_ms(), max);
}

#[test]
fn out_of_range_fields_are_rejected_with_the_field_value_and_range() {
    let l = Layout::TWITTER;
    let cases: [(Error, &str); 6] = [
        (
            l.encode(TWITTER_EPOCH_MS - 1, 0, 0, 0).unwrap_err(),
            "invalid timestamp (unix ms): expected 1288834974657..=3487858230208, found 1288834974656",
        ),
        (
            l.encode(3_487_858_230_209, 0, 0, 0).unwrap_err(),
            "invalid timestamp (unix ms): expected 1288834974657..=3487858230208, found 3487858230209",
        ),
        (
            l.encode(TWITTER_EPOCH_MS, 32, 0, 0).unwrap_err(),
            "invalid datacenter id: expected 0..=31, found 32",
        ),
        (
            l.encode(TWITTER_EPOCH_MS, 0, 32, 0).unwrap_err(),
            "invalid worker id: expected 0..=31, found 32",
        ),
        (
            l.encode(TWITTER_EPOCH_MS, 0, 0, 4096).unwrap_err(),
            "invalid sequence: expected 0..=4095, found 4096",
        ),
        (
            l.encode(TWITTER_EPOCH_MS, 0, 0, u64::MAX).unwrap_err(),
            "invalid sequence: expected 0..=4095, found 18446744073709551615",
        ),
    ];
    for (err, message) in cases {
        assert_eq!(err.to_string(), message);
    }
}

#[test]
fn ids_parse_strictly() {
    assert_eq!("0".parse::<SnowflakeId>().unwrap(), SnowflakeId::MIN);
    assert_eq!(
        "9223372036854775807".parse::<SnowflakeId>().unwrap(),
        SnowflakeId::MAX
    );
    let rejected = [
        (
            "9223372036854775808",
            "invalid snowflake id: expected 0..=9223372036854775807, found 9223372036854775808",
        ),
        (
            "-1",
            "invalid snowflake id: expected 0..=9223372036854775807, found -1",
        ),
        (
            "99999999999999999999999",
            "invalid snowflake id: expected 0..=9223372036854775807, found 99999999999999999999999",
        ),
        (
            "abc",
            "invalid snowflake id: expected a decimal integer in 0..=9223372036854775807, found \"abc\"",
        ),
        (
            "",
            "invalid snowflake id: expected a decimal integer in 0..=9223372036854775807, found \"\"",
        ),
        (
            "+5",
            "invalid snowflake id: expected a decimal integer in 0..=9223372036854775807, found \"+5\"",
        ),
        (
            " 5",
            "invalid snowflake id: expected a decimal integer in 0..=9223372036854775807, found \" 5\"",
        ),
        (
            "1.5",
            "invalid snowflake id: expected a decimal integer in 0..=9223372036854775807, found \"1.5\"",
        ),
        (
            "0x10",
            "invalid snowflake id: expected a decimal integer in 0..=9223372036854775807, found \"0x10\"",
        ),
    ];
    for (text, message) in rejected {
        assert_eq!(
            text.parse::<SnowflakeId>().unwrap_err().to_string(),
            message,
            "{text:?}"
        );
    }
}

#[test]
fn hostile_input_is_cut_in_messages() {
    let long = "7".repeat(100_000);
    let message = long.parse::<SnowflakeId>().unwrap_err().to_string();
    assert!(message.len() < 200, "{message}");
    assert!(message.ends_with('…'));
}

#[test]
fn integer_conversions_reject_out_of_range() {
    assert!(SnowflakeId::try_from(-1_i64).is_err());
    assert!(SnowflakeId::try_from(i64::MIN).is_err());
    assert_eq!(SnowflakeId::try_from(i64::MAX).unwrap(), SnowflakeId::MAX);
    assert!(SnowflakeId::try_from(1_u64 << 63).is_err());
    assert!(SnowflakeId::try_from(u64::MAX).is_err());
    assert_eq!(SnowflakeId::new(1 << 63), None);
    let id = SnowflakeId::try_from(EXAMPLE_ID).unwrap();
    assert_eq!(u64::from(id), EXAMPLE_ID);
    assert_eq!(i64::from(id), EXAMPLE_ID as i64);
    assert_eq!(
        SnowflakeId::try_from(-5_i64).unwrap_err().to_string(),
        "invalid snowflake id: expected 0..=9223372036854775807, found -5"
    );
}

#[test]
fn system_time_matches_timestamp() {
    use std::time::{Duration, UNIX_EPOCH};
    let id = SnowflakeId::try_from(EXAMPLE_ID).unwrap();
    assert_eq!(
        id.system_time(),
        UNIX_EPOCH + Duration::from_millis(1_700_000_000_000)
    );
}

#[test]
fn field_parsing_names_field_value_and_range() {
    let l = Layout::TWITTER;
    assert_eq!(l.parse(Field::WorkerId, "31").unwrap(), 31);
    assert_eq!(
        l.parse(Field::WorkerId, "40").unwrap_err().to_string(),
        "invalid worker id: expected 0..=31, found 40"
    );
    assert_eq!(
        l.parse(Field::Sequence, "x").unwrap_err().to_string(),
        "invalid sequence: expected a decimal integer in 0..=4095, found \"x\""
    );
    assert_eq!(
        l.parse(Field::Timestamp, "-5").unwrap_err().to_string(),
        "invalid timestamp (unix ms): expected 1288834974657..=3487858230208, found -5"
    );
}

#[test]
fn custom_layouts_are_validated() {
    let now = 1_700_000_000_000;
    let bits = Bits {
        timestamp: 39,
        datacenter: 0,
        worker: 8,
        sequence: 16,
    };
    let layout = Layout::new_at(1_600_000_000_000, bits, now).unwrap();
    assert_eq!(layout.node_count(), 256);
    assert_eq!(layout.max_ids_per_second(), 65_536_000);
    assert_eq!(layout.max_datacenter_id(), 0);
    assert_eq!(layout.max_timestamp_ms(), 1_600_000_000_000 + (1 << 39) - 1);
    let id = layout.encode(1_650_000_000_000, 0, 255, 65_535).unwrap();
    let parts = layout.decode(id).unwrap();
    assert_eq!(
        (
            parts.timestamp_ms,
            parts.datacenter_id,
            parts.worker_id,
            parts.sequence
        ),
        (1_650_000_000_000, 0, 255, 65_535)
    );
    assert_eq!(
        layout
            .encode(1_650_000_000_000, 1, 0, 0)
            .unwrap_err()
            .to_string(),
        "invalid datacenter id: expected 0..=0, found 1"
    );

    let bad_sum = Layout::new_at(
        0,
        Bits {
            timestamp: 41,
            datacenter: 5,
            worker: 5,
            sequence: 13,
        },
        now,
    );
    assert_eq!(
        bad_sum.unwrap_err().to_string(),
        "invalid layout custom:41,5,5,13: the widths must sum to at most 63 (the sign bit stays \
         0), found 41+5+5+13=64"
    );
    let future = Layout::new_at(now + 1, Bits::TWITTER, now);
    assert!(future.unwrap_err().to_string().contains("is in the future"));
    let no_time = Layout::new_at(
        0,
        Bits {
            timestamp: 0,
            datacenter: 20,
            worker: 20,
            sequence: 23,
        },
        now,
    );
    assert!(no_time.is_err());
    assert_eq!(
        Layout::with_epoch(TWITTER_EPOCH_MS).unwrap(),
        Layout::TWITTER
    );
    assert_eq!(Layout::default(), Layout::TWITTER);
}

#[test]
fn layout_reports_itself() {
    assert_eq!(
        Layout::TWITTER.to_string(),
        "epoch 1288834974657 (2010-11-04T01:42:54.657Z), bits 41/5/5/12, last time 2080-07-10T17:30:30.208Z"
    );
}

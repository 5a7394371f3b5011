//! The `serde` feature: strings in JSON, both forms accepted when reading.

use snowflake_core::{Layout, SnowflakeId};

#[test]
fn json_writes_a_string() {
    let id = SnowflakeId::try_from(1_724_551_110_457_221_119_u64).unwrap();
    assert_eq!(
        serde_json::to_string(&id).unwrap(),
        "\"1724551110457221119\""
    );
}

#[test]
fn json_reads_a_string_or_a_number() {
    let from_string: SnowflakeId = serde_json::from_str("\"1724551110457221119\"").unwrap();
    let from_number: SnowflakeId = serde_json::from_str("1724551110457221119").unwrap();
    assert_eq!(from_string, from_number);
    assert_eq!(from_string.as_u64(), 1_724_551_110_457_221_119);
}

#[test]
fn json_rejects_out_of_range() {
    for bad in [
        "-1",
        "\"-1\"",
        "9223372036854775808",
        "\"9223372036854775808\"",
        "1.5",
        "\"x\"",
        "null",
        "[]",
    ] {
        assert!(serde_json::from_str::<SnowflakeId>(bad).is_err(), "{bad}");
    }
    let err = serde_json::from_str::<SnowflakeId>("-1")
        .unwrap_err()
        .to_string();
    assert!(err.contains("invalid snowflake id"), "{err}");
}

#[test]
fn decoded_has_the_spec_shape() {
    let id = SnowflakeId::try_from(1_724_551_110_457_221_119_u64).unwrap();
    assert_eq!(
        serde_json::to_string(&Layout::TWITTER.describe(id).unwrap()).unwrap(),
        r#"{"id":"1724551110457221119","timestamp_ms":1700000000000,"time":"2023-11-14T22:13:20.000Z","datacenter_id":7,"worker_id":13,"sequence":4095}"#
    );
}

#[test]
fn a_layout_record_has_the_spec_shape_and_reads_back() {
    use snowflake_core::LayoutRecord;
    let json = serde_json::to_string(&LayoutRecord::from(Layout::JS_SAFE)).unwrap();
    assert_eq!(
        json,
        r#"{"name":"js-safe","timestamp_bits":41,"datacenter_bits":2,"worker_bits":4,"sequence_bits":6,"epoch_ms":1288834974657,"max_id":"9007199254740991"}"#
    );
    let back: LayoutRecord = serde_json::from_str(&json).unwrap();
    assert_eq!(back.to_layout().unwrap(), Layout::JS_SAFE);
}

#[test]
fn an_id_range_is_two_strings() {
    let range = Layout::TWITTER
        .id_range(1_700_000_000_000, 1_700_000_000_000)
        .unwrap();
    assert_eq!(
        serde_json::to_string(&range).unwrap(),
        r#"{"min_id":"1724551110456246272","max_id":"1724551110460440575"}"#
    );
}

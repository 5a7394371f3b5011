//! Layouts other than Twitter's (SPEC §9): the named profiles, custom widths and their rules,
//! the largest ID, the last millisecond, ID ranges of a time window, and the generator under
//! `js-safe`.

use crate::support::ScriptedClock;
use snowflake_core::{
    Bits, Error, Field, Generator, IdRange, Layout, LayoutRecord, MAX_SAFE_INTEGER, SnowflakeId,
    TWITTER_EPOCH_MS, format_unix_ms,
};

const NOW: u64 = 1_700_000_000_000;

#[test]
fn twitter_is_the_default_and_exactly_the_seed() {
    assert_eq!(Layout::default(), Layout::TWITTER);
    assert_eq!(Bits::default(), Bits::TWITTER);
    assert_eq!(Layout::TWITTER.name(), "twitter");
    assert_eq!("twitter".parse::<Bits>().unwrap(), Bits::TWITTER);
    assert_eq!(Layout::TWITTER.max_id(), SnowflakeId::MAX);
    assert_eq!(
        (
            Layout::TWITTER.timestamp_shift(),
            Layout::TWITTER.datacenter_shift(),
            Layout::TWITTER.worker_shift()
        ),
        (22, 17, 12)
    );
    // The worked example, through a layout built from the name.
    let layout = Layout::new_at(TWITTER_EPOCH_MS, "twitter".parse().unwrap(), NOW).unwrap();
    let id = layout.encode(1_700_000_000_000, 7, 13, 4095).unwrap();
    assert_eq!(id.as_u64(), 1_724_551_110_457_221_119);
    assert_eq!(
        layout.describe(id).unwrap().to_string(),
        "1724551110457221119 timestamp_ms=1700000000000 time=2023-11-14T22:13:20.000Z \
         datacenter_id=7 worker_id=13 sequence=4095"
    );
}

#[test]
fn js_safe_holds_every_id_in_53_bits() {
    let layout = Layout::JS_SAFE;
    assert_eq!(layout.name(), "js-safe");
    assert_eq!(layout.bits(), Bits::JS_SAFE);
    assert_eq!(layout.epoch_ms(), TWITTER_EPOCH_MS);
    assert_eq!(layout.max_id().as_u64(), 9_007_199_254_740_991);
    assert_eq!(layout.max_id().as_u64(), MAX_SAFE_INTEGER);
    assert!(layout.ids_fit_js_number());
    assert!(!Layout::TWITTER.ids_fit_js_number());
    assert_eq!(
        (layout.max_datacenter_id(), layout.max_worker_id()),
        (3, 15)
    );
    assert_eq!(layout.node_count(), 64);
    assert_eq!(layout.max_ids_per_ms(), 64);
    assert_eq!(layout.max_ids_per_second(), 64_000);
    assert_eq!(
        format_unix_ms(layout.max_timestamp_ms()),
        "2080-07-10T17:30:30.208Z"
    );
    let last = layout.encode(layout.max_timestamp_ms(), 3, 15, 63).unwrap();
    assert_eq!(last, layout.max_id());
    let parts = layout.decode(last).unwrap();
    assert_eq!(
        (parts.datacenter_id, parts.worker_id, parts.sequence),
        (3, 15, 63)
    );
}

#[test]
fn names_round_trip_and_bad_names_say_what_is_expected() {
    for (name, bits) in [
        ("twitter", Bits::TWITTER),
        ("js-safe", Bits::JS_SAFE),
        (
            "custom:40,3,5,10",
            Bits {
                timestamp: 40,
                datacenter: 3,
                worker: 5,
                sequence: 10,
            },
        ),
        (
            "custom:30,0,1,1",
            Bits {
                timestamp: 30,
                datacenter: 0,
                worker: 1,
                sequence: 1,
            },
        ),
    ] {
        let parsed: Bits = name.parse().unwrap();
        assert_eq!(parsed, bits, "{name}");
        assert_eq!(parsed.to_string(), name);
    }
    // Spelled as custom widths, a profile is still called by its name.
    assert_eq!(
        "custom:41,2,4,6".parse::<Bits>().unwrap().to_string(),
        "js-safe"
    );
    let expected = "invalid layout: expected twitter, js-safe or custom:T,D,W,S (timestamp, \
                    datacenter, worker and sequence widths), found";
    for bad in ["", "Twitter", "js_safe", "custom", "snowflake"] {
        let err = bad.parse::<Bits>().unwrap_err().to_string();
        assert!(err.starts_with(expected), "{bad}: {err}");
    }
    for bad in [
        "custom:",
        "custom:41,5,5",
        "custom:41,5,5,12,0",
        "custom:41,5,5,x",
        "custom:41,5,5,-1",
        "custom:41,5,5,+1",
        "custom:41, 5,5,12",
        "custom:64,0,0,0",
        "custom:99999999999,5,5,12",
    ] {
        let err = bad.parse::<Bits>().unwrap_err().to_string();
        assert!(
            err.starts_with("invalid layout: expected custom:T,D,W,S with four widths in 0..=63"),
            "{bad}: {err}"
        );
    }
    // Hostile input is cut in the message.
    let long = format!("custom:{}", "9".repeat(10_000));
    assert!(long.parse::<Bits>().unwrap_err().to_string().len() < 200);
}

#[test]
fn each_rule_of_the_widths_is_named_when_broken() {
    let cases = [
        (
            "custom:29,5,5,12",
            "invalid layout custom:29,5,5,12: the timestamp needs at least 30 bits (about 12 days \
             of milliseconds), found 29",
        ),
        (
            "custom:41,5,5,0",
            "invalid layout custom:41,5,5,0: the sequence needs at least 1 bit, found 0",
        ),
        (
            "custom:41,0,0,12",
            "invalid layout custom:41,0,0,12: the datacenter and worker ids need at least 1 bit \
             together, found 0+0",
        ),
        (
            "custom:41,5,5,13",
            "invalid layout custom:41,5,5,13: the widths must sum to at most 63 (the sign bit \
             stays 0), found 41+5+5+13=64",
        ),
    ];
    for (name, message) in cases {
        assert_eq!(name.parse::<Bits>().unwrap_err().to_string(), message);
    }
    // Layout::new checks the widths too.
    let err = Layout::new_at(
        TWITTER_EPOCH_MS,
        Bits {
            timestamp: 41,
            datacenter: 5,
            worker: 5,
            sequence: 13,
        },
        NOW,
    )
    .unwrap_err();
    assert!(matches!(err, Error::InvalidWidths { .. }), "{err:?}");
}

#[test]
fn a_layout_whose_last_millisecond_has_passed_is_refused() {
    // Twitter's widths from the Unix epoch ran out in 2039; from 2010 they last until 2080.
    let bits = Bits::TWITTER;
    let last = (1 << 41) - 1;
    assert!(Layout::new_at(0, bits, last).is_ok());
    let err = Layout::new_at(0, bits, last + 1).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "invalid layout: twitter with epoch 0 ran out at 2039-09-07T15:47:35.551Z (its last \
             millisecond, {last}); now is {}",
            last + 1
        )
    );
    // And an epoch in the future is refused as before.
    let err = Layout::new_at(NOW + 1, Bits::JS_SAFE, NOW).unwrap_err();
    assert!(err.to_string().contains("is in the future"), "{err}");
}

#[test]
fn ids_above_the_layouts_max_id_are_refused_by_decode() {
    let layout = Layout::JS_SAFE;
    let above = SnowflakeId::try_from(MAX_SAFE_INTEGER + 1).unwrap();
    let expected = "invalid snowflake id: expected 0..=9007199254740991, found 9007199254740992";
    assert_eq!(layout.decode(above).unwrap_err().to_string(), expected);
    assert_eq!(layout.describe(above).unwrap_err().to_string(), expected);
    assert_eq!(layout.check_id(above).unwrap_err().to_string(), expected);
    assert_eq!(
        layout.parse_id("9007199254740992").unwrap_err().to_string(),
        expected
    );
    assert_eq!(
        layout.parse(Field::Id, "9223372036854775807").unwrap_err(),
        Error::OutOfRange {
            field: Field::Id,
            found: "9223372036854775807".into(),
            min: 0,
            max: MAX_SAFE_INTEGER,
        }
    );
    assert_eq!(
        layout.parse_id("9007199254740991").unwrap().as_u64(),
        MAX_SAFE_INTEGER
    );
    // Under Twitter's layout every 63-bit value still decodes.
    assert!(Layout::TWITTER.decode(SnowflakeId::MAX).is_ok());
}

#[test]
fn validation_messages_follow_the_widths() {
    let layout = Layout::JS_SAFE;
    let message = |r: Result<SnowflakeId, Error>| r.unwrap_err().to_string();
    assert_eq!(
        message(layout.encode(NOW, 4, 0, 0)),
        "invalid datacenter id: expected 0..=3, found 4"
    );
    assert_eq!(
        message(layout.encode(NOW, 0, 16, 0)),
        "invalid worker id: expected 0..=15, found 16"
    );
    assert_eq!(
        message(layout.encode(NOW, 0, 0, 64)),
        "invalid sequence: expected 0..=63, found 64"
    );
    let generator = Generator::builder().layout(layout).datacenter_id(4).build();
    assert_eq!(
        generator.unwrap_err().to_string(),
        "invalid datacenter id: expected 0..=3, found 4"
    );
    let generator = Generator::builder().layout(layout).build().unwrap();
    assert_eq!(
        generator.next_batch(65).unwrap_err().to_string(),
        "invalid count: expected 1..=64, found 65"
    );
}

#[test]
fn id_ranges_cover_every_node_of_the_window_and_refuse_bad_bounds() {
    let layout = Layout::JS_SAFE;
    let IdRange { min_id, max_id } = layout.id_range(NOW, NOW + 9).unwrap();
    assert_eq!(min_id, layout.encode(NOW, 0, 0, 0).unwrap());
    assert_eq!(max_id, layout.encode(NOW + 9, 3, 15, 63).unwrap());
    // One millisecond: every ID of that millisecond, and none of its neighbours.
    let one = layout.id_range(NOW, NOW).unwrap();
    assert_eq!(one.max_id.as_u64() - one.min_id.as_u64() + 1, 64 * 64);
    assert!(!one.contains(layout.encode(NOW - 1, 3, 15, 63).unwrap()));
    assert!(!one.contains(layout.encode(NOW + 1, 0, 0, 0).unwrap()));
    // The whole lifetime.
    let all = layout
        .id_range(layout.epoch_ms(), layout.max_timestamp_ms())
        .unwrap();
    assert_eq!(
        (all.min_id, all.max_id),
        (SnowflakeId::MIN, layout.max_id())
    );
    let message = |from, to| layout.id_range(from, to).unwrap_err().to_string();
    assert_eq!(
        message(TWITTER_EPOCH_MS - 1, NOW),
        "invalid from (unix ms): expected 1288834974657..=3487858230208, found 1288834974656"
    );
    assert_eq!(
        message(NOW, layout.max_timestamp_ms() + 1),
        "invalid to (unix ms): expected 1288834974657..=3487858230208, found 3487858230209"
    );
    assert_eq!(
        message(NOW + 1, NOW),
        "invalid range: from 1700000000001 is after to 1700000000000 (unix ms)"
    );
}

#[test]
fn records_say_what_the_layout_is_and_are_read_back_only_when_consistent() {
    let record = LayoutRecord::from(Layout::TWITTER);
    assert_eq!(
        record,
        LayoutRecord {
            name: "twitter".into(),
            timestamp_bits: 41,
            datacenter_bits: 5,
            worker_bits: 5,
            sequence_bits: 12,
            epoch_ms: TWITTER_EPOCH_MS,
            max_id: SnowflakeId::MAX,
        }
    );
    assert_eq!(record.to_layout_at(NOW).unwrap(), Layout::TWITTER);
    let custom =
        Layout::new_at(1_600_000_000_000, "custom:40,3,5,10".parse().unwrap(), NOW).unwrap();
    assert_eq!(
        LayoutRecord::from(&custom).to_layout_at(NOW).unwrap(),
        custom
    );
    let wrong_max = LayoutRecord {
        max_id: SnowflakeId::try_from(5_u64).unwrap(),
        ..record.clone()
    };
    assert_eq!(
        wrong_max.to_layout_at(NOW).unwrap_err().to_string(),
        "invalid layout: the record's max_id 5 is not its widths' largest id 9223372036854775807"
    );
    let unknown = LayoutRecord {
        name: "sonyflake".into(),
        ..record
    };
    assert!(unknown.to_layout_at(NOW).is_err());
}

#[test]
fn js_safe_sequence_exhaustion_waits_for_the_next_millisecond_and_never_wraps() {
    let t = NOW;
    let clock = ScriptedClock::new([t]);
    let generator = Generator::builder()
        .layout(Layout::JS_SAFE)
        .datacenter_id(3)
        .worker_id(15)
        .clock(&clock)
        .build()
        .unwrap();
    let ids = generator.next_ids(64).unwrap();
    assert!(ids.windows(2).all(|w| w[1].as_u64() == w[0].as_u64() + 1));
    let last = Layout::JS_SAFE.decode(ids[63]).unwrap();
    assert_eq!((last.timestamp_ms, last.sequence), (t, 63));
    assert_eq!(generator.stats().exhaustion_waits, 0);
    // The 65th ID of millisecond t waits for t + 1 (the clock reads t twice more first).
    clock.push(t);
    clock.push(t);
    clock.push(t + 1);
    let next = generator.next_id().unwrap();
    let parts = Layout::JS_SAFE.decode(next).unwrap();
    assert_eq!(
        (
            parts.timestamp_ms,
            parts.datacenter_id,
            parts.worker_id,
            parts.sequence
        ),
        (t + 1, 3, 15, 0)
    );
    assert!(next > ids[63]);
    assert_eq!(generator.stats().exhaustion_waits, 1);
    // An exact take of 64 fits a fresh millisecond; 65 is refused.
    assert!(generator.try_take_exact(65).is_err());
    // A batch never crosses into another field: 64 per millisecond at most.
    clock.push(t + 2);
    let batch = generator.next_batch(64).unwrap();
    assert_eq!(batch.len(), 64);
    assert_eq!(Layout::JS_SAFE.decode(batch.last()).unwrap().sequence, 63);
}

#[test]
fn js_safe_ids_stay_within_53_bits_up_to_the_last_millisecond() {
    let layout = Layout::JS_SAFE;
    let last_ms = layout.max_timestamp_ms();
    let clock = ScriptedClock::new([last_ms]);
    let generator = Generator::builder()
        .layout(layout)
        .datacenter_id(3)
        .worker_id(15)
        .clock(&clock)
        .build()
        .unwrap();
    let ids = generator.next_ids(64).unwrap();
    assert_eq!(ids.last().copied(), Some(layout.max_id()));
    assert!(ids.iter().all(|id| id.as_u64() <= MAX_SAFE_INTEGER));
    clock.push(last_ms + 1);
    assert!(matches!(
        generator.next_id(),
        Err(Error::LayoutExhausted { .. })
    ));
}

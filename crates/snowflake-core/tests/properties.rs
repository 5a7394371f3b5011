//! Property tests: every valid combination round-trips, every invalid one is rejected; under
//! Twitter's layout and under any layout SPEC §9 allows.

use proptest::prelude::*;
use snowflake_core::{
    Bits, Clock, Field, Layout, LayoutRecord, MAX_SAFE_INTEGER, Parts, SnowflakeId,
    TWITTER_EPOCH_MS,
};

const MAX_TS: u64 = TWITTER_EPOCH_MS + (1 << 41) - 1;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn encode_then_decode_round_trips(
        ts in TWITTER_EPOCH_MS..=MAX_TS, dc in 0u64..=31, w in 0u64..=31, seq in 0u64..=4095
    ) {
        let id = Layout::TWITTER.encode(ts, dc, w, seq).unwrap();
        let parts = Layout::TWITTER.decode(id).unwrap();
        prop_assert_eq!((parts.timestamp_ms, parts.datacenter_id, parts.worker_id, parts.sequence), (ts, dc, w, seq));
        // The spec's formula, literally.
        prop_assert_eq!(id.as_u64(), ((ts - TWITTER_EPOCH_MS) << 22) | (dc << 17) | (w << 12) | seq);
        prop_assert_eq!(id.to_string().parse::<SnowflakeId>().unwrap(), id);
    }

    #[test]
    fn every_63_bit_value_decodes_and_re_encodes(raw in 0u64..=i64::MAX as u64) {
        let id = SnowflakeId::try_from(raw).unwrap();
        let parts = Layout::TWITTER.decode(id).unwrap();
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

/// "Now" for the random layouts: each one is valid at this time.
const NOW: u64 = 1_700_000_000_000;

/// Any widths SPEC §9 allows: T ≥ 30, S ≥ 1, D + W ≥ 1, T + D + W + S ≤ 63.
fn valid_bits() -> impl Strategy<Value = Bits> {
    (30u8..=61)
        .prop_flat_map(|t| (Just(t), 1u8..=(62 - t)))
        .prop_flat_map(|(t, s)| (Just(t), Just(s), 1u8..=(63 - t - s)))
        .prop_flat_map(|(t, s, node)| (Just(t), Just(s), Just(node), 0u8..=node))
        .prop_map(|(timestamp, sequence, node, datacenter)| Bits {
            timestamp,
            datacenter,
            worker: node - datacenter,
            sequence,
        })
}

/// A valid layout and an epoch that makes it valid at `NOW` (not in the future, not run out).
fn valid_layout() -> impl Strategy<Value = Layout> {
    valid_bits()
        .prop_flat_map(|bits| {
            let lifetime = (1u64 << bits.timestamp) - 1;
            (Just(bits), 0..=lifetime.min(NOW))
        })
        .prop_map(|(bits, age)| Layout::new_at(NOW - age, bits, NOW).expect("valid layout"))
}

/// A layout and a valid value for each field (a timestamp anywhere in its lifetime).
fn layout_and_parts() -> impl Strategy<Value = (Layout, Parts)> {
    valid_layout().prop_flat_map(|layout| {
        (
            Just(layout),
            (
                layout.epoch_ms()..=layout.max_timestamp_ms(),
                0..=layout.max_datacenter_id(),
                0..=layout.max_worker_id(),
                0..=layout.max_sequence(),
            )
                .prop_map(|(timestamp_ms, datacenter_id, worker_id, sequence)| Parts {
                    timestamp_ms,
                    datacenter_id,
                    worker_id,
                    sequence,
                }),
        )
    })
}

fn tuple(p: Parts) -> (u64, u64, u64, u64) {
    (p.timestamp_ms, p.datacenter_id, p.worker_id, p.sequence)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn any_valid_layout_round_trips((layout, parts) in layout_and_parts()) {
        let id = layout.encode_parts(parts).unwrap();
        prop_assert!(id <= layout.max_id());
        prop_assert_eq!(layout.decode(id).unwrap(), parts);
        prop_assert_eq!(layout.parse_id(&id.to_string()).unwrap(), id);
        // The formula, literally: fields side by side, most significant first.
        let b = layout.bits();
        let expected = ((parts.timestamp_ms - layout.epoch_ms()) << (b.datacenter + b.worker + b.sequence))
            | (parts.datacenter_id << (b.worker + b.sequence))
            | (parts.worker_id << b.sequence)
            | parts.sequence;
        prop_assert_eq!(id.as_u64(), expected);
        // A name round-trips to the same widths.
        prop_assert_eq!(layout.name().parse::<Bits>().unwrap(), b);
        prop_assert_eq!(LayoutRecord::from(layout).to_layout_at(NOW).unwrap(), layout);
    }

    #[test]
    fn every_field_at_its_maximum_is_the_largest_id(layout in valid_layout()) {
        let max = layout.encode(
            layout.max_timestamp_ms(),
            layout.max_datacenter_id(),
            layout.max_worker_id(),
            layout.max_sequence(),
        ).unwrap();
        prop_assert_eq!(max, layout.max_id());
        prop_assert_eq!(max.as_u64(), (1u64 << layout.bits().total()) - 1);
        let parts = layout.decode(max).unwrap();
        prop_assert_eq!(
            tuple(parts),
            (layout.max_timestamp_ms(), layout.max_datacenter_id(), layout.max_worker_id(), layout.max_sequence())
        );
        // Each field at its maximum alone lands in its own bits only.
        let epoch = layout.epoch_ms();
        let only = |ts, dc, w, s| layout.encode(ts, dc, w, s).unwrap().as_u64();
        let fields = [
            only(layout.max_timestamp_ms(), 0, 0, 0),
            only(epoch, layout.max_datacenter_id(), 0, 0),
            only(epoch, 0, layout.max_worker_id(), 0),
            only(epoch, 0, 0, layout.max_sequence()),
        ];
        prop_assert_eq!(fields.iter().fold(0, |acc, f| acc | f), max.as_u64());
        prop_assert_eq!(fields.iter().map(|f| f.count_ones()).sum::<u32>(), layout.bits().total());
        // One above each maximum is refused, naming the field.
        prop_assert!(layout.encode(layout.max_timestamp_ms() + 1, 0, 0, 0).is_err());
        prop_assert!(layout.encode(epoch, layout.max_datacenter_id() + 1, 0, 0).is_err());
        prop_assert!(layout.encode(epoch, 0, layout.max_worker_id() + 1, 0).is_err());
        prop_assert!(layout.encode(epoch, 0, 0, layout.max_sequence() + 1).is_err());
    }

    #[test]
    fn ids_above_the_max_id_are_refused(layout in valid_layout(), above in 1u64..=u64::MAX) {
        let max = layout.max_id().as_u64();
        if let Some(id) = max.checked_add(above).and_then(SnowflakeId::new) {
            let err = layout.decode(id).unwrap_err().to_string();
            prop_assert_eq!(err, format!("invalid snowflake id: expected 0..={max}, found {id}"));
            prop_assert!(layout.parse_id(&id.to_string()).is_err());
        }
    }

    #[test]
    fn ids_order_as_their_fields(
        (layout, a) in layout_and_parts(),
        b_seed in any::<(u64, u64, u64, u64)>(),
    ) {
        // A second set of fields of the same layout.
        let span = |max: u64, seed: u64| if max == u64::MAX { seed } else { seed % (max + 1) };
        let b = Parts {
            timestamp_ms: layout.epoch_ms() + span(layout.max_offset_ms(), b_seed.0),
            datacenter_id: span(layout.max_datacenter_id(), b_seed.1),
            worker_id: span(layout.max_worker_id(), b_seed.2),
            sequence: span(layout.max_sequence(), b_seed.3),
        };
        let (id_a, id_b) = (layout.encode_parts(a).unwrap(), layout.encode_parts(b).unwrap());
        prop_assert_eq!(id_a.cmp(&id_b), tuple(a).cmp(&tuple(b)));
    }

    #[test]
    fn an_id_range_holds_exactly_the_ids_of_its_window(
        (layout, parts) in layout_and_parts(),
        ends in any::<(u64, u64)>(),
    ) {
        let lifetime = layout.max_offset_ms();
        let pick = |seed: u64| layout.epoch_ms() + if lifetime == u64::MAX { seed } else { seed % (lifetime + 1) };
        // Windows near the ID half of the time, anywhere the other half.
        let (mut from, mut to) = (pick(ends.0), pick(ends.1));
        if ends.0 % 2 == 0 {
            from = parts.timestamp_ms.saturating_sub(ends.0 % 3).max(layout.epoch_ms());
            to = (parts.timestamp_ms + ends.1 % 3).min(layout.max_timestamp_ms());
        }
        let (from, to) = (from.min(to), from.max(to));
        let range = layout.id_range(from, to).unwrap();
        let id = layout.encode_parts(parts).unwrap();
        prop_assert_eq!(range.contains(id), (from..=to).contains(&parts.timestamp_ms));
        if from < to {
            prop_assert!(layout.id_range(to, from).is_err());
        }
    }

    #[test]
    fn js_safe_ids_are_safe_integers_until_the_last_millisecond(
        ts in TWITTER_EPOCH_MS..=Layout::JS_SAFE.max_timestamp_ms(),
        dc in 0u64..=3, w in 0u64..=15, seq in 0u64..=63,
    ) {
        let id = Layout::JS_SAFE.encode(ts, dc, w, seq).unwrap();
        prop_assert!(id.as_u64() <= MAX_SAFE_INTEGER);
        // A double holds it exactly: what JSON.parse does to a number.
        prop_assert_eq!(id.as_u64() as f64 as u64, id.as_u64());
    }

    #[test]
    fn widths_are_accepted_exactly_when_they_keep_the_rules(
        t in 0u8..=70, d in 0u8..=70, w in 0u8..=70, s in 0u8..=70,
    ) {
        let bits = Bits { timestamp: t, datacenter: d, worker: w, sequence: s };
        let total = u32::from(t) + u32::from(d) + u32::from(w) + u32::from(s);
        let rule = if t < 30 {
            Some("the timestamp needs at least 30 bits")
        } else if s == 0 {
            Some("the sequence needs at least 1 bit")
        } else if d == 0 && w == 0 {
            Some("the datacenter and worker ids need at least 1 bit together")
        } else if total > 63 {
            Some("the widths must sum to at most 63")
        } else {
            None
        };
        match (bits.check(), rule) {
            (Ok(_), None) => {
                let name = bits.to_string();
                prop_assert_eq!(name.parse::<Bits>().unwrap(), bits);
            }
            (Err(err), Some(rule)) => {
                let text = err.to_string();
                prop_assert!(text.starts_with(&format!("invalid layout custom:{t},{d},{w},{s}: {rule}")), "{}", text);
                if t <= 63 && d <= 63 && w <= 63 && s <= 63 {
                    let parsed = format!("custom:{t},{d},{w},{s}").parse::<Bits>().unwrap_err().to_string();
                    prop_assert_eq!(parsed, text);
                }
            }
            (result, rule) => prop_assert!(false, "{bits:?}: {result:?}, expected to break {rule:?}"),
        }
    }

    #[test]
    fn a_generator_under_any_layout_issues_increasing_ids_of_its_node_and_time(
        (layout, parts) in layout_and_parts(),
        count in 1usize..300,
    ) {
        let clock = snowflake_core::ManualClock::new(parts.timestamp_ms);
        let generator = snowflake_core::Generator::builder()
            .layout(layout)
            .datacenter_id(parts.datacenter_id)
            .worker_id(parts.worker_id)
            .clock(clock.clone())
            .build()
            .unwrap();
        let mut last = None;
        for _ in 0..count {
            // Exhausting a millisecond waits for the next: move the clock on when it is used up.
            let id = match generator.try_take_batch(1, 0).unwrap() {
                Some(batch) => batch.first(),
                None if clock.now_ms() < layout.max_timestamp_ms() => {
                    clock.advance_ms(1);
                    generator.next_id().unwrap()
                }
                None => break,
            };
            let decoded = layout.decode(id).unwrap();
            prop_assert_eq!((decoded.datacenter_id, decoded.worker_id), (parts.datacenter_id, parts.worker_id));
            prop_assert_eq!(decoded.timestamp_ms, clock.now_ms());
            prop_assert!(last.is_none_or(|l| id > l));
            last = Some(id);
        }
    }
}

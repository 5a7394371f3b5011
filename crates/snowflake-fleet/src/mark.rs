//! The pair's high-water mark as a coordination service stores it: its JSON (written by a
//! holder, or lowered by an operator), how it is read back, and when it is unusable.
//!
//! Under Twitter's widths a mark is what every release wrote: `high_water_ms`, `time`,
//! `epoch_ms` and the writer. Under any other widths it also records its `layout`, and its
//! `epoch_ms` is `null` (the epoch is the layout's): a release before layouts reads that as a
//! mark written under another epoch and refuses it, so rolling back cannot issue Twitter IDs
//! above another layout's marks. A mark with an epoch and no layout is Twitter's widths; one
//! with neither is refused (every release wrote `epoch_ms` since the first fleet mark).

use serde::Serialize;
use snowflake_core::{Bits, Layout, LayoutRecord, format_unix_ms};

/// Why a stored high-water mark cannot be used: issuing without it could repeat a previous
/// holder's IDs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MarkError {
    /// The stored value is not JSON.
    #[error("not JSON ({error}): {shown:?}")]
    NotJson {
        /// The parser's words.
        error: String,
        /// The start of the stored value.
        shown: String,
    },
    /// The JSON has no whole-number `high_water_ms`.
    #[error("no whole-number high_water_ms in {shown}")]
    NoHighWater {
        /// The start of the stored JSON.
        shown: String,
    },
    /// Written by a node with another epoch.
    #[error(
        "it was written by a node using epoch {}, and this node uses {ours}: nodes sharing one \
         fleet namespace must share one layout (--epoch-ms)",
        theirs.map_or_else(|| "(not a number)".to_owned(), |e| e.to_string())
    )]
    OtherEpoch {
        /// The writer's epoch (`None`: not a number).
        theirs: Option<u64>,
        /// This node's.
        ours: u64,
    },
    /// Written by a node with other field widths.
    #[error(
        "it was written by a node using the layout {theirs}, and this node uses {ours}: ids of \
         two layouts can collide, so nodes sharing one fleet namespace must share one layout \
         (moving to another layout needs a new prefix or path: see docs/layouts.md)"
    )]
    OtherLayout {
        /// The writer's layout (name and epoch).
        theirs: String,
        /// This node's.
        ours: String,
    },
    /// The JSON records no epoch and no layout: the IDs it covers may be of any layout.
    #[error(
        "it records neither epoch_ms nor a layout ({shown}), so the layout of the ids it covers \
         is unknown; no release of this service wrote such a mark (it was written by hand or by \
         another program): rewrite it with the fleet's epoch_ms, as a node writes it"
    )]
    NoLayout {
        /// The start of the stored JSON.
        shown: String,
    },
    /// The `layout` record cannot be read, or disagrees with itself or with `epoch_ms`.
    #[error("its layout record is not valid ({reason}): {shown}")]
    BadLayout {
        /// What is wrong.
        reason: String,
        /// The start of the stored JSON.
        shown: String,
    },
    /// At or past the layout's last millisecond: no ID could ever be issued above it.
    #[error(
        "it is {mark_ms} ({}), at or past the layout's last millisecond {last_ms} ({}), so no id \
         could ever be issued above it (a clock far in the future wrote it?); lower it with \
         `snowflake state lower-mark` if no id above the real time was ever used",
        format_unix_ms(*mark_ms),
        format_unix_ms(*last_ms)
    )]
    PastLayout {
        /// The mark (Unix ms).
        mark_ms: u64,
        /// The layout's last millisecond (Unix ms).
        last_ms: u64,
    },
}

/// A mark as read from a coordination service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    /// The high-water mark (Unix ms); 0 when none was ever written.
    pub high_water_ms: u64,
    /// The lease or session (hex) that wrote it, if it says.
    pub writer: Option<String>,
}

/// Reads a pair's high-water mark as stored in a coordination service: JSON with
/// `high_water_ms` (Unix ms), `epoch_ms` (a number under Twitter's widths) or a `layout` record
/// (any other widths, `epoch_ms` then `null`), and the writer's lease or session id under
/// `writer_field`. Empty data means no mark yet (0). A mark written under another layout
/// (widths or epoch) is refused, and so is one that records neither an epoch nor a layout: a
/// fleet sharing one namespace must share one layout.
pub fn parse_mark(data: &[u8], layout: &Layout, writer_field: &str) -> Result<Mark, MarkError> {
    if data.is_empty() {
        return Ok(Mark {
            high_water_ms: 0,
            writer: None,
        });
    }
    let value: serde_json::Value =
        serde_json::from_slice(data).map_err(|e| MarkError::NotJson {
            error: e.to_string(),
            shown: String::from_utf8_lossy(data).chars().take(100).collect(),
        })?;
    let shown: String = value.to_string().chars().take(200).collect();
    let high_water_ms = value
        .get("high_water_ms")
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| MarkError::NoHighWater {
            shown: shown.clone(),
        })?;
    let writer = value
        .get(writer_field)
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned);
    let theirs = written_layout(&value, layout.epoch_ms(), shown)?;
    if theirs.bits() != layout.bits() {
        return Err(MarkError::OtherLayout {
            theirs: describe(&theirs),
            ours: describe(&LayoutRecord::from(layout)),
        });
    }
    if theirs.epoch_ms != layout.epoch_ms() {
        return Err(MarkError::OtherEpoch {
            theirs: Some(theirs.epoch_ms),
            ours: layout.epoch_ms(),
        });
    }
    Ok(Mark {
        high_water_ms,
        writer,
    })
}

/// The layout a mark's JSON says it was written under: its `layout` record, or Twitter's widths
/// with its `epoch_ms`.
fn written_layout(
    value: &serde_json::Value,
    ours_epoch_ms: u64,
    shown: String,
) -> Result<LayoutRecord, MarkError> {
    let epoch = value.get("epoch_ms").filter(|e| !e.is_null());
    match (value.get("layout"), epoch) {
        (Some(record), epoch) => {
            let bad = |reason: String| MarkError::BadLayout {
                reason,
                shown: shown.clone(),
            };
            let record: LayoutRecord =
                serde_json::from_value(record.clone()).map_err(|e| bad(e.to_string()))?;
            // Consistent in itself (its lifetime is the node's business, not the mark's).
            record
                .to_layout_at(record.epoch_ms)
                .map_err(|e| bad(e.to_string()))?;
            if let Some(epoch) = epoch
                && epoch.as_u64() != Some(record.epoch_ms)
            {
                return Err(bad(format!(
                    "epoch_ms {epoch} is not the layout's epoch {}",
                    record.epoch_ms
                )));
            }
            Ok(record)
        }
        (None, Some(epoch)) => match epoch.as_u64() {
            Some(epoch_ms) => Ok(LayoutRecord {
                epoch_ms,
                ..LayoutRecord::from(Layout::TWITTER)
            }),
            None => Err(MarkError::OtherEpoch {
                theirs: None,
                ours: ours_epoch_ms,
            }),
        },
        (None, None) => Err(MarkError::NoLayout { shown }),
    }
}

/// The layout a stored mark says it was written under, if it says (for recording a fleet's
/// layout from the marks an older release left): `None` for an empty, unreadable or
/// layout-less mark, which the claim of its pair refuses anyway.
pub(crate) fn recorded_layout(data: &[u8]) -> Option<LayoutRecord> {
    let value: serde_json::Value = serde_json::from_slice(data).ok()?;
    written_layout(&value, 0, String::new()).ok()
}

/// A layout in a message: its name and epoch.
pub(crate) fn describe(record: &LayoutRecord) -> String {
    format!("{} (epoch {})", record.name, record.epoch_ms)
}

/// The JSON of a pair's high-water mark, as [`parse_mark`] reads it: under Twitter's widths
/// exactly what every release wrote; under others with the `layout` and a `null` epoch_ms.
pub fn mark_json(mark_ms: u64, layout: &Layout, writer_field: &str, writer: &str) -> String {
    let mut value = if layout.bits() == Bits::TWITTER {
        serde_json::json!({
            "high_water_ms": mark_ms,
            "time": format_unix_ms(mark_ms),
            "epoch_ms": layout.epoch_ms(),
        })
    } else {
        serde_json::json!({
            "high_water_ms": mark_ms,
            "time": format_unix_ms(mark_ms),
            "epoch_ms": serde_json::Value::Null,
            "layout": LayoutRecord::from(layout),
        })
    };
    value[writer_field] = serde_json::Value::String(writer.to_owned());
    value.to_string()
}

/// A pair's mark as an operator tool reads it from a coordination service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StoredMark {
    /// The high-water mark (Unix ms); 0 when none was ever written.
    pub high_water_ms: u64,
    /// The stored value as it is, for display (empty when none).
    pub value: String,
    /// Who holds the pair right now (the claim key's value, or the znode's data and session),
    /// if anybody does.
    pub holder: Option<String>,
    /// Where it is stored (the etcd key or the znode path).
    pub location: String,
}

impl StoredMark {
    /// The mark, unless none was ever written (no stored value, or one that says 0: a
    /// ZooKeeper registrant claims an empty mark znode by writing 0 with its session).
    pub fn written_ms(&self) -> Option<u64> {
        (self.high_water_ms > 0).then_some(self.high_water_ms)
    }
}

/// Refuses a mark no ID of `layout` can ever be issued above: past the layout's last
/// millisecond, the pair could never open again. Returns the mark when it is usable.
pub fn check_mark_in_layout(mark_ms: u64, layout: &Layout) -> Result<u64, MarkError> {
    let last_ms = layout.max_timestamp_ms();
    if mark_ms >= last_ms {
        return Err(MarkError::PastLayout { mark_ms, last_ms });
    }
    Ok(mark_ms)
}

/// [`parse_mark`], then [`check_mark_in_layout`]: a mark a holder of `layout` can issue above.
pub fn usable_mark(data: &[u8], layout: &Layout, writer_field: &str) -> Result<Mark, MarkError> {
    let mark = parse_mark(data, layout, writer_field)?;
    check_mark_in_layout(mark.high_water_ms, layout)?;
    Ok(mark)
}

/// What `snowflake state lower-mark` asks of a coordination service.
#[derive(Debug, Clone, Copy)]
pub struct LowerMark<'a> {
    /// The new mark (Unix ms): lower than the current one.
    pub to_ms: u64,
    /// Who lowers it (`user@host`), recorded with it.
    pub by: &'a str,
    /// When (Unix ms), recorded with it.
    pub now_ms: u64,
}

/// The JSON of a mark lowered by an operator (`snowflake state lower-mark`): [`mark_json`]'s
/// fields, with the writer `operator`, plus who lowered it, when, and from what.
#[derive(Debug, Clone, Copy)]
pub struct Lowering<'a> {
    /// The new mark (Unix ms).
    pub to_ms: u64,
    /// The mark it replaces (Unix ms).
    pub from_ms: u64,
    /// Who lowers it (`user@host`).
    pub by: &'a str,
    /// When (Unix ms).
    pub at_ms: u64,
}

impl Lowering<'_> {
    /// The stored JSON, under `layout`, the writer under `writer_field`.
    pub fn json(&self, layout: &Layout, writer_field: &str) -> String {
        let mut value: serde_json::Value =
            serde_json::from_str(&mark_json(self.to_ms, layout, writer_field, "operator"))
                .unwrap_or_default();
        value["lowered"] = serde_json::json!({
            "from_ms": self.from_ms,
            "by": self.by,
            "at_ms": self.at_ms,
            "at": format_unix_ms(self.at_ms),
        });
        value.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::{
        Lowering, Mark, MarkError, StoredMark, check_mark_in_layout, mark_json, parse_mark,
    };
    use snowflake_core::{Layout, LayoutRecord};

    /// Twitter's widths with the epoch 0 (1970).
    fn epoch_zero() -> Layout {
        Layout::with_epoch(0).unwrap()
    }

    #[test]
    fn marks_round_trip_and_bad_ones_are_explained() {
        let twitter = Layout::TWITTER;
        let json = mark_json(1_700_000_000_000, &twitter, "lease", "7f");
        assert_eq!(
            parse_mark(json.as_bytes(), &twitter, "lease"),
            Ok(Mark {
                high_water_ms: 1_700_000_000_000,
                writer: Some("7f".into())
            })
        );
        assert_eq!(
            parse_mark(b"", &epoch_zero(), "lease"),
            Ok(Mark {
                high_water_ms: 0,
                writer: None
            })
        );
        assert!(
            parse_mark(b"garbage", &twitter, "lease")
                .unwrap_err()
                .to_string()
                .contains("not JSON")
        );
        assert!(
            parse_mark(b"{\"high_water_ms\":-1}", &twitter, "lease")
                .unwrap_err()
                .to_string()
                .contains("high_water_ms")
        );
        assert!(
            parse_mark(json.as_bytes(), &epoch_zero(), "lease")
                .unwrap_err()
                .to_string()
                .contains("epoch 1288834974657")
        );
    }

    #[test]
    fn a_twitter_mark_is_byte_for_byte_what_every_release_wrote() {
        // As the previous release (891dc32) wrote it, keys in serde_json's order.
        assert_eq!(
            mark_json(1_700_000_000_000, &Layout::TWITTER, "lease", "7f"),
            r#"{"epoch_ms":1288834974657,"high_water_ms":1700000000000,"lease":"7f","time":"2023-11-14T22:13:20.000Z"}"#
        );
        let custom_epoch = Layout::with_epoch(1_600_000_000_000).unwrap();
        assert_eq!(
            mark_json(1_700_000_000_000, &custom_epoch, "session", "1a"),
            r#"{"epoch_ms":1600000000000,"high_water_ms":1700000000000,"session":"1a","time":"2023-11-14T22:13:20.000Z"}"#
        );
    }

    #[test]
    fn another_layouts_mark_records_it_and_a_mark_of_another_layout_is_refused() {
        let js = Layout::JS_SAFE;
        let json = mark_json(1_700_000_000_000, &js, "lease", "7f");
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        // A release before layouts reads a null epoch_ms as another epoch, and refuses it.
        assert!(value["epoch_ms"].is_null(), "{json}");
        assert_eq!(
            serde_json::from_value::<LayoutRecord>(value["layout"].clone()).unwrap(),
            LayoutRecord::from(js)
        );
        assert_eq!(
            parse_mark(json.as_bytes(), &js, "lease").map(|m| m.high_water_ms),
            Ok(1_700_000_000_000)
        );
        // js-safe's mark under Twitter's widths, and the reverse: both named.
        let err = parse_mark(json.as_bytes(), &Layout::TWITTER, "lease").unwrap_err();
        assert_eq!(
            err.to_string(),
            "it was written by a node using the layout js-safe (epoch 1288834974657), and this \
             node uses twitter (epoch 1288834974657): ids of two layouts can collide, so nodes \
             sharing one fleet namespace must share one layout (moving to another layout needs a \
             new prefix or path: see docs/layouts.md)"
        );
        let twitter = mark_json(1_700_000_000_000, &Layout::TWITTER, "lease", "7f");
        let err = parse_mark(twitter.as_bytes(), &js, "lease").unwrap_err();
        assert!(
            matches!(&err, MarkError::OtherLayout { theirs, ours }
                if theirs.starts_with("twitter") && ours.starts_with("js-safe")),
            "{err:?}"
        );
        // js-safe's widths with another epoch: the epoch is named.
        let later = Layout::new(1_600_000_000_000, js.bits()).unwrap();
        let err = parse_mark(json.as_bytes(), &later, "lease").unwrap_err();
        assert!(matches!(err, MarkError::OtherEpoch { .. }), "{err:?}");
        // A layout record that lies about itself, or disagrees with epoch_ms.
        let mut lying = value.clone();
        lying["layout"]["sequence_bits"] = 12.into();
        let err = parse_mark(lying.to_string().as_bytes(), &js, "lease").unwrap_err();
        assert!(matches!(err, MarkError::BadLayout { .. }), "{err:?}");
        let mut disagreeing = value;
        disagreeing["epoch_ms"] = 5.into();
        let err = parse_mark(disagreeing.to_string().as_bytes(), &js, "lease").unwrap_err();
        assert!(err.to_string().contains("epoch_ms 5"), "{err}");
    }

    #[test]
    fn a_mark_with_neither_epoch_nor_layout_is_refused() {
        // Issue 28: such a mark used to be accepted under any epoch. No release wrote one.
        for layout in [Layout::TWITTER, Layout::JS_SAFE, epoch_zero()] {
            let err = parse_mark(
                br#"{"high_water_ms":1700000000000,"lease":"7f"}"#,
                &layout,
                "lease",
            )
            .unwrap_err();
            assert!(matches!(err, MarkError::NoLayout { .. }), "{err:?}");
            assert!(
                err.to_string().contains("neither epoch_ms nor a layout"),
                "{err}"
            );
        }
        // A writer's claim of an empty mark, a lowering: all record the layout.
        let err = parse_mark(br#"{"high_water_ms":0}"#, &Layout::TWITTER, "session").unwrap_err();
        assert!(matches!(err, MarkError::NoLayout { .. }), "{err:?}");
    }

    #[test]
    fn a_mark_past_the_layout_is_refused_and_a_lowered_one_says_by_whom() {
        let layout = Layout::TWITTER;
        let last = layout.max_timestamp_ms();
        assert_eq!(check_mark_in_layout(last - 1, &layout), Ok(last - 1));
        let err = check_mark_in_layout(last, &layout).unwrap_err();
        assert!(matches!(err, MarkError::PastLayout { .. }), "{err:?}");
        assert!(
            err.to_string().contains("snowflake state lower-mark"),
            "{err}"
        );
        let lowered = Lowering {
            to_ms: 5,
            from_ms: 9,
            by: "ops@host",
            at_ms: 7,
        }
        .json(&layout, "session");
        let value: serde_json::Value = serde_json::from_str(&lowered).unwrap();
        assert_eq!(value["session"], "operator");
        assert_eq!(value["high_water_ms"], 5);
        assert_eq!(value["lowered"]["from_ms"], 9);
        assert_eq!(value["lowered"]["by"], "ops@host");
    }

    #[test]
    fn a_mark_of_zero_is_none_written() {
        let mark = |high_water_ms| StoredMark {
            high_water_ms,
            value: String::new(),
            holder: None,
            location: "/x".into(),
        };
        assert_eq!(mark(0).written_ms(), None);
        assert_eq!(mark(5).written_ms(), Some(5));
    }
}

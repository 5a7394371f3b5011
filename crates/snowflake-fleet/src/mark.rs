//! The pair's high-water mark as a coordination service stores it: its JSON (written by a
//! holder, or lowered by an operator), how it is read back, and when it is unusable.

use serde::Serialize;
use snowflake_core::{Layout, format_unix_ms};

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
/// `high_water_ms` (Unix ms), `epoch_ms`, and the writer's lease or session id under
/// `writer_field`. Empty data means no mark yet (0). A mark written by a node with another epoch
/// is refused: a fleet sharing one namespace must share one layout.
pub fn parse_mark(data: &[u8], epoch_ms: u64, writer_field: &str) -> Result<Mark, MarkError> {
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
        .ok_or(MarkError::NoHighWater { shown })?;
    let writer = value
        .get(writer_field)
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned);
    match value.get("epoch_ms").map(serde_json::Value::as_u64) {
        None => Ok(Mark {
            high_water_ms,
            writer,
        }),
        Some(Some(theirs)) if theirs == epoch_ms => Ok(Mark {
            high_water_ms,
            writer,
        }),
        Some(theirs) => Err(MarkError::OtherEpoch {
            theirs,
            ours: epoch_ms,
        }),
    }
}

/// The JSON of a pair's high-water mark, as [`parse_mark`] reads it.
pub fn mark_json(mark_ms: u64, epoch_ms: u64, writer_field: &str, writer: &str) -> String {
    let mut value = serde_json::json!({
        "high_water_ms": mark_ms,
        "time": format_unix_ms(mark_ms),
        "epoch_ms": epoch_ms,
    });
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
    let mark = parse_mark(data, layout.epoch_ms(), writer_field)?;
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
    /// The stored JSON, for a layout with `epoch_ms`, the writer under `writer_field`.
    pub fn json(&self, epoch_ms: u64, writer_field: &str) -> String {
        let mut value: serde_json::Value =
            serde_json::from_str(&mark_json(self.to_ms, epoch_ms, writer_field, "operator"))
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
    use snowflake_core::Layout;

    #[test]
    fn marks_round_trip_and_bad_ones_are_explained() {
        let json = mark_json(1_700_000_000_000, 1_288_834_974_657, "lease", "7f");
        assert_eq!(
            parse_mark(json.as_bytes(), 1_288_834_974_657, "lease"),
            Ok(Mark {
                high_water_ms: 1_700_000_000_000,
                writer: Some("7f".into())
            })
        );
        assert_eq!(
            parse_mark(b"", 0, "lease"),
            Ok(Mark {
                high_water_ms: 0,
                writer: None
            })
        );
        assert!(
            parse_mark(b"garbage", 0, "lease")
                .unwrap_err()
                .to_string()
                .contains("not JSON")
        );
        assert!(
            parse_mark(b"{\"high_water_ms\":-1}", 0, "lease")
                .unwrap_err()
                .to_string()
                .contains("high_water_ms")
        );
        assert!(
            parse_mark(json.as_bytes(), 0, "lease")
                .unwrap_err()
                .to_string()
                .contains("epoch 1288834974657")
        );
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
        .json(layout.epoch_ms(), "session");
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

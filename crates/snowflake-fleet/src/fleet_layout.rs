//! The fleet's layout, recorded once per namespace (`{prefix}/layout` in etcd, `{path}-layout`
//! in ZooKeeper): the record's JSON, and the check that a node's layout is the fleet's.
//!
//! Per-pair records cannot stop a mixed fleet: a js-safe node on a fresh pair and a Twitter
//! node on another would each find only their own marks, and their IDs can collide. So the
//! first node to claim records the layout with a create-if-absent write, and every claim
//! compares it in the same transaction that takes the pair (in ZooKeeper, the registration's
//! multi-operation checks the record's version): a node with another layout refuses to start,
//! naming both, and a mixed fleet is impossible rather than discouraged.

use snowflake_core::{Layout, LayoutRecord};

/// The record's JSON: [`LayoutRecord`]'s, as `/v1/info` shows the layout.
pub(crate) fn record_json(layout: &Layout) -> String {
    serde_json::to_string(&LayoutRecord::from(layout)).unwrap_or_default()
}

/// Why a node cannot join the fleet under its layout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutMismatch {
    /// The fleet records another layout.
    #[error(
        "the fleet runs the layout {theirs} (recorded at {location}), and this node was started \
         with {ours}; ids of two layouts can collide, so a fleet runs exactly one: start it with \
         --layout {theirs_name} --epoch-ms {theirs_epoch_ms}, or give it a new fleet (another \
         prefix or path, and a new state directory: see docs/layouts.md)"
    )]
    Other {
        /// Where the record is (the etcd key or the znode).
        location: String,
        /// The fleet's layout (name and epoch).
        theirs: String,
        /// Its name.
        theirs_name: String,
        /// Its epoch.
        theirs_epoch_ms: u64,
        /// This node's (name and epoch).
        ours: String,
    },
    /// The record cannot be read: nobody can tell which layout the fleet runs.
    #[error(
        "the fleet's layout record at {location} cannot be read ({reason}): {shown}; refusing to \
         claim a pair, because the layout of the fleet's ids is unknown (a node writes it as \
         `snowflake layout --json` prints the layout's name, widths, epoch and max_id)"
    )]
    Unreadable {
        /// Where the record is.
        location: String,
        /// What is wrong.
        reason: String,
        /// The start of the stored value.
        shown: String,
    },
}

/// Checks the stored record (at `location`) against `layout`: the same widths and epoch.
pub(crate) fn check(stored: &[u8], layout: &Layout, location: &str) -> Result<(), LayoutMismatch> {
    let shown: String = String::from_utf8_lossy(stored).chars().take(300).collect();
    let unreadable = |reason: String| LayoutMismatch::Unreadable {
        location: location.to_owned(),
        reason,
        shown: shown.clone(),
    };
    let record: LayoutRecord =
        serde_json::from_slice(stored).map_err(|e| unreadable(e.to_string()))?;
    record
        .to_layout_at(record.epoch_ms)
        .map_err(|e| unreadable(e.to_string()))?;
    let ours = LayoutRecord::from(layout);
    if record.bits() != ours.bits() || record.epoch_ms != ours.epoch_ms {
        return Err(LayoutMismatch::Other {
            location: location.to_owned(),
            theirs: crate::mark::describe(&record),
            theirs_name: record.name.clone(),
            theirs_epoch_ms: record.epoch_ms,
            ours: crate::mark::describe(&ours),
        });
    }
    Ok(())
}

/// Before a fleet's layout is first recorded, the marks already in it (an older release's, which
/// record their epoch only) must be of `layout`: the first of another (`location`, its data)
/// is the refusal. So the first node of a new release cannot record js-safe over a fleet of
/// Twitter's IDs.
pub(crate) fn check_marks<'a>(
    marks: impl IntoIterator<Item = (String, &'a [u8])>,
    layout: &Layout,
) -> Result<(), LayoutMismatch> {
    let ours = LayoutRecord::from(layout);
    for (location, data) in marks {
        let Some(theirs) = crate::mark::recorded_layout(data) else {
            continue;
        };
        if theirs.bits() != ours.bits() || theirs.epoch_ms != ours.epoch_ms {
            return Err(LayoutMismatch::Other {
                location,
                theirs: crate::mark::describe(&theirs),
                theirs_name: theirs.name.clone(),
                theirs_epoch_ms: theirs.epoch_ms,
                ours: crate::mark::describe(&ours),
            });
        }
    }
    Ok(())
}

/// The stored record as `snowflake state show` prints it: the layout, or why it cannot be read.
pub fn read_record(stored: &[u8]) -> Result<LayoutRecord, String> {
    let record: LayoutRecord = serde_json::from_slice(stored).map_err(|e| e.to_string())?;
    record
        .to_layout_at(record.epoch_ms)
        .map_err(|e| e.to_string())?;
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::{LayoutMismatch, check, check_marks, read_record, record_json};
    use snowflake_core::{Layout, LayoutRecord};

    #[test]
    fn the_record_is_the_layouts_json_and_another_layout_is_named() {
        let json = record_json(&Layout::JS_SAFE);
        assert_eq!(
            json,
            r#"{"name":"js-safe","timestamp_bits":41,"datacenter_bits":2,"worker_bits":4,"sequence_bits":6,"epoch_ms":1288834974657,"max_id":"9007199254740991"}"#
        );
        assert_eq!(
            check(json.as_bytes(), &Layout::JS_SAFE, "/p/layout"),
            Ok(())
        );
        assert_eq!(
            read_record(json.as_bytes()),
            Ok(LayoutRecord::from(Layout::JS_SAFE))
        );
        let err = check(json.as_bytes(), &Layout::TWITTER, "/p/layout").unwrap_err();
        assert_eq!(
            err.to_string(),
            "the fleet runs the layout js-safe (epoch 1288834974657) (recorded at /p/layout), and \
             this node was started with twitter (epoch 1288834974657); ids of two layouts can \
             collide, so a fleet runs exactly one: start it with --layout js-safe --epoch-ms \
             1288834974657, or give it a new fleet (another prefix or path, and a new state \
             directory: see docs/layouts.md)"
        );
        let later = Layout::with_epoch(1_600_000_000_000).unwrap();
        let err = check(
            record_json(&Layout::TWITTER).as_bytes(),
            &later,
            "/p/layout",
        )
        .unwrap_err();
        assert!(
            matches!(
                err,
                LayoutMismatch::Other {
                    theirs_epoch_ms: 1_288_834_974_657,
                    ..
                }
            ),
            "{err:?}"
        );
        // Before the first record: the marks an older release left decide.
        let old = br#"{"high_water_ms":1700000000000,"epoch_ms":1288834974657,"lease":"7f"}"#;
        let marks = || {
            vec![
                ("/p/marks/0/1".to_owned(), &b""[..]),
                ("/p/marks/0/2".to_owned(), &b"garbage"[..]),
                ("/p/marks/0/3".to_owned(), &old[..]),
            ]
        };
        assert_eq!(check_marks(marks(), &Layout::TWITTER), Ok(()));
        let err = check_marks(marks(), &Layout::JS_SAFE).unwrap_err();
        assert!(
            err.to_string().starts_with(
                "the fleet runs the layout twitter (epoch 1288834974657) (recorded at \
                 /p/marks/0/3), and this node was started with js-safe"
            ),
            "{err}"
        );
        for bad in [&b"garbage"[..], br#"{"name":"js-safe"}"#] {
            let err = check(bad, &Layout::JS_SAFE, "/p/layout").unwrap_err();
            assert!(matches!(err, LayoutMismatch::Unreadable { .. }), "{err:?}");
        }
    }
}

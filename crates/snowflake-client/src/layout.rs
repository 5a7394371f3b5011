//! The service's ID layout as the client learns it, from each node's `GetInfo` (never assumed):
//! every ID a node sends is checked against it, and one client never mixes two layouts.

use snowflake_core::{Bits, Layout, LayoutRecord, SnowflakeId};
use snowflake_proto::v1::GetInfoResponse;

/// The layout a `GetInfo` answer describes. A node older than layouts sends none: it runs
/// Twitter's widths with the epoch it gives.
pub(crate) fn from_info(info: &GetInfoResponse) -> Result<Layout, String> {
    let bad = |e: snowflake_core::Error| format!("answered an unusable layout: {e}");
    let Some(given) = &info.layout else {
        let epoch_ms = u64::try_from(info.epoch_ms)
            .map_err(|_| format!("answered a negative epoch {}", info.epoch_ms))?;
        return Layout::new(epoch_ms, Bits::TWITTER).map_err(bad);
    };
    let width = |w: u32| {
        u8::try_from(w).map_err(|_| format!("answered a layout with a field {w} bits wide"))
    };
    let record = LayoutRecord {
        name: given.name.clone(),
        timestamp_bits: width(given.timestamp_bits)?,
        datacenter_bits: width(given.datacenter_bits)?,
        worker_bits: width(given.worker_bits)?,
        sequence_bits: width(given.sequence_bits)?,
        epoch_ms: u64::try_from(given.epoch_ms)
            .map_err(|_| format!("answered a negative epoch {}", given.epoch_ms))?,
        max_id: SnowflakeId::try_from(given.max_id)
            .map_err(|e| format!("answered a layout whose max_id is not an id: {e}"))?,
    };
    record.to_layout().map_err(bad)
}

/// Why a node whose layout differs from the one the client already uses is not asked.
pub(crate) fn mixed(node: &str, theirs: &Layout, ours: &Layout) -> String {
    format!(
        "{node} issues IDs under the layout {} (epoch {}), another endpoint under {} (epoch {}): \
         IDs of two layouts can collide, so one client never mixes them",
        theirs.name(),
        theirs.epoch_ms(),
        ours.name(),
        ours.epoch_ms()
    )
}

/// IDs as a node sent them, checked against its layout: a node that sends a negative ID, or one
/// above the layout's largest, is treated as failing.
pub(crate) fn checked_ids(raw: &[i64], layout: &Layout) -> Result<Vec<SnowflakeId>, String> {
    raw.iter()
        .map(|&id| {
            SnowflakeId::try_from(id)
                .and_then(|id| layout.check_id(id))
                .map_err(|e| format!("answered an invalid ID {id}: {e}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use snowflake_proto::v1 as pb;

    fn info(layout: Option<pb::Layout>) -> GetInfoResponse {
        GetInfoResponse {
            epoch_ms: 1_288_834_974_657,
            layout,
            ..GetInfoResponse::default()
        }
    }

    fn js_safe() -> pb::Layout {
        pb::Layout {
            name: "js-safe".into(),
            timestamp_bits: 41,
            datacenter_bits: 2,
            worker_bits: 4,
            sequence_bits: 6,
            epoch_ms: 1_288_834_974_657,
            max_id: 9_007_199_254_740_991,
        }
    }

    #[test]
    fn the_layout_comes_from_the_answer_and_an_old_node_runs_twitters() {
        assert_eq!(from_info(&info(Some(js_safe()))), Ok(Layout::JS_SAFE));
        assert_eq!(from_info(&info(None)), Ok(Layout::TWITTER));
        let lying = pb::Layout {
            max_id: 5,
            ..js_safe()
        };
        assert!(
            from_info(&info(Some(lying)))
                .unwrap_err()
                .starts_with("answered an unusable layout")
        );
        let wide = pb::Layout {
            sequence_bits: 300,
            ..js_safe()
        };
        assert!(from_info(&info(Some(wide))).is_err());
    }

    #[test]
    fn ids_above_the_layouts_largest_are_refused() {
        let layout = Layout::JS_SAFE;
        assert!(checked_ids(&[1, 9_007_199_254_740_991], &layout).is_ok());
        let err = checked_ids(&[1, 9_007_199_254_740_992], &layout).unwrap_err();
        assert_eq!(
            err,
            "answered an invalid ID 9007199254740992: invalid snowflake id: expected \
             0..=9007199254740991, found 9007199254740992"
        );
        assert!(
            checked_ids(&[5, -1], &Layout::TWITTER)
                .unwrap_err()
                .contains("invalid ID -1")
        );
        assert!(
            mixed("b:1", &Layout::JS_SAFE, &Layout::TWITTER)
                .starts_with("b:1 issues IDs under the layout js-safe")
        );
    }
}

//! What the node needs from a coordination service that leases its (datacenter, worker) pair
//! (etcd today): a fence that says until when the pair is provably held, and a durable copy of
//! the high-water mark that only the holder can write.
//!
//! The node never issues an ID while the fence is down or past its deadline, and never above a
//! mark that the coordination service has not durably accepted. A successor that claims the
//! pair reads that mark and issues only above it, so even a predecessor that lost its lease
//! without noticing (frozen, partitioned, its clock ahead) cannot collide with it: everything
//! it could still issue is at or below the mark it wrote while it held the pair.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Instant;
use tokio::sync::watch;

/// A boxed future, so the node can hold any coordinator behind one trait object.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Whether the node may issue IDs as far as the coordination service is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fence {
    /// The pair is held: IDs may be issued until `until` (local monotonic time: the earliest
    /// moment the lease could expire, less a safety margin), and only above `floor_ms`.
    Held {
        /// When the proof of holding runs out unless renewed.
        until: Instant,
        /// The mark read when the pair was claimed (Unix ms): a previous holder may have
        /// issued IDs up to it, so this node issues only above it.
        floor_ms: u64,
    },
    /// The node cannot prove it holds the pair; the reason, in words.
    Lost {
        /// Why.
        reason: String,
    },
}

/// What `/v1/info` and the metrics show about the lease.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LeaseInfo {
    /// `held`, `renewing` (held, but the last renewal failed) or `lost`.
    pub state: &'static str,
    /// The lease's id as etcd shows it (hex), when one is held.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_id: Option<String>,
    /// The TTL etcd granted, in seconds.
    pub ttl_secs: u64,
    /// Milliseconds left before the node stops issuing unless the lease is renewed (0 when
    /// lost).
    pub remaining_ms: u64,
    /// The key that records the claim.
    pub key: String,
    /// Why the lease is not held, when it is not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Successful renewals so far.
    pub renewals: u64,
    /// Failed renewal attempts so far.
    pub renewal_failures: u64,
    /// Times the lease was lost (expired or taken away) and had to be claimed again.
    pub losses: u64,
}

impl LeaseInfo {
    /// The state label, the reason and the milliseconds left, from what a coordinator knows:
    /// why it lost the pair (if it did), until when holding is proven, and whether the last
    /// renewal failed. `out_of_reach` explains a deadline that passed without a renewal.
    pub fn status(
        lost_reason: Option<&str>,
        until: Option<Instant>,
        renewing: bool,
        out_of_reach: &str,
    ) -> (&'static str, Option<String>, u64) {
        let remaining = until.map_or(std::time::Duration::ZERO, |u| {
            u.saturating_duration_since(Instant::now())
        });
        let remaining_ms = u64::try_from(remaining.as_millis()).unwrap_or(u64::MAX);
        let (label, reason) = match (lost_reason, remaining.is_zero()) {
            (Some(reason), _) => ("lost", Some(reason.to_owned())),
            (None, true) => ("lost", Some(out_of_reach.to_owned())),
            (None, false) if renewing => ("renewing", None),
            (None, false) => ("held", None),
        };
        (label, reason, remaining_ms)
    }
}

/// A coordination service that leased this node its pair.
pub trait Coordinator: Send + Sync + fmt::Debug {
    /// `etcd`: where the pair came from (the `identity_source` of `/v1/info` and metrics).
    fn source(&self) -> &'static str;

    /// The fence; it changes when the lease is renewed, lost or re-established.
    fn fence(&self) -> watch::Receiver<Fence>;

    /// Durably records `mark_ms` (Unix ms) as the pair's high-water mark, only while this node
    /// still holds the pair. `Ok` means a successor will see it.
    fn store_mark(&self, mark_ms: u64) -> BoxFuture<'_, Result<(), String>>;

    /// Keeps the lease alive until `stop` flips, re-establishing it after an outage. Returns an
    /// error only when the node can never hold its pair again (another node claimed it): the
    /// service then stops.
    fn run(&self, stop: watch::Receiver<bool>) -> BoxFuture<'_, Result<(), String>>;

    /// Gives the pair up (after the final mark is stored) so another node may claim it at once.
    fn release(&self) -> BoxFuture<'_, ()>;

    /// The lease, for `/v1/info` and the metrics.
    fn info(&self) -> LeaseInfo;
}

/// Reads a pair's high-water mark as stored in a coordination service: JSON with
/// `high_water_ms` (Unix ms), `epoch_ms`, and the writer's lease or session id under
/// `writer_field`. Empty data means no mark yet (0). A mark written by a node with another epoch
/// is refused: a fleet sharing one namespace must share one layout.
pub fn parse_mark(
    data: &[u8],
    epoch_ms: u64,
    writer_field: &str,
) -> Result<(u64, Option<String>), String> {
    if data.is_empty() {
        return Ok((0, None));
    }
    let value: serde_json::Value = serde_json::from_slice(data).map_err(|e| {
        format!(
            "not JSON ({e}): {:?}",
            String::from_utf8_lossy(data)
                .chars()
                .take(100)
                .collect::<String>()
        )
    })?;
    let shown: String = value.to_string().chars().take(200).collect();
    let mark = value
        .get("high_water_ms")
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| format!("no whole-number high_water_ms in {shown}"))?;
    let writer = value
        .get(writer_field)
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned);
    match value.get("epoch_ms").map(serde_json::Value::as_u64) {
        None => Ok((mark, writer)),
        Some(Some(theirs)) if theirs == epoch_ms => Ok((mark, writer)),
        Some(theirs) => Err(format!(
            "it was written by a node using epoch {}, and this node uses {epoch_ms}: nodes \
             sharing one fleet namespace must share one layout (--epoch-ms)",
            theirs.map_or_else(|| "(not a number)".to_owned(), |e| e.to_string())
        )),
    }
}

/// The JSON of a pair's high-water mark, as [`parse_mark`] reads it.
pub fn mark_json(mark_ms: u64, epoch_ms: u64, writer_field: &str, writer: &str) -> String {
    let mut value = serde_json::json!({
        "high_water_ms": mark_ms,
        "time": snowflake_core::format_unix_ms(mark_ms),
        "epoch_ms": epoch_ms,
    });
    value[writer_field] = serde_json::Value::String(writer.to_owned());
    value.to_string()
}

#[cfg(test)]
mod tests {
    use super::{mark_json, parse_mark};

    #[test]
    fn marks_round_trip_and_bad_ones_are_explained() {
        let json = mark_json(1_700_000_000_000, 1_288_834_974_657, "lease", "7f");
        assert_eq!(
            parse_mark(json.as_bytes(), 1_288_834_974_657, "lease"),
            Ok((1_700_000_000_000, Some("7f".into())))
        );
        assert_eq!(parse_mark(b"", 0, "lease"), Ok((0, None)));
        assert!(
            parse_mark(b"garbage", 0, "lease")
                .unwrap_err()
                .contains("not JSON")
        );
        assert!(
            parse_mark(b"{\"high_water_ms\":-1}", 0, "lease")
                .unwrap_err()
                .contains("high_water_ms")
        );
        assert!(
            parse_mark(json.as_bytes(), 0, "lease")
                .unwrap_err()
                .contains("epoch 1288834974657")
        );
    }
}

//! The held pairs of a datacenter, as a coordination service records them: one row of the
//! status page's fleet table each.

use serde::Serialize;

/// One held pair, as the coordination service records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HeldPair {
    /// The datacenter id.
    pub datacenter_id: u64,
    /// The worker id.
    pub worker_id: u64,
    /// Who holds it: host and process (etcd), or the ZooKeeper session.
    pub holder: String,
    /// Where it serves: its listeners (etcd), or its advertised Thrift address (ZooKeeper).
    pub address: String,
    /// Since when (ISO-8601 UTC): the holder's start (etcd), the znode's creation (ZooKeeper).
    pub since: String,
}

/// A claim's worker id as its key or znode name spells it: the canonical decimal of an id the
/// layout has (`07`, `+7` or `40` name no worker the nodes claim, and are left out of the
/// fleet's table and counts).
pub(crate) fn canonical_worker(text: &str, max_worker_id: u64) -> Option<u64> {
    let worker: u64 = text.parse().ok()?;
    (worker <= max_worker_id && worker.to_string() == text).then_some(worker)
}

#[cfg(test)]
mod tests {
    use super::canonical_worker;

    #[test]
    fn only_canonical_worker_ids_of_the_layout_count() {
        assert_eq!(canonical_worker("7", 31), Some(7));
        assert_eq!(canonical_worker("0", 31), Some(0));
        for odd in ["07", "+7", "32", "-1", "", "x"] {
            assert_eq!(canonical_worker(odd, 31), None, "{odd:?}");
        }
    }
}

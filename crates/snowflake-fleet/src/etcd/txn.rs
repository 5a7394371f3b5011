//! The pieces of an etcd transaction the lease protocol writes: compares (a key absent, a
//! key on a lease, a key's revision), puts and gets, and reading the answers back.

use super::pb;

/// Compares that `key` is absent (its `create_revision` is 0).
pub(super) fn absent(key: &str) -> pb::Compare {
    pb::Compare {
        result: pb::compare::CompareResult::Equal as i32,
        target: pb::compare::CompareTarget::Create as i32,
        key: key.as_bytes().to_vec(),
        range_end: Vec::new(),
        target_union: Some(pb::compare::TargetUnion::CreateRevision(0)),
    }
}

/// The first key-value of each range answer of a transaction, in order (`None` for a range
/// that found nothing); other answers are skipped.
pub(super) fn first_kvs(response: pb::TxnResponse) -> impl Iterator<Item = Option<pb::KeyValue>> {
    response
        .responses
        .into_iter()
        .filter_map(|op| match op.response {
            Some(pb::response_op::Response::ResponseRange(range)) => {
                Some(range.kvs.into_iter().next())
            }
            _ => None,
        })
}

/// A stored value for a message: lossy UTF-8, at most 500 characters.
pub(super) fn shown(value: &[u8]) -> String {
    String::from_utf8_lossy(value).chars().take(500).collect()
}

/// Compares that `key` is attached to `lease_id` (false when the key is absent).
pub(super) fn lease_is(key: &str, lease_id: i64) -> pb::Compare {
    pb::Compare {
        result: pb::compare::CompareResult::Equal as i32,
        target: pb::compare::CompareTarget::Lease as i32,
        key: key.as_bytes().to_vec(),
        range_end: Vec::new(),
        target_union: Some(pb::compare::TargetUnion::Lease(lease_id)),
    }
}

/// Compares `key`'s `mod_revision` (0: the key is absent).
pub(super) fn mod_revision_is(key: &str, revision: i64) -> pb::Compare {
    pb::Compare {
        result: pb::compare::CompareResult::Equal as i32,
        target: pb::compare::CompareTarget::Mod as i32,
        key: key.as_bytes().to_vec(),
        range_end: Vec::new(),
        target_union: Some(pb::compare::TargetUnion::ModRevision(revision)),
    }
}

/// Puts `value` at `key`, attached to `lease` (0: none).
pub(super) fn put(key: &str, value: String, lease: i64) -> pb::RequestOp {
    pb::RequestOp {
        request: Some(pb::request_op::Request::RequestPut(pb::PutRequest {
            key: key.as_bytes().to_vec(),
            value: value.into_bytes(),
            lease,
            prev_kv: false,
        })),
    }
}

/// Reads `key`.
pub(super) fn get(key: &str) -> pb::RequestOp {
    pb::RequestOp {
        request: Some(pb::request_op::Request::RequestRange(pb::RangeRequest {
            key: key.as_bytes().to_vec(),
            ..Default::default()
        })),
    }
}

/// Compares that `key`'s value is exactly `value` (false when the key is absent).
pub(super) fn value_is(key: &str, value: &[u8]) -> pb::Compare {
    pb::Compare {
        result: pb::compare::CompareResult::Equal as i32,
        target: pb::compare::CompareTarget::Value as i32,
        key: key.as_bytes().to_vec(),
        range_end: Vec::new(),
        target_union: Some(pb::compare::TargetUnion::Value(value.to_vec())),
    }
}

//! The fleet's layout in etcd: `PREFIX/layout`, created by a create-if-absent transaction by
//! the first node to claim, read and checked by every other, and compared (as bytes) in every
//! claim transaction (see `crate::fleet_layout`).

use super::client::{EtcdClient, EtcdError};
use super::pb;
use super::txn::{absent, first_kvs, get, put};
use crate::fleet_layout::{LayoutMismatch, check, check_marks, record_json};
use snowflake_core::Layout;
use std::time::Duration;

/// The key of the fleet's layout under `prefix`.
pub(super) fn layout_key(prefix: &str) -> String {
    format!("{prefix}/layout")
}

/// Records `layout` as the fleet's if none is recorded yet (and the marks already there, an
/// older release's, are of it), else checks the recorded one: the stored bytes (for the
/// claim's compare) when it is ours, why not when it is not. The outer error is etcd's (the
/// caller retries).
pub(super) async fn ensure_layout(
    client: &EtcdClient,
    prefix: &str,
    layout: &Layout,
    timeout: Duration,
) -> Result<Result<Vec<u8>, LayoutMismatch>, EtcdError> {
    let key = layout_key(prefix);
    let ours = record_json(layout);
    if let Some(kv) = client.get_key(&key, timeout).await? {
        return Ok(check(&kv.value, layout, &key).map(|()| kv.value));
    }
    // None yet: the marks of an older release (epoch only) say what the fleet runs.
    let marks = client
        .range_prefix(&format!("{prefix}/marks/"), timeout)
        .await?;
    if let Err(mismatch) = check_marks(
        marks
            .iter()
            .map(|kv| (String::from_utf8_lossy(&kv.key).into_owned(), &kv.value[..])),
        layout,
    ) {
        return Ok(Err(mismatch));
    }
    let request = pb::TxnRequest {
        compare: vec![absent(&key)],
        success: vec![put(&key, ours.clone(), 0)],
        failure: vec![get(&key)],
    };
    let response = client.txn(request, timeout).await?;
    if response.succeeded {
        tracing::info!(key = %key, layout = %layout, "recorded the fleet's layout in etcd");
        return Ok(Ok(ours.into_bytes()));
    }
    match first_kvs(response).next().flatten() {
        Some(kv) => Ok(check(&kv.value, layout, &key).map(|()| kv.value)),
        // The compare saw it and the same transaction read it: this cannot happen; retry.
        None => Err(EtcdError::Call {
            endpoint: "(transaction)".into(),
            message: format!("{key} was present and then absent in one transaction"),
        }),
    }
}

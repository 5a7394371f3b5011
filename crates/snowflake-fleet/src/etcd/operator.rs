//! The operator tools on etcd: a pair's mark as `snowflake state show` reads it, and
//! `snowflake state lower-mark`'s one conditional write (nobody holds the pair, and the mark
//! is still the one read).

use super::client::EtcdClient;
use super::layout::layout_key;
use super::txn::{absent, first_kvs, get, mod_revision_is, put, shown};
use super::{Keys, call_timeout, pb};
use crate::config::EtcdConfig;
use crate::connect::Pair;
use crate::error::FleetError;
use crate::fleet_layout::check;
use crate::mark::{LowerMark, Lowering, StoredMark, parse_mark};
use snowflake_core::{Layout, format_unix_ms};
use std::time::Duration;

/// One pair as an operator tool reads it in one transaction.
#[derive(Debug)]
struct PairRead {
    /// The mark as shown, with the holder.
    stored: StoredMark,
    /// The mark key's `mod_revision` (0 when absent): the lowering's compare.
    mark_revision: i64,
}

/// Reads the claim key and the mark in one transaction, trying each member once.
async fn read_pair(
    client: &EtcdClient,
    keys: &Keys,
    layout: &Layout,
    timeout: Duration,
    attempts: usize,
) -> Result<PairRead, FleetError> {
    let layout_key = layout_key(&keys.prefix);
    let request = pb::TxnRequest {
        compare: vec![],
        success: vec![get(&keys.claim), get(&keys.mark), get(&layout_key)],
        failure: vec![],
    };
    let mut last = String::new();
    for _ in 0..attempts.max(1) {
        match client.txn(request.clone(), timeout).await {
            Ok(response) => {
                let mut ranges = first_kvs(response);
                let (claim, mark) = (ranges.next().flatten(), ranges.next().flatten());
                // Marks are read and written under the fleet's layout only.
                if let Some(recorded) = ranges.next().flatten() {
                    check(&recorded.value, layout, &layout_key)?;
                }
                let read = parse_mark(
                    mark.as_ref().map_or(&[][..], |kv| &kv.value),
                    layout,
                    "lease",
                )
                .map_err(|reason| FleetError::UnusableMark {
                    context: format!("the high-water mark in etcd ({}) is unusable", keys.mark),
                    source: reason,
                    consequence: "",
                })?;
                let stored = StoredMark {
                    high_water_ms: read.high_water_ms,
                    value: mark
                        .as_ref()
                        .map_or_else(String::new, |kv| shown(&kv.value)),
                    holder: claim.map(|kv| shown(&kv.value)),
                    location: keys.mark.clone(),
                };
                return Ok(PairRead {
                    stored,
                    mark_revision: mark.map_or(0, |kv| kv.mod_revision),
                });
            }
            // The client moved on to the next member: try it.
            Err(err) => last = err.to_string(),
        }
    }
    Err(FleetError::Unavailable(format!(
        "cannot read {} from etcd: {last}",
        keys.mark
    )))
}

/// A client for an operator tool, and its call timeout.
fn operator_client(config: &EtcdConfig) -> Result<(EtcdClient, Duration), FleetError> {
    let timeout = call_timeout(config.lease_ttl_secs);
    let client = EtcdClient::new(
        &config.endpoints,
        config.tls.as_ref(),
        config.auth.as_ref(),
        timeout,
    )?;
    Ok((client, timeout))
}

/// The fleet's layout record as stored (`None` when no node recorded one yet), for
/// `snowflake state show`.
pub async fn read_layout(config: &EtcdConfig) -> Result<Option<Vec<u8>>, FleetError> {
    let (client, timeout) = operator_client(config)?;
    let key = layout_key(&config.prefix);
    let mut last = String::new();
    for _ in 0..config.endpoints.len().max(1) {
        match client.get_key(&key, timeout).await {
            Ok(kv) => return Ok(kv.map(|kv| kv.value)),
            Err(err) => last = err.to_string(),
        }
    }
    Err(FleetError::Unavailable(format!(
        "cannot read {key} from etcd: {last}"
    )))
}

/// The pair's mark in etcd as an operator sees it (`snowflake state show`): its
/// `high_water_ms` (0 when none was ever written), the stored value, and the claim key's
/// value as `holder` while a node holds the pair. A mark that cannot be read (not JSON, another
/// epoch) is an error naming the key; one past the layout is shown as it is.
pub async fn read_mark(
    config: &EtcdConfig,
    layout: &Layout,
    pair: Pair,
) -> Result<StoredMark, FleetError> {
    let (client, timeout) = operator_client(config)?;
    let keys = Keys::new(&config.prefix, pair.datacenter_id, pair.worker_id);
    read_pair(&client, &keys, layout, timeout, config.endpoints.len())
        .await
        .map(|read| read.stored)
}

/// Lowers the pair's mark in etcd to `lower.to_ms` (`snowflake state lower-mark`), recording
/// who and when in it; returns the mark it replaced. Refused while a node holds the pair, and
/// when the new mark is not lower than the current one. The write is one conditional
/// transaction: nobody holds the pair (the claim key's `create_revision` is 0) and the mark is
/// still the one just read (its `mod_revision`), so a node claiming the pair or writing its
/// mark meanwhile makes it fail instead of being overwritten.
pub async fn lower_mark(
    config: &EtcdConfig,
    layout: &Layout,
    pair: Pair,
    lower: &LowerMark<'_>,
) -> Result<StoredMark, FleetError> {
    let Pair {
        datacenter_id,
        worker_id,
    } = pair;
    let to_ms = lower.to_ms;
    let (client, timeout) = operator_client(config)?;
    let keys = Keys::new(&config.prefix, datacenter_id, worker_id);
    let PairRead {
        stored: previous,
        mark_revision,
    } = read_pair(&client, &keys, layout, timeout, config.endpoints.len()).await?;
    if let Some(holder) = &previous.holder {
        return Err(FleetError::Refused(format!(
            "worker {worker_id} of datacenter {datacenter_id} is held by a live node: {holder} \
             (etcd key {}); stop it first: the mark of a held pair is never lowered",
            keys.claim
        )));
    }
    if to_ms >= previous.high_water_ms {
        return Err(FleetError::Refused(format!(
            "{to_ms} is not lower than the current mark {} ({}) in etcd ({})",
            previous.high_water_ms,
            format_unix_ms(previous.high_water_ms),
            keys.mark
        )));
    }
    let value = Lowering {
        to_ms,
        from_ms: previous.high_water_ms,
        by: lower.by,
        at_ms: lower.now_ms,
    }
    .json(layout, "lease");
    let request = pb::TxnRequest {
        compare: vec![
            absent(&keys.claim),
            mod_revision_is(&keys.mark, mark_revision),
        ],
        success: vec![put(&keys.mark, value, 0)],
        failure: vec![],
    };
    match client.txn(request, timeout).await {
        Ok(response) if response.succeeded => {
            tracing::info!(
                key = %keys.mark,
                from_ms = previous.high_water_ms,
                to_ms,
                by = lower.by,
                "lowered the high-water mark in etcd"
            );
            Ok(previous)
        }
        Ok(_) => Err(FleetError::Refused(format!(
            "worker {worker_id} of datacenter {datacenter_id} changed meanwhile in etcd (claimed \
             by a node, or its mark {} written): nothing was lowered; try again",
            keys.mark
        ))),
        Err(err) => Err(FleetError::Uncertain(format!(
            "lowering {} to {to_ms} may or may not have been applied: {err}; read it again \
             before retrying",
            keys.mark
        ))),
    }
}

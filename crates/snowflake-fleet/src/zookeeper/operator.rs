//! The operator tools on ZooKeeper: a worker's mark as `snowflake state show` reads it, and
//! `snowflake state lower-mark`, which holds the worker's registration itself while it writes.

use super::acl::Protection;
use super::layout::stored_layout;
use super::register::Znodes;
use super::session::{ZooKeeperError, bounded, call_timeout, close, connect};
use crate::config::ZooKeeperConfig;
use crate::error::FleetError;
use crate::fleet_layout::check;
use crate::mark::{LowerMark, Lowering, StoredMark, parse_mark};
use snowflake_core::{Layout, format_unix_ms};
use std::sync::Arc;
use std::time::Duration;
use zookeeper_client as zk;

/// The data of the znode `snowflake state lower-mark` holds while it lowers a mark.
const LOWER_MARK_HOLDER: &str = "snowflake-state-lower-mark";

/// A short session for an operator tool.
async fn operator_session(config: &ZooKeeperConfig) -> Result<zk::Client, FleetError> {
    let timeout = call_timeout(config.session_timeout).max(Duration::from_secs(2));
    connect(config, config.claim_timeout.max(timeout))
        .await
        .map_err(|e| {
            FleetError::Unavailable(format!(
                "cannot reach ZooKeeper ({}): {e}",
                config.servers.join(",")
            ))
        })
}

/// Who holds `node_path`: its data and session, if it exists.
async fn holder_of(
    client: &zk::Client,
    node_path: &str,
    timeout: Duration,
) -> Result<Option<String>, FleetError> {
    match bounded(timeout, client.get_data(node_path)).await {
        Ok((data, stat)) => Ok(Some(format!(
            "{} (session {:x})",
            String::from_utf8_lossy(&data)
                .chars()
                .take(200)
                .collect::<String>(),
            stat.ephemeral_owner
        ))),
        Err(ZooKeeperError::Zk(zk::Error::NoNode)) => Ok(None),
        Err(err) => Err(FleetError::Unavailable(format!(
            "cannot read {node_path}: {err}"
        ))),
    }
}

/// The fleet's layout record, when there is one, must be `layout`: an operator tool reads and
/// writes marks under the fleet's layout only.
async fn check_recorded_layout(
    client: &zk::Client,
    config: &ZooKeeperConfig,
    layout: &Layout,
    layout_path: &str,
    timeout: Duration,
) -> Result<(), FleetError> {
    match stored_layout(client, config, timeout).await {
        Ok(Some(stored)) => Ok(check(&stored, layout, layout_path)?),
        Ok(None) => Ok(()),
        Err(err) => Err(FleetError::Unavailable(format!(
            "cannot read {layout_path}: {err}"
        ))),
    }
}

/// The fleet's layout record as stored under `config`'s path (`None` when no node recorded one
/// yet), for `snowflake state show`.
pub async fn read_layout(config: &ZooKeeperConfig) -> Result<Option<Vec<u8>>, FleetError> {
    let client = operator_session(config).await?;
    let timeout = call_timeout(config.session_timeout);
    let result = stored_layout(&client, config, timeout)
        .await
        .map_err(|err| {
            FleetError::Unavailable(format!("cannot read {}: {err}", config.layout_path()))
        });
    close(Arc::new(client), timeout).await;
    result
}

/// A mark znode as an operator tool reads it.
#[derive(Debug)]
struct MarkRead {
    /// The mark as stored (0 and an empty value when there is none).
    stored: StoredMark,
    /// Its version (-1 when absent): the lowering's compare-and-set.
    version: i32,
}

/// The mark at `mark_path` as stored.
async fn stored_mark(
    client: &zk::Client,
    mark_path: &str,
    layout: &Layout,
    timeout: Duration,
) -> Result<MarkRead, FleetError> {
    let (data, version) = match bounded(timeout, client.get_data(mark_path)).await {
        Ok((data, stat)) => (data, stat.version),
        Err(ZooKeeperError::Zk(zk::Error::NoNode)) => (Vec::new(), -1),
        Err(err) => {
            return Err(FleetError::Unavailable(format!(
                "cannot read {mark_path}: {err}"
            )));
        }
    };
    let mark = parse_mark(&data, layout, "session").map_err(|reason| FleetError::UnusableMark {
        context: format!("the mark at {mark_path} cannot be read"),
        source: reason,
        consequence: "",
    })?;
    Ok(MarkRead {
        stored: StoredMark {
            high_water_ms: mark.high_water_ms,
            value: String::from_utf8_lossy(&data).into_owned(),
            holder: None,
            location: mark_path.to_owned(),
        },
        version,
    })
}

/// `snowflake state show` for ZooKeeper: worker `worker_id`'s mark under `config`'s path, and
/// who holds the worker (the registration's data and session), if anybody does.
pub async fn read_mark(
    config: &ZooKeeperConfig,
    layout: &Layout,
    worker_id: u64,
) -> Result<StoredMark, FleetError> {
    let client = operator_session(config).await?;
    let timeout = call_timeout(config.session_timeout);
    let Znodes {
        node: node_path,
        mark: mark_path,
        layout: layout_path,
    } = Znodes::new(config, worker_id);
    let result = async {
        check_recorded_layout(&client, config, layout, &layout_path, timeout).await?;
        let mut mark = stored_mark(&client, &mark_path, layout, timeout)
            .await?
            .stored;
        mark.holder = holder_of(&client, &node_path, timeout).await?;
        Ok(mark)
    }
    .await;
    close(Arc::new(client), timeout).await;
    result
}

/// `snowflake state lower-mark` for ZooKeeper: lowers worker `worker_id`'s mark to
/// `lower.to_ms`, recording who and when. Refused while a node holds the worker, and unless the
/// new mark is below the current one. It registers the worker itself for the time of the write
/// (its ephemeral znode proves nobody else holds it, and every node that registers after it
/// claims the mark with a compare-and-set, see the module doc), writes with a compare-and-set
/// on the version it read, then closes its session. Returns the mark as it was.
pub async fn lower_mark(
    config: &ZooKeeperConfig,
    layout: &Layout,
    worker_id: u64,
    lower: &LowerMark<'_>,
) -> Result<StoredMark, FleetError> {
    let to_ms = lower.to_ms;
    let client = operator_session(config).await?;
    let timeout = call_timeout(config.session_timeout);
    let Znodes {
        node: node_path,
        mark: mark_path,
        layout: layout_path,
    } = Znodes::new(config, worker_id);
    let result = async {
        match bounded(
            timeout,
            client.create(
                &node_path,
                LOWER_MARK_HOLDER.as_bytes(),
                &Protection::of(config).ephemeral(),
            ),
        )
        .await
        {
            Ok(_) => {}
            Err(ZooKeeperError::Zk(zk::Error::NodeExists)) => {
                let holder = holder_of(&client, &node_path, timeout)
                    .await?
                    .unwrap_or_else(|| "(just released)".into());
                return Err(FleetError::Refused(format!(
                    "worker {worker_id} is held by {holder} ({node_path}): refusing to lower its \
                     mark while a node holds it; stop that node first (a crashed node's znode \
                     goes when its session expires)"
                )));
            }
            Err(ZooKeeperError::Zk(zk::Error::NoNode)) => {
                return Err(FleetError::Refused(format!(
                    "{} does not exist: no node ever registered a worker there",
                    config.path
                )));
            }
            Err(err) => {
                return Err(FleetError::Unavailable(format!(
                    "cannot create {node_path}: {err}"
                )));
            }
        }
        check_recorded_layout(&client, config, layout, &layout_path, timeout).await?;
        let MarkRead {
            stored: previous,
            version,
        } = stored_mark(&client, &mark_path, layout, timeout).await?;
        if version < 0 {
            return Err(FleetError::Refused(format!(
                "worker {worker_id} has no mark at {mark_path}: nothing to lower"
            )));
        }
        if to_ms >= previous.high_water_ms {
            return Err(FleetError::Refused(format!(
                "the mark of worker {worker_id} is {} ({}); --to {to_ms} ({}) is not below it",
                previous.high_water_ms,
                format_unix_ms(previous.high_water_ms),
                format_unix_ms(to_ms)
            )));
        }
        let value = Lowering {
            to_ms,
            from_ms: previous.high_water_ms,
            by: lower.by,
            at_ms: lower.now_ms,
        }
        .json(layout, "session");
        let mut multi = client
            .new_check_writer(&node_path, None)
            .map_err(ZooKeeperError::Zk)?;
        multi
            .add_set_data(&mark_path, value.as_bytes(), Some(version))
            .map_err(ZooKeeperError::Zk)?;
        match tokio::time::timeout(timeout, multi.commit()).await {
            Ok(Ok(_)) => Ok(previous),
            Ok(Err(zk::CheckWriteError::OperationFailed {
                source: zk::Error::BadVersion,
                ..
            })) => Err(FleetError::Refused(format!(
                "{mark_path} changed while lowering it; nothing was written (run it again)"
            ))),
            Ok(Err(err)) => Err(FleetError::Unavailable(format!(
                "cannot write {mark_path}: {err}"
            ))),
            Err(_) => Err(FleetError::Uncertain(format!(
                "ZooKeeper did not answer within {} ms; the mark may or may not be lowered (see \
                 `snowflake state show`)",
                timeout.as_millis()
            ))),
        }
    }
    .await;
    // Removes our znode (and only ours) at once.
    close(Arc::new(client), timeout).await;
    result
}

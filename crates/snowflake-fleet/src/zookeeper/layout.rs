//! The fleet's layout in ZooKeeper: the persistent znode `PATH-layout` (a sibling of the
//! registrations, as the marks are), created by the first node to register and never changed,
//! read and checked by every other; every registration's multi-operation checks its version
//! (see `crate::fleet_layout`). ZooKeeper compares versions only, so a record deleted and
//! created again between a registrant's read and its claim would pass the check: moving a
//! fleet to another layout takes a new path, never a rewritten record.

use super::acl::Protection;
use super::session::{ZooKeeperError, bounded};
use crate::config::ZooKeeperConfig;
use crate::fleet_layout::{LayoutMismatch, check, check_marks, record_json};
use snowflake_core::Layout;
use std::time::Duration;
use zookeeper_client as zk;

/// Records `layout` as the fleet's if none is recorded yet (and the marks already there, an
/// older release's, are of it), else checks the recorded one: the record's version (for the
/// registration's check) when it is ours, why not when it is not. The outer error is
/// ZooKeeper's (the caller retries).
pub(super) async fn ensure_layout(
    client: &zk::Client,
    config: &ZooKeeperConfig,
    layout: &Layout,
    timeout: Duration,
) -> Result<Result<i32, LayoutMismatch>, ZooKeeperError> {
    let path = config.layout_path();
    let ours = record_json(layout);
    match bounded(timeout, client.get_data(&path)).await {
        Ok((data, stat)) => return Ok(check(&data, layout, &path).map(|()| stat.version)),
        Err(ZooKeeperError::Zk(zk::Error::NoNode)) => {}
        Err(err) => return Err(err),
    }
    // None yet: the marks of an older release (epoch only) say what the fleet runs.
    let marks_path = config.marks_path();
    let mut marks = Vec::new();
    for worker in bounded(timeout, client.list_children(&marks_path)).await? {
        let znode = format!("{marks_path}/{worker}");
        match bounded(timeout, client.get_data(&znode)).await {
            Ok((data, _)) => marks.push((znode, data)),
            Err(ZooKeeperError::Zk(zk::Error::NoNode)) => {}
            Err(err) => return Err(err),
        }
    }
    if let Err(mismatch) = check_marks(marks.iter().map(|(z, d)| (z.clone(), &d[..])), layout) {
        return Ok(Err(mismatch));
    }
    match bounded(
        timeout,
        client.create(&path, ours.as_bytes(), &Protection::of(config).persistent()),
    )
    .await
    {
        Ok((stat, _)) => {
            tracing::info!(znode = %path, layout = %layout, "recorded the fleet's layout in ZooKeeper");
            return Ok(Ok(stat.version));
        }
        Err(ZooKeeperError::Zk(zk::Error::NodeExists)) => {}
        Err(err) => return Err(err),
    }
    let (data, stat) = bounded(timeout, client.get_data(&path)).await?;
    Ok(check(&data, layout, &path).map(|()| stat.version))
}

/// The fleet's layout record as stored (`None` when no node recorded one yet), for
/// `snowflake state show`.
pub(super) async fn stored_layout(
    client: &zk::Client,
    config: &ZooKeeperConfig,
    timeout: Duration,
) -> Result<Option<Vec<u8>>, ZooKeeperError> {
    match bounded(timeout, client.get_data(&config.layout_path())).await {
        Ok((data, _)) => Ok(Some(data)),
        Err(ZooKeeperError::Zk(zk::Error::NoNode)) => Ok(None),
        Err(err) => Err(err),
    }
}

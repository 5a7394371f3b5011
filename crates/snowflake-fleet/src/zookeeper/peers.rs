//! The 2010 peer checks: before registering, a node asks every registered peer over Thrift
//! for its worker id, its datacenter id and its time, and refuses to start when one does not
//! match its znode, is in another datacenter, or its clock is too far from the peers' mean.

use super::session::bounded;
use crate::config::ZooKeeperConfig;
use snowflake_core::Clock;
use snowflake_proto::thrift::peer::Peer;
use std::time::Duration;
use zookeeper_client as zk;

/// Time limit of each Thrift call to a peer.
const PEER_TIMEOUT: Duration = Duration::from_secs(2);

/// What a peer answered.
#[derive(Debug)]
struct PeerAnswers {
    /// Its `get_worker_id`.
    worker_id: i64,
    /// Its `get_datacenter_id`.
    datacenter_id: i64,
    /// Its `get_timestamp` (Unix ms).
    time_ms: i64,
    /// Our clock when `get_timestamp` was sent (Unix ms).
    sent_ms: u64,
    /// Our clock when its answer came (Unix ms).
    received_ms: u64,
}

/// A peer's clock beside ours.
#[derive(Debug)]
struct PeerClock {
    /// The peer's time (Unix ms).
    theirs_ms: i64,
    /// Ours at the middle of the exchange (Unix ms).
    ours_ms: u64,
    /// The peer's address.
    addr: String,
}

/// The 2010 sanity checks: every registered peer's worker id matches its znode, its datacenter
/// id is ours, and our clock is within `max_skew_ms` of the peers' mean. Unreachable peers are
/// skipped (and logged). The error is the reason, for `RegisterError::Peer`.
pub(super) async fn check_peers(
    client: &zk::Client,
    config: &ZooKeeperConfig,
    datacenter_id: u64,
    clock: &dyn Clock,
    timeout: Duration,
) -> Result<(), String> {
    let children = match bounded(timeout, client.list_children(&config.path)).await {
        Ok(children) => children,
        Err(err) => {
            return Err(format!("cannot list {}: {err}", config.path));
        }
    };
    let mut times = Vec::new();
    for child in children {
        let Ok(worker) = child.parse::<u64>() else {
            tracing::warn!(path = %config.path, znode = %child, "ignoring a znode that is not a worker id");
            continue;
        };
        let path = format!("{}/{child}", config.path);
        let addr = match bounded(timeout, client.get_data(&path)).await {
            Ok((data, _)) => String::from_utf8_lossy(&data).into_owned(),
            // Released between the listing and the read.
            Err(_) => continue,
        };
        let answers = async {
            let mut peer = Peer::connect(&addr, PEER_TIMEOUT).await?;
            let worker_id = peer.call_i64("get_worker_id").await?;
            let datacenter_id = peer.call_i64("get_datacenter_id").await?;
            let sent_ms = clock.now_ms();
            let time_ms = peer.call_i64("get_timestamp").await?;
            let received_ms = clock.now_ms();
            Ok::<_, String>(PeerAnswers {
                worker_id,
                datacenter_id,
                time_ms,
                sent_ms,
                received_ms,
            })
        };
        match answers.await {
            Ok(PeerAnswers {
                worker_id: their_worker,
                datacenter_id: their_datacenter,
                time_ms: their_time,
                sent_ms: sent,
                received_ms: received,
            }) => {
                if u64::try_from(their_worker).ok() != Some(worker) {
                    // A node killed and restarted at the same address registered another worker
                    // while its old znode lingers (until the dead session expires): consistent,
                    // if the worker it names is registered at this address. That znode is checked
                    // in its own turn.
                    let own = format!("{}/{their_worker}", config.path);
                    let registered = bounded(timeout, client.get_data(&own)).await;
                    if matches!(&registered, Ok((data, _)) if data.as_slice() == addr.as_bytes()) {
                        tracing::warn!(
                            peer = %addr,
                            znode = %path,
                            registered = %own,
                            "skipping a lingering znode: its address now serves the worker \
                             registered at {own} (a node restarted there before its previous \
                             session expired)"
                        );
                        continue;
                    }
                    return Err(format!(
                        "the peer at {addr} registered as worker {worker} ({path}) says its worker \
                         id is {their_worker}"
                    ));
                }
                if u64::try_from(their_datacenter).ok() != Some(datacenter_id) {
                    return Err(format!(
                        "the peer at {addr} ({path}) is in datacenter {their_datacenter}, and this \
                         node in {datacenter_id}: one ZooKeeper path holds one datacenter's \
                         workers (use another --zookeeper-path)"
                    ));
                }
                // Compare with our clock at the middle of the exchange.
                let ours = sent + (received.saturating_sub(sent)) / 2;
                times.push(PeerClock {
                    theirs_ms: their_time,
                    ours_ms: ours,
                    addr,
                });
            }
            Err(err) => {
                tracing::warn!(peer = %addr, znode = %path, error = %err, "cannot check a registered peer; skipping it (a crashed node's znode stays until its session expires)");
            }
        }
    }
    if times.is_empty() {
        return Ok(());
    }
    // The mean of the peers' offsets from our clock.
    let count = i128::try_from(times.len()).unwrap_or(1);
    let offset: i128 = times
        .iter()
        .map(|clock| i128::from(clock.theirs_ms) - i128::from(clock.ours_ms))
        .sum::<i128>()
        / count;
    if offset.unsigned_abs() > u128::from(config.max_peer_skew_ms) {
        let peers: Vec<&str> = times.iter().map(|clock| clock.addr.as_str()).collect();
        return Err(format!(
            "this node's clock is {} ms {} the mean of its {} peers' clocks ({}); at most {} ms \
             is allowed (--max-peer-skew-ms). Fix the clock (NTP) before starting",
            offset.unsigned_abs(),
            if offset > 0 { "behind" } else { "ahead of" },
            times.len(),
            peers.join(", "),
            config.max_peer_skew_ms
        ));
    }
    Ok(())
}

//! The fleet view: the last read of the pairs held in a node's datacenter, refreshed in the
//! background so that page views and scrapes never load the coordination service.

use crate::coordinator::Coordinator;
use crate::held::HeldPair;
use serde::Serialize;
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::watch;

/// How often a node reads the held pairs of its datacenter again.
pub const FLEET_REFRESH: Duration = Duration::from_secs(10);

/// The last read of the held pairs, refreshed in the background every [`FLEET_REFRESH`]:
/// page views and scrapes read this copy, so they cannot load the coordination service.
#[derive(Debug, Default)]
pub struct FleetView {
    last: Mutex<Option<FleetRead>>,
}

/// One read of the held pairs.
#[derive(Debug, Clone, Serialize)]
pub struct FleetRead {
    /// The node's datacenter.
    pub datacenter_id: u64,
    /// Worker ids per datacenter.
    pub workers: u64,
    /// The pairs, by worker id, as last read successfully (empty before the first success).
    pub held: Vec<HeldPair>,
    /// Why the last read failed, if it did (`held` is then the last good read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When `held` was read (Unix ms).
    pub read_at_ms: u64,
}

impl FleetView {
    /// The last read, if any.
    pub fn get(&self) -> Option<FleetRead> {
        self.last
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .clone()
    }

    /// Reads the held pairs from `coordinator` now, keeping the previous pairs if it fails.
    pub async fn refresh(&self, coordinator: &dyn Coordinator, datacenter_id: u64) {
        let read = coordinator.held_pairs().await;
        let now_ms = snowflake_core::Clock::now_ms(&snowflake_core::SystemClock);
        let mut last = self
            .last
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        match read {
            Ok(mut held) => {
                held.sort_by_key(|p| (p.datacenter_id, p.worker_id));
                *last = Some(FleetRead {
                    datacenter_id,
                    workers: coordinator.workers_per_datacenter(),
                    held,
                    error: None,
                    read_at_ms: now_ms,
                });
            }
            Err(error) => match last.as_mut() {
                Some(previous) => previous.error = Some(error.to_string()),
                None => {
                    *last = Some(FleetRead {
                        datacenter_id,
                        workers: coordinator.workers_per_datacenter(),
                        held: Vec::new(),
                        error: Some(error.to_string()),
                        read_at_ms: 0,
                    });
                }
            },
        }
    }

    /// Refreshes the view every [`FLEET_REFRESH`] until `stop` flips.
    pub async fn keep_fresh(
        &self,
        coordinator: &dyn Coordinator,
        datacenter_id: u64,
        mut stop: watch::Receiver<bool>,
    ) {
        loop {
            // A read in flight is abandoned at the stop: a slow coordination service must not
            // hold up the drain, the final mark and the release behind it.
            tokio::select! {
                () = self.refresh(coordinator, datacenter_id) => {}
                _ = stop.wait_for(|stop| *stop) => return,
            }
            tokio::select! {
                () = tokio::time::sleep(FLEET_REFRESH) => {}
                _ = stop.wait_for(|stop| *stop) => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::FleetView;
    use crate::coordinator::{BoxFuture, Coordinator};
    use crate::error::FleetError;
    use crate::fence::Fence;
    use crate::held::HeldPair;
    use crate::lease_info::LeaseInfo;
    use tokio::sync::watch;

    /// A coordinator whose listing never answers (a frozen coordination service).
    #[derive(Debug)]
    struct Frozen(watch::Sender<Fence>);

    impl Coordinator for Frozen {
        fn source(&self) -> &'static str {
            "etcd"
        }
        fn fence(&self) -> watch::Receiver<Fence> {
            self.0.subscribe()
        }
        fn store_mark(&self, _mark_ms: u64) -> BoxFuture<'_, Result<(), FleetError>> {
            Box::pin(async { Ok(()) })
        }
        fn run(&self, _stop: watch::Receiver<bool>) -> BoxFuture<'_, Result<(), FleetError>> {
            Box::pin(std::future::pending())
        }
        fn release(&self) -> BoxFuture<'_, ()> {
            Box::pin(async {})
        }
        fn info(&self) -> LeaseInfo {
            LeaseInfo {
                state: "held",
                lease_id: None,
                ttl_secs: 10,
                remaining_ms: 1,
                key: String::new(),
                reason: None,
                renewals: 0,
                renewal_failures: 0,
                losses: 0,
                skipped_ahead: 0,
            }
        }
        fn held_pairs(&self) -> BoxFuture<'_, Result<Vec<HeldPair>, FleetError>> {
            Box::pin(std::future::pending())
        }
        fn workers_per_datacenter(&self) -> u64 {
            32
        }
    }

    /// The stop does not wait for a listing in flight: the drain and the final mark come
    /// after this task.
    #[tokio::test]
    async fn a_stop_abandons_a_listing_that_never_answers() {
        let (fence, _) = watch::channel(Fence::Lost {
            reason: "test".into(),
        });
        let coordinator = Frozen(fence);
        let view = FleetView::default();
        let (stop_tx, stop_rx) = watch::channel(false);
        let stopper = async {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            let _ = stop_tx.send(true);
        };
        let ran = tokio::time::timeout(std::time::Duration::from_secs(5), async {
            tokio::join!(view.keep_fresh(&coordinator, 0, stop_rx), stopper);
        })
        .await;
        assert!(ran.is_ok(), "keep_fresh did not return after the stop");
        assert!(view.get().is_none());
    }
}

//! The node-wide budget for bulk replies: how many bytes of large answers (batches of more than
//! [`BULK_MIN_IDS`] IDs, over any door) may be held in memory at once, and the bounded queue of
//! the large requests that wait for their share.
//!
//! Without it, every connection could hold a whole largest reply while its client does not read
//! (a gRPC `NextIds(100000)` is about 1.7 MB until it is sent), so memory grew with the number
//! of connections times the largest batch; and hundreds of concurrent large batches all issued
//! at once, each a sliver of every millisecond, so that most ran out of time half-done and their
//! IDs were thrown away. With it:
//! - a large request first takes its reply's estimated bytes from the budget and one of
//!   [`MAX_ISSUING`] turns to issue ([`BulkGate::admit`]), and only then issues its IDs: at most
//!   [`BUDGET_BYTES`] of large replies exist at once, node-wide, whatever the number of
//!   connections, and the generator is shared between a few large requests at a time, so that
//!   they finish;
//! - the others wait their turn, in order, at most [`MAX_WAITING`] of them; one more is refused
//!   at once ([`IssueError::Exhausted`]: gRPC `RESOURCE_EXHAUSTED`, HTTP 503 with
//!   `Retry-After`, RESP `-ERR`), before any ID is issued for it;
//! - the bytes go back to the budget when the reply is gone (written, or its connection closed):
//!   the [`BulkPermit`] travels with the reply (see [`BulkPermit::wrap`] for gRPC).
//!
//! Single IDs and batches up to [`BULK_MIN_IDS`] never touch it: their replies fit a socket's
//! send buffer, so an unread one is held by the kernel, not by the process.

use crate::node::refusal::IssueError;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Batches of more than this many IDs are bulk: admitted through the budget.
pub const BULK_MIN_IDS: u64 = 1024;

/// The bytes of bulk replies that may be held at once, node-wide.
pub const BUDGET_BYTES: u32 = 8 * 1024 * 1024;

/// How many bulk requests may wait for the budget at once; one more is refused.
pub const MAX_WAITING: usize = 16;

/// How many bulk requests may issue their IDs at once, node-wide: the others wait their turn
/// rather than each taking a sliver of every millisecond and all running out of time.
pub const MAX_ISSUING: usize = 2;

/// The budget, its queue, and their metrics.
#[derive(Debug)]
pub struct BulkGate {
    budget: Arc<Semaphore>,
    issuing: Arc<Semaphore>,
    waiting: AtomicUsize,
    metrics: BulkMetrics,
}

/// The metrics of the budget (registered by [`crate::metrics::Metrics`]).
#[derive(Debug, Clone, Default)]
pub struct BulkMetrics {
    /// `snowflake_bulk_waiting`: bulk requests waiting for the budget.
    pub waiting: Gauge,
    /// `snowflake_bulk_bytes_held`: bytes of the budget held by bulk replies.
    pub held: Gauge,
    /// `snowflake_bulk_refused_total`: bulk requests refused because the queue was full.
    pub refused: Counter,
}

/// A bulk reply's share of the budget, given back when dropped.
#[derive(Debug)]
pub struct BulkPermit {
    permit: OwnedSemaphorePermit,
    /// A turn to issue IDs, until [`BulkPermit::issued`].
    issuing: Option<OwnedSemaphorePermit>,
    held: Gauge,
}

impl Drop for BulkPermit {
    fn drop(&mut self) {
        self.held
            .dec_by(i64::try_from(self.permit.num_permits()).unwrap_or(0));
    }
}

impl BulkPermit {
    /// The IDs are issued: the turn to issue goes to the next request (the reply's bytes stay
    /// held until it is gone).
    pub fn issued(&mut self) {
        self.issuing = None;
    }

    /// `data`, holding `permits` (shared by all the pieces of one reply) until every copy of
    /// it is dropped: for bytes handed to a connection that keeps them until the client reads.
    pub fn wrap(permits: &Arc<Vec<BulkPermit>>, data: bytes::Bytes) -> bytes::Bytes {
        bytes::Bytes::from_owner(Held {
            data,
            _permits: Arc::clone(permits),
        })
    }
}

/// Bytes and the permit that accounts for them.
struct Held {
    data: bytes::Bytes,
    _permits: Arc<Vec<BulkPermit>>,
}

impl AsRef<[u8]> for Held {
    fn as_ref(&self) -> &[u8] {
        &self.data
    }
}

impl BulkGate {
    /// A full budget reporting to `metrics`.
    pub fn new(metrics: BulkMetrics) -> BulkGate {
        BulkGate {
            budget: Arc::new(Semaphore::new(BUDGET_BYTES as usize)),
            issuing: Arc::new(Semaphore::new(MAX_ISSUING)),
            waiting: AtomicUsize::new(0),
            metrics,
        }
    }

    /// Whether a batch of `count` IDs is bulk.
    pub fn is_bulk(count: u64) -> bool {
        count > BULK_MIN_IDS
    }

    /// Takes `bytes` (at most the whole budget) for a bulk reply, waiting in turn behind the
    /// requests already waiting, for at most `within`; refused at once when [`MAX_WAITING`]
    /// already wait, and when its turn does not come in time. A refused request has no ID issued
    /// for it, and the time left to a request admitted is enough to issue its batch.
    pub async fn admit(
        &self,
        bytes: u64,
        within: std::time::Duration,
    ) -> Result<BulkPermit, IssueError> {
        let n = u32::try_from(bytes.clamp(1, u64::from(BUDGET_BYTES))).unwrap_or(BUDGET_BYTES);
        if self.waiting.fetch_add(1, Ordering::AcqRel) >= MAX_WAITING {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            self.metrics.refused.inc();
            return Err(IssueError::Exhausted {
                message: format!(
                    "too many large batches in progress: {MAX_WAITING} are already waiting for \
                     the node's budget of {} MiB for replies of more than {BULK_MIN_IDS} ids; \
                     try again shortly, ask another node, or ask for fewer ids",
                    BUDGET_BYTES >> 20
                ),
                retry_after_secs: 1,
            });
        }
        self.metrics.waiting.inc();
        // Decremented however the wait ends (also when the request is dropped meanwhile).
        let _waiting = Waiting(self);
        // In turn: the reply's bytes, then a turn to issue (both at once when free).
        let turn = async {
            let bytes = Arc::clone(&self.budget).acquire_many_owned(n).await?;
            let issuing = Arc::clone(&self.issuing).acquire_owned().await?;
            Ok::<_, tokio::sync::AcquireError>((bytes, issuing))
        };
        let (permit, issuing) = match tokio::time::timeout(within, turn).await {
            Ok(Ok(permits)) => permits,
            Err(_elapsed) => {
                self.metrics.refused.inc();
                return Err(IssueError::Exhausted {
                    message: format!(
                        "too many large batches in progress: this one waited {} ms for its turn \
                         (the node's budget of {} MiB for replies of more than {BULK_MIN_IDS} \
                         ids, {MAX_ISSUING} issuing at a time); try again shortly, ask another \
                         node, or ask for fewer ids",
                        within.as_millis(),
                        BUDGET_BYTES >> 20
                    ),
                    retry_after_secs: 1,
                });
            }
            // The semaphores are never closed.
            Ok(Err(_closed)) => {
                return Err(IssueError::Unavailable {
                    message: "shutting down".into(),
                    retry_after_secs: 1,
                });
            }
        };
        self.metrics.held.inc_by(i64::from(n));
        Ok(BulkPermit {
            permit,
            issuing: Some(issuing),
            held: self.metrics.held.clone(),
        })
    }
}

/// One request counted as waiting until dropped.
struct Waiting<'a>(&'a BulkGate);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::AcqRel);
        self.0.metrics.waiting.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: std::time::Duration = std::time::Duration::from_secs(60);

    #[tokio::test]
    async fn the_budget_is_shared_in_turn_and_a_full_queue_is_refused() {
        let gate = Arc::new(BulkGate::new(BulkMetrics::default()));
        let mut all = gate.admit(u64::MAX, LONG).await.unwrap();
        all.issued();
        assert_eq!(gate.metrics.held.get(), i64::from(BUDGET_BYTES));
        let mut waiting = Vec::new();
        for _ in 0..MAX_WAITING {
            let gate = Arc::clone(&gate);
            waiting.push(tokio::spawn(
                async move { gate.admit(10, LONG).await.map(drop) },
            ));
        }
        while gate.metrics.waiting.get() < MAX_WAITING as i64 {
            tokio::task::yield_now().await;
        }
        let refused = gate.admit(10, LONG).await.unwrap_err();
        assert!(
            matches!(refused, IssueError::Exhausted { .. }),
            "{refused:?}"
        );
        assert_eq!(gate.metrics.refused.get(), 1);
        drop(all);
        for task in waiting {
            task.await.unwrap().unwrap();
        }
        assert_eq!(gate.metrics.waiting.get(), 0);
        assert_eq!(gate.metrics.held.get(), 0);
        // Wrapped bytes hold their share until the last copy is gone.
        let mut permit = gate.admit(1000, LONG).await.unwrap();
        permit.issued();
        let permit = Arc::new(vec![permit]);
        let bytes = BulkPermit::wrap(&permit, bytes::Bytes::from_static(b"abc"));
        drop(permit);
        assert_eq!(gate.metrics.held.get(), 1000);
        assert_eq!(&bytes[..], b"abc");
        drop(bytes);
        assert_eq!(gate.metrics.held.get(), 0);
    }
}

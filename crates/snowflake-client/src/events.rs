//! What the client reports: its counters ([`Stats`]) and the events an application may observe
//! for its own metrics or logs ([`Event`]).

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

/// Counters since the client was built ([`Client::stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// IDs handed out from the prefetch buffer.
    pub served_from_buffer: u64,
    /// IDs handed out straight from a call (no prefetch, a miss, or `next_ids`).
    pub served_direct: u64,
    /// Successful calls to a node.
    pub fetches: u64,
    /// IDs received from nodes.
    pub fetched_ids: u64,
    /// Attempts that failed and moved on to another node (or waited for one).
    pub failovers: u64,
    /// Prefetched IDs dropped because they were older than `max_age` (or buffered at close).
    pub discarded: u64,
    /// `next_id` calls that found the prefetch buffer empty and waited for a fetch.
    pub buffer_misses: u64,
    /// IDs in the prefetch buffer now.
    pub buffered: u64,
}

/// What the client saw, for an application's own metrics or logs
/// ([`ClientBuilder::on_event`]). Called on the task that saw it: keep it quick.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Event<'a> {
    /// A node answered `ids` IDs in `elapsed`.
    Fetched {
        /// The node, as given to the builder.
        endpoint: &'a str,
        /// How many IDs.
        ids: u64,
        /// The call's duration.
        elapsed: Duration,
    },
    /// A node failed; it is skipped for `retry_in`.
    Failover {
        /// The node.
        endpoint: &'a str,
        /// Why.
        error: &'a str,
        /// How long it is skipped.
        retry_in: Duration,
    },
    /// A node that had failed answered again.
    EndpointBack {
        /// The node.
        endpoint: &'a str,
    },
    /// Prefetched IDs were dropped as stale (or at close).
    Discarded {
        /// How many.
        ids: u64,
    },
}

pub(crate) type Observer = Arc<dyn Fn(&Event<'_>) + Send + Sync>;

/// The live counters behind [`Stats`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) served_from_buffer: AtomicU64,
    pub(crate) served_direct: AtomicU64,
    pub(crate) fetches: AtomicU64,
    pub(crate) fetched_ids: AtomicU64,
    pub(crate) failovers: AtomicU64,
    pub(crate) discarded: AtomicU64,
    pub(crate) buffer_misses: AtomicU64,
}

//! What can go wrong while a coordinator holds a pair (writing its mark, keeping it, listing
//! the fleet) and in the operator tools: one error type, its variants named by what happened.
//! The messages are the ones operators read in the logs and the tools print.

use crate::etcd::EtcdError;
use crate::fleet_layout::LayoutMismatch;
use crate::mark::MarkError;
use crate::zookeeper::ZooKeeperError;

/// Why a coordinator or an operator tool could not do what was asked.
#[derive(Debug, Clone, thiserror::Error)]
pub enum FleetError {
    /// An etcd call failed (no answer, or an error): the pair may still be held.
    #[error(transparent)]
    Etcd(#[from] EtcdError),
    /// A ZooKeeper call failed (no answer, or an error): the pair may still be held.
    #[error(transparent)]
    ZooKeeper(#[from] ZooKeeperError),
    /// The coordination service cannot be used right now, with what was being done.
    #[error("{0}")]
    Unavailable(String),
    /// The pair is not held right now: lost, or given up, before this call.
    #[error("the {holding} is lost ({reason})")]
    NotHeld {
        /// `lease` (etcd) or `registration` (ZooKeeper).
        holding: &'static str,
        /// Why it was lost.
        reason: String,
    },
    /// The pair was given up at shutdown.
    #[error("the worker id is released")]
    Released,
    /// This call found the pair gone or held by somebody else: the issuer is fenced at once.
    #[error("{0}")]
    Lost(String),
    /// Another node holds the pair now: this one can never serve it again, so it stops.
    #[error("{0}")]
    Taken(String),
    /// The pair's stored mark cannot be used.
    #[error("{context}: {source}{consequence}")]
    UnusableMark {
        /// What was read, where (`the high-water mark in etcd (KEY) is unusable`).
        context: String,
        /// What is wrong with it.
        source: MarkError,
        /// What the caller does about it (`; refusing to serve the pair again`), if anything.
        consequence: &'static str,
    },
    /// The fleet records another layout than this node's (or one that cannot be read).
    #[error(transparent)]
    Layout(#[from] LayoutMismatch),
    /// The mark kept changing under every conditional write.
    #[error("{0}")]
    KeptChanging(String),
    /// An operator tool refused (the pair is held, the new mark is not lower, …).
    #[error("{0}")]
    Refused(String),
    /// An operator's write got no answer: it may or may not have been applied.
    #[error("{0}")]
    Uncertain(String),
}

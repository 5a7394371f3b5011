//! The refusal: why a request got no IDs, in the one type every front end maps to its own
//! status; the budget for bulk replies ([`crate::bulk`]) refuses with it too.

/// Why a request got no IDs; each front end maps this to its own status (HTTP 400/503, gRPC
/// `INVALID_ARGUMENT`/`UNAVAILABLE`, a Thrift exception).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IssueError {
    /// The request itself is wrong; retrying it unchanged will not help.
    #[error("{0}")]
    BadRequest(String),
    /// The node cannot issue IDs right now; the message says why.
    #[error("{message}")]
    Unavailable {
        /// Why, in words.
        message: String,
        /// When to try again, in seconds (at least 1).
        retry_after_secs: u64,
    },
    /// Too many large batches are in progress node-wide (see [`crate::bulk`]): refused before
    /// any ID was issued for it; gRPC `RESOURCE_EXHAUSTED`, HTTP 503.
    #[error("{message}")]
    Exhausted {
        /// Why, in words.
        message: String,
        /// When to try again, in seconds (at least 1).
        retry_after_secs: u64,
    },
}

//! Why the keeper stops: each error names the problem and, where there is one, the fix.

use snowflake_fleet::FleetError;

/// Why `snowflake pg-keeper` stopped before its shutdown signal.
#[derive(Debug, thiserror::Error)]
pub enum KeeperError {
    /// The database refused something the keeper cannot do without: the extension, its
    /// settings, the role, the pair (the message says which and how to fix it).
    #[error("{0}")]
    Database(String),
    /// The database's pair could not be claimed in etcd.
    #[error("cannot claim the database's pair in etcd: {0}")]
    Claim(String),
    /// The lease can never be held again (another process claimed the pair), or the fleet's
    /// mark became unusable.
    #[error("lost the database's pair: {0}")]
    Fleet(#[from] FleetError),
}

/// A failure to talk to the database: worth retrying, or not.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DbError {
    /// The connection is gone, or the server does not accept connections right now (starting,
    /// shutting down, restarting after a crash, too many connections): try again.
    #[error("{0}")]
    Unreachable(String),
    /// Anything else: the keeper cannot go on (the message says why).
    #[error("{0}")]
    Refused(String),
}

impl DbError {
    /// Whether trying again (after reconnecting) can help.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, DbError::Unreachable(_))
    }
}

impl From<DbError> for KeeperError {
    fn from(err: DbError) -> KeeperError {
        KeeperError::Database(err.to_string())
    }
}

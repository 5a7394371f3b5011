//! The one error type of the load generator.

use std::io;

/// Why a benchmark could not be configured or could not run at all.
///
/// Problems *during* a run (a 503, a dropped connection, a malformed body) are not errors of the
/// run: they are counted in the [`Report`](crate::Report). Messages are lowercase, name the flag,
/// the valid range and the value found:
///
/// ```
/// use snowflake_loadgen::BenchConfig;
/// let err = BenchConfig::builder().connections(0).build().unwrap_err();
/// assert_eq!(err.to_string(), "invalid --connections: expected 1..=10000, found 0");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A setting outside its valid range or in the wrong form.
    #[error("invalid {flag}: expected {expected}, found {found}")]
    InvalidFlag {
        /// The command-line flag the setting comes from, e.g. `--connections`.
        flag: &'static str,
        /// What would have been accepted, e.g. `1..=10000`.
        expected: String,
        /// The value given, as given.
        found: String,
    },
    /// The target's host name did not resolve to any address.
    #[error("cannot resolve {addr}: {reason}")]
    Resolve {
        /// The `HOST:PORT` being resolved.
        addr: String,
        /// What the resolver said.
        reason: String,
    },
    /// Not a single connection to the target could be opened at the start of the run.
    #[error("cannot connect to {addr}: {reason}")]
    Connect {
        /// The `HOST:PORT` of the target.
        addr: String,
        /// The kind of the first failure, e.g. [`io::ErrorKind::ConnectionRefused`].
        kind: io::ErrorKind,
        /// What the operating system said, e.g. `Connection refused`.
        reason: String,
    },
    /// The run was interrupted (Ctrl-C) before the measurement started.
    #[error("interrupted before the measurement started")]
    Interrupted,
    /// The client's async runtime could not be started.
    #[error("cannot start the client runtime: {reason}")]
    Runtime {
        /// What went wrong.
        reason: String,
    },
}

impl Error {
    /// An [`Error::InvalidFlag`].
    pub(crate) fn invalid(
        flag: &'static str,
        expected: impl Into<String>,
        found: impl Into<String>,
    ) -> Error {
        Error::InvalidFlag {
            flag,
            expected: expected.into(),
            found: found.into(),
        }
    }
}

/// An I/O error's message without the ` (os error N)` suffix, e.g. `Connection refused`.
pub(crate) fn describe_io(err: &io::Error) -> String {
    let text = err.to_string();
    match text.rfind(" (os error ") {
        Some(at) if text.ends_with(')') => text[..at].to_owned(),
        _ => text,
    }
}

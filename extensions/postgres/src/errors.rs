//! SQL errors: a SQLSTATE, a lowercase message naming the problem, and a hint where there is a
//! fix. Raised only after every lock is released.

use pgrx::pg_sys::elog::PgLogLevel;
use pgrx::pg_sys::errcodes::PgSqlErrorCode;
use pgrx::pg_sys::panic::ErrorReport;

/// One refusal, not yet raised.
#[derive(Debug, Clone)]
pub struct SqlError {
    /// The SQLSTATE.
    pub code: PgSqlErrorCode,
    /// The message.
    pub message: String,
    /// What to do about it.
    pub hint: Option<String>,
}

impl SqlError {
    /// An error with no hint.
    pub fn new(code: PgSqlErrorCode, message: impl Into<String>) -> SqlError {
        SqlError {
            code,
            message: message.into(),
            hint: None,
        }
    }

    /// The same error with a hint.
    pub fn hint(mut self, hint: impl Into<String>) -> SqlError {
        self.hint = Some(hint.into());
        self
    }

    /// Bad input to a function (22023).
    pub fn bad_input(message: impl Into<String>) -> SqlError {
        SqlError::new(PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE, message)
    }

    /// Something this server cannot do right now (55000).
    pub fn not_now(message: impl Into<String>) -> SqlError {
        SqlError::new(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            message,
        )
    }

    /// A setting in postgresql.conf is unusable (F0000).
    pub fn config(message: impl Into<String>) -> SqlError {
        SqlError::new(PgSqlErrorCode::ERRCODE_CONFIG_FILE_ERROR, message)
    }

    /// Raises the error: the current statement fails.
    pub fn raise(self) -> ! {
        let mut report = ErrorReport::new(self.code, self.message, "snowflake");
        if let Some(hint) = self.hint {
            report = report.set_hint(hint);
        }
        report.report(PgLogLevel::ERROR);
        unreachable!("an ERROR does not return")
    }
}

/// Raises `Err`, returns `Ok`.
pub trait OrRaise<T> {
    /// The value, or the statement fails with the error.
    fn or_raise(self) -> T;
}

impl<T> OrRaise<T> for Result<T, SqlError> {
    fn or_raise(self) -> T {
        match self {
            Ok(value) => value,
            Err(e) => e.raise(),
        }
    }
}

/// A `snowflake-core` validation error as bad input.
pub fn core_input(e: snowflake_core::Error) -> SqlError {
    SqlError::bad_input(e.to_string())
}

/// Raises pgrx's own errors (a missing composite type, a bad column) as SQL errors.
pub trait OrRaisePgrx<T> {
    /// The value, or the statement fails naming the error.
    fn or_raise_pgrx(self) -> T;
}

impl<T, E: std::fmt::Display> OrRaisePgrx<T> for Result<T, E> {
    fn or_raise_pgrx(self) -> T {
        match self {
            Ok(v) => v,
            Err(e) => SqlError::not_now(format!("snowflake: {e}")).raise(),
        }
    }
}

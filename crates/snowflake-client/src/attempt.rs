//! One attempt at one node: why it failed, in words, and how long the node asked to be left
//! alone.

use snowflake_core::{Layout, SnowflakeId};
use std::time::Duration;

/// Why one attempt at one node failed.
pub(crate) enum Failure {
    /// The call's status.
    Status(tonic::Status),
    /// An answer the client cannot use (an ID outside the layout, another layout).
    Invalid(String),
}

/// IDs as a node sent them, checked against its layout (see [`crate::layout::checked_ids`]).
pub(crate) fn checked(raw: Vec<i64>, layout: &Layout) -> Result<(Vec<SnowflakeId>, u64), String> {
    let ids = crate::layout::checked_ids(&raw, layout)?;
    let n = ids.len() as u64;
    Ok((ids, n))
}

pub(crate) fn no_answer(deadline: Duration) -> String {
    format!("no answer within {} ms", deadline.as_millis())
}

/// A failed call's status as one line.
pub(crate) fn describe(status: &tonic::Status) -> String {
    let mut line = format!("{:?}", status.code());
    if !status.message().is_empty() {
        line.push_str(": ");
        line.push_str(status.message());
    }
    // A transport failure's causes ("tcp connect error" says little; "Connection refused"
    // says what to do).
    let mut source = std::error::Error::source(status);
    let mut depth = 0;
    while let Some(cause) = source {
        let text = cause.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = cause.source();
        depth += 1;
        if depth == 8 {
            break;
        }
    }
    line
}

/// The node's `retry-after` (whole seconds), if it sent one.
pub(crate) fn retry_after(status: &tonic::Status) -> Option<Duration> {
    let value = status.metadata().get("retry-after")?.to_str().ok()?;
    value
        .trim()
        .parse::<u64>()
        .ok()
        .map(|s| Duration::from_secs(s.min(3600)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_and_status_lines() {
        let mut status = tonic::Status::unavailable("not ready: waiting for the mark");
        assert_eq!(
            describe(&status),
            "Unavailable: not ready: waiting for the mark"
        );
        assert_eq!(retry_after(&status), None);
        status
            .metadata_mut()
            .insert("retry-after", "2".parse().unwrap());
        assert_eq!(retry_after(&status), Some(Duration::from_secs(2)));
        assert_eq!(describe(&tonic::Status::cancelled("")), "Cancelled");
        assert!(checked(vec![1, 2], &Layout::TWITTER).is_ok());
        assert!(
            checked(vec![5, -1], &Layout::TWITTER)
                .unwrap_err()
                .contains("invalid ID -1")
        );
    }
}

//! Per-connection progress deadlines: a connection that makes no progress for its limit (sends
//! nothing, or takes none of a reply) is ended, so that it cannot hold a connection slot for
//! ever.
//!
//! One timer per connection, moved forward only when it fires early: the busy path reads the
//! clock instead of registering a timer per read and per write. Doors that read and write bytes
//! themselves (Thrift, RESP) use it; HTTP's deadlines are hyper's (the header-read timeout, set
//! to the same limit), and gRPC's are its HTTP/2 connection's (idle calls, stalled streams,
//! unanswered pings).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

/// The progress deadline of one connection.
#[derive(Debug)]
pub struct Progress {
    /// How long the connection may make no progress.
    limit: Duration,
    /// When it last moved: an operation run [`Progress::within`] completed, or
    /// [`Progress::moved`] said so.
    last: Instant,
    /// Due at `last + limit`, or earlier (then moved forward when it fires).
    timer: Pin<Box<tokio::time::Sleep>>,
}

impl Progress {
    /// A deadline `limit` from now.
    pub fn new(limit: Duration) -> Progress {
        let now = Instant::now();
        Progress {
            limit,
            last: now,
            timer: Box::pin(tokio::time::sleep_until(now + limit)),
        }
    }

    /// When the connection last moved.
    pub fn last(&self) -> Instant {
        self.last
    }

    /// The connection moved now: its deadline is the limit from now.
    pub fn moved(&mut self) {
        self.last = Instant::now();
    }

    /// Runs `io` until it completes (`Some`, and the connection moved) or the connection has
    /// made no progress for the limit (`None`).
    pub async fn within<T>(&mut self, io: impl Future<Output = T>) -> Option<T> {
        tokio::pin!(io);
        loop {
            tokio::select! {
                biased;
                done = &mut io => {
                    self.last = Instant::now();
                    return Some(done);
                }
                () = &mut self.timer => {
                    let due = self.last + self.limit;
                    if Instant::now() >= due {
                        return None;
                    }
                    self.timer.as_mut().reset(due);
                }
            }
        }
    }

    /// Reads what `stream` has into `input`; false when the peer left, failed, or sent nothing
    /// for the limit.
    pub async fn read<S: AsyncRead + Unpin>(
        &mut self,
        stream: &mut S,
        input: &mut Vec<u8>,
    ) -> bool {
        matches!(self.within(stream.read_buf(input)).await, Some(Ok(n)) if n > 0)
    }

    /// Writes all of `out` (and clears it); false when the connection is done for: the peer
    /// failed, or took nothing of it for the limit (counted from the start of the write).
    pub async fn write<S: AsyncWrite + Unpin>(
        &mut self,
        stream: &mut S,
        out: &mut Vec<u8>,
    ) -> bool {
        self.moved();
        // `flush` too: over TLS, records can stay in the session's buffer after `write_all`.
        let written = async {
            stream.write_all(out).await?;
            stream.flush().await
        };
        let ok = matches!(self.within(written).await, Some(Ok(())));
        out.clear();
        ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn progress_moves_the_deadline_and_none_ends_it() {
        let mut progress = Progress::new(Duration::from_millis(100));
        // Work that completes in time moves the deadline, however many limits that adds up to.
        for _ in 0..5 {
            let done = progress
                .within(tokio::time::sleep(Duration::from_millis(80)))
                .await;
            assert!(done.is_some());
        }
        // Nothing for the limit: ended, at the limit and not before.
        let started = tokio::time::Instant::now();
        let never = progress.within(std::future::pending::<()>()).await;
        assert!(never.is_none());
        assert_eq!(started.elapsed(), Duration::from_millis(100));
        // `moved` restarts the limit.
        tokio::time::sleep(Duration::from_millis(90)).await;
        progress.moved();
        let started = tokio::time::Instant::now();
        assert!(
            progress
                .within(std::future::pending::<()>())
                .await
                .is_none()
        );
        assert_eq!(started.elapsed(), Duration::from_millis(100));
    }
}

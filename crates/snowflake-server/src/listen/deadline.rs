//! Per-connection progress deadlines: a connection that makes no progress for its limit (sends
//! nothing, or takes none of a reply) is ended, so that it cannot hold a connection slot for
//! ever.
//!
//! One timer per connection, moved forward only when it fires early: the busy path reads the
//! clock instead of registering a timer per read and per write. Two uses:
//! - [`WriteDeadline`], under every door (below TLS): a write the peer takes nothing of for the
//!   idle timeout fails, which ends the connection, whatever the protocol above is doing (hyper
//!   has no write timeout of its own; an HTTP/2 connection's writes; a reply being written).
//!   It costs nothing while writes go through: the clock is read only when one would block.
//! - [`Progress::read`] and [`Progress::write`], for code that reads and writes bytes itself
//!   (Thrift, RESP, HTTP's `/v1/id` loop): their idle deadlines between requests and within
//!   one. The rest of HTTP's are hyper's (the header-read timeout, set to the same limit), and
//!   gRPC's are its HTTP/2 connection's (idle calls, stalled streams, unanswered pings).

use std::future::Future;
use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
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

    /// The connection last moved at `at`, however much it did since: what is under way (a
    /// request that started arriving then) is due the limit after it.
    pub fn since(&mut self, at: Instant) {
        self.last = at;
        let due = at + self.limit;
        // The timer may only be early (it is moved forward when it fires), never late.
        if self.timer.deadline() > due {
            self.timer.as_mut().reset(due);
        }
    }

    /// Ready once the connection has made no progress for the limit (since [`Progress::last`]);
    /// until then, `cx` is woken when that may be so.
    pub fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            ready!(self.timer.as_mut().poll(cx));
            let due = self.last + self.limit;
            if Instant::now() >= due {
                return Poll::Ready(());
            }
            self.timer.as_mut().reset(due);
        }
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

/// A byte stream whose writes fail (`TimedOut`) once one has been blocked, the peer taking
/// none of it, for the limit: a connection that reads nothing of its replies is ended instead of
/// holding its slot for ever. Reads, and writes that go through, pass straight on.
#[derive(Debug)]
pub struct WriteDeadline<S> {
    io: S,
    limit: Duration,
    /// Made at the first write that blocks (most connections never have one).
    progress: Option<Progress>,
    /// A write is blocked: since [`Progress::last`].
    blocked: bool,
}

impl<S> WriteDeadline<S> {
    /// `io`, whose writes may be blocked for at most `limit`.
    pub fn new(io: S, limit: Duration) -> WriteDeadline<S> {
        WriteDeadline {
            io,
            limit,
            progress: None,
            blocked: false,
        }
    }

    /// What a write that went through (or failed) leaves: not blocked.
    fn done<T>(&mut self, result: Poll<std::io::Result<T>>) -> Poll<std::io::Result<T>> {
        self.blocked = false;
        result
    }

    /// A write is blocked: pending until the limit since it first was, then `TimedOut`.
    fn blocked<T>(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<T>> {
        let limit = self.limit;
        let progress = self.progress.get_or_insert_with(|| Progress::new(limit));
        if !self.blocked {
            self.blocked = true;
            progress.moved();
        }
        ready!(progress.poll_expired(cx));
        Poll::Ready(Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("the peer took nothing of a reply for {limit:?} (the idle timeout)"),
        )))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteDeadline<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.io).poll_write(cx, buf) {
            Poll::Pending => this.blocked(cx),
            result => this.done(result),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.io).poll_write_vectored(cx, bufs) {
            Poll::Pending => this.blocked(cx),
            result => this.done(result),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        match Pin::new(&mut this.io).poll_flush(cx) {
            Poll::Pending => this.blocked(cx),
            result => this.done(result),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
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

    #[tokio::test(start_paused = true)]
    async fn a_blocked_write_fails_after_the_limit_and_progress_restarts_it() {
        let limit = Duration::from_millis(100);
        let (server, mut client) = tokio::io::duplex(64);
        let mut server = WriteDeadline::new(server, limit);
        // Writes that go through, however long apart.
        server.write_all(&[1; 64]).await.unwrap();
        tokio::time::sleep(limit * 3).await;
        let mut read = [0; 64];
        client.read_exact(&mut read).await.unwrap();
        // Blocked, and the peer takes a little before the limit: the write goes on.
        let started = tokio::time::Instant::now();
        let reader = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(90)).await;
            client.read_exact(&mut [0; 32]).await.unwrap();
            client
        });
        server.write_all(&[2; 96]).await.unwrap();
        assert_eq!(started.elapsed(), Duration::from_millis(90));
        let _client = reader.await.unwrap();
        // Blocked, and the peer takes nothing more: failed at the limit, not before.
        let started = tokio::time::Instant::now();
        let err = server.write_all(&[3; 64]).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), limit);
    }
}

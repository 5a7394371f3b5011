//! One gRPC connection: HTTP/2 served with the `h2` crate directly, plain `NextId` calls on the
//! fast path ([`super::next_id`]) on the connection's own task, every other call through tonic
//! ([`super::bridge`]) on a task of its own.
//!
//! tonic's own transport runs every call through hyper (a task per stream, its body plumbing)
//! and a stack of tower layers, and profiling showed that machinery to cost about a third of
//! the server's CPU for a single-ID call. Served on `h2` directly, with the same tonic services
//! behind it, the per-call cost drops to what HTTP/2 framing itself costs.
//!
//! A `NextId` on a task of its own cost a task (2.4 KB allocated, freed) and a wake-up of the
//! connection's task by the call's for every ID; answered where h2 hands it over, it costs
//! neither. One that must wait (for the rest of its message, the clock, a reservation) becomes
//! a future in the connection's [`InPlace`] set, polled alongside `accept`; whatever is left
//! of them when the connection ends is finished on a task, as their own tasks used to be.
//!
//! Connection settings follow what the tonic server was configured with: a cap on concurrent
//! streams, HTTP/2 keep-alive pings with a timeout, a request timeout or the client's shorter
//! `grpc-timeout` (`CANCELLED`, "Timeout expired", as tonic's), and a graceful shutdown (GOAWAY,
//! then in-flight calls finish).
//!
//! No connection holds a slot of the connection cap for ever without making progress, whatever
//! the client does (the idle timeout is `--idle-timeout-ms`, as for HTTP keep-alive and Thrift):
//! - it does not send the HTTP/2 preface: closed after the handshake timeout (the idle timeout,
//!   at most 10 s, as for a TLS handshake);
//! - it does not answer PINGs: closed after the keep-alive interval plus its timeout;
//! - it answers PINGs but has no call open for the idle timeout: GOAWAY, then closed;
//! - it has a call open but grants it no flow-control window for the idle timeout: that stream
//!   is reset (`CANCEL`, see [`super::bridge`]), after which the connection is idle as above;
//! - it sends a call's headers but not its message, or trickles the message in: the call is
//!   answered (`CANCELLED`) or its body fails once the idle timeout (or the shorter request
//!   timeout) from its headers has passed;
//! - it grants no window to the answers of calls that are done (the fast `NextId`'s): h2 holds
//!   those streams, so the connection counts as idle, and is closed after its goodbye (the
//!   idle timeout, at most the keep-alive timeout) even though those streams never end;
//! - it opens more than `--grpc-max-concurrent-streams` calls at once: the ones over are
//!   refused (`REFUSED_STREAM`).

use super::bridge::{H2Body, bridge};
use super::next_id::{self, Call, Later, is_plain_next_id};
use super::shared::Shared;
use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use h2::server::SendResponse;
use h2::{Ping, RecvStream};
use http::{HeaderMap, Request};
use std::future::{Future, poll_fn};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;

/// Headers (names and values together) one request may carry.
const MAX_HEADER_LIST_BYTES: u32 = 16 * 1024;

/// How many times per idle timeout a connection checks whether it is idle: it is closed after
/// between 1 and 1 + 1/IDLE_CHECKS idle timeouts with no call open.
const IDLE_CHECKS: u32 = 4;

/// Whether a connection has had any call open lately; shared with the tasks of its calls.
#[derive(Debug, Default)]
struct Activity {
    /// Calls whose task is running.
    open: AtomicUsize,
    /// Set when a call starts or ends; cleared by each idle check.
    touched: AtomicBool,
}

impl Activity {
    /// Notes a call that started and ended at once.
    fn touch(&self) {
        self.touched.store(true, Ordering::Relaxed);
    }

    /// Counts a call as open until the returned guard is dropped.
    fn call(self: &Arc<Self>) -> CallGuard {
        self.open.fetch_add(1, Ordering::Relaxed);
        self.touched.store(true, Ordering::Relaxed);
        CallGuard(Arc::clone(self))
    }

    /// Whether no call was open at any time since the last check.
    fn idle_since_last_check(&self) -> bool {
        let touched = self.touched.swap(false, Ordering::Relaxed);
        !touched && self.open.load(Ordering::Relaxed) == 0
    }
}

/// One open call of a connection's [`Activity`].
#[derive(Debug)]
struct CallGuard(Arc<Activity>);

impl Drop for CallGuard {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
        self.0.touched.store(true, Ordering::Relaxed);
    }
}

/// The `NextId` calls of a connection that had to wait, polled by the connection's task; a
/// call's output is the call itself when it turned out to be tonic's (see
/// [`next_id::answer_later`]). Those left when the connection ends (dropped) are finished on a
/// task of their own: they are answered, or find the stream gone, and are counted, as a call on
/// a task of its own would have been.
struct InPlace<F>
where
    F: Future<Output = (Option<Call>, CallGuard)> + Send + 'static,
{
    calls: FuturesUnordered<F>,
    shared: Arc<Shared>,
}

/// Hands a finished in-place call that turned out to be tonic's to a task of its own.
fn finished(shared: &Arc<Shared>, (rest, guard): (Option<Call>, CallGuard)) {
    if let Some(call) = rest {
        let bridged = call.into_bridged(shared.idle_timeout);
        let shared = Arc::clone(shared);
        tokio::spawn(async move {
            bridged.answer(&shared).await;
            drop(guard);
        });
    }
}

impl<F> Drop for InPlace<F>
where
    F: Future<Output = (Option<Call>, CallGuard)> + Send + 'static,
{
    fn drop(&mut self) {
        if self.calls.is_empty() {
            return;
        }
        let mut calls = std::mem::take(&mut self.calls);
        let shared = Arc::clone(&self.shared);
        tokio::spawn(async move {
            while let Some(done) = calls.next().await {
                finished(&shared, done);
            }
        });
    }
}

/// Serves one connection until the client closes it, a keep-alive ping goes unanswered, it has
/// had no call open for the idle timeout, or (after `shutdown` flips) its in-flight calls are
/// done.
pub(super) async fn serve_connection<T>(
    io: T,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) where
    T: AsyncRead + AsyncWrite + Unpin,
{
    let mut builder = h2::server::Builder::new();
    builder
        .max_concurrent_streams(shared.max_streams)
        .max_header_list_size(MAX_HEADER_LIST_BYTES);
    let handshake = builder.handshake::<_, Bytes>(io);
    let mut connection = match tokio::time::timeout(shared.handshake_timeout, handshake).await {
        Ok(Ok(connection)) => connection,
        Ok(Err(err)) => {
            tracing::debug!(error = %err, "grpc: HTTP/2 handshake failed");
            return;
        }
        Err(_) => {
            let within = shared.handshake_timeout;
            tracing::debug!("grpc: no HTTP/2 handshake within {within:?}");
            return;
        }
    };
    let keepalive = keep_alive(
        connection.ping_pong(),
        shared.keepalive_interval,
        shared.keepalive_timeout,
    );
    tokio::pin!(keepalive);
    let activity = Arc::new(Activity::default());
    let check_every = shared.idle_timeout / IDLE_CHECKS;
    let mut idle_check =
        tokio::time::interval_at(tokio::time::Instant::now() + check_every, check_every);
    idle_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut idle_checks = 0;
    let mut draining = false;
    // Set when the connection is closed for idleness: how long the goodbye may take, and when
    // it must be over, whatever is left (streams whose answers the client never takes: their
    // calls are done, so the connection counts as idle, but h2 holds them until it is gone).
    let mut close_within = None;
    let mut close_by = None;
    let mut in_place = InPlace {
        calls: FuturesUnordered::new(),
        shared: Arc::clone(&shared),
    };
    loop {
        tokio::select! {
            accepted = connection.accept() => match accepted {
                Some(Ok((request, respond))) => {
                    let started = tokio::time::Instant::now();
                    let timeout = call_timeout(&shared, request.headers());
                    if !is_plain_next_id(&request) {
                        let call = activity.call();
                        let shared = Arc::clone(&shared);
                        tokio::spawn(async move {
                            bridged(&shared, started, timeout, request, respond).await;
                            drop(call);
                        });
                        continue;
                    }
                    let call = Call::new(started, timeout, request, respond);
                    match next_id::answer_now(&shared, call) {
                        Later::Done => activity.touch(),
                        later => {
                            let guard = activity.call();
                            let shared = Arc::clone(&shared);
                            in_place.calls.push(async move {
                                (next_id::answer_later(&shared, later).await, guard)
                            });
                        }
                    }
                }
                Some(Err(err)) => {
                    tracing::debug!(error = %err, "grpc: connection error");
                    return;
                }
                None => break,
            },
            _ = shutdown.wait_for(|stop| *stop), if !draining => {
                // GOAWAY: no new calls; the calls in flight go on.
                connection.graceful_shutdown();
                draining = true;
            }
            _ = idle_check.tick(), if !draining => {
                if !activity.idle_since_last_check() {
                    idle_checks = 0;
                    continue;
                }
                idle_checks += 1;
                if idle_checks >= IDLE_CHECKS {
                    tracing::debug!("grpc: no call for the idle timeout; closing the connection");
                    // GOAWAY; no call is open, so h2 closes the connection once the client
                    // has seen it (or the keep-alive timeout gives up on the client).
                    connection.graceful_shutdown();
                    draining = true;
                    let limit = shared.keepalive_timeout.min(shared.idle_timeout);
                    close_within = Some(limit);
                    close_by = Some(tokio::time::Instant::now() + limit);
                }
            }
            () = until(close_by), if close_by.is_some() => {
                tracing::debug!("grpc: streams left unread after the goodbye; closing the connection");
                return;
            }
            Some(done) = in_place.calls.next(), if !in_place.calls.is_empty() => {
                finished(&shared, done);
            }
            () = &mut keepalive => {
                tracing::debug!("grpc: keep-alive ping unanswered; closing the connection");
                return;
            }
        }
    }
    // No more calls: drive the connection until the last responses are written (after a
    // close for idleness, only the GOAWAY and anything h2 still buffers, for a bounded time).
    let goodbye = async {
        match close_within {
            Some(limit) => tokio::time::sleep(limit).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        closed = poll_fn(|cx| connection.poll_closed(cx)) => {
            if let Err(err) = closed {
                tracing::debug!(error = %err, "grpc: connection error while closing");
            }
        }
        () = &mut keepalive => {}
        () = goodbye => {}
    }
}

/// Completes at `at`; never when `None`.
async fn until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Pings the client every `interval`; completes only when an answer takes longer than
/// `timeout`.
async fn keep_alive(pinger: Option<h2::PingPong>, interval: Duration, timeout: Duration) {
    let Some(mut pinger) = pinger else {
        return std::future::pending().await;
    };
    loop {
        tokio::time::sleep(interval).await;
        match tokio::time::timeout(timeout, pinger.ping(Ping::opaque())).await {
            Ok(Ok(_pong)) => {}
            // The connection is closing anyway; the connection loop notices.
            Ok(Err(_)) => return std::future::pending().await,
            Err(_elapsed) => return,
        }
    }
}

/// How long a call may take: as tonic's server, the shorter of our request timeout and the
/// client's `grpc-timeout`.
fn call_timeout(shared: &Shared, headers: &HeaderMap) -> Duration {
    grpc_timeout(headers).map_or(shared.request_timeout, |client| {
        client.min(shared.request_timeout)
    })
}

/// A call that is not a plain `NextId`, through tonic.
async fn bridged(
    shared: &Shared,
    started: tokio::time::Instant,
    timeout: Duration,
    request: Request<RecvStream>,
    respond: SendResponse<Bytes>,
) {
    let due = started + shared.idle_timeout;
    let request = request.map(|body| H2Body::new(body, due));
    // Boxed: tonic's futures are large, and every spawned call would otherwise copy room for
    // them.
    Box::pin(bridge(shared, started, timeout, request, respond)).await;
}

/// The client's deadline from a `grpc-timeout` header (`1S`, `250m`, ...: at most 8 digits and
/// a unit of H, M, S, m, u or n); `None` when absent or malformed (then only ours applies, as
/// with tonic).
fn grpc_timeout(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = value.split_at_checked(value.len().checked_sub(1)?)?;
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let amount: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(amount * 3600),
        "M" => Duration::from_secs(amount * 60),
        "S" => Duration::from_secs(amount),
        "m" => Duration::from_millis(amount),
        "u" => Duration::from_micros(amount),
        "n" => Duration::from_nanos(amount),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn grpc_timeout_headers_in_every_unit_and_malformed_ones() {
        let parse = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert("grpc-timeout", HeaderValue::from_str(value).unwrap());
            grpc_timeout(&headers)
        };
        assert_eq!(parse("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(parse("3M"), Some(Duration::from_secs(180)));
        assert_eq!(parse("1S"), Some(Duration::from_secs(1)));
        assert_eq!(parse("250m"), Some(Duration::from_millis(250)));
        assert_eq!(parse("99999999u"), Some(Duration::from_micros(99_999_999)));
        assert_eq!(parse("5n"), Some(Duration::from_nanos(5)));
        for bad in ["", "S", "1", "123456789S", "1x", "-1S", "1.5S", "1 S"] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
        assert_eq!(grpc_timeout(&HeaderMap::new()), None);
    }
}

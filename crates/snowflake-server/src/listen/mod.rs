//! The listener every front door shares (HTTP, admin, gRPC, Thrift, RESP): accepting, the
//! connection cap and its over-cap answer, the TLS handshake, accept-error backoff, and the
//! drain on shutdown; one of each, for every door.
//!
//! A protocol module implements [`Door`] and hands its listener to [`serve`]. It receives each
//! connection accepted (with `TCP_NODELAY` set) and, when the listener has TLS, handshaken, and
//! only speaks its protocol on it: what a door owns is its own framing, its own requests and the
//! deadlines that only its protocol can tell (a header, a frame, an HTTP/2 stream).
//!
//! The life of one connection, as this module runs it:
//! 1. [`accept`]: accepted, or, when accepting fails (out of file descriptors), retried after a
//!    pause instead of spinning.
//! 2. [`cap`]: given one of the listener's `--max-connections` slots, or answered the door's
//!    way over the cap ([`OverCap`]) and closed.
//! 3. Its writes get the idle timeout as a deadline ([`deadline::WriteDeadline`], below TLS):
//!    a write the peer takes nothing of for that long fails, and the door's connection ends,
//!    whatever the protocol is doing (a reply nobody reads, an HTTP/2 connection's frames).
//! 4. [`handshake`]: with TLS, the handshake, within [`Limits::handshake_timeout`]; a
//!    connection that fails it or takes longer is closed and frees its slot.
//! 5. [`Door::serve`], until the connection ends. Idle connections, and requests that do not
//!    come in time, are closed by the door's own deadlines, built on [`deadline::Progress`]
//!    where the door reads and writes bytes itself.
//! 6. On shutdown the listener closes (new connections are refused), every open connection is
//!    told through its `stop` signal and finishes what it is answering, for at most
//!    `--shutdown-timeout-ms`; whatever is left then is cut.

pub mod accept;
pub mod cap;
pub mod deadline;
pub mod handshake;

pub use cap::OverCap;

use crate::config::Config;
use crate::tls::{Alpn, Tls};
use prometheus_client::metrics::counter::Counter;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

/// A byte stream a door is handed: a TCP connection, or a TLS session over one.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send + 'static {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Io for T {}

/// A front door: the protocol spoken on a listener's connections.
pub trait Door: Send + Sync + 'static {
    /// The protocol a TLS handshake offers (ALPN), when the listener has TLS.
    const ALPN: Alpn;
    /// How a connection over the cap is answered.
    const OVER_CAP: OverCap;

    /// The listener's name in logs (`http`, `admin`, `grpc`, `thrift`, `resp`).
    fn name(&self) -> &'static str;

    /// Serves one connection until it ends: the client leaves or breaks the protocol, a
    /// deadline of the door passes, or `stop` flips and the door has finished what it was
    /// answering.
    fn serve<S: Io>(
        self: Arc<Self>,
        io: S,
        peer: SocketAddr,
        stop: watch::Receiver<bool>,
    ) -> impl Future<Output = ()> + Send;

    /// Answers a connection over the cap ([`OverCap::Answer`] only), bounded in time by
    /// [`cap`]; the connection is closed when it returns.
    fn refuse<S: Io>(self: Arc<Self>, io: S) -> impl Future<Output = ()> + Send {
        async move { drop(io) }
    }
}

/// Completes once `stop` flips to true (or its sender is gone): the service is shutting down.
pub async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

/// What bounds a listener and its connections.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// `--max-connections`: connections open at once on this listener.
    pub max_connections: usize,
    /// `--idle-timeout-ms`: how long a connection may make no progress.
    pub idle_timeout: Duration,
    /// `--shutdown-timeout-ms`: how long open connections may take to finish on shutdown.
    pub shutdown_timeout: Duration,
}

impl Limits {
    /// The longest a connection's handshakes may take (TLS, and a protocol's own greeting such
    /// as HTTP/2's preface).
    pub const MAX_HANDSHAKE: Duration = Duration::from_secs(10);

    /// The limits of `config`.
    pub fn of(config: &Config) -> Limits {
        Limits {
            max_connections: config.limits.max_connections,
            idle_timeout: config.limits.idle_timeout,
            shutdown_timeout: config.limits.shutdown_timeout,
        }
    }

    /// How long a connection's handshakes may take: the idle timeout, at most
    /// [`Limits::MAX_HANDSHAKE`]. A handshake is a few round trips; a client that takes longer
    /// holds a slot without making progress.
    pub fn handshake_timeout(&self) -> Duration {
        self.idle_timeout.min(Self::MAX_HANDSHAKE)
    }
}

/// Serves `door` on `listener` until `stop` flips to true; then closes the listener, lets
/// every open connection finish (at most [`Limits::shutdown_timeout`]), cuts the rest, and
/// returns. `rejected` counts the connections refused over the cap.
pub async fn serve<D: Door>(
    listener: TcpListener,
    door: Arc<D>,
    tls: Option<Arc<Tls>>,
    limits: Limits,
    rejected: Counter,
    mut stop: watch::Receiver<bool>,
) {
    let name = door.name();
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let refusals = cap::Refusals::new(limits);
    let mut open = JoinSet::new();
    {
        // One accept in progress across the loop's turns, so that reaping a finished
        // connection never cuts short the pause after a failed accept.
        let mut next = std::pin::pin!(accept::next(&listener, name));
        loop {
            let (stream, peer) = tokio::select! {
                accepted = next.as_mut() => {
                    next.set(accept::next(&listener, name));
                    accepted
                }
                () = stopped(&mut stop) => break,
                // Reap finished connections so the set does not grow.
                Some(_) = open.join_next(), if !open.is_empty() => continue,
            };
            let _ = stream.set_nodelay(true);
            let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
                rejected.inc();
                refusals.refuse(&door, stream, peer, tls.clone());
                continue;
            };
            let (door, tls, stop) = (Arc::clone(&door), tls.clone(), stop.clone());
            let handshake_timeout = limits.handshake_timeout();
            let stream = deadline::WriteDeadline::new(stream, limits.idle_timeout);
            open.spawn(async move {
                // The slot is the connection's until this task ends.
                let _slot = slot;
                let Some(tls) = tls else {
                    return door.serve(stream, peer, stop).await;
                };
                let handshake = handshake::accept(&tls, D::ALPN, stream, handshake_timeout);
                let mut stopping = stop.clone();
                // Shutting down: a connection still in its handshake owes nobody anything.
                let accepted = tokio::select! {
                    accepted = handshake => accepted,
                    () = stopped(&mut stopping) => return,
                };
                match accepted {
                    Ok(stream) => door.serve(stream, peer, stop).await,
                    Err(failed) => tracing::debug!(door = name, %peer, "{failed}"),
                }
            });
        }
    }
    // New connections are refused from here on, while the open ones finish.
    drop(listener);
    let drained = tokio::time::timeout(limits.shutdown_timeout, async {
        while open.join_next().await.is_some() {}
    });
    if drained.await.is_err() {
        tracing::warn!(
            door = name,
            timeout = ?limits.shutdown_timeout,
            open = open.len(),
            "connections did not finish in time; closing them"
        );
        open.abort_all();
    }
}

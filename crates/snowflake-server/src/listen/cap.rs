//! The connection cap's answer: what a connection over `--max-connections` gets.
//!
//! The cap itself is a semaphore of slots in [`super::serve`]; a connection that finds none
//! free is counted (`snowflake_connections_rejected_total`) and answered here, the door's way:
//! - [`OverCap::Close`]: closed at once. gRPC and Thrift clients have no way to read an answer
//!   before their first request, and reconnect or fail over on a closed connection.
//! - [`OverCap::Answer`]: answered by [`Door::refuse`] (HTTP: a 503 to its
//!   first request; RESP: `-ERR max number of clients reached`), after the TLS handshake when
//!   the listener has TLS. The answer is bounded: at most [`MAX_REFUSALS_IN_FLIGHT`] at once
//!   (past that, closed at once), each within [`REFUSAL_TIME`], handshake included. So a flood
//!   over the cap costs a bounded number of tasks and never holds up the accept loop.

use super::{Door, Limits, handshake};
use crate::tls::Tls;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

/// How a door answers a connection over the cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverCap {
    /// Closed at once, unanswered.
    Close,
    /// Answered by the door's [`Door::refuse`], then closed.
    Answer,
}

/// At most this many connections over the cap are answered at once; more are just closed.
pub const MAX_REFUSALS_IN_FLIGHT: usize = 64;

/// The longest an answer over the cap may take, TLS handshake included.
pub const REFUSAL_TIME: Duration = Duration::from_secs(1);

/// The answers over the cap in flight, for one listener.
#[derive(Debug)]
pub(super) struct Refusals {
    in_flight: Arc<Semaphore>,
    /// How long the TLS handshake before an answer may take.
    handshake_timeout: Duration,
}

impl Refusals {
    pub(super) fn new(limits: Limits) -> Refusals {
        Refusals {
            in_flight: Arc::new(Semaphore::new(MAX_REFUSALS_IN_FLIGHT)),
            handshake_timeout: limits.handshake_timeout().min(REFUSAL_TIME),
        }
    }

    /// Answers (or closes) `stream`, a connection over the cap, on a task of its own.
    pub(super) fn refuse<D: Door>(
        &self,
        door: &Arc<D>,
        stream: TcpStream,
        peer: SocketAddr,
        tls: Option<Arc<Tls>>,
    ) {
        let name = door.name();
        tracing::debug!(door = name, %peer, "connection refused: too many connections");
        if D::OVER_CAP == OverCap::Close {
            return;
        }
        let Ok(permit) = Arc::clone(&self.in_flight).try_acquire_owned() else {
            return;
        };
        let (door, handshake_timeout) = (Arc::clone(door), self.handshake_timeout);
        tokio::spawn(async move {
            let answer = async move {
                match tls {
                    None => door.refuse(stream).await,
                    Some(tls) => {
                        match handshake::accept(&tls, D::ALPN, stream, handshake_timeout).await {
                            Ok(stream) => door.refuse(stream).await,
                            Err(failed) => tracing::debug!(door = name, %peer, "{failed}"),
                        }
                    }
                }
            };
            let _ = tokio::time::timeout(REFUSAL_TIME, answer).await;
            drop(permit);
        });
    }
}

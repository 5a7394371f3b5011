//! Accepting connections, and backing off when accepting fails.
//!
//! `accept` fails when the process is out of file descriptors (`EMFILE`), the system is
//! (`ENFILE`), or memory for a socket is short. The connection that could not be taken stays in
//! the kernel's queue, so retrying at once fails again at once: a loop that does would burn a
//! core and flood the log while nothing gets better. Each failure is logged and followed by a
//! pause of [`BACKOFF`], during which connections that end free their descriptors.

use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};

/// The pause after a failed accept.
pub const BACKOFF: Duration = Duration::from_millis(50);

/// The next connection of `listener` (named `door` in logs), however many accepts fail first.
pub async fn next(listener: &TcpListener, door: &'static str) -> (TcpStream, SocketAddr) {
    loop {
        match listener.accept().await {
            Ok(accepted) => return accepted,
            Err(err) => {
                tracing::warn!(door, error = %err, "accept failed; retrying in {BACKOFF:?}");
                tokio::time::sleep(BACKOFF).await;
            }
        }
    }
}

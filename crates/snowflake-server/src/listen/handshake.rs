//! The TLS handshake: one path for every listener with TLS (HTTP, gRPC, RESP), with the
//! current configuration of the reloadable [`Tls`] (a renewed certificate is used from the next
//! handshake on), bounded in time.

use crate::tls::{Alpn, Tls};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::server::TlsStream;

/// Why a handshake gave no connection.
#[derive(Debug, thiserror::Error)]
pub enum Failed {
    /// The client broke it off or was refused (no or an untrusted client certificate, no
    /// common protocol version, plaintext sent to a TLS port).
    #[error("TLS handshake failed: {0}")]
    Refused(std::io::Error),
    /// It was not done in time.
    #[error("TLS handshake not done within {0:?}")]
    TimedOut(Duration),
}

/// The TLS session on `stream`, offering `alpn`, once the handshake is done within `within`.
pub async fn accept<S: AsyncRead + AsyncWrite + Unpin>(
    tls: &Tls,
    alpn: Alpn,
    stream: S,
    within: Duration,
) -> Result<TlsStream<S>, Failed> {
    match tokio::time::timeout(within, tls.acceptor(alpn).accept(stream)).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(err)) => Err(Failed::Refused(err)),
        Err(_elapsed) => Err(Failed::TimedOut(within)),
    }
}

//! A zero-work gRPC server on the `h2` crate, the library our gRPC door is built on: every
//! request is answered with a fixed `NextIdResponse` frame (status 200, `content-type:
//! application/grpc`, one DATA frame, `grpc-status: 0` trailers: the bytes our `NextId` sends)
//! on the connection's own task, one tokio current-thread runtime, with no generator, no
//! metrics, no timers and no limits. Beside nghttpd it shows what HTTP/2 costs through `h2`
//! itself: the part of our door's gap to nghttpd that is the library's, not ours. The harness
//! runs it (`snowflake-compare zero-work-h2 ADDR`, a hidden subcommand) in every service round,
//! as does `scripts/bench-grpc-ceiling`; never part of the product.

use anyhow::{Context, Result};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response};

/// Serves on `addr` until killed.
pub fn serve(addr: &str) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    // NextIdResponse { id: 1999999999999999999 } as one uncompressed gRPC frame, as the
    // harness's nghttpd serves it.
    let frame = Bytes::from(crate::tools::next_id_response_frame(
        1_999_999_999_999_999_999,
    ));
    let mut headers = HeaderMap::new();
    headers.insert("content-type", HeaderValue::from_static("application/grpc"));
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from_static("0"));
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("zero-work-h2: binding {addr}"))?;
        loop {
            let (stream, _) = listener.accept().await?;
            stream.set_nodelay(true)?;
            let (frame, headers, trailers) = (frame.clone(), headers.clone(), trailers.clone());
            tokio::spawn(async move {
                let Ok(mut connection) = h2::server::handshake(stream).await else {
                    return;
                };
                while let Some(Ok((request, mut respond))) = connection.accept().await {
                    // The request's message is not read: its stream is dropped with it.
                    drop(request);
                    let mut response = Response::new(());
                    *response.headers_mut() = headers.clone();
                    let Ok(mut send) = respond.send_response(response, false) else {
                        continue;
                    };
                    let _ = send.send_data(frame.clone(), false);
                    let _ = send.send_trailers(trailers.clone());
                }
            });
        }
    })
}

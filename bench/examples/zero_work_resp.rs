//! A zero-work RESP server, the ceiling our RESP front door is measured against: it answers
//! every command (counted by its `*` array headers) with an integer from a counter, on one
//! tokio current-thread runtime, with no parsing, no generator, no metrics. Used by
//! `scripts/bench-resp-ceiling`; never part of the product.
//!
//!     cargo run --release -p snowflake-compare --example zero_work_resp -- 127.0.0.1:6390

use std::sync::atomic::{AtomicI64, Ordering};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

static NEXT: AtomicI64 = AtomicI64::new(1);

fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:6390".to_owned());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&addr).await?;
        loop {
            let (mut stream, _) = listener.accept().await?;
            stream.set_nodelay(true)?;
            tokio::spawn(async move {
                let mut input = vec![0u8; 16 * 1024];
                let mut out = Vec::with_capacity(16 * 1024);
                let mut digits = itoa_buffer();
                loop {
                    let n = match stream.read(&mut input).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    let commands = input[..n].iter().filter(|&&b| b == b'*').count().max(1);
                    out.clear();
                    for _ in 0..commands {
                        out.push(b':');
                        out.extend_from_slice(format_i64(
                            &mut digits,
                            NEXT.fetch_add(1, Ordering::Relaxed),
                        ));
                        out.extend_from_slice(b"\r\n");
                    }
                    if stream.write_all(&out).await.is_err() {
                        return;
                    }
                }
            });
        }
    })
}

fn itoa_buffer() -> [u8; 20] {
    [0; 20]
}

/// `value`'s decimal digits in `buf`.
fn format_i64(buf: &mut [u8; 20], mut value: i64) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + u8::try_from(value % 10).unwrap_or(0);
        value /= 10;
        if value == 0 {
            return &buf[i..];
        }
    }
}

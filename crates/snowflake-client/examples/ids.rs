//! Prints IDs from running services, with failover and (optionally) prefetch, and the client's
//! counters at the end.
//!
//! ```sh
//! cargo run --release -p snowflake-cli -- serve &          # a node, gRPC on 127.0.0.1:50051
//! cargo run -p snowflake-client --example ids -- 127.0.0.1:50051 10
//! cargo run -p snowflake-client --example ids -- 127.0.0.1:50051,127.0.0.1:50052 1000000 prefetch
//! ```

use snowflake_client::{ClientBuilder, Event, Prefetch};
use std::io::Write;
use std::time::{Duration, Instant};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let endpoints = args.next().unwrap_or_else(|| "127.0.0.1:50051".into());
    let count: u64 = args.next().as_deref().unwrap_or("10").parse()?;
    let prefetch = args.next().as_deref() == Some("prefetch");

    let mut builder = ClientBuilder::new(endpoints.split(','))
        .call_timeout(Duration::from_millis(500))
        // Failovers and discards, not every fetch.
        .on_event(|event| {
            if !matches!(event, Event::Fetched { .. }) {
                eprintln!("event: {event:?}");
            }
        });
    if prefetch {
        builder = builder.prefetch(Prefetch::new().max_age(Duration::from_secs(1)));
    }
    let client = builder.build()?;
    let started = Instant::now();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for _ in 0..count {
        writeln!(out, "{}", client.next_id().await?)?;
    }
    out.flush()?;
    let took = started.elapsed();
    eprintln!(
        "{count} IDs in {took:?} ({:.0} IDs/s); {:?}",
        count as f64 / took.as_secs_f64(),
        client.stats()
    );
    client.close();
    Ok(())
}

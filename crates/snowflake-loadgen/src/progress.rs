//! The once-a-second progress line on stderr.

use crate::phase::Phase;
use crate::stats::Live;
use std::io::{self, Write};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior};

/// How often the line is redrawn.
const INTERVAL: Duration = Duration::from_secs(1);

/// Redraws a single `\r`-updated line (elapsed, requests/s, ids/s, errors) every second until
/// the run stops, then blanks it.
pub(crate) async fn run(live: Arc<Live>, mut phase: watch::Receiver<Phase>, warmup: Duration) {
    let mut ticks = tokio::time::interval_at(Instant::now() + INTERVAL, INTERVAL);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let started = Instant::now();
    // The measurement starts when the warm-up ends (close enough for a progress line).
    let measure_started = started + warmup;
    let mut last = (Instant::now(), 0_u64, 0_u64);
    let mut width = 0;
    loop {
        tokio::select! {
            changed = phase.wait_for(|phase| *phase == Phase::Stop) => {
                let _ = changed;
                break;
            }
            _ = ticks.tick() => {}
        }
        let now = Instant::now();
        let line = match *phase.borrow() {
            Phase::Warmup => {
                last = (now, 0, 0);
                format!(
                    "warming up {}/{} s",
                    now.duration_since(started).as_secs(),
                    warmup.as_secs_f64().ceil()
                )
            }
            Phase::Measure => {
                let (ok, ids, errors) = live.read();
                let secs = now.duration_since(last.0).as_secs_f64().max(1e-3);
                let line = format!(
                    "{:>5} s  {:>10.0} requests/s  {:>12.0} ids/s  {} errors",
                    now.saturating_duration_since(measure_started).as_secs(),
                    ok.saturating_sub(last.1) as f64 / secs,
                    ids.saturating_sub(last.2) as f64 / secs,
                    errors
                );
                last = (now, ok, ids);
                line
            }
            Phase::Stop => break,
        };
        width = width.max(line.len());
        draw(&format!("\r{line:<width$}"));
    }
    if width > 0 {
        draw(&format!("\r{:width$}\r", ""));
    }
}

/// Writes to stderr; a progress line that cannot be written is simply not shown.
fn draw(text: &str) {
    let mut stderr = io::stderr().lock();
    let _ = stderr.write_all(text.as_bytes());
    let _ = stderr.flush();
}

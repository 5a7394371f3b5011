//! `Phase`: where a run is (warm-up, measurement, stop); the engine moves it on, every
//! connection task and the progress line watch it.

/// Where the run is; every connection task watches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Requests are sent but not recorded.
    Warmup,
    /// Requests are recorded (and counted against the budget).
    Measure,
    /// Tasks abandon what they are doing and return their stats.
    Stop,
}

//! The one seam through which time enters the generator.

use crate::sync::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
#[cfg(not(unix))]
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of wall-clock time in Unix milliseconds.
///
/// The generator reads "now" only through this trait, so tests drive time by hand with
/// [`ManualClock`] and production reads [`SystemClock`].
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current time in Unix milliseconds.
    fn now_ms(&self) -> u64;

    /// Blocks for about `ms` milliseconds; the generator calls it only to wait out a small clock
    /// regression when configured to. A manual clock may simply advance itself.
    fn sleep_ms(&self, ms: u64) {
        std::thread::sleep(Duration::from_millis(ms));
    }

    /// How long until [`Clock::now_ms`] reads the next millisecond, for a caller that sleeps to
    /// it instead of polling; `None` when the clock cannot tell (a manual clock moves only when
    /// told to). Only a hint for when to look again: nothing is issued on its word.
    fn until_next_ms(&self) -> Option<Duration> {
        None
    }
}

/// The system's real-time clock, `clock_gettime(CLOCK_REALTIME)`.
///
/// Read on every ID: a cheaper source (a coarse clock, a background ticker) can lag the wall clock
/// or skip milliseconds, and this one cannot. On Unix it calls the C library's `clock_gettime`
/// directly (through `rustix` with its libc backend): the same vDSO read as `SystemTime::now`,
/// without the ~11 ns `SystemTime::duration_since` adds, and still interposable by
/// `LD_PRELOAD` tools such as libfaketime, which tests use to move the clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[cfg(unix)]
    #[inline]
    fn now_ms(&self) -> u64 {
        let now = rustix::time::clock_gettime(rustix::time::ClockId::Realtime);
        match u64::try_from(now.tv_sec) {
            // tv_nsec is always in 0..1_000_000_000.
            Ok(secs) => secs * 1000 + (now.tv_nsec as u64) / 1_000_000,
            // A clock before 1970 is before every epoch: the generator refuses it.
            Err(_) => 0,
        }
    }

    #[cfg(not(unix))]
    #[inline]
    fn now_ms(&self) -> u64 {
        match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(d) => d.as_secs() * 1000 + u64::from(d.subsec_millis()),
            // A clock before 1970 is before every epoch: the generator refuses it.
            Err(_) => 0,
        }
    }

    #[cfg(unix)]
    fn until_next_ms(&self) -> Option<Duration> {
        let now = rustix::time::clock_gettime(rustix::time::ClockId::Realtime);
        // tv_nsec is always in 0..1_000_000_000.
        let into_ms = (now.tv_nsec as u64) % 1_000_000;
        Some(Duration::from_nanos(1_000_000 - into_ms))
    }

    #[cfg(not(unix))]
    fn until_next_ms(&self) -> Option<Duration> {
        let into_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .ok()?
            .subsec_nanos()
            % 1_000_000;
        Some(Duration::from_nanos(u64::from(1_000_000 - into_ms)))
    }
}

/// A clock that only moves when told to; cheap to clone, all clones share one time.
///
/// ```
/// use snowflake_core::{Clock, ManualClock};
/// let clock = ManualClock::new(1_700_000_000_000);
/// let handle = clock.clone();
/// handle.advance_ms(5);
/// assert_eq!(clock.now_ms(), 1_700_000_000_005);
/// handle.set_ms(1_700_000_000_000);
/// assert_eq!(clock.now_ms(), 1_700_000_000_000);
/// ```
#[derive(Debug, Clone)]
pub struct ManualClock {
    now_ms: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock reading `now_ms` until changed.
    pub fn new(now_ms: u64) -> ManualClock {
        ManualClock {
            now_ms: Arc::new(AtomicU64::new(now_ms)),
        }
    }

    /// Sets the time (it may go backwards).
    pub fn set_ms(&self, now_ms: u64) {
        self.now_ms.store(now_ms, Ordering::SeqCst);
    }

    /// Moves the time forward by `ms`.
    pub fn advance_ms(&self, ms: u64) {
        self.now_ms.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now_ms.load(Ordering::SeqCst)
    }

    /// Sleeping on a manual clock advances it: simulated time passes.
    fn sleep_ms(&self, ms: u64) {
        self.advance_ms(ms);
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    fn now_ms(&self) -> u64 {
        (**self).now_ms()
    }
    fn sleep_ms(&self, ms: u64) {
        (**self).sleep_ms(ms);
    }
    fn until_next_ms(&self) -> Option<Duration> {
        (**self).until_next_ms()
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now_ms(&self) -> u64 {
        (**self).now_ms()
    }
    fn sleep_ms(&self, ms: u64) {
        (**self).sleep_ms(ms);
    }
    fn until_next_ms(&self) -> Option<Duration> {
        (**self).until_next_ms()
    }
}

impl<C: Clock + ?Sized> Clock for Box<C> {
    fn now_ms(&self) -> u64 {
        (**self).now_ms()
    }
    fn sleep_ms(&self, ms: u64) {
        (**self).sleep_ms(ms);
    }
    fn until_next_ms(&self) -> Option<Duration> {
        (**self).until_next_ms()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_system_clock_tells_how_far_the_next_millisecond_is_and_a_manual_one_does_not() {
        for _ in 0..1000 {
            let left = SystemClock
                .until_next_ms()
                .expect("the system clock can tell");
            assert!(
                left > Duration::ZERO && left <= Duration::from_millis(1),
                "{left:?}"
            );
        }
        assert_eq!(ManualClock::new(5).until_next_ms(), None);
        assert!(Arc::new(SystemClock).until_next_ms().is_some());
    }
}

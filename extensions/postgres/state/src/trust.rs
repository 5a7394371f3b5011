//! The clock-step policy of `snowflake serve` (DESIGN.md, "Clock steps forward: trusted time"),
//! for a cluster whose backends share one anchor in shared memory.
//!
//! Trusted time starts at the first reading (or at the time trusted when the last mark was
//! written, if later) and then advances with the monotonic clock, catching up with a wall clock
//! that runs ahead by at most a thousandth. A wall reading at most `max_step_ms` ahead of it is
//! trusted as it is; a reading further ahead is a step, trusted only once it has held (within
//! `max_step_ms`) for `trust_after_ms`, and never when it is more than a day. While a step is
//! untrusted nothing is reserved or issued after trusted time.
//!
//! At a start on the same boot as the last mark write, the clock should read that write's
//! trusted time plus the boot time elapsed since: further ahead is a step like any other.

/// Steps larger than this are never trusted automatically.
pub const MAX_AUTO_TRUSTED_STEP_MS: u64 = 86_400_000;
/// Trusted time may catch up with the wall clock one millisecond per this many.
pub const DRIFT_PER_MS: u64 = 1000;

/// The two knobs, as `serve --max-clock-step-ms` and `--clock-step-trust-secs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrustPolicy {
    /// Largest step trusted at once.
    pub max_step_ms: u64,
    /// How long a larger step must hold.
    pub trust_after_ms: u64,
}

/// What the last mark write recorded about the clock (from the mark file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Previous {
    /// Trusted time at that write.
    pub trusted_ms: u64,
    /// The boot id then, if known.
    pub boot_id: Option<String>,
    /// `CLOCK_BOOTTIME` then, in ms, if known.
    pub boottime_ms: Option<u64>,
}

/// What may be believed about the wall clock now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// The wall clock is trusted; `now_ms` is its reading.
    Trusted {
        /// The wall clock (Unix ms).
        now_ms: u64,
    },
    /// The wall clock stepped forward and is not trusted (yet).
    Stepped(Step),
}

/// An untrusted forward step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// The wall clock (Unix ms).
    pub wall_ms: u64,
    /// The latest time trusted: nothing is issued or reserved after it.
    pub trusted_ms: u64,
    /// How far the wall clock is ahead of the time it should read.
    pub step_ms: u64,
    /// How long the step has held.
    pub held_ms: u64,
    /// How long it must hold; `None` when it is never trusted automatically.
    pub needed_ms: Option<u64>,
}

impl Step {
    /// The refusal in words.
    pub fn describe(&self) -> String {
        let wait = match self.needed_ms {
            Some(needed) => format!(
                "it is trusted once it has held for {} s (held {} ms so far)",
                needed / 1000,
                self.held_ms
            ),
            None => "a step of more than a day is never trusted automatically: check the clock, \
                     and if it is right, have a superuser run SELECT snowflake_trust_clock()"
                .to_owned(),
        };
        format!(
            "the clock stepped forward by {} ms (it reads {}, trusted time is {}); {wait}",
            self.step_ms, self.wall_ms, self.trusted_ms
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pending {
    since_mono_ms: u64,
    ahead_ms: u64,
}

/// Trusted time, anchored to the monotonic clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockTrust {
    trusted_ms: u64,
    at_mono_ms: u64,
    pending: Option<Pending>,
}

impl ClockTrust {
    /// The anchor at start: `wall_ms`/`mono_ms`/`boottime_ms` read now, `boot_id` this boot's
    /// id, `previous` from the mark file.
    pub fn anchor(
        wall_ms: u64,
        mono_ms: u64,
        boot_id: Option<&str>,
        boottime_ms: Option<u64>,
        previous: Option<&Previous>,
        policy: TrustPolicy,
    ) -> ClockTrust {
        let mut trust = ClockTrust {
            trusted_ms: wall_ms,
            at_mono_ms: mono_ms,
            pending: None,
        };
        let Some(previous) = previous else {
            return trust;
        };
        let same_boot = boot_id.is_some() && boot_id == previous.boot_id.as_deref();
        match (same_boot, boottime_ms, previous.boottime_ms) {
            (true, Some(now_boot), Some(then_boot)) if now_boot >= then_boot => {
                let elapsed = now_boot - then_boot;
                let expected = previous.trusted_ms.saturating_add(elapsed);
                let slack = elapsed / DRIFT_PER_MS;
                if wall_ms
                    > expected
                        .saturating_add(slack)
                        .saturating_add(policy.max_step_ms)
                {
                    // A step taken while the server was down: judged as any other.
                    trust.trusted_ms = expected;
                    trust.pending = Some(Pending {
                        since_mono_ms: mono_ms,
                        ahead_ms: wall_ms - expected,
                    });
                } else {
                    trust.trusted_ms = wall_ms.min(expected + slack).max(previous.trusted_ms);
                }
            }
            _ => trust.trusted_ms = wall_ms.max(previous.trusted_ms),
        }
        trust
    }

    /// The latest trusted time as of the last observation.
    pub fn trusted_ms(&self) -> u64 {
        self.trusted_ms
    }

    /// An operator's word that the wall clock is right: trusted time jumps to it.
    pub fn accept(&mut self, wall_ms: u64, mono_ms: u64) {
        self.pending = None;
        self.trusted_ms = self.trusted_ms.max(wall_ms);
        self.at_mono_ms = self.at_mono_ms.max(mono_ms);
    }

    /// Judges a wall reading taken at `mono_ms`.
    pub fn observe(&mut self, policy: TrustPolicy, wall_ms: u64, mono_ms: u64) -> Reading {
        let elapsed = mono_ms.saturating_sub(self.at_mono_ms);
        let expected = self.trusted_ms.saturating_add(elapsed);
        let slack = elapsed / DRIFT_PER_MS;
        self.at_mono_ms = self.at_mono_ms.max(mono_ms);
        if wall_ms
            <= expected
                .saturating_add(slack)
                .saturating_add(policy.max_step_ms)
        {
            self.pending = None;
            self.trusted_ms = wall_ms.min(expected + slack).max(expected);
            return Reading::Trusted { now_ms: wall_ms };
        }
        self.trusted_ms = expected;
        let ahead_ms = wall_ms - expected;
        let pending = match self.pending {
            Some(p) if p.ahead_ms.abs_diff(ahead_ms) <= policy.max_step_ms => p,
            _ => Pending {
                since_mono_ms: mono_ms,
                ahead_ms,
            },
        };
        self.pending = Some(pending);
        let held_ms = mono_ms.saturating_sub(pending.since_mono_ms);
        let trustable = ahead_ms <= MAX_AUTO_TRUSTED_STEP_MS;
        if trustable && held_ms >= policy.trust_after_ms {
            self.pending = None;
            self.trusted_ms = wall_ms;
            return Reading::Trusted { now_ms: wall_ms };
        }
        Reading::Stepped(Step {
            wall_ms,
            trusted_ms: expected,
            step_ms: ahead_ms,
            held_ms,
            needed_ms: trustable.then_some(policy.trust_after_ms),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: TrustPolicy = TrustPolicy {
        max_step_ms: 1000,
        trust_after_ms: 10_000,
    };
    const T0: u64 = 1_800_000_000_000;

    #[test]
    fn a_clock_that_follows_the_monotonic_one_is_trusted() {
        let mut t = ClockTrust::anchor(T0, 0, None, None, None, P);
        for i in 1..100 {
            assert_eq!(
                t.observe(P, T0 + i * 10, i * 10),
                Reading::Trusted {
                    now_ms: T0 + i * 10
                }
            );
        }
        // Backwards is not this policy's business: trusted, and trusted time does not go back.
        assert_eq!(
            t.observe(P, T0 - 5000, 1000),
            Reading::Trusted { now_ms: T0 - 5000 }
        );
        assert!(t.trusted_ms() >= T0 + 990);
    }

    #[test]
    fn a_large_step_is_trusted_only_after_it_held() {
        let mut t = ClockTrust::anchor(T0, 0, None, None, None, P);
        let Reading::Stepped(step) = t.observe(P, T0 + 60_000, 0) else {
            panic!("a 60 s step must not be trusted at once")
        };
        assert_eq!(
            (step.step_ms, step.trusted_ms, step.needed_ms),
            (60_000, T0, Some(10_000))
        );
        assert!(
            step.describe().contains("stepped forward by 60000 ms"),
            "{}",
            step.describe()
        );
        assert!(matches!(
            t.observe(P, T0 + 65_000, 5_000),
            Reading::Stepped(_)
        ));
        assert_eq!(
            t.observe(P, T0 + 70_000, 10_000),
            Reading::Trusted {
                now_ms: T0 + 70_000
            }
        );
        assert_eq!(t.trusted_ms(), T0 + 70_000);
    }

    #[test]
    fn a_step_that_goes_away_leaves_nothing_and_small_steps_do_not_add_up() {
        let mut t = ClockTrust::anchor(T0, 0, None, None, None, P);
        assert!(
            matches!(t.observe(P, T0 + 20 * 365 * 86_400_000, 1000), Reading::Stepped(s) if s.needed_ms.is_none())
        );
        assert_eq!(
            t.observe(P, T0 + 2000, 2000),
            Reading::Trusted { now_ms: T0 + 2000 }
        );
        // 900 ms ahead: trusted, but trusted time catches up only at the drift rate...
        assert!(matches!(
            t.observe(P, T0 + 3900, 3000),
            Reading::Trusted { .. }
        ));
        // ...so another 900 ms is a step.
        assert!(matches!(t.observe(P, T0 + 4800, 3000), Reading::Stepped(_)));
    }

    #[test]
    fn at_start_on_the_same_boot_the_downtime_is_known() {
        let prev = Previous {
            trusted_ms: T0,
            boot_id: Some("boot".into()),
            boottime_ms: Some(1_000),
        };
        // Down for 5 s and the clock reads 5 s later: trusted.
        let t = ClockTrust::anchor(T0 + 5000, 0, Some("boot"), Some(6_000), Some(&prev), P);
        assert_eq!(t.trusted_ms(), T0 + 5000);
        // Down for 5 s and the clock reads a year later: a step.
        let mut t = ClockTrust::anchor(
            T0 + 365 * 86_400_000,
            0,
            Some("boot"),
            Some(6_000),
            Some(&prev),
            P,
        );
        assert!(matches!(
            t.observe(P, T0 + 365 * 86_400_000, 0),
            Reading::Stepped(_)
        ));
        // Another boot: the reading is trusted, never below the previous trusted time.
        let t = ClockTrust::anchor(
            T0 + 365 * 86_400_000,
            0,
            Some("other"),
            Some(6_000),
            Some(&prev),
            P,
        );
        assert_eq!(t.trusted_ms(), T0 + 365 * 86_400_000);
        let t = ClockTrust::anchor(T0 - 5000, 0, Some("other"), Some(6_000), Some(&prev), P);
        assert_eq!(t.trusted_ms(), T0);
    }
}

//! The clock-step policy (SPEC §8, "Clock steps forward"): how far the node trusts its wall
//! clock before it reserves time ahead of it.
//!
//! A wall clock that jumps far ahead for a moment (a bad NTP source, a VM host, a hand-set date)
//! must not leave a high-water mark in the future: a mark twenty years ahead locks the pair out
//! for twenty years after a crash, and one past the layout's last millisecond for ever. So the
//! node anchors the wall clock to the monotonic clock and reserves only up to time it trusts:
//!
//! - **Trusted time** starts at the first reading and then advances with the monotonic clock,
//!   catching up with a wall clock that runs ahead of it by at most [`DRIFT_PER_MS`] (a
//!   thousandth: twice NTP's largest slew rate). It never goes back: a clock stepped backwards is
//!   the generator's business (it refuses until the clock passes the last issued ID).
//! - A wall reading at most `--max-clock-step-ms` ahead of trusted time is trusted as it is.
//! - A reading further ahead is a **forward step**. It is trusted only once it has held (the
//!   wall clock stayed that far ahead, within `--max-clock-step-ms`) for
//!   `--clock-step-trust-secs`; then trusted time jumps to it. Until then the node issues
//!   nothing dated after trusted time and writes no mark beyond it: it answers 503 /
//!   `UNAVAILABLE` / a Thrift error saying by how much the clock stepped, and is not ready. When
//!   the clock comes back, it serves again at once.
//! - A step of more than [`MAX_AUTO_TRUSTED_STEP_MS`] (a day) is never trusted by a running node,
//!   however long it holds: no real correction moves a healthy clock that far, and a wrong clock
//!   that stays wrong would poison the mark for as long as it was wrong. The node stays unready
//!   and says so; an operator who has checked the clock restarts it (see below).
//! - **At start** there is no anchor yet. The first reading, taken when the process starts
//!   (before claiming a lease or the peer check, which can take seconds), is checked against
//!   the previous run's last trusted time, which every mark write also records with the
//!   kernel's boot time (`clock.json` in the state directory). On the **same boot** the boot
//!   time says exactly how long the node was down, so the clock should read that trusted time
//!   plus the downtime (give or take the drift allowance and `--max-clock-step-ms`): a clock
//!   further ahead is a forward step like any other, judged as above (a supervisor restarting a
//!   node at once, while its clock is wrong, is no operator's word that the clock is right).
//!   After a reboot, or without a previous run, nothing local can tell a long downtime from a
//!   clock that is wrong: the first reading is trusted (or the moment the last mark was
//!   written, if that is later: trusted time never goes back across restarts either). In a
//!   ZooKeeper fleet the 2010 peer check still refuses a clock more than `--max-peer-skew-ms`
//!   off the peers' mean. An operator who has checked that a step of more than a day is right
//!   removes `clock.json` and restarts; a mark that a wrong clock wrote anyway (by an older
//!   version, or a clock that was wrong since boot) is lowered with `snowflake state lower-mark`.

use snowflake_core::Clock;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Steps larger than this are never trusted by a running node, however long they hold.
pub const MAX_AUTO_TRUSTED_STEP_MS: u64 = 86_400_000;
/// How much faster than the monotonic clock trusted time may catch up with the wall clock: one
/// millisecond per this many.
pub const DRIFT_PER_MS: u64 = 1000;

/// What the node may believe about the wall clock right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// The wall clock is trusted; `now_ms` is its reading.
    Trusted {
        /// The wall clock (Unix ms).
        now_ms: u64,
    },
    /// The wall clock stepped forward and is not trusted yet (or not at all).
    Stepped(Step),
}

/// An untrusted forward step of the wall clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// The wall clock (Unix ms).
    pub wall_ms: u64,
    /// The latest time the node trusts (Unix ms): nothing is issued or reserved after it.
    pub trusted_ms: u64,
    /// How far the wall clock is ahead of the time it should read.
    pub step_ms: u64,
    /// How long it has held so far.
    pub held: Duration,
    /// How long it must hold to be trusted; `None` when it is never trusted automatically.
    pub needed: Option<Duration>,
}

impl Step {
    /// The refusal, in words.
    pub fn describe(&self) -> String {
        let when = match self.needed {
            Some(needed) => format!(
                "it is trusted once it has held for {} s (held {} s so far; \
                 --clock-step-trust-secs), or as soon as the clock comes back",
                needed.as_secs(),
                self.held.as_secs()
            ),
            None => format!(
                "a step of more than a day ({MAX_AUTO_TRUSTED_STEP_MS} ms) is never trusted \
                 automatically: fix the clock, or, if the new time is right, remove clock.json \
                 from the state directory and restart the node"
            ),
        };
        format!(
            "the clock stepped forward by {} ms (it reads {} = {}, more than \
             --max-clock-step-ms ahead of the time it should read); not issuing ids dated after \
             {} = {} until the step is trusted: {when}",
            self.step_ms,
            self.wall_ms,
            snowflake_core::format_unix_ms(self.wall_ms),
            self.trusted_ms,
            snowflake_core::format_unix_ms(self.trusted_ms),
        )
    }

    /// When to try again, in seconds (at least 1).
    pub fn retry_after_secs(&self) -> u64 {
        self.needed.map_or(60, |needed| {
            needed.saturating_sub(self.held).as_secs().max(1)
        })
    }
}

/// The wall clock, anchored to the monotonic clock (see the module docs).
#[derive(Debug)]
pub struct ClockTrust {
    /// The node's wall clock.
    clock: Arc<dyn Clock>,
    /// `--max-clock-step-ms`: a reading this far ahead of trusted time is still trusted.
    max_step_ms: u64,
    /// `--clock-step-trust-secs`: how long a larger step must hold to be trusted.
    trust_after: Duration,
    /// The anchor and any step being watched; a tiny critical section.
    state: Mutex<Anchor>,
}

#[derive(Debug)]
struct Anchor {
    /// Trusted time at `base_mono`.
    base_ms: u64,
    /// The monotonic instant of `base_ms`.
    base_mono: Instant,
    /// A forward step being watched: its size when first seen, and since when.
    pending: Option<(u64, Instant)>,
}

/// Where the machine's boot-time clock stands: which boot (the kernel's random boot id), and
/// the time since it (`CLOCK_BOOTTIME`: monotonic, counting time suspended, never stepped).
/// Across a restart of the process on the same boot, it says exactly how long the node was
/// down, whatever the wall clock did meanwhile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootTime {
    /// `/proc/sys/kernel/random/boot_id`.
    pub boot_id: String,
    /// Milliseconds since the boot.
    pub since_boot_ms: u64,
}

impl BootTime {
    /// Reads it now; `None` where the system does not tell (no `/proc`, another kernel).
    pub fn now() -> Option<BootTime> {
        static BOOT_ID: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
        let boot_id = BOOT_ID
            .get_or_init(|| {
                let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
                let id = text.trim();
                (!id.is_empty() && id.len() <= 64).then(|| id.to_owned())
            })
            .clone()?;
        let since = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
        let since_boot_ms = u64::try_from(since.tv_sec).ok()?.checked_mul(1000)?
            + u64::try_from(since.tv_nsec).ok()? / 1_000_000;
        Some(BootTime {
            boot_id,
            since_boot_ms,
        })
    }
}

/// The first reading of the wall clock, with the monotonic instant and the boot time it was
/// taken at: where trusted time starts. Take it when the process starts, before anything slow
/// (claiming a lease, the peer check), so a step during the start is a step like any other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClockAnchor {
    /// The wall clock (Unix ms).
    pub wall_ms: u64,
    /// The monotonic instant of `wall_ms`.
    pub mono: Instant,
    /// The boot time of `wall_ms`, where known.
    pub boot: Option<BootTime>,
}

impl ClockAnchor {
    /// Reads `clock` now.
    pub fn now(clock: &dyn Clock) -> ClockAnchor {
        let mono = Instant::now();
        let boot = BootTime::now();
        ClockAnchor {
            wall_ms: clock.now_ms(),
            mono,
            boot,
        }
    }

    /// Checks the anchor against `last`, the previous run's last trusted time: on the same
    /// boot, the wall clock should read `last.trusted_ms` plus the boot time elapsed since
    /// (give or take [`DRIFT_PER_MS`] and `max_step_ms`). Returns the time the clock should
    /// read, if the two are comparable, and whether the wall clock is further ahead of it than
    /// that: then the anchor is moved back to that time, so the first reading is judged as a
    /// forward step (see the module docs).
    pub fn check_against(&mut self, last: &TrustedPoint, max_step_ms: u64) -> Option<Checked> {
        let boot = self.boot.as_ref()?;
        if boot.boot_id != last.boot_id || boot.since_boot_ms < last.since_boot_ms {
            return None;
        }
        let down_ms = boot.since_boot_ms - last.since_boot_ms;
        let expected_ms = last.trusted_ms.saturating_add(down_ms);
        let latest_ms = expected_ms.saturating_add(down_ms / DRIFT_PER_MS);
        let stepped = self.wall_ms > latest_ms.saturating_add(max_step_ms);
        if stepped {
            self.wall_ms = latest_ms;
        }
        Some(Checked {
            expected_ms,
            down_ms,
            stepped,
        })
    }
}

/// What [`ClockAnchor::check_against`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checked {
    /// The time the wall clock should read at the anchor (Unix ms).
    pub expected_ms: u64,
    /// How long the node was down.
    pub down_ms: u64,
    /// The wall clock is too far ahead of it: the anchor was moved back.
    pub stepped: bool,
}

/// A time the node trusted, with the boot time it was trusted at (persisted in the state
/// directory, so that the next run on the same boot can check its clock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustedPoint {
    /// The boot id.
    pub boot_id: String,
    /// Milliseconds since the boot.
    pub since_boot_ms: u64,
    /// Trusted time then (Unix ms).
    pub trusted_ms: u64,
}

impl ClockTrust {
    /// Anchors `clock` at its current reading.
    pub fn new(clock: Arc<dyn Clock>, max_step_ms: u64, trust_after: Duration) -> ClockTrust {
        let anchor = ClockAnchor::now(clock.as_ref());
        ClockTrust::anchored(clock, &anchor, max_step_ms, trust_after)
    }

    /// Anchors `clock` at an earlier reading (see [`ClockAnchor`]).
    pub fn anchored(
        clock: Arc<dyn Clock>,
        anchor: &ClockAnchor,
        max_step_ms: u64,
        trust_after: Duration,
    ) -> ClockTrust {
        ClockTrust {
            clock,
            max_step_ms,
            trust_after,
            state: Mutex::new(Anchor {
                base_ms: anchor.wall_ms,
                base_mono: anchor.mono,
                pending: None,
            }),
        }
    }

    /// Raises trusted time to at least `trusted_ms`, a time trusted earlier (the moment the
    /// last mark was written, by the previous run): trusted time never goes back, also across
    /// restarts, so a clock that restarted behind and then catches up is not a step.
    pub fn raise_to(&self, trusted_ms: u64) {
        let mut anchor = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let elapsed_ms = u64::try_from(now.saturating_duration_since(anchor.base_mono).as_millis())
            .unwrap_or(u64::MAX);
        let current_ms = anchor.base_ms.saturating_add(elapsed_ms);
        anchor.base_ms = current_ms.max(trusted_ms);
        anchor.base_mono = now;
    }

    /// Trusted time now, with the boot time (`None` where the boot time is not known): the
    /// latest time the node has trusted, which never goes back.
    pub fn trusted_point(&self) -> Option<TrustedPoint> {
        let anchor = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let boot = BootTime::now()?;
        let now = Instant::now();
        let elapsed_ms = u64::try_from(now.saturating_duration_since(anchor.base_mono).as_millis())
            .unwrap_or(u64::MAX);
        Some(TrustedPoint {
            boot_id: boot.boot_id,
            since_boot_ms: boot.since_boot_ms,
            trusted_ms: anchor.base_ms.saturating_add(elapsed_ms),
        })
    }

    /// Reads the wall clock and judges it.
    pub fn read(&self) -> Reading {
        let wall_ms = self.clock.now_ms();
        self.judge(wall_ms, Instant::now())
    }

    /// Judges a wall reading taken at the monotonic instant `mono`.
    fn judge(&self, wall_ms: u64, mono: Instant) -> Reading {
        let mut anchor = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let elapsed_ms =
            u64::try_from(mono.saturating_duration_since(anchor.base_mono).as_millis())
                .unwrap_or(u64::MAX);
        let expected_ms = anchor.base_ms.saturating_add(elapsed_ms);
        let drift_ms = elapsed_ms / DRIFT_PER_MS;
        let ceiling_ms = expected_ms
            .saturating_add(drift_ms)
            .saturating_add(self.max_step_ms);
        if wall_ms <= ceiling_ms {
            anchor.pending = None;
            // Trusted time follows the wall clock up, at most `drift_ms` faster than the
            // monotonic clock; it never goes back.
            let base_ms = wall_ms.clamp(expected_ms, expected_ms.saturating_add(drift_ms));
            if mono >= anchor.base_mono {
                anchor.base_ms = base_ms;
                anchor.base_mono = mono;
            }
            return Reading::Trusted { now_ms: wall_ms };
        }
        let step_ms = wall_ms - expected_ms;
        let since = match anchor.pending {
            // The same step, still holding.
            Some((seen_ms, since)) if seen_ms.abs_diff(step_ms) <= self.max_step_ms => since,
            // A new step (or the clock moved again): watch it from now.
            _ => {
                anchor.pending = Some((step_ms, mono));
                mono
            }
        };
        let held = mono.saturating_duration_since(since);
        let automatic = step_ms <= MAX_AUTO_TRUSTED_STEP_MS;
        if automatic && held >= self.trust_after {
            tracing::warn!(
                step_ms,
                held_secs = held.as_secs(),
                now = %snowflake_core::format_unix_ms(wall_ms),
                "trusting the clock's forward step: it has held for --clock-step-trust-secs"
            );
            anchor.base_ms = wall_ms;
            anchor.base_mono = mono;
            anchor.pending = None;
            return Reading::Trusted { now_ms: wall_ms };
        }
        Reading::Stepped(Step {
            wall_ms,
            trusted_ms: expected_ms.saturating_add(drift_ms),
            step_ms,
            held,
            needed: automatic.then_some(self.trust_after),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{
        BootTime, ClockAnchor, ClockTrust, MAX_AUTO_TRUSTED_STEP_MS, Reading, TrustedPoint,
    };
    use snowflake_core::{Clock, ManualClock};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    const T0: u64 = 1_700_000_000_000;

    fn trust() -> (ClockTrust, Instant) {
        let trust = ClockTrust::new(
            Arc::new(ManualClock::new(T0)),
            1000,
            Duration::from_secs(10),
        );
        let start = trust.state.lock().unwrap().base_mono;
        (trust, start)
    }

    fn at(start: Instant, ms: u64) -> Instant {
        start + Duration::from_millis(ms)
    }

    #[test]
    fn a_clock_that_keeps_pace_or_steps_a_little_is_trusted() {
        let (trust, start) = trust();
        for ms in [0, 10, 500, 5000] {
            assert_eq!(
                trust.judge(T0 + ms, at(start, ms)),
                Reading::Trusted { now_ms: T0 + ms }
            );
        }
        // 900 ms ahead: within --max-clock-step-ms.
        assert_eq!(
            trust.judge(T0 + 6900, at(start, 6000)),
            Reading::Trusted { now_ms: T0 + 6900 }
        );
        // Backwards is trusted too (the generator refuses it on its own).
        assert_eq!(
            trust.judge(T0 + 1000, at(start, 7000)),
            Reading::Trusted { now_ms: T0 + 1000 }
        );
    }

    #[test]
    fn a_step_between_the_anchor_and_the_start_is_a_step() {
        // The process read the clock when it started; a slow start later, the clock reads 20
        // years ahead when the node is built.
        let clock = Arc::new(ManualClock::new(T0));
        let anchor = ClockAnchor::now(clock.as_ref());
        let twenty_years_ms = 20 * 365 * MAX_AUTO_TRUSTED_STEP_MS;
        clock.set_ms(T0 + twenty_years_ms);
        let trust = ClockTrust::anchored(
            Arc::clone(&clock) as Arc<dyn Clock>,
            &anchor,
            1000,
            Duration::from_secs(10),
        );
        let Reading::Stepped(step) = trust.read() else {
            panic!("a 20-year step taken for the anchor");
        };
        assert!(step.trusted_ms < T0 + 60_000, "{step:?}");
        assert_eq!(step.needed, None, "never trusted automatically");
        // Back to the real time: trusted at once.
        clock.set_ms(T0 + 5);
        assert!(matches!(trust.read(), Reading::Trusted { .. }));
    }

    #[test]
    fn at_start_on_the_same_boot_the_clock_is_checked_against_the_downtime() {
        let last = TrustedPoint {
            boot_id: "b1".into(),
            since_boot_ms: 50_000,
            trusted_ms: T0,
        };
        let anchor = |boot_id: &str, since_boot_ms, wall_ms| ClockAnchor {
            wall_ms,
            mono: Instant::now(),
            boot: Some(BootTime {
                boot_id: boot_id.into(),
                since_boot_ms,
            }),
        };
        // Down 10 s, the clock reads 10 s later: fine.
        let mut a = anchor("b1", 60_000, T0 + 10_000);
        let checked = a.check_against(&last, 1000).unwrap();
        assert!(!checked.stepped);
        assert_eq!(
            (checked.expected_ms, checked.down_ms),
            (T0 + 10_000, 10_000)
        );
        assert_eq!(a.wall_ms, T0 + 10_000);
        // Down 10 s, the clock reads 20 years later: a step; the anchor moves back.
        let twenty_years_ms = 20 * 365 * MAX_AUTO_TRUSTED_STEP_MS;
        let mut a = anchor("b1", 60_000, T0 + twenty_years_ms);
        assert!(a.check_against(&last, 1000).unwrap().stepped);
        assert_eq!(a.wall_ms, T0 + 10_000 + 10);
        // Down 10 days: drift of a thousandth (864 s) is allowed, more is a step.
        let ten_days = 10 * MAX_AUTO_TRUSTED_STEP_MS;
        let mut a = anchor("b1", 50_000 + ten_days, T0 + ten_days + 864_000 + 1000);
        assert!(!a.check_against(&last, 1000).unwrap().stepped);
        let mut a = anchor("b1", 50_000 + ten_days, T0 + ten_days + 866_000);
        assert!(a.check_against(&last, 1000).unwrap().stepped);
        // Behind is the generator's business (and trusted time is raised to the expected time).
        let mut a = anchor("b1", 60_000, T0);
        assert!(!a.check_against(&last, 1000).unwrap().stepped);
        // Another boot, an older boot time, or no boot time: nothing to compare.
        let mut a = anchor("b2", 60_000, T0 + twenty_years_ms);
        assert_eq!(a.check_against(&last, 1000), None);
        let mut a = anchor("b1", 40_000, T0 + twenty_years_ms);
        assert_eq!(a.check_against(&last, 1000), None);
        let mut a = ClockAnchor {
            boot: None,
            ..anchor("b1", 60_000, T0 + twenty_years_ms)
        };
        assert_eq!(a.check_against(&last, 1000), None);
        assert_eq!(a.wall_ms, T0 + twenty_years_ms);
    }

    #[test]
    fn the_boot_time_is_read_and_advances() {
        let first = BootTime::now().expect("Linux tells the boot id and boot time");
        std::thread::sleep(Duration::from_millis(20));
        let second = BootTime::now().unwrap();
        assert_eq!(first.boot_id, second.boot_id);
        assert!(second.since_boot_ms >= first.since_boot_ms + 20);
    }

    #[test]
    fn small_steps_cannot_add_up_to_a_large_one() {
        let (trust, start) = trust();
        // +900 ms every second: trusted time only catches up a thousandth faster than real
        // time, so the third step is already too far.
        assert!(matches!(
            trust.judge(T0 + 1900, at(start, 1000)),
            Reading::Trusted { .. }
        ));
        assert!(matches!(
            trust.judge(T0 + 2900, at(start, 2000)),
            Reading::Trusted { .. }
        ));
        match trust.judge(T0 + 4800, at(start, 3000)) {
            Reading::Stepped(step) => {
                assert!(step.step_ms >= 1700, "{step:?}");
                assert!(step.trusted_ms <= T0 + 3010, "{step:?}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_large_step_is_refused_until_it_has_held_then_trusted() {
        let (trust, start) = trust();
        let step = 20 * 1000;
        for ms in [1000, 5000, 10_999] {
            match trust.judge(T0 + ms + step, at(start, ms)) {
                Reading::Stepped(s) => {
                    assert_eq!(s.step_ms, step);
                    assert_eq!(s.needed, Some(Duration::from_secs(10)));
                    assert!(
                        s.describe().contains("stepped forward by 20000 ms"),
                        "{}",
                        s.describe()
                    );
                    assert!(s.trusted_ms <= T0 + ms + ms / 1000);
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(
            trust.judge(T0 + 11_000 + step, at(start, 11_000)),
            Reading::Trusted {
                now_ms: T0 + 11_000 + step
            }
        );
        // From then on that is the time.
        assert_eq!(
            trust.judge(T0 + 12_000 + step, at(start, 12_000)),
            Reading::Trusted {
                now_ms: T0 + 12_000 + step
            }
        );
    }

    #[test]
    fn a_step_that_comes_back_is_forgotten_and_one_that_moves_starts_over() {
        let (trust, start) = trust();
        assert!(matches!(
            trust.judge(T0 + 1000 + 60_000, at(start, 1000)),
            Reading::Stepped(_)
        ));
        assert!(matches!(
            trust.judge(T0 + 2000, at(start, 2000)),
            Reading::Trusted { .. }
        ));
        // A new step: held from its own start.
        let Reading::Stepped(s) = trust.judge(T0 + 9000 + 60_000, at(start, 9000)) else {
            panic!()
        };
        assert_eq!(s.held, Duration::ZERO);
        // It moves by more than the allowed step: watched from the move.
        let Reading::Stepped(s) = trust.judge(T0 + 15_000 + 90_000, at(start, 15_000)) else {
            panic!()
        };
        assert_eq!(s.held, Duration::ZERO);
        let Reading::Stepped(s) = trust.judge(T0 + 20_000 + 90_000, at(start, 20_000)) else {
            panic!()
        };
        assert_eq!(s.held, Duration::from_secs(5));
    }

    #[test]
    fn a_step_of_more_than_a_day_is_never_trusted_while_running() {
        let (trust, start) = trust();
        let years = 20 * 365 * MAX_AUTO_TRUSTED_STEP_MS;
        for ms in [0, 60_000, 3_600_000] {
            let Reading::Stepped(s) = trust.judge(T0 + ms + years, at(start, ms)) else {
                panic!()
            };
            assert_eq!(s.needed, None);
            assert!(s.describe().contains("never trusted automatically"));
        }
    }
}

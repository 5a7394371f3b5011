//! The clocks the extension reads: the wall clock (through `snowflake-core`'s one seam, so
//! libfaketime moves it), the monotonic clock every backend shares (grant deadlines, trusted
//! time), and the boot facts a restart compares its clock with.

use snowflake_core::{Clock, SystemClock};

/// The wall clock, Unix ms.
pub fn wall_ms() -> u64 {
    SystemClock.now_ms()
}

fn read(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a valid out pointer; these clocks cannot fail on Linux.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// `CLOCK_MONOTONIC` in ns: one clock for every process on the machine, never stepped.
pub fn mono_ns() -> u64 {
    read(libc::CLOCK_MONOTONIC)
}

/// `CLOCK_MONOTONIC` in ms.
pub fn mono_ms() -> u64 {
    mono_ns() / 1_000_000
}

/// `CLOCK_BOOTTIME` in ms (counts suspend; never stepped).
pub fn boottime_ms() -> u64 {
    read(libc::CLOCK_BOOTTIME) / 1_000_000
}

/// The kernel's boot id, if readable.
pub fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

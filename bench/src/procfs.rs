//! `procfs`: what `/proc` says about a process: its resident memory and its CPU time.

use anyhow::{Context, Result};

/// VmRSS of a process in KiB.
pub fn rss_kib(pid: u32) -> Result<f64> {
    status_kib(pid, "VmRSS")
}

/// A `KEY: N kB` line of `/proc/PID/status` (e.g. `VmRSS`, `VmHWM`) in KiB.
pub fn status_kib(pid: u32, key: &str) -> Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    parse_status_kib(&status, key).with_context(|| format!("no {key} line for pid {pid}"))
}

pub fn parse_status_kib(status: &str, key: &str) -> Option<f64> {
    status.lines().find_map(|l| {
        l.strip_prefix(key)?
            .strip_prefix(':')?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    })
}

/// CPU seconds (user + system) used by this process's finished, waited-for children: the
/// `cutime` and `cstime` fields of `/proc/self/stat`, in USER_HZ (100 per second on Linux).
pub fn children_cpu_secs() -> Result<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    parse_children_cpu_secs(&stat).context("no cutime/cstime in /proc/self/stat")
}

fn parse_children_cpu_secs(stat: &str) -> Option<f64> {
    // cutime and cstime are fields 16 and 17.
    stat_ticks(stat, 16, 17)
}

/// CPU seconds (user + system) a running process has used so far: `utime` and `stime`
/// (fields 14 and 15) of `/proc/PID/stat`.
pub fn process_cpu_secs(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    stat_ticks(&stat, 14, 15).with_context(|| format!("no utime/stime in /proc/{pid}/stat"))
}

/// The sum of two clock-tick fields of a `/proc/.../stat` line (numbered from 1 as in
/// proc(5)), in seconds.
fn stat_ticks(stat: &str, first: usize, second: usize) -> Option<f64> {
    // Fields after the command name, which ends at the last ')', start with field 3.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let a: f64 = fields.get(first.checked_sub(3)?)?.parse().ok()?;
    let b: f64 = fields.get(second.checked_sub(3)?)?.parse().ok()?;
    Some((a + b) / 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_cpu_from_proc_self_stat() {
        // pid (comm with ") " inside) state ppid ... utime stime cutime cstime ...
        let stat = "4242 (a) b) S 1 4242 4242 0 -1 4194560 100 0 0 0 7 3 250 130 20 0 1 0 5 0 0";
        assert_eq!(parse_children_cpu_secs(stat), Some(3.8));
        assert_eq!(parse_children_cpu_secs("4242 (x) S 1"), None);
        assert!(children_cpu_secs().is_ok());
        assert!(process_cpu_secs(std::process::id()).is_ok());
        assert_eq!(stat_ticks(stat, 14, 15), Some(0.1));
    }

    #[test]
    fn vmrss_from_proc_status() {
        let status = "Name:\tsnowflake\nVmPeak:\t  100 kB\nVmRSS:\t    8420 kB\nThreads:\t3\n";
        assert_eq!(parse_status_kib(status, "VmRSS"), Some(8420.0));
        assert_eq!(parse_status_kib("Name: x\n", "VmRSS"), None);
        assert_eq!(
            parse_status_kib("VmHWM:\t  9000 kB\n", "VmHWM"),
            Some(9000.0)
        );
        assert_eq!(parse_status_kib("VmHWMx: 1 kB\n", "VmHWM"), None);
        assert!(rss_kib(std::process::id()).unwrap() > 0.0);
    }
}

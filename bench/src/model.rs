//! What `lib` and `service` write and `report` reads: one JSON file per part.

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// One thing measured, once per round.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Measurement {
    /// What kind of measurement, e.g. `lib-throughput`, `single-id`, `connections`.
    pub group: String,
    /// Who was measured, e.g. `snowflake-core`, `Redis INCR`.
    pub subject: String,
    /// The varying parameter, e.g. `threads=2`, `c=50`, `p99`.
    pub parameter: String,
    /// Unit of the samples, e.g. `IDs/s`, `ns/ID`, `us`, `KiB`.
    pub unit: String,
    /// One sample per round, in round order.
    pub samples: Vec<f64>,
    /// Median of the samples.
    pub median: f64,
}

impl Measurement {
    pub fn new(group: &str, subject: &str, parameter: &str, unit: &str) -> Self {
        Measurement {
            group: group.to_owned(),
            subject: subject.to_owned(),
            parameter: parameter.to_owned(),
            unit: unit.to_owned(),
            samples: Vec::new(),
            median: f64::NAN,
        }
    }
}

/// The machine a run happened on.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    pub kernel: String,
    pub date: String,
    /// `/proc/loadavg` before the run: other work on the machine skews numbers.
    pub loadavg_before: String,
    pub loadavg_after: String,
}

impl Machine {
    pub fn describe() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name")
                    .map(|r| r.trim_start_matches([' ', '\t', ':']).to_owned())
            })
            .unwrap_or_else(|| "unknown".to_owned());
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| format!("Linux {}", s.trim()))
            .unwrap_or_else(|_| "unknown".to_owned());
        let date = command_output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]).unwrap_or_default();
        Machine {
            cpu,
            cores,
            kernel,
            date,
            loadavg_before: loadavg(),
            loadavg_after: String::new(),
        }
    }
}

/// The first three fields of `/proc/loadavg`.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn command_output(cmd: &str, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new(cmd).args(args).output().ok()?;
    Some(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Everything one part (`lib` or `service`) measured.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Run {
    /// `lib` or `service`.
    pub part: String,
    pub machine: Machine,
    /// Seconds per measurement and rounds.
    pub secs: f64,
    pub rounds: usize,
    /// How long the whole part took.
    pub wall_secs: f64,
    pub measurements: Vec<Measurement>,
    /// Findings and caveats worth printing with the tables (duplicates, skipped crates, ...).
    pub notes: Vec<String>,
}

impl Run {
    pub fn new(part: &str, secs: f64, rounds: usize) -> Run {
        Run {
            part: part.to_owned(),
            machine: Machine::describe(),
            secs,
            rounds,
            ..Run::default()
        }
    }

    /// Appends a sample to the measurement (creating it on first use) and refreshes its median.
    pub fn record(&mut self, group: &str, subject: &str, parameter: &str, unit: &str, value: f64) {
        let m = match self
            .measurements
            .iter_mut()
            .position(|m| m.group == group && m.subject == subject && m.parameter == parameter)
        {
            Some(i) => &mut self.measurements[i],
            None => {
                self.measurements
                    .push(Measurement::new(group, subject, parameter, unit));
                self.measurements.last_mut().expect("just pushed")
            }
        };
        m.samples.push(value);
        m.median = median(&m.samples);
    }

    pub fn find(&self, group: &str, subject: &str, parameter: &str) -> Option<&Measurement> {
        self.measurements
            .iter()
            .find(|m| m.group == group && m.subject == subject && m.parameter == parameter)
    }

    pub fn median(&self, group: &str, subject: &str, parameter: &str) -> Option<f64> {
        self.find(group, subject, parameter).map(|m| m.median)
    }

    pub fn save(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(self)?;
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
    }

    pub fn load(path: &Path) -> Result<Run> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
    }
}

/// The median (mean of the middle two for an even count); NaN for no samples.
pub fn median(samples: &[f64]) -> f64 {
    let mut v: Vec<f64> = samples.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn record_appends_and_round_trips_through_json() {
        let mut run = Run::new("lib", 1.0, 3);
        run.record("g", "s", "p", "IDs/s", 10.0);
        run.record("g", "s", "p", "IDs/s", 30.0);
        run.record("g", "s", "p", "IDs/s", 20.0);
        run.record("g", "t", "p", "IDs/s", 5.0);
        assert_eq!(run.measurements.len(), 2);
        assert_eq!(run.median("g", "s", "p"), Some(20.0));
        let back: Run = serde_json::from_str(&serde_json::to_string(&run).unwrap()).unwrap();
        assert_eq!(back, run);
    }
}

//! What an audit found, as JSON (`snowflake audit --json`) and as text.

use serde::Serialize;
use snowflake_core::{Decoded, format_unix_ms};
use std::fmt;

/// What an audit found. Serialized (`--json`) with these field names; IDs are decimal strings.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// IDs read (over every valid line; a JSON `"ids"` line counts each of its IDs).
    pub ids: u64,
    /// Distinct IDs among them.
    pub unique: u64,
    /// Extra copies: `ids - unique` (an ID seen three times counts two).
    pub duplicates: u64,
    /// Distinct IDs seen more than once.
    pub duplicate_ids: u64,
    /// Lines that hold no valid ID (counted, never read as IDs).
    pub invalid: u64,
    /// Lines with nothing but whitespace (skipped; not invalid).
    pub blank: u64,
    /// Lines read.
    pub lines: u64,
    /// IDs dated after `now_ms`.
    pub future: u64,
    /// The time IDs were compared with (Unix ms).
    pub now_ms: u64,
    /// Whether IDs dated in the future fail the audit ([`crate::Options::fail_on_future`]).
    #[serde(skip)]
    pub fail_on_future: bool,
    /// The earliest and the latest ID's time, if any ID was read.
    pub time_range: Option<TimeRange>,
    /// Per (datacenter, worker), in that order.
    pub nodes: Vec<NodeReport>,
    /// The lowest duplicated IDs, each with the `file:line` of its copies.
    pub duplicate_examples: Vec<DuplicateExample>,
    /// The first invalid lines.
    pub invalid_examples: Vec<InvalidExample>,
    /// The first IDs dated in the future.
    pub future_examples: Vec<FutureExample>,
    /// The inputs, in the order read.
    pub inputs: Vec<String>,
    /// How many sorted runs were spilled to the temporary directory (0: all in memory).
    pub spilled_runs: usize,
    /// How many bytes they took there.
    pub spilled_bytes: u64,
}

impl Report {
    /// No duplicate and no invalid line (exit status 0 of `snowflake audit`).
    pub fn is_clean(&self) -> bool {
        self.duplicates == 0 && self.invalid == 0
    }

    /// Whether the audit passed: clean, and no ID dated in the future when those fail it
    /// (`--fail-on-future`). `snowflake audit` exits 0 exactly when this holds.
    pub fn passed(&self) -> bool {
        self.is_clean() && !self.fails_on_future()
    }

    /// IDs dated in the future were found and fail the audit.
    fn fails_on_future(&self) -> bool {
        self.fail_on_future && self.future > 0
    }
}

/// A time range, in Unix ms and ISO-8601.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TimeRange {
    /// The earliest time.
    pub first_ms: u64,
    /// The earliest time, ISO-8601 UTC.
    pub first: String,
    /// The latest time.
    pub last_ms: u64,
    /// The latest time, ISO-8601 UTC.
    pub last: String,
}

impl TimeRange {
    pub(crate) fn new(first_ms: u64, last_ms: u64) -> TimeRange {
        TimeRange {
            first_ms,
            first: format_unix_ms(first_ms),
            last_ms,
            last: format_unix_ms(last_ms),
        }
    }
}

/// The IDs of one (datacenter, worker) pair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeReport {
    /// Datacenter id.
    pub datacenter_id: u64,
    /// Worker id.
    pub worker_id: u64,
    /// IDs read (copies included).
    pub ids: u64,
    /// The earliest ID's time (Unix ms).
    pub first_ms: u64,
    /// The latest ID's time (Unix ms).
    pub last_ms: u64,
}

/// A duplicated ID.
#[derive(Debug, Clone, Serialize)]
pub struct DuplicateExample {
    /// The ID and its fields (as `snowflake decode --json` prints them).
    #[serde(flatten)]
    pub decoded: Decoded,
    /// How many times it was read.
    pub copies: u64,
    /// Where: `file:line` of the first copies (at most [`crate::MAX_LOCATIONS`]), in input order.
    pub at: Vec<String>,
}

/// An invalid line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InvalidExample {
    /// `file:line`.
    pub at: String,
    /// Why it holds no valid ID.
    pub reason: String,
}

/// An ID dated in the future.
#[derive(Debug, Clone, Serialize)]
pub struct FutureExample {
    /// The ID and its fields.
    #[serde(flatten)]
    pub decoded: Decoded,
    /// `file:line`.
    pub at: String,
}

/// `1234567` as `1,234,567`.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl fmt::Display for Report {
    /// The human summary printed by `snowflake audit`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.passed() {
            writeln!(f, "OK: no duplicate, no invalid line")?;
        } else {
            let failures: Vec<&str> = [
                (self.duplicates > 0, "duplicates"),
                (self.invalid > 0, "invalid lines"),
                (
                    self.fails_on_future(),
                    "ids dated in the future (--fail-on-future)",
                ),
            ]
            .into_iter()
            .filter_map(|(found, what)| found.then_some(what))
            .collect();
            writeln!(f, "FAILED: {}", failures.join(" and "))?;
        }
        writeln!(f, "ids:         {}", grouped(self.ids))?;
        writeln!(f, "unique:      {}", grouped(self.unique))?;
        if self.duplicates == 0 {
            writeln!(f, "duplicates:  0")?;
        } else {
            writeln!(
                f,
                "duplicates:  {} extra copies of {} ids",
                grouped(self.duplicates),
                grouped(self.duplicate_ids)
            )?;
        }
        let blank = if self.blank > 0 {
            format!(" ({} blank lines skipped)", grouped(self.blank))
        } else {
            String::new()
        };
        writeln!(
            f,
            "invalid:     {} of {} lines{blank}",
            grouped(self.invalid),
            grouped(self.lines)
        )?;
        writeln!(
            f,
            "future:      {} ids dated after {}",
            grouped(self.future),
            format_unix_ms(self.now_ms)
        )?;
        match &self.time_range {
            Some(range) => writeln!(f, "time range:  {} .. {}", range.first, range.last)?,
            None => writeln!(f, "time range:  (no id)")?,
        }
        if !self.nodes.is_empty() {
            writeln!(f, "per datacenter/worker:")?;
            for node in &self.nodes {
                writeln!(
                    f,
                    "  {:>2}/{:<2} {:>15} ids  {} .. {}",
                    node.datacenter_id,
                    node.worker_id,
                    grouped(node.ids),
                    format_unix_ms(node.first_ms),
                    format_unix_ms(node.last_ms)
                )?;
            }
        }
        if !self.duplicate_examples.is_empty() {
            writeln!(f, "duplicates (lowest ids first):")?;
            for dup in &self.duplicate_examples {
                let more = dup.copies.saturating_sub(dup.at.len() as u64);
                let more = if more > 0 {
                    format!(" and {} more", grouped(more))
                } else {
                    String::new()
                };
                writeln!(
                    f,
                    "  {} ({} copies) at {}{more}",
                    dup.decoded,
                    dup.copies,
                    dup.at.join(", ")
                )?;
            }
        }
        if !self.invalid_examples.is_empty() {
            writeln!(f, "invalid lines (first):")?;
            for bad in &self.invalid_examples {
                writeln!(f, "  {}: {}", bad.at, bad.reason)?;
            }
        }
        if !self.future_examples.is_empty() {
            writeln!(f, "dated in the future (first):")?;
            for future in &self.future_examples {
                writeln!(f, "  {} at {}", future.decoded, future.at)?;
            }
        }
        if self.spilled_runs > 0 {
            writeln!(
                f,
                "(sorted in {} runs spilled to disk, {} bytes)",
                self.spilled_runs,
                grouped(self.spilled_bytes)
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::grouped;

    #[test]
    fn numbers_are_grouped_by_thousands() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1000), "1,000");
        assert_eq!(grouped(10_000_000), "10,000,000");
        assert_eq!(grouped(u64::MAX), "18,446,744,073,709,551,615");
    }
}

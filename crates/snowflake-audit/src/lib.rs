//! Checks a table's worth of Snowflake IDs: duplicates (with the `file:line` of every copy),
//! invalid lines (with their line numbers), IDs dated in the future, and per (datacenter,
//! worker) counts and time ranges. The engine behind `snowflake audit`.
//!
//! # How
//! Every ID is kept with the number of the line it came from, 16 bytes a record, in a buffer
//! sized from the memory budget. When the buffer is full it is radix-sorted and spilled to one
//! unnamed temporary file as a compressed sorted run; at the end the runs and the last buffer
//! are merged in ID order, and equal neighbours are the duplicates. Memory therefore stays
//! within the budget (records and the sort's scratch) plus a small read buffer per run,
//! whatever the input's size; the disk holds about 6 bytes per spilled ID. Counts, time ranges
//! and future dates are taken while reading, in one pass.
//!
//! ```
//! use snowflake_audit::{Auditor, Options};
//!
//! let mut audit = Auditor::new(Options::default());
//! audit.read("ids.txt", "1724551110457221119\n7\n7\nnot-an-id\n".as_bytes(), &mut |_| {}).unwrap();
//! let report = audit.finish().unwrap();
//! assert_eq!((report.ids, report.unique, report.duplicates, report.invalid), (4 - 1, 2, 1, 1));
//! assert_eq!(report.duplicate_examples[0].at, ["ids.txt:2", "ids.txt:3"]);
//! assert!(!report.is_clean());
//! ```

#![deny(missing_docs)]

mod lines;
mod parse;
mod report;
mod runs;

pub use report::{DuplicateExample, FutureExample, InvalidExample, NodeReport, Report, TimeRange};
pub use runs::SpillError;

use lines::{Line, LineReader};
use parse::{Parsed, parse_line};
use runs::{RECORD_BYTES, Record, Spill};
use snowflake_core::{Layout, SnowflakeId};
use std::collections::HashMap;
use std::io::Read;
use std::path::PathBuf;

/// How an audit runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// How IDs are decoded (the epoch matters for times and future dates); an ID above its
    /// largest is an invalid line.
    pub layout: Layout,
    /// IDs dated after this Unix time (ms) are counted as dated in the future.
    pub now_ms: u64,
    /// Memory for the records being sorted, including the sort's scratch space; above it,
    /// sorted runs are spilled to `temp_dir`.
    pub memory_bytes: usize,
    /// Where sorted runs are spilled (an unnamed file, removed when the audit ends).
    pub temp_dir: PathBuf,
    /// How many examples of each finding (duplicates, invalid lines, future dates) to keep.
    pub examples: usize,
    /// Lines longer than this are invalid (and not kept in memory).
    pub max_line_bytes: usize,
    /// How many IDs are read between two progress reports.
    pub progress_every: u64,
    /// Whether an ID dated in the future fails the audit (`--fail-on-future`); such IDs are
    /// reported either way.
    pub fail_on_future: bool,
}

/// At most this many copies of one duplicated ID are listed in its example.
pub const MAX_LOCATIONS: usize = 10;

/// The smallest memory budget: 1 MiB (a smaller one makes the runs, and the merge, needlessly
/// many).
pub const MIN_MEMORY_BYTES: usize = 1 << 20;

impl Default for Options {
    /// The Twitter layout, the system clock, 160 MiB, the system's temporary directory, 10
    /// examples, 32 MiB lines (a million IDs as one JSON `"ids"` line is 22 MB).
    fn default() -> Options {
        Options {
            layout: Layout::TWITTER,
            now_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            memory_bytes: 160 << 20,
            temp_dir: std::env::temp_dir(),
            examples: 10,
            max_line_bytes: 32 << 20,
            progress_every: 1 << 20,
            fail_on_future: false,
        }
    }
}

/// What an audit reports while it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// IDs read so far, over all inputs.
    pub ids: u64,
    /// Bytes read so far, over all inputs.
    pub bytes: u64,
}

/// Why an audit could not finish.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An input could not be read.
    #[error("cannot read {name}: {source}")]
    Read {
        /// The input's name.
        name: String,
        /// What the system said.
        source: std::io::Error,
    },
    /// The temporary directory could not take a sorted run (full, missing, read-only).
    #[error(transparent)]
    Spill(#[from] SpillError),
}

/// Per (datacenter, worker): how many IDs and their time range.
#[derive(Debug, Clone, Copy)]
struct NodeStats {
    ids: u64,
    first_ms: u64,
    last_ms: u64,
}

/// An audit in progress: feed it inputs with [`Auditor::read`], then [`Auditor::finish`].
#[derive(Debug)]
pub struct Auditor {
    options: Options,
    /// The records not yet spilled.
    records: Vec<Record>,
    /// How many records the buffer holds before it is spilled.
    run_records: usize,
    /// The runs spilled so far.
    spill: Spill,
    /// Each input's name and the global number of its first line.
    sources: Vec<(String, u64)>,
    /// Lines read over all inputs (the next line's global number).
    lines: u64,
    ids: u64,
    blank: u64,
    invalid: u64,
    invalid_examples: Vec<(u64, String)>,
    future: u64,
    future_examples: Vec<Record>,
    /// Keyed by `datacenter << worker bits | worker`.
    nodes: HashMap<u64, NodeStats>,
    /// Bytes read by the inputs already finished.
    bytes: u64,
}

impl Auditor {
    /// An empty audit. The memory budget is raised to [`MIN_MEMORY_BYTES`] if below it.
    pub fn new(options: Options) -> Auditor {
        // Half for the records, half for the radix sort's scratch copy of them.
        let run_records = options.memory_bytes.max(MIN_MEMORY_BYTES) / (2 * RECORD_BYTES);
        Auditor {
            spill: Spill::new(&options.temp_dir),
            options,
            // Grown as needed (never past `run_records`), so a small audit stays small.
            records: Vec::new(),
            run_records,
            sources: Vec::new(),
            lines: 0,
            ids: 0,
            blank: 0,
            invalid: 0,
            invalid_examples: Vec::new(),
            future: 0,
            future_examples: Vec::new(),
            nodes: HashMap::new(),
            bytes: 0,
        }
    }

    /// Reads every line of `input`, named `name` in the report (`name:line`). `progress` is
    /// called every [`Options::progress_every`] IDs.
    pub fn read(
        &mut self,
        name: &str,
        input: impl Read,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<(), Error> {
        self.sources.push((name.to_owned(), self.lines));
        let mut reader = LineReader::new(input, self.options.max_line_bytes);
        let layout = self.options.layout;
        let bits = layout.bits();
        let node_shift = bits.sequence;
        let node_mask = (1u64 << (bits.datacenter + bits.worker)) - 1;
        let time_shift = bits.sequence + bits.worker + bits.datacenter;
        let epoch_ms = layout.epoch_ms();
        let max_id = layout.max_id().as_u64();
        // The last node seen and its stats: consecutive IDs mostly come from one node.
        let mut cached: Option<(u64, NodeStats)> = None;
        let mut next_progress = self.ids + self.options.progress_every.max(1);
        loop {
            let line = reader.next_line().map_err(|source| Error::Read {
                name: name.to_owned(),
                source,
            })?;
            let Some(line) = line else { break };
            let number = self.lines;
            self.lines += 1;
            let parsed = match line {
                Line::Overlong => Err(format!(
                    "line longer than {} bytes",
                    self.options.max_line_bytes
                )),
                Line::Text(text) => parse_line(text, max_id),
            };
            let one;
            let ids: &[u64] = match &parsed {
                Ok(Parsed::Blank) => {
                    self.blank += 1;
                    continue;
                }
                Ok(Parsed::One(id)) => {
                    one = [*id];
                    &one
                }
                Ok(Parsed::Many(ids)) => ids,
                Err(reason) => {
                    self.invalid += 1;
                    if self.invalid_examples.len() < self.options.examples {
                        self.invalid_examples.push((number, reason.clone()));
                    }
                    continue;
                }
            };
            for &id in ids {
                let node = (id >> node_shift) & node_mask;
                let timestamp_ms = (id >> time_shift) + epoch_ms;
                let stats = match &mut cached {
                    Some((cached_node, stats)) if *cached_node == node => stats,
                    _ => {
                        if let Some((old, stats)) = cached.take() {
                            self.nodes.insert(old, stats);
                        }
                        let stats = self.nodes.remove(&node).unwrap_or(NodeStats {
                            ids: 0,
                            first_ms: timestamp_ms,
                            last_ms: timestamp_ms,
                        });
                        &mut cached.insert((node, stats)).1
                    }
                };
                stats.ids += 1;
                stats.first_ms = stats.first_ms.min(timestamp_ms);
                stats.last_ms = stats.last_ms.max(timestamp_ms);
                let record = Record { id, line: number };
                if timestamp_ms > self.options.now_ms {
                    self.future += 1;
                    if self.future_examples.len() < self.options.examples {
                        self.future_examples.push(record);
                    }
                }
                if self.records.len() == self.run_records {
                    self.spill.spill(&mut self.records)?;
                }
                if self.records.len() == self.records.capacity() {
                    // Double, but never past the run's size.
                    let len = self.records.len();
                    let want = len.max(1 << 16).min(self.run_records - len);
                    self.records.reserve_exact(want);
                }
                self.records.push(record);
                self.ids += 1;
                if self.ids >= next_progress {
                    next_progress = self.ids + self.options.progress_every.max(1);
                    progress(Progress {
                        ids: self.ids,
                        bytes: self.bytes + reader.bytes_read(),
                    });
                }
            }
        }
        if let Some((node, stats)) = cached {
            self.nodes.insert(node, stats);
        }
        self.bytes += reader.bytes_read();
        Ok(())
    }

    /// Sorts and merges what was read, and reports.
    pub fn finish(mut self) -> Result<Report, Error> {
        let examples = self.options.examples;
        let mut unique = 0u64;
        let mut duplicate_ids = 0u64;
        // The current run of equal IDs: its ID, how many, the first lines.
        let mut current: Option<(u64, u64)> = None;
        let mut lines_of_current: Vec<u64> = Vec::new();
        let mut duplicate_lines: Vec<(u64, u64, Vec<u64>)> = Vec::new();
        let mut close = |current: Option<(u64, u64)>, lines: &mut Vec<u64>| {
            if let Some((id, copies)) = current
                && copies > 1
            {
                duplicate_ids += 1;
                if duplicate_lines.len() < examples {
                    duplicate_lines.push((id, copies, std::mem::take(lines)));
                }
            }
            lines.clear();
        };
        let buffer_bytes =
            (self.options.memory_bytes / 4 / (self.spill.runs() + 1)).clamp(4 << 10, 256 << 10);
        self.spill.merge(
            &mut self.records,
            buffer_bytes,
            |record| match &mut current {
                Some((id, copies)) if *id == record.id => {
                    *copies += 1;
                    if lines_of_current.len() < MAX_LOCATIONS {
                        lines_of_current.push(record.line);
                    }
                }
                _ => {
                    close(current, &mut lines_of_current);
                    unique += 1;
                    current = Some((record.id, 1));
                    lines_of_current.push(record.line);
                }
            },
        )?;
        close(current, &mut lines_of_current);
        let layout = self.options.layout;
        let at = |line: u64| self.location(line);
        let mut nodes: Vec<NodeReport> = self
            .nodes
            .iter()
            .map(|(&node, stats)| {
                let worker_bits = layout.bits().worker;
                NodeReport {
                    datacenter_id: node >> worker_bits,
                    worker_id: node & ((1 << worker_bits) - 1),
                    ids: stats.ids,
                    first_ms: stats.first_ms,
                    last_ms: stats.last_ms,
                }
            })
            .collect();
        nodes.sort_by_key(|n| (n.datacenter_id, n.worker_id));
        let time_range = nodes
            .iter()
            .map(|n| (n.first_ms, n.last_ms))
            .reduce(|a, b| (a.0.min(b.0), a.1.max(b.1)))
            .map(|(first_ms, last_ms)| TimeRange::new(first_ms, last_ms));
        let describe = |id: u64| {
            SnowflakeId::new(id)
                .and_then(|id| layout.describe(id).ok())
                .expect("parsed ids fit the layout")
        };
        Ok(Report {
            ids: self.ids,
            unique,
            duplicates: self.ids - unique,
            duplicate_ids,
            invalid: self.invalid,
            blank: self.blank,
            lines: self.lines,
            future: self.future,
            now_ms: self.options.now_ms,
            fail_on_future: self.options.fail_on_future,
            time_range,
            nodes,
            duplicate_examples: duplicate_lines
                .into_iter()
                .map(|(id, copies, lines)| DuplicateExample {
                    decoded: describe(id),
                    copies,
                    at: lines.into_iter().map(at).collect(),
                })
                .collect(),
            invalid_examples: self
                .invalid_examples
                .iter()
                .map(|(line, reason)| InvalidExample {
                    at: at(*line),
                    reason: reason.clone(),
                })
                .collect(),
            future_examples: self
                .future_examples
                .iter()
                .map(|record| FutureExample {
                    decoded: describe(record.id),
                    at: at(record.line),
                })
                .collect(),
            inputs: self.sources.iter().map(|(name, _)| name.clone()).collect(),
            spilled_runs: self.spill.runs(),
            spilled_bytes: self.spill.bytes(),
        })
    }

    /// `name:line` (from 1) for a global line number.
    fn location(&self, line: u64) -> String {
        let index = self.sources.partition_point(|(_, first)| *first <= line) - 1;
        let (name, first) = &self.sources[index];
        format!("{name}:{}", line - first + 1)
    }
}

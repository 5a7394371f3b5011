//! Sorted runs of (ID, line) records, spilled to one temporary file when memory is full, and
//! merged back in ID order: an external sort, so that any number of IDs is checked in bounded
//! memory.
//!
//! A run is sorted with a radix sort (which skips the bytes every key shares: IDs of one period
//! agree on their top bytes) and written as varints: the ID's difference from the previous
//! one (small, as the run is sorted) and the line. All runs share one file, so a billion IDs
//! need no more file descriptors than ten; each run is read back through its own small buffer.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// One ID and the input line it came from (a line number across all inputs, from 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Record {
    pub(crate) id: u64,
    pub(crate) line: u64,
}

/// Bytes of one record in memory.
pub(crate) const RECORD_BYTES: usize = std::mem::size_of::<Record>();

/// Why spilling sorted IDs to the temporary directory failed (full, missing, read-only).
#[derive(Debug, thiserror::Error)]
#[error("cannot spill sorted ids to the temporary directory {}: {source}", dir.display())]
pub struct SpillError {
    dir: PathBuf,
    source: io::Error,
}

/// Where a spilled run lies in the spill file.
#[derive(Debug, Clone, Copy)]
struct RunExtent {
    offset: u64,
    bytes: u64,
    records: u64,
}

/// The runs written so far.
pub(crate) struct Spill {
    /// The temporary directory, for messages.
    dir: PathBuf,
    /// The spill file (unnamed: removed by the system when closed, also after a crash).
    file: Option<File>,
    /// One past the last byte written.
    written: u64,
    /// Each run's place.
    runs: Vec<RunExtent>,
}

impl std::fmt::Debug for Spill {
    /// What matters: how many runs, how many bytes (not the file handle or every extent).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spill")
            .field("runs", &self.runs.len())
            .field("bytes", &self.written)
            .finish()
    }
}

impl Spill {
    pub(crate) fn new(dir: &Path) -> Spill {
        Spill {
            dir: dir.to_path_buf(),
            file: None,
            written: 0,
            runs: Vec::new(),
        }
    }

    /// How many runs were spilled.
    pub(crate) fn runs(&self) -> usize {
        self.runs.len()
    }

    /// Bytes written to the spill file.
    pub(crate) fn bytes(&self) -> u64 {
        self.written
    }

    fn error(&self, source: io::Error) -> SpillError {
        SpillError {
            dir: self.dir.clone(),
            source,
        }
    }

    /// Sorts `records` and appends them to the spill file as one run; empties `records`.
    pub(crate) fn spill(&mut self, records: &mut Vec<Record>) -> Result<(), SpillError> {
        sort(records);
        if self.file.is_none() {
            let file = tempfile::tempfile_in(&self.dir).map_err(|e| self.error(e))?;
            self.file = Some(file);
        }
        let file = self.file.as_ref().expect("just opened");
        let mut out = BufWriter::with_capacity(1 << 20, OffsetWriter::new(file, self.written));
        let mut previous = 0u64;
        let mut scratch = [0u8; 20];
        for record in records.iter() {
            let mut n = put_varint(&mut scratch, record.id - previous);
            n += put_varint(&mut scratch[n..], record.line);
            out.write_all(&scratch[..n]).map_err(|e| self.error(e))?;
            previous = record.id;
        }
        out.flush().map_err(|e| self.error(e))?;
        let end = out.get_ref().offset;
        drop(out);
        self.runs.push(RunExtent {
            offset: self.written,
            bytes: end - self.written,
            records: records.len() as u64,
        });
        self.written = end;
        records.clear();
        Ok(())
    }

    /// Merges the spilled runs and `last` (sorted here) in ID order, handing each record to
    /// `each`. `buffer_bytes` is the read buffer of each spilled run.
    pub(crate) fn merge(
        &self,
        last: &mut [Record],
        buffer_bytes: usize,
        mut each: impl FnMut(Record),
    ) -> Result<(), SpillError> {
        sort(last);
        if self.runs.is_empty() {
            last.iter().copied().for_each(each);
            return Ok(());
        }
        let file = self.file.as_ref().expect("runs were spilled");
        let mut readers: Vec<RunReader<'_>> = self
            .runs
            .iter()
            .map(|extent| RunReader::new(file, *extent, buffer_bytes))
            .collect();
        let mut memory = last.iter().copied();
        let memory_index = readers.len();
        // The head of every run: (record, run index); the smallest comes out first.
        let mut heads = BinaryHeap::with_capacity(readers.len() + 1);
        for (index, reader) in readers.iter_mut().enumerate() {
            if let Some(record) = reader.next().map_err(|e| self.error(e))? {
                heads.push(Reverse((record, index)));
            }
        }
        if let Some(record) = memory.next() {
            heads.push(Reverse((record, memory_index)));
        }
        while let Some(mut top) = heads.peek_mut() {
            let Reverse((record, index)) = *top;
            each(record);
            let next = if index == memory_index {
                memory.next()
            } else {
                readers[index].next().map_err(|e| self.error(e))?
            };
            match next {
                Some(next) => *top = Reverse((next, index)),
                None => {
                    std::collections::binary_heap::PeekMut::pop(top);
                }
            }
        }
        Ok(())
    }
}

/// Sorts records by ID (a stable radix sort: equal IDs keep their input order, which is line
/// order within a run).
pub(crate) fn sort(records: &mut [Record]) {
    radsort::sort_by_key(records, |record| record.id);
}

/// Writes at a position of a file shared by reference (`pwrite`), so no seek state is needed.
struct OffsetWriter<'a> {
    file: &'a File,
    offset: u64,
}

impl<'a> OffsetWriter<'a> {
    fn new(file: &'a File, offset: u64) -> OffsetWriter<'a> {
        OffsetWriter { file, offset }
    }
}

impl Write for OffsetWriter<'_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let n = self.file.write_at(bytes, self.offset)?;
        self.offset += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Reads one spilled run back, record by record.
struct RunReader<'a> {
    file: &'a File,
    /// The next byte of the run to read from the file, and one past its last.
    offset: u64,
    end: u64,
    /// Records not yet returned.
    left: u64,
    /// Read and not yet decoded: `buf[pos..len]`.
    buf: Vec<u8>,
    pos: usize,
    len: usize,
    /// The previous record's ID (IDs are stored as differences).
    previous: u64,
}

impl<'a> RunReader<'a> {
    fn new(file: &'a File, extent: RunExtent, buffer_bytes: usize) -> RunReader<'a> {
        RunReader {
            file,
            offset: extent.offset,
            end: extent.offset + extent.bytes,
            left: extent.records,
            buf: vec![0; buffer_bytes.max(64)],
            pos: 0,
            len: 0,
            previous: 0,
        }
    }

    fn next(&mut self) -> io::Result<Option<Record>> {
        if self.left == 0 {
            return Ok(None);
        }
        // A record takes at most 20 bytes: refill when fewer are buffered and more are left.
        if self.len - self.pos < 20 && self.offset < self.end {
            self.buf.copy_within(self.pos..self.len, 0);
            self.len -= self.pos;
            self.pos = 0;
            let room = self.buf.len() - self.len;
            let want = usize::try_from(self.end - self.offset).map_or(room, |left| left.min(room));
            self.file
                .read_exact_at(&mut self.buf[self.len..self.len + want], self.offset)?;
            self.len += want;
            self.offset += want as u64;
        }
        let corrupt = || io::Error::new(io::ErrorKind::InvalidData, "a spilled run is corrupt");
        let (delta, n) = get_varint(&self.buf[self.pos..self.len]).ok_or_else(corrupt)?;
        self.pos += n;
        let (line, n) = get_varint(&self.buf[self.pos..self.len]).ok_or_else(corrupt)?;
        self.pos += n;
        self.left -= 1;
        self.previous = self.previous.checked_add(delta).ok_or_else(corrupt)?;
        Ok(Some(Record {
            id: self.previous,
            line,
        }))
    }
}

/// LEB128: seven bits a byte, low first; returns the bytes written (at most 10).
fn put_varint(out: &mut [u8], mut value: u64) -> usize {
    let mut n = 0;
    while value >= 0x80 {
        out[n] = (value as u8) | 0x80;
        value >>= 7;
        n += 1;
    }
    out[n] = value as u8;
    n + 1
}

/// The value and the bytes it took, or `None` when the bytes end first or run past 64 bits.
fn get_varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for (i, &byte) in bytes.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f).checked_shl(7 * i as u32)?;
        if byte < 0x80 {
            return Some((value, i + 1));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip() {
        let mut buf = [0u8; 10];
        for value in [
            0,
            1,
            127,
            128,
            300,
            u64::from(u32::MAX),
            u64::MAX - 1,
            u64::MAX,
        ] {
            let n = put_varint(&mut buf, value);
            assert_eq!(get_varint(&buf[..n]), Some((value, n)));
            assert_eq!(get_varint(&buf[..n - 1]), None, "{value}: cut short");
        }
        assert_eq!(get_varint(&[0xff; 11]), None);
    }

    /// A pseudo-random sequence, so the test needs no dependency.
    fn scramble(i: u64) -> u64 {
        let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        x ^= x >> 29;
        x % 50_000
    }

    #[test]
    fn spilled_runs_merge_back_in_id_order_with_every_record() {
        let dir = tempfile::tempdir().unwrap();
        let mut spill = Spill::new(dir.path());
        let mut records = Vec::new();
        let mut all = Vec::new();
        for line in 0..100_000u64 {
            let record = Record {
                id: scramble(line) << 22,
                line,
            };
            records.push(record);
            all.push(record);
            if records.len() == 7_000 {
                spill.spill(&mut records).unwrap();
            }
        }
        assert_eq!(spill.runs(), 14);
        let mut merged = Vec::new();
        spill.merge(&mut records, 100, |r| merged.push(r)).unwrap();
        all.sort_by_key(|r| r.id);
        let ids = |v: &[Record]| v.iter().map(|r| r.id).collect::<Vec<_>>();
        assert_eq!(ids(&merged), ids(&all));
        merged.sort();
        all.sort();
        assert_eq!(merged, all);
        // No file is left in the directory: the spill file has no name.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn nothing_spilled_merges_the_memory_run_alone() {
        let dir = tempfile::tempdir().unwrap();
        let spill = Spill::new(dir.path());
        let mut records = vec![Record { id: 5, line: 0 }, Record { id: 2, line: 1 }];
        let mut merged = Vec::new();
        spill.merge(&mut records, 100, |r| merged.push(r)).unwrap();
        assert_eq!(
            merged,
            [Record { id: 2, line: 1 }, Record { id: 5, line: 0 }]
        );
        assert_eq!(spill.bytes(), 0);
    }

    #[test]
    fn an_unwritable_directory_is_named() {
        let mut spill = Spill::new(Path::new("/nonexistent/audit"));
        let err = spill
            .spill(&mut vec![Record { id: 1, line: 0 }])
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(
                "cannot spill sorted ids to the temporary directory /nonexistent/audit:"
            ),
            "{err}"
        );
    }
}

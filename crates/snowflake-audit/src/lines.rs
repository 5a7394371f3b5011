//! Splitting a byte stream into lines in bounded memory.
//!
//! Lines are handed out as slices of one reusable buffer, without a copy for the lines that fit
//! in it. A line longer than the limit is not collected: it is reported as [`Line::Overlong`] and
//! its bytes are skipped up to the next newline, so a file without newlines (or a hostile one)
//! costs no more memory than the limit.

use std::io::{self, ErrorKind, Read};

/// How many bytes are asked of the reader at a time.
const READ_SIZE: usize = 1 << 20;

/// One line of input, without its newline.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Line<'a> {
    /// A line of at most the limit's length.
    Text(&'a [u8]),
    /// A line longer than the limit; its bytes were skipped.
    Overlong,
}

/// Reads lines of at most `max_line_bytes` from a reader.
pub(crate) struct LineReader<R> {
    /// Where the bytes come from.
    reader: R,
    /// Bytes read and not yet handed out are `buf[start..end]`.
    buf: Vec<u8>,
    /// The first byte not yet handed out.
    start: usize,
    /// One past the last byte read.
    end: usize,
    /// The longest line collected; longer ones are [`Line::Overlong`].
    max_line_bytes: usize,
    /// Set when the reader said it has no more.
    eof: bool,
    /// Bytes read so far, for progress reports.
    bytes_read: u64,
}

impl<R: Read> LineReader<R> {
    pub(crate) fn new(reader: R, max_line_bytes: usize) -> LineReader<R> {
        LineReader {
            reader,
            buf: vec![0; READ_SIZE.min(max_line_bytes.saturating_add(1)).max(4096)],
            start: 0,
            end: 0,
            max_line_bytes,
            eof: false,
            bytes_read: 0,
        }
    }

    /// Bytes read from the reader so far.
    pub(crate) fn bytes_read(&self) -> u64 {
        self.bytes_read
    }

    /// The next line, or `None` at the end of the input. A last line without a newline is a
    /// line; an input that ends with a newline has no empty line after it.
    pub(crate) fn next_line(&mut self) -> io::Result<Option<Line<'_>>> {
        let mut searched = self.start;
        loop {
            if let Some(at) = memchr::memchr(b'\n', &self.buf[searched..self.end]) {
                let newline = searched + at;
                let line = self.start..newline;
                self.start = newline + 1;
                if line.len() > self.max_line_bytes {
                    return Ok(Some(Line::Overlong));
                }
                return Ok(Some(Line::Text(&self.buf[line])));
            }
            searched = self.end;
            if self.eof {
                if self.start == self.end {
                    return Ok(None);
                }
                let line = self.start..self.end;
                self.start = self.end;
                if line.len() > self.max_line_bytes {
                    return Ok(Some(Line::Overlong));
                }
                return Ok(Some(Line::Text(&self.buf[line])));
            }
            if self.end - self.start > self.max_line_bytes {
                self.skip_rest_of_line()?;
                return Ok(Some(Line::Overlong));
            }
            // Make room: move the partial line to the front, then grow if it fills the buffer.
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                searched -= self.start;
                self.end -= self.start;
                self.start = 0;
            }
            if self.end == self.buf.len() {
                let grown = (self.buf.len() * 2).min(self.max_line_bytes.saturating_add(1));
                let grown = grown.max(self.buf.len() + 1);
                self.buf.resize(grown, 0);
            }
            self.fill()?;
        }
    }

    /// Reads more after `end`; sets `eof` when the reader has no more.
    fn fill(&mut self) -> io::Result<()> {
        let want = (self.buf.len() - self.end).min(READ_SIZE);
        loop {
            match self.reader.read(&mut self.buf[self.end..self.end + want]) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(());
                }
                Ok(n) => {
                    self.end += n;
                    self.bytes_read += n as u64;
                    return Ok(());
                }
                Err(err) if err.kind() == ErrorKind::Interrupted => {}
                Err(err) => return Err(err),
            }
        }
    }

    /// Drops the buffered part of an overlong line and reads on, without keeping anything,
    /// past its newline (or to the end of the input).
    fn skip_rest_of_line(&mut self) -> io::Result<()> {
        self.start = 0;
        self.end = 0;
        loop {
            self.fill()?;
            if self.eof {
                return Ok(());
            }
            if let Some(at) = memchr::memchr(b'\n', &self.buf[..self.end]) {
                self.start = at + 1;
                return Ok(());
            }
            self.end = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that hands out at most `chunk` bytes per read, to cross every boundary.
    struct Trickle<'a> {
        data: &'a [u8],
        chunk: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            let n = self.data.len().min(self.chunk).min(out.len());
            out[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    fn lines(data: &[u8], max: usize, chunk: usize) -> Vec<Option<Vec<u8>>> {
        let mut reader = LineReader::new(Trickle { data, chunk }, max);
        let mut out = Vec::new();
        while let Some(line) = reader.next_line().unwrap() {
            out.push(match line {
                Line::Text(text) => Some(text.to_vec()),
                Line::Overlong => None,
            });
        }
        assert_eq!(reader.bytes_read(), data.len() as u64);
        out
    }

    #[test]
    fn lines_come_out_whole_whatever_the_read_sizes() {
        let data = b"1\n22\n\n333\n4444";
        let expected: Vec<Option<Vec<u8>>> = vec![
            Some(b"1".to_vec()),
            Some(b"22".to_vec()),
            Some(Vec::new()),
            Some(b"333".to_vec()),
            Some(b"4444".to_vec()),
        ];
        for chunk in [1, 2, 3, 7, 100] {
            assert_eq!(lines(data, 100, chunk), expected, "chunk {chunk}");
        }
        assert_eq!(lines(b"1\n", 100, 1), vec![Some(b"1".to_vec())]);
        assert!(lines(b"", 100, 1).is_empty());
    }

    #[test]
    fn an_overlong_line_is_skipped_without_being_kept() {
        let mut data = b"12\n".to_vec();
        data.extend(std::iter::repeat_n(b'9', 50_000));
        data.extend(b"\n34\n");
        data.extend(std::iter::repeat_n(b'8', 20_000));
        for chunk in [1, 999, 4096, 100_000] {
            let got = lines(&data, 10, chunk);
            assert_eq!(
                got,
                vec![Some(b"12".to_vec()), None, Some(b"34".to_vec()), None],
                "chunk {chunk}"
            );
        }
        // Exactly the limit is still a line; one more byte is not.
        assert_eq!(
            lines(b"1234\n12345\n", 4, 2),
            vec![Some(b"1234".to_vec()), None]
        );
        // A long line within a generous limit grows the buffer instead.
        let long = vec![b'7'; 3 * READ_SIZE];
        assert_eq!(
            lines(&long, 4 * READ_SIZE, READ_SIZE),
            vec![Some(long.clone())]
        );
    }

    #[test]
    fn the_buffer_never_grows_past_the_limit() {
        let data = vec![b'5'; 10 * READ_SIZE];
        let mut reader = LineReader::new(&data[..], 2 * READ_SIZE);
        assert_eq!(reader.next_line().unwrap(), Some(Line::Overlong));
        assert!(reader.buf.len() <= 2 * READ_SIZE + 1);
        assert_eq!(reader.next_line().unwrap(), None);
    }
}

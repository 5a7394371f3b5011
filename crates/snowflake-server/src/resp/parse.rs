//! A bounded RESP request parser: the multibulk form every client library sends
//! (`*N\r\n$len\r\narg\r\n…`) and the inline form `redis-cli` and telnet users type
//! (`INCR ids\r\n`). It never allocates what a request claims: lengths are checked against the
//! limits before anything is read, and arguments are returned as ranges of the input buffer.

use std::ops::Range;

/// How large a request may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The longest inline command line, and the longest `*N`/`$N` header line.
    pub max_inline_bytes: usize,
    /// The most arguments in one command.
    pub max_args: usize,
    /// The most bytes of arguments in one command, all of them together.
    pub max_bulk_bytes: usize,
}

impl Default for Limits {
    /// Small: every command answered here takes a few short arguments, and a connection holds
    /// at most one request's worth (about 10 KiB) while it is unfinished, so that the connection
    /// cap bounds the memory of unfinished requests (see docs/reliability.md, "Memory").
    fn default() -> Self {
        Limits {
            max_inline_bytes: 4 * 1024,
            max_args: 64,
            max_bulk_bytes: 4 * 1024,
        }
    }
}

/// A request the parser refuses; the connection answers `-ERR Protocol error: …` and closes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Protocol error: {0}")]
pub struct ProtocolError(pub String);

/// One parsed command: its arguments as ranges of the input, and how many bytes it took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    /// The arguments (the command name first); empty for a blank inline line or `*0`.
    pub args: Vec<Range<usize>>,
    /// Bytes of the input the command used.
    pub consumed: usize,
}

/// Parses the first command of `buf`: `Ok(None)` when more bytes are needed.
pub fn parse(buf: &[u8], limits: &Limits) -> Result<Option<Parsed>, ProtocolError> {
    let mut args = Vec::new();
    Ok(parse_into(buf, limits, &mut args)?.map(|consumed| Parsed { args, consumed }))
}

/// [`parse`] into a caller's vector of argument ranges (cleared first), so that a connection
/// reuses one: the bytes the command used, or `Ok(None)` when more bytes are needed.
pub fn parse_into(
    buf: &[u8],
    limits: &Limits,
    args: &mut Vec<Range<usize>>,
) -> Result<Option<usize>, ProtocolError> {
    args.clear();
    match buf.first() {
        None => Ok(None),
        Some(b'*') => parse_multibulk(buf, limits, args),
        Some(_) => parse_inline(buf, limits, args),
    }
}

/// The end of the line starting at `from` (the index of its `\n`), if it is there; an error when
/// it is longer than `max` without one.
fn line_end(
    buf: &[u8],
    from: usize,
    max: usize,
    what: &str,
) -> Result<Option<usize>, ProtocolError> {
    let window = &buf[from..buf.len().min(from.saturating_add(max).saturating_add(2))];
    match window.iter().position(|&b| b == b'\n') {
        Some(i) => Ok(Some(from + i)),
        None if window.len() > max => Err(ProtocolError(format!("{what} longer than {max} bytes"))),
        None => Ok(None),
    }
}

/// A decimal header number (`*N` or `$N`) between `from` and the line end `end` (`\r\n`).
fn header_number(buf: &[u8], from: usize, end: usize, what: &str) -> Result<i64, ProtocolError> {
    if end == from || buf[end - 1] != b'\r' {
        return Err(ProtocolError(format!("expected '\\r\\n' after the {what}")));
    }
    let digits = &buf[from..end - 1];
    let text = std::str::from_utf8(digits).unwrap_or("");
    let ok = !text.is_empty()
        && text.len() <= 20
        && text
            .strip_prefix('-')
            .unwrap_or(text)
            .bytes()
            .all(|b| b.is_ascii_digit());
    match text.parse::<i64>() {
        Ok(n) if ok => Ok(n),
        _ => Err(ProtocolError(format!(
            "invalid {what} {:?}",
            String::from_utf8_lossy(&digits[..digits.len().min(32)])
        ))),
    }
}

fn parse_multibulk(
    buf: &[u8],
    limits: &Limits,
    args: &mut Vec<Range<usize>>,
) -> Result<Option<usize>, ProtocolError> {
    let Some(end) = line_end(buf, 1, limits.max_inline_bytes, "multibulk length")? else {
        return Ok(None);
    };
    let count = header_number(buf, 1, end, "multibulk length")?;
    let mut at = end + 1;
    if count <= 0 {
        // `*0` and `*-1`: nothing to run (Redis skips them too).
        return Ok(Some(at));
    }
    let count = usize::try_from(count).unwrap_or(usize::MAX);
    if count > limits.max_args {
        return Err(ProtocolError(format!(
            "a command of {count} arguments; at most {} are accepted",
            limits.max_args
        )));
    }
    let mut total: usize = 0;
    for _ in 0..count {
        match buf.get(at) {
            None => return Ok(None),
            Some(b'$') => {}
            Some(&other) => {
                return Err(ProtocolError(format!(
                    "expected '$', got '{}'",
                    char::from(other).escape_default()
                )));
            }
        }
        let Some(end) = line_end(buf, at + 1, limits.max_inline_bytes, "bulk length")? else {
            return Ok(None);
        };
        let len = header_number(buf, at + 1, end, "bulk length")?;
        let len = usize::try_from(len).map_err(|_| ProtocolError("invalid bulk length".into()))?;
        total = total.saturating_add(len);
        if total > limits.max_bulk_bytes {
            return Err(ProtocolError(format!(
                "a command of {total} or more bytes of arguments; at most {} are accepted",
                limits.max_bulk_bytes
            )));
        }
        let start = end + 1;
        let stop = start + len;
        if buf.len() < stop + 2 {
            return Ok(None);
        }
        if &buf[stop..stop + 2] != b"\r\n" {
            return Err(ProtocolError(
                "expected '\\r\\n' after a bulk argument".into(),
            ));
        }
        args.push(start..stop);
        at = stop + 2;
    }
    Ok(Some(at))
}

fn parse_inline(
    buf: &[u8],
    limits: &Limits,
    args: &mut Vec<Range<usize>>,
) -> Result<Option<usize>, ProtocolError> {
    let Some(end) = line_end(buf, 0, limits.max_inline_bytes, "an inline command")? else {
        return Ok(None);
    };
    let line_stop = if end > 0 && buf[end - 1] == b'\r' {
        end - 1
    } else {
        end
    };
    let mut i = 0;
    while i < line_stop {
        while i < line_stop && buf[i].is_ascii_whitespace() {
            i += 1;
        }
        let start = i;
        while i < line_stop && !buf[i].is_ascii_whitespace() {
            i += 1;
        }
        if i > start {
            if args.len() == limits.max_args {
                return Err(ProtocolError(format!(
                    "an inline command of more than {} arguments",
                    limits.max_args
                )));
            }
            args.push(start..i);
        }
    }
    Ok(Some(end + 1))
}

#[cfg(test)]
mod tests {
    use super::{Limits, parse};
    use proptest::prelude::*;

    fn args(buf: &[u8]) -> (Vec<Vec<u8>>, usize) {
        let parsed = parse(buf, &Limits::default()).unwrap().unwrap();
        (
            parsed
                .args
                .iter()
                .map(|r| buf[r.clone()].to_vec())
                .collect(),
            parsed.consumed,
        )
    }

    #[test]
    fn multibulk_and_inline_commands() {
        let (a, n) = args(b"*2\r\n$4\r\nINCR\r\n$3\r\nids\r\n*1\r\n");
        assert_eq!(a, [b"INCR".to_vec(), b"ids".to_vec()]);
        assert_eq!(n, 23);
        let (a, n) = args(b"incr  ids\r\nPING");
        assert_eq!(a, [b"incr".to_vec(), b"ids".to_vec()]);
        assert_eq!(n, 11);
        let (a, _) = args(b"PING\n");
        assert_eq!(a, [b"PING".to_vec()]);
        // Binary-safe arguments.
        let (a, _) = args(b"*1\r\n$4\r\na\r\nb\r\n");
        assert_eq!(a, [b"a\r\nb".to_vec()]);
        assert_eq!(args(b"*0\r\n").0, Vec::<Vec<u8>>::new());
        assert_eq!(args(b"\r\n").0, Vec::<Vec<u8>>::new());
    }

    #[test]
    fn partial_input_asks_for_more() {
        let full = b"*2\r\n$4\r\nINCR\r\n$3\r\nids\r\n";
        for cut in 0..full.len() {
            assert_eq!(
                parse(&full[..cut], &Limits::default()),
                Ok(None),
                "cut at {cut}"
            );
        }
        assert_eq!(parse(b"INCR ids", &Limits::default()), Ok(None));
    }

    #[test]
    fn oversized_and_garbage_requests_are_refused_without_allocating() {
        let limits = Limits {
            max_inline_bytes: 16,
            max_args: 4,
            max_bulk_bytes: 8,
        };
        let refused = |buf: &[u8], needle: &str| {
            let err = parse(buf, &limits).unwrap_err().to_string();
            assert!(err.contains(needle), "{err:?} lacks {needle:?}");
        };
        refused(b"*5\r\n", "5 arguments; at most 4");
        refused(b"*1\r\n$9\r\n", "9 or more bytes of arguments; at most 8");
        refused(
            b"*2\r\n$5\r\nabcde\r\n$5\r\n",
            "10 or more bytes of arguments; at most 8",
        );
        refused(b"*1\r\n$99999999999999999999\r\n", "bulk length");
        refused(b"*1\r\n$9999999999\r\n", "9999999999 or more bytes");
        refused(b"*1\r\n$-5\r\n", "invalid bulk length");
        refused(b"*x\r\n", "invalid multibulk length");
        refused(b"*1\r\n+OK\r\n", "expected '$'");
        refused(b"*1\r\n$2\r\nabcd", "expected '\\r\\n' after a bulk");
        refused(b"*1\n", "expected '\\r\\n' after the multibulk length");
        refused(&[b'a'; 40], "an inline command longer than 16 bytes");
        refused(b"*99999999999999999999999\r\n", "multibulk length");
        refused(b"a b c d e\r\n", "more than 4 arguments");
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic_and_progress(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let limits = Limits { max_inline_bytes: 64, max_args: 8, max_bulk_bytes: 64 };
            let mut at = 0;
            while at < bytes.len() {
                match parse(&bytes[at..], &limits) {
                    Ok(Some(parsed)) => {
                        prop_assert!(parsed.consumed > 0 && parsed.consumed <= bytes.len() - at);
                        for r in &parsed.args {
                            prop_assert!(r.end <= parsed.consumed);
                        }
                        at += parsed.consumed;
                    }
                    Ok(None) | Err(_) => break,
                }
            }
        }

        #[test]
        fn encoded_commands_parse_back(words in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 1..6)) {
            let mut buf = format!("*{}\r\n", words.len()).into_bytes();
            for w in &words {
                buf.extend_from_slice(format!("${}\r\n", w.len()).as_bytes());
                buf.extend_from_slice(w);
                buf.extend_from_slice(b"\r\n");
            }
            let parsed = parse(&buf, &Limits::default()).unwrap().unwrap();
            prop_assert_eq!(parsed.consumed, buf.len());
            let back: Vec<Vec<u8>> = parsed.args.iter().map(|r| buf[r.clone()].to_vec()).collect();
            prop_assert_eq!(back, words);
        }
    }
}

//! A minimal asynchronous client for the 2010 Thrift service, for the peer sanity checks of a
//! ZooKeeper fleet: the three argument-less `i64` methods (`get_worker_id`,
//! `get_datacenter_id`, `get_timestamp`) over framed transport and the strict binary protocol,
//! exactly as a 2010 server asked its peers. Every call is bounded by a timeout, and an answer
//! larger than a small frame is refused.

use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The largest answer frame accepted (an `i64` reply is about 30 bytes; an exception's
/// message more).
const MAX_ANSWER_BYTES: usize = 64 * 1024;

const VERSION_1: u32 = 0x8001_0000;
const CALL: u32 = 1;
const REPLY: u32 = 2;
const EXCEPTION: u32 = 3;
const T_STOP: u8 = 0;
const T_I64: u8 = 10;
const T_STRING: u8 = 11;

/// One connection to a peer.
#[derive(Debug)]
pub struct Peer {
    addr: String,
    stream: TcpStream,
    seq: i32,
    timeout: Duration,
}

impl Peer {
    /// Connects to `addr` (`host:port`) within `timeout`.
    pub async fn connect(addr: &str, timeout: Duration) -> Result<Peer, String> {
        let stream = tokio::time::timeout(timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| format!("no connection to {addr} within {} ms", timeout.as_millis()))?
            .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
        let _ = stream.set_nodelay(true);
        Ok(Peer {
            addr: addr.to_owned(),
            stream,
            seq: 0,
            timeout,
        })
    }

    /// Calls `method` (no arguments, returns `i64`).
    pub async fn call_i64(&mut self, method: &str) -> Result<i64, String> {
        self.seq += 1;
        let addr = self.addr.clone();
        let timeout = self.timeout;
        tokio::time::timeout(timeout, self.exchange(method))
            .await
            .map_err(|_| {
                format!(
                    "{addr} did not answer {method} within {} ms",
                    timeout.as_millis()
                )
            })?
            .map_err(|e| format!("{addr}, {method}: {e}"))
    }

    async fn exchange(&mut self, method: &str) -> Result<i64, String> {
        let mut body = Vec::with_capacity(32 + method.len());
        body.extend_from_slice(&(VERSION_1 | CALL).to_be_bytes());
        body.extend_from_slice(&len_i32(method.len())?.to_be_bytes());
        body.extend_from_slice(method.as_bytes());
        body.extend_from_slice(&self.seq.to_be_bytes());
        // The empty argument struct.
        body.push(T_STOP);
        let mut frame = Vec::with_capacity(4 + body.len());
        frame.extend_from_slice(&len_i32(body.len())?.to_be_bytes());
        frame.extend_from_slice(&body);
        self.stream
            .write_all(&frame)
            .await
            .map_err(|e| format!("write: {e}"))?;

        let length = self
            .stream
            .read_i32()
            .await
            .map_err(|e| format!("read: {e}"))?;
        let length = usize::try_from(length)
            .ok()
            .filter(|&n| n <= MAX_ANSWER_BYTES)
            .ok_or_else(|| {
                format!("answer frame of {length} bytes (at most {MAX_ANSWER_BYTES})")
            })?;
        let mut answer = vec![0; length];
        self.stream
            .read_exact(&mut answer)
            .await
            .map_err(|e| format!("read: {e}"))?;
        parse_reply(&answer, method, self.seq)
    }
}

fn len_i32(n: usize) -> Result<i32, String> {
    i32::try_from(n).map_err(|_| format!("{n} bytes is too long for a Thrift frame"))
}

/// Reads a reply to `method` (sequence `seq`): the `i64` in field 0, or the exception's message.
fn parse_reply(bytes: &[u8], method: &str, seq: i32) -> Result<i64, String> {
    let mut r = Reader { bytes, at: 0 };
    let first = r.u32()?;
    let (kind, name) = if first & 0xffff_0000 == VERSION_1 {
        (first & 0xff, r.string()?)
    } else {
        // An old unversioned header: the name's length, the name, then the type byte.
        let name = r.take(usize::try_from(first).map_err(|_| "bad name length")?)?;
        let name = String::from_utf8_lossy(name).into_owned();
        (u32::from(r.u8()?), name)
    };
    let answered_seq = r.i32()?;
    if name != method || answered_seq != seq {
        return Err(format!(
            "answered {name:?} #{answered_seq} to {method:?} #{seq}"
        ));
    }
    match kind {
        REPLY => loop {
            let field_type = r.u8()?;
            if field_type == T_STOP {
                return Err("a reply without a result".into());
            }
            let id = r.i16()?;
            if id == 0 && field_type == T_I64 {
                return r.i64();
            }
            skip(&mut r, field_type)?;
        },
        EXCEPTION => {
            // TApplicationException { 1: string message, 2: i32 type }
            let mut message = String::new();
            loop {
                let field_type = r.u8()?;
                if field_type == T_STOP {
                    break;
                }
                let id = r.i16()?;
                if id == 1 && field_type == T_STRING {
                    message = r.string()?;
                } else {
                    skip(&mut r, field_type)?;
                }
            }
            Err(format!("the peer answered with an exception: {message}"))
        }
        other => Err(format!("unexpected message type {other}")),
    }
}

/// How deep a peer's answer may nest structs (Apache Thrift's default recursion limit).
const MAX_DEPTH: usize = 64;

/// Skips a value of a simple type (the only ones a result struct of this IDL holds), or a
/// struct of them nested at most [`MAX_DEPTH`] levels deep: a hostile or broken peer could
/// otherwise nest thousands of levels in one frame and overflow the stack.
fn skip(r: &mut Reader<'_>, field_type: u8) -> Result<(), String> {
    skip_at(r, field_type, 1)
}

fn skip_at(r: &mut Reader<'_>, field_type: u8, depth: usize) -> Result<(), String> {
    match field_type {
        2 | 3 => r.take(1).map(drop),
        6 => r.take(2).map(drop),
        8 => r.take(4).map(drop),
        4 | 10 => r.take(8).map(drop),
        11 => r.string().map(drop),
        12 if depth > MAX_DEPTH => Err(format!(
            "the answer nests structs more than {MAX_DEPTH} levels deep"
        )),
        12 => loop {
            let inner = r.u8()?;
            if inner == T_STOP {
                return Ok(());
            }
            r.i16()?;
            skip_at(r, inner, depth + 1)?;
        },
        other => Err(format!("cannot skip a field of type {other}")),
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&end| end <= self.bytes.len())
            .ok_or("truncated answer")?;
        let slice = &self.bytes[self.at..end];
        self.at = end;
        Ok(slice)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.array::<1>()?[0])
    }

    fn i16(&mut self) -> Result<i16, String> {
        Ok(i16::from_be_bytes(self.array()?))
    }

    fn i32(&mut self) -> Result<i32, String> {
        Ok(i32::from_be_bytes(self.array()?))
    }

    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    fn i64(&mut self) -> Result<i64, String> {
        Ok(i64::from_be_bytes(self.array()?))
    }

    fn string(&mut self) -> Result<String, String> {
        let n = usize::try_from(self.i32()?).map_err(|_| "negative string length")?;
        Ok(String::from_utf8_lossy(self.take(n)?).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::{MAX_ANSWER_BYTES, parse_reply};

    fn reply(name: &str, seq: i32, kind: u32, body: &[u8]) -> Vec<u8> {
        let mut out = (0x8001_0000u32 | kind).to_be_bytes().to_vec();
        out.extend_from_slice(&i32::try_from(name.len()).unwrap().to_be_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&seq.to_be_bytes());
        out.extend_from_slice(body);
        out
    }

    #[test]
    fn reads_an_i64_result_and_explains_everything_else() {
        let mut ok = vec![10, 0, 0];
        ok.extend_from_slice(&7i64.to_be_bytes());
        ok.push(0);
        assert_eq!(
            parse_reply(&reply("get_worker_id", 3, 2, &ok), "get_worker_id", 3),
            Ok(7)
        );
        assert!(parse_reply(&reply("get_worker_id", 4, 2, &ok), "get_worker_id", 3).is_err());
        let mut exception = vec![11, 0, 1];
        exception.extend_from_slice(&4i32.to_be_bytes());
        exception.extend_from_slice(b"nope");
        exception.push(0);
        let err = parse_reply(&reply("get_id", 1, 3, &exception), "get_id", 1).unwrap_err();
        assert!(err.contains("nope"), "{err}");
        assert!(parse_reply(&[0x80, 1], "x", 1).is_err());
        assert!(parse_reply(&reply("x", 1, 2, &[10, 0]), "x", 1).is_err());
    }

    /// A reply whose field 1 holds `depth` structs nested in one another, then the result.
    fn nested(depth: usize) -> Vec<u8> {
        let mut body = Vec::new();
        for _ in 0..depth {
            body.extend_from_slice(&[12, 0, 1]);
        }
        body.extend(std::iter::repeat_n(0, depth));
        body.extend_from_slice(&[10, 0, 0]);
        body.extend_from_slice(&7i64.to_be_bytes());
        body.push(0);
        reply("get_worker_id", 1, 2, &body)
    }

    #[test]
    fn deeply_nested_structs_are_refused_without_overflowing_the_stack() {
        // About 16,000 levels fit in one answer frame; on a small stack (a busy runtime's
        // thread has little more to spare) recursing through them would overflow it.
        let depth = 16_000;
        let hostile = nested(depth);
        assert!(hostile.len() <= MAX_ANSWER_BYTES);
        let parsed = std::thread::Builder::new()
            .stack_size(128 * 1024)
            .spawn(move || parse_reply(&hostile, "get_worker_id", 1))
            .expect("a thread")
            .join()
            .expect("no panic");
        let err = parsed.unwrap_err();
        assert!(
            err.contains("nests structs more than 64 levels deep"),
            "{err}"
        );
        // Nesting as deep as the limit is skipped, and the result after it read.
        assert_eq!(parse_reply(&nested(64), "get_worker_id", 1), Ok(7));
        assert!(parse_reply(&nested(65), "get_worker_id", 1).is_err());
    }
}

//! The one asynchronous client of the 2010 Thrift service (framed transport, strict binary
//! protocol), and its codec: the argument-less `i64` methods (`get_worker_id`,
//! `get_datacenter_id`, `get_timestamp`) a ZooKeeper fleet's peer check calls exactly as a 2010
//! server asked its peers, and `get_id(useragent)`. [`encode_call`] and [`decode_reply`] are
//! public for callers that own their connections (the load generator, the fault campaign).
//! Every call is bounded by a timeout, and an answer larger than a small frame is refused.

use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The largest answer frame accepted (an `i64` reply is about 30 bytes; an exception's
/// message more).
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;

const VERSION_1: u32 = 0x8001_0000;
const CALL: u32 = 1;
const REPLY: u32 = 2;
const EXCEPTION: u32 = 3;
const T_STOP: u8 = 0;
const T_I64: u8 = 10;
const T_STRING: u8 = 11;
const T_STRUCT: u8 = 12;

/// What a call was answered with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The method's `i64` result (field 0 of the result struct).
    I64(i64),
    /// A `TApplicationException`, with its message.
    Exception(String),
    /// One of the method's declared exceptions, in this field of the result struct.
    Declared(i16),
}

/// Writes the framed call `method(1: arg)` (or `method()` without `arg`) with sequence id
/// `seq` into `out` (cleared first): the frame length, then the message.
pub fn encode_call(out: &mut Vec<u8>, method: &str, seq: i32, arg: Option<&str>) {
    out.clear();
    out.extend_from_slice(&[0; 4]); // the frame length, filled in below
    out.extend_from_slice(&(VERSION_1 | CALL).to_be_bytes());
    out.extend_from_slice(&(method.len() as u32).to_be_bytes());
    out.extend_from_slice(method.as_bytes());
    out.extend_from_slice(&seq.to_be_bytes());
    if let Some(arg) = arg {
        out.extend_from_slice(&[T_STRING, 0, 1]);
        out.extend_from_slice(&(arg.len() as u32).to_be_bytes());
        out.extend_from_slice(arg.as_bytes());
    }
    // The end of the argument struct.
    out.push(T_STOP);
    let len = (out.len() - 4) as u32;
    out[..4].copy_from_slice(&len.to_be_bytes());
}

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
        let answer = self.call(method, None).await?;
        i64_of(answer).map_err(|e| format!("{}, {method}: {e}", self.addr))
    }

    /// Calls `get_id(useragent)`: the ID, or the exception it was refused with.
    pub async fn get_id(&mut self, useragent: &str) -> Result<Answer, String> {
        self.call("get_id", Some(useragent)).await
    }

    /// Calls `method` with at most one string argument.
    async fn call(&mut self, method: &str, arg: Option<&str>) -> Result<Answer, String> {
        self.seq += 1;
        let addr = self.addr.clone();
        let timeout = self.timeout;
        tokio::time::timeout(timeout, self.exchange(method, arg))
            .await
            .map_err(|_| {
                format!(
                    "{addr} did not answer {method} within {} ms",
                    timeout.as_millis()
                )
            })?
            .map_err(|e| format!("{addr}, {method}: {e}"))
    }

    async fn exchange(&mut self, method: &str, arg: Option<&str>) -> Result<Answer, String> {
        len_i32(method.len() + arg.map_or(0, str::len) + 32)?;
        let mut frame = Vec::with_capacity(32 + method.len() + arg.map_or(0, str::len));
        encode_call(&mut frame, method, self.seq, arg);
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
        decode_reply(&answer, method, self.seq)
    }
}

fn len_i32(n: usize) -> Result<i32, String> {
    i32::try_from(n).map_err(|_| format!("{n} bytes is too long for a Thrift frame"))
}

/// Reads the answer frame (without its length) to the call of `method` with sequence id `seq`:
/// the result struct read to its end (other fields skipped), and nothing after it.
pub fn decode_reply(bytes: &[u8], method: &str, seq: i32) -> Result<Answer, String> {
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
    let answer = match kind {
        REPLY => {
            let (mut value, mut declared) = (None, None);
            loop {
                let field_type = r.u8()?;
                if field_type == T_STOP {
                    break;
                }
                let id = r.i16()?;
                if id == 0 && field_type == T_I64 {
                    value = Some(r.i64()?);
                } else {
                    if id != 0 && field_type == T_STRUCT && declared.is_none() {
                        declared = Some(id);
                    }
                    skip(&mut r, field_type)?;
                }
            }
            match (value, declared) {
                (Some(value), _) => Answer::I64(value),
                (None, Some(id)) => Answer::Declared(id),
                (None, None) => return Err("a reply without a result".into()),
            }
        }
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
            Answer::Exception(message)
        }
        other => return Err(format!("unexpected message type {other}")),
    };
    if r.at != bytes.len() {
        return Err(format!("{} bytes after the answer", bytes.len() - r.at));
    }
    Ok(answer)
}

/// The `i64` result of an answer, or why there is none.
fn i64_of(answer: Answer) -> Result<i64, String> {
    match answer {
        Answer::I64(value) => Ok(value),
        Answer::Exception(message) => {
            Err(format!("the peer answered with an exception: {message}"))
        }
        Answer::Declared(_) => Err("a reply without a result".into()),
    }
}

/// [`decode_reply`] of an `i64` method: the value, or why there is none.
#[cfg(test)]
fn parse_reply(bytes: &[u8], method: &str, seq: i32) -> Result<i64, String> {
    i64_of(decode_reply(bytes, method, seq)?)
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
        T_STRUCT if depth > MAX_DEPTH => Err(format!(
            "the answer nests structs more than {MAX_DEPTH} levels deep"
        )),
        T_STRUCT => loop {
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

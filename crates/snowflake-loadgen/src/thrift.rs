//! The Thrift protocol of the 2010 service: framed transport, binary protocol, one
//! `get_id("bench")` call per request over a persistent connection, and a check of every reply
//! (the codec is the project's one: `snowflake_proto::thrift::peer`).

use crate::config::BenchConfig;
use crate::engine::{Client, ConnectFailure, Failure};
use snowflake_proto::thrift::peer::{self, Answer};
use std::borrow::Cow;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The method called.
const METHOD: &str = "get_id";
/// The `useragent` argument sent.
const USER_AGENT: &str = "bench";
/// The largest reply frame read; a reply to `get_id` is about 30 bytes, an exception carries a
/// message.
const MAX_FRAME: u32 = 64 * 1024;

/// Speaks framed binary Thrift to one target; shared by every connection task.
#[derive(Debug)]
pub(crate) struct ThriftClient {
    /// The target's addresses, tried in order on every connection attempt.
    addrs: Vec<SocketAddr>,
    /// How long a connection attempt or a request may take.
    timeout: Duration,
    /// The largest valid ID (the layout's).
    max_id: i64,
}

impl ThriftClient {
    /// A client for `config`'s target, at the already resolved `addrs`.
    pub(crate) fn new(config: &BenchConfig, addrs: Vec<SocketAddr>) -> ThriftClient {
        ThriftClient {
            addrs,
            timeout: config.timeout(),
            max_id: i64::try_from(config.max_id()).unwrap_or(i64::MAX),
        }
    }
}

/// One persistent connection; dropping it closes the connection.
#[derive(Debug)]
pub(crate) struct ThriftConnection {
    /// The socket.
    stream: TcpStream,
    /// The sequence id of the next call.
    seq: i32,
    /// The request being built (reused).
    request: Vec<u8>,
    /// The reply frame being read (reused).
    reply: Vec<u8>,
}

impl Client for ThriftClient {
    type Connection = ThriftConnection;

    async fn connect(&self) -> Result<ThriftConnection, ConnectFailure> {
        let stream = crate::engine::connect_tcp(&self.addrs, self.timeout).await?;
        Ok(ThriftConnection {
            stream,
            seq: 0,
            request: Vec::with_capacity(64),
            reply: Vec::with_capacity(64),
        })
    }

    async fn ready(&self, connection: &mut ThriftConnection) -> bool {
        // Nothing is due from the server between calls: end of stream means it closed the
        // connection, and stray bytes mean the stream is out of step; either way reopen it.
        let mut byte = [0u8; 1];
        matches!(
            connection.stream.try_read(&mut byte),
            Err(err) if err.kind() == io::ErrorKind::WouldBlock
        )
    }

    async fn request(&self, connection: &mut ThriftConnection) -> Result<u64, Failure> {
        let seq = connection.seq;
        connection.seq = connection.seq.wrapping_add(1);
        encode_get_id(&mut connection.request, seq);
        let exchange = async {
            connection
                .stream
                .write_all(&connection.request)
                .await
                .map_err(|err| io_failure(&err))?;
            let len = connection
                .stream
                .read_u32()
                .await
                .map_err(|err| io_failure(&err))?;
            if len > MAX_FRAME {
                return Err(Failure::lost(Cow::Borrowed("bad_response")));
            }
            connection.reply.resize(len as usize, 0);
            connection
                .stream
                .read_exact(&mut connection.reply)
                .await
                .map_err(|err| io_failure(&err))?;
            match decode_get_id_reply(&connection.reply, seq)? {
                id if id <= self.max_id => Ok(1),
                _ => Err(Failure::kept(Cow::Borrowed("bad_response"))),
            }
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .unwrap_or_else(|_| Err(Failure::lost(Cow::Borrowed("timeout"))))
    }
}

/// Writes the framed call `get_id(1: "bench")` with sequence id `seq` into `out`.
fn encode_get_id(out: &mut Vec<u8>, seq: i32) {
    peer::encode_call(out, METHOD, seq, Some(USER_AGENT));
}

/// Checks the reply frame (without its length) to the call with sequence id `seq`: the ID it
/// carries, or why it is not a good one. The whole frame was read, so the connection stays in
/// step either way.
fn decode_get_id_reply(frame: &[u8], seq: i32) -> Result<i64, Failure> {
    match peer::decode_reply(frame, METHOD, seq) {
        Ok(Answer::I64(id)) if id > 0 => Ok(id),
        Ok(Answer::Exception(_) | Answer::Declared(_)) => {
            Err(Failure::kept(Cow::Borrowed("thrift_exception")))
        }
        Ok(Answer::I64(_)) | Err(_) => Err(Failure::kept(Cow::Borrowed("bad_response"))),
    }
}

/// Classifies an I/O error on the socket; the connection is dropped.
fn io_failure(err: &io::Error) -> Failure {
    let kind = match err.kind() {
        io::ErrorKind::ConnectionReset => "connection_reset",
        io::ErrorKind::BrokenPipe
        | io::ErrorKind::ConnectionAborted
        | io::ErrorKind::UnexpectedEof => "connection_closed",
        io::ErrorKind::TimedOut => "timeout",
        _ => "io_error",
    };
    Failure::lost(Cow::Borrowed(kind))
}

#[cfg(test)]
mod tests {
    use super::*;

    const METHOD: &[u8] = super::METHOD.as_bytes();
    /// Strict binary protocol, version 1.
    const VERSION_1: u32 = 0x8001_0000;
    /// The message types of the binary protocol.
    const CALL: u8 = 1;
    const REPLY: u8 = 2;
    const EXCEPTION: u8 = 3;
    /// The field types used.
    const T_STOP: u8 = 0;
    const T_I64: u8 = 10;
    const T_STRING: u8 = 11;

    fn header(kind: u8, name: &[u8], seq: i32) -> Vec<u8> {
        let mut out = (VERSION_1 | u32::from(kind)).to_be_bytes().to_vec();
        out.extend_from_slice(&(name.len() as u32).to_be_bytes());
        out.extend_from_slice(name);
        out.extend_from_slice(&seq.to_be_bytes());
        out
    }

    fn reply(seq: i32, id: i64) -> Vec<u8> {
        let mut out = header(REPLY, METHOD, seq);
        out.extend_from_slice(&[T_I64, 0, 0]);
        out.extend_from_slice(&id.to_be_bytes());
        out.push(T_STOP);
        out
    }

    fn kind(result: Result<i64, Failure>) -> String {
        format!("{:?}", result.expect_err("a failure"))
    }

    #[test]
    fn the_call_is_the_framed_strict_get_id() {
        let mut out = Vec::new();
        encode_get_id(&mut out, 7);
        let mut expected = header(CALL, METHOD, 7);
        expected.extend_from_slice(&[T_STRING, 0, 1, 0, 0, 0, 5]);
        expected.extend_from_slice(b"bench");
        expected.push(T_STOP);
        assert_eq!(out[..4], (expected.len() as u32).to_be_bytes());
        assert_eq!(out[4..], expected[..]);
    }

    #[test]
    fn a_reply_carries_a_positive_id() {
        assert_eq!(decode_get_id_reply(&reply(3, 42), 3).unwrap(), 42);
        assert!(kind(decode_get_id_reply(&reply(3, 0), 3)).contains("bad_response"));
        assert!(kind(decode_get_id_reply(&reply(3, -5), 3)).contains("bad_response"));
        assert!(kind(decode_get_id_reply(&reply(4, 42), 3)).contains("bad_response"));
        let full = reply(3, 42);
        assert!(kind(decode_get_id_reply(&full[..full.len() - 1], 3)).contains("bad_response"));
    }

    #[test]
    fn exceptions_are_counted_as_such() {
        let mut app = header(EXCEPTION, METHOD, 3);
        app.extend_from_slice(&[T_STRING, 0, 1, 0, 0, 0, 2, b'n', b'o', T_STOP]);
        assert!(kind(decode_get_id_reply(&app, 3)).contains("thrift_exception"));
        let mut declared = header(REPLY, METHOD, 3);
        declared.extend_from_slice(&[12, 0, 1, T_STRING, 0, 1, 0, 0, 0, 0, T_STOP, T_STOP]);
        assert!(kind(decode_get_id_reply(&declared, 3)).contains("thrift_exception"));
    }
}

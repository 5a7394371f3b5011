//! `/v1/id` straight on the wire: the HTTP listener's connections start in a loop of their own
//! that reads what the socket has, answers every complete `GET`/`HEAD /v1/id` in it
//! (pipelining) into one buffer, and writes that buffer once, as the RESP door does. The
//! first request it does not answer itself (another route, a body, `Connection`, HTTP/1.0, a
//! malformed or oversized head, an ID the node refuses) hands the connection to hyper for the
//! rest of its life, with the bytes read so far: everything but the single-ID loop is served
//! as before, by the same `fast::Front`, so there is one place for every other answer.
//!
//! What the loop answers is byte for byte what hyper writes for the same answer (status line,
//! `content-type`, `content-length`, `date`, body; tests/http_answers.rs pins them), with the
//! same metrics. What it saves per request, against hyper: the `Request` and `Response` values
//! and their header maps, the header-read timer hyper makes for every request (the loop has
//! one deadline per connection, [`Progress`]), the per-request label lookups of the metrics
//! (counters are looked up once per connection), and a write per answer of a pipeline.
//!
//! Its deadline is hyper's header-read timeout: a request must arrive whole within the idle
//! timeout of when the connection began waiting for it, however it trickles in.

use super::fast::{self, Front};
use super::{MAX_BUF_BYTES, accepts_text, id_body};
use crate::json_ids::Format;
use crate::listen::{self, deadline::Progress};
use crate::node::{NotNow, Protocol};
use axum::response::IntoResponse;
use prometheus_client::metrics::counter::Counter;
use std::cell::Cell;
use std::convert::Infallible;
use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::watch;
use tokio::time::Instant;

/// The most request headers the loop reads; a request with more goes to hyper (which takes up
/// to 100).
const MAX_HEADERS: usize = 32;

/// Room made for each read.
const READ_BYTES: usize = 4096;

/// A connection's reply buffer is given back above this capacity once it waits for its client.
const KEEP_BYTES: usize = 16 * 1024;

/// What the loop leaves to hyper when it stops answering: the bytes read and not answered,
/// the connection, and the answer owed to the first request in those bytes, when the loop
/// already made it (a refusal: the node was asked, so it is not asked again).
pub(super) struct Handover<S> {
    pub(super) io: Rewind<S>,
    pub(super) owed: Option<fast::Response>,
}

/// One request head, as far as the loop is concerned.
#[derive(Debug, PartialEq, Eq)]
enum Head<'a> {
    /// `GET` or `HEAD /v1/id`, HTTP/1.1, no body, nothing hyper would act on: `len` bytes.
    Id {
        len: usize,
        head: bool,
        query: Option<&'a str>,
        text: bool,
    },
    /// Not all of it has arrived.
    Partial,
    /// Anything else: hyper's.
    Other,
}

/// The head at the start of `input`.
fn parse(input: &[u8]) -> Head<'_> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    let len = match request.parse(input) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Head::Partial,
        Err(_) => return Head::Other,
    };
    // hyper takes a head only as long as its buffer: a longer one is its 431 to give.
    if len > MAX_BUF_BYTES || request.version != Some(1) {
        return Head::Other;
    }
    let head = match request.method {
        Some("GET") => false,
        Some("HEAD") => true,
        _ => return Head::Other,
    };
    let query = match request.path.and_then(|path| path.strip_prefix("/v1/id")) {
        Some("") => None,
        Some(rest) => match rest.strip_prefix('?') {
            Some(query) if query.bytes().all(plain_query_byte) => Some(query),
            _ => return Head::Other,
        },
        None => return Head::Other,
    };
    let mut text = false;
    for header in request.headers.iter() {
        let name = header.name;
        if [
            "content-length",
            "transfer-encoding",
            "connection",
            "expect",
            "upgrade",
        ]
        .iter()
        .any(|acted_on| name.eq_ignore_ascii_case(acted_on))
        {
            return Head::Other;
        }
        // As `HeaderValue::to_str` reads it: visible ASCII or tabs, or not at all.
        if name.eq_ignore_ascii_case("accept")
            && header
                .value
                .iter()
                .all(|&b| b == b'\t' || (32..127).contains(&b))
            && let Ok(value) = std::str::from_utf8(header.value)
        {
            text = text || accepts_text(value);
        }
    }
    Head::Id {
        len,
        head,
        query,
        text,
    }
}

/// A byte of a query the loop reads itself; anything else (which a URI might refuse) goes to
/// hyper.
fn plain_query_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~%=&+".contains(&b)
}

/// The `date` header's value, as hyper writes it, made once a second.
struct Date {
    second: u64,
    text: [u8; 29],
}

impl Date {
    fn new() -> Date {
        let mut date = Date {
            second: u64::MAX,
            text: [0; 29],
        };
        date.update();
        date
    }

    fn update(&mut self) {
        let now = SystemTime::now();
        let second = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        if second != self.second {
            let text = httpdate::fmt_http_date(now);
            if text.len() == self.text.len() {
                self.text.copy_from_slice(text.as_bytes());
                self.second = second;
            }
        }
    }
}

/// What one connection's loop keeps: the route's counters, looked up once.
struct Counted<'a> {
    id: &'a fast::Id,
    ok: Counter,
    issued: Counter,
}

impl Counted<'_> {
    /// `/v1/id`'s answer to `head` into `out`; `Err` with what hyper must answer instead.
    async fn answer(
        &self,
        query: Option<&str>,
        head: bool,
        text: bool,
        out: &mut Vec<u8>,
        date: &Date,
    ) -> Result<(), Option<fast::Response>> {
        let started = std::time::Instant::now();
        let node = &*self.id.node;
        let format = match query {
            None => Format::String,
            // A bad one is a 400 that hyper's front gives (nothing was asked of the node).
            Some(_) => Format::of(node, query).map_err(|_| None)?,
        };
        let id = match node.issue_one_now_counted(&self.issued, 0) {
            Ok(id) => id,
            Err(NotNow::Refused(err)) => {
                let response = fast::routed(err.into_response());
                return Err(Some(self.id.timed.done(node, started, response)));
            }
            // Rare: the generator must wait (a clock regression within the bound, a
            // reservation); the connection waits with it, as hyper's would.
            Err(not_now) => match node.issue_one_after(Protocol::Http, not_now).await {
                Ok(id) => id,
                Err(err) => {
                    let response = fast::routed(err.into_response());
                    return Err(Some(self.id.timed.done(node, started, response)));
                }
            },
        };
        let (content_type, body) = id_body(text, format, id);
        let mut length = itoa::Buffer::new();
        for part in [
            b"HTTP/1.1 200 OK\r\ncontent-type: ".as_slice(),
            content_type.as_bytes(),
            b"\r\ncontent-length: ",
            length.format(body.len()).as_bytes(),
            b"\r\ndate: ",
            &date.text,
            b"\r\n\r\n",
        ] {
            out.extend_from_slice(part);
        }
        if !head {
            out.extend_from_slice(&body);
        }
        self.ok.inc();
        self.id.timed.latency.observe(started.elapsed());
        Ok(())
    }
}

/// Serves `/v1/id` on `stream` until the connection ends (`None`: the peer left, idled, broke
/// off, or the service stops) or a request is not the loop's to answer (the [`Handover`]).
pub(super) async fn serve<S: listen::Io>(
    id: &fast::Id,
    idle: Duration,
    mut stream: S,
    stop: watch::Receiver<bool>,
) -> Option<Handover<S>> {
    let metrics = id.node.metrics();
    let counted = Counted {
        id,
        ok: metrics.request_counter(Protocol::Http, id.timed.route, 200),
        issued: metrics.ids_issued_counter(Protocol::Http),
    };
    let mut input = Vec::with_capacity(READ_BYTES);
    let mut out = Vec::new();
    let mut date = Date::new();
    let mut progress = Progress::new(idle);
    let mut stop_rx = stop.clone();
    let stopped = stop_rx.wait_for(|stop| *stop);
    tokio::pin!(stopped);
    // When the connection began waiting for the request at the start of `input`.
    let mut waiting_since = progress.last();
    loop {
        let mut used = 0;
        let mut owed = None;
        let mut handing_over = false;
        while used < input.len() {
            match parse(&input[used..]) {
                Head::Id {
                    len,
                    head,
                    query,
                    text,
                } => match counted.answer(query, head, text, &mut out, &date).await {
                    Ok(()) => used += len,
                    Err(answer) => {
                        owed = answer;
                        handing_over = true;
                        break;
                    }
                },
                Head::Partial => break,
                Head::Other => {
                    handing_over = true;
                    break;
                }
            }
        }
        // What was answered goes out before anything else happens to the connection.
        if !out.is_empty() && !progress.write(&mut stream, &mut out).await {
            return None;
        }
        input.drain(..used);
        // hyper's, from the unanswered request on, or for a head too long for its buffer
        // (its 431).
        if handing_over || input.len() >= MAX_BUF_BYTES {
            return Some(Handover {
                io: Rewind::new(input, stream),
                owed,
            });
        }
        if used > 0 {
            waiting_since = Instant::now();
        }
        if *stop.borrow() {
            return None;
        }
        if out.capacity() > KEEP_BYTES {
            out = Vec::new();
        }
        input.reserve(READ_BYTES);
        progress.since(waiting_since);
        let read = tokio::select! {
            biased;
            read = progress.read(&mut stream, &mut input) => read,
            _ = &mut stopped => return None,
        };
        if !read {
            return None;
        }
        date.update();
    }
}

/// hyper's service after a handover: the owed answer to the first request, then the front's.
pub(super) struct Resumed {
    owed: Cell<Option<fast::Response>>,
    front: Front,
}

impl Resumed {
    pub(super) fn new(owed: Option<fast::Response>, front: Front) -> Resumed {
        Resumed {
            owed: Cell::new(owed),
            front,
        }
    }
}

impl hyper::service::Service<http::Request<hyper::body::Incoming>> for Resumed {
    type Response = fast::Response;
    type Error = Infallible;
    type Future = fast::Answer;

    fn call(&self, request: http::Request<hyper::body::Incoming>) -> fast::Answer {
        match self.owed.take() {
            Some(response) => fast::Answer::Ready(Some(response)),
            None => self.front.call(request),
        }
    }
}

/// A stream that first gives back bytes already read from it.
pub(super) struct Rewind<S> {
    read: Vec<u8>,
    at: usize,
    inner: S,
}

impl<S> Rewind<S> {
    pub(super) fn new(read: Vec<u8>, inner: S) -> Rewind<S> {
        Rewind { read, at: 0, inner }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewind<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if this.at < this.read.len() {
            let n = buf.remaining().min(this.read.len() - this.at);
            buf.put_slice(&this.read[this.at..this.at + n]);
            this.at += n;
            if this.at == this.read.len() {
                this.read = Vec::new();
                this.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewind<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(len: usize, head: bool, query: Option<&str>, text: bool) -> Head<'_> {
        Head::Id {
            len,
            head,
            query,
            text,
        }
    }

    #[test]
    fn single_id_heads_are_the_loops() {
        let get = b"GET /v1/id HTTP/1.1\r\nhost: x\r\n\r\n";
        assert_eq!(parse(get), id(get.len(), false, None, false));
        let head = b"HEAD /v1/id?format=number HTTP/1.1\r\nAccept: text/plain\r\n\r\n";
        assert_eq!(
            parse(head),
            id(head.len(), true, Some("format=number"), true)
        );
        let pipelined = [get.as_slice(), get].concat();
        assert_eq!(parse(&pipelined), id(get.len(), false, None, false));
        assert_eq!(parse(b"GET /v1/id HTTP/1.1\r\nhost"), Head::Partial);
        assert_eq!(parse(b"GE"), Head::Partial);
    }

    #[test]
    fn everything_else_is_hypers() {
        for other in [
            "GET /v1/ids HTTP/1.1\r\n\r\n",
            "GET /v1/id/ HTTP/1.1\r\n\r\n",
            "GET /v1/idx HTTP/1.1\r\n\r\n",
            "GET http://x/v1/id HTTP/1.1\r\n\r\n",
            "GET /v1/id?a=\"b\" HTTP/1.1\r\n\r\n",
            "POST /v1/id HTTP/1.1\r\n\r\n",
            "get /v1/id HTTP/1.1\r\n\r\n",
            "GET /v1/id HTTP/1.0\r\n\r\n",
            "GET /v1/id HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
            "GET /v1/id HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n",
            "GET /v1/id HTTP/1.1\r\nConnection: close\r\n\r\n",
            "GET /v1/id HTTP/1.1\r\nexpect: 100-continue\r\n\r\n",
            "GET /v1/id HTTP/1.1\r\nupgrade: h2c\r\n\r\n",
            "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
            "GET /v1/id HTTP/1.1\r\nbad header\r\n\r\n",
        ] {
            assert_eq!(parse(other.as_bytes()), Head::Other, "{other:?}");
        }
        let many = format!(
            "GET /v1/id HTTP/1.1\r\n{}\r\n",
            "a: b\r\n".repeat(MAX_HEADERS + 1)
        );
        assert_eq!(parse(many.as_bytes()), Head::Other);
        let long = format!(
            "GET /v1/id HTTP/1.1\r\na: {}\r\n\r\n",
            "b".repeat(MAX_BUF_BYTES)
        );
        assert_eq!(parse(long.as_bytes()), Head::Other);
    }

    #[test]
    fn accept_is_read_as_the_router_reads_it() {
        let with = |accept: &str| {
            let request = format!("GET /v1/id HTTP/1.1\r\naccept: {accept}\r\n\r\n");
            matches!(parse(request.as_bytes()), Head::Id { text: true, .. })
        };
        assert!(with("text/plain"));
        assert!(with("text/*;q=0.5, application/xml"));
        assert!(!with("application/json, text/plain"));
        assert!(!with("*/*"));
    }

    #[test]
    fn the_date_is_hypers_format() {
        let date = Date::new();
        let text = std::str::from_utf8(&date.text).unwrap();
        assert!(httpdate::parse_http_date(text).is_ok(), "{text}");
        assert!(text.ends_with(" GMT"), "{text}");
    }

    #[tokio::test]
    async fn rewind_gives_back_what_was_read_first() {
        use tokio::io::AsyncReadExt;
        let (mut near, far) = tokio::io::duplex(64);
        tokio::io::AsyncWriteExt::write_all(&mut near, b" world")
            .await
            .unwrap();
        drop(near);
        let mut rewind = Rewind::new(b"hello".to_vec(), far);
        let mut all = String::new();
        rewind.read_to_string(&mut all).await.unwrap();
        assert_eq!(all, "hello world");
    }
}

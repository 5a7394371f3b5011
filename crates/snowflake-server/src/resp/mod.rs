//! The Redis protocol front door (SPEC §8 "RESP"): `INCR key` is a fresh ID, so Redis clients
//! that use a counter for IDs switch without a code change; `redis-cli` and `redis-benchmark`
//! work as they are.
//!
//! One task per connection reads what the socket has, answers every complete command in it
//! (pipelining) into one buffer, and writes that buffer once: reads and writes are batched per
//! wake-up, not per command. The same node, guarantees, connection cap, idle timeout and drain
//! as the other front ends (the listener is `listen`'s); requests are counted as
//! `protocol="resp"`.

pub mod parse;
mod reply;

use crate::config::Config;
use crate::latency::RouteLatencies;
use crate::listen::{self, OverCap, deadline::Progress};
use crate::node::{IssueError, Node, NotNow, Protocol};
use crate::tls::Alpn;
use parse::Limits;
use prometheus_client::metrics::counter::Counter;
use reply::{array_header, bulk, error_reply, id_value, integer, map_header, null, simple};
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::time::Instant;

/// The commands a connection answers, as metric route labels.
const COMMANDS: &[&str] = &[
    "incr",
    "incrby",
    "snowflake.next",
    "snowflake.decode",
    "ping",
    "echo",
    "hello",
    "auth",
    "select",
    "client",
    "command",
    "info",
    "quit",
    "reset",
    "config",
];

/// The largest reply buffered before it is written out in the middle of a pipeline, and the
/// pieces a bulk `SNOWFLAKE.NEXT` reply is written in: a connection holds at most about this
/// much of a reply (plus one non-bulk reply), however large the reply and however slow the
/// client.
const FLUSH_BYTES: usize = 16 * 1024;

/// A connection's buffers are given back above this capacity once it waits for its client:
/// a burst (a long pipeline, a large request) does not keep its memory for the connection's
/// life.
const KEEP_BYTES: usize = 16 * 1024;

/// The most bytes of a bulk reply a connection holds at once (the budget it takes, see
/// [`crate::bulk`]): a piece of [`FLUSH_BYTES`] and what was buffered before it.
const BULK_HELD_BYTES: u64 = 2 * FLUSH_BYTES as u64;

/// Serves RESP on `listener` until `shutdown` flips; then stops accepting and lets each
/// connection finish the commands it has read (at most `config.limits.shutdown_timeout`).
pub async fn serve(
    listener: TcpListener,
    node: Arc<Node>,
    config: &Config,
    tls: Option<Arc<crate::tls::Tls>>,
    shutdown: watch::Receiver<bool>,
) {
    let rejected = node.metrics().connections_rejected.clone();
    let door = Arc::new(Resp {
        node,
        limits: config.limits.resp,
        idle: config.limits.idle_timeout,
        clients: AtomicU64::new(0),
    });
    let limits = listen::Limits::of(config);
    listen::serve(listener, door, tls, limits, rejected, shutdown).await;
}

/// The RESP door: what its connections share.
#[derive(Debug)]
struct Resp {
    node: Arc<Node>,
    /// What one request may hold.
    limits: Limits,
    /// How long a connection may send nothing, or take nothing of a reply.
    idle: Duration,
    /// The `CLIENT ID` of the last connection served.
    clients: AtomicU64,
}

impl listen::Door for Resp {
    const ALPN: Alpn = Alpn::None;
    // Redis answers an over-the-limit client with an error and closes.
    const OVER_CAP: OverCap = OverCap::Answer;

    fn name(&self) -> &'static str {
        "resp"
    }

    async fn serve<S: listen::Io>(
        self: Arc<Self>,
        io: S,
        _peer: SocketAddr,
        stop: watch::Receiver<bool>,
    ) {
        let client_id = self.clients.fetch_add(1, Ordering::Relaxed) + 1;
        connection(io, &self.node, self.limits, self.idle, client_id, stop).await;
    }

    async fn refuse<S: listen::Io>(self: Arc<Self>, mut io: S) {
        let _ = io
            .write_all(b"-ERR max number of clients reached\r\n")
            .await;
        let _ = io.flush().await;
    }
}

/// One client's session state.
#[derive(Debug)]
struct Session {
    /// 2 or 3 (`HELLO 3`).
    protocol: u8,
    /// `CLIENT SETNAME`.
    name: Option<Vec<u8>>,
    /// `CLIENT ID`.
    id: u64,
    /// `QUIT`: close after the replies so far.
    quit: bool,
    /// The request counters this connection used, so that a command counts with one atomic
    /// add rather than a label lookup.
    counters: Vec<(&'static str, u16, Counter)>,
    /// The last command was refused by the node (it cannot issue now), not for its arguments.
    unavailable: bool,
    /// The last key's ID counter.
    key: Option<(Vec<u8>, Counter)>,
    /// The node's counter of IDs issued over RESP (`INCR`'s one ID counts on it).
    issued: Counter,
    /// The latency histograms of the routes this connection used.
    latencies: RouteLatencies,
    /// The commands answered since the replies were last written, by route: all of them are
    /// observed with the time from their batch's read to that write.
    unwritten: Vec<(&'static str, u64)>,
    /// The IDs of a bulk `SNOWFLAKE.NEXT` still to write (its array header is written), and its
    /// share of the node's budget for bulk replies: written a piece at a time by the connection.
    pending: Option<(Vec<snowflake_core::IdBatch>, crate::bulk::BulkPermit)>,
}

impl Session {
    /// A refusal's reply text; remembers whether the node could not issue (counted as 503,
    /// as HTTP answers it) rather than the request being bad (400).
    fn refused(&mut self, err: &IssueError) -> String {
        self.unavailable = matches!(
            err,
            IssueError::Unavailable { .. } | IssueError::Exhausted { .. }
        );
        refusal(err)
    }

    fn count_request(&mut self, node: &Node, route: &'static str, ok: bool) {
        let status = match (ok, std::mem::take(&mut self.unavailable)) {
            (true, _) => 200,
            (false, true) => 503,
            (false, false) => 400,
        };
        match self.unwritten.iter_mut().find(|(r, _)| *r == route) {
            Some((_, n)) => *n += 1,
            None => self.unwritten.push((route, 1)),
        }
        if let Some((_, _, counter)) = self
            .counters
            .iter()
            .find(|(r, o, _)| *r == route && *o == status)
        {
            counter.inc();
            return;
        }
        let counter = node
            .metrics()
            .request_counter(Protocol::Resp, route, status);
        counter.inc();
        self.counters.push((route, status, counter));
    }

    /// Observes the latency of the commands answered since the last write: from `read_at`,
    /// when their bytes arrived, to now, when their replies were written.
    fn observe_written(&mut self, read_at: Instant) {
        if self.unwritten.is_empty() {
            return;
        }
        let elapsed = read_at.elapsed();
        for (route, n) in self.unwritten.drain(..) {
            self.latencies.get(route).observe_n(elapsed, n);
        }
    }

    fn count_key(&mut self, node: &Node, key: &[u8], n: u64) {
        match &self.key {
            Some((last, counter)) if last.as_slice() == key => {
                counter.inc_by(n);
            }
            _ => {
                let counter = node.metrics().resp_key_counter(key);
                counter.inc_by(n);
                self.key = Some((key.to_vec(), counter));
            }
        }
    }
}

/// Reads commands, answers them in order, until the peer leaves, idles, sends a malformed or
/// oversized request (answered with the error, then closed), says `QUIT`, or the service stops.
async fn connection<S>(
    mut stream: S,
    node: &Node,
    limits: Limits,
    idle: Duration,
    id: u64,
    shutdown: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut session = Session {
        protocol: 2,
        name: None,
        id,
        quit: false,
        counters: Vec::new(),
        unavailable: false,
        key: None,
        issued: node.metrics().ids_issued_counter(Protocol::Resp),
        latencies: node.metrics().route_latencies(Protocol::Resp),
        unwritten: Vec::new(),
        pending: None,
    };
    let mut input = Vec::with_capacity(4096);
    // Allocated by the first reply: an idle connection holds no reply buffer.
    let mut out = Vec::new();
    let mut ranges = Vec::new();
    // One whole largest request: its arguments, its header lines, an inline line.
    let max_input = limits
        .max_bulk_bytes
        .saturating_add(limits.max_args.saturating_mul(24))
        .saturating_add(limits.max_inline_bytes);
    // The idle deadline and the stop signal are made once per connection, not once per read or
    // write: a request then costs no timer registration (see `Progress`).
    let mut idle = Progress::new(idle);
    let mut stop_rx = shutdown.clone();
    let stop = stop_rx.wait_for(|stop| *stop);
    tokio::pin!(stop);
    // When the bytes being answered arrived (the idle timer's last read).
    let mut read_at = idle.last();
    // When the first byte of the unfinished command at the end of `input` arrived: the whole
    // command is due within the idle timeout of it, however it trickles in (a client sending a
    // byte at a time must not keep its connection for ever).
    let mut partial_since = None;
    loop {
        // Everything complete in the buffer, in order.
        let mut used = 0;
        loop {
            match parse::parse_into(&input[used..], &limits, &mut ranges) {
                Ok(Some(consumed)) => {
                    let base = used;
                    used += consumed;
                    if ranges.is_empty() {
                        continue;
                    }
                    let args: Args<'_> = ranges
                        .iter()
                        .map(|r| &input[base + r.start..base + r.end])
                        .collect();
                    run(node, &mut session, &args, &mut out).await;
                    if let Some((batches, permit)) = session.pending.take() {
                        // A bulk reply, a piece at a time; its budget is given back after it.
                        if !write_ids(&mut stream, &mut idle, &mut out, batches).await {
                            return;
                        }
                        drop(permit);
                    }
                    if session.quit {
                        break;
                    }
                    if out.len() >= FLUSH_BYTES {
                        if !idle.write(&mut stream, &mut out).await {
                            return;
                        }
                        session.observe_written(read_at);
                    }
                }
                Ok(None) => break,
                Err(err) => {
                    node.metrics()
                        .request(Protocol::Resp, "protocol_error", 400);
                    error_reply(&mut out, &format!("ERR {err}"));
                    // The commands before it in this batch are answered in the same write.
                    if idle.write(&mut stream, &mut out).await {
                        session.observe_written(read_at);
                    }
                    tracing::debug!(error = %err, "closing a resp connection that sent a bad request");
                    return;
                }
            }
        }
        input.drain(..used);
        partial_since = match (input.is_empty(), used) {
            (true, _) => None,
            // What is left began in the last read, after the command that ended in it.
            (false, 1..) => Some(read_at),
            (false, 0) => partial_since.or(Some(read_at)),
        };
        if !out.is_empty() {
            if !idle.write(&mut stream, &mut out).await {
                return;
            }
            session.observe_written(read_at);
        }
        if session.quit || *shutdown.borrow() {
            return;
        }
        if input.len() > max_input {
            return;
        }
        // Waiting for the client: a burst's buffers go back (see `KEEP_BYTES`).
        if out.capacity() > KEEP_BYTES {
            out = Vec::new();
        }
        if input.capacity() > KEEP_BYTES && input.len() < 4096 {
            input.shrink_to(4096);
        }
        // Room to read into (a full Vec would otherwise be read into 64 bytes at a time);
        // exactly, so that a large request grows the buffer by reads, not by doubling.
        input.reserve_exact(4096);
        if let Some(since) = partial_since {
            idle.since(since);
        }
        let read = tokio::select! {
            biased;
            read = idle.read(&mut stream, &mut input) => read,
            _ = &mut stop => return,
        };
        if !read {
            return;
        }
        read_at = idle.last();
    }
}

/// Writes the IDs of a bulk reply after what `out` holds, [`FLUSH_BYTES`] at a time; false
/// when the connection is done for (see [`Progress::write`]). What is left in `out` (less than
/// a piece) is written with the replies that follow.
async fn write_ids<S: AsyncWrite + Unpin>(
    stream: &mut S,
    idle: &mut Progress,
    out: &mut Vec<u8>,
    batches: Vec<snowflake_core::IdBatch>,
) -> bool {
    for batch in batches {
        for id in batch {
            integer(out, id_value(id.as_u64()));
            if out.len() >= FLUSH_BYTES && !idle.write(stream, out).await {
                return false;
            }
        }
    }
    true
}

/// A command's arguments, borrowed from the input buffer; commands of up to 8 arguments (all
/// the ones answered here) need no allocation.
type Args<'a> = smallvec::SmallVec<[&'a [u8]; 8]>;

/// Answers one command into `out`, and counts it.
async fn run(node: &Node, session: &mut Session, args: &[&[u8]], out: &mut Vec<u8>) {
    // Known commands by their lower-case name (no allocation); anything else is "unknown".
    let route = COMMANDS
        .iter()
        .copied()
        .find(|c| c.as_bytes().eq_ignore_ascii_case(args[0]))
        .unwrap_or("unknown");
    let ok = match answer(node, session, route.as_bytes(), args, out).await {
        Ok(()) => true,
        Err(message) => {
            error_reply(out, &message);
            false
        }
    };
    session.count_request(node, route, ok);
}

fn arity(name: &[u8]) -> String {
    format!(
        "ERR wrong number of arguments for '{}' command",
        String::from_utf8_lossy(name)
    )
}

/// A refusal of the node (the same reason as HTTP's 503) or a bad count.
fn refusal(err: &IssueError) -> String {
    match err {
        IssueError::BadRequest(message) => format!("ERR {message}"),
        IssueError::Unavailable { message, .. } | IssueError::Exhausted { message, .. } => {
            format!("ERR {message}")
        }
    }
}

fn parse_u64(arg: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(arg).ok()?;
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

async fn answer(
    node: &Node,
    session: &mut Session,
    name: &[u8],
    args: &[&[u8]],
    out: &mut Vec<u8>,
) -> Result<(), String> {
    match name {
        b"incr" => {
            if args.len() != 2 {
                return Err(arity(name));
            }
            session.count_key(node, args[1], 1);
            // One ID in place, as HTTP's `/v1/id` takes it; waiting (a clock regression within
            // the bound, a reservation) only when the node must.
            let id = match node.issue_one_now_counted(&session.issued, 0) {
                Ok(id) => id,
                Err(NotNow::Refused(err)) => return Err(session.refused(&err)),
                Err(not_now) => node
                    .issue_one_after(Protocol::Resp, not_now)
                    .await
                    .map_err(|e| session.refused(&e))?,
            };
            integer(out, id_value(id));
        }
        b"incrby" => {
            if args.len() != 3 {
                return Err(arity(name));
            }
            let per_ms = node.layout().max_ids_per_ms();
            let count = parse_u64(args[2])
                .filter(|n| (1..=per_ms).contains(n))
                .ok_or_else(|| {
                    format!(
                        "ERR invalid increment: expected 1..={per_ms} (consecutive IDs of one \
                         millisecond), found {:?}",
                        String::from_utf8_lossy(&args[2][..args[2].len().min(32)])
                    )
                })?;
            session.count_key(node, args[1], count);
            let batch = node
                .issue_exact(Protocol::Resp, count)
                .await
                .map_err(|e| session.refused(&e))?;
            integer(out, id_value(batch.last().as_u64()));
        }
        b"snowflake.next" => {
            let count = match args.len() {
                1 => 1,
                2 => {
                    let text = std::str::from_utf8(args[1]).unwrap_or("");
                    node.parse_count(text).map_err(|e| session.refused(&e))?
                }
                _ => return Err(arity(name)),
            };
            // A bulk reply takes its share of the node's budget first, and is written a piece
            // at a time by the connection (`write_ids`), holding at most that share.
            let permit = if crate::bulk::BulkGate::is_bulk(count) {
                let held = count.saturating_mul(22).min(BULK_HELD_BYTES);
                Some(
                    node.admit_bulk(held)
                        .await
                        .map_err(|e| session.refused(&e))?,
                )
            } else {
                None
            };
            let batches = node
                .issue(Protocol::Resp, count)
                .await
                .map_err(|e| session.refused(&e))?;
            array_header(out, usize::try_from(count).unwrap_or(usize::MAX));
            if let Some(mut permit) = permit {
                permit.issued();
                session.pending = Some((batches, permit));
                return Ok(());
            }
            for batch in batches {
                for id in batch {
                    integer(out, id_value(id.as_u64()));
                }
            }
        }
        b"snowflake.decode" => {
            if args.len() != 2 {
                return Err(arity(name));
            }
            let text = std::str::from_utf8(args[1]).unwrap_or("");
            // Under the node's layout: an ID above its largest is an error, not decoded.
            let layout = node.layout();
            let id = layout.parse_id(text).map_err(|e| format!("ERR {e}"))?;
            let parts = layout.decode(id).map_err(|e| format!("ERR {e}"))?;
            map_header(out, session, 6);
            bulk(out, b"id");
            integer(out, id_value(id.as_u64()));
            bulk(out, b"timestamp_ms");
            integer(out, i64::try_from(parts.timestamp_ms).unwrap_or(i64::MAX));
            bulk(out, b"time");
            bulk(
                out,
                snowflake_core::format_unix_ms(parts.timestamp_ms).as_bytes(),
            );
            bulk(out, b"datacenter_id");
            integer(out, i64::try_from(parts.datacenter_id).unwrap_or(0));
            bulk(out, b"worker_id");
            integer(out, i64::try_from(parts.worker_id).unwrap_or(0));
            bulk(out, b"sequence");
            integer(out, i64::try_from(parts.sequence).unwrap_or(0));
        }
        b"ping" => match args.len() {
            1 => simple(out, "PONG"),
            2 => bulk(out, args[1]),
            _ => return Err(arity(name)),
        },
        b"echo" => {
            if args.len() != 2 {
                return Err(arity(name));
            }
            bulk(out, args[1]);
        }
        b"hello" => hello(node, session, args, out)?,
        b"auth" => {
            if !(2..=3).contains(&args.len()) {
                return Err(arity(name));
            }
            return Err(NO_AUTHENTICATION.into());
        }
        b"select" => {
            if args.len() != 2 {
                return Err(arity(name));
            }
            if args[1] != b"0" {
                return Err(
                    "ERR DB index is out of range (this server has database 0 only)".into(),
                );
            }
            simple(out, "OK");
        }
        b"client" => client(session, args, out)?,
        b"command" => match args.get(1).map(|a| a.to_ascii_lowercase()).as_deref() {
            None | Some(b"info" | b"list") => array_header(out, 0),
            Some(b"docs") => map_header(out, session, 0),
            Some(b"count") => integer(out, COMMANDS.len() as i64),
            Some(_) => return Err("ERR unknown subcommand of 'command'".into()),
        },
        b"info" => {
            let info = info_text(node);
            bulk(out, info.as_bytes());
        }
        b"config" => match args.get(1).map(|a| a.to_ascii_lowercase()).as_deref() {
            // What redis-benchmark and some clients ask on connect: nothing to report.
            Some(b"get") if args.len() >= 3 => {
                // Nothing is persisted the Redis way: `save ""`, `appendonly no`.
                let known: Vec<(&[u8], &[u8])> = args[2..]
                    .iter()
                    .filter_map(|p| match p.to_ascii_lowercase().as_slice() {
                        b"save" => Some((&b"save"[..], &b""[..])),
                        b"appendonly" => Some((&b"appendonly"[..], &b"no"[..])),
                        _ => None,
                    })
                    .collect();
                map_header(out, session, known.len());
                for (key, value) in known {
                    bulk(out, key);
                    bulk(out, value);
                }
            }
            Some(b"resetstat") => simple(out, "OK"),
            _ => return Err("ERR CONFIG: only CONFIG GET is answered (with nothing)".into()),
        },
        b"quit" => {
            simple(out, "OK");
            session.quit = true;
        }
        b"reset" => {
            session.protocol = 2;
            session.name = None;
            simple(out, "RESET");
        }
        _ => {
            let mut shown = String::new();
            for arg in args.iter().skip(1).take(3) {
                shown.push('\'');
                shown.push_str(&String::from_utf8_lossy(&arg[..arg.len().min(64)]));
                shown.push_str("' ");
            }
            return Err(format!(
                "ERR unknown command '{}', with args beginning with: {shown}",
                String::from_utf8_lossy(&args[0][..args[0].len().min(64)])
            ));
        }
    }
    Ok(())
}

/// The answer to `AUTH` and `HELLO … AUTH`: this door checks no password, and says so rather
/// than pretending a login succeeded.
const NO_AUTHENTICATION: &str = "ERR this RESP listener has no authentication: it checks no \
    user or password and accepts none; restrict who reaches it with mutual TLS \
    (--tls-client-ca) or a private address";

/// `HELLO [protover [AUTH user pass] [SETNAME name]]`; `AUTH` is refused (see
/// [`NO_AUTHENTICATION`]).
fn hello(
    node: &Node,
    session: &mut Session,
    args: &[&[u8]],
    out: &mut Vec<u8>,
) -> Result<(), String> {
    // Read the whole command before changing anything: a refused HELLO leaves the connection
    // as it was (as Redis does).
    let protocol = match args.get(1).map(|v| &v[..]) {
        None => session.protocol,
        Some(b"2") => 2,
        Some(b"3") => 3,
        Some(_) => return Err("NOPROTO unsupported protocol version".into()),
    };
    let mut name = None;
    let mut i = 2;
    while i < args.len() {
        match args[i].to_ascii_lowercase().as_slice() {
            // Never a false login: no password is checked here, so none is accepted.
            b"auth" if i + 2 < args.len() => return Err(NO_AUTHENTICATION.into()),
            b"setname" if i + 1 < args.len() => {
                name = Some(args[i + 1].to_vec());
                i += 2;
            }
            _ => return Err("ERR syntax error in HELLO".into()),
        }
    }
    session.protocol = protocol;
    if name.is_some() {
        session.name = name;
    }
    map_header(out, session, 7);
    bulk(out, b"server");
    bulk(out, b"snowflake");
    bulk(out, b"version");
    bulk(out, env!("CARGO_PKG_VERSION").as_bytes());
    bulk(out, b"proto");
    integer(out, i64::from(session.protocol));
    bulk(out, b"id");
    integer(out, i64::try_from(session.id).unwrap_or(0));
    bulk(out, b"mode");
    bulk(out, b"standalone");
    bulk(out, b"role");
    bulk(out, b"master");
    bulk(out, b"modules");
    array_header(out, 0);
    let _ = node;
    Ok(())
}

/// `CLIENT SETNAME|GETNAME|ID|SETINFO|INFO …`.
fn client(session: &mut Session, args: &[&[u8]], out: &mut Vec<u8>) -> Result<(), String> {
    let Some(sub) = args.get(1).map(|a| a.to_ascii_lowercase()) else {
        return Err(arity(b"client"));
    };
    match sub.as_slice() {
        b"setname" if args.len() == 3 => {
            session.name = Some(args[2].to_vec());
            simple(out, "OK");
        }
        b"getname" => match &session.name {
            Some(name) => bulk(out, name),
            None => null(out, session),
        },
        b"id" => integer(out, i64::try_from(session.id).unwrap_or(0)),
        b"setinfo" => simple(out, "OK"),
        b"info" => {
            let mut line = Vec::new();
            let _ = writeln!(
                line,
                "id={} name={} resp={}",
                session.id,
                String::from_utf8_lossy(session.name.as_deref().unwrap_or_default()),
                session.protocol
            );
            bulk(out, &line);
        }
        _ => {
            return Err(format!(
                "ERR unknown subcommand '{}'",
                String::from_utf8_lossy(&sub[..sub.len().min(64)])
            ));
        }
    }
    Ok(())
}

/// `INFO`: a server section (what client libraries and redis-cli look for) and ours.
fn info_text(node: &Node) -> String {
    let info = node.info();
    format!(
        "# Server\r\nredis_version:7.0.0\r\nsnowflake_version:{}\r\nredis_mode:standalone\r\n\
         process_id:{}\r\n\r\n# Snowflake\r\ndatacenter_id:{}\r\nworker_id:{}\r\nepoch_ms:{}\r\n\
         ready:{}\r\nhigh_water_mark_ms:{}\r\n",
        info.version,
        std::process::id(),
        info.datacenter_id,
        info.worker_id,
        info.epoch_ms,
        u8::from(info.ready),
        info.high_water_mark_ms,
    )
}

#[cfg(test)]
mod tests {
    use super::{Session, error_reply, map_header};

    #[test]
    fn errors_stay_on_one_line_and_maps_follow_the_protocol() {
        let mut out = Vec::new();
        error_reply(&mut out, "ERR a\r\nb");
        assert_eq!(out, b"-ERR a  b\r\n");
        let mut session = Session {
            protocol: 2,
            name: None,
            id: 1,
            quit: false,
            counters: Vec::new(),
            unavailable: false,
            key: None,
            issued: prometheus_client::metrics::counter::Counter::default(),
            latencies: crate::latency::RouteLatencies::new("resp", std::sync::Arc::default()),
            unwritten: Vec::new(),
            pending: None,
        };
        let mut out = Vec::new();
        map_header(&mut out, &session, 3);
        assert_eq!(out, b"*6\r\n");
        session.protocol = 3;
        let mut out = Vec::new();
        map_header(&mut out, &session, 3);
        assert_eq!(out, b"%3\r\n");
    }
}

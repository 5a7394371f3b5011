//! A client for the Snowflake ID service: IDs over gRPC from a list of nodes, with per-call
//! deadlines, health-aware failover and bounded retries, and an optional prefetch buffer that
//! makes IDs local.
//!
//! ```no_run
//! use snowflake_client::{ClientBuilder, Prefetch};
//! use std::time::Duration;
//!
//! # async fn example() -> Result<(), snowflake_client::Error> {
//! let client = ClientBuilder::new(["10.0.0.1:50051", "10.0.0.2:50051"])
//!     .call_timeout(Duration::from_millis(500))
//!     .prefetch(Prefetch::new().max_age(Duration::from_secs(1)))
//!     .build()?;
//! let id = client.next_id().await?;
//! let ids = client.next_ids(100).await?;
//! println!("{id} {} {:?}", ids.len(), client.stats());
//! client.close();
//! # Ok(())
//! # }
//! ```
//!
//! # Guarantees
//! - **Never a duplicate from the client**: every ID a node answered is handed out at most once
//!   (a call that times out may lose the IDs the node issued for it: a gap, never a repeat).
//! - **Never an endless hang**: each attempt has a deadline (`call_timeout`, also sent to the
//!   node as the gRPC deadline), and a call that no node can serve fails after `give_up_after`
//!   (30 s by default) with the reason from each node.
//! - **Failover**: a node that answers `UNAVAILABLE` (not ready, fenced, clock trouble), does not
//!   answer in time, or cannot be reached is skipped, with exponential backoff, and for at
//!   least as long as it asked in its `retry-after`; the call goes on with the next node.
//! - **One layout**: each node's ID layout is read from its `GetInfo` (never assumed to be
//!   Twitter's); an ID above the layout's largest is refused, and a node whose layout differs
//!   from the one the client already uses is not asked (IDs of two layouts can collide).
//!   [`Client::layout`] returns it, for decoding IDs locally.
//! - **Ordering**: IDs from one node are time-ordered. IDs from different nodes are not ordered
//!   with each other, so across a failover (or with several nodes in the list, which the client
//!   takes turns on) a later call can return a smaller ID. With prefetch, IDs are ordered by the
//!   time they were fetched, not by the time they are used (see [`Prefetch`]).
//!
//! The client is cheap to clone (one shared state) and safe to use from many tasks at once. It
//! needs a tokio runtime: build it inside one.

#![deny(missing_docs)]

mod attempt;
mod endpoint;
mod events;
mod layout;
pub mod pem;
mod prefetch;
mod tls;

pub use events::{Event, Stats};
pub use prefetch::Prefetch;
pub use snowflake_core::{IdRange, Layout, SnowflakeId};
pub use tls::Tls;

use attempt::{Failure, checked, describe, no_answer, retry_after};
use endpoint::{Backoff, Node};
use events::{Counters, Observer};
use snowflake_proto::v1::snowflake_client::SnowflakeClient;
use snowflake_proto::v1::{GetInfoRequest, NextIdRequest, NextIdsRequest, RangeRequest};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tonic::transport::Channel;

/// The most IDs one [`Client::next_ids`] call returns.
pub const MAX_IDS_PER_REQUEST: u64 = 1_000_000;

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A setting is wrong (an endpoint, a TLS file, no runtime).
    #[error("{0}")]
    Config(String),
    /// A count out of range.
    #[error("invalid count {count}: expected 1..={max}")]
    InvalidCount {
        /// The count asked for.
        count: u64,
        /// The largest allowed.
        max: u64,
    },
    /// The service refused the request itself (`INVALID_ARGUMENT`): no node would serve it.
    #[error("the service refused the request: {0}")]
    Rejected(String),
    /// No node could serve within `give_up_after`; the last failure of each node.
    #[error("no endpoint could serve within {waited_ms} ms: {details}")]
    Unavailable {
        /// How long the call tried.
        waited_ms: u64,
        /// Each node's last failure.
        details: String,
    },
    /// [`Client::close`] was called.
    #[error("the client is closed")]
    Closed,
}

/// IDs of one call to one node ([`Client::batch`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Batch {
    /// The IDs, as the node sent them (increasing).
    pub ids: Vec<SnowflakeId>,
    /// The node's index in the list given to [`ClientBuilder::new`].
    pub endpoint: usize,
    /// The node's address, as given.
    pub address: String,
}

/// Builds a [`Client`].
#[derive(Clone)]
pub struct ClientBuilder {
    endpoints: Vec<String>,
    tls: Option<Tls>,
    call_timeout: Duration,
    connect_timeout: Duration,
    give_up_after: Duration,
    backoff: Backoff,
    max_ids_per_call: u32,
    prefetch: Option<Prefetch>,
    observer: Option<Observer>,
}

impl std::fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("endpoints", &self.endpoints)
            .field("tls", &self.tls)
            .field("call_timeout", &self.call_timeout)
            .field("give_up_after", &self.give_up_after)
            .field("prefetch", &self.prefetch)
            .finish_non_exhaustive()
    }
}

impl ClientBuilder {
    /// The nodes' gRPC addresses, `HOST:PORT` (or `http://`/`https://` URLs).
    pub fn new<I, S>(endpoints: I) -> ClientBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ClientBuilder {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            tls: None,
            call_timeout: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(1),
            give_up_after: Duration::from_secs(30),
            backoff: Backoff {
                initial: Duration::from_millis(50),
                max: Duration::from_secs(5),
            },
            max_ids_per_call: 4096,
            prefetch: None,
            observer: None,
        }
    }

    /// TLS (and mutual TLS) to every node.
    pub fn tls(mut self, tls: Tls) -> ClientBuilder {
        self.tls = Some(tls);
        self
    }

    /// The deadline of one attempt at one node (default 2 s), sent as the gRPC deadline too.
    pub fn call_timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.call_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// How long connecting to a node may take (default 1 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.connect_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// How long a call keeps trying the nodes before it fails (default 30 s).
    pub fn give_up_after(mut self, limit: Duration) -> ClientBuilder {
        self.give_up_after = limit;
        self
    }

    /// The pause before a failed node is asked again: doubling from `initial` up to `max`
    /// (defaults 50 ms and 5 s), or longer when the node says `retry-after`.
    pub fn backoff(mut self, initial: Duration, max: Duration) -> ClientBuilder {
        let initial = initial.max(Duration::from_millis(1));
        self.backoff = Backoff {
            initial,
            max: max.max(initial),
        };
        self
    }

    /// The most IDs asked of a node in one call (1..=100,000, default 4096: one millisecond's
    /// worth; the node's `--max-batch` must allow it).
    pub fn max_ids_per_call(mut self, ids: u32) -> ClientBuilder {
        self.max_ids_per_call = ids.clamp(1, 100_000);
        self
    }

    /// Keeps a buffer of IDs fetched ahead (see [`Prefetch`]).
    pub fn prefetch(mut self, prefetch: Prefetch) -> ClientBuilder {
        self.prefetch = Some(prefetch);
        self
    }

    /// Calls `observer` for every [`Event`].
    pub fn on_event(mut self, observer: impl Fn(&Event<'_>) + Send + Sync + 'static) -> Self {
        self.observer = Some(Arc::new(observer));
        self
    }

    /// The client; connections are made on first use. Must be called inside a tokio runtime.
    pub fn build(self) -> Result<Client, Error> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::Config(
                "the client must be built inside a tokio runtime".into(),
            ));
        }
        if self.endpoints.is_empty() {
            return Err(Error::Config(
                "no endpoint: give at least one HOST:PORT".into(),
            ));
        }
        let nodes = self
            .endpoints
            .iter()
            .map(|e| Node::new(e.trim(), self.tls.as_ref(), self.connect_timeout))
            .collect::<Result<Vec<_>, _>>()?;
        let wake = Arc::new(Notify::new());
        let inner = Arc::new(Inner {
            nodes,
            turn: AtomicUsize::new(0),
            call_timeout: self.call_timeout,
            give_up_after: self.give_up_after,
            backoff: self.backoff,
            max_ids_per_call: self.max_ids_per_call,
            buffer: self.prefetch.map(prefetch::Buffer::new),
            wake: Arc::clone(&wake),
            closed: AtomicBool::new(false),
            layout: OnceLock::new(),
            counters: Counters::default(),
            observer: self.observer,
            filling: tokio::sync::Mutex::new(()),
        });
        if inner.buffer.is_some() {
            tokio::spawn(prefetch::refill(Arc::downgrade(&inner), wake));
        }
        Ok(Client { inner })
    }
}

/// IDs from the service (see the [crate] docs). Clones share one state.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let endpoints: Vec<&str> = self.inner.nodes.iter().map(|n| n.name.as_str()).collect();
        f.debug_struct("Client")
            .field("endpoints", &endpoints)
            .field("prefetch", &self.inner.buffer.as_ref().map(|b| b.settings))
            .finish_non_exhaustive()
    }
}

struct Inner {
    nodes: Vec<Node>,
    /// Whose turn it is (round robin over the usable nodes).
    turn: AtomicUsize,
    call_timeout: Duration,
    give_up_after: Duration,
    backoff: Backoff,
    max_ids_per_call: u32,
    buffer: Option<prefetch::Buffer>,
    /// Wakes the refiller.
    wake: Arc<Notify>,
    closed: AtomicBool,
    /// The service's layout: the first node's answer to `GetInfo`, which every other node's
    /// must equal.
    layout: OnceLock<Layout>,
    counters: Counters,
    observer: Option<Observer>,
    /// One prefetch fetch at a time: the refiller's, or a taker's that found the buffer empty.
    filling: tokio::sync::Mutex<()>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The refiller holds only a weak reference: let it see that the client is gone.
        self.wake.notify_one();
    }
}

impl Client {
    /// One ID: from the prefetch buffer when there is one (a memory read unless it ran dry),
    /// else from a node's `NextId`.
    pub async fn next_id(&self) -> Result<SnowflakeId, Error> {
        let inner = &*self.inner;
        let Some(buffer) = &inner.buffer else {
            self.check_open()?;
            let (id, _) = inner
                .call(
                    Instant::now() + inner.give_up_after,
                    |mut c, t| async move {
                        let mut request = tonic::Request::new(NextIdRequest {});
                        request.set_timeout(t);
                        Ok(vec![c.next_id(request).await?.into_inner().id])
                    },
                    checked,
                )
                .await?;
            inner.counters.served_direct.fetch_add(1, Ordering::Relaxed);
            return Ok(id[0]);
        };
        if let Some(id) = inner.take(buffer) {
            return Ok(id);
        }
        self.check_open()?;
        inner.counters.buffer_misses.fetch_add(1, Ordering::Relaxed);
        // Empty: wait for the fetch in flight, or make one; both within one `give_up_after`
        // (the refiller's fetch may be trying nodes that are all down).
        let started = Instant::now();
        let give_up = started + inner.give_up_after;
        let Ok(_one) = tokio::time::timeout_at(give_up.into(), inner.filling.lock()).await else {
            return Err(inner.unavailable(started));
        };
        if let Some(id) = inner.take(buffer) {
            return Ok(id);
        }
        self.check_open()?;
        let count = buffer.wanted(inner.max_ids_per_call).max(1);
        let born = Instant::now();
        let (ids, _) = inner.fetch_until(count, give_up).await?;
        let (first, rest) = ids.split_first().ok_or(Error::Closed)?;
        buffer.push(rest.iter().map(|id| id.as_u64()).collect(), born);
        inner.counters.served_direct.fetch_add(1, Ordering::Relaxed);
        Ok(*first)
    }

    /// An ID from the prefetch buffer if one is there now, without waiting; `None` without
    /// prefetch, when the buffer is empty, or after [`Client::close`].
    pub fn try_next_id(&self) -> Option<SnowflakeId> {
        let inner = &*self.inner;
        inner.take(inner.buffer.as_ref()?)
    }

    /// `count` IDs (1..=[`MAX_IDS_PER_REQUEST`]), asked of the nodes `max_ids_per_call` at a
    /// time (each part from one node, failing over like [`Client::next_id`]). Parts from
    /// different nodes are not ordered with each other.
    pub async fn next_ids(&self, count: u64) -> Result<Vec<SnowflakeId>, Error> {
        if !(1..=MAX_IDS_PER_REQUEST).contains(&count) {
            return Err(Error::InvalidCount {
                count,
                max: MAX_IDS_PER_REQUEST,
            });
        }
        self.check_open()?;
        let inner = &*self.inner;
        let mut out = Vec::with_capacity(count as usize);
        while (out.len() as u64) < count {
            let left = count - out.len() as u64;
            let part = u32::try_from(left)
                .unwrap_or(u32::MAX)
                .min(inner.max_ids_per_call);
            out.extend(inner.fetch(part).await?);
        }
        inner
            .counters
            .served_direct
            .fetch_add(count, Ordering::Relaxed);
        Ok(out)
    }

    /// One call to one node: `count` IDs (1..=`max_ids_per_call`), failing over like
    /// [`Client::next_id`], with the node that gave them (its index in the builder's list and
    /// its address). For tools that want to know who answered; applications want
    /// [`Client::next_ids`]. Never from the prefetch buffer.
    pub async fn batch(&self, count: u32) -> Result<Batch, Error> {
        let inner = &*self.inner;
        if !(1..=inner.max_ids_per_call).contains(&count) {
            return Err(Error::InvalidCount {
                count: u64::from(count),
                max: u64::from(inner.max_ids_per_call),
            });
        }
        self.check_open()?;
        let give_up = Instant::now() + inner.give_up_after;
        let (ids, endpoint) = inner.fetch_until(count, give_up).await?;
        inner
            .counters
            .served_direct
            .fetch_add(u64::from(count), Ordering::Relaxed);
        Ok(Batch {
            ids,
            endpoint,
            address: inner.nodes[endpoint].name.clone(),
        })
    }

    /// The service's ID layout (name, widths, epoch, largest ID), as its nodes report it in
    /// `GetInfo`: asked of a node (failing over like [`Client::next_id`]) unless already known.
    /// Decode the client's IDs with it: `client.layout().await?.decode(id)`.
    pub async fn layout(&self) -> Result<Layout, Error> {
        let inner = &*self.inner;
        if let Some(layout) = inner.layout.get() {
            return Ok(*layout);
        }
        self.check_open()?;
        let give_up = Instant::now() + inner.give_up_after;
        let (layout, _) = inner
            .call(
                give_up,
                |_, _| async { Ok(()) },
                |(), layout: &Layout| Ok((*layout, 0)),
            )
            .await?;
        Ok(layout)
    }

    /// The smallest and largest ID any node could issue from `from_ms` to `to_ms` (Unix ms, both
    /// included), from a node's `Range`: for `WHERE id BETWEEN min_id AND max_id`, which scans
    /// the primary key's index. A bound outside the layout's lifetime, or `from_ms > to_ms`, is
    /// [`Error::Rejected`] naming the bound.
    pub async fn range(&self, from_ms: u64, to_ms: u64) -> Result<IdRange, Error> {
        self.check_open()?;
        let inner = &*self.inner;
        let give_up = Instant::now() + inner.give_up_after;
        // Beyond int64 is beyond every layout: the node refuses it, naming the bound.
        let (from_ms, to_ms) = (
            i64::try_from(from_ms).unwrap_or(i64::MAX),
            i64::try_from(to_ms).unwrap_or(i64::MAX),
        );
        let (range, _) = inner
            .call(
                give_up,
                move |mut c, t| async move {
                    let mut request = tonic::Request::new(RangeRequest { from_ms, to_ms });
                    request.set_timeout(t);
                    Ok(c.range(request).await?.into_inner())
                },
                |answer, layout: &Layout| {
                    let ids = layout::checked_ids(&[answer.min_id, answer.max_id], layout)?;
                    if ids[0] > ids[1] {
                        return Err(format!(
                            "answered a range whose minimum {} is above its maximum {}",
                            ids[0], ids[1]
                        ));
                    }
                    let range = IdRange {
                        min_id: ids[0],
                        max_id: ids[1],
                    };
                    Ok((range, 0))
                },
            )
            .await?;
        Ok(range)
    }

    /// The counters so far.
    pub fn stats(&self) -> Stats {
        let c = &self.inner.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Stats {
            served_from_buffer: get(&c.served_from_buffer),
            served_direct: get(&c.served_direct),
            fetches: get(&c.fetches),
            fetched_ids: get(&c.fetched_ids),
            failovers: get(&c.failovers),
            discarded: get(&c.discarded),
            buffer_misses: get(&c.buffer_misses),
            buffered: self.inner.buffer.as_ref().map_or(0, prefetch::Buffer::len),
        }
    }

    /// Stops the client (every clone): the refiller ends, the buffered IDs are dropped (never
    /// handed out, so nothing is handed out twice), and later calls fail with
    /// [`Error::Closed`].
    pub fn close(&self) {
        let inner = &*self.inner;
        inner.closed.store(true, Ordering::Release);
        inner.wake.notify_one();
        if let Some(buffer) = &inner.buffer {
            let dropped = buffer.clear();
            if dropped > 0 {
                inner.discarded(dropped);
            }
        }
    }

    fn check_open(&self) -> Result<(), Error> {
        if self.inner.closed.load(Ordering::Acquire) {
            Err(Error::Closed)
        } else {
            Ok(())
        }
    }
}

impl Inner {
    fn event(&self, event: &Event<'_>) {
        if let Some(observer) = &self.observer {
            observer(event);
        }
    }

    fn discarded(&self, ids: u64) {
        self.counters.discarded.fetch_add(ids, Ordering::Relaxed);
        self.event(&Event::Discarded { ids });
    }

    /// An ID from the buffer, if it has a fresh one (asking for a refill when it runs low).
    fn take(&self, buffer: &prefetch::Buffer) -> Option<SnowflakeId> {
        if self.closed.load(Ordering::Acquire) {
            return None;
        }
        let (popped, wake) = buffer.pop(Instant::now());
        if popped.discarded > 0 {
            self.discarded(popped.discarded);
        }
        if wake {
            self.wake.notify_one();
        }
        let id = popped.id?;
        self.counters
            .served_from_buffer
            .fetch_add(1, Ordering::Relaxed);
        SnowflakeId::new(id)
    }

    /// `count` IDs (at most `max_ids_per_call`) from one node, with failover.
    async fn fetch(&self, count: u32) -> Result<Vec<SnowflakeId>, Error> {
        let give_up = Instant::now() + self.give_up_after;
        Ok(self.fetch_until(count, give_up).await?.0)
    }

    /// [`Inner::fetch`] giving up at `give_up`, and which node answered.
    async fn fetch_until(
        &self,
        count: u32,
        give_up: Instant,
    ) -> Result<(Vec<SnowflakeId>, usize), Error> {
        self.call(
            give_up,
            move |mut c, t| async move {
                let mut request = tonic::Request::new(NextIdsRequest { count });
                request.set_timeout(t);
                let ids = c.next_ids(request).await?.into_inner().ids;
                if ids.len() != count as usize {
                    return Err(tonic::Status::internal(format!(
                        "asked for {count} IDs, got {}",
                        ids.len()
                    )));
                }
                Ok(ids)
            },
            checked,
        )
        .await
    }

    /// The next usable node in turn, or when the first skipped one may be asked again.
    fn pick(&self, now: Instant) -> Result<usize, Instant> {
        let n = self.nodes.len();
        let start = self.turn.fetch_add(1, Ordering::Relaxed) % n;
        let mut earliest: Option<Instant> = None;
        for k in 0..n {
            let i = (start + k) % n;
            match self.nodes[i].down_until(now) {
                None => return Ok(i),
                Some(t) => earliest = Some(earliest.map_or(t, |e| e.min(t))),
            }
        }
        Err(earliest.unwrap_or(now))
    }

    /// The node's layout: known, or asked of it now (`GetInfo`), and refused when it is not the
    /// one the client already uses.
    async fn layout_of(
        &self,
        node: &Node,
        mut client: SnowflakeClient<Channel>,
        deadline: Duration,
    ) -> Result<Layout, Failure> {
        if let Some(layout) = node.layout.get() {
            return Ok(*layout);
        }
        let mut request = tonic::Request::new(GetInfoRequest {});
        request.set_timeout(deadline);
        let info = client
            .get_info(request)
            .await
            .map_err(Failure::Status)?
            .into_inner();
        let theirs = layout::from_info(&info).map_err(Failure::Invalid)?;
        let ours = *self.layout.get_or_init(|| theirs);
        if theirs != ours {
            return Err(Failure::Invalid(layout::mixed(&node.name, &theirs, &ours)));
        }
        Ok(*node.layout.get_or_init(|| theirs))
    }

    /// Runs `attempt` (given a client of one node and the attempt's deadline) on the nodes in
    /// turn until one answers with something `check` accepts under the node's layout, the
    /// service refuses the request itself, or `give_up` has passed. What `check` made of the
    /// answer, and which node gave it; `check` also says how many IDs the answer held, for the
    /// counters.
    async fn call<F, Fut, R, T>(
        &self,
        give_up: Instant,
        attempt: F,
        check: impl Fn(R, &Layout) -> Result<(T, u64), String>,
    ) -> Result<(T, usize), Error>
    where
        F: Fn(SnowflakeClient<Channel>, Duration) -> Fut,
        Fut: Future<Output = Result<R, tonic::Status>>,
    {
        let started = Instant::now();
        loop {
            if self.closed.load(Ordering::Acquire) {
                return Err(Error::Closed);
            }
            let now = Instant::now();
            let i = match self.pick(now) {
                Ok(i) => i,
                Err(until) => {
                    if until >= give_up {
                        return Err(self.unavailable(started));
                    }
                    tokio::time::sleep_until(until.into()).await;
                    continue;
                }
            };
            let remaining = give_up.saturating_duration_since(now);
            if remaining.is_zero() {
                return Err(self.unavailable(started));
            }
            let node = &self.nodes[i];
            let deadline = self.call_timeout.min(remaining);
            let sent = Instant::now();
            let client = SnowflakeClient::new(node.channel.clone());
            let answer = tokio::time::timeout(deadline, async {
                let layout = self.layout_of(node, client.clone(), deadline).await?;
                let raw = attempt(client, deadline).await.map_err(Failure::Status)?;
                check(raw, &layout).map_err(Failure::Invalid)
            })
            .await;
            let (error, retry_after) = match answer {
                Ok(Ok((value, ids))) => {
                    if node.succeeded() {
                        self.event(&Event::EndpointBack {
                            endpoint: &node.name,
                        });
                    }
                    if ids > 0 {
                        self.counters.fetches.fetch_add(1, Ordering::Relaxed);
                        self.counters.fetched_ids.fetch_add(ids, Ordering::Relaxed);
                        self.event(&Event::Fetched {
                            endpoint: &node.name,
                            ids,
                            elapsed: sent.elapsed(),
                        });
                    }
                    return Ok((value, i));
                }
                Ok(Err(Failure::Invalid(bad))) => (bad, None),
                Ok(Err(Failure::Status(status)))
                    if status.code() == tonic::Code::InvalidArgument =>
                {
                    return Err(Error::Rejected(status.message().to_owned()));
                }
                // The deadline, as tonic reports it (it enforces the gRPC deadline too).
                Ok(Err(Failure::Status(status)))
                    if matches!(
                        status.code(),
                        tonic::Code::Cancelled | tonic::Code::DeadlineExceeded
                    ) && sent.elapsed() + Duration::from_millis(1) >= deadline =>
                {
                    (no_answer(deadline), None)
                }
                Ok(Err(Failure::Status(status))) => (describe(&status), retry_after(&status)),
                Err(_) => (no_answer(deadline), None),
            };
            let retry_in = node.failed(&self.backoff, retry_after, error.clone());
            self.counters.failovers.fetch_add(1, Ordering::Relaxed);
            self.event(&Event::Failover {
                endpoint: &node.name,
                error: &error,
                retry_in,
            });
        }
    }

    fn unavailable(&self, started: Instant) -> Error {
        let details = self
            .nodes
            .iter()
            .map(|n| {
                format!(
                    "{}: {}",
                    n.name,
                    n.last_error().unwrap_or_else(|| "not tried".into())
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        Error::Unavailable {
            waited_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            details,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_client_with_no_reachable_node_fails_in_time_with_each_reason() {
        // Port 1 on loopback: refused at once.
        let client = ClientBuilder::new(["127.0.0.1:1", "127.0.0.1:2"])
            .give_up_after(Duration::from_millis(400))
            .backoff(Duration::from_millis(20), Duration::from_millis(100))
            .build()
            .unwrap();
        let started = Instant::now();
        let err = client.next_id().await.unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(3));
        let text = err.to_string();
        assert!(text.starts_with("no endpoint could serve within"), "{text}");
        assert!(
            text.contains("127.0.0.1:1: ") && text.contains("127.0.0.1:2: "),
            "{text}"
        );
        assert!(client.stats().failovers >= 2);
    }

    #[tokio::test]
    async fn bad_settings_and_counts_are_refused() {
        let err = ClientBuilder::new(Vec::<String>::new())
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("no endpoint"), "{err}");
        let err = ClientBuilder::new(["nope"]).build().unwrap_err();
        assert!(
            err.to_string().contains("invalid endpoint \"nope\""),
            "{err}"
        );
        let client = ClientBuilder::new(["127.0.0.1:1"]).build().unwrap();
        assert_eq!(
            client.next_ids(0).await.unwrap_err(),
            Error::InvalidCount {
                count: 0,
                max: MAX_IDS_PER_REQUEST
            }
        );
        client.close();
        assert_eq!(client.next_id().await.unwrap_err(), Error::Closed);
    }

    #[test]
    fn building_outside_a_runtime_is_an_error_not_a_panic() {
        let err = ClientBuilder::new(["127.0.0.1:1"]).build().unwrap_err();
        assert!(err.to_string().contains("tokio runtime"), "{err}");
    }
}

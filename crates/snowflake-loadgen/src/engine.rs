//! The protocol-independent engine: open the connections, run one task per connection (closed
//! loop, or on a fixed schedule under `--rate`) through warm-up and measurement, stop on time,
//! count or shutdown, merge the stats.

use crate::config::BenchConfig;
use crate::error::{Error, describe_io};
use crate::pace::{Schedule, Timer, TimerHandle};
use crate::phase::Phase;
use crate::progress;
use crate::report::{Report, StopReason};
use crate::stats::{Live, Stats};
use std::borrow::Cow;
use std::future::Future;
use std::io;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

/// The first pause before reconnecting after a failed connection attempt.
const MIN_BACKOFF: Duration = Duration::from_millis(10);
/// The longest pause between connection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// How long connection tasks get to finish once told to stop (they stop at their next await).
const STOP_GRACE: Duration = Duration::from_secs(2);

/// One protocol's way to open connections and send requests. Each protocol (HTTP now; gRPC and
/// Thrift later) is one module implementing this.
pub(crate) trait Client: Send + Sync + 'static {
    /// One open connection.
    type Connection: Send + 'static;

    /// Opens a connection, within the configured timeout.
    fn connect(&self) -> impl Future<Output = Result<Self::Connection, ConnectFailure>> + Send;

    /// Waits until `connection` can take a request; `false` if it was closed (then it is
    /// reopened without counting an error, as a server may close idle keep-alive connections).
    fn ready(&self, connection: &mut Self::Connection) -> impl Future<Output = bool> + Send;

    /// Sends one request, waits for the answer within the configured timeout and checks it:
    /// the number of IDs received, or why it failed.
    fn request(
        &self,
        connection: &mut Self::Connection,
    ) -> impl Future<Output = Result<u64, Failure>> + Send;
}

/// Opens a TCP connection to the first of `addrs` that answers, within `timeout`, with
/// TCP_NODELAY set: what every protocol's client starts from.
pub(crate) async fn connect_tcp(
    addrs: &[std::net::SocketAddr],
    timeout: Duration,
) -> Result<tokio::net::TcpStream, ConnectFailure> {
    let stream = tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addrs))
        .await
        .map_err(|_| ConnectFailure::timed_out())?
        .map_err(|err| ConnectFailure::from_io(&err))?;
    stream
        .set_nodelay(true)
        .map_err(|err| ConnectFailure::from_io(&err))?;
    Ok(stream)
}

/// Why a connection attempt failed.
#[derive(Debug, Clone)]
pub(crate) struct ConnectFailure {
    /// The error kind counted in the report, e.g. `connect_refused`.
    kind: &'static str,
    /// The I/O error kind, for [`Error::Connect`].
    io_kind: io::ErrorKind,
    /// What went wrong, for [`Error::Connect`].
    reason: String,
}

impl ConnectFailure {
    /// From the error of a socket call.
    pub(crate) fn from_io(err: &io::Error) -> ConnectFailure {
        let kind = match err.kind() {
            io::ErrorKind::ConnectionRefused => "connect_refused",
            io::ErrorKind::TimedOut => "connect_timeout",
            io::ErrorKind::ConnectionReset => "connect_reset",
            io::ErrorKind::AddrNotAvailable => "connect_addr_unavailable",
            _ => "connect_error",
        };
        ConnectFailure {
            kind,
            io_kind: err.kind(),
            reason: describe_io(err),
        }
    }

    /// The attempt took longer than the timeout.
    pub(crate) fn timed_out() -> ConnectFailure {
        ConnectFailure {
            kind: "connect_timeout",
            io_kind: io::ErrorKind::TimedOut,
            reason: "connection timed out".to_owned(),
        }
    }

    /// Any other failure while setting up the connection.
    pub(crate) fn other(reason: String) -> ConnectFailure {
        ConnectFailure {
            kind: "connect_error",
            io_kind: io::ErrorKind::Other,
            reason,
        }
    }
}

/// Why a request failed.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    /// The error kind counted in the report, e.g. `http_503` or `bad_response`.
    kind: Cow<'static, str>,
    /// Whether the connection is unusable afterwards and must be reopened.
    reconnect: bool,
}

impl Failure {
    /// A failure after which the connection stays usable (the whole answer was read).
    pub(crate) fn kept(kind: Cow<'static, str>) -> Failure {
        Failure {
            kind,
            reconnect: false,
        }
    }

    /// A failure that leaves the connection unusable.
    pub(crate) fn lost(kind: Cow<'static, str>) -> Failure {
        Failure {
            kind,
            reconnect: true,
        }
    }

    /// Whether the connection must be reopened after this failure.
    #[cfg(test)]
    pub(crate) fn reconnects(&self) -> bool {
        self.reconnect
    }
}

/// State shared by every connection task.
#[derive(Debug)]
struct Shared {
    /// The most measured requests to start, if bounded by count.
    budget: Option<u64>,
    /// Measured requests started so far (claims against the budget).
    claimed: AtomicU64,
    /// Counters for the progress line.
    live: Arc<Live>,
}

impl Shared {
    /// Claims one measured request; `false` once the budget is spent.
    fn claim(&self) -> bool {
        match self.budget {
            None => true,
            Some(budget) => self.claimed.fetch_add(1, Ordering::Relaxed) < budget,
        }
    }
}

/// Runs a benchmark with `client` until the duration, the request count or `shutdown` ends it.
pub(crate) async fn run<C: Client>(
    client: Arc<C>,
    config: &BenchConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<Report, Error> {
    let mut shutdown = pin!(shutdown);

    // Open every connection first: if none can be opened, fail clearly instead of reporting
    // zero throughput.
    let mut connecting = JoinSet::new();
    for _ in 0..config.connections() {
        let client = Arc::clone(&client);
        connecting.spawn(async move { client.connect().await });
    }
    let mut connections = Vec::with_capacity(config.connections() as usize);
    let mut first_failure = None;
    loop {
        let joined = tokio::select! {
            joined = connecting.join_next() => joined,
            () = &mut shutdown => return Err(Error::Interrupted),
        };
        match joined {
            None => break,
            Some(Ok(Ok(connection))) => connections.push(Some(connection)),
            Some(Ok(Err(failure))) => {
                first_failure.get_or_insert(failure);
                connections.push(None);
            }
            Some(Err(_)) => connections.push(None),
        }
    }
    if connections.iter().all(Option::is_none) {
        let failure = first_failure
            .unwrap_or_else(|| ConnectFailure::other("no connection could be opened".to_owned()));
        return Err(Error::Connect {
            addr: config.addr().to_owned(),
            kind: failure.io_kind,
            reason: failure.reason,
        });
    }

    let first_phase = if config.warmup().is_zero() {
        Phase::Measure
    } else {
        Phase::Warmup
    };
    // Under --rate, one timer (a timerfd on this runtime) wakes every connection when its next
    // request is due; it stops when this function returns.
    let timer = match config.rate() {
        Some(_) => Some(Timer::start().map_err(|err| Error::Runtime {
            reason: describe_io(&err),
        })?),
        None => None,
    };
    let (phase_tx, phase_rx) = watch::channel(first_phase);
    let live = Arc::new(Live::default());
    let shared = Arc::new(Shared {
        budget: config.requests(),
        claimed: AtomicU64::new(0),
        live: Arc::clone(&live),
    });
    let mut tasks = JoinSet::new();
    // The schedule runs on from the warm-up into the measurement.
    let schedule_start = std::time::Instant::now();
    let connection_count = u32::try_from(connections.len()).unwrap_or(u32::MAX);
    for (index, connection) in (0..connection_count).zip(connections) {
        let pace = timer.as_ref().zip(config.rate()).map(|(timer, rate)| Pace {
            timer: timer.handle(),
            schedule: Schedule::new(schedule_start, index, connection_count, rate),
        });
        tasks.spawn(drive(
            Arc::clone(&client),
            Arc::clone(&shared),
            connection,
            phase_rx.clone(),
            pace,
        ));
    }
    let progress = config.progress().then(|| {
        tokio::spawn(progress::run(
            Arc::clone(&live),
            phase_rx.clone(),
            config.warmup(),
        ))
    });

    let mut total = Stats::new();
    let mut task_failures = 0_u64;
    let mut collect =
        |joined: Result<Stats, tokio::task::JoinError>, total: &mut Stats| match joined {
            Ok(stats) => total.merge(stats),
            Err(_) => task_failures += 1,
        };

    if first_phase == Phase::Warmup {
        tokio::select! {
            () = tokio::time::sleep(config.warmup()) => {}
            () = &mut shutdown => {
                let _ = phase_tx.send(Phase::Stop);
                tasks.shutdown().await;
                if let Some(progress) = progress {
                    let _ = progress.await;
                }
                return Err(Error::Interrupted);
            }
        }
        let _ = phase_tx.send(Phase::Measure);
    }

    let started = Instant::now();
    let deadline = started + config.duration();
    let stopped_by = loop {
        tokio::select! {
            () = tokio::time::sleep_until(deadline) => break StopReason::Duration,
            () = &mut shutdown => break StopReason::Interrupted,
            joined = tasks.join_next() => match joined {
                None => break StopReason::Requests,
                Some(joined) => collect(joined, &mut total),
            },
        }
    };
    let elapsed = started.elapsed();
    let _ = phase_tx.send(Phase::Stop);
    let drained = tokio::time::timeout(STOP_GRACE, async {
        while let Some(joined) = tasks.join_next().await {
            collect(joined, &mut total);
        }
    })
    .await;
    if drained.is_err() {
        tasks.abort_all();
    }
    if let Some(progress) = progress {
        let _ = progress.await;
    }

    let mut errors = std::mem::take(&mut total.errors);
    if task_failures > 0 {
        errors.add(Cow::Borrowed("task_failed"), task_failures);
    }
    Ok(Report::new(
        config,
        &total,
        errors.into_map(),
        elapsed,
        stopped_by,
    ))
}

/// Resolves when the run is told to stop (or the run is gone).
async fn stopped(phase: &mut watch::Receiver<Phase>) {
    let _ = phase.wait_for(|phase| *phase == Phase::Stop).await;
}

/// Waits `backoff` and doubles it (up to [`MAX_BACKOFF`]); `false` if told to stop meanwhile.
async fn back_off(phase: &mut watch::Receiver<Phase>, backoff: &mut Duration) -> bool {
    let delay = *backoff;
    *backoff = (delay * 2).min(MAX_BACKOFF);
    tokio::select! {
        biased;
        () = stopped(phase) => false,
        () = tokio::time::sleep(delay) => true,
    }
}

/// When a connection under `--rate` sends: its schedule, and the timer that wakes it.
#[derive(Debug)]
struct Pace {
    /// Wakes the connection when its next request is due.
    timer: TimerHandle,
    /// When its requests are due.
    schedule: Schedule,
}

/// One connection's loop: (re)connect, wait until the next request is due (under `--rate`) and
/// the connection is ready, claim, send, check, record, until told to stop or the request budget
/// is spent. Without `pace` it is a closed loop: each request goes out as soon as the previous
/// answer arrived.
async fn drive<C: Client>(
    client: Arc<C>,
    shared: Arc<Shared>,
    mut connection: Option<C::Connection>,
    mut phase: watch::Receiver<Phase>,
    mut pace: Option<Pace>,
) -> Stats {
    let mut stats = Stats::new();
    let mut backoff = MIN_BACKOFF;
    // Whether the current connection has answered a request well: one the server closes before
    // that is retried after a back-off, not in a busy loop.
    let mut answered = false;
    // Whether the next request was already claimed against the budget. Under --rate a measured
    // request is claimed before waiting for its due time, so that once the budget is spent no
    // connection waits for a request it will not send (which would stretch the run).
    let mut claimed = false;
    loop {
        if *phase.borrow() == Phase::Stop {
            break;
        }
        let Some(open) = connection.as_mut() else {
            let attempt = tokio::select! {
                biased;
                () = stopped(&mut phase) => break,
                attempt = client.connect() => attempt,
            };
            match attempt {
                Ok(open) => {
                    connection = Some(open);
                    answered = false;
                }
                Err(failure) => {
                    if *phase.borrow() == Phase::Measure {
                        stats.record_connect_error(Cow::Borrowed(failure.kind));
                        shared.live.add_error();
                    }
                    if !back_off(&mut phase, &mut backoff).await {
                        break;
                    }
                }
            }
            continue;
        };

        if let Some(pace) = &pace {
            if !claimed && *phase.borrow() == Phase::Measure {
                if !shared.claim() {
                    break;
                }
                claimed = true;
            }
            // Never ahead of the schedule; a request already overdue goes out at once.
            tokio::select! {
                biased;
                () = stopped(&mut phase) => break,
                () = pace.timer.sleep_until(pace.schedule.due()) => {}
            }
        }

        let ready = tokio::select! {
            biased;
            () = stopped(&mut phase) => break,
            ready = client.ready(open) => ready,
        };
        if !ready {
            connection = None;
            if !answered {
                if *phase.borrow() == Phase::Measure {
                    stats.record_connect_error(Cow::Borrowed("connection_closed"));
                    shared.live.add_error();
                }
                if !back_off(&mut phase, &mut backoff).await {
                    break;
                }
            }
            continue;
        }

        let measured = match *phase.borrow() {
            Phase::Warmup => false,
            Phase::Measure => true,
            Phase::Stop => break,
        };
        if measured && !claimed && !shared.claim() {
            break;
        }
        claimed = false;
        // Closed loop: latency from when the request went out. Under --rate: from when it was
        // due, so that the time it waited behind a slow answer counts too (coordinated omission
        // corrected, as wrk2 does).
        let latency_from = match &mut pace {
            None => Instant::now(),
            Some(pace) => {
                let due = pace.schedule.due();
                pace.schedule.advance();
                Instant::from_std(due)
            }
        };
        let outcome = tokio::select! {
            biased;
            () = stopped(&mut phase) => break,
            outcome = client.request(open) => outcome,
        };
        let latency = latency_from.elapsed();
        match outcome {
            Ok(ids) => {
                answered = true;
                backoff = MIN_BACKOFF;
                if measured {
                    stats.record_ok(ids, latency);
                    shared.live.add_ok(ids);
                }
            }
            Err(failure) => {
                if measured {
                    stats.record_failed(failure.kind);
                    shared.live.add_error();
                }
                if failure.reconnect {
                    connection = None;
                    if !answered && !back_off(&mut phase, &mut backoff).await {
                        break;
                    }
                }
            }
        }
    }
    stats
}

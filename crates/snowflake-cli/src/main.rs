//! `snowflake`: encode, decode and generate Snowflake IDs.
//!
//! The binary only parses arguments and prints; everything else lives in `snowflake-core`.

use clap::{Args, Parser, Subcommand};
use settings_args::{LayoutArgs, ServeCli};
use snowflake_core::{Bits, Clock, Field, Generator, Layout, TWITTER_EPOCH_MS};
use snowflake_loadgen::BenchArgs;
use snowflake_server::{Config, Listeners, LogFormat, Node, ServeArgs};
use std::io::{self, BufWriter, Write};
use std::process::ExitCode;
use std::sync::Arc;

mod audit;
mod layouts;
mod pg_keeper;
mod settings_args;
mod state;

/// The most IDs `snowflake next` prints in one run (about 25 s of output at the layout's limit).
const MAX_NEXT_COUNT: u64 = 100_000_000;

/// `--version`: a campaign self-test build says what it is.
const VERSION: &str = if snowflake_server::CAMPAIGN_BUG_BUILD {
    concat!(
        env!("CARGO_PKG_VERSION"),
        " (fault-campaign self-test build: it can issue duplicate IDs)"
    )
} else {
    env!("CARGO_PKG_VERSION")
};

/// Unique, time-ordered 63-bit IDs (Twitter's 2010 Snowflake layout by default: 41-bit
/// milliseconds since 2010-11-04T01:42:54.657Z, 5-bit datacenter, 5-bit worker, 12-bit
/// sequence; --layout js-safe keeps every ID within 2^53 - 1).
#[derive(Debug, Parser)]
#[command(name = "snowflake", version = VERSION, about, max_term_width = 100)]
struct Cli {
    #[command(flatten)]
    layout: LayoutArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Build the ID for a timestamp, datacenter, worker and sequence, and print it.
    Encode(EncodeArgs),
    /// Print the fields of each ID: Unix ms, ISO-8601 UTC time, datacenter, worker, sequence.
    Decode(DecodeArgs),
    /// Print fresh IDs, one per line. Without --endpoints they come from this process alone,
    /// which keeps no state: two runs with the same datacenter and worker ids can repeat each
    /// other's IDs (at once, or after the clock was set back). For keys that must never
    /// repeat, take them from running services with --endpoints.
    Next(NextArgs),
    /// Print the layout: name, epoch, bit widths and shifts, largest ID, last representable
    /// time, node count, rate limit; warns when fewer than 10 years are left.
    Layout(layouts::LayoutArgs),
    /// Print the smallest and largest ID any node could issue in a time window (for
    /// `WHERE id BETWEEN min_id AND max_id` over a primary key).
    Range(layouts::RangeArgs),
    /// Run the ID service (HTTP/JSON on 127.0.0.1:8080, gRPC on :50051, Thrift on :7609 by
    /// default) until SIGTERM or SIGINT.
    Serve(Box<ServeCli>),
    /// Keep a PostgreSQL database's pair in the fleet (the extension's fleet mode, beside the
    /// database): lease it in etcd as a node does and grant the database an issue limit that
    /// lapses on its own, until SIGTERM or SIGINT (docs/postgres.md).
    #[command(
        after_help = "The pair is always the database's own (snowflake.datacenter_id and \
        snowflake.worker_id, read from snowflake_status()); the fleet flags are serve's, with \
        serve's meaning: --reserve-ms is how far ahead the fleet's mark and the database's grant \
        reach, --advertise-addr defaults to the database's address."
    )]
    PgKeeper(Box<pg_keeper::PgKeeperArgs>),
    /// Inspect the persisted high-water marks (`state show`), or lower one a wrong clock left in
    /// the future (`state lower-mark`).
    #[command(subcommand)]
    State(state::StateCommand),
    /// Check IDs for duplicates, invalid lines and future dates (files or stdin, decimal or
    /// JSON lines), in bounded memory: exit 0 when clean, 1 when not, 2 on usage errors.
    Audit(audit::AuditArgs),
    /// Load-test a running service: requests/s, IDs/s and latency percentiles, every response
    /// checked (loopback by default; bounded by --duration and/or --requests).
    Bench(BenchArgs),
}

#[derive(Debug, Args)]
struct EncodeArgs {
    /// Unix time in milliseconds, from the epoch up to the layout's last representable time.
    #[arg(long, value_name = "T", allow_negative_numbers = true)]
    timestamp_ms: String,
    /// Datacenter id, 0..=31 (under --layout: 0..=2^D - 1).
    #[arg(long, value_name = "D", allow_negative_numbers = true)]
    datacenter_id: String,
    /// Worker id, 0..=31 (under --layout: 0..=2^W - 1).
    #[arg(long, value_name = "W", allow_negative_numbers = true)]
    worker_id: String,
    /// Sequence within the millisecond, 0..=4095 (under --layout: 0..=2^S - 1).
    #[arg(long, value_name = "S", allow_negative_numbers = true)]
    sequence: String,
}

#[derive(Debug, Args)]
struct DecodeArgs {
    /// Print one JSON object per line instead of text.
    #[arg(long)]
    json: bool,
    /// IDs to decode (decimal, 0..=9223372036854775807; under --layout, up to its largest ID).
    #[arg(value_name = "ID", required = true, allow_negative_numbers = true)]
    ids: Vec<String>,
}

#[derive(Debug, Args)]
struct NextArgs {
    /// How many IDs to print, 1..=100000000.
    #[arg(
        long,
        short = 'n',
        value_name = "N",
        default_value = "1",
        allow_negative_numbers = true
    )]
    count: String,
    /// Datacenter id, 0..=31 (under --layout: 0..=2^D - 1) [default: 0].
    #[arg(long, value_name = "D", allow_negative_numbers = true)]
    datacenter_id: Option<String>,
    /// Worker id, 0..=31 (under --layout: 0..=2^W - 1) [default: 0].
    #[arg(long, value_name = "W", allow_negative_numbers = true)]
    worker_id: Option<String>,
    /// Fetch the IDs from running services instead (their gRPC addresses), through the client
    /// library: failing over between them, and exiting non-zero within 30 s, printing no ID,
    /// when none can serve.
    #[arg(
        long,
        value_name = "HOST:PORT[,HOST:PORT...]",
        value_delimiter = ',',
        conflicts_with_all = ["datacenter_id", "worker_id"]
    )]
    endpoints: Option<Vec<String>>,
    /// With --endpoints: how long to keep trying when no endpoint can serve, 1..=300 seconds.
    #[arg(
        long,
        value_name = "SECS",
        default_value = "25",
        requires = "endpoints"
    )]
    timeout_secs: String,
    /// With --endpoints: the CA that signed the services' certificates (gRPC over TLS).
    #[arg(long, value_name = "FILE", requires = "endpoints")]
    tls_ca: Option<std::path::PathBuf>,
    /// With --tls-ca: a client certificate, for services that require mutual TLS.
    #[arg(long, value_name = "FILE", requires_all = ["tls_ca", "tls_client_key"])]
    tls_client_cert: Option<std::path::PathBuf>,
    /// The client certificate's private key.
    #[arg(long, value_name = "FILE", requires = "tls_client_cert")]
    tls_client_key: Option<std::path::PathBuf>,
}

/// `next --endpoints`: `count` IDs from running services, printed as each part arrives (parts
/// of up to 1,000,000; nothing is printed before the first arrived).
fn next_from_services(
    args: &NextArgs,
    endpoints: &[String],
    count: u64,
    expected: Option<Layout>,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let tls = match &args.tls_ca {
        None => None,
        Some(ca) => {
            let identity = args
                .tls_client_cert
                .as_deref()
                .zip(args.tls_client_key.as_deref());
            Some(snowflake_client::Tls::from_files(ca, identity)?)
        }
    };
    let timeout_secs = args
        .timeout_secs
        .parse::<u64>()
        .ok()
        .filter(|n| (1..=300).contains(n))
        .ok_or_else(|| {
            anyhow::anyhow!(
                "invalid --timeout-secs: expected a whole number of seconds in 1..=300, found {:?}",
                args.timeout_secs
            )
        })?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut builder = snowflake_client::ClientBuilder::new(endpoints.iter().cloned())
            // By default within the 30 s the command promises, connection set-up included.
            .give_up_after(std::time::Duration::from_secs(timeout_secs));
        if let Some(tls) = tls {
            builder = builder.tls(tls);
        }
        let client = builder.build()?;
        // The services say which layout they run; one given here (--layout, --epoch-ms) must be
        // theirs, or the caller would read the IDs wrongly.
        if let Some(expected) = expected {
            let theirs = client.layout().await?;
            if theirs != expected {
                anyhow::bail!(
                    "the services run the layout {} with epoch {}, not {} with epoch {} as given",
                    theirs.name(),
                    theirs.epoch_ms(),
                    expected.name(),
                    expected.epoch_ms()
                );
            }
        }
        let mut left = count;
        while left > 0 {
            let part = left.min(snowflake_client::MAX_IDS_PER_REQUEST);
            for id in client.next_ids(part).await? {
                writeln!(out, "{id}")?;
            }
            left -= part;
        }
        client.close();
        Ok(())
    })
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return usage_error(&err),
    };
    match cli.command {
        Command::Serve(args) => {
            return serve(&args.0, &cli.layout);
        }
        Command::PgKeeper(args) => {
            // The database says its layout; one given here must be it.
            let given = cli.layout.layout.is_some() || cli.layout.epoch_ms.is_some();
            return match layout(&cli.layout) {
                Ok(layout) => pg_keeper::run(&args, given.then_some(layout)),
                Err(err) => {
                    eprintln!("error: {err}");
                    ExitCode::from(2)
                }
            };
        }
        Command::Bench(args) => {
            return match layout(&cli.layout) {
                Ok(layout) => snowflake_loadgen::run_cli_with_layout(args, layout),
                Err(err) => {
                    eprintln!("error: {err}");
                    ExitCode::from(2)
                }
            };
        }
        Command::Audit(args) => {
            return match layout(&cli.layout) {
                Ok(layout) => audit::run(&args, layout),
                Err(err) => {
                    eprintln!("error: {err}");
                    ExitCode::from(2)
                }
            };
        }
        _ => {}
    }
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Prints help and version as clap does; squeezes every real usage error onto one line.
fn usage_error(err: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        err.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let _ = err.print();
        return ExitCode::from(u8::try_from(err.exit_code()).unwrap_or(2));
    }
    let text = err.render().to_string();
    let line = text
        .lines()
        .map(str::trim)
        .take_while(|line| !line.starts_with("Usage:") && !line.starts_with("For more information"))
        .filter(|line| !line.is_empty() && !line.starts_with("tip:"))
        .collect::<Vec<_>>()
        .join(" ");
    eprintln!("{line} (see --help)");
    ExitCode::from(2)
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.downcast_ref::<io::Error>()
        .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
}

/// The layout of `--layout` and `--epoch-ms` (Twitter's widths and epoch by default).
fn layout(args: &LayoutArgs) -> anyhow::Result<Layout> {
    let bits = layout_bits(args)?;
    let epoch_ms = match &args.epoch_ms {
        None => TWITTER_EPOCH_MS,
        Some(text) => Layout::TWITTER
            .parse(Field::Epoch, text)
            .map_err(|e| anyhow::anyhow!("--epoch-ms: {e}"))?,
    };
    if args.layout.is_none() && args.epoch_ms.is_none() {
        return Ok(Layout::TWITTER);
    }
    Ok(Layout::new(epoch_ms, bits)?)
}

/// The widths `--layout` names (Twitter's without it).
fn layout_bits(args: &LayoutArgs) -> anyhow::Result<Bits> {
    match &args.layout {
        None => Ok(Bits::TWITTER),
        Some(name) => name
            .parse()
            .map_err(|e| anyhow::anyhow!("--layout (or SNOWFLAKE_LAYOUT): {e}")),
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let layout = layout(&cli.layout)?;
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    match cli.command {
        Command::Encode(args) => {
            let id = layout.encode(
                layout.parse(Field::Timestamp, &args.timestamp_ms)?,
                layout.parse(Field::DatacenterId, &args.datacenter_id)?,
                layout.parse(Field::WorkerId, &args.worker_id)?,
                layout.parse(Field::Sequence, &args.sequence)?,
            )?;
            writeln!(out, "{id}")?;
        }
        Command::Decode(args) => {
            // Parse every ID before printing any, so bad input leaves stdout empty.
            // Under the layout: an ID above its largest is refused, not decoded past its end.
            let ids = args
                .ids
                .iter()
                .map(|text| layout.parse_id(text).and_then(|id| layout.describe(id)))
                .collect::<Result<Vec<_>, _>>()?;
            for decoded in ids {
                if args.json {
                    serde_json::to_writer(&mut out, &decoded)?;
                    writeln!(out)?;
                } else {
                    writeln!(out, "{decoded}")?;
                }
            }
        }
        Command::Next(args) => {
            let count = snowflake_core::parse_count(&args.count, MAX_NEXT_COUNT)?;
            if let Some(endpoints) = &args.endpoints {
                let given = cli.layout.layout.is_some() || cli.layout.epoch_ms.is_some();
                next_from_services(&args, endpoints, count, given.then_some(layout), &mut out)?;
                out.flush()?;
                return Ok(());
            }
            let datacenter_id = args.datacenter_id.as_deref().unwrap_or("0");
            let worker_id = args.worker_id.as_deref().unwrap_or("0");
            let generator = Generator::builder()
                .layout(layout)
                .datacenter_id(layout.parse(Field::DatacenterId, datacenter_id)?)
                .worker_id(layout.parse(Field::WorkerId, worker_id)?)
                .build()?;
            let mut left = count;
            while left > 0 {
                let batch = generator.next_batch(left.min(layout.max_ids_per_ms()))?;
                for id in batch {
                    writeln!(out, "{id}")?;
                }
                left -= batch.len();
            }
        }
        Command::Serve(_) | Command::PgKeeper(_) | Command::Bench(_) | Command::Audit(_) => {
            unreachable!("handled in main")
        }
        Command::State(command) => {
            let given = state::GivenLayout {
                layout,
                given: cli.layout.layout.is_some() || cli.layout.epoch_ms.is_some(),
            };
            state::run(command, cli.layout.epoch_ms.as_deref(), given, &mut out)?;
        }
        Command::Layout(args) => {
            let now_ms = snowflake_core::SystemClock.now_ms();
            layouts::show(&args, &layout, now_ms, &mut out, &mut io::stderr())?;
        }
        Command::Range(args) => layouts::range(&args, &layout, &mut out)?,
    }
    out.flush()?;
    Ok(())
}

/// `snowflake serve`: configuration errors exit 2 before anything is bound; start-up failures
/// exit 1; a graceful stop on SIGTERM/SIGINT exits 0.
fn serve(args: &ServeArgs, layout: &LayoutArgs) -> ExitCode {
    // Trusted time starts here, before the claim or the peer check (which can take seconds):
    // a clock that steps during the start is then a step like any other, not the anchor.
    let clock: Arc<dyn snowflake_core::Clock> = Arc::new(snowflake_core::SystemClock);
    let anchor = snowflake_server::clock_trust::ClockAnchor::now(clock.as_ref());
    let config = match Config::resolve_with_layout(
        args,
        layout.epoch_ms.as_deref(),
        layout.layout.as_deref(),
    ) {
        Ok(config) => config,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::from(2);
        }
    };
    if let Err(err) = init_logging(&config) {
        eprintln!("error: {err}");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.limits.worker_threads)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        // The first SIGTERM or SIGINT stops the node at any point: while it claims its pair
        // (which may retry for --claim-timeout-secs) as well as while it serves.
        let signal = shutdown_signal()?;
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            signal.await;
            let _ = stop_tx.send(true);
        });
        let stopped = |mut stop: tokio::sync::watch::Receiver<bool>| async move {
            let _ = stop.wait_for(|stopped| *stopped).await;
        };
        if snowflake_server::CAMPAIGN_BUG_BUILD {
            tracing::error!(
                "this is the fault campaign's self-test build (--cfg snowflake_campaign_bug): it \
                 can issue duplicate IDs; never run it for real"
            );
        }
        // Cloned: the pair in `config` is replaced with the one granted, inside the claim.
        let coordination = config.identity.coordination.clone();
        log_start(&config);
        let listeners = Listeners::bind(&config).await?;
        let mut config = config;
        let request = snowflake_fleet::PairRequest {
            datacenter_id: config.identity.datacenter_id,
            worker_id: config.identity.worker_id,
            pinned: config.identity.worker_id_given(),
        };
        let applicant = snowflake_fleet::Applicant {
            host: config.identity.hostname.clone(),
            advertise_addr: config.identity.advertise_addr.clone(),
            listeners: [
                ("http", listeners.http_addr()),
                ("grpc", listeners.grpc_addr()),
                ("thrift", listeners.thrift_addr()),
                ("resp", listeners.resp_addr()),
            ]
            .into_iter()
            .filter_map(|(protocol, addr)| {
                addr.map(|addr| snowflake_fleet::Listener { protocol, addr })
            })
            .collect(),
        };
        let layout = config.layout;
        let connected = snowflake_fleet::connect(
            coordination.as_ref(),
            &layout,
            request,
            &applicant,
            clock.as_ref(),
            stopped(stop_rx.clone()),
            |pair, coordinator| {
                config.identity.datacenter_id = pair.datacenter_id;
                config.identity.worker_id = pair.worker_id;
                Node::with_coordinator(&config, Arc::clone(&clock), anchor, coordinator)
            },
        )
        .await;
        let node = match connected {
            Ok(node) => node,
            // A signal during the claim: a graceful stop (what was held is given back).
            Err(err) if err.stopped() => {
                tracing::info!("stopped before serving: {err}");
                return anyhow::Ok(());
            }
            Err(err) => return Err(err.into()),
        };
        let tls = match &listeners.tls {
            None => "off",
            Some(tls) if tls.mutual() => "mutual",
            Some(_) => "on",
        };
        if let Some(addr) = listeners.http_addr() {
            tracing::info!(%addr, tls, "http listening");
        }
        if let Some(addr) = listeners.grpc_addr() {
            tracing::info!(%addr, tls, "grpc listening");
        }
        if let Some(addr) = listeners.resp_addr() {
            tracing::info!(%addr, tls, "resp listening");
        }
        if let Some(addr) = listeners.admin_addr() {
            tracing::info!(%addr, "admin listening");
        }
        if let Some(addr) = listeners.thrift_addr() {
            tracing::info!(%addr, "thrift listening");
        }
        snowflake_server::run(node, &config, listeners, stopped(stop_rx)).await?;
        anyhow::Ok(())
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!(error = %err, "stopped");
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}

/// The start-up line: the listeners asked for, where the pair comes from, the layout, the
/// state directory and the coordinator, in a few hundred characters and without a secret (the
/// whole configuration is `snowflake serve --help`'s business, not the log's).
fn log_start(config: &Config) {
    let coordination = config.identity.coordination.as_ref();
    let listeners = [
        ("http", config.listeners.http_addr),
        ("grpc", config.listeners.grpc_addr),
        ("thrift", config.listeners.thrift_addr),
        ("resp", config.listeners.resp_addr),
        ("admin", config.listeners.admin_addr),
    ]
    .into_iter()
    .filter_map(|(name, addr)| addr.map(|addr| format!("{name}={addr}")))
    .collect::<Vec<_>>()
    .join(" ");
    let pair = match coordination {
        None => format!(
            "datacenter {}, worker {} ({})",
            config.identity.datacenter_id,
            config.identity.worker_id,
            config.identity.identity_source()
        ),
        Some(fleet) if config.identity.worker_id_given() => format!(
            "datacenter {}, worker {} from {}",
            config.identity.datacenter_id,
            config.identity.worker_id,
            fleet.source()
        ),
        Some(fleet) => format!(
            "datacenter {}, the lowest free worker from {}",
            config.identity.datacenter_id,
            fleet.source()
        ),
    };
    let coordinator = coordination.map_or_else(|| "none".to_owned(), ToString::to_string);
    tracing::info!(
        version = VERSION,
        %listeners,
        %pair,
        layout = %config.layout,
        state_dir = %config.state_dir.display(),
        %coordinator,
        "starting"
    );
}

/// Logs to stderr, human-readable or JSON, filtered by `--log`.
fn init_logging(config: &Config) -> anyhow::Result<()> {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_new(&config.logging.log).map_err(|e| {
        anyhow::anyhow!(
            "invalid --log (or SNOWFLAKE_LOG): {e}, found {:?}",
            config.logging.log
        )
    })?;
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(io::stderr)
        .with_ansi(io::stderr().is_terminal());
    let installed = match config.logging.log_format {
        LogFormat::Human => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    installed.map_err(|e| anyhow::anyhow!("cannot install the logger: {e}"))
}

/// Completes on the first SIGTERM or SIGINT.
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = terminate.recv() => tracing::info!("SIGTERM received"),
            _ = interrupt.recv() => tracing::info!("SIGINT received"),
        }
    })
}

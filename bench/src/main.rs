//! `snowflake-compare`: our Snowflake generator and service side by side with the alternatives,
//! in one run on one machine; writes the report in BENCHMARKS.md.

mod ab;
mod ceiling;
mod charts;
mod client;
mod lib_bench;
mod model;
mod parse;
mod procfs;
mod report;
mod server;
mod service;
mod services;
mod soak;
mod tools;
mod zero_work_h2;

use anyhow::Result;
use clap::{Args, Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The command BENCHMARKS.md says produced it.
const FULL_COMMAND: &str = "cargo run --release -p snowflake-compare -- all";
/// The commands BENCHMARKS.md gives for its memory soak section.
const SOAK_COMMAND: &str = "cargo run --release -p snowflake-compare -- soak\ncargo run --release -p snowflake-compare -- report";

#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// In-process: our generator against other Rust Snowflake crates; writes OUT/lib.json.
    Lib(LibArgs),
    /// Over the network: our server against Redis INCR and a PostgreSQL sequence; writes
    /// OUT/service.json.
    Service(ServiceArgs),
    /// The client library alone (prefetch paced at 1,000,000 IDs/s, round trips) against a
    /// fresh server; replaces the client measurements in OUT/service.json.
    Client(ClientArgs),
    /// Memory over minutes of full load on our server (HTTP, gRPC and Thrift); writes
    /// OUT/soak.json. Not part of `all`: it takes 10 minutes.
    Soak(SoakArgs),
    /// Markdown and SVG charts from DIR/lib.json, DIR/service.json and DIR/soak.json.
    Report(ReportArgs),
    /// Two builds of our server side by side: single-ID throughput over HTTP, gRPC, Thrift and
    /// RESP, and batches over HTTP, in alternating rounds, medians and the candidate's share
    /// (prints a table; writes nothing).
    Ab(AbArgs),
    /// lib, service and report in one go (not the soak; with --quick, a short soak too).
    All(AllArgs),
    /// The zero-work gRPC server on h2 that `service` measures beside nghttpd (a fixed
    /// NextId answer on one thread), serving on ADDR until killed.
    #[command(hide = true)]
    ZeroWorkH2 {
        /// The address to listen on, e.g. 127.0.0.1:50090.
        addr: String,
    },
}

#[derive(Debug, Args)]
struct AbArgs {
    /// The build to compare against (e.g. one built from the previous commit).
    #[arg(long, value_name = "BIN")]
    baseline: PathBuf,
    /// The build measured [default: target/release/snowflake, rebuilt, or SNOWFLAKE_BIN].
    #[arg(long, value_name = "BIN")]
    candidate: Option<PathBuf>,
    /// Rounds (each build goes first in every other one; the median is reported).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 4)]
    secs: u64,
}

#[derive(Debug, Args)]
struct LibArgs {
    /// Seconds per throughput measurement.
    #[arg(long, default_value_t = 1.0)]
    secs: f64,
    /// Rounds (the median is reported).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Thread counts sharing one generator.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    threads: Vec<usize>,
    /// IDs per crate checked for duplicates (from 2 threads).
    #[arg(long, default_value_t = 1_000_000)]
    sample: usize,
    /// Directory for the JSON results [default: target/compare].
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct ServiceArgs {
    /// Seconds per measurement (wrk and pgbench round to whole seconds).
    #[arg(long, default_value_t = 4.0)]
    secs: f64,
    /// Rounds (the median is reported).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Directory for the JSON results [default: target/compare].
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct ClientArgs {
    /// Seconds per measurement of the round trips and of the unpaced run.
    #[arg(long, default_value_t = 4.0)]
    secs: f64,
    /// Rounds (the median is reported).
    #[arg(long, default_value_t = client::ROUNDS)]
    rounds: usize,
    /// `next_id()` calls per round of the paced run (at 1,000,000 a second).
    #[arg(long, default_value_t = client::PACED_CALLS)]
    calls: u64,
    /// Directory for the JSON results [default: target/compare].
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct SoakArgs {
    /// Minutes of full load [default: 10; 0.1 with --quick].
    #[arg(long)]
    minutes: Option<f64>,
    /// Seconds per chunk of load, one VmRSS sample after each [default: 10; 1 with --quick].
    #[arg(long)]
    sample_secs: Option<u64>,
    /// A smoke run of a few seconds (0.1 minutes, 1 s chunks) [default OUT: target/compare/quick].
    #[arg(long)]
    quick: bool,
    /// Directory for soak.json [default: target/compare].
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct ReportArgs {
    /// Directory holding lib.json, service.json and soak.json [default: target/compare].
    #[arg(long, alias = "out")]
    dir: Option<PathBuf>,
    /// Where to write the markdown [default: BENCHMARKS.md at the repository root; with --dir,
    /// DIR/BENCHMARKS.md].
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Where to write the SVG charts [default: docs/bench; with --dir, DIR].
    #[arg(long)]
    charts: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct AllArgs {
    /// A smoke run in well under a minute (0.2 s measurements, 1 round, `soak --quick`); writes
    /// everything into OUT, never into BENCHMARKS.md or docs/bench.
    #[arg(long)]
    quick: bool,
    /// Directory for the JSON results (and, with --quick, the report) [default: target/compare;
    /// with --quick, target/compare/quick].
    #[arg(long)]
    out: Option<PathBuf>,
}

/// The workspace root, whatever the current directory.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("bench/ has a parent")
        .to_owned()
}

/// `out`, or `target/compare` (`target/compare/quick` for a smoke run, so that it never
/// replaces the results of a full run), created if missing.
fn out_dir(out: Option<PathBuf>, quick: bool) -> Result<PathBuf> {
    let dir = out.unwrap_or_else(|| {
        root().join(if quick {
            "target/compare/quick"
        } else {
            "target/compare"
        })
    });
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

fn lib(args: LibArgs) -> Result<()> {
    let dir = out_dir(args.out, false)?;
    let run = lib_bench::run(args.secs, args.rounds, &args.threads, args.sample)?;
    run.save(&dir.join("lib.json"))?;
    eprintln!(
        "lib: wrote {} ({:.0} s)",
        dir.join("lib.json").display(),
        run.wall_secs
    );
    Ok(())
}

fn service(args: ServiceArgs) -> Result<()> {
    let dir = out_dir(args.out, false)?;
    let run = service::run(&root(), args.secs, args.rounds)?;
    run.save(&dir.join("service.json"))?;
    eprintln!(
        "service: wrote {} ({:.0} s)",
        dir.join("service.json").display(),
        run.wall_secs
    );
    Ok(())
}

fn soak(args: SoakArgs) -> Result<()> {
    let dir = out_dir(args.out, args.quick)?;
    let (minutes, sample_secs) = if args.quick {
        (0.1, 1)
    } else {
        (soak::DEFAULT_MINUTES, soak::DEFAULT_SAMPLE_SECS)
    };
    let soak = soak::run(
        &root(),
        args.minutes.unwrap_or(minutes),
        args.sample_secs.unwrap_or(sample_secs),
    )?;
    soak.save(&dir.join("soak.json"))?;
    eprintln!(
        "soak: wrote {} ({:.0} s); VmRSS idle {:.0} KiB, end {:.0} KiB, {:+.0} KiB ({:+.1}%) since {:.0} s",
        dir.join("soak.json").display(),
        soak.wall_secs,
        soak.idle_rss_kib,
        soak.end_rss_kib,
        soak.growth.kib,
        soak.growth.pct,
        soak.growth.warm_elapsed_secs
    );
    Ok(())
}

fn main() -> Result<()> {
    match Cli::parse().command {
        Cmd::Lib(a) => lib(a),
        Cmd::Service(a) => service(a),
        Cmd::Client(a) => {
            let dir = out_dir(a.out, false)?;
            client::rerun(&root(), &dir, a.secs, a.rounds, a.calls)
        }
        Cmd::Soak(a) => soak(a),
        Cmd::ZeroWorkH2 { addr } => zero_work_h2::serve(&addr),
        Cmd::Ab(a) => {
            let candidate = match a.candidate {
                Some(bin) => bin,
                None => server::sf_binary(&root())?,
            };
            ab::run(&a.baseline, &candidate, a.rounds, a.secs)
        }
        Cmd::Report(a) => {
            // Without --dir: the repository's report, as `all` writes it.
            let (markdown, charts) = match &a.dir {
                None => (root().join("BENCHMARKS.md"), root().join("docs/bench")),
                Some(dir) => (dir.join("BENCHMARKS.md"), dir.clone()),
            };
            let dir = out_dir(a.dir, false)?;
            let markdown = a.markdown.unwrap_or(markdown);
            let charts = a.charts.unwrap_or(charts);
            report::write(&dir, &markdown, &charts, FULL_COMMAND, SOAK_COMMAND)
        }
        Cmd::All(a) => {
            let started = Instant::now();
            let dir = out_dir(a.out, a.quick)?;
            // Five rounds: on a 2-vCPU VM a door's ratio to its reference moves by 10-30 points
            // from one round to the next (BENCHMARKS.md's "rounds" columns), and the median of
            // three such ratios turned a verdict either way between runs of the same code.
            let (lib_secs, svc_secs, rounds) = if a.quick {
                (0.2, 0.2, 1)
            } else {
                (1.0, 4.0, 5)
            };
            lib(LibArgs {
                secs: lib_secs,
                rounds,
                threads: vec![1, 2, 4],
                sample: if a.quick { 200_000 } else { 1_000_000 },
                out: Some(dir.clone()),
            })?;
            service(ServiceArgs {
                secs: svc_secs,
                rounds,
                out: Some(dir.clone()),
            })?;
            // The full soak takes 10 minutes and is its own command; the smoke run exercises it.
            if a.quick {
                soak(SoakArgs {
                    minutes: None,
                    sample_secs: None,
                    quick: true,
                    out: Some(dir.clone()),
                })?;
            }
            let (markdown, charts) = if a.quick {
                (dir.join("BENCHMARKS.md"), dir.clone())
            } else {
                (root().join("BENCHMARKS.md"), root().join("docs/bench"))
            };
            report::write(&dir, &markdown, &charts, FULL_COMMAND, SOAK_COMMAND)?;
            eprintln!("all: done in {:.0} s", started.elapsed().as_secs_f64());
            Ok(())
        }
    }
}

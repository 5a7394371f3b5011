//! `snowflake-compare`: our Snowflake generator and service side by side with the alternatives,
//! in one run on one machine; writes the report in BENCHMARKS.md.

mod charts;
mod lib_bench;
mod model;
mod parse;
mod report;
mod service;

use anyhow::Result;
use clap::{Args, Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The command BENCHMARKS.md says produced it.
const FULL_COMMAND: &str = "cargo run --release -p snowflake-compare -- all";

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
    /// Markdown and SVG charts from OUT/lib.json and OUT/service.json.
    Report(ReportArgs),
    /// lib, service and report in one go.
    All(AllArgs),
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
struct ReportArgs {
    /// Directory holding lib.json and service.json [default: target/compare].
    #[arg(long, alias = "out")]
    dir: Option<PathBuf>,
    /// Where to write the markdown [default: DIR/BENCHMARKS.md].
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Where to write the SVG charts [default: DIR].
    #[arg(long)]
    charts: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct AllArgs {
    /// A smoke run in well under a minute (0.2 s measurements, 1 round); writes everything into
    /// OUT, never into BENCHMARKS.md or docs/bench.
    #[arg(long)]
    quick: bool,
    /// Directory for the JSON results (and, with --quick, the report) [default: target/compare].
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

fn out_dir(out: Option<PathBuf>) -> Result<PathBuf> {
    let dir = out.unwrap_or_else(|| root().join("target/compare"));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

fn lib(args: LibArgs) -> Result<()> {
    let dir = out_dir(args.out)?;
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
    let dir = out_dir(args.out)?;
    let run = service::run(&root(), args.secs, args.rounds)?;
    run.save(&dir.join("service.json"))?;
    eprintln!(
        "service: wrote {} ({:.0} s)",
        dir.join("service.json").display(),
        run.wall_secs
    );
    Ok(())
}

fn main() -> Result<()> {
    match Cli::parse().command {
        Cmd::Lib(a) => lib(a),
        Cmd::Service(a) => service(a),
        Cmd::Report(a) => {
            let dir = out_dir(a.dir)?;
            let markdown = a.markdown.unwrap_or_else(|| dir.join("BENCHMARKS.md"));
            let charts = a.charts.unwrap_or_else(|| dir.clone());
            report::write(&dir, &markdown, &charts, FULL_COMMAND)
        }
        Cmd::All(a) => {
            let started = Instant::now();
            let dir = out_dir(a.out)?;
            let (lib_secs, svc_secs, rounds) = if a.quick {
                (0.2, 0.2, 1)
            } else {
                (1.0, 4.0, 3)
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
            let (markdown, charts) = if a.quick {
                (dir.join("BENCHMARKS.md"), dir.clone())
            } else {
                (root().join("BENCHMARKS.md"), root().join("docs/bench"))
            };
            report::write(&dir, &markdown, &charts, FULL_COMMAND)?;
            eprintln!("all: done in {:.0} s", started.elapsed().as_secs_f64());
            Ok(())
        }
    }
}

//! `snowflake audit [FILE...]` (SPEC §8): reads IDs from files or stdin and reports duplicates,
//! invalid lines, IDs dated in the future, and per (datacenter, worker) counts and time ranges.
//! The engine is `snowflake-audit`; this module parses flags, opens the inputs, shows progress
//! on a terminal and maps the findings to the exit status.

use clap::Args;
use snowflake_audit::{Auditor, MIN_MEMORY_BYTES, Options, Progress};
use snowflake_core::{Layout, parse_count};
use std::fs::File;
use std::io::{self, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The largest memory budget, in MiB (64 GiB).
const MAX_MEMORY_MIB: u64 = 64 << 10;
/// The most examples of each kind.
const MAX_EXAMPLES: u64 = 1000;
/// The longest line accepted by --max-line-bytes (1 GiB).
const MAX_LINE_BYTES: u64 = 1 << 30;

#[derive(Debug, Args)]
#[command(after_help = "\
Input: one decimal ID per line, or JSON lines with an \"id\" (string or number) and/or an \"ids\" \
array, as `snowflake decode --json` and the HTTP API print them. Blank lines are skipped; \
surrounding whitespace and \\r are ignored. Anything else, and lines longer than \
--max-line-bytes, are invalid lines.

Memory stays within --memory-mib whatever the input's size: above it, sorted runs of IDs are \
spilled to --temp-dir (about 6 bytes an ID) and merged.

Exit status: 0 no duplicate and no invalid line; 1 duplicates or invalid lines (or IDs dated in \
the future, with --fail-on-future); 2 a usage error, an input that cannot be read, or a \
temporary directory that cannot take the spill (nothing is reported then).

Example: psql -c \"\\copy (select id from t) to stdout\" | snowflake audit")]
pub struct AuditArgs {
    /// Files to read, one after the other (`-` or none: stdin).
    #[arg(value_name = "FILE")]
    files: Vec<PathBuf>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Exit 1 when an ID is dated after --now-ms (they are always reported).
    #[arg(long)]
    fail_on_future: bool,
    /// The time IDs are compared with, Unix ms [default: now].
    #[arg(long, value_name = "MS", allow_negative_numbers = true)]
    now_ms: Option<String>,
    /// Memory for sorting, in MiB, 1..=65536; more IDs than fit are spilled to --temp-dir.
    #[arg(
        long,
        value_name = "MIB",
        default_value = "160",
        allow_negative_numbers = true
    )]
    memory_mib: String,
    /// Where sorted runs are spilled [default: $TMPDIR or /tmp].
    #[arg(long, value_name = "DIR", env = "SNOWFLAKE_AUDIT_TEMP_DIR")]
    temp_dir: Option<PathBuf>,
    /// Examples of each finding to print, 0..=1000.
    #[arg(
        long,
        value_name = "N",
        default_value = "10",
        allow_negative_numbers = true
    )]
    examples: String,
    /// Longest line, in bytes, 1..=1073741824 (a million IDs on one JSON line take 22 MB).
    #[arg(
        long,
        value_name = "BYTES",
        default_value = "33554432",
        allow_negative_numbers = true
    )]
    max_line_bytes: String,
}

/// An input, opened before anything is read so that a missing file fails at once.
enum Input {
    Stdin,
    File(PathBuf, File),
}

pub fn run(args: &AuditArgs, layout: Layout) -> ExitCode {
    match audit(args, layout) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::from(2)
        }
    }
}

fn audit(args: &AuditArgs, layout: Layout) -> anyhow::Result<ExitCode> {
    let memory_mib = parse_count(&args.memory_mib, MAX_MEMORY_MIB)
        .map_err(|e| anyhow::anyhow!("--memory-mib: {e}"))?;
    let examples = parse_in(&args.examples, 0, MAX_EXAMPLES, "--examples")?;
    let max_line_bytes = parse_count(&args.max_line_bytes, MAX_LINE_BYTES)
        .map_err(|e| anyhow::anyhow!("--max-line-bytes: {e}"))?;
    let mut options = Options {
        layout,
        memory_bytes: usize::try_from(memory_mib << 20)?.max(MIN_MEMORY_BYTES),
        examples: usize::try_from(examples)?,
        max_line_bytes: usize::try_from(max_line_bytes)?,
        fail_on_future: args.fail_on_future,
        ..Options::default()
    };
    if let Some(now) = &args.now_ms {
        options.now_ms = parse_in(now, 0, i64::MAX as u64, "--now-ms")?;
    }
    if let Some(dir) = &args.temp_dir {
        if !dir.is_dir() {
            anyhow::bail!("--temp-dir {}: not a directory", dir.display());
        }
        options.temp_dir.clone_from(dir);
    }
    let inputs = open_inputs(&args.files)?;
    let mut progress = ProgressLine::new();
    let mut auditor = Auditor::new(options);
    for input in inputs {
        let result = match input {
            Input::Stdin => auditor.read("-", io::stdin().lock(), &mut |p| progress.show(p)),
            Input::File(path, file) => {
                let name = path.display().to_string();
                auditor.read(&name, file, &mut |p| progress.show(p))
            }
        };
        if let Err(err) = result {
            progress.clear();
            return Err(err.into());
        }
    }
    progress.checking();
    let report = auditor.finish();
    progress.clear();
    let report = report?;
    let mut out = io::stdout().lock();
    let written = if args.json {
        serde_json::to_writer(&mut out, &report)
            .map_err(io::Error::from)
            .and_then(|()| writeln!(out))
    } else {
        write!(out, "{report}")
    };
    match written.and_then(|()| out.flush()) {
        Ok(()) => {}
        Err(err) if err.kind() == io::ErrorKind::BrokenPipe => {}
        Err(err) => return Err(err.into()),
    }
    Ok(if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `min..=max`, with the usual message.
fn parse_in(text: &str, min: u64, max: u64, flag: &str) -> anyhow::Result<u64> {
    match text.parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) && !text.starts_with('+') => Ok(n),
        _ => anyhow::bail!("{flag}: expected {min}..={max}, found {text:?}"),
    }
}

/// Opens every input first: a file that cannot be read stops the audit before any is read.
fn open_inputs(files: &[PathBuf]) -> anyhow::Result<Vec<Input>> {
    if files.is_empty() {
        return Ok(vec![Input::Stdin]);
    }
    let mut inputs = Vec::with_capacity(files.len());
    let mut stdin_taken = false;
    for path in files {
        if path.as_os_str() == "-" {
            if stdin_taken {
                anyhow::bail!("stdin (-) is named twice");
            }
            stdin_taken = true;
            inputs.push(Input::Stdin);
            continue;
        }
        let file =
            File::open(path).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
        let meta = file
            .metadata()
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
        if meta.is_dir() {
            anyhow::bail!("cannot read {}: it is a directory", path.display());
        }
        inputs.push(Input::File(path.clone(), file));
    }
    Ok(inputs)
}

/// "audit: 12,345,678 ids read (250 MB)" on stderr, rewritten in place, only on a terminal.
struct ProgressLine {
    terminal: bool,
    started: Instant,
    last: Option<Instant>,
    shown: bool,
}

impl ProgressLine {
    fn new() -> ProgressLine {
        ProgressLine {
            terminal: io::stderr().is_terminal(),
            started: Instant::now(),
            last: None,
            shown: false,
        }
    }

    fn show(&mut self, progress: Progress) {
        if !self.terminal
            || self
                .last
                .is_some_and(|t| t.elapsed() < Duration::from_millis(250))
        {
            return;
        }
        self.last = Some(Instant::now());
        let secs = self.started.elapsed().as_secs_f64().max(1e-3);
        let mut err = io::stderr().lock();
        let _ = write!(
            err,
            "\raudit: {} ids read ({} MB, {:.1} M ids/s)\x1b[K",
            progress.ids,
            progress.bytes / 1_000_000,
            progress.ids as f64 / secs / 1e6
        );
        let _ = err.flush();
        self.shown = true;
    }

    fn checking(&mut self) {
        if self.shown {
            let mut err = io::stderr().lock();
            let _ = write!(err, "\raudit: sorting and checking…\x1b[K");
            let _ = err.flush();
        }
    }

    fn clear(&mut self) {
        if self.shown {
            let mut err = io::stderr().lock();
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
            self.shown = false;
        }
    }
}

//! `snowflake state show` and `snowflake state lower-mark`: the operator's view of the persisted
//! high-water marks (SPEC §8), in the state directory and in the fleet's coordination service.
//!
//! A mark is the promise that no ID of a (datacenter, worker) pair is dated after it. A clock
//! that was wrong for long enough (or an older version that trusted a clock step) can leave one
//! far in the future, and the pair then cannot open until the clock passes it. `lower-mark`
//! lowers it, but only while nothing can be issuing under it: the state directory's lock must be
//! free (no node runs on it), and in a fleet nobody may hold the pair. Each copy is one atomic
//! conditional write, and each is logged with who and when (in the fleet's record, and in
//! `lower-mark.log` in the state directory).

use crate::settings_args::{Shared, SharedKeys};
use anyhow::{Context, anyhow, bail};
use clap::{Args, Subcommand};
use serde_json::json;
use snowflake_core::{Field, Layout, LayoutRecord, SystemClock, format_unix_ms};
use snowflake_server::clock_trust::{Checked, ClockAnchor, MAX_AUTO_TRUSTED_STEP_MS};
use snowflake_server::state::{Mark, MarkKind, StateDir, StoredClock};
use snowflake_server::{Config, Coordination};
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, Subcommand)]
pub enum StateCommand {
    /// Print the persisted high-water marks: the state directory's, and with --etcd-endpoints
    /// or --zookeeper (plus --datacenter-id/--worker-id) the fleet's copy.
    Show(ShowArgs),
    /// Lower a poisoned high-water mark (one a wrong clock left in the future), locally and in
    /// the fleet's copy; refused while a node runs on the state directory or holds the pair.
    LowerMark(LowerArgs),
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    #[command(flatten)]
    target: Target,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// The node's --max-clock-step-ms, to say whether a start now would see the clock as
    /// stepped forward against `clock.json`, 0..=86400000 [default: as for `serve`, 1000].
    #[arg(
        long,
        env = "SNOWFLAKE_MAX_CLOCK_STEP_MS",
        value_name = "MS",
        allow_negative_numbers = true
    )]
    max_clock_step_ms: Option<String>,
}

#[derive(Debug, Args)]
pub struct LowerArgs {
    #[command(flatten)]
    target: Target,
    /// The new mark, in Unix milliseconds; it must be below the current one. IDs above it may
    /// be issued again: only lower a mark to a time no ID of the pair was ever issued after
    /// (check with `snowflake audit`).
    #[arg(long, value_name = "MS", allow_negative_numbers = true)]
    to: String,
    /// Confirms that no ID of this pair dated after --to was ever used.
    #[arg(long)]
    yes: bool,
}

/// Which marks: the state directory, the coordination service, the pair.
#[derive(Debug, Args)]
struct Target {
    /// `serve`'s state directory and fleet settings, with `serve`'s definitions.
    #[command(flatten)]
    serve: Shared<TargetFlags>,
    /// The pair's datacenter id, 0..=31 (under --layout: 0..=2^D - 1).
    #[arg(long, value_name = "D", allow_negative_numbers = true)]
    datacenter_id: Option<String>,
    /// The pair's worker id, 0..=31 (under --layout: 0..=2^W - 1).
    #[arg(long, value_name = "W", allow_negative_numbers = true)]
    worker_id: Option<String>,
}

/// The settings of `serve` that say where the marks are.
#[derive(Debug, Clone)]
struct TargetFlags;

impl SharedKeys for TargetFlags {
    const KEYS: &'static [&'static str] = &[
        "state_dir",
        "etcd_endpoints",
        "etcd_prefix",
        "etcd_ca",
        "etcd_cert",
        "etcd_key",
        "etcd_user",
        "etcd_password_file",
        "zookeeper",
        "zookeeper_path",
        "zookeeper_auth_file",
        "zookeeper_ca",
        "zookeeper_cert",
        "zookeeper_key",
        "allow_cleartext_credentials",
    ];
}

/// The target, validated as `serve` validates the same settings.
struct Resolved {
    config: Config,
    /// The pair, when both ids were given.
    pair: Option<(u64, u64)>,
}

impl Target {
    fn resolve(
        &self,
        epoch_ms: Option<&str>,
        layout: Layout,
        max_clock_step_ms: Option<&String>,
    ) -> anyhow::Result<Resolved> {
        if self.datacenter_id.is_some() != self.worker_id.is_some() {
            bail!("give both --datacenter-id and --worker-id, or neither");
        }
        // The pair in the layout's ranges (`serve`'s settings below know Twitter's only).
        for (flag, field, text) in [
            ("--datacenter-id", Field::DatacenterId, &self.datacenter_id),
            ("--worker-id", Field::WorkerId, &self.worker_id),
        ] {
            if let Some(text) = text {
                layout
                    .parse(field, text)
                    .map_err(|e| anyhow!("invalid {flag}: {e}"))?;
            }
        }
        let mut args = self.serve.0.clone();
        let pair = [
            ("datacenter_id", &self.datacenter_id),
            ("worker_id", &self.worker_id),
        ];
        for (key, value) in pair {
            if let Some(value) = value {
                args.set(key, value);
            }
        }
        if let Some(value) = max_clock_step_ms {
            args.set("max_clock_step_ms", value);
        }
        let mut config = Config::resolve(&args, epoch_ms)?;
        config.layout = layout;
        let pair = self
            .worker_id
            .is_some()
            .then_some((config.identity.datacenter_id, config.identity.worker_id));
        if pair.is_none() && config.identity.coordination.is_some() {
            bail!(
                "the fleet's copy of a mark belongs to one pair: give --datacenter-id and --worker-id"
            );
        }
        Ok(Resolved { config, pair })
    }
}

/// The global `--layout`/`--epoch-ms` of a `state` command.
#[derive(Debug, Clone, Copy)]
pub struct GivenLayout {
    /// The layout (Twitter's when neither is given).
    pub layout: Layout,
    /// Whether either was given: `show` then requires the fleet to run it, and otherwise reads
    /// the fleet's marks under the layout the fleet records.
    pub given: bool,
}

/// Runs a `state` command; `layout` is the global `--layout`/`--epoch-ms` (whose epoch
/// `epoch_ms` also gives as text, for the settings `serve` shares).
pub fn run(
    command: StateCommand,
    epoch_ms: Option<&str>,
    layout: GivenLayout,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    match command {
        StateCommand::Show(args) => show(&args, epoch_ms, layout, out),
        StateCommand::LowerMark(args) => lower(&args, epoch_ms, layout, out),
    }
}

/// One local state file, as shown.
fn local_json(path: &Path, mark: &Mark) -> serde_json::Value {
    json!({
        "file": path.display().to_string(),
        "datacenter_id": mark.datacenter_id,
        "worker_id": mark.worker_id,
        "high_water_ms": mark.high_water_ms,
        "time": format_unix_ms(mark.high_water_ms),
        "kind": mark.kind,
        "written_at_ms": mark.written_at_ms,
        "written_at": format_unix_ms(mark.written_at_ms),
        "pid": mark.pid,
        "epoch_ms": mark.epoch_ms,
        "layout": mark.written_layout(),
    })
}

/// The state files of `dir` (all, or the pair's), read without taking the lock: a running
/// node replaces its file atomically, so a reader sees one whole record or the other. Each
/// with the layout it records, whatever it is (`show` prints it).
fn local_marks(dir: &Path, pair: Option<(u64, u64)>) -> anyhow::Result<Vec<(PathBuf, Mark)>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(e)
                .with_context(|| format!("cannot read state directory {}", dir.display()));
        }
    };
    let mut marks = Vec::new();
    for entry in entries {
        let entry =
            entry.with_context(|| format!("cannot read state directory {}", dir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(ids) = name
            .strip_prefix("node-")
            .and_then(|n| n.strip_suffix(".json"))
        else {
            continue;
        };
        let Some((d, w)) = ids.split_once('-') else {
            continue;
        };
        let (Ok(d), Ok(w)) = (d.parse::<u64>(), w.parse::<u64>()) else {
            continue;
        };
        if pair.is_some_and(|pair| pair != (d, w)) {
            continue;
        }
        let mark = StateDir::read_any_mark(&entry.path(), d, w)?;
        marks.push((entry.path(), mark));
    }
    marks.sort_by_key(|(_, m)| (m.datacenter_id, m.worker_id));
    Ok(marks)
}

fn show(
    args: &ShowArgs,
    epoch_ms: Option<&str>,
    layout: GivenLayout,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let Resolved { mut config, pair } =
        args.target
            .resolve(epoch_ms, layout.layout, args.max_clock_step_ms.as_ref())?;
    let local = local_marks(&config.state_dir, pair)?;
    let clock = ClockShown::read(&config.state_dir, config.clock.max_clock_step_ms);
    // The fleet's layout record: the fleet's marks are read under it (a --layout given here
    // must be it).
    let recorded = fleet_layout(&config)?;
    if let Some((location, record)) = &recorded {
        let fleet_layout = record
            .to_layout()
            .map_err(|e| anyhow!("the fleet's layout record at {location}: {e}"))?;
        if layout.given && fleet_layout != config.layout {
            bail!(
                "the fleet runs the layout {} (epoch {}, recorded at {location}), not {} (epoch \
                 {}) as given",
                record.name,
                record.epoch_ms,
                config.layout.name(),
                config.layout.epoch_ms()
            );
        }
        config.layout = fleet_layout;
    }
    let fleet = match pair {
        Some((d, w)) => fleet_mark(&config, d, w)?,
        None => None,
    };
    if args.json {
        let value = json!({
            "state_dir": config.state_dir.display().to_string(),
            "local": local.iter().map(|(p, m)| local_json(p, m)).collect::<Vec<_>>(),
            "fleet": fleet.as_ref().map(|(service, mark)| json!({
                "service": service,
                "location": mark.location,
                "high_water_ms": mark.high_water_ms,
                "time": mark.written_ms().map(format_unix_ms),
                "holder": mark.holder,
                "value": mark.value,
            })),
            "fleet_layout": recorded.as_ref().map(|(location, record)| json!({
                "location": location,
                "layout": record,
            })),
            "clock": clock.json(),
        });
        writeln!(out, "{value}")?;
        return Ok(());
    }
    writeln!(out, "state directory {}", config.state_dir.display())?;
    if local.is_empty() {
        writeln!(
            out,
            "  no mark{}",
            pair.map_or(String::new(), |(d, w)| format!(
                " for datacenter {d} worker {w}"
            ))
        )?;
    }
    for (path, mark) in &local {
        let written = mark.written_layout();
        writeln!(
            out,
            "  datacenter {} worker {}: high-water mark {} ({}), {}, written {} by pid {} under the \
             layout {} (epoch {}) ({})",
            mark.datacenter_id,
            mark.worker_id,
            mark.high_water_ms,
            format_unix_ms(mark.high_water_ms),
            match mark.kind {
                MarkKind::Reservation => "a reservation (the node did not stop cleanly, or runs)",
                MarkKind::Shutdown => "the exact point of a graceful shutdown",
            },
            format_unix_ms(mark.written_at_ms),
            mark.pid,
            written.name,
            written.epoch_ms,
            path.display()
        )?;
    }
    clock.write_text(out)?;
    if let Some((location, record)) = &recorded {
        writeln!(
            out,
            "fleet layout {} (epoch {}), recorded at {location}",
            record.name, record.epoch_ms
        )?;
    }
    if let Some((service, mark)) = &fleet {
        writeln!(out, "{service} {}", mark.location)?;
        match mark.written_ms() {
            Some(mark_ms) => writeln!(
                out,
                "  high-water mark {mark_ms} ({})",
                format_unix_ms(mark_ms)
            )?,
            None => writeln!(out, "  high-water mark none (never written)")?,
        }
        match &mark.holder {
            Some(holder) => writeln!(out, "  held by {holder}")?,
            None => writeln!(out, "  not held")?,
        }
    }
    Ok(())
}

/// `clock.json`, the previous run's last trusted time, beside what the clock reads now: what
/// the clock check at the next start will compare (see `snowflake_server::clock_trust`).
enum ClockShown {
    /// No record: the next start trusts its first reading (or the latest mark, if later).
    None { path: PathBuf },
    /// A record the node cannot use: the next start logs this and trusts its first reading.
    Unreadable { path: PathBuf, error: String },
    /// A record.
    Record {
        path: PathBuf,
        stored: StoredClock,
        /// The wall clock now (Unix ms).
        now_ms: u64,
        /// On this boot: what the check at a start now would find.
        checked: Option<Checked>,
        /// The --max-clock-step-ms the check used.
        max_step_ms: u64,
    },
}

impl ClockShown {
    fn read(dir: &Path, max_step_ms: u64) -> ClockShown {
        let path = StateDir::clock_path(dir);
        match StateDir::read_clock(dir) {
            Ok(None) => ClockShown::None { path },
            Err(error) => ClockShown::Unreadable { path, error },
            Ok(Some(stored)) => {
                let mut anchor = ClockAnchor::now(&SystemClock);
                let now_ms = anchor.wall_ms;
                let checked = anchor.check_against(&stored.point, max_step_ms);
                ClockShown::Record {
                    path,
                    stored,
                    now_ms,
                    checked,
                    max_step_ms,
                }
            }
        }
    }

    fn json(&self) -> serde_json::Value {
        match self {
            ClockShown::None { .. } => serde_json::Value::Null,
            ClockShown::Unreadable { path, error } => json!({
                "file": path.display().to_string(),
                "error": error,
            }),
            ClockShown::Record {
                path,
                stored,
                now_ms,
                checked,
                max_step_ms,
            } => json!({
                "file": path.display().to_string(),
                "trusted_ms": stored.point.trusted_ms,
                "time": format_unix_ms(stored.point.trusted_ms),
                "boot_id": stored.point.boot_id,
                "since_boot_ms": stored.point.since_boot_ms,
                "pid": stored.pid,
                "this_boot": checked.is_some(),
                "now_ms": now_ms,
                "expected_now_ms": checked.map(|c| c.expected_ms),
                "ahead_ms": checked.map(|c| ahead_ms(*now_ms, c.expected_ms)),
                "max_clock_step_ms": max_step_ms,
                "start_sees_step": checked.map(|c| c.stepped),
            }),
        }
    }

    fn write_text(&self, out: &mut impl Write) -> anyhow::Result<()> {
        match self {
            ClockShown::None { path } => writeln!(
                out,
                "  no clock record ({}): a start trusts its first clock reading",
                path.display()
            )?,
            ClockShown::Unreadable { error, .. } => writeln!(
                out,
                "  clock record unusable ({error}): a start logs this and trusts its first clock reading"
            )?,
            ClockShown::Record {
                path,
                stored,
                now_ms,
                checked,
                max_step_ms,
            } => {
                writeln!(
                    out,
                    "  clock record: trusted {} ({}), written by pid {} ({})",
                    stored.point.trusted_ms,
                    format_unix_ms(stored.point.trusted_ms),
                    stored.pid,
                    path.display()
                )?;
                match checked {
                    None => writeln!(
                        out,
                        "    from an earlier boot: a start does not compare the clock with it"
                    )?,
                    Some(c) => {
                        let ahead = ahead_ms(*now_ms, c.expected_ms);
                        let verdict = if !c.stepped {
                            "a start now trusts the clock".to_owned()
                        } else if u64::try_from(ahead).is_ok_and(|a| a > MAX_AUTO_TRUSTED_STEP_MS) {
                            format!(
                                "a start now sees a forward step of more than a day and never \
                                 trusts it automatically: if the new time is right, remove {} \
                                 and start again",
                                path.display()
                            )
                        } else {
                            format!(
                                "a start now sees a forward step (more than --max-clock-step-ms \
                                 {max_step_ms} and the drift allowance) and issues nothing until \
                                 it has held for --clock-step-trust-secs"
                            )
                        };
                        writeln!(
                            out,
                            "    this boot, {} ms ago: the clock should read {} and reads {} ({ahead:+} ms); {verdict}",
                            c.down_ms,
                            format_unix_ms(c.expected_ms),
                            format_unix_ms(*now_ms),
                        )?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// How far `now_ms` is ahead of `expected_ms` (negative: behind), clamped to an `i64`: a record
/// can hold any `u64`, and JSON numbers beyond 64 bits are not ours to print.
fn ahead_ms(now_ms: u64, expected_ms: u64) -> i64 {
    let ahead = i128::from(now_ms) - i128::from(expected_ms);
    i64::try_from(ahead).unwrap_or(if ahead < 0 { i64::MIN } else { i64::MAX })
}

/// The fleet's layout record and where it is, if the node runs in a fleet that has one.
fn fleet_layout(config: &Config) -> anyhow::Result<Option<(String, LayoutRecord)>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (location, stored) = runtime.block_on(async {
        match &config.identity.coordination {
            Some(Coordination::Etcd(etcd)) => {
                let stored = snowflake_fleet::etcd::read_layout(etcd)
                    .await
                    .map_err(|e| anyhow!("cannot read the fleet's layout in etcd: {e}"))?;
                anyhow::Ok((format!("{}/layout", etcd.prefix), stored))
            }
            Some(Coordination::ZooKeeper(zookeeper)) => {
                let stored = snowflake_fleet::zookeeper::read_layout(zookeeper)
                    .await
                    .map_err(|e| anyhow!("cannot read the fleet's layout in ZooKeeper: {e}"))?;
                anyhow::Ok((zookeeper.layout_path(), stored))
            }
            None => anyhow::Ok((String::new(), None)),
        }
    })?;
    let Some(stored) = stored else {
        return Ok(None);
    };
    let record = snowflake_fleet::read_layout_record(&stored).map_err(|e| {
        anyhow!(
            "the fleet's layout record at {location} cannot be read ({e}): {}",
            String::from_utf8_lossy(&stored)
        )
    })?;
    Ok(Some((location, record)))
}

/// The fleet's copy of the pair's mark, if the node runs in a fleet.
fn fleet_mark(
    config: &Config,
    datacenter_id: u64,
    worker_id: u64,
) -> anyhow::Result<Option<(&'static str, snowflake_fleet::StoredMark)>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        match &config.identity.coordination {
            Some(Coordination::Etcd(etcd)) => {
                let pair = snowflake_fleet::Pair {
                    datacenter_id,
                    worker_id,
                };
                let mark = snowflake_fleet::etcd::read_mark(etcd, &config.layout, pair)
                    .await
                    .map_err(|e| anyhow!("cannot read the mark in etcd: {e}"))?;
                Ok(Some(("etcd", mark)))
            }
            Some(Coordination::ZooKeeper(zookeeper)) => {
                let mark =
                    snowflake_fleet::zookeeper::read_mark(zookeeper, &config.layout, worker_id)
                        .await
                        .map_err(|e| anyhow!("cannot read the mark in ZooKeeper: {e}"))?;
                Ok(Some(("zookeeper", mark)))
            }
            None => Ok(None),
        }
    })
}

/// Who is lowering the mark: the user (the one behind sudo, if any) and the host.
fn operator() -> String {
    let user = ["SUDO_USER", "USER", "LOGNAME"]
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
        .unwrap_or_else(|| "unknown".into());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "unknown-host".into());
    format!("{user}@{host}")
}

fn lower(
    args: &LowerArgs,
    epoch_ms: Option<&str>,
    layout: GivenLayout,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let Resolved { config, pair } = args.target.resolve(epoch_ms, layout.layout, None)?;
    let layout = config.layout;
    let Some((datacenter_id, worker_id)) = pair else {
        bail!("lower-mark needs the pair: --datacenter-id D --worker-id W");
    };
    let to_ms = layout
        .parse(Field::Timestamp, &args.to)
        .map_err(|e| anyhow!("--to: {e}"))?;
    if !args.yes {
        bail!(
            "lowering the mark of datacenter {datacenter_id} worker {worker_id} to {to_ms} ({}) lets \
             the pair issue ids after that time again: if any id of the pair dated after it was \
             ever used, they will repeat. Check with `snowflake audit`, then pass --yes",
            format_unix_ms(to_ms)
        );
    }
    let by = operator();
    let now_ms = snowflake_core::Clock::now_ms(&snowflake_core::SystemClock);
    // The local copy first takes the directory's lock: no node may run on it meanwhile.
    let state = StateDir::open(&config.state_dir)?;
    let local = state.load(datacenter_id, worker_id, &layout)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let lowering = snowflake_fleet::LowerMark {
        to_ms,
        by: &by,
        now_ms,
    };
    let fleet = runtime.block_on(async {
        match &config.identity.coordination {
            Some(Coordination::Etcd(etcd)) => {
                let pair = snowflake_fleet::Pair {
                    datacenter_id,
                    worker_id,
                };
                let previous = snowflake_fleet::etcd::lower_mark(etcd, &layout, pair, &lowering)
                    .await
                    .map_err(|e| anyhow!("etcd: {e}"))?;
                anyhow::Ok(Some(("etcd", previous)))
            }
            Some(Coordination::ZooKeeper(zookeeper)) => {
                let previous = snowflake_fleet::zookeeper::lower_mark(
                    zookeeper, &layout, worker_id, &lowering,
                )
                .await
                .map_err(|e| anyhow!("ZooKeeper: {e}"))?;
                anyhow::Ok(Some(("zookeeper", previous)))
            }
            None => anyhow::Ok(None),
        }
    })?;
    if let Some((service, previous)) = &fleet {
        let line = format!(
            "{service} {}: lowered the mark from {} ({}) to {to_ms} ({}) by {by} at {}",
            previous.location,
            previous.high_water_ms,
            format_unix_ms(previous.high_water_ms),
            format_unix_ms(to_ms),
            format_unix_ms(now_ms)
        );
        log_lowering(state.path(), &line);
        writeln!(out, "{line}")?;
    }
    match local {
        Some(mark) if mark.high_water_ms > to_ms => {
            let lowered = StateDir::mark(
                datacenter_id,
                worker_id,
                &layout,
                to_ms,
                MarkKind::Shutdown,
                now_ms,
            );
            state.store(&lowered)?;
            let line = format!(
                "local {}: lowered the mark from {} ({}) to {to_ms} ({}) by {by} at {}",
                state.file(datacenter_id, worker_id).display(),
                mark.high_water_ms,
                format_unix_ms(mark.high_water_ms),
                format_unix_ms(to_ms),
                format_unix_ms(now_ms)
            );
            log_lowering(state.path(), &line);
            writeln!(out, "{line}")?;
        }
        Some(mark) => writeln!(
            out,
            "local {}: the mark {} ({}) is not above {to_ms}; left as it is",
            state.file(datacenter_id, worker_id).display(),
            mark.high_water_ms,
            format_unix_ms(mark.high_water_ms)
        )?,
        None if fleet.is_none() => bail!(
            "no mark for datacenter {datacenter_id} worker {worker_id} in {}",
            config.state_dir.display()
        ),
        None => {}
    }
    // A mark a wrong clock wrote comes with a trusted time (clock.json) as far ahead: left there,
    // the next start on this boot would take it for trusted time, and trust at once any forward
    // step short of it. (An unreadable record is ignored by the node too.)
    if let Ok(Some(stored)) = StateDir::read_clock(state.path())
        && stored.point.trusted_ms > now_ms.max(to_ms)
    {
        let path = StateDir::clock_path(state.path());
        state
            .remove_clock()
            .with_context(|| format!("removing {}", path.display()))?;
        let line = format!(
            "local {}: removed the previous run's trusted time {} ({}), ahead of the clock and \
             the new mark: the next start trusts the clock's first reading",
            path.display(),
            stored.point.trusted_ms,
            format_unix_ms(stored.point.trusted_ms)
        );
        log_lowering(state.path(), &line);
        writeln!(out, "{line}")?;
    }
    Ok(())
}

/// Appends one line to `lower-mark.log` in the state directory, and logs it on stderr.
fn log_lowering(dir: &Path, line: &str) {
    eprintln!("{line}");
    let appended = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("lower-mark.log"))
        .and_then(|mut file| {
            writeln!(file, "{line}")?;
            file.sync_all()
        });
    if let Err(err) = appended {
        eprintln!(
            "warning: cannot append to {}: {err}",
            dir.join("lower-mark.log").display()
        );
    }
}

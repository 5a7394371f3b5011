//! `snowflake-campaign`: proves the no-duplicate promise the Jepsen way. It starts a real fleet
//! (a 3-member etcd and `snowflake serve` nodes, each in its own network namespace on a private
//! bridge, node clocks under libfaketime), runs HTTP, gRPC and Thrift clients that record every
//! ID, applies a seeded random schedule of faults several at a time, and checks the history
//! (see `check.rs` for the rules). A failing run prints the seed and the operations around each
//! violation. `--secure` runs the same with TLS and credentials everywhere (`secure.rs`). Run as
//! root: `scripts/campaign` (or see `--help`).

mod audit;
mod chart;
mod check;
mod clients;
mod faults;
mod fleet;
mod lab;
mod mode;
mod rng;
mod secure;

use anyhow::Context;
use clap::Parser;
use clients::{History, Outcome, Protocol, Target};
use faults::{Busy, Kind, Record};
use fleet::{Fleet, Tools};
use rng::Rng;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A randomized fault campaign over a real fleet, and a check of every ID it was given.
#[derive(Debug, Parser)]
#[command(name = "snowflake-campaign", max_term_width = 100)]
struct Args {
    /// The schedule's seed (the same seed gives the same faults in the same order) [default:
    /// from the clock, printed].
    #[arg(long)]
    seed: Option<u64>,
    /// How long to inject faults, in seconds (then everything heals and the clients run 5 s
    /// more).
    #[arg(long, default_value_t = 60)]
    duration_secs: u64,
    /// Where the nodes keep their worker ids: a 3-member etcd, or a 3-server ZooKeeper.
    #[arg(long, value_enum, default_value = "etcd")]
    mode: mode::Mode,
    /// `snowflake serve` nodes, 5..=20.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(5..=20))]
    nodes: u64,
    /// Most faults at a time.
    #[arg(long, default_value_t = 3)]
    concurrent: usize,
    /// Fail unless at least this many IDs were checked.
    #[arg(long, default_value_t = 10_000)]
    min_ids: u64,
    /// Only these fault kinds, comma-separated [default: all of them]: kill9, graceful-restart,
    /// pause-node, pause-coordinator-member, partition-node-from-coordinator,
    /// isolate-coordinator-member, isolate-coordinator-leader, clock-back, clock-back-huge, clock-forward-brief, clock-forward-lasting,
    /// clock-forward-huge, delete-claim, full-disk (the -coordinator- kinds hit etcd members or
    /// ZooKeeper servers).
    #[arg(long, value_delimiter = ',', value_parser = parse_kind)]
    faults: Vec<Kind>,
    /// The self-test: succeed only if the checker finds a violation (run against a build with
    /// a safety check disabled, `--cfg snowflake_campaign_bug`).
    #[arg(long)]
    expect_violation: bool,
    /// Where the logs, the history and the report go [default: a temporary directory, kept
    /// only when the campaign fails].
    #[arg(long)]
    out: Option<PathBuf>,
    /// The fleet as production runs it: the campaign's own CA; etcd over https with client
    /// certificates and users (the nodes' role: readwrite on the prefix only), or ZooKeeper on
    /// a TLS port only with the fleet's digest identity; the nodes' HTTP, gRPC and RESP over
    /// mutual TLS (Thrift plaintext), probed on their admin listener.
    #[arg(long)]
    secure: bool,
    /// The fleet's layout (`serve --layout`): twitter, js-safe or custom:T,D,W,S, with
    /// Twitter's epoch. The checker reads every ID with it, and `snowflake audit --layout`
    /// checks the run's IDs with it at the end.
    #[arg(long, default_value = "twitter")]
    layout: String,
    /// Test of --secure itself: give the last node a wrong password (or ZooKeeper identity);
    /// the campaign must stop at start with that node's log.
    #[arg(long, hide = true, requires = "secure")]
    break_node_auth: bool,
}

/// Reads every mark (each node's state directory, then the coordination service) every
/// 500 ms until `sampling` is cleared; returns how many reads were made, and how many of the
/// coordination service failed (a partitioned or frozen service cannot always answer).
fn sample_marks(
    reader: &fleet::MarkReader,
    started: Instant,
    samples: &Mutex<Vec<check::MarkSample>>,
    sampling: &AtomicBool,
) -> (u64, u64) {
    let elapsed_us = || u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
    let (mut reads, mut failed) = (0, 0);
    while sampling.load(Ordering::Relaxed) {
        let began = Instant::now();
        let read_us = elapsed_us();
        let local = reader.local();
        let mut found: Vec<check::MarkSample> = local
            .into_iter()
            .map(|((node, d, w), mark_ms)| check::MarkSample {
                read_us,
                node: Some(node),
                pair: (d, w),
                mark_ms,
            })
            .collect();
        let read_us = elapsed_us();
        match reader.coordination() {
            Ok(marks) => found.extend(marks.into_iter().map(|(pair, mark_ms)| check::MarkSample {
                read_us,
                node: None,
                pair,
                mark_ms,
            })),
            Err(_) => failed += 1,
        }
        reads += 1;
        samples.lock().expect("samples").extend(found);
        std::thread::sleep(Duration::from_millis(500).saturating_sub(began.elapsed()));
    }
    (reads, failed)
}

fn parse_kind(text: &str) -> Result<Kind, String> {
    Kind::ALL
        .iter()
        .copied()
        .find(|k| k.name() == text)
        .ok_or_else(|| {
            let names: Vec<String> = Kind::ALL.iter().map(|k| k.name()).collect();
            format!("expected one of {}, found {text:?}", names.join(", "))
        })
}

fn main() -> ExitCode {
    let args = Args::parse();
    match campaign(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(err) => {
            eprintln!("campaign: error: {err:#}");
            ExitCode::from(2)
        }
    }
}

fn campaign(args: &Args) -> anyhow::Result<bool> {
    let seed = args
        .seed
        .unwrap_or_else(|| clients::unix_ms() ^ u64::from(std::process::id()));
    eprintln!("campaign: seed {seed} (replay with --seed {seed})");
    let bits: snowflake_core::Bits = args
        .layout
        .parse()
        .map_err(|e| anyhow::anyhow!("--layout: {e}"))?;
    let layout = snowflake_core::Layout::new(snowflake_core::TWITTER_EPOCH_MS, bits)
        .map_err(|e| anyhow::anyhow!("--layout: {e}"))?;
    let tools = Tools::find()?;
    let (dir, keep) = match &args.out {
        Some(out) => {
            std::fs::create_dir_all(out)?;
            (out.clone(), true)
        }
        None => (
            tempfile::Builder::new()
                .prefix("campaign-")
                .tempdir()?
                .keep(),
            false,
        ),
    };
    eprintln!("campaign: logs in {}", dir.display());
    let nodes = usize::try_from(args.nodes)?;
    if args.secure {
        // One provider for every TLS client of the process (ZooKeeper's takes the default).
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    let fleet = Fleet::start(
        tools,
        args.mode,
        nodes,
        &dir,
        args.secure,
        args.break_node_auth,
        &layout,
    )
    .context("starting the fleet")?;
    eprintln!(
        "campaign: {:?} (3 members) and {nodes} nodes ({} layout) ready{}; faults for {} s",
        args.mode,
        layout.name(),
        if args.secure {
            " (secure: TLS and credentials everywhere)"
        } else {
            ""
        },
        args.duration_secs
    );
    let tls = match &fleet.secure {
        Some(secure) => Some(Arc::new(secure.client_tls(true)?)),
        None => None,
    };
    let targets: Vec<Target> = fleet
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| Target {
            node: i,
            http: n.http(),
            grpc: n.grpc(),
            thrift: n.thrift(),
            resp: n.resp(),
            tls: tls.clone(),
        })
        .collect();
    let mut security_checks = fleet.checks.clone();
    let no_cert = match &fleet.secure {
        Some(secure) => Some(secure.client_tls(false)?),
        None => None,
    };
    let fleet = Arc::new(Mutex::new(fleet));
    let started = Instant::now();
    let history: History = Arc::new(Mutex::new(Vec::new()));
    let mut rng = Rng::new(seed);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    // One ID over each protocol first: a client that cannot speak to the nodes stops the
    // campaign here, not as a run with no IDs.
    security_checks.extend(
        runtime
            .block_on(clients::preflight(
                &targets[0],
                started,
                &history,
                no_cert.as_ref(),
            ))
            .context("before the faults")?,
    );
    for check in &security_checks {
        eprintln!("campaign: security check {check}");
    }
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut clients = Vec::new();
    for target in &targets {
        for protocol in [
            Protocol::Http,
            Protocol::Grpc,
            Protocol::Thrift,
            Protocol::Resp,
        ] {
            clients.push(runtime.spawn(clients::run(
                target.clone(),
                protocol,
                started,
                Arc::clone(&history),
                rng.fork(),
                Duration::from_millis(3),
                stop_rx.clone(),
            )));
        }
    }

    // The client library, failing over between every node.
    clients.push(runtime.spawn(clients::run_library(
        targets.clone(),
        started,
        Arc::clone(&history),
        rng.fork(),
        Duration::from_millis(3),
        stop_rx.clone(),
    )));

    // The marks, read twice a second while the campaign runs (rule 3 at every moment).
    let samples: Arc<Mutex<Vec<check::MarkSample>>> = Arc::new(Mutex::new(Vec::new()));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let reader = fleet.lock().expect("fleet").mark_reader();
        let (samples, sampling) = (Arc::clone(&samples), Arc::clone(&sampling));
        std::thread::spawn(move || sample_marks(&reader, started, &samples, &sampling))
    };

    // The schedule: every kind once first (in a seeded order), then at random.
    let kinds: Vec<Kind> = if args.faults.is_empty() {
        Kind::ALL.to_vec()
    } else {
        args.faults.clone()
    };
    let mut order: Vec<Kind> = kinds.clone();
    for i in (1..order.len()).rev() {
        let j = usize::try_from(rng.below(i as u64 + 1)).unwrap_or(0);
        order.swap(i, j);
    }
    let busy = Arc::new(Mutex::new(Busy::default()));
    let records: Arc<Mutex<Vec<Record>>> = Arc::new(Mutex::new(Vec::new()));
    // Kinds whose injection failed (e.g. a claim deletion while etcd changed leaders) before any
    // of their kind went in without an error: tried again before the random picks, so that a
    // short run still injects every kind (the report fails a run that never did).
    let retry: Arc<Mutex<Vec<Kind>>> = Arc::new(Mutex::new(Vec::new()));
    let deadline = started + Duration::from_secs(args.duration_secs);
    let mut threads = Vec::new();
    let mut next = 0usize;
    let mut self_stops = Vec::new();
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(rng.between(300, 1500)));
        for note in fleet.lock().expect("fleet").restart_exited() {
            eprintln!(
                "campaign: {:>6.1} s  {note}",
                started.elapsed().as_secs_f64()
            );
            self_stops.push(note);
        }
        let active = threads
            .iter()
            .filter(|t: &&std::thread::JoinHandle<()>| !t.is_finished())
            .count();
        if active >= args.concurrent {
            continue;
        }
        let retrying = next >= order.len() && !retry.lock().expect("retry").is_empty();
        let kind = if next < order.len() {
            order[next]
        } else if retrying {
            retry.lock().expect("retry")[0]
        } else {
            kinds[usize::try_from(rng.below(kinds.len() as u64)).unwrap_or(0)]
        };
        // A free target of the right kind.
        let target = {
            let busy = busy.lock().expect("busy");
            let (count, taken) = if kind.on_etcd() {
                (3, &busy.members)
            } else {
                (nodes, &busy.nodes)
            };
            // Never more than one etcd member down at a time: the cluster must keep a quorum
            // for the fleet to be able to serve at all (that is a test of availability, not of
            // safety, which the node faults already cover).
            if kind.on_etcd() && !taken.is_empty() {
                continue;
            }
            let free: Vec<usize> = (0..count).filter(|t| !taken.contains(t)).collect();
            if free.is_empty() {
                continue;
            }
            free[usize::try_from(rng.below(free.len() as u64)).unwrap_or(0)]
        };
        if retrying {
            retry.lock().expect("retry").remove(0);
        } else {
            next += 1;
        }
        let hold = Duration::from_millis(rng.between(800, 4000));
        let mut fault_rng = rng.fork();
        {
            let mut busy = busy.lock().expect("busy");
            if kind.on_etcd() {
                busy.members.push(target);
            } else {
                busy.nodes.push(target);
            }
        }
        let (fleet, busy, records, retry) = (
            Arc::clone(&fleet),
            Arc::clone(&busy),
            Arc::clone(&records),
            Arc::clone(&retry),
        );
        eprintln!(
            "campaign: {:>6.1} s  {} on {} for {} ms",
            started.elapsed().as_secs_f64(),
            kind.name(),
            if kind.on_etcd() {
                fleet.lock().expect("fleet").members[target].name.clone()
            } else {
                format!("n{}", target + 1)
            },
            hold.as_millis()
        );
        threads.push(std::thread::spawn(move || {
            let record = faults::apply(&fleet, kind, target, hold, &mut fault_rng, started);
            if let Some(err) = &record.error {
                eprintln!("campaign: {} on {}: {err}", kind.name(), record.target_name);
            }
            let mut records = records.lock().expect("records");
            if record.error.is_some()
                && !records.iter().any(|r| r.kind == kind && r.error.is_none())
            {
                let mut retry = retry.lock().expect("retry");
                if !retry.contains(&kind) {
                    retry.push(kind);
                }
            }
            records.push(record);
            drop(records);
            let mut busy = busy.lock().expect("busy");
            busy.members.retain(|&t| !kind.on_etcd() || t != target);
            busy.nodes.retain(|&t| kind.on_etcd() || t != target);
        }));
    }
    for thread in threads {
        while !thread.is_finished() {
            std::thread::sleep(Duration::from_millis(200));
            self_stops.extend(fleet.lock().expect("fleet").restart_exited());
        }
        let _ = thread.join();
    }
    fleet::heal_all(&fleet.lock().expect("fleet"));
    eprintln!("campaign: healed; every node must serve again");
    // Every node serves again after healing (a lease may need its TTL to come free).
    let mut recovery_failures = Vec::new();
    let healed = Instant::now();
    for i in 0..nodes {
        loop {
            self_stops.extend(fleet.lock().expect("fleet").restart_exited());
            let ready = fleet
                .lock()
                .expect("fleet")
                .wait_ready(i, Duration::from_millis(500));
            match ready {
                Ok(()) => break,
                Err(err) if healed.elapsed() > Duration::from_secs(30) => {
                    recovery_failures.push(format!("{err:#}"));
                    break;
                }
                Err(_) => {}
            }
        }
    }
    eprintln!(
        "campaign: every node served again {} ms after healing",
        healed.elapsed().as_millis()
    );
    std::thread::sleep(Duration::from_secs(5));
    let _ = stop_tx.send(true);
    runtime.block_on(async {
        for client in clients {
            let _ = client.await;
        }
    });
    sampling.store(false, Ordering::Relaxed);
    let (reads, failed_reads) = sampler.join().expect("the mark sampler");
    let samples = std::mem::take(&mut *samples.lock().expect("samples"));
    eprintln!(
        "campaign: {} marks read in {reads} reads of the marks ({failed_reads} reads of the \
         coordination service failed)",
        samples.len()
    );
    let history = std::mem::take(&mut *history.lock().expect("history"));
    let records = std::mem::take(&mut *records.lock().expect("records"));

    // Stop every node gracefully, so the final marks are the exact ones, then read them.
    {
        let mut f = fleet.lock().expect("fleet");
        for node in &mut f.nodes {
            if let Some(mut proc) = node.proc.take() {
                let _ = proc.signal("TERM");
                proc.wait_exit(Duration::from_secs(10));
            }
        }
    }
    let f = fleet.lock().expect("fleet");
    let mut marks = f
        .fleet_marks()
        .context("reading the marks in the coordination service")?;
    for ((_, d, w), ms) in f.local_marks() {
        // The checker compares with the highest mark a pair has anywhere: a node's own
        // directory holds the same marks as etcd or higher (reservations are written there
        // first).
        let entry = marks.entry((d, w)).or_insert(ms);
        *entry = (*entry).max(ms);
    }
    let allowed_ahead_ms: Vec<u64> = (0..nodes)
        .map(|n| {
            let lasting = records
                .iter()
                .filter(|r| r.kind == Kind::ClockForwardLasting && r.target == n)
                .map(|r| u64::try_from(r.offset_ms).unwrap_or(0))
                .max()
                .unwrap_or(0);
            // Trusted time may run ahead of real time by a trusted step, and IDs may be dated
            // up to the reservation beyond it (the issue limit is read before the clock is
            // checked again: see docs/reliability.md).
            lasting + fleet::MAX_CLOCK_STEP_MS + fleet::RESERVE_MS + 500
        })
        .collect();
    let facts = check::Facts {
        marks,
        allowed_ahead_ms,
        samples,
        layout,
    };
    let (totals, violations) = check::check(&history, &facts, 5);
    let snowflake = f.tools.snowflake.clone();
    drop(f);
    // Every ID the clients were given, audited by `snowflake audit` under the fleet's layout
    // (an ID beyond it is an invalid line there): a second checker, the one operators use.
    let audit = audit::run(&snowflake, &layout, &history, &dir)?;

    // The report.
    let ok_ops = successes(&history, nodes);
    let mut by_kind: BTreeMap<String, (u64, Vec<u64>, Vec<u64>)> = BTreeMap::new();
    for record in &records {
        let entry = by_kind.entry(record.kind.name()).or_default();
        entry.0 += 1;
        entry.1.push(outage_ms(&ok_ops, record));
        entry.2.push(recovery_ms(&ok_ops, record));
    }
    let missing: Vec<String> = kinds
        .iter()
        .filter(|k| !records.iter().any(|r| r.kind == **k && r.error.is_none()))
        .map(|k| k.name())
        .collect();
    println!(
        "seed {seed}, mode {:?}{}: {} faults injected",
        args.mode,
        if args.secure { ", secure" } else { "" },
        records.len()
    );
    println!(
        "| fault | injected | longest time without an ID, median / max | recovery after healing, median / max |"
    );
    println!("|---|---:|---:|---:|");
    // `u64::MAX`: the target got no ID after healing before the campaign ended.
    let median_max = |mut v: Vec<u64>| {
        v.sort_unstable();
        let show = |ms: u64| {
            if ms == u64::MAX {
                "none by the end".to_owned()
            } else {
                format!("{ms} ms")
            }
        };
        let median = v.get(v.len() / 2).copied().unwrap_or(0);
        let max = v.last().copied().unwrap_or(0);
        format!("{} / {}", show(median), show(max))
    };
    let mut table = Vec::new();
    for (kind, (count, outages, recoveries)) in by_kind {
        let row = format!(
            "| {kind} | {count} | {} | {} |",
            median_max(outages),
            median_max(recoveries)
        );
        println!("{row}");
        table.push(row);
    }
    println!(
        "nodes that stopped by themselves and were restarted: {}",
        self_stops.len()
    );
    println!(
        "operations {} (answered with IDs {}, refused {}, unanswered {}); IDs checked {}",
        totals.ops, totals.ops_ok, totals.ops_refused, totals.ops_no_answer, totals.ids
    );
    println!(
        "snowflake --layout {} audit: {} IDs, {} unique, {} duplicates, {} invalid lines (exit {})",
        layout.name(),
        audit.ids,
        audit.unique,
        audit.duplicates,
        audit.invalid,
        audit.exit
    );
    println!("violations: {}", violations.len());
    for violation in &violations {
        println!("  {}: {}", violation.rule, violation.detail);
        for &op in &violation.ops {
            println!(
                "    {}",
                serde_json::to_string(&history[op]).unwrap_or_default()
            );
            for record in records.iter().filter(|r| {
                r.start_us <= history[op].received_us + 1_000_000
                    && r.heal_us + 3_000_000 >= history[op].sent_us
            }) {
                println!(
                    "      around it: {}",
                    serde_json::to_string(record).unwrap_or_default()
                );
            }
        }
    }
    let mut ok = if args.expect_violation {
        if violations.is_empty() {
            println!("FAILED: the self-test expected the checker to find a violation");
        } else {
            println!("(the self-test expected violations, and the checker found them)");
        }
        !violations.is_empty()
    } else {
        violations.is_empty()
    };
    if totals.ids < args.min_ids {
        println!(
            "FAILED: only {} IDs checked (--min-ids {})",
            totals.ids, args.min_ids
        );
        ok = false;
    }
    if !args.expect_violation && !audit.clean(totals.ids) {
        println!("FAILED: snowflake audit disagrees with the checker: {audit:?}");
        ok = false;
    }
    if !missing.is_empty() {
        println!(
            "FAILED: never injected without an error: {}",
            missing.join(", ")
        );
        ok = false;
    }
    for failure in &recovery_failures {
        println!("FAILED: after healing, {failure}");
        ok = false;
    }
    // Secure mode: every refusal checked, and the operator's deletions without credentials.
    let deletes_tried = records
        .iter()
        .filter(|r| r.refused_without_auth.is_some())
        .count();
    let deletes_refused = records
        .iter()
        .filter(|r| r.refused_without_auth == Some(true))
        .count();
    if args.secure {
        println!(
            "secure: {} TLS and auth checks passed of {}; deletions of a claim without \
             credentials refused: {deletes_refused} of {deletes_tried}",
            security_checks.iter().filter(|c| c.passed).count(),
            security_checks.len()
        );
        for check in &security_checks {
            println!("  {check}");
        }
        for check in security_checks.iter().filter(|c| !c.passed) {
            println!("FAILED: security check: {}", check.name);
            ok = false;
        }
        if deletes_refused < deletes_tried {
            println!(
                "FAILED: {} deletions of a claim without credentials were allowed",
                deletes_tried - deletes_refused
            );
            ok = false;
        }
        if kinds.contains(&Kind::DeleteClaim) && deletes_tried == 0 {
            println!("FAILED: no deletion of a claim was tried without credentials");
            ok = false;
        }
    }
    let report = serde_json::json!({
        "seed": seed, "mode": args.mode, "secure": args.secure, "layout": layout.name(), "duration_secs": args.duration_secs, "table": table,
        "audit": audit,
        "security_checks": security_checks,
        "deletions_without_credentials": {"tried": deletes_tried, "refused": deletes_refused}, "totals": totals, "faults": records, "self_stops": self_stops,
        "violations": violations.iter().map(|v| serde_json::json!({"rule": v.rule, "detail": v.detail, "ops": v.ops})).collect::<Vec<_>>(),
        "ok": ok,
    });
    std::fs::write(dir.join("report.json"), serde_json::to_vec_pretty(&report)?)?;
    let mut lines = Vec::new();
    for op in &history {
        lines.extend(serde_json::to_vec(op)?);
        lines.push(b'\n');
    }
    std::fs::write(dir.join("history.jsonl"), lines)?;
    let title = format!(
        "snowflake-campaign{} --mode {:?} --seed {seed} --duration-secs {}: {} IDs, {} faults, {} violations",
        if args.secure { " --secure" } else { "" },
        args.mode,
        args.duration_secs,
        totals.ids,
        records.len(),
        violations.len()
    )
    .to_lowercase();
    std::fs::write(
        dir.join("timeline.svg"),
        chart::timeline(&history, &records, nodes, &title),
    )?;
    println!("{}", if ok { "OK" } else { "FAILED" });
    drop(fleet);
    if ok && !keep {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        eprintln!(
            "campaign: history, report and logs kept in {}",
            dir.display()
        );
    }
    Ok(ok)
}

/// Each node's successful operations as (sent, received) in µs, sorted by when they were sent:
/// the index the availability figures are read from.
fn successes(history: &[clients::Op], nodes: usize) -> Vec<Vec<(u64, u64)>> {
    let mut per_node = vec![Vec::new(); nodes];
    for op in history {
        if matches!(op.outcome, Outcome::Ids(_)) && op.node < nodes {
            per_node[op.node].push((op.sent_us, op.received_us));
        }
    }
    for ops in &mut per_node {
        ops.sort_unstable();
    }
    per_node
}

/// The nodes a fault hits: its target node, or for faults of the coordination service all.
fn targets(record: &Record, nodes: usize) -> Vec<usize> {
    if record.kind.on_etcd() {
        (0..nodes).collect()
    } else {
        vec![record.target]
    }
}

/// The longest time (ms) one of the fault's targets went without an answer with IDs, from the
/// fault's start until it served again after healing (the worst node, for faults of the
/// coordination service). Clients ask every 3 ms, so a healthy node's gap is a few ms.
fn outage_ms(ok: &[Vec<(u64, u64)>], record: &Record) -> u64 {
    targets(record, ok.len())
        .into_iter()
        .map(|node| {
            let ops = &ok[node];
            let from = ops.partition_point(|&(sent, _)| sent < record.start_us);
            let mut last = record.start_us;
            let mut longest = 0;
            for &(_, received) in &ops[from..] {
                longest = longest.max(received.saturating_sub(last));
                last = received;
                if received > record.heal_us {
                    break;
                }
            }
            longest / 1000
        })
        .max()
        .unwrap_or(0)
}

/// How long after `record` healed its target served IDs again (ms): the first request sent
/// after healing that got IDs (for faults of the coordination service, the first of any node).
fn recovery_ms(ok: &[Vec<(u64, u64)>], record: &Record) -> u64 {
    targets(record, ok.len())
        .into_iter()
        .filter_map(|node| {
            let ops = &ok[node];
            let at = ops.partition_point(|&(sent, _)| sent < record.heal_us);
            ops.get(at)
                .map(|&(_, received)| received.saturating_sub(record.heal_us) / 1000)
        })
        .min()
        .unwrap_or(u64::MAX)
}

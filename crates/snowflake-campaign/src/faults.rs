//! The faults, and the seeded schedule that applies several at a time.

use crate::fleet::{Fleet, LEASE_TTL_SECS, set_clock_file};
use crate::rng::Rng;
use serde::Serialize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Every kind of fault the campaign injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// `kill -9` a node, restart it after the fault's duration.
    Kill9,
    /// SIGTERM a node, restart it once it exited (a rolling deploy's step).
    GracefulRestart,
    /// SIGSTOP a node, SIGCONT it after the duration.
    PauseNode,
    /// SIGSTOP an etcd member or a ZooKeeper server, SIGCONT it after the duration.
    PauseCoordinatorMember,
    /// Drop every packet between a node and all members of the coordination service.
    PartitionNodeFromCoordinator,
    /// Cut one member of the coordination service off the others (and everyone).
    IsolateCoordinatorMember,
    /// Cut whichever member leads.
    IsolateCoordinatorLeader,
    /// A node's clock 1–5 s behind.
    ClockBack,
    /// A node's clock a day behind for a moment.
    ClockBackHuge,
    /// A node's clock 2–5 s ahead, back before it is trusted.
    ClockForwardBrief,
    /// A node's clock 2–4 s ahead for longer than it takes to trust it.
    ClockForwardLasting,
    /// A node's clock 20 years ahead for a moment.
    ClockForwardHuge,
    /// An operator deletes a held claim: an etcd claim key, or a node's ephemeral znode.
    DeleteClaim,
    /// The filesystem under a node's state directory fills up.
    FullDisk,
}

impl Kind {
    pub const ALL: [Kind; 14] = [
        Kind::Kill9,
        Kind::GracefulRestart,
        Kind::PauseNode,
        Kind::PauseCoordinatorMember,
        Kind::PartitionNodeFromCoordinator,
        Kind::IsolateCoordinatorMember,
        Kind::IsolateCoordinatorLeader,
        Kind::ClockBack,
        Kind::ClockBackHuge,
        Kind::ClockForwardBrief,
        Kind::ClockForwardLasting,
        Kind::ClockForwardHuge,
        Kind::DeleteClaim,
        Kind::FullDisk,
    ];

    /// Whether the fault targets a member of the coordination service (else a node).
    pub fn on_etcd(self) -> bool {
        matches!(
            self,
            Kind::PauseCoordinatorMember
                | Kind::IsolateCoordinatorMember
                | Kind::IsolateCoordinatorLeader
        )
    }

    pub fn name(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    }
}

/// One fault as it happened.
#[derive(Debug, Clone, Serialize)]
pub struct Record {
    pub kind: Kind,
    /// The node slot or etcd member index.
    pub target: usize,
    pub target_name: String,
    /// Microseconds since the campaign started.
    pub start_us: u64,
    pub heal_us: u64,
    /// A clock offset applied, in ms (clock faults).
    pub offset_ms: i64,
    /// What went wrong applying or healing it (the campaign goes on).
    pub error: Option<String>,
    /// `delete-claim` in secure mode: whether the operator's attempt without credentials was
    /// refused (etcd: permission denied; ZooKeeper: NoAuth) before it deleted as itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused_without_auth: Option<bool>,
}

/// What is being faulted now, so that two faults do not fight over one target.
#[derive(Debug, Default)]
pub struct Busy {
    pub nodes: Vec<usize>,
    pub members: Vec<usize>,
}

/// Applies fault `kind` to `target`, holds it for `hold`, heals it; blocking (run it on a
/// thread). Returns the record.
pub fn apply(
    fleet: &Arc<Mutex<Fleet>>,
    kind: Kind,
    target: usize,
    hold: Duration,
    rng: &mut Rng,
    started: Instant,
) -> Record {
    let since = |t: Instant| u64::try_from(t.duration_since(started).as_micros()).unwrap_or(0);
    let start = Instant::now();
    let mut offset_ms = 0i64;
    let mut refused_without_auth = None;
    let mut target = target;
    let result: anyhow::Result<()> = (|| {
        match kind {
            Kind::Kill9 => {
                // Taken out under the lock, killed and waited for outside it.
                let proc = fleet.lock().expect("fleet").nodes[target].proc.take();
                if let Some(mut proc) = proc {
                    proc.signal("CONT")?;
                    proc.signal("KILL")?;
                    proc.wait_exit(Duration::from_secs(5));
                }
                std::thread::sleep(hold);
                fleet.lock().expect("fleet").start_node(target)?;
            }
            Kind::GracefulRestart => {
                let proc = fleet.lock().expect("fleet").nodes[target].proc.take();
                if let Some(mut proc) = proc {
                    proc.signal("CONT")?;
                    proc.signal("TERM")?;
                    // A node that lost its pair meanwhile stops with status 1: that is no
                    // failure of the graceful stop; one that does not stop within 10 s is.
                    if proc.wait_exit(Duration::from_secs(10)).is_none() {
                        anyhow::bail!("a graceful stop did not end within 10 s");
                    }
                }
                std::thread::sleep(hold / 4);
                fleet.lock().expect("fleet").start_node(target)?;
            }
            Kind::PauseNode => {
                signal_node(fleet, target, "STOP")?;
                std::thread::sleep(hold);
                signal_node(fleet, target, "CONT")?;
            }
            Kind::PauseCoordinatorMember => {
                fleet.lock().expect("fleet").members[target]
                    .proc
                    .signal("STOP")?;
                std::thread::sleep(hold);
                fleet.lock().expect("fleet").members[target]
                    .proc
                    .signal("CONT")?;
            }
            Kind::PartitionNodeFromCoordinator => {
                let (name, peers) = {
                    let f = fleet.lock().expect("fleet");
                    let peers: Vec<_> = f.members.iter().map(|m| m.ip).collect();
                    (f.nodes[target].name.clone(), peers)
                };
                fleet.lock().expect("fleet").lab.block(&name, &peers)?;
                std::thread::sleep(hold);
                fleet.lock().expect("fleet").lab.unblock(&name)?;
            }
            Kind::IsolateCoordinatorMember | Kind::IsolateCoordinatorLeader => {
                if kind == Kind::IsolateCoordinatorLeader {
                    target = fleet.lock().expect("fleet").leader().unwrap_or(target);
                }
                let name = fleet.lock().expect("fleet").members[target].name.clone();
                fleet.lock().expect("fleet").lab.set_link(&name, false)?;
                std::thread::sleep(hold);
                fleet.lock().expect("fleet").lab.set_link(&name, true)?;
            }
            Kind::ClockBack
            | Kind::ClockBackHuge
            | Kind::ClockForwardBrief
            | Kind::ClockForwardLasting
            | Kind::ClockForwardHuge => {
                let secs: i64 = match kind {
                    Kind::ClockBack => -i64::try_from(rng.between(1, 5)).unwrap_or(1),
                    Kind::ClockBackHuge => -86_400,
                    Kind::ClockForwardBrief => i64::try_from(rng.between(2, 5)).unwrap_or(2),
                    Kind::ClockForwardLasting => i64::try_from(rng.between(2, 4)).unwrap_or(2),
                    _ => 631_152_000, // 20 years
                };
                offset_ms = secs * 1000;
                let hold = match kind {
                    // Back before it is trusted (trust takes TRUST_SECS).
                    Kind::ClockForwardBrief | Kind::ClockForwardHuge | Kind::ClockBackHuge => {
                        hold.min(Duration::from_millis(1500))
                    }
                    // Held well past the trust period.
                    Kind::ClockForwardLasting => {
                        hold.max(Duration::from_secs(crate::fleet::TRUST_SECS + 3))
                    }
                    _ => hold,
                };
                let file = fleet.lock().expect("fleet").nodes[target]
                    .clock_file
                    .clone();
                set_clock_file(&file, &format!("{secs:+}"))?;
                std::thread::sleep(hold);
                set_clock_file(&file, "+0")?;
            }
            Kind::FullDisk => {
                // The state directory is a small tmpfs of its own (see `Fleet::start`): fill
                // it, hold, free it.
                let dir = fleet.lock().expect("fleet").nodes[target].state_dir.clone();
                let filler = dir.join("filler");
                let result = std::fs::write(&filler, vec![0u8; crate::fleet::STATE_FS_BYTES]);
                if let Err(e) = &result
                    && e.raw_os_error() != Some(28)
                {
                    anyhow::bail!("cannot fill {}: {e}", dir.display());
                }
                std::thread::sleep(hold);
                std::fs::remove_file(&filler)?;
            }
            Kind::DeleteClaim => {
                let pick = rng.next_u64();
                let deleted = fleet.lock().expect("fleet").delete_claim(pick)?;
                refused_without_auth = deleted.and_then(|d| d.refused_without_auth);
                std::thread::sleep(hold.min(Duration::from_secs(LEASE_TTL_SECS)));
            }
        }
        Ok(())
    })();
    let target_name = {
        let f = fleet.lock().expect("fleet");
        if kind.on_etcd() {
            f.members[target].name.clone()
        } else {
            f.nodes[target].name.clone()
        }
    };
    Record {
        kind,
        target,
        target_name,
        start_us: since(start),
        heal_us: since(Instant::now()),
        offset_ms,
        error: result.err().map(|e| format!("{e:#}")),
        refused_without_auth,
    }
}

fn signal_node(fleet: &Arc<Mutex<Fleet>>, node: usize, signal: &str) -> anyhow::Result<()> {
    let f = fleet.lock().expect("fleet");
    match &f.nodes[node].proc {
        Some(proc) => proc.signal(signal),
        None => Ok(()),
    }
}

//! The checker: what the history of a campaign must satisfy.
//!
//! 1. **No duplicate**, anywhere, across nodes, protocols and restarts.
//! 2. **Real-time order per pair**: for two operations answered by the same (datacenter,
//!    worker) pair, if one was answered before the other was sent, all its IDs are smaller.
//!    (Across a takeover too: the successor must issue above everything its predecessor did.)
//! 3. **Under the marks**: no ID of a pair is dated after the highest mark written for that
//!    pair (in the coordination service and in the state directories), read at the end; and at
//!    every moment: each mark read while the campaign ran (twice a second, in the coordination
//!    service and in each node's state directory) is at least the timestamp of every ID of its
//!    pair received before the read began (from that node, for a state directory). Marks are
//!    written before IDs are issued under them, a graceful stop's exact mark still covers every
//!    ID, and no write may lower one (a late, reordered write would show here).
//! 4. **Not from the future**: no ID is dated more than its node's allowance ahead of the
//!    campaign's clock when it was answered (the largest forward step the node may have
//!    trusted, plus `--max-clock-step-ms`, plus slack).
//! 5. **Every refusal has a reason**: an error answer carries a message.
//! 6. **In the layout**: no ID is above the largest ID of the fleet's layout (under `js-safe`,
//!    none beyond 2^53 − 1). The other rules read every ID's fields with that layout's widths.

use crate::clients::{Op, Outcome};
use snowflake_core::{Layout, Parts, SnowflakeId};
use std::collections::HashMap;

/// A broken promise, with the operations that show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub rule: &'static str,
    pub detail: String,
    /// Indexes into the history.
    pub ops: Vec<usize>,
}

/// What the checker needs besides the history.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// The highest mark (Unix ms) of each (datacenter, worker) pair.
    pub marks: HashMap<(u64, u64), u64>,
    /// Per node slot: how far ahead of real time its IDs may be dated (ms).
    pub allowed_ahead_ms: Vec<u64>,
    /// The marks read while the campaign ran.
    pub samples: Vec<MarkSample>,
    /// The fleet's layout: how IDs are read, and the largest one allowed.
    pub layout: Layout,
}

/// Where a mark was read: a node slot's state directory (`None`: the coordination service), and
/// its (datacenter, worker) pair.
type MarkSource = (Option<usize>, (u64, u64));

/// A mark read while the campaign ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MarkSample {
    /// When the read began, in microseconds since the campaign started (the clients' clock).
    pub read_us: u64,
    /// The node slot whose state directory held it; `None` for the coordination service.
    pub node: Option<usize>,
    /// (datacenter, worker).
    pub pair: (u64, u64),
    /// The mark (Unix ms).
    pub mark_ms: u64,
}

/// Totals, for the report.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Totals {
    pub ops: u64,
    pub ops_ok: u64,
    pub ops_refused: u64,
    pub ops_no_answer: u64,
    pub ids: u64,
}

/// One operation's IDs of one pair: when it was sent and answered, its lowest and highest ID,
/// and its index in the history.
#[derive(Debug, Clone, Copy)]
struct PairOp {
    node: usize,
    sent_us: u64,
    received_us: u64,
    low: u64,
    high: u64,
    index: usize,
}

/// Checks `history`; at most `limit` violations of each rule are returned.
pub fn check(history: &[Op], facts: &Facts, limit: usize) -> (Totals, Vec<Violation>) {
    let layout = facts.layout;
    let mut violations = Vec::new();
    let mut totals = Totals::default();
    let mut all: Vec<(u64, usize)> = Vec::new();
    for (index, op) in history.iter().enumerate() {
        totals.ops += 1;
        match &op.outcome {
            Outcome::Ids(ids) => {
                totals.ops_ok += 1;
                totals.ids += ids.len() as u64;
                all.extend(ids.iter().map(|&id| (id, index)));
            }
            Outcome::Refused { status, reason } => {
                totals.ops_refused += 1;
                if reason.trim().is_empty() && count(&violations, "reason") < limit {
                    violations.push(Violation {
                        rule: "reason",
                        detail: format!("a refusal ({status}) without a reason"),
                        ops: vec![index],
                    });
                }
            }
            Outcome::NoAnswer(_) => totals.ops_no_answer += 1,
        }
    }

    // 6. In the layout.
    for &(id, index) in &all {
        let fits = SnowflakeId::new(id).is_some_and(|id| layout.check_id(id).is_ok());
        if !fits && count(&violations, "layout") < limit {
            violations.push(Violation {
                rule: "layout",
                detail: format!(
                    "{id} is above the largest id {} of the layout {}",
                    layout.max_id(),
                    layout.name()
                ),
                ops: vec![index],
            });
        }
    }

    // 1. Duplicates.
    all.sort_unstable();
    for pair in all.windows(2) {
        if pair[0].0 == pair[1].0 && count(&violations, "duplicate") < limit {
            violations.push(Violation {
                rule: "duplicate",
                detail: format!("{} issued twice", describe(&layout, pair[0].0)),
                ops: vec![pair[0].1, pair[1].1],
            });
        }
    }

    // 2. Real-time order per pair: per pair, each op's lowest and highest ID.
    let mut per_pair: HashMap<(u64, u64), Vec<PairOp>> = HashMap::new();
    for (index, op) in history.iter().enumerate() {
        let Outcome::Ids(ids) = &op.outcome else {
            continue;
        };
        let mut by_pair: HashMap<(u64, u64), (u64, u64)> = HashMap::new();
        for &id in ids {
            let parts = parts(&layout, id);
            let entry = by_pair
                .entry((parts.datacenter_id, parts.worker_id))
                .or_insert((id, id));
            entry.0 = entry.0.min(id);
            entry.1 = entry.1.max(id);
        }
        for (pair, (low, high)) in by_pair {
            per_pair.entry(pair).or_default().push(PairOp {
                node: op.node,
                sent_us: op.sent_us,
                received_us: op.received_us,
                low,
                high,
                index,
            });
        }
    }
    for ops in per_pair.values() {
        let mut by_received: Vec<PairOp> = ops.clone();
        by_received.sort_unstable_by_key(|o| o.received_us);
        let mut by_sent: Vec<PairOp> = ops.clone();
        by_sent.sort_unstable_by_key(|o| o.sent_us);
        // The highest ID among operations answered before the current one was sent.
        let mut done = 0;
        let mut highest: Option<PairOp> = None;
        for op in &by_sent {
            while done < by_received.len() && by_received[done].received_us < op.sent_us {
                let earlier = by_received[done];
                if highest.is_none_or(|h| earlier.high > h.high) {
                    highest = Some(earlier);
                }
                done += 1;
            }
            if let Some(earlier) = highest
                && earlier.high >= op.low
                && count(&violations, "order") < limit
            {
                violations.push(Violation {
                    rule: "order",
                    detail: format!(
                        "{} was answered before a request that got {}",
                        describe(&layout, earlier.high),
                        describe(&layout, op.low)
                    ),
                    ops: vec![earlier.index, op.index],
                });
            }
        }
    }

    // 3. Under the marks.
    for (pair, ops) in &per_pair {
        let Some(&PairOp { high, index, .. }) = ops.iter().max_by_key(|o| o.high) else {
            continue;
        };
        let high_ms = parts(&layout, high);
        let mark = facts.marks.get(pair).copied();
        if mark.is_none_or(|m| high_ms.timestamp_ms > m) && count(&violations, "mark") < limit {
            violations.push(Violation {
                rule: "mark",
                detail: format!(
                    "{} is dated after the highest mark of datacenter {} worker {} ({})",
                    describe(&layout, high),
                    pair.0,
                    pair.1,
                    mark.map_or("none".into(), |m| m.to_string())
                ),
                ops: vec![index],
            });
        }
    }

    // 3, at every moment: each mark read is at least every ID of its pair received before.
    let mut by_source: HashMap<MarkSource, Vec<MarkSample>> = HashMap::new();
    for sample in &facts.samples {
        by_source
            .entry((sample.node, sample.pair))
            .or_default()
            .push(*sample);
    }
    let mut sources: Vec<_> = by_source.into_iter().collect();
    sources.sort_unstable_by_key(|(source, _)| *source);
    for ((node, pair), mut samples) in sources {
        let Some(ops) = per_pair.get(&pair) else {
            continue;
        };
        let mut ops: Vec<PairOp> = ops
            .iter()
            .filter(|o| node.is_none_or(|n| o.node == n))
            .copied()
            .collect();
        ops.sort_unstable_by_key(|o| o.received_us);
        samples.sort_unstable_by_key(|s| s.read_us);
        let mut done = 0;
        let mut highest: Option<PairOp> = None;
        for sample in samples {
            while done < ops.len() && ops[done].received_us < sample.read_us {
                if highest.is_none_or(|h| ops[done].high > h.high) {
                    highest = Some(ops[done]);
                }
                done += 1;
            }
            let Some(earlier) = highest else { continue };
            let high_ms = parts(&layout, earlier.high).timestamp_ms;
            if high_ms > sample.mark_ms && count(&violations, "mark") < limit {
                let place = node.map_or("the coordination service".to_owned(), |n| {
                    format!("node {n}'s state directory")
                });
                violations.push(Violation {
                    rule: "mark",
                    detail: format!(
                        "{} was received before a read of {place} (at {:.3} s) found the mark of \
                         datacenter {} worker {} at {}, {} ms below it",
                        describe(&layout, earlier.high),
                        sample.read_us as f64 / 1e6,
                        pair.0,
                        pair.1,
                        sample.mark_ms,
                        high_ms - sample.mark_ms
                    ),
                    ops: vec![earlier.index],
                });
            }
        }
    }

    // 4. Not from the future.
    for (index, op) in history.iter().enumerate() {
        let Outcome::Ids(ids) = &op.outcome else {
            continue;
        };
        let allowed = facts.allowed_ahead_ms.get(op.node).copied().unwrap_or(0);
        let Some(&latest) = ids.iter().max() else {
            continue;
        };
        let ms = parts(&layout, latest).timestamp_ms;
        if ms > op.received_unix_ms + allowed && count(&violations, "future") < limit {
            violations.push(Violation {
                rule: "future",
                detail: format!(
                    "{} is dated {} ms after it was received (node {} may be {allowed} ms ahead)",
                    describe(&layout, latest),
                    ms - op.received_unix_ms,
                    op.node
                ),
                ops: vec![index],
            });
        }
    }
    (totals, violations)
}

fn count(violations: &[Violation], rule: &str) -> usize {
    violations.iter().filter(|v| v.rule == rule).count()
}

/// The fields of `id` under `layout`; an ID outside the layout (a violation of its own) is read
/// as the layout's largest.
fn parts(layout: &Layout, id: u64) -> Parts {
    SnowflakeId::new(id)
        .and_then(|id| layout.decode(id).ok())
        .unwrap_or(Parts {
            timestamp_ms: layout.max_timestamp_ms(),
            datacenter_id: layout.max_datacenter_id(),
            worker_id: layout.max_worker_id(),
            sequence: layout.max_sequence(),
        })
}

fn describe(layout: &Layout, id: u64) -> String {
    match SnowflakeId::new(id).map(|id| layout.describe(id)) {
        Some(Ok(decoded)) => decoded.to_string(),
        _ => format!("{id} (not an id of the layout {})", layout.name()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clients::Protocol;

    const T: u64 = 1_790_000_000_000;

    fn id(ms: u64, worker: u64, sequence: u64) -> u64 {
        Layout::TWITTER
            .encode(ms, 0, worker, sequence)
            .unwrap()
            .as_u64()
    }

    fn op(node: usize, sent_us: u64, received_us: u64, ids: Vec<u64>) -> Op {
        Op {
            node,
            protocol: Protocol::Http,
            count: u32::try_from(ids.len()).unwrap(),
            sent_us,
            received_us,
            received_unix_ms: T + 1000,
            outcome: Outcome::Ids(ids),
        }
    }

    fn facts() -> Facts {
        Facts {
            marks: [((0, 0), T + 500), ((0, 1), T + 500)].into_iter().collect(),
            allowed_ahead_ms: vec![100; 3],
            samples: Vec::new(),
            layout: Layout::TWITTER,
        }
    }

    fn rules(history: &[Op], facts: &Facts) -> Vec<&'static str> {
        check(history, facts, 10).1.iter().map(|v| v.rule).collect()
    }

    #[test]
    fn a_clean_history_passes_with_its_totals() {
        let history = vec![
            op(0, 0, 10, vec![id(T, 0, 0), id(T, 0, 1)]),
            op(1, 5, 20, vec![id(T, 1, 0)]),
            op(0, 11, 30, vec![id(T + 1, 0, 0)]),
            Op {
                outcome: Outcome::Refused {
                    status: "503".into(),
                    reason: "clock moved backwards".into(),
                },
                ..op(0, 31, 40, vec![])
            },
        ];
        let (totals, violations) = check(&history, &facts(), 10);
        assert!(violations.is_empty(), "{violations:?}");
        assert_eq!(
            totals,
            Totals {
                ops: 4,
                ops_ok: 3,
                ops_refused: 1,
                ops_no_answer: 0,
                ids: 4
            }
        );
    }

    #[test]
    fn each_broken_rule_is_found() {
        // A duplicate across two nodes.
        let dup = vec![
            op(0, 0, 10, vec![id(T, 0, 5)]),
            op(1, 0, 10, vec![id(T, 0, 5)]),
        ];
        assert!(rules(&dup, &facts()).contains(&"duplicate"));
        // A takeover that went below its predecessor: answered first, yet higher.
        let order = vec![
            op(0, 0, 10, vec![id(T + 9, 0, 0)]),
            op(1, 20, 30, vec![id(T + 3, 0, 0)]),
        ];
        assert_eq!(rules(&order, &facts()), ["order"]);
        // Overlapping requests may come back in any order.
        let overlap = vec![
            op(0, 0, 30, vec![id(T + 9, 0, 0)]),
            op(1, 20, 40, vec![id(T + 3, 0, 0)]),
        ];
        assert!(rules(&overlap, &facts()).is_empty());
        // Above the mark, and a pair with no mark at all.
        let above = vec![op(0, 0, 10, vec![id(T + 501, 0, 0)])];
        assert_eq!(rules(&above, &facts()), ["mark"]);
        let unmarked = vec![op(0, 0, 10, vec![id(T, 7, 0)])];
        assert_eq!(rules(&unmarked, &facts()), ["mark"]);
        // Dated 20 years ahead of the campaign's clock.
        let mut facts_far = facts();
        facts_far.marks.insert((0, 0), u64::MAX);
        let future = vec![op(0, 0, 10, vec![id(T + 631_152_000_000, 0, 0)])];
        assert_eq!(rules(&future, &facts_far), ["future"]);
        // A refusal with no reason.
        let silent = vec![Op {
            outcome: Outcome::Refused {
                status: "503".into(),
                reason: " ".into(),
            },
            ..op(0, 0, 10, vec![])
        }];
        assert_eq!(rules(&silent, &facts()), ["reason"]);
    }

    #[test]
    fn ids_are_read_with_the_fleets_layout_and_none_may_be_above_its_largest() {
        let js = |ms: u64, worker: u64, sequence: u64| {
            Layout::JS_SAFE
                .encode(ms, 0, worker, sequence)
                .unwrap()
                .as_u64()
        };
        let facts = Facts {
            layout: Layout::JS_SAFE,
            ..facts()
        };
        // Pairs and times read with js-safe's widths: two workers, in order, under the marks.
        let clean = vec![
            op(0, 0, 10, vec![js(T, 0, 0), js(T, 0, 63)]),
            op(1, 5, 20, vec![js(T, 1, 0)]),
            op(0, 11, 30, vec![js(T + 1, 0, 0)]),
        ];
        assert!(
            rules(&clean, &facts).is_empty(),
            "{:?}",
            check(&clean, &facts, 10).1
        );
        // The same history read as Twitter's would see pairs and times that do not exist.
        assert!(!rules(&clean, &self::facts()).is_empty());
        // An ID JavaScript cannot hold, from a js-safe fleet.
        let big = vec![op(0, 0, 10, vec![id(T, 0, 0)])];
        let found = check(&big, &facts, 10).1;
        assert!(found.iter().any(|v| v.rule == "layout"), "{found:?}");
        let layout = found.iter().find(|v| v.rule == "layout").unwrap();
        assert!(
            layout
                .detail
                .ends_with("is above the largest id 9007199254740991 of the layout js-safe"),
            "{}",
            layout.detail
        );
    }

    #[test]
    fn a_mark_read_below_an_id_received_earlier_is_a_violation() {
        let sample = |read_us, node, mark_ms| MarkSample {
            read_us,
            node,
            pair: (0, 0),
            mark_ms,
        };
        // Node 0 issued an ID dated T + 100 (answered at 10 µs); node 1 one of the same pair,
        // dated T + 300, after a takeover (answered at 50 µs).
        let history = vec![
            op(0, 0, 10, vec![id(T + 100, 0, 0)]),
            op(1, 40, 50, vec![id(T + 300, 0, 0)]),
        ];
        let with = |samples: Vec<MarkSample>| Facts { samples, ..facts() };
        // Reads at or above every ID answered before them: fine, and a read that began before
        // an answer owes it nothing.
        let fine = with(vec![
            sample(5, None, T),
            sample(20, None, T + 100),
            sample(45, None, T + 100),
            sample(60, None, T + 300),
            sample(60, Some(0), T + 100),
            sample(60, Some(1), T + 300),
        ]);
        assert!(rules(&history, &fine).is_empty());
        // The mark in the coordination service went down for a moment (a late write), though
        // the final one is above everything.
        let lowered = with(vec![sample(60, None, T + 300), sample(70, None, T + 299)]);
        let found = check(&history, &lowered, 10).1;
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].rule, "mark");
        assert_eq!(found[0].ops, [1]);
        assert!(found[0].detail.contains("the coordination service"));
        assert!(found[0].detail.contains("1 ms below it"));
        // A node's own directory is compared with that node's IDs only.
        let local = with(vec![
            sample(60, Some(0), T + 200),
            sample(60, Some(1), T + 200),
        ]);
        let found = check(&history, &local, 10).1;
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].detail.contains("node 1's state directory"));
    }
}

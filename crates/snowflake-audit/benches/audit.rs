//! The audit's own pieces, measured: reading decimal lines, and a whole audit in memory and
//! spilled. (The end-to-end figures for 10 million to a billion IDs are in BENCHMARKS.md, from
//! `scripts/bench-audit`.)

use snowflake_audit::{Auditor, Options};
use snowflake_core::Layout;

fn main() {
    divan::main();
}

/// 200,000 IDs of two nodes over a second, as decimal lines.
fn input() -> String {
    let mut text = String::new();
    for i in 0..200_000u64 {
        let id = Layout::TWITTER
            .encode(1_790_000_000_000 + i / 200, 0, i % 2, i % 4096)
            .unwrap();
        text.push_str(&id.to_string());
        text.push('\n');
    }
    text
}

#[divan::bench(args = [1 << 20, 160 << 20])]
fn audit_200k_ids(bencher: divan::Bencher, memory_bytes: usize) {
    let text = input();
    bencher
        .counter(divan::counter::ItemsCount::new(200_000usize))
        .bench(|| {
            let mut audit = Auditor::new(Options {
                memory_bytes,
                ..Options::default()
            });
            audit.read("bench", text.as_bytes(), &mut |_| {}).unwrap();
            audit.finish().unwrap().unique
        });
}

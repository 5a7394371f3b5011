//! The timeline: IDs per second of each node over the campaign, with every fault marked, as a
//! self-contained SVG (no plotting dependency: lines, rectangles and text).

use crate::clients::{Op, Outcome};
use crate::faults::Record;
use std::fmt::Write;

const WIDTH: f64 = 1200.0;
const HEIGHT: f64 = 520.0;
const LEFT: f64 = 200.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 30.0;
/// Room below the plot for the fault lanes.
const BOTTOM: f64 = 170.0;
const COLORS: [&str; 8] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// The SVG of `history` and `faults` for `nodes` nodes; `title` goes on top.
pub fn timeline(history: &[Op], faults: &[Record], nodes: usize, title: &str) -> String {
    let end_us = history
        .iter()
        .map(|op| op.received_us)
        .max()
        .unwrap_or(1_000_000);
    let seconds = usize::try_from(end_us / 1_000_000 + 1).unwrap_or(1);
    let mut per_second = vec![vec![0u64; seconds]; nodes];
    for op in history {
        if let (Outcome::Ids(ids), Some(row)) = (&op.outcome, per_second.get_mut(op.node)) {
            let at = usize::try_from(op.received_us / 1_000_000).unwrap_or(0);
            if let Some(cell) = row.get_mut(at) {
                *cell += ids.len() as u64;
            }
        }
    }
    let peak = per_second
        .iter()
        .flatten()
        .copied()
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let x = |s: f64| LEFT + s / seconds as f64 * plot_w;
    let y = |v: f64| TOP + plot_h - v / peak * plot_h;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif" font-size="11">"#
    );
    let _ = write!(
        svg,
        r#"<rect width="100%" height="100%" fill="white"/><text x="{LEFT}" y="18" font-size="14">{}</text>"#,
        escape(title)
    );
    // The faults: one lane per kind below the plot, and a light band over the plot.
    let mut kinds: Vec<String> = faults.iter().map(|r| r.kind.name()).collect();
    kinds.sort();
    kinds.dedup();
    let lane_h = (BOTTOM - 40.0) / kinds.len().max(1) as f64;
    for (lane, kind) in kinds.iter().enumerate() {
        let top = TOP + plot_h + 30.0 + lane as f64 * lane_h;
        let _ = write!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="end" font-size="9">{}</text>"#,
            LEFT - 4.0,
            top + lane_h * 0.75,
            escape(kind)
        );
        for record in faults.iter().filter(|r| &r.kind.name() == kind) {
            let (a, b) = (
                x(record.start_us as f64 / 1e6),
                x(record.heal_us as f64 / 1e6),
            );
            let _ = write!(
                svg,
                r##"<rect x="{a:.1}" y="{top:.1}" width="{:.1}" height="{:.1}" fill="#d62728" opacity="0.7"><title>{} on {}</title></rect>"##,
                (b - a).max(1.0),
                lane_h * 0.8,
                escape(kind),
                escape(&record.target_name)
            );
            let _ = write!(
                svg,
                r##"<rect x="{a:.1}" y="{TOP}" width="{:.1}" height="{plot_h}" fill="#999" opacity="0.06"/>"##,
                (b - a).max(1.0)
            );
        }
    }
    // Axes and grid.
    let _ = write!(
        svg,
        r##"<line x1="{LEFT}" y1="{}" x2="{}" y2="{}" stroke="#333"/><line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{}" stroke="#333"/>"##,
        TOP + plot_h,
        LEFT + plot_w,
        TOP + plot_h,
        TOP + plot_h
    );
    for i in 0..=4 {
        let v = peak * f64::from(i) / 4.0;
        let _ = write!(
            svg,
            r##"<text x="{}" y="{:.1}" text-anchor="end">{:.0}</text><line x1="{LEFT}" y1="{:.1}" x2="{}" y2="{:.1}" stroke="#eee"/>"##,
            LEFT - 4.0,
            y(v) + 4.0,
            v,
            y(v),
            LEFT + plot_w,
            y(v)
        );
    }
    let step = (seconds / 10).max(1);
    for s in (0..=seconds).step_by(step) {
        let _ = write!(
            svg,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{s} s</text>"#,
            x(s as f64),
            TOP + plot_h + 14.0
        );
    }
    let _ = write!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" transform="rotate(-90 {:.1} {:.1})" text-anchor="middle">IDs/s per node</text>"#,
        LEFT - 48.0,
        TOP + plot_h / 2.0,
        LEFT - 48.0,
        TOP + plot_h / 2.0
    );
    // One line per node.
    for (node, row) in per_second.iter().enumerate() {
        let color = COLORS[node % COLORS.len()];
        let points: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(s, &v)| format!("{:.1},{:.1}", x(s as f64 + 0.5), y(v as f64)))
            .collect();
        let _ = write!(
            svg,
            r#"<polyline fill="none" stroke="{color}" stroke-width="1.2" points="{}"/>"#,
            points.join(" ")
        );
        let _ = write!(
            svg,
            r#"<text x="{:.1}" y="{}" fill="{color}">n{}</text>"#,
            LEFT + 10.0 + node as f64 * 40.0,
            TOP + 12.0,
            node + 1
        );
    }
    svg.push_str("</svg>\n");
    svg
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

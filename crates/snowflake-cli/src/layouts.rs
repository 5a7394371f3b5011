//! `snowflake layout` and `snowflake range`: what a layout holds (widths, shifts, largest ID,
//! lifetime, nodes, rate) and the IDs of a time window.

use clap::Args;
use serde_json::json;
use snowflake_core::{Layout, LayoutRecord, format_unix_ms};
use std::io::Write;

/// Below this many years left, `snowflake layout` warns.
const WARN_YEARS_LEFT: f64 = 10.0;

/// Milliseconds in a mean Gregorian year.
const MS_PER_YEAR: f64 = 365.2425 * 86_400_000.0;

#[derive(Debug, Args)]
pub struct LayoutArgs {
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct RangeArgs {
    /// The window's first millisecond: Unix ms, or RFC 3339 (e.g. 2024-05-01T00:00:00Z).
    #[arg(long, value_name = "T", allow_negative_numbers = true)]
    from: String,
    /// The window's last millisecond (included): Unix ms, or RFC 3339.
    #[arg(long, value_name = "T", allow_negative_numbers = true)]
    to: String,
    /// Print `{"min_id":"…","max_id":"…"}` instead of text.
    #[arg(long)]
    json: bool,
}

/// `snowflake layout`: the layout's facts on `out`; on `warn`, a warning when its timestamp runs
/// out in fewer than 10 years from `now_ms`.
pub fn show(
    args: &LayoutArgs,
    layout: &Layout,
    now_ms: u64,
    out: &mut impl Write,
    warn: &mut impl Write,
) -> anyhow::Result<()> {
    let bits = layout.bits();
    let last_ms = layout.max_timestamp_ms();
    let years_left = last_ms.saturating_sub(now_ms) as f64 / MS_PER_YEAR;
    if args.json {
        let mut value = serde_json::to_value(LayoutRecord::from(layout))?;
        let extra = json!({
            "epoch": format_unix_ms(layout.epoch_ms()),
            "timestamp_shift": layout.timestamp_shift(),
            "datacenter_shift": layout.datacenter_shift(),
            "worker_shift": layout.worker_shift(),
            "last_timestamp_ms": last_ms,
            "last_time": format_unix_ms(last_ms),
            "years_left": (years_left * 10.0).floor() / 10.0,
            "datacenters": layout.max_datacenter_id() + 1,
            "workers_per_datacenter": layout.max_worker_id() + 1,
            "nodes": layout.node_count(),
            "max_ids_per_ms_per_node": layout.max_ids_per_ms(),
            "max_ids_per_second_per_node": layout.max_ids_per_second(),
            "ids_fit_js_number": layout.ids_fit_js_number(),
        });
        if let (Some(map), serde_json::Value::Object(more)) = (value.as_object_mut(), extra) {
            map.extend(more);
        }
        serde_json::to_writer(&mut *out, &value)?;
        writeln!(out)?;
    } else {
        writeln!(out, "name: {}", layout.name())?;
        writeln!(out, "epoch_ms: {}", layout.epoch_ms())?;
        writeln!(out, "epoch: {}", format_unix_ms(layout.epoch_ms()))?;
        writeln!(
            out,
            "bits: timestamp {} / datacenter {} / worker {} / sequence {}",
            bits.timestamp, bits.datacenter, bits.worker, bits.sequence
        )?;
        writeln!(
            out,
            "shifts: timestamp {} / datacenter {} / worker {}",
            layout.timestamp_shift(),
            layout.datacenter_shift(),
            layout.worker_shift()
        )?;
        writeln!(out, "max_id: {}", layout.max_id())?;
        writeln!(out, "ids_fit_js_number: {}", layout.ids_fit_js_number())?;
        writeln!(out, "last_timestamp_ms: {last_ms}")?;
        writeln!(out, "rollover: {}", format_unix_ms(last_ms))?;
        writeln!(out, "years_left: {:.1}", (years_left * 10.0).floor() / 10.0)?;
        writeln!(out, "datacenters: {}", layout.max_datacenter_id() + 1)?;
        writeln!(
            out,
            "workers_per_datacenter: {}",
            layout.max_worker_id() + 1
        )?;
        writeln!(out, "nodes: {}", layout.node_count())?;
        writeln!(out, "max_ids_per_ms_per_node: {}", layout.max_ids_per_ms())?;
        writeln!(
            out,
            "max_ids_per_second_per_node: {}",
            layout.max_ids_per_second()
        )?;
    }
    if years_left < WARN_YEARS_LEFT {
        writeln!(
            warn,
            "warning: the layout's timestamp runs out at {} ({years_left:.1} years from now, \
             fewer than {WARN_YEARS_LEFT}); no ID can be issued after it: pick a later epoch or \
             more timestamp bits for a new fleet",
            format_unix_ms(last_ms)
        )?;
    }
    Ok(())
}

/// `snowflake range`: the smallest and largest ID any node could issue in the window.
pub fn range(args: &RangeArgs, layout: &Layout, out: &mut impl Write) -> anyhow::Result<()> {
    let range = snowflake_server::window::range(layout, &args.from, &args.to)
        .map_err(|e| anyhow::anyhow!(e))?;
    if args.json {
        serde_json::to_writer(&mut *out, &range)?;
        writeln!(out)?;
    } else {
        writeln!(out, "min_id: {}", range.min_id)?;
        writeln!(out, "max_id: {}", range.max_id)?;
    }
    Ok(())
}

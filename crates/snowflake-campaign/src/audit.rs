//! The run's IDs checked a second way: every ID the clients were given, written one per line
//! and read by `snowflake audit --layout` (the operators' tool), which must agree with the
//! checker: as many IDs, none repeated, none outside the fleet's layout.

use crate::clients::{Op, Outcome};
use anyhow::Context;
use serde::Serialize;
use snowflake_core::Layout;
use std::io::Write;
use std::path::Path;
use std::process::Command;

/// What `snowflake audit --json` found.
#[derive(Debug, Clone, Serialize)]
pub struct Audit {
    /// IDs read.
    pub ids: u64,
    /// Distinct IDs.
    pub unique: u64,
    /// Extra copies.
    pub duplicates: u64,
    /// Lines that are not IDs of the layout.
    pub invalid: u64,
    /// The audit's exit status.
    pub exit: i32,
}

impl Audit {
    /// Clean, and over the `ids` IDs the checker counted.
    pub fn clean(&self, ids: u64) -> bool {
        self.exit == 0 && self.duplicates == 0 && self.invalid == 0 && self.ids == ids
    }
}

/// Writes every ID of `history` to `dir/ids.txt` and audits it with `snowflake` under `layout`.
pub fn run(snowflake: &Path, layout: &Layout, history: &[Op], dir: &Path) -> anyhow::Result<Audit> {
    let path = dir.join("ids.txt");
    let mut file = std::io::BufWriter::new(std::fs::File::create(&path)?);
    for op in history {
        if let Outcome::Ids(ids) = &op.outcome {
            for id in ids {
                writeln!(file, "{id}")?;
            }
        }
    }
    file.flush()?;
    drop(file);
    let output = Command::new(snowflake)
        .args(["--layout", &layout.name(), "audit", "--json"])
        .arg(&path)
        .env_remove("SNOWFLAKE_LAYOUT")
        .env_remove("SNOWFLAKE_EPOCH_MS")
        .output()
        .with_context(|| format!("running {} audit", snowflake.display()))?;
    let exit = output.status.code().unwrap_or(-1);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).with_context(|| {
        format!(
            "snowflake audit (exit {exit}) printed no report: {}",
            String::from_utf8_lossy(&output.stderr)
        )
    })?;
    let count = |field: &str| report[field].as_u64().unwrap_or(u64::MAX);
    let audit = Audit {
        ids: count("ids"),
        unique: count("unique"),
        duplicates: count("duplicates"),
        invalid: count("invalid"),
        exit,
    };
    std::fs::remove_file(&path)?;
    Ok(audit)
}

//! The durable mark's file in the data directory: the identity IDs are issued under, the time
//! reserved ahead of the clock, and the clock facts the next start checks its clock against.
//!
//! Written as a whole and atomically (a temporary file, fsync, rename, fsync of the directory),
//! so a crash leaves the old file or the new one, never a torn one.

use crate::settings::Config;
use serde::{Deserialize, Serialize};
use snowflake_core::Bits;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

/// The file's name, in the data directory.
pub const FILE_NAME: &str = "snowflake.mark";
/// The format this code writes and reads.
pub const VERSION: u32 = 1;

/// Who IDs are issued as: the pair and the layout. Stored with every mark, so a restart with
/// other settings is refused instead of minting IDs the old mark does not cover.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// Datacenter id.
    pub datacenter_id: u64,
    /// Worker id.
    pub worker_id: u64,
    /// Field widths: timestamp, datacenter, worker, sequence.
    pub bits: [u8; 4],
    /// The layout's epoch, Unix ms.
    pub epoch_ms: u64,
}

impl Identity {
    /// The identity the settings describe.
    pub fn of(config: &Config) -> Identity {
        let Bits {
            timestamp,
            datacenter,
            worker,
            sequence,
        } = config.layout.bits();
        Identity {
            datacenter_id: config.datacenter_id,
            worker_id: config.worker_id,
            bits: [timestamp, datacenter, worker, sequence],
            epoch_ms: config.layout.epoch_ms(),
        }
    }

    /// The field widths.
    pub fn bits(&self) -> Bits {
        let [timestamp, datacenter, worker, sequence] = self.bits;
        Bits {
            timestamp,
            datacenter,
            worker,
            sequence,
        }
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "datacenter {} worker {} (layout {}, epoch {})",
            self.datacenter_id,
            self.worker_id,
            self.bits(),
            self.epoch_ms
        )
    }
}

/// The mark file's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MarkFile {
    /// The format version ([`VERSION`]).
    pub version: u32,
    /// The identity the mark was reserved under.
    pub identity: Identity,
    /// No ID was or will be issued with a timestamp above this (Unix ms) before the mark is
    /// raised again; a restart issues only above it.
    pub mark_ms: u64,
    /// The trusted time (Unix ms) when the mark was written.
    pub trusted_ms: u64,
    /// The kernel's boot id at that moment (`None` when the writer did not know it, as a
    /// standby replaying the primary's WAL).
    pub boot_id: Option<String>,
    /// `CLOCK_BOOTTIME` at that moment, in ms.
    pub boottime_ms: Option<u64>,
}

/// Why the mark file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum MarkError {
    /// Reading or writing it failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: String,
        /// The OS error.
        source: io::Error,
    },
    /// It is not a mark file this version understands.
    #[error("{path} is not a usable snowflake mark file: {reason}")]
    Corrupt {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
}

impl MarkFile {
    /// Reads the mark file of data directory `dir`: `Ok(None)` when there is none.
    pub fn load(dir: &Path) -> Result<Option<MarkFile>, MarkError> {
        let path = dir.join(FILE_NAME);
        let text = match fs::read(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(MarkError::Io {
                    action: "cannot read",
                    path: path.display().to_string(),
                    source,
                });
            }
        };
        let corrupt = |reason: String| MarkError::Corrupt {
            path: path.display().to_string(),
            reason,
        };
        let file: MarkFile = serde_json::from_slice(&text).map_err(|e| corrupt(e.to_string()))?;
        if file.version != VERSION {
            return Err(corrupt(format!(
                "format version {} (this extension reads {VERSION})",
                file.version
            )));
        }
        Ok(Some(file))
    }

    /// Writes the file durably: temporary file, fsync, rename over the old one, fsync the
    /// directory. When this returns `Ok`, a crash at any later point leaves this content.
    pub fn store(&self, dir: &Path) -> Result<(), MarkError> {
        let path = dir.join(FILE_NAME);
        let tmp = dir.join(format!("{FILE_NAME}.tmp.{}", std::process::id()));
        let io_err = |action: &'static str, p: &Path| {
            let path = p.display().to_string();
            move |source| MarkError::Io {
                action,
                path,
                source,
            }
        };
        let mut text = serde_json::to_vec(self).expect("a mark file serializes");
        text.push(b'\n');
        let written = (|| {
            let mut file = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(&tmp)
                .map_err(io_err("cannot create", &tmp))?;
            file.write_all(&text)
                .map_err(io_err("cannot write", &tmp))?;
            file.sync_all().map_err(io_err("cannot fsync", &tmp))?;
            fs::rename(&tmp, &path).map_err(io_err("cannot rename into", &path))?;
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(io_err("cannot fsync directory", dir))
        })();
        if written.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        written
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(mark_ms: u64) -> MarkFile {
        MarkFile {
            version: VERSION,
            identity: Identity {
                datacenter_id: 7,
                worker_id: 13,
                bits: [41, 5, 5, 12],
                epoch_ms: snowflake_core::TWITTER_EPOCH_MS,
            },
            mark_ms,
            trusted_ms: mark_ms.saturating_sub(3000),
            boot_id: Some("b".into()),
            boottime_ms: Some(5),
        }
    }

    #[test]
    fn store_then_load_round_trips_and_replaces() {
        let dir = tempfile::tempdir().unwrap();
        assert!(MarkFile::load(dir.path()).unwrap().is_none());
        sample(1_800_000_000_000).store(dir.path()).unwrap();
        sample(1_800_000_003_000).store(dir.path()).unwrap();
        assert_eq!(
            MarkFile::load(dir.path()).unwrap(),
            Some(sample(1_800_000_003_000))
        );
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            names,
            vec![std::ffi::OsString::from(FILE_NAME)],
            "no temporary file is left"
        );
    }

    #[test]
    fn a_corrupt_or_future_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(FILE_NAME), b"{not json").unwrap();
        let err = MarkFile::load(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("snowflake.mark is not a usable snowflake mark file"),
            "{err}"
        );
        let mut future = sample(1_800_000_000_000);
        future.version = 2;
        fs::write(
            dir.path().join(FILE_NAME),
            serde_json::to_vec(&future).unwrap(),
        )
        .unwrap();
        let err = MarkFile::load(dir.path()).unwrap_err().to_string();
        assert!(err.contains("format version 2"), "{err}");
    }

    #[test]
    fn identity_names_pair_and_layout() {
        assert_eq!(
            sample(0).identity.to_string(),
            "datacenter 7 worker 13 (layout twitter, epoch 1288834974657)"
        );
        assert_eq!(sample(0).identity.bits(), Bits::TWITTER);
    }
}

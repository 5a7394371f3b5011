//! Restart safety: the state directory and its durable high-water marks.
//!
//! The directory holds one file per (datacenter, worker), `node-<dc>-<worker>.json`, recording a
//! Unix-ms timestamp at or above every ID that node ever issued, and a `LOCK` file that one
//! process holds (an exclusive advisory lock) for as long as it runs, so two processes never
//! share the directory. Writes are durable: a temporary file is written and fsynced, renamed over
//! the old one, and the directory is fsynced.

use serde::{Deserialize, Serialize};
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// The state file format written by this version.
const FORMAT: u32 = 1;
/// A state file is a few hundred bytes; anything much larger is not ours.
const MAX_STATE_FILE_BYTES: u64 = 64 * 1024;

/// Why the state directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The directory could not be created or opened.
    #[error("cannot use state directory {path}: {source}")]
    Directory {
        /// The directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Another process holds the lock.
    #[error(
        "state directory {path} is in use by another snowflake process{holder}; two processes \
         must not share one state directory (lock file {path}/LOCK)"
    )]
    Locked {
        /// The directory.
        path: PathBuf,
        /// Who holds it, as far as the lock file says (" (pid N)"), or empty.
        holder: String,
    },
    /// A state file could not be read.
    #[error("cannot read state file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A state file exists but is not valid; starting anyway could re-issue IDs.
    #[error(
        "state file {path} is corrupt ({reason}); refusing to start, because without it this node \
         could re-issue ids it issued before. If you are sure no ids were issued with this \
         (datacenter, worker) pair after the clock's current time, move the file away"
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A state file could not be written durably.
    #[error("cannot write state file {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The coordination service did not accept the high-water mark.
    #[error("cannot record the high-water mark in {service}: {message}")]
    Fleet {
        /// `etcd`.
        service: &'static str,
        /// What went wrong.
        message: String,
    },
}

/// What the mark records: a reservation made ahead of use, or the exact point reached at a
/// graceful shutdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MarkKind {
    /// Written ahead of use while running: IDs may have been issued up to it.
    Reservation,
    /// Written at a graceful shutdown: at or above the last issued ID.
    Shutdown,
}

/// The contents of a state file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mark {
    /// The file format version.
    pub format: u32,
    /// The node's datacenter id.
    pub datacenter_id: u64,
    /// The node's worker id.
    pub worker_id: u64,
    /// The layout's epoch the IDs were issued under.
    pub epoch_ms: u64,
    /// No ID of this node has a timestamp above this (Unix ms).
    pub high_water_ms: u64,
    /// Reservation or exact shutdown point.
    pub kind: MarkKind,
    /// When the file was written (Unix ms, by the node's clock).
    pub written_at_ms: u64,
    /// The process that wrote it.
    pub pid: u32,
}

/// An open, locked state directory. The lock is released when this is dropped.
#[derive(Debug)]
pub struct StateDir {
    /// The directory.
    path: PathBuf,
    /// Held open for the lock's lifetime.
    _lock: File,
}

impl StateDir {
    /// Creates the directory if needed and takes its lock.
    pub fn open(path: &Path) -> Result<StateDir, StateError> {
        let dir_error = |source| StateError::Directory {
            path: path.to_owned(),
            source,
        };
        fs::create_dir_all(path).map_err(dir_error)?;
        let lock_path = path.join("LOCK");
        let mut lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(dir_error)?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = lock.read_to_string(&mut holder);
                let holder = holder.trim();
                let holder = if !holder.is_empty() && holder.len() < 64 {
                    format!(" ({holder})")
                } else {
                    String::new()
                };
                return Err(StateError::Locked {
                    path: path.to_owned(),
                    holder,
                });
            }
            Err(TryLockError::Error(source)) => return Err(dir_error(source)),
        }
        lock.set_len(0).map_err(dir_error)?;
        writeln!(lock, "pid {}", std::process::id()).map_err(dir_error)?;
        Ok(StateDir {
            path: path.to_owned(),
            _lock: lock,
        })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The state file of a node.
    pub fn file(&self, datacenter_id: u64, worker_id: u64) -> PathBuf {
        self.path
            .join(format!("node-{datacenter_id}-{worker_id}.json"))
    }

    /// Reads a node's mark: `None` if the node never ran with this directory, an error if the
    /// file exists but cannot be trusted.
    pub fn load(
        &self,
        datacenter_id: u64,
        worker_id: u64,
        epoch_ms: u64,
    ) -> Result<Option<Mark>, StateError> {
        let path = self.file(datacenter_id, worker_id);
        let file = match File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(StateError::Read { path, source }),
        };
        let mut text = String::new();
        let read = file
            .take(MAX_STATE_FILE_BYTES + 1)
            .read_to_string(&mut text);
        let corrupt = |reason: String| StateError::Corrupt {
            path: path.clone(),
            reason,
        };
        match read {
            Ok(n) if n as u64 > MAX_STATE_FILE_BYTES => {
                return Err(corrupt(format!("larger than {MAX_STATE_FILE_BYTES} bytes")));
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                return Err(corrupt("not UTF-8 text".into()));
            }
            Err(source) => return Err(StateError::Read { path, source }),
        }
        let mark: Mark = serde_json::from_str(&text)
            .map_err(|e| corrupt(format!("not a valid state record: {e}")))?;
        if mark.format != FORMAT {
            return Err(corrupt(format!(
                "format {} is not the supported format {FORMAT}",
                mark.format
            )));
        }
        if (mark.datacenter_id, mark.worker_id) != (datacenter_id, worker_id) {
            return Err(corrupt(format!(
                "it records datacenter {} worker {}, not datacenter {datacenter_id} worker {worker_id}",
                mark.datacenter_id, mark.worker_id
            )));
        }
        if mark.epoch_ms != epoch_ms {
            return Err(corrupt(format!(
                "it was written under epoch {}, but the node now runs with epoch {epoch_ms}; ids \
                 under two epochs can collide",
                mark.epoch_ms
            )));
        }
        Ok(Some(mark))
    }

    /// Durably replaces a node's mark: write a temporary file, fsync, rename, fsync the
    /// directory. When this returns `Ok`, the mark survives a crash or power loss.
    pub fn store(&self, mark: &Mark) -> Result<(), StateError> {
        let path = self.file(mark.datacenter_id, mark.worker_id);
        let tmp = path.with_extension("json.tmp");
        let write_error = |source| StateError::Write {
            path: path.clone(),
            source,
        };
        let mut text = serde_json::to_string_pretty(mark)
            .map_err(|e| write_error(std::io::Error::other(e)))?;
        text.push('\n');
        let mut file = File::create(&tmp).map_err(write_error)?;
        file.write_all(text.as_bytes()).map_err(write_error)?;
        file.sync_all().map_err(write_error)?;
        drop(file);
        fs::rename(&tmp, &path).map_err(write_error)?;
        File::open(&self.path)
            .and_then(|dir| dir.sync_all())
            .map_err(write_error)?;
        Ok(())
    }

    /// A mark record for this process.
    pub fn mark(
        datacenter_id: u64,
        worker_id: u64,
        epoch_ms: u64,
        high_water_ms: u64,
        kind: MarkKind,
        now_ms: u64,
    ) -> Mark {
        Mark {
            format: FORMAT,
            datacenter_id,
            worker_id,
            epoch_ms,
            high_water_ms,
            kind,
            written_at_ms: now_ms,
            pid: std::process::id(),
        }
    }
}

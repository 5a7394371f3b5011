//! Restart safety: the state directory and its durable high-water marks.
//!
//! The directory holds one file per (datacenter, worker), `node-<dc>-<worker>.json`, recording a
//! Unix-ms timestamp at or above every ID that node ever issued, and a `LOCK` file that one
//! process holds (an exclusive advisory lock) for as long as it runs, so two processes never
//! share the directory. Writes are durable: a temporary file is written and fsynced, renamed over
//! the old one, and the directory is fsynced; a directory the node creates is made durable in its
//! parent too.
//!
//! **One writer at a time, and marks never go down.** Reservations are written from the keeper,
//! from requests that found the clock past the reservation, and at shutdown; a request's future
//! can be dropped (its timeout) while its blocking write goes on. So [`StateDir::store`]
//! serializes every write behind one lock, writes each through a temporary file of its own name,
//! skips a reservation at or below what is already on disk (a late, lower write can never replace
//! a higher one), and after the shutdown mark (the one record allowed to lower the mark, because
//! nothing is issued after it) refuses every further reservation.
//!
//! **The layout is recorded with the epoch.** Under Twitter's widths a state file is format 1,
//! byte for byte what every release before layouts wrote (its layout is Twitter's widths with
//! its `epoch_ms`). Under any other widths it is format 2, which adds the `layout` record; a
//! release before layouts refuses format 2 (it knows format 1 only), so rolling back cannot
//! issue Twitter IDs over another layout's. A node whose layout is not the file's refuses to
//! start, naming both.

use crate::clock_trust::TrustedPoint;
use serde::{Deserialize, Serialize};
use snowflake_core::{Bits, Layout, LayoutRecord};
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The state file format under Twitter's widths: the format of every release before layouts,
/// which records the epoch only.
const FORMAT_TWITTER: u32 = 1;
/// The state file format under any other widths: format 1 plus the `layout` record. A release
/// before layouts refuses it.
const FORMAT_LAYOUT: u32 = 2;
/// The format of `clock.json`.
const CLOCK_FORMAT: u32 = 1;
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
    /// A state file was written under another epoch: the ids it covers were issued under that
    /// epoch, and ids of the same pair under a later one repeat them.
    #[error(
        "state file {path} was written under epoch {written_epoch_ms}, but the node now runs \
         with epoch {epoch_ms}; ids under two epochs can collide, so it is refusing to start. Run \
         this (datacenter, worker) pair with --epoch-ms {written_epoch_ms}, the epoch its ids were \
         issued under: moving the file away would let a later epoch issue them again"
    )]
    EpochChanged {
        /// The file.
        path: PathBuf,
        /// The epoch the file records.
        written_epoch_ms: u64,
        /// The node's epoch.
        epoch_ms: u64,
    },
    /// A state file was written under other field widths: IDs of two layouts can collide.
    #[error(
        "state file {path} was written under the layout {written}, but the node now runs {running}; \
         ids of two layouts can collide, so it is refusing to start. Run this (datacenter, worker) \
         pair with --layout {written_name} (and its epoch), the layout its ids were issued under; \
         moving to another layout needs a new state directory and a new fleet prefix (see \
         docs/layouts.md)"
    )]
    LayoutChanged {
        /// The file.
        path: PathBuf,
        /// The layout the file records (name and epoch).
        written: String,
        /// The name of the layout the file records.
        written_name: String,
        /// The node's layout (name and epoch).
        running: String,
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
    #[error("cannot record the high-water mark in {service}: {source}")]
    Fleet {
        /// `etcd` or `zookeeper`.
        service: &'static str,
        /// What went wrong.
        source: snowflake_fleet::FleetError,
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
    /// The file format version: 1 under Twitter's widths (no `layout`), 2 under any other.
    pub format: u32,
    /// The node's datacenter id.
    pub datacenter_id: u64,
    /// The node's worker id.
    pub worker_id: u64,
    /// The layout's epoch the IDs were issued under.
    pub epoch_ms: u64,
    /// The layout the IDs were issued under, in format 2 (absent in format 1, which means
    /// Twitter's widths with `epoch_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<LayoutRecord>,
    /// No ID of this node has a timestamp above this (Unix ms).
    pub high_water_ms: u64,
    /// Reservation or exact shutdown point.
    pub kind: MarkKind,
    /// When the file was written (Unix ms, by the node's clock).
    pub written_at_ms: u64,
    /// The process that wrote it.
    pub pid: u32,
}

/// Reads a small file whole: at most [`MAX_STATE_FILE_BYTES`], UTF-8.
fn read_bounded(path: &Path) -> std::io::Result<String> {
    let mut text = String::new();
    let n = File::open(path)?
        .take(MAX_STATE_FILE_BYTES + 1)
        .read_to_string(&mut text)?;
    if n as u64 > MAX_STATE_FILE_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {MAX_STATE_FILE_BYTES} bytes"),
        ));
    }
    Ok(text)
}

/// The previous run's last trusted time, for the clock check at start.
const CLOCK_FILE: &str = "clock.json";

/// The contents of `clock.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct ClockRecord {
    /// The file format version.
    format: u32,
    /// The kernel's boot id when it was written.
    boot_id: String,
    /// Milliseconds since that boot (`CLOCK_BOOTTIME`).
    since_boot_ms: u64,
    /// The time the node trusted then (Unix ms).
    trusted_ms: u64,
    /// The process that wrote it.
    pid: u32,
}

/// `clock.json` as an operator tool reads it: the trusted point and the process that wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredClock {
    /// The time the node trusted, and the boot time it trusted it at.
    pub point: TrustedPoint,
    /// The process that wrote the record.
    pub pid: u32,
}

/// An open, locked state directory. The lock is released when this is dropped.
#[derive(Debug)]
pub struct StateDir {
    /// The directory.
    path: PathBuf,
    /// Held open for the lock's lifetime.
    _lock: File,
    /// One writer at a time; what is on disk.
    written: Mutex<Written>,
}

/// What [`StateDir`] knows is on disk, per the one node that uses it.
#[derive(Debug, Default)]
struct Written {
    /// The highest mark on disk (read at start or written since), by file.
    high_water_ms: std::collections::HashMap<PathBuf, u64>,
    /// The shutdown mark was written: no further reservation may be.
    sealed: bool,
    /// Makes every temporary file name unique.
    writes: u64,
}

/// What [`StateDir::store`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    /// The mark is on disk.
    Written,
    /// A mark at or above it was already on disk: nothing was written.
    AlreadyCovered,
}

impl StateDir {
    /// Creates the directory if needed and takes its lock.
    pub fn open(path: &Path) -> Result<StateDir, StateError> {
        let dir_error = |source| StateError::Directory {
            path: path.to_owned(),
            source,
        };
        create_dir_durably(path).map_err(dir_error)?;
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
            written: Mutex::new(Written::default()),
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
        layout: &Layout,
    ) -> Result<Option<Mark>, StateError> {
        let path = self.file(datacenter_id, worker_id);
        let mark = match StateDir::read_mark(&path, datacenter_id, worker_id, layout) {
            Ok(mark) => mark,
            Err(StateError::Read { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                return Ok(None);
            }
            Err(err) => return Err(err),
        };
        self.writer().high_water_ms.insert(path, mark.high_water_ms);
        Ok(Some(mark))
    }

    /// Reads and checks one state file without taking the directory's lock (a running node
    /// replaces it atomically): for operator tools. A missing file is a `Read` error; a file
    /// written under another layout (widths or epoch) than `layout` is refused.
    pub fn read_mark(
        path: &Path,
        datacenter_id: u64,
        worker_id: u64,
        layout: &Layout,
    ) -> Result<Mark, StateError> {
        let mark = StateDir::read_any_mark(path, datacenter_id, worker_id)?;
        let written = mark.written_layout();
        if written.bits() != layout.bits() {
            return Err(StateError::LayoutChanged {
                path: path.to_owned(),
                written: describe(&written),
                written_name: written.name.clone(),
                running: describe(&LayoutRecord::from(layout)),
            });
        }
        if mark.epoch_ms != layout.epoch_ms() {
            return Err(StateError::EpochChanged {
                path: path.to_owned(),
                written_epoch_ms: mark.epoch_ms,
                epoch_ms: layout.epoch_ms(),
            });
        }
        Ok(mark)
    }

    /// Reads and checks one state file whatever its layout (for `snowflake state show`, which
    /// prints the layout a file records): format 1 (Twitter's widths, the epoch) or 2 (the
    /// layout record, consistent with itself and with the epoch), for the pair it is named
    /// after.
    pub fn read_any_mark(
        path: &Path,
        datacenter_id: u64,
        worker_id: u64,
    ) -> Result<Mark, StateError> {
        let path = path.to_owned();
        let file = File::open(&path).map_err(|source| StateError::Read {
            path: path.clone(),
            source,
        })?;
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
        match (mark.format, &mark.layout) {
            (FORMAT_TWITTER, None) => {}
            (FORMAT_TWITTER, Some(_)) => {
                return Err(corrupt(
                    "format 1 records no layout (Twitter's widths), yet it has one".into(),
                ));
            }
            (FORMAT_LAYOUT, None) => {
                return Err(corrupt("format 2 without the layout it must record".into()));
            }
            (FORMAT_LAYOUT, Some(record)) => {
                if record.epoch_ms != mark.epoch_ms {
                    return Err(corrupt(format!(
                        "its layout's epoch {} is not its epoch_ms {}",
                        record.epoch_ms, mark.epoch_ms
                    )));
                }
                // Consistent in itself (name, widths, largest ID); its lifetime is not checked
                // here: a layout that ran out is refused where the node builds its layout.
                record
                    .to_layout_at(record.epoch_ms)
                    .map_err(|e| corrupt(format!("its layout record is not valid: {e}")))?;
                if record.bits() == Bits::TWITTER {
                    return Err(corrupt(
                        "format 2 records Twitter's widths, which are written as format 1".into(),
                    ));
                }
            }
            (format, _) => {
                return Err(corrupt(format!(
                    "format {format} is not a supported format ({FORMAT_TWITTER} for Twitter's \
                     widths, {FORMAT_LAYOUT} for any other layout)"
                )));
            }
        }
        if (mark.datacenter_id, mark.worker_id) != (datacenter_id, worker_id) {
            return Err(corrupt(format!(
                "it records datacenter {} worker {}, not datacenter {datacenter_id} worker {worker_id}",
                mark.datacenter_id, mark.worker_id
            )));
        }
        Ok(mark)
    }

    fn writer(&self) -> std::sync::MutexGuard<'_, Written> {
        // Nothing panics while holding it; a poisoned lock still guards the same state.
        self.written.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Durably replaces a node's mark: write a temporary file, fsync, rename, fsync the
    /// directory. When this returns `Ok`, the mark (or a higher one) survives a crash or power
    /// loss. Blocks while another write is in flight. A reservation at or below the mark on disk
    /// writes nothing; one after the shutdown mark is refused.
    pub fn store(&self, mark: &Mark) -> Result<Stored, StateError> {
        let path = self.file(mark.datacenter_id, mark.worker_id);
        let write_error = |source| StateError::Write {
            path: path.clone(),
            source,
        };
        let mut written = self.writer();
        if mark.kind == MarkKind::Reservation {
            if written.sealed {
                return Err(write_error(std::io::Error::other(
                    "the shutdown mark is already written; no reservation may follow it",
                )));
            }
            if written
                .high_water_ms
                .get(&path)
                .is_some_and(|&on_disk| on_disk >= mark.high_water_ms)
            {
                return Ok(Stored::AlreadyCovered);
            }
        }
        written.writes += 1;
        let tmp = path.with_extension(format!(
            "json.{}.{}.tmp",
            std::process::id(),
            written.writes
        ));
        let result = self.write_durably(&path, &tmp, mark);
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result.map_err(write_error)?;
        written.high_water_ms.insert(path, mark.high_water_ms);
        if mark.kind == MarkKind::Shutdown {
            written.sealed = true;
        }
        Ok(Stored::Written)
    }

    fn write_durably(&self, path: &Path, tmp: &Path, mark: &Mark) -> std::io::Result<()> {
        let mut text = serde_json::to_string_pretty(mark).map_err(std::io::Error::other)?;
        text.push('\n');
        let mut file = OpenOptions::new().write(true).create_new(true).open(tmp)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        drop(file);
        fs::rename(tmp, path)?;
        File::open(&self.path)?.sync_all()
    }

    /// The previous run's last trusted time and boot time (`clock.json`), if it left one: see
    /// [`crate::clock_trust::ClockAnchor::check_against`]. An unreadable or unknown record is
    /// an error to log, not a reason to refuse to start: without it the node trusts its first
    /// reading, as it would on a new boot.
    pub fn load_clock(&self) -> Result<Option<TrustedPoint>, String> {
        Ok(Self::read_clock(&self.path)?.map(|stored| stored.point))
    }

    /// `clock.json` of the state directory `dir`, read without taking the lock (for operator
    /// tools: a running node replaces the file atomically, so a reader sees one whole record or
    /// the other). `None` when there is none; an error names the file and what is wrong.
    pub fn read_clock(dir: &Path) -> Result<Option<StoredClock>, String> {
        let path = Self::clock_path(dir);
        let text = match read_bounded(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        };
        let record: ClockRecord = serde_json::from_str(&text)
            .map_err(|e| format!("{} is not a clock record: {e}", path.display()))?;
        if record.format != CLOCK_FORMAT {
            return Err(format!(
                "{} has format {}, expected {CLOCK_FORMAT}",
                path.display(),
                record.format
            ));
        }
        Ok(Some(StoredClock {
            point: TrustedPoint {
                boot_id: record.boot_id,
                since_boot_ms: record.since_boot_ms,
                trusted_ms: record.trusted_ms,
            },
            pid: record.pid,
        }))
    }

    /// The path of `clock.json` in the state directory `dir`.
    pub fn clock_path(dir: &Path) -> PathBuf {
        dir.join(CLOCK_FILE)
    }

    /// Removes `clock.json` (for `snowflake state lower-mark`: a trusted time a wrong clock left
    /// there is no evidence for the next start). Whether there was one.
    pub fn remove_clock(&self) -> std::io::Result<bool> {
        let _written = self.writer();
        match fs::remove_file(self.path.join(CLOCK_FILE)) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Records a trusted time and its boot time in `clock.json` (atomically replaced, and not
    /// fsynced: it only matters on the same boot, where a crashed process's writes are still
    /// in the page cache).
    pub fn store_clock(&self, point: &TrustedPoint) -> std::io::Result<()> {
        let record = ClockRecord {
            format: CLOCK_FORMAT,
            boot_id: point.boot_id.clone(),
            since_boot_ms: point.since_boot_ms,
            trusted_ms: point.trusted_ms,
            pid: std::process::id(),
        };
        let mut text = serde_json::to_string_pretty(&record).map_err(std::io::Error::other)?;
        text.push('\n');
        let mut written = self.writer();
        written.writes += 1;
        let path = self.path.join(CLOCK_FILE);
        let tmp = self.path.join(format!(
            "{CLOCK_FILE}.{}.{}.tmp",
            std::process::id(),
            written.writes
        ));
        let result = fs::write(&tmp, text).and_then(|()| fs::rename(&tmp, &path));
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result
    }

    /// Temporary files a crashed writer left behind (`*.tmp`), removed at start.
    pub fn remove_leftovers(&self) {
        let Ok(entries) = fs::read_dir(&self.path) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if (name.starts_with("node-") || name.starts_with(CLOCK_FILE)) && name.ends_with(".tmp")
            {
                let _ = fs::remove_file(entry.path());
            }
        }
    }

    /// A mark record for this process: format 1 under Twitter's widths (whatever the epoch),
    /// format 2 with the layout under any other.
    pub fn mark(
        datacenter_id: u64,
        worker_id: u64,
        layout: &Layout,
        high_water_ms: u64,
        kind: MarkKind,
        now_ms: u64,
    ) -> Mark {
        let twitter = layout.bits() == Bits::TWITTER;
        Mark {
            format: if twitter {
                FORMAT_TWITTER
            } else {
                FORMAT_LAYOUT
            },
            datacenter_id,
            worker_id,
            epoch_ms: layout.epoch_ms(),
            layout: (!twitter).then(|| LayoutRecord::from(layout)),
            high_water_ms,
            kind,
            written_at_ms: now_ms,
            pid: std::process::id(),
        }
    }
}

impl Mark {
    /// The layout the record says its IDs were issued under: its `layout` (format 2), or
    /// Twitter's widths with its epoch (format 1).
    pub fn written_layout(&self) -> LayoutRecord {
        self.layout.clone().unwrap_or_else(|| LayoutRecord {
            epoch_ms: self.epoch_ms,
            ..LayoutRecord::from(Layout::TWITTER)
        })
    }
}

/// A layout for messages: its name and its epoch.
fn describe(record: &LayoutRecord) -> String {
    format!("{} (epoch {})", record.name, record.epoch_ms)
}

/// Creates `path` and any missing parents, and makes each new directory durable by fsyncing the
/// directory that holds it (a new directory is an entry in its parent, which a crash could
/// otherwise lose, with the marks inside).
fn create_dir_durably(path: &Path) -> std::io::Result<()> {
    if path.is_dir() {
        return Ok(());
    }
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        create_dir_durably(parent)?;
    }
    match fs::create_dir(path) {
        Ok(()) => {}
        // Created meanwhile by someone else: its creator makes it durable.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && path.is_dir() => return Ok(()),
        Err(e) => return Err(e),
    }
    let parent = match path.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(parent) => parent.to_owned(),
        None => PathBuf::from("."),
    };
    File::open(parent)?.sync_all()
}

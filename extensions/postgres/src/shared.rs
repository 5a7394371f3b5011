//! The cluster's one generator and its reservation state, in shared memory: every backend draws
//! from the same `snowflake-core` generator (lock-free, its state one atomic), and one LWLock
//! orders everything that moves the durable mark, the trusted time or the keeper's grant.
//!
//! Nothing that can raise an error runs while the LWLock is held: the closures passed to
//! [`Shared::locked`] only compute, write the mark (which reports failure as a value) and store;
//! errors are raised after release. (PostgreSQL would release the lock on an error anyway; this
//! keeps the state consistent too.)

use crate::clock;
use crate::settings;
use crate::wal;
use pgrx::pg_sys;
use snowflake_core::{Generator, Layout};
use snowflake_pg_state::{ClockTrust, Identity, MarkFile, Previous, Step, TrustPolicy};
use std::cell::UnsafeCell;
use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

const NAME: &CStr = c"snowflake";

/// A short text in shared memory (no heap there).
#[derive(Debug, Clone, Copy)]
pub struct Text<const N: usize> {
    len: usize,
    bytes: [u8; N],
}

impl<const N: usize> Text<N> {
    const EMPTY: Self = Text {
        len: 0,
        bytes: [0; N],
    };

    /// Stores `s`, cut at a character boundary to fit.
    pub fn set(&mut self, s: &str) {
        let mut end = s.len().min(N);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        self.bytes[..end].copy_from_slice(&s.as_bytes()[..end]);
        self.len = end;
    }

    /// The text, `None` when empty.
    pub fn get(&self) -> Option<String> {
        (self.len > 0).then(|| String::from_utf8_lossy(&self.bytes[..self.len]).into_owned())
    }

    /// Empties it.
    pub fn clear(&mut self) {
        self.len = 0;
    }
}

/// What the LWLock guards.
#[derive(Debug)]
pub struct Locked {
    /// The identity stored with the mark (file or replayed WAL); `None` on a new cluster.
    pub stored: Option<Identity>,
    /// Why the mark file could not be read at start; nothing is issued while set.
    pub load_error: Text<400>,
    /// Trusted time.
    pub trust: ClockTrust,
    /// The untrusted step seen at the last reservation attempt, if any.
    pub step: Option<Step>,
    /// The keeper's issue limit (Unix ms); meaningful while the grant is live.
    pub grant_limit_ms: u64,
    /// The keeper's lease, as it named it.
    pub lease: Text<128>,
    /// The highest floor a keeper raised the generator to (Unix ms; 0: none): the fleet's
    /// mark when it claimed the pair, up to which a previous holder may have issued IDs.
    pub keeper_floor_ms: u64,
    /// The keeper revoked its grant (it stopped, or lost its lease); cleared by the next grant.
    pub revoked: bool,
    /// The last failure to write the mark, cleared by the next success.
    pub last_error: Text<400>,
    /// How many marks this server wrote since it started.
    pub reservations: u64,
}

/// The shared state.
#[derive(Debug)]
pub struct Shared {
    /// The generator every backend issues from. Its issue limit is at most the durable mark
    /// (and the keeper's grant, and trusted time); its floor is the mark found at start.
    pub generator: Generator,
    /// Orders reservations, grants and replay.
    lock: *mut pg_sys::LWLock,
    /// Set once the mark's floor was applied after recovery (by the first issuing call).
    pub started: AtomicBool,
    /// The keeper's grant lapses at this `CLOCK_MONOTONIC` ns (0: no grant).
    pub grant_deadline_ns: AtomicU64,
    /// The durable mark (Unix ms): in the WAL (flushed) and in the file (fsynced).
    pub mark_ms: AtomicU64,
    /// The highest the issue limit may go without a new grant (the keeper's limit; `u64::MAX`
    /// without a keeper): once the limit reaches it, issuing calls stop trying to raise it.
    pub ceiling_ms: AtomicU64,
    locked: UnsafeCell<Locked>,
}

static SHARED: AtomicPtr<Shared> = AtomicPtr::new(std::ptr::null_mut());

/// The shared state, or `None` when the library was not preloaded.
pub fn get() -> Option<&'static Shared> {
    // SAFETY: set once in the postmaster's shared-memory startup, to memory that lives as long
    // as the server; inherited by every process it forks.
    unsafe { SHARED.load(Ordering::Acquire).as_ref() }
}

fn size() -> usize {
    size_of::<Shared>() + align_of::<Shared>()
}

static mut PREV_REQUEST: pg_sys::shmem_request_hook_type = None;
static mut PREV_STARTUP: pg_sys::shmem_startup_hook_type = None;

/// Installs the shared-memory hooks; called from `_PG_init` while preloading.
pub fn install() {
    // SAFETY: _PG_init runs single-threaded in the postmaster; hook chaining as PostgreSQL
    // documents it.
    unsafe {
        PREV_REQUEST = pg_sys::shmem_request_hook;
        pg_sys::shmem_request_hook = Some(request);
        PREV_STARTUP = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(startup);
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn request() {
    unsafe {
        if let Some(prev) = PREV_REQUEST {
            prev();
        }
        pg_sys::RequestAddinShmemSpace(size());
        pg_sys::RequestNamedLWLockTranche(NAME.as_ptr(), 1);
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn startup() {
    unsafe {
        if let Some(prev) = PREV_STARTUP {
            prev();
        }
        let init_lock = &raw mut (*pg_sys::MainLWLockArray.add(21)).lock;
        pg_sys::LWLockAcquire(init_lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        let mut found = false;
        let raw = pg_sys::ShmemInitStruct(NAME.as_ptr(), size(), &mut found).cast::<u8>();
        let ptr = raw
            .add(raw.align_offset(align_of::<Shared>()))
            .cast::<Shared>();
        if !found {
            ptr.write(initial(
                &raw mut (*pg_sys::GetNamedLWLockTranche(NAME.as_ptr())).lock,
            ));
        }
        SHARED.store(ptr, Ordering::Release);
        pg_sys::LWLockRelease(init_lock);
        if !pg_sys::IsUnderPostmaster {
            // The postmaster (or a single-user backend) records the exact stop point when it
            // exits, after every process that could issue has exited.
            pg_sys::on_shmem_exit(Some(at_exit), pg_sys::Datum::from(0usize));
        }
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn at_exit(code: std::ffi::c_int, _arg: pg_sys::Datum) {
    // Only a clean exit (0) comes after every child has exited; a FATAL postmaster exit (1)
    // may leave backends issuing for a moment, and the crash-restart reset (1) is followed by
    // crash recovery anyway.
    if code == 0
        && let Some(shared) = get()
        && let Err(e) = shared.record_stop()
    {
        pgrx::warning!(
            "snowflake: {e}; the next start waits for the clock to pass the reserved mark"
        );
    }
}

/// The data directory.
pub fn data_dir() -> std::path::PathBuf {
    // SAFETY: DataDir is set before any library is loaded and never changes.
    let dir = unsafe { CStr::from_ptr(pg_sys::DataDir) };
    std::path::PathBuf::from(dir.to_string_lossy().into_owned())
}

/// The policy of the settings (the service's defaults when they are unusable).
pub fn policy() -> TrustPolicy {
    match settings::config() {
        Ok(c) => TrustPolicy {
            max_step_ms: c.max_clock_step_ms,
            trust_after_ms: c.clock_step_trust_ms,
        },
        Err(_) => TrustPolicy {
            max_step_ms: snowflake_pg_state::settings::DEFAULT_MAX_CLOCK_STEP_MS,
            trust_after_ms: snowflake_pg_state::settings::DEFAULT_CLOCK_STEP_TRUST_SECS * 1000,
        },
    }
}

/// The state at server start: the generator closed, the mark and identity from the file, the
/// clock anchored now.
fn initial(lock: *mut pg_sys::LWLock) -> Shared {
    let (wall, mono) = (clock::wall_ms(), clock::mono_ms());
    let generator = match settings::config() {
        Ok(c) => Generator::builder()
            .layout(c.layout)
            .datacenter_id(c.datacenter_id)
            .worker_id(c.worker_id)
            .issue_limit_ms(0)
            .build(),
        Err(_) => Generator::builder().issue_limit_ms(0).build(),
    }
    .unwrap_or_else(|_| {
        Generator::builder()
            .layout(Layout::TWITTER)
            .issue_limit_ms(0)
            .build()
            .expect("node 0/0 of the twitter layout is valid")
    });
    let mut load_error = Text::EMPTY;
    let (stored, mark_ms, previous) = match MarkFile::load(&data_dir()) {
        Ok(Some(file)) => (
            Some(file.identity),
            file.mark_ms,
            Some(Previous {
                trusted_ms: file.trusted_ms,
                boot_id: file.boot_id,
                boottime_ms: file.boottime_ms,
            }),
        ),
        Ok(None) => (None, 0, None),
        Err(e) => {
            load_error.set(&e.to_string());
            (None, 0, None)
        }
    };
    let trust = ClockTrust::anchor(
        wall,
        mono,
        clock::boot_id().as_deref(),
        Some(clock::boottime_ms()),
        previous.as_ref(),
        policy(),
    );
    Shared {
        generator,
        lock,
        started: AtomicBool::new(false),
        grant_deadline_ns: AtomicU64::new(0),
        mark_ms: AtomicU64::new(mark_ms),
        ceiling_ms: AtomicU64::new(u64::MAX),
        locked: UnsafeCell::new(Locked {
            stored,
            load_error,
            trust,
            step: None,
            grant_limit_ms: 0,
            lease: Text::EMPTY,
            keeper_floor_ms: 0,
            revoked: false,
            last_error: Text::EMPTY,
            reservations: 0,
        }),
    }
}

// SAFETY: the locked part is only touched under the LWLock; the rest is atomics and the
// generator, which is lock-free and made for sharing.
unsafe impl Sync for Shared {}

impl Shared {
    /// Runs `f` under the LWLock (exclusive). `f` must not raise errors.
    pub fn locked<R>(&self, f: impl FnOnce(&Self, &mut Locked) -> R) -> R {
        // SAFETY: a valid LWLock of our tranche; released below. If `f` unwinds anyway,
        // PostgreSQL's error recovery releases every LWLock.
        unsafe {
            pg_sys::LWLockAcquire(self.lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
            let out = f(self, &mut *self.locked.get());
            pg_sys::LWLockRelease(self.lock);
            out
        }
    }

    /// Like [`Shared::locked`], but only if the lock is free now.
    pub fn try_locked<R>(&self, f: impl FnOnce(&Self, &mut Locked) -> R) -> Option<R> {
        // SAFETY: as in `locked`.
        unsafe {
            if !pg_sys::LWLockConditionalAcquire(self.lock, pg_sys::LWLockMode::LW_EXCLUSIVE) {
                return None;
            }
            let out = f(self, &mut *self.locked.get());
            pg_sys::LWLockRelease(self.lock);
            Some(out)
        }
    }

    /// Whether the keeper's grant is live now.
    pub fn grant_live(&self) -> bool {
        clock::mono_ns() < self.grant_deadline_ns.load(Ordering::Acquire)
    }

    /// Applies one replayed reservation (crash recovery or a standby): raises the mark, records
    /// the identity, and writes the file. Returns the write's failure, if any.
    pub fn replay(&self, r: &snowflake_pg_state::Reservation) -> Result<(), String> {
        self.locked(|shared, locked| {
            let current = shared.mark_ms.load(Ordering::Acquire);
            let same = locked.stored == Some(r.identity);
            if same && r.mark_ms <= current {
                return Ok(());
            }
            let mark = if same {
                r.mark_ms.max(current)
            } else {
                r.mark_ms
            };
            let file = MarkFile {
                version: snowflake_pg_state::mark::VERSION,
                identity: r.identity,
                mark_ms: mark,
                trusted_ms: r.trusted_ms,
                boot_id: None,
                boottime_ms: None,
            };
            let written = file.store(&data_dir()).map_err(|e| e.to_string());
            // The mark in memory rises even if the file could not be written: this server
            // must not issue below it; the error stops recovery.
            locked.stored = Some(r.identity);
            shared.mark_ms.store(mark, Ordering::Release);
            written
        })
    }

    /// At the postmaster's exit, when no process can issue any more: lowers the file's mark to
    /// the last issued time, so a clean restart serves at once. The issue limit is closed
    /// first and the clock read after, so `max(last issued, now)` bounds every ID issued (as
    /// the service's shutdown does). The WAL keeps the reservation: a standby, and crash
    /// recovery of records after the last checkpoint, only ever raise the mark again.
    fn record_stop(&self) -> Result<(), String> {
        if !self.started.load(Ordering::Acquire) {
            // Nothing issued by this run; the floor it would have applied is the file's mark.
            return Ok(());
        }
        self.generator.set_issue_limit_ms(0);
        let now = clock::wall_ms();
        let Some(last) = self.generator.last_issued_ms() else {
            return Ok(());
        };
        let mark = self.mark_ms.load(Ordering::Acquire);
        let exact = mark.min(last.max(now));
        if exact >= mark {
            return Ok(());
        }
        // SAFETY: no other process runs; the lock is not needed but the state is behind it.
        let locked = unsafe { &mut *self.locked.get() };
        let Some(identity) = locked.stored else {
            return Ok(());
        };
        // Trusted time as of now: the next start on this boot compares its clock with it.
        locked.trust.observe(policy(), now, clock::mono_ms());
        let file = MarkFile {
            version: snowflake_pg_state::mark::VERSION,
            identity,
            mark_ms: exact,
            trusted_ms: locked.trust.trusted_ms(),
            boot_id: clock::boot_id(),
            boottime_ms: Some(clock::boottime_ms()),
        };
        file.store(&data_dir())
            .map_err(|e| format!("cannot record the stop point {exact}: {e}"))?;
        self.mark_ms.store(exact, Ordering::Release);
        Ok(())
    }

    /// Writes a new mark (WAL flushed, then the file fsynced); under the lock.
    pub fn write_mark(
        &self,
        locked: &mut Locked,
        identity: Identity,
        mark_ms: u64,
    ) -> Result<(), String> {
        let trusted_ms = locked.trust.trusted_ms();
        wal::log_reservation(&snowflake_pg_state::Reservation {
            identity,
            mark_ms,
            trusted_ms,
        });
        let file = MarkFile {
            version: snowflake_pg_state::mark::VERSION,
            identity,
            mark_ms,
            trusted_ms,
            boot_id: clock::boot_id(),
            boottime_ms: Some(clock::boottime_ms()),
        };
        match file.store(&data_dir()) {
            Ok(()) => {
                locked.stored = Some(identity);
                locked.reservations += 1;
                locked.last_error.clear();
                self.mark_ms.store(mark_ms, Ordering::Release);
                Ok(())
            }
            Err(e) => {
                let message = format!("cannot write the durable mark: {e}");
                locked.last_error.set(&message);
                Err(message)
            }
        }
    }
}

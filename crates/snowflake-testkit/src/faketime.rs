//! libfaketime for child processes: where the library is, and a clock offset driven through its
//! timestamp file (the test's own clock is never touched).

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};

/// The library the child's clock is faked with: `$SNOWFLAKE_TEST_LIBFAKETIME`, else the
/// Debian path of the multi-threaded build. Missing means the environment is broken: fail.
pub fn libfaketime() -> PathBuf {
    let path = std::env::var_os("SNOWFLAKE_TEST_LIBFAKETIME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"));
    assert!(
        path.is_file(),
        "libfaketime not found at {} (set by SNOWFLAKE_TEST_LIBFAKETIME): run the tests with \
         scripts/test, which installs the faketime and libfaketime packages and sets it",
        path.display()
    );
    path
}

/// A clock offset for child processes, through libfaketime's timestamp file.
#[derive(Debug)]
pub struct FakeClock {
    library: PathBuf,
    dir: tempfile::TempDir,
    file: PathBuf,
}

impl FakeClock {
    /// A timestamp file that says `+0` (the real time).
    pub fn new() -> FakeClock {
        let library = libfaketime();
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("faketime");
        let clock = FakeClock { library, dir, file };
        clock.set("+0");
        clock
    }

    /// The library (`LD_PRELOAD`).
    pub fn library(&self) -> &Path {
        &self.library
    }

    /// The timestamp file (`FAKETIME_TIMESTAMP_FILE`).
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// The environment of a child whose clock follows this one: the library preloaded, the
    /// timestamp file re-read at every clock read, the monotonic clock left real.
    pub fn env(&self) -> Vec<(&'static str, OsString)> {
        vec![
            ("LD_PRELOAD", self.library.clone().into_os_string()),
            (
                "FAKETIME_TIMESTAMP_FILE",
                self.file.clone().into_os_string(),
            ),
            ("FAKETIME_NO_CACHE", "1".into()),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1".into()),
        ]
    }

    /// Atomically replaces the offset (e.g. `-5`, `+0`): write a temporary file, rename it.
    pub fn set(&self, offset: &str) {
        let tmp = self.dir.path().join("faketime.tmp");
        fs::write(&tmp, format!("{offset}\n")).expect("write faketime file");
        fs::rename(&tmp, &self.file).expect("rename faketime file");
    }
}

impl Default for FakeClock {
    fn default() -> FakeClock {
        FakeClock::new()
    }
}

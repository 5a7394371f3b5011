//! Where the `snowflake` binary under test is: `$SNOWFLAKE_BIN` when set, else the one cargo
//! built in the same target directory and profile as the running test, bench or campaign.

use std::path::PathBuf;

/// The `snowflake` binary: `$SNOWFLAKE_BIN` when set (and not empty), else `snowflake` in the
/// directory of the running executable, or in its parent when that is cargo's `deps/` (where
/// test binaries live). Panics, saying how to build it, when it is not there: the system suite
/// needs `cargo build -p snowflake-cli` first (scripts/test does it).
pub fn snowflake() -> PathBuf {
    try_snowflake().unwrap_or_else(|e| panic!("{e}"))
}

/// [`snowflake`], with the missing binary as an error.
pub fn try_snowflake() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("SNOWFLAKE_BIN").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(format!("SNOWFLAKE_BIN={} is not a file", path.display()))
        };
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let mut dir = exe
        .parent()
        .ok_or_else(|| format!("{} has no directory", exe.display()))?
        .to_path_buf();
    if dir.file_name().is_some_and(|name| name == "deps") {
        dir.pop();
    }
    let path = dir.join(format!("snowflake{}", std::env::consts::EXE_SUFFIX));
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "{} is missing: build it first (`cargo build -p snowflake-cli`, with --release for a \
             release run; scripts/test does it), or set SNOWFLAKE_BIN",
            path.display()
        ))
    }
}

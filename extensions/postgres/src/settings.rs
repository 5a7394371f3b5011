//! The `snowflake.*` settings: defined as postmaster-only GUCs (a session's `SET` fails, so no
//! session can mint another pair's IDs), read once per process into a checked `Config`.

use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use snowflake_core::Layout;
use snowflake_pg_state::settings::{Config, RawSettings, SettingsError};
use std::ffi::{CStr, CString};
use std::sync::OnceLock;

static DATACENTER_ID: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
static WORKER_ID: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
static LAYOUT: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(Some(c"twitter"));
static EPOCH_MS: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
static RESERVE_MS: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(Some(c"3000"));
static MAX_CLOCK_STEP_MS: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"1000"));
static CLOCK_STEP_TRUST_SECS: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"10"));
static KEEPER: GucSetting<bool> = GucSetting::<bool>::new(false);

/// The settings as checked by the first call in this process (the postmaster's, inherited by
/// every backend it forks: postmaster-only settings cannot change without a restart).
static CHECKED: OnceLock<Result<Config, SettingsError>> = OnceLock::new();

/// Postmaster-only while preloading. A library loaded later (by `CREATE EXTENSION` or a pure
/// function, without the preload) cannot define postmaster settings (PostgreSQL ends the
/// session); it defines them as reload-only (`SIGHUP`), which a session cannot `SET` either.
fn context() -> GucContext {
    // SAFETY: a flag PostgreSQL sets while loading shared_preload_libraries.
    if unsafe { pgrx::pg_sys::process_shared_preload_libraries_in_progress } {
        GucContext::Postmaster
    } else {
        GucContext::Sighup
    }
}

fn text(name: &'static CStr, short: &'static CStr, setting: &'static GucSetting<Option<CString>>) {
    GucRegistry::define_string_guc(
        name,
        short,
        c"See docs/postgres.md. Only in postgresql.conf or on the server's command line; a change needs a restart.",
        setting,
        context(),
        GucFlags::default(),
    );
}

/// Defines the settings; called from `_PG_init`. Other `snowflake.*` names are reserved, so a
/// misspelt setting gets a warning instead of being ignored silently.
pub fn define() {
    text(
        c"snowflake.datacenter_id",
        c"The datacenter id of this database's IDs (0..=31 with the twitter layout).",
        &DATACENTER_ID,
    );
    text(
        c"snowflake.worker_id",
        c"The worker id of this database's IDs (0..=31 with the twitter layout).",
        &WORKER_ID,
    );
    text(
        c"snowflake.layout",
        c"The ID layout: twitter (the default), js-safe or custom:T,D,W,S.",
        &LAYOUT,
    );
    text(
        c"snowflake.epoch_ms",
        c"The layout's epoch in Unix milliseconds (default: the layout's own).",
        &EPOCH_MS,
    );
    text(
        c"snowflake.reserve_ms",
        c"How far ahead of the clock the durable mark reaches, 100..=60000 ms.",
        &RESERVE_MS,
    );
    text(
        c"snowflake.max_clock_step_ms",
        c"A forward clock step larger than this is not trusted until it holds, 1..=3600000 ms.",
        &MAX_CLOCK_STEP_MS,
    );
    text(
        c"snowflake.clock_step_trust_secs",
        c"How long such a step must hold before it is trusted, 1..=3600 s.",
        &CLOCK_STEP_TRUST_SECS,
    );
    GucRegistry::define_bool_guc(
        c"snowflake.keeper",
        c"The pair is leased in a fleet by snowflake pg-keeper: IDs are issued only under its live grant.",
        c"See docs/postgres.md, fleet mode.",
        &KEEPER,
        context(),
        GucFlags::default(),
    );
    // SAFETY: a valid C string; PostgreSQL copies it.
    unsafe { pgrx::pg_sys::MarkGUCPrefixReserved(c"snowflake".as_ptr()) };
}

fn get(setting: &GucSetting<Option<CString>>) -> Option<String> {
    setting.get().map(|c| c.to_string_lossy().into_owned())
}

fn raw() -> RawSettings {
    RawSettings {
        datacenter_id: get(&DATACENTER_ID),
        worker_id: get(&WORKER_ID),
        layout: get(&LAYOUT),
        epoch_ms: get(&EPOCH_MS),
        reserve_ms: get(&RESERVE_MS),
        max_clock_step_ms: get(&MAX_CLOCK_STEP_MS),
        clock_step_trust_secs: get(&CLOCK_STEP_TRUST_SECS),
        keeper: KEEPER.get(),
    }
}

/// The checked settings (the first call checks them; every later call returns the same).
pub fn config() -> &'static Result<Config, SettingsError> {
    CHECKED.get_or_init(|| raw().check(crate::clock::wall_ms()))
}

/// The layout alone (for the pure functions), whether or not the pair is set.
pub fn layout() -> Result<Layout, SettingsError> {
    match config() {
        Ok(config) => Ok(config.layout),
        Err(_) => raw().layout(crate::clock::wall_ms()),
    }
}

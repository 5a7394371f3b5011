//! The durable mark in the WAL: a custom resource manager whose one record says "the mark is
//! now M", written and flushed before any ID under M is returned, and replayed by crash
//! recovery and by every standby (which must preload the library too).

use crate::shared;
use pgrx::pg_sys;
use snowflake_pg_state::Reservation;
use snowflake_pg_state::record::LEN;
use std::ffi::{CStr, c_char};

/// Our resource manager id, in PostgreSQL's custom range (128..=255). It must be the same on
/// every server that replays this WAL; extensions announce theirs on the PostgreSQL wiki's
/// "CustomWALResourceManagers" page.
pub const RMGR_ID: u8 = 147;
/// The record kind: a reservation (the high four bits of `xl_info` are the rmgr's).
const XLOG_SNOWFLAKE_RESERVE: u8 = 0x10;
/// `XLR_INFO_MASK`: the low four bits belong to the WAL machinery.
const XLR_INFO_MASK: u8 = 0x0F;

static mut RMGR: pg_sys::RmgrData = pg_sys::RmgrData {
    rm_name: c"snowflake".as_ptr(),
    rm_redo: Some(redo),
    rm_desc: Some(desc),
    rm_identify: Some(identify),
    rm_startup: None,
    rm_cleanup: None,
    rm_mask: None,
    rm_decode: None,
};

/// Registers the resource manager; only possible while preloading.
pub fn register() {
    // SAFETY: called from _PG_init during shared_preload_libraries; RMGR lives for ever.
    unsafe { pg_sys::RegisterCustomRmgr(RMGR_ID, &raw mut RMGR) };
}

/// Writes a reservation to the WAL and flushes it (whatever `synchronous_commit` says, and
/// whether or not the caller's transaction commits).
pub fn log_reservation(r: &Reservation) {
    let bytes = r.encode();
    // SAFETY: the insertion protocol of xloginsert.c: begin, register the data (copied before
    // XLogInsert returns), insert; then flush up to the record's end.
    unsafe {
        pg_sys::XLogBeginInsert();
        pg_sys::XLogRegisterData(bytes.as_ptr() as *mut c_char, LEN as _);
        let end = pg_sys::XLogInsert(RMGR_ID, XLOG_SNOWFLAKE_RESERVE);
        pg_sys::XLogFlush(end);
    }
}

/// The record's main data.
///
/// # Safety
/// `record` is the reader state PostgreSQL passes to a resource manager.
unsafe fn data<'a>(record: *mut pg_sys::XLogReaderState) -> (u8, &'a [u8]) {
    unsafe {
        let decoded = (*record).record;
        let info = (*decoded).header.xl_info & !XLR_INFO_MASK;
        let len = (*decoded).main_data_len as usize;
        let ptr = (*decoded).main_data as *const u8;
        let bytes = if len == 0 || ptr.is_null() {
            &[][..]
        } else {
            std::slice::from_raw_parts(ptr, len)
        };
        (info, bytes)
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn redo(record: *mut pg_sys::XLogReaderState) {
    let (info, bytes) = unsafe { data(record) };
    if info != XLOG_SNOWFLAKE_RESERVE {
        pgrx::error!(
            "snowflake wal record of unknown kind {info:#x}: this server's snowflake extension is older than the one that wrote it"
        );
    }
    let reservation = match Reservation::decode(bytes) {
        Ok(r) => r,
        Err(e) => pgrx::error!("{e}"),
    };
    let Some(shared) = shared::get() else {
        // Only reachable if the library is loaded without preloading, which cannot register
        // the resource manager in the first place.
        pgrx::error!("snowflake wal record replayed without the library preloaded");
    };
    if let Err(e) = shared.replay(&reservation) {
        pgrx::error!(
            "cannot record the replayed snowflake mark {}: {e}",
            reservation.mark_ms
        );
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn desc(buf: pg_sys::StringInfo, record: *mut pg_sys::XLogReaderState) {
    let (_, bytes) = unsafe { data(record) };
    let text = match Reservation::decode(bytes) {
        Ok(r) => format!("mark {} for {}", r.mark_ms, r.identity),
        Err(e) => e,
    };
    let text = std::ffi::CString::new(text).unwrap_or_default();
    unsafe { pg_sys::appendStringInfoString(buf, text.as_ptr()) };
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn identify(info: u8) -> *const c_char {
    const RESERVE: &CStr = c"RESERVE";
    if info & !XLR_INFO_MASK == XLOG_SNOWFLAKE_RESERVE {
        RESERVE.as_ptr()
    } else {
        std::ptr::null()
    }
}

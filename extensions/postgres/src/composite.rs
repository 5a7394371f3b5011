//! The extension's composite result types (`snowflake_decoded`, `snowflake_status`), found in
//! the extension's own schema, never through the caller's `search_path` (a restore runs with
//! `search_path = ''`; the extension may live in a schema the caller does not search).

use crate::errors::OrRaisePgrx;
use pgrx::heap_tuple::PgHeapTuple;
use pgrx::pgbox::AllocatedByRust;
use pgrx::prelude::*;
use pgrx::tupdesc::PgTupleDesc;
use std::cell::RefCell;

thread_local! {
    /// (extension oid, type name, type oid) already looked up by this backend.
    static FOUND: RefCell<Vec<(pg_sys::Oid, &'static str, pg_sys::Oid)>> = const { RefCell::new(Vec::new()) };
}

fn type_oid(name: &'static str) -> pg_sys::Oid {
    // SAFETY: a catalog lookup by name; `true`: InvalidOid when absent.
    let ext = unsafe { pg_sys::get_extension_oid(c"snowflake".as_ptr(), true) };
    if let Some(oid) = FOUND.with(|f| {
        f.borrow()
            .iter()
            .find(|(e, n, _)| *e == ext && *n == name)
            .map(|(_, _, oid)| *oid)
    }) {
        return oid;
    }
    let query = format!(
        "SELECT quote_ident(n.nspname) FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.oid = {}",
        u32::from(ext)
    );
    // A read-only query (`select`, not `update`): it must work on a standby and in a parallel
    // worker, where no transaction id can be assigned.
    let schema = Spi::connect(|client| {
        client
            .select(&query, Some(1), &[])?
            .first()
            .get_one::<String>()
    })
    .or_raise_pgrx();
    let qualified = match schema {
        Some(schema) => format!("{schema}.{name}"),
        None => name.to_owned(),
    };
    let oid = PgTupleDesc::for_composite_type(&qualified)
        .map(|desc| desc.oid())
        .ok_or_else(|| format!("type {qualified} does not exist: reinstall the extension"))
        .or_raise_pgrx();
    FOUND.with(|f| f.borrow_mut().push((ext, name, oid)));
    oid
}

/// A new row of the extension's composite type `name`.
pub fn row(name: &'static str) -> PgHeapTuple<'static, AllocatedByRust> {
    PgHeapTuple::new_composite_type_by_oid(type_oid(name)).or_raise_pgrx()
}

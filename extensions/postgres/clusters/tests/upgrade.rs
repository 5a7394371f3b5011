//! `ALTER EXTENSION snowflake UPDATE`: from every checked-in version, the update scripts lead to
//! the same catalog as a fresh install of the current version.

use crate::started;
use std::path::Path;

/// The extension's functions (signature, result, volatility, parallel safety, privileges) and
/// types (columns), one line each, sorted.
const CATALOG: &str = r#"
SELECT string_agg(x, E'\n' ORDER BY x) FROM (
  SELECT p.oid::regprocedure::text || ' -> ' || pg_get_function_result(p.oid) || ' '
         || p.provolatile::text || p.proparallel::text || p.proisstrict::text || ' '
         || coalesce(array_to_string(p.proacl, ','), 'default') AS x
  FROM pg_proc p
  JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'snowflake'
  UNION ALL
  SELECT t.typname::text || ' (' || string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ', ' ORDER BY a.attnum) || ')'
  FROM pg_type t
  JOIN pg_depend d ON d.classid = 'pg_type'::regclass AND d.objid = t.oid AND d.deptype = 'e'
  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'snowflake'
  JOIN pg_attribute a ON a.attrelid = t.typrelid AND a.attnum > 0
  GROUP BY t.typname
) c"#;

/// The versions whose install scripts are checked in (`sql/snowflake--V.sql`).
fn released() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sql");
    let mut versions: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            let version = name.strip_prefix("snowflake--")?.strip_suffix(".sql")?;
            (!version.contains("--")).then(|| version.to_owned())
        })
        .collect();
    versions.sort();
    versions
}

#[test]
fn every_released_version_updates_to_a_fresh_install() {
    let current = env!("CARGO_PKG_VERSION");
    let versions = released();
    assert!(
        versions.iter().any(|v| v == current),
        "sql/snowflake--{current}.sql is missing: check in the current version's install script"
    );
    let pg = started(&[]);
    assert_eq!(
        pg.sql("SELECT extversion FROM pg_extension WHERE extname = 'snowflake'"),
        current
    );
    let fresh = pg.sql(CATALOG);
    assert!(
        fresh.contains("snowflake_nextval() -> bigint vutrue"),
        "{fresh}"
    );
    assert!(
        fresh.contains("snowflake_keeper_grant(integer,integer,bigint,integer,text,bigint)"),
        "{fresh}"
    );
    for version in versions.iter().filter(|v| *v != current) {
        let db = format!("update_from_{}", version.replace('.', "_"));
        pg.sql(&format!("CREATE DATABASE {db}"));
        pg.sql_in(
            &db,
            &format!("CREATE EXTENSION snowflake VERSION '{version}'"),
        );
        pg.sql_in(&db, "ALTER EXTENSION snowflake UPDATE");
        assert_eq!(pg.sql_in(&db, CATALOG), fresh, "updated from {version}");
    }
}

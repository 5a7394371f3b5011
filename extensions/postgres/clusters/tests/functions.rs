//! The pure functions: decode, encode, time, and the ID range of a moment, against the CLI and
//! the layout's bounds.

use crate::{sqlstate, started};
use snowflake_pg_tests::{Cluster, snowflake_cli};
use std::process::Command;

#[test]
fn decode_gives_the_worked_example_and_bad_input_is_refused() {
    let pg = started(&[]);
    assert_eq!(
        pg.sql("SELECT timestamp_ms, datacenter_id, worker_id, sequence FROM snowflake_decode(1724551110457221119)"),
        "1700000000000|7|13|4095"
    );
    assert_eq!(
        pg.sql("SET timezone = 'UTC'; SELECT snowflake_time(1724551110457221119), (snowflake_decode(1724551110457221119)).time"),
        "2023-11-14 22:13:20+00|2023-11-14 22:13:20+00"
    );
    assert_eq!(
        pg.sql("SELECT snowflake_encode(1700000000000, 7, 13, 4095)"),
        "1724551110457221119"
    );
    let e = pg.sql_error("SELECT snowflake_decode(-1)");
    assert_eq!(sqlstate(&e), "22023");
    assert!(
        e.contains("invalid snowflake id: expected 0..=9223372036854775807, found -1"),
        "{e}"
    );
    let e = pg.sql_error("SELECT snowflake_encode(1700000000000, 32, 0, 0)");
    assert!(
        e.contains("invalid datacenter id: expected 0..=31, found 32"),
        "{e}"
    );
    let e = pg.sql_error("SELECT snowflake_encode(1700000000000, 0, -1, 0)");
    assert!(
        e.contains("invalid worker id: expected 0..=31, found -1"),
        "{e}"
    );
    let e = pg.sql_error("SELECT snowflake_encode(1700000000000, 0, 0, 4096)");
    assert!(
        e.contains("invalid sequence: expected 0..=4095, found 4096"),
        "{e}"
    );
    let e = pg.sql_error("SELECT snowflake_encode(1000, 0, 0, 0)");
    assert!(
        e.contains(
            "invalid timestamp (unix ms): expected 1288834974657..=3487858230208, found 1000"
        ),
        "{e}"
    );
    let e = pg.sql_error("SELECT snowflake_min_id('infinity')");
    assert!(e.contains("expected a finite timestamptz"), "{e}");
    let e = pg.sql_error("SELECT snowflake_max_id('2000-01-01')");
    assert_eq!(sqlstate(&e), "22023");
    assert!(e.contains("found 946684800000"), "{e}");
}

#[test]
fn encode_decode_round_trip_100000_random_parts_matching_the_cli() {
    let pg = started(&[]);
    pg.sql(
        "CREATE TABLE parts AS
           SELECT n,
                  1288834974657 + (random() * 2199023255551)::bigint AS ts,
                  (random() * 31)::int AS dc, (random() * 31)::int AS w, (random() * 4095)::int AS s
           FROM generate_series(1, 100000) n;
         ALTER TABLE parts ADD COLUMN id bigint;
         UPDATE parts SET id = snowflake_encode(ts, dc, w, s)",
    );
    // SQL's own round trip.
    assert_eq!(
        pg.sql(
            "SELECT count(*) FROM parts p, snowflake_decode(p.id) d
             WHERE (d.timestamp_ms, d.datacenter_id, d.worker_id, d.sequence) = (p.ts, p.dc, p.w, p.s)"
        ),
        "100000"
    );
    // The CLI decodes the same IDs to the same parts.
    let rows =
        pg.sql("SELECT id || ' ' || ts || ' ' || dc || ' ' || w || ' ' || s FROM parts ORDER BY n");
    let rows: Vec<Vec<u64>> = rows
        .lines()
        .map(|l| l.split(' ').map(|v| v.parse().unwrap()).collect())
        .collect();
    assert_eq!(rows.len(), 100_000);
    for chunk in rows.chunks(10_000) {
        let out = Command::new(snowflake_cli())
            .arg("decode")
            .args(chunk.iter().map(|r| r[0].to_string()))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), chunk.len());
        for (line, row) in lines.iter().zip(chunk) {
            let expect = format!("{} timestamp_ms={} time=", row[0], row[1]);
            assert!(line.starts_with(&expect), "{line} vs {row:?}");
            assert!(
                line.ends_with(&format!(
                    "datacenter_id={} worker_id={} sequence={}",
                    row[2], row[3], row[4]
                )),
                "{line} vs {row:?}"
            );
        }
    }
}

#[test]
fn min_and_max_id_bracket_every_id_of_their_millisecond() {
    let pg = started(&[]);
    // 20,000 random moments; IDs of random parts at each moment's millisecond lie in
    // [min_id, max_id], and the neighbouring milliseconds' extremes lie outside.
    let bad = pg.sql(
        "WITH t AS (
           SELECT to_timestamp((1288834974657 + 1 + (random() * 2199023255549)::bigint) / 1000.0)
                  + (random() * 999)::int * interval '1 microsecond' AS t
           FROM generate_series(1, 20000)),
         m AS (SELECT t, (floor(extract(epoch FROM t) * 1000))::bigint AS ms FROM t)
         SELECT count(*) FROM m
         WHERE NOT (snowflake_min_id(t) <= snowflake_encode(ms, (random()*31)::int, (random()*31)::int, (random()*4095)::int)
                AND snowflake_encode(ms, (random()*31)::int, (random()*31)::int, (random()*4095)::int) <= snowflake_max_id(t)
                AND snowflake_encode(ms, 0, 0, 0) = snowflake_min_id(t)
                AND snowflake_encode(ms, 31, 31, 4095) = snowflake_max_id(t)
                AND snowflake_encode(ms - 1, 31, 31, 4095) < snowflake_min_id(t)
                AND snowflake_encode(ms + 1, 0, 0, 0) > snowflake_max_id(t))",
    );
    assert_eq!(bad, "0");
}

#[test]
fn the_composite_results_do_not_depend_on_the_search_path() {
    // As pg_dump's restore runs (search_path = ''), and with the extension in its own schema.
    let mut pg = Cluster::new(crate::PRELOADED);
    pg.start();
    pg.sql("CREATE SCHEMA ids; CREATE EXTENSION snowflake SCHEMA ids");
    assert_eq!(
        pg.sql(
            "SET search_path = ''; SELECT (ids.snowflake_decode(1724551110457221119)).worker_id"
        ),
        "13"
    );
    assert_eq!(
        pg.sql("SET search_path = ''; SELECT datacenter_id FROM ids.snowflake_status()"),
        "7"
    );
}

#[test]
fn the_pure_functions_work_without_the_preload_and_nextval_names_the_fix() {
    let mut pg = Cluster::new(&[]);
    pg.start();
    pg.sql("CREATE EXTENSION snowflake");
    assert_eq!(
        pg.sql("SELECT (snowflake_decode(1724551110457221119)).worker_id"),
        "13"
    );
    let e = pg.sql_error("SELECT snowflake_nextval()");
    assert_eq!(sqlstate(&e), "55000");
    assert!(e.contains("needs the snowflake library preloaded"), "{e}");
    assert!(
        e.contains("add snowflake to shared_preload_libraries"),
        "{e}"
    );
    assert_eq!(pg.sql("SELECT preloaded FROM snowflake_status()"), "f");
}

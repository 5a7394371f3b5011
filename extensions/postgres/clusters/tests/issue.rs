//! `snowflake_nextval()` under load: a million rows with the default, and eight pgbench clients
//! inserting at once.

use crate::started;
use snowflake_pg_tests::snowflake_cli;
use std::process::Command;

/// `snowflake audit --json` over a file of IDs: (ids, unique, duplicates, invalid).
fn audit(path: &std::path::Path) -> serde_like::Audit {
    let out = Command::new(snowflake_cli())
        .args(["audit", "--json"])
        .arg(path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "snowflake audit failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_like::parse(&text)
}

/// The few fields of `audit --json` the tests read (no JSON library needed for four numbers).
mod serde_like {
    #[derive(Debug, PartialEq, Eq)]
    pub struct Audit {
        pub ids: u64,
        pub unique: u64,
        pub duplicates: u64,
        pub invalid: u64,
    }

    fn field(text: &str, name: &str) -> u64 {
        let key = format!("\"{name}\":");
        let at = text
            .find(&key)
            .unwrap_or_else(|| panic!("no {name} in {text}"))
            + key.len();
        text[at..]
            .trim_start()
            .chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse()
            .unwrap()
    }

    pub fn parse(text: &str) -> Audit {
        Audit {
            ids: field(text, "ids"),
            unique: field(text, "unique"),
            duplicates: field(text, "duplicates"),
            invalid: field(text, "invalid"),
        }
    }
}

#[test]
fn a_million_rows_get_distinct_ids() {
    let pg = started(&[]);
    pg.sql(
        "CREATE TABLE events (id bigint PRIMARY KEY DEFAULT snowflake_nextval(), n int NOT NULL);
         INSERT INTO events (n) SELECT g FROM generate_series(1, 1000000) g",
    );
    let file = pg.scratch().join("ids.txt");
    pg.copy_out("SELECT id FROM events", &file);
    let report = audit(&file);
    assert_eq!(
        report,
        serde_like::Audit {
            ids: 1_000_000,
            unique: 1_000_000,
            duplicates: 0,
            invalid: 0
        }
    );
    // In one statement, rows are numbered in the order their IDs were drawn.
    assert_eq!(
        pg.sql("SELECT count(*) FROM (SELECT id < lead(id) OVER (ORDER BY n) AS up FROM events) x WHERE NOT up"),
        "0"
    );
    // Every ID decodes to this database's pair.
    assert_eq!(
        pg.sql("SELECT count(*) FROM events, snowflake_decode(id) d WHERE (d.datacenter_id, d.worker_id) <> (7, 13)"),
        "0"
    );
}

#[test]
fn a_one_day_range_on_the_key_of_a_million_rows_uses_the_index() {
    let pg = started(&[]);
    // A million IDs over the last 1,000 days (about a thousand a day), as a table that has
    // been receiving rows for years looks.
    pg.sql(
        "CREATE TABLE history (id bigint PRIMARY KEY, n int NOT NULL);
         INSERT INTO history
           SELECT snowflake_encode((extract(epoch FROM now()) * 1000)::bigint - g * 86400::bigint, 7, 13, 0), g
           FROM generate_series(1, 1000000) g;
         ANALYZE history",
    );
    for range in [
        "snowflake_min_id(now() - interval '1 day') AND snowflake_max_id(now())",
        "snowflake_min_id('2026-06-01') AND snowflake_max_id('2026-06-02')",
    ] {
        let plan = pg.sql(&format!(
            "EXPLAIN SELECT * FROM history WHERE id BETWEEN {range}"
        ));
        assert!(
            plan.contains("Index Scan using history_pkey")
                || plan.contains("Bitmap Index Scan on history_pkey"),
            "{plan}"
        );
        assert!(
            plan.contains("Index Cond: ((id >= snowflake_min_id("),
            "{plan}"
        );
    }
    // The range holds exactly the last day's rows.
    assert_eq!(
        pg.sql(
            "SELECT count(*) FROM history
             WHERE id BETWEEN snowflake_min_id(now() - interval '1 day') AND snowflake_max_id(now())"
        ),
        pg.sql("SELECT count(*) FROM history WHERE snowflake_time(id) >= now() - interval '1 day'")
    );
}

#[test]
fn eight_pgbench_clients_never_share_an_id_and_each_sees_its_ids_increase() {
    let pg = started(&[]);
    pg.sql(
        "CREATE TABLE bench (id bigint DEFAULT snowflake_nextval(), pid int DEFAULT pg_backend_pid(), n bigserial)",
    );
    let script = pg.write_file("insert.sql", "INSERT INTO bench DEFAULT VALUES;\n");
    let out = pg.pgbench(&[
        "-c",
        "8",
        "-j",
        "2",
        "-T",
        "10",
        "-f",
        script.to_str().unwrap(),
    ]);
    assert!(out.contains("number of failed transactions: 0"), "{out}");
    let rows = pg.int("SELECT count(*) FROM bench");
    assert!(rows > 1000, "only {rows} rows in 10 s");
    let file = pg.scratch().join("ids.txt");
    pg.copy_out("SELECT id FROM bench", &file);
    let report = audit(&file);
    assert_eq!(
        (report.ids, report.duplicates, report.invalid),
        (rows as u64, 0, 0)
    );
    assert_eq!(pg.sql("SELECT count(DISTINCT pid) FROM bench"), "8");
    // Within each backend, in the order it inserted (its sequence numbers), IDs increase.
    assert_eq!(
        pg.sql(
            "SELECT count(*) FROM (SELECT id < lead(id) OVER (PARTITION BY pid ORDER BY n) AS up FROM bench) x
             WHERE NOT up"
        ),
        "0"
    );
}

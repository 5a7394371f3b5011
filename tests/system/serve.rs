//! The real `snowflake serve` binary, run as an operator would (SPEC §3, §5): every route, bad
//! input, concurrency, signals, configuration and start-up failures. The clock moving (driven
//! by libfaketime in the child only) and restarts: [`crate::serve_clock`].

use crate::support::{Response, Serve, ServeProcess, get, request, state_file};
use crate::support::{assert_exit, now_ms, temp_dir, timestamp_ms};
use std::collections::HashSet;
use std::net::TcpListener;
use std::path::Path;

const EPOCH_MS: u64 = 1_288_834_974_657;

/// Checks a 503 refusal: JSON error, a `Retry-After` of whole seconds (at least 1); returns
/// the message.
pub(crate) fn unavailable(response: &Response) -> String {
    assert_eq!(response.status, 503, "{response:?}");
    let retry_after = response
        .header("retry-after")
        .unwrap_or_else(|| panic!("503 without Retry-After: {response:?}"));
    let secs: u64 = retry_after
        .parse()
        .unwrap_or_else(|_| panic!("Retry-After {retry_after:?} is not whole seconds"));
    assert!(secs >= 1, "Retry-After {secs}");
    response.error()
}

/// A 400 whose JSON error contains every needle.
fn bad_request(server: &ServeProcess, path: &str, needles: &[&str]) {
    let response = server.get(path);
    assert_eq!(response.status, 400, "GET {path}: {response:?}");
    let message = response.error();
    for needle in needles {
        assert!(
            message.contains(needle),
            "GET {path}: {message:?} lacks {needle:?}"
        );
    }
}

/// The number after `label` in `text`, e.g. `("4985 ms behind", " ms behind")` → 4985.
pub(crate) fn number_before(text: &str, label: &str) -> u64 {
    let end = text
        .find(label)
        .unwrap_or_else(|| panic!("{text:?} lacks {label:?}"));
    let start = text[..end]
        .rfind(|c: char| !c.is_ascii_digit())
        .map_or(0, |i| i + 1);
    text[start..end]
        .parse()
        .unwrap_or_else(|_| panic!("no number before {label:?} in {text:?}"))
}

/// The number right after `label` in `text`.
pub(crate) fn number_after(text: &str, label: &str) -> u64 {
    let start = text
        .find(label)
        .unwrap_or_else(|| panic!("{text:?} lacks {label:?}"))
        + label.len();
    let digits: String = text[start..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("no number after {label:?} in {text:?}"))
}

pub(crate) fn fetch_ids(server: &ServeProcess, rounds: usize) -> Vec<u64> {
    let mut ids = Vec::new();
    for _ in 0..rounds {
        ids.extend(server.get("/v1/id").ids());
        ids.extend(server.get("/v1/ids?count=50").ids());
    }
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids not increasing");
    ids
}

// 1. Every route.

#[test]
fn every_endpoint_answers_as_specified() {
    let dir = temp_dir();
    let server = Serve::new(dir.path())
        .args(["--datacenter-id", "3", "--worker-id", "5"])
        .start();
    let started_ms = now_ms();

    // GET /v1/id: {"id":"…"}, the ID a JSON string.
    let response = server.get("/v1/id");
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(response.header("content-type"), Some("application/json"));
    let json = response.json();
    assert_eq!(json.as_object().unwrap().len(), 1, "{json}");
    assert!(json["id"].is_string(), "{json}");
    let first = response.ids()[0];
    assert_eq!(((first >> 17) & 0x1F, (first >> 12) & 0x1F), (3, 5));
    assert!(first >> 63 == 0);
    let ts = timestamp_ms(first);
    assert!(
        ts.abs_diff(started_ms) < 60_000,
        "id timestamp {ts} vs now {started_ms}"
    );

    // With Accept: text/plain, the bare decimal number.
    let text = request(server.addr(), "GET", "/v1/id", &[("Accept", "text/plain")]);
    assert_eq!(text.status, 200, "{text:?}");
    assert!(
        text.header("content-type")
            .is_some_and(|ct| ct.starts_with("text/plain")),
        "{text:?}"
    );
    assert!(
        !text.body.is_empty() && text.body.bytes().all(|b| b.is_ascii_digit()),
        "{:?}",
        text.body
    );
    let second: u64 = text.body.parse().unwrap();
    assert!(second > first);

    // GET /v1/ids?count=N: {"ids":[…]}, strings, increasing, N of them; the limit is inclusive.
    let response = server.get("/v1/ids?count=5");
    assert_eq!(response.header("content-type"), Some("application/json"));
    let json = response.json();
    assert_eq!(json.as_object().unwrap().len(), 1, "{json}");
    assert!(
        json["ids"]
            .as_array()
            .unwrap()
            .iter()
            .all(|v| v.is_string())
    );
    let five = response.ids();
    assert_eq!(five.len(), 5);
    assert!(five[0] > second && five.windows(2).all(|w| w[0] < w[1]));
    let many = server.get("/v1/ids?count=100000").ids();
    assert_eq!(many.len(), 100_000);
    assert!(many[0] > five[4] && many.windows(2).all(|w| w[0] < w[1]));

    // GET /v1/decode/{id}: exactly `snowflake decode --json`.
    let response = server.get("/v1/decode/1724551110457221119");
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(response.header("content-type"), Some("application/json"));
    assert_eq!(
        response.body,
        "{\"id\":\"1724551110457221119\",\"timestamp_ms\":1700000000000,\
         \"time\":\"2023-11-14T22:13:20.000Z\",\"datacenter_id\":7,\"worker_id\":13,\"sequence\":4095}"
    );
    let decoded = server.get(&format!("/v1/decode/{first}")).json();
    assert_eq!(decoded["id"], first.to_string());
    assert_eq!(decoded["timestamp_ms"], ts);
    assert_eq!(decoded["datacenter_id"], 3);
    assert_eq!(decoded["worker_id"], 5);
    let edge = server.get("/v1/decode/9223372036854775807").json();
    assert_eq!(edge["time"], "2080-07-10T17:30:30.208Z");
    assert_eq!(server.get("/v1/decode/0").json()["timestamp_ms"], EPOCH_MS);

    // GET /v1/info.
    let response = server.get("/v1/info");
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(response.header("content-type"), Some("application/json"));
    let info = response.json();
    assert_eq!(info["datacenter_id"], 3, "{info}");
    assert_eq!(info["worker_id"], 5, "{info}");
    assert_eq!(info["epoch_ms"], EPOCH_MS, "{info}");
    let clock = info["timestamp_ms"]
        .as_u64()
        .expect("timestamp_ms a number");
    assert!(clock.abs_diff(now_ms()) < 60_000, "{info}");
    assert!(clock >= timestamp_ms(many[99_999]), "{info}");

    // Health and readiness.
    let health = server.get("/healthz");
    assert_eq!(health.status, 200, "{health:?}");
    let ready = server.get("/readyz");
    assert_eq!(ready.status, 200, "{ready:?}");

    // Metrics in the Prometheus text format (OpenMetrics is its superset), counting our IDs.
    let metrics = server.get("/metrics");
    assert_eq!(metrics.status, 200, "{metrics:?}");
    let content_type = metrics.header("content-type").unwrap_or_default();
    assert!(
        content_type.starts_with("text/plain")
            || content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    assert!(metrics.body.contains("# TYPE "), "{}", metrics.body);
    let issued = 1 + 1 + 5 + 100_000;
    assert!(
        metrics
            .body
            .lines()
            .any(|l| l == format!("snowflake_ids_issued_total{{protocol=\"http\"}} {issued}")),
        "{}",
        metrics.body
    );

    let finished = server.stop_with("TERM");
    assert_exit(&finished, 0);
}

// 2. Bad input.

#[test]
fn every_bad_input_gets_a_json_error_naming_the_problem() {
    let dir = temp_dir();
    let server = Serve::new(dir.path()).args(["--max-batch", "1000"]).start();
    let range = "expected 1..=1000";
    bad_request(&server, "/v1/ids?count=0", &["count", range, "found 0"]);
    bad_request(&server, "/v1/ids?count=-3", &["count", range, "found -3"]);
    bad_request(&server, "/v1/ids?count=ten", &["count", "ten"]);
    bad_request(&server, "/v1/ids?count=", &["count"]);
    bad_request(&server, "/v1/ids?count=1.5", &["count", "1.5"]);
    bad_request(
        &server,
        "/v1/ids?count=1001",
        &["count", range, "found 1001"],
    );
    bad_request(
        &server,
        "/v1/ids?count=99999999999999999999999",
        &["count", range],
    );
    bad_request(&server, "/v1/ids", &["missing", "count"]);
    bad_request(&server, "/v1/ids?number=3", &["missing", "count"]);

    let id_range = "expected 0..=9223372036854775807";
    bad_request(&server, "/v1/decode/-1", &["id", id_range, "found -1"]);
    bad_request(
        &server,
        "/v1/decode/9223372036854775808",
        &["id", id_range, "found 9223372036854775808"],
    );
    bad_request(
        &server,
        "/v1/decode/99999999999999999999999999",
        &["id", id_range],
    );
    bad_request(&server, "/v1/decode/abc", &["id", "abc"]);
    bad_request(&server, "/v1/decode/12x", &["id", "12x"]);

    let response = server.get("/v2/nothing");
    assert_eq!(response.status, 404, "{response:?}");
    assert!(response.error().contains("/v2/nothing"), "{response:?}");
    let response = server.get("/v1");
    assert_eq!(response.status, 404, "{response:?}");
    response.error();
    // `/` is the status page (HTML); other methods on it are refused like everywhere.
    let page = server.get("/");
    assert_eq!(page.status, 200, "{page:?}");
    assert!(page.body.starts_with("<!DOCTYPE html>"), "{page:?}");
    let response = request(server.addr(), "POST", "/", &[]);
    assert_eq!(response.status, 405, "{response:?}");
    response.error();

    for path in ["/v1/id", "/v1/ids?count=3"] {
        let response = request(server.addr(), "POST", path, &[]);
        assert_eq!(response.status, 405, "POST {path}: {response:?}");
        assert!(response.error().contains("POST"), "{response:?}");
    }
    let response = request(server.addr(), "DELETE", "/v1/info", &[]);
    assert_eq!(response.status, 405, "{response:?}");
    response.error();

    // Still serving, and bad requests used up nothing.
    assert_eq!(server.get("/v1/ids?count=1000").ids().len(), 1000);
    let finished = server.stop_with("TERM");
    assert_exit(&finished, 0);
}

// 3. Concurrency.

#[test]
fn parallel_clients_never_see_a_duplicate() {
    const CLIENTS: usize = 8;
    const REQUESTS: usize = 200;
    let dir = temp_dir();
    let server = Serve::new(dir.path()).start();
    let addr = server.addr();
    let per_client: Vec<Vec<u64>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..CLIENTS)
            .map(|_| {
                scope.spawn(move || {
                    let mut ids = Vec::with_capacity(REQUESTS * 51);
                    for i in 0..REQUESTS {
                        let path = if i % 2 == 0 {
                            "/v1/id"
                        } else {
                            "/v1/ids?count=100"
                        };
                        ids.extend(get(addr, path).ids());
                    }
                    ids
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut all = HashSet::new();
    for (client, ids) in per_client.iter().enumerate() {
        assert_eq!(ids.len(), REQUESTS / 2 * 101, "client {client}");
        if let Some(w) = ids.windows(2).find(|w| w[0] >= w[1]) {
            panic!("client {client}: {} then {}", w[0], w[1]);
        }
        for &id in ids {
            assert!(all.insert(id), "duplicate id {id}");
        }
    }
    assert_eq!(all.len(), CLIENTS * REQUESTS / 2 * 101);
    let finished = server.stop_with("TERM");
    assert_exit(&finished, 0);
}

// 4. Signals.

fn graceful_stop_on(signal: &str) {
    let dir = temp_dir();
    let server = Serve::new(dir.path()).start();
    let ids = fetch_ids(&server, 3);
    let last = *ids.last().unwrap();
    let finished = server.stop_with(signal);
    assert_exit(&finished, 0);
    assert!(finished.stdout.is_empty(), "stdout: {:?}", finished.stdout);
    let mark = state_file(dir.path(), 0, 0);
    assert_eq!(mark["kind"], "shutdown", "{mark}");
    let high_water = mark["high_water_ms"].as_u64().unwrap();
    assert!(high_water >= timestamp_ms(last), "{mark} vs last id {last}");
    assert!(high_water <= now_ms() + 1000, "{mark}");

    // The exact point was recorded, so a normal restart serves at once (SPEC §3).
    let again = Serve::new(dir.path()).start();
    let first = again.get("/v1/id");
    assert_eq!(first.status, 200, "after a graceful stop: {first:?}");
    assert!(first.ids()[0] > last);
    let finished = again.stop_with(signal);
    assert_exit(&finished, 0);
}

#[test]
fn sigterm_stops_gracefully_and_records_the_shutdown() {
    graceful_stop_on("TERM");
}

#[test]
fn sigint_stops_gracefully_and_records_the_shutdown() {
    graceful_stop_on("INT");
}

// 5. Configuration.

/// Exit 2, nothing on stdout, one `error:` line on stderr with every needle, and nothing done:
/// no listener (it never logged one, and an occupied address is not what it complains
/// about), no state directory created.
fn rejected_config(serve: Serve, state_dir: &Path, needles: &[&str]) {
    let finished = serve.run_to_exit();
    assert_exit(&finished, 2);
    assert!(finished.stdout.is_empty(), "stdout: {:?}", finished.stdout);
    let stderr = &finished.stderr;
    assert_eq!(stderr.lines().count(), 1, "not one line: {stderr:?}");
    assert!(stderr.starts_with("error: "), "{stderr:?}");
    for needle in needles {
        assert!(stderr.contains(needle), "{stderr:?} lacks {needle:?}");
    }
    assert!(!stderr.contains("listening"), "{stderr:?}");
    assert!(
        !state_dir.exists(),
        "the state directory was created: {stderr:?}"
    );
}

#[test]
fn invalid_configuration_exits_2_before_binding_anything() {
    let dir = temp_dir();
    let state = dir.path().join("state");
    // Held by the test: were it bound before the configuration is checked, the error would be
    // "cannot listen" with exit status 1.
    let occupied = TcpListener::bind("127.0.0.1:0").unwrap();
    let occupied = occupied.local_addr().unwrap().to_string();
    let serve = || {
        Serve::bare()
            .args(["--http-addr", &occupied, "--state-dir"])
            .arg(&state)
    };
    rejected_config(
        serve().args(["--worker-id", "40"]),
        &state,
        &["--worker-id", "40", "0..=31"],
    );
    rejected_config(
        serve().args(["--datacenter-id", "-1"]),
        &state,
        &["--datacenter-id", "-1", "0..=31"],
    );
    rejected_config(
        serve().args(["--max-batch", "0"]),
        &state,
        &["--max-batch", "found 0", "1..=100000"],
    );
    rejected_config(
        serve().env("SNOWFLAKE_RESERVE_MS", "soon"),
        &state,
        &["SNOWFLAKE_RESERVE_MS", "soon", "100..=60000"],
    );
    rejected_config(
        serve().args(["--grpc-max-concurrent-streams", "0"]),
        &state,
        &["--grpc-max-concurrent-streams", "found 0", "1..=1024"],
    );
    rejected_config(
        serve().env("SNOWFLAKE_GRPC_MAX_CONCURRENT_STREAMS", "1025"),
        &state,
        &["SNOWFLAKE_GRPC_MAX_CONCURRENT_STREAMS", "1025", "1..=1024"],
    );
    rejected_config(
        Serve::bare()
            .args(["--http-addr", "nonsense", "--state-dir"])
            .arg(&state),
        &state,
        &["--http-addr", "nonsense", "IP:PORT"],
    );

    let unknown = dir.path().join("unknown.toml");
    std::fs::write(&unknown, "worker_id = 1\ncolour = \"blue\"\n").unwrap();
    rejected_config(
        serve().arg("--config").arg(&unknown),
        &state,
        &["unknown setting", "colour", "unknown.toml"],
    );
    let not_toml = dir.path().join("broken.toml");
    std::fs::write(&not_toml, "this is [not toml\n worker_id == 3\n").unwrap();
    rejected_config(
        serve().arg("--config").arg(&not_toml),
        &state,
        &["broken.toml", "not valid TOML"],
    );
    let out_of_range = dir.path().join("range.toml");
    std::fs::write(&out_of_range, "worker_id = 99\n").unwrap();
    rejected_config(
        serve().arg("--config").arg(&out_of_range),
        &state,
        &["worker_id", "range.toml", "99", "0..=31"],
    );
    rejected_config(
        serve().arg("--config").arg(dir.path().join("missing.toml")),
        &state,
        &["missing.toml"],
    );
}

#[test]
fn flags_override_environment_override_config_file() {
    let dir = temp_dir();
    let file = dir.path().join("snowflake.toml");
    std::fs::write(&file, "worker_id = 5\ndatacenter_id = 2\n").unwrap();
    let worker_id = |serve: fn(&Path) -> Serve, state: &str| {
        let server = serve(&dir.path().join(state))
            .arg("--config")
            .arg(&file)
            .start();
        let info = server.get("/v1/info").json();
        assert_eq!(info["datacenter_id"], 2, "from the file: {info}");
        let id = server.get("/v1/id").ids()[0];
        assert_eq!((id >> 12) & 0x1F, info["worker_id"].as_u64().unwrap());
        let finished = server.stop_with("TERM");
        assert_exit(&finished, 0);
        info["worker_id"].as_u64().unwrap()
    };
    let flag_env_file = worker_id(
        |state| {
            Serve::new(state)
                .env("SNOWFLAKE_WORKER_ID", "6")
                .args(["--worker-id", "7"])
        },
        "a",
    );
    assert_eq!(
        flag_env_file, 7,
        "a flag beats the environment and the file"
    );
    let env_file = worker_id(
        |state| Serve::new(state).env("SNOWFLAKE_WORKER_ID", "6"),
        "b",
    );
    assert_eq!(env_file, 6, "the environment beats the file");
    let file_only = worker_id(Serve::new, "c");
    assert_eq!(file_only, 5, "the file beats the default");
}

// 6. Start-up failures.

/// Exit 1, with an `error:` line containing `needle`.
fn failed_start(serve: Serve, needle: &str) -> String {
    let finished = serve.run_to_exit();
    assert_exit(&finished, 1);
    assert!(finished.stdout.is_empty(), "stdout: {:?}", finished.stdout);
    let line = finished
        .stderr
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_else(|| panic!("no error line: {}", finished.stderr));
    assert!(line.contains(needle), "{line:?} lacks {needle:?}");
    assert!(
        !finished.stderr.contains("listening"),
        "{}",
        finished.stderr
    );
    line.to_owned()
}

#[test]
fn a_second_process_on_the_same_state_dir_exits_1() {
    let dir = temp_dir();
    let first = Serve::new(dir.path()).start();
    let before = first.get("/v1/id").ids()[0];
    let line = failed_start(Serve::new(dir.path()), "in use");
    assert!(
        line.contains(&dir.path().display().to_string()),
        "names the directory: {line}"
    );
    // The first one is unharmed.
    assert!(first.get("/v1/id").ids()[0] > before);
    let finished = first.stop_with("TERM");
    assert_exit(&finished, 0);
    assert_eq!(state_file(dir.path(), 0, 0)["kind"], "shutdown");
}

#[test]
fn a_port_in_use_exits_1() {
    let dir = temp_dir();
    let occupied = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = occupied.local_addr().unwrap().to_string();
    let line = failed_start(
        Serve::bare()
            .args(["--http-addr", &addr, "--state-dir"])
            .arg(dir.path()),
        "cannot listen",
    );
    assert!(line.contains(&addr), "names the address: {line}");
}

#[test]
fn a_corrupt_state_file_exits_1() {
    let dir = temp_dir();
    std::fs::write(dir.path().join("node-0-0.json"), "{ half a record").unwrap();
    failed_start(Serve::new(dir.path()), "corrupt");
}

// (7. The clock steps back while running, and restarts: serve_clock.rs.)

/// The largest batch (`--max-batch 100000`, the ceiling) is issued three quarters of a
/// millisecond's worth at a time within the request timeout: it succeeds with the default
/// timeout, and is refused, not stretched, under a shorter one; above the ceiling the flag is
/// refused.
#[test]
fn a_maximum_batch_is_issued_within_the_request_timeout() {
    let dir = temp_dir();
    let server = Serve::new(dir.path())
        .args(["--max-batch", "100000"])
        .start();
    let response = server.get("/v1/ids?count=100000");
    assert_eq!(response.status, 200);
    let ids = response.ids();
    assert_eq!(ids.len(), 100_000);
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids not increasing");
    assert_exit(&server.stop_with("TERM"), 0);

    let dir = temp_dir();
    let server = Serve::new(dir.path())
        .args(["--max-batch", "100000", "--request-timeout-ms", "10"])
        .start();
    let response = server.get("/v1/ids?count=100000");
    let message = unavailable(&response);
    assert!(
        message.contains("request timed out after 10 ms"),
        "{message}"
    );
    // The node goes on serving.
    assert_eq!(server.get("/v1/id").status, 200);
    assert_exit(&server.stop_with("TERM"), 0);
}

//! Configuration: precedence (flags/env > file > defaults) and precise errors.

mod fleet;

use snowflake_server::{Config, ServeArgs};
use std::io::Write;
use std::time::Duration;

fn file(contents: &str) -> tempfile::NamedTempFile {
    let mut file = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    file.write_all(contents.as_bytes()).unwrap();
    file
}

fn err(args: &ServeArgs) -> String {
    Config::resolve(args, None).unwrap_err().to_string()
}

/// Each configuration is refused with one line that contains its message.
fn assert_refused(cases: &[(ServeArgs, &str)]) {
    for (args, message) in cases {
        let got = err(args);
        assert!(got.contains(message), "{got:?} lacks {message:?}");
        assert_eq!(got.lines().count(), 1);
    }
}

#[test]
fn defaults_need_no_flags() {
    let config = Config::resolve(&ServeArgs::new(), None).unwrap();
    assert_eq!(
        config.listeners.http_addr.unwrap().to_string(),
        "127.0.0.1:8080"
    );
    assert_eq!(
        config.listeners.grpc_addr.unwrap().to_string(),
        "127.0.0.1:50051"
    );
    assert_eq!(
        config.listeners.thrift_addr.unwrap().to_string(),
        "127.0.0.1:7609"
    );
    assert_eq!(config.limits.thrift_max_frame_bytes, 65_536);
    assert_eq!(config.limits.grpc_max_concurrent_streams, 100);
    assert_eq!(
        (config.identity.datacenter_id, config.identity.worker_id),
        (0, 0)
    );
    assert_eq!(config.limits.max_batch, 100_000);
    assert_eq!(config.clock.max_backwards_wait_ms, 0);
    assert_eq!(config.layout, snowflake_core::Layout::TWITTER);
    assert!(
        config.state_dir.ends_with("snowflake") || config.state_dir.ends_with("snowflake-state")
    );
}

#[test]
fn flags_override_the_file_which_overrides_defaults() {
    let toml = file(
        "http_addr = \"127.0.0.1:9000\"\ndatacenter_id = 3\nworker_id = 5\nmax_batch = 500\n\
         request_timeout_ms = 1500\nstate_dir = \"/tmp/x\"\nlog_format = \"json\"\nepoch_ms = 1600000000000\n",
    );
    let mut args = ServeArgs::new().with("config", toml.path());
    let from_file = Config::resolve(&args, None).unwrap();
    assert_eq!(
        from_file.listeners.http_addr.unwrap().to_string(),
        "127.0.0.1:9000"
    );
    assert_eq!(
        (
            from_file.identity.datacenter_id,
            from_file.identity.worker_id,
            from_file.limits.max_batch
        ),
        (3, 5, 500)
    );
    assert_eq!(
        from_file.limits.request_timeout,
        Duration::from_millis(1500)
    );
    assert_eq!(from_file.state_dir.to_str(), Some("/tmp/x"));
    assert_eq!(
        from_file.logging.log_format,
        snowflake_server::LogFormat::Json
    );
    assert_eq!(from_file.layout.epoch_ms(), 1_600_000_000_000);

    args.set("worker_id", "7");
    args.set("http_addr", "off");
    args.set("grpc_addr", "off");
    args.set("thrift_addr", "off");
    args.set("max_batch", "4096");
    // Turning HTTP off leaves no listener at all, which is refused.
    assert!(err(&args).contains("every listener is off"));
    args.set("http_addr", "[::1]:0");
    args.set("thrift_addr", "127.0.0.1:7000");
    args.set("thrift_max_frame_bytes", "1024");
    args.set("grpc_max_concurrent_streams", "1024");
    let overridden = Config::resolve(&args, Some("1288834974657")).unwrap();
    assert_eq!(
        (
            overridden.identity.datacenter_id,
            overridden.identity.worker_id,
            overridden.limits.max_batch
        ),
        (3, 7, 4096)
    );
    assert_eq!(
        overridden.listeners.http_addr.unwrap().to_string(),
        "[::1]:0"
    );
    assert_eq!(overridden.listeners.grpc_addr, None);
    assert_eq!(
        overridden.listeners.thrift_addr.unwrap().to_string(),
        "127.0.0.1:7000"
    );
    assert_eq!(overridden.limits.thrift_max_frame_bytes, 1024);
    assert_eq!(overridden.limits.grpc_max_concurrent_streams, 1024);
    assert_eq!(overridden.layout, snowflake_core::Layout::TWITTER);
}

#[test]
fn bad_values_name_the_setting_the_value_and_the_range() {
    let cases: Vec<(ServeArgs, &str)> = vec![
        (
            ServeArgs::new().with("worker_id", "40"),
            "invalid --worker-id (or SNOWFLAKE_WORKER_ID): invalid worker id: expected 0..=31, found 40",
        ),
        (
            ServeArgs::new().with("datacenter_id", "-1"),
            "invalid --datacenter-id (or SNOWFLAKE_DATACENTER_ID): invalid datacenter id: expected 0..=31, found -1",
        ),
        (
            ServeArgs::new().with("max_batch", "0"),
            "invalid --max-batch (or SNOWFLAKE_MAX_BATCH): expected 1..=100000, found 0",
        ),
        (
            ServeArgs::new().with("max_batch", "lots"),
            "invalid --max-batch (or SNOWFLAKE_MAX_BATCH): expected a whole number in 1..=100000, found \"lots\"",
        ),
        (
            ServeArgs::new().with("http_addr", "localhost"),
            "invalid --http-addr (or SNOWFLAKE_HTTP_ADDR): expected IP:PORT",
        ),
        (
            ServeArgs::new().with("reserve_ms", "50"),
            "invalid --reserve-ms (or SNOWFLAKE_RESERVE_MS): expected 100..=60000, found 50",
        ),
        (
            ServeArgs::new().with("max_backwards_wait_ms", "99999"),
            "expected 0..=10000, found 99999",
        ),
        (
            ServeArgs::new().with("max_connections", "0"),
            "expected 1..=1000000, found 0",
        ),
        (
            ServeArgs::new().with("log_format", "xml"),
            "expected human or json, found \"xml\"",
        ),
        (
            ServeArgs::new().with("state_dir", ""),
            "expected a directory path",
        ),
        (
            ServeArgs::new().with("grpc_addr", "50051"),
            "invalid --grpc-addr (or SNOWFLAKE_GRPC_ADDR): expected IP:PORT",
        ),
        (
            ServeArgs::new().with("thrift_addr", "x:1"),
            "invalid --thrift-addr (or SNOWFLAKE_THRIFT_ADDR)",
        ),
        (
            ServeArgs::new().with("thrift_max_frame_bytes", "16"),
            "expected 64..=16384000, found 16",
        ),
        (
            ServeArgs::new().with("grpc_max_concurrent_streams", "0"),
            "expected 1..=1024, found 0",
        ),
        (
            ServeArgs::new().with("grpc_max_concurrent_streams", "1025"),
            "expected 1..=1024, found 1025",
        ),
    ];
    assert_refused(&cases);
    let future = Config::resolve(&ServeArgs::new(), Some("99999999999999"))
        .unwrap_err()
        .to_string();
    assert!(
        future.contains("invalid --epoch-ms") && future.contains("is in the future"),
        "{future}"
    );
}

#[test]
fn bad_files_are_explained() {
    let unknown = file("worker_id = 1\nwokrer_id = 2\n");
    let got = err(&ServeArgs::new().with("config", unknown.path()));
    assert!(
        got.contains("unknown setting \"wokrer_id\"") && got.contains("known settings: http_addr"),
        "{got}"
    );

    let broken = file("worker_id = \n");
    let got = err(&ServeArgs::new().with("config", broken.path()));
    assert!(got.contains("is not valid TOML"), "{got}");
    assert_eq!(got.lines().count(), 1);

    let wrong_type = file("worker_id = [1, 2]\n");
    let got = err(&ServeArgs::new().with("config", wrong_type.path()));
    assert!(
        got.contains("invalid worker_id in") && got.contains("0..=31, found \"<array>\""),
        "{got}"
    );

    let out_of_range = file("datacenter_id = 32\n");
    let got = err(&ServeArgs::new().with("config", out_of_range.path()));
    assert!(
        got.contains("invalid datacenter_id in") && got.contains("found 32"),
        "{got}"
    );

    let got = err(&ServeArgs::new().with("config", "/nonexistent/snowflake.toml"));
    assert!(
        got.contains("cannot read config file /nonexistent/snowflake.toml"),
        "{got}"
    );
}

#[test]
fn worker_threads_default_to_the_cpus_and_are_checked() {
    let config = Config::resolve(&ServeArgs::new(), None).unwrap();
    assert!(config.limits.worker_threads >= 1);
    let one = Config::resolve(&ServeArgs::new().with("worker_threads", "1"), None).unwrap();
    assert_eq!(one.limits.worker_threads, 1);
    let got = err(&ServeArgs::new().with("worker_threads", "0"));
    assert!(
        got.contains(
            "invalid --worker-threads (or SNOWFLAKE_WORKER_THREADS): expected 1..=1024, found 0"
        ),
        "{got}"
    );
}

#[test]
fn worker_ids_from_the_host_name() {
    let ordinal = |host: &str| {
        Config::resolve(
            &ServeArgs::new()
                .with("worker_id_from_hostname", "true")
                .with("hostname", host),
            None,
        )
    };
    let config = ordinal("snowflake-7").unwrap();
    assert_eq!(
        (config.identity.worker_id, config.identity.identity_source()),
        (7, "hostname-ordinal")
    );
    assert!(config.identity.worker_id_given());
    assert_eq!(config.identity.hostname, "snowflake-7");
    assert_eq!(ordinal("ids-b-31").unwrap().identity.worker_id, 31);
    assert_eq!(ordinal("snowflake-0").unwrap().identity.worker_id, 0);
    // Issue 28: only the canonical ordinal; `snowflake-07` and `snowflake-7` would both take
    // worker 7 (this was accepted as 7 before).
    for host in ["snowflake-07", "ids-b-031", "snowflake-00"] {
        let message = ordinal(host).unwrap_err().to_string();
        assert!(
            message.contains("leading zero") && message.contains(&format!("{host:?}")),
            "{host}: {message}"
        );
    }
    for (host, needles) in [
        ("web", vec!["does not end in -N", "\"web\""]),
        ("snowflake-", vec!["does not end in -N"]),
        ("snowflake-32", vec!["ordinal 32", "0..=31"]),
        ("snowflake-99999999999999999999999", vec!["0..=31"]),
    ] {
        let message = ordinal(host).unwrap_err().to_string();
        for needle in needles {
            assert!(
                message.contains(needle),
                "{host}: {message:?} lacks {needle:?}"
            );
        }
    }
    let bad_host = Config::resolve(&ServeArgs::new().with("hostname", "a b"), None)
        .unwrap_err()
        .to_string();
    assert!(bad_host.contains("--hostname"), "{bad_host}");
    let both = ServeArgs::new()
        .with("worker_id_from_hostname", "true")
        .with("worker_id", "3")
        .with("hostname", "snowflake-7");
    assert!(err(&both).contains("keep one"), "{}", err(&both));
}

#[test]
fn worker_ids_from_the_config_files_host_map() {
    let toml = file("[worker_id_map]\n\"host-a\" = 3\n\"host-b\" = 4\n");
    let with_host = |host: &str| {
        ServeArgs::new()
            .with("config", toml.path())
            .with("hostname", host)
    };
    let config = Config::resolve(&with_host("host-b"), None).unwrap();
    assert_eq!(
        (config.identity.worker_id, config.identity.identity_source()),
        (4, "hostname-map")
    );
    let message = err(&with_host("host-c"));
    assert!(
        message.contains("\"host-c\"") && message.contains("\"host-a\""),
        "{message}"
    );
    for (contents, needle) in [
        (
            "[worker_id_map]\n\"a\" = 1\n\"b\" = 1\n",
            "both map to worker 1",
        ),
        ("[worker_id_map]\n\"a\" = 32\n", "0..=31"),
        ("[worker_id_map]\n\"a\" = \"one\"\n", "0..=31"),
        ("worker_id_map = 3\n", "expected a table"),
        (
            "worker_id_map = {}\nworker_id_from_hostname = true\n",
            "keep one",
        ),
    ] {
        let bad = file(contents);
        let args = ServeArgs::new()
            .with("config", bad.path())
            .with("hostname", "a");
        let message = err(&args);
        assert!(
            message.contains(needle),
            "{contents:?}: {message:?} lacks {needle:?}"
        );
    }
}

/// A sign or a fraction is not a whole number, from a flag or from the file (TOML floats such
/// as `3.0` or `1e5` used to pass as integers).
#[test]
fn signs_and_floats_are_not_whole_numbers() {
    assert_refused(&[
        (
            ServeArgs::new().with("reserve_ms", "+500"),
            "invalid --reserve-ms (or SNOWFLAKE_RESERVE_MS): expected a whole number in 100..=60000, found \"+500\"",
        ),
        (
            ServeArgs::new().with("worker_id", "+3"),
            "invalid --worker-id (or SNOWFLAKE_WORKER_ID): invalid worker id",
        ),
    ]);
    for (contents, needle) in [
        ("worker_id = 3.0\n", "invalid worker_id in"),
        ("max_batch = 1e5\n", "invalid max_batch in"),
        ("reserve_ms = 500.5\n", "invalid reserve_ms in"),
    ] {
        let config = file(contents);
        let got = err(&ServeArgs::new().with("config", config.path()));
        assert!(got.contains(needle), "{contents:?}: {got}");
        assert!(
            got.contains("found \""),
            "{contents:?}: the float is shown: {got}"
        );
    }
}

#[test]
fn the_clock_step_settings_have_defaults_and_ranges() {
    let config = Config::resolve(&ServeArgs::new(), None).unwrap();
    assert_eq!(config.clock.max_clock_step_ms, 1000);
    assert_eq!(config.clock.clock_step_trust, Duration::from_secs(10));
    let config = Config::resolve(
        &ServeArgs::new()
            .with("max_clock_step_ms", "250")
            .with("clock_step_trust_secs", "30"),
        None,
    )
    .unwrap();
    assert_eq!(config.clock.max_clock_step_ms, 250);
    assert_eq!(config.clock.clock_step_trust, Duration::from_secs(30));
    assert_refused(&[
        (
            ServeArgs::new().with("max_clock_step_ms", "0"),
            "invalid --max-clock-step-ms (or SNOWFLAKE_MAX_CLOCK_STEP_MS): expected 1..=3600000, found 0",
        ),
        (
            ServeArgs::new().with("clock_step_trust_secs", "3601"),
            "invalid --clock-step-trust-secs (or SNOWFLAKE_CLOCK_STEP_TRUST_SECS): expected 1..=3600, found 3601",
        ),
        (
            ServeArgs::new().with("max_batch", "100001"),
            "invalid --max-batch (or SNOWFLAKE_MAX_BATCH): expected 1..=100000, found 100001",
        ),
    ]);
    let from_file = file("max_clock_step_ms = 5000\nclock_step_trust_secs = 2\n");
    let config = Config::resolve(&ServeArgs::new().with("config", from_file.path()), None).unwrap();
    assert_eq!(config.clock.max_clock_step_ms, 5000);
    assert_eq!(config.clock.clock_step_trust, Duration::from_secs(2));
}

#[test]
fn resp_limits_are_settings_with_ranges() {
    let args = ServeArgs::new()
        .with("resp_addr", "127.0.0.1:6380")
        .with("resp_max_bulk_bytes", "4096")
        .with("resp_max_args", "16")
        .with("resp_max_inline_bytes", "1024");
    let config = Config::resolve(&args, None).unwrap();
    assert_eq!(
        config.listeners.resp_addr,
        Some("127.0.0.1:6380".parse().unwrap())
    );
    let limits = config.limits.resp;
    assert_eq!(
        (
            limits.max_bulk_bytes,
            limits.max_args,
            limits.max_inline_bytes
        ),
        (4096, 16, 1024)
    );
    let got = err(&ServeArgs::new().with("resp_max_args", "1"));
    assert!(
        got.contains(
            "invalid --resp-max-args (or SNOWFLAKE_RESP_MAX_ARGS): expected 2..=65536, found 1"
        ),
        "{got}"
    );
    let got = err(&ServeArgs::new().with("resp_addr", "6380"));
    assert!(got.contains("invalid --resp-addr"), "{got}");
}

#[test]
fn the_layout_from_the_flag_or_the_file_sets_the_ranges_and_the_default_batch() {
    use snowflake_core::Layout;
    let resolve = |args: &ServeArgs, epoch: Option<&str>, layout: Option<&str>| {
        Config::resolve_with_layout(args, epoch, layout)
    };
    let defaults = resolve(&ServeArgs::new(), None, None).unwrap();
    assert_eq!(defaults.layout, Layout::TWITTER);
    assert_eq!(defaults.limits.max_batch, 100_000);

    // --layout (or SNOWFLAKE_LAYOUT): js-safe's ranges, and a default batch of 250 ms of its
    // rate (64,000 IDs/s).
    let js = resolve(&ServeArgs::new(), None, Some("js-safe")).unwrap();
    assert_eq!(js.layout, Layout::JS_SAFE);
    assert_eq!(js.limits.max_batch, 16_000);
    let given = ServeArgs::new().with("max_batch", "50000");
    assert_eq!(
        resolve(&given, None, Some("js-safe"))
            .unwrap()
            .limits
            .max_batch,
        50_000,
        "a given one stands"
    );
    let worker = ServeArgs::new().with("worker_id", "16");
    let got = resolve(&worker, None, Some("js-safe"))
        .unwrap_err()
        .to_string();
    assert!(got.contains("expected 0..=15, found 16"), "{got}");
    // With --epoch-ms.
    let later = resolve(&ServeArgs::new(), Some("1600000000000"), Some("js-safe")).unwrap();
    assert_eq!(later.layout.epoch_ms(), 1_600_000_000_000);
    assert_eq!(later.layout.bits(), Layout::JS_SAFE.bits());

    // The config file's `layout` key; a flag overrides it.
    let toml = file("layout = \"js-safe\"\n");
    let args = ServeArgs::new().with("config", toml.path());
    assert_eq!(resolve(&args, None, None).unwrap().layout, Layout::JS_SAFE);
    assert_eq!(
        resolve(&args, None, Some("twitter")).unwrap().layout,
        Layout::TWITTER
    );
    let toml = file("layout = \"custom:29,5,5,12\"\n");
    let args = ServeArgs::new().with("config", toml.path());
    let got = resolve(&args, None, None).unwrap_err().to_string();
    assert!(
        got.starts_with("invalid layout in ") && got.contains("needs at least 30 bits"),
        "{got}"
    );
    // A layout whose last millisecond has passed, with the epoch given: both named.
    let got = resolve(&ServeArgs::new(), Some("1"), Some("custom:30,5,5,12"))
        .unwrap_err()
        .to_string();
    assert!(
        got.contains("--layout (or SNOWFLAKE_LAYOUT) and --epoch-ms (or SNOWFLAKE_EPOCH_MS)")
            && got.contains("ran out"),
        "{got}"
    );
}

/// docs/configuration.md is generated from the settings table; a stale page fails here.
#[test]
fn configuration_doc_is_current() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/configuration.md");
    let want = snowflake_server::settings::markdown();
    if std::env::var_os("SNOWFLAKE_REGENERATE_DOCS").is_some() {
        std::fs::write(&path, &want).unwrap();
        return;
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "{} is not what the settings table generates; regenerate it with \
         SNOWFLAKE_REGENERATE_DOCS=1 cargo test -p snowflake-server --test lib \
         configuration_doc, and commit it",
        path.display()
    );
}

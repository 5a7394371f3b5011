//! Configuration: precedence (flags/env > file > defaults) and precise errors.

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
    assert_eq!(config.http_addr.unwrap().to_string(), "127.0.0.1:8080");
    assert_eq!(config.grpc_addr.unwrap().to_string(), "127.0.0.1:50051");
    assert_eq!(config.thrift_addr.unwrap().to_string(), "127.0.0.1:7609");
    assert_eq!(config.thrift_max_frame_bytes, 65_536);
    assert_eq!(config.grpc_max_concurrent_streams, 100);
    assert_eq!((config.datacenter_id, config.worker_id), (0, 0));
    assert_eq!(config.max_batch, 100_000);
    assert_eq!(config.max_backwards_wait_ms, 0);
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
    assert_eq!(from_file.http_addr.unwrap().to_string(), "127.0.0.1:9000");
    assert_eq!(
        (
            from_file.datacenter_id,
            from_file.worker_id,
            from_file.max_batch
        ),
        (3, 5, 500)
    );
    assert_eq!(from_file.request_timeout, Duration::from_millis(1500));
    assert_eq!(from_file.state_dir.to_str(), Some("/tmp/x"));
    assert_eq!(from_file.log_format, snowflake_server::LogFormat::Json);
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
            overridden.datacenter_id,
            overridden.worker_id,
            overridden.max_batch
        ),
        (3, 7, 4096)
    );
    assert_eq!(overridden.http_addr.unwrap().to_string(), "[::1]:0");
    assert_eq!(overridden.grpc_addr, None);
    assert_eq!(
        overridden.thrift_addr.unwrap().to_string(),
        "127.0.0.1:7000"
    );
    assert_eq!(overridden.thrift_max_frame_bytes, 1024);
    assert_eq!(overridden.grpc_max_concurrent_streams, 1024);
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
    assert!(config.worker_threads >= 1);
    let one = Config::resolve(&ServeArgs::new().with("worker_threads", "1"), None).unwrap();
    assert_eq!(one.worker_threads, 1);
    let got = err(&ServeArgs::new().with("worker_threads", "0"));
    assert!(
        got.contains(
            "invalid --worker-threads (or SNOWFLAKE_WORKER_THREADS): expected 1..=1024, found 0"
        ),
        "{got}"
    );
}

fn etcd_args(endpoints: &str) -> ServeArgs {
    ServeArgs::new().with("etcd_endpoints", endpoints)
}

fn endpoints_of(text: &str) -> Vec<String> {
    Config::resolve(&etcd_args(text), None)
        .unwrap_or_else(|e| panic!("{text:?}: {e}"))
        .etcd
        .expect("etcd on")
        .endpoints
}

#[test]
fn etcd_is_off_by_default_and_has_defaults_once_on() {
    let config = Config::resolve(&ServeArgs::new(), None).unwrap();
    assert_eq!(config.etcd, None);
    assert_eq!(config.advertise_addr, None);
    assert!(!config.worker_id_given());

    let config = Config::resolve(&etcd_args("127.0.0.1:2379"), None).unwrap();
    let etcd = config.etcd.clone().expect("etcd on");
    assert_eq!(etcd.endpoints, ["http://127.0.0.1:2379"]);
    assert_eq!(etcd.prefix, "/snowflake");
    assert_eq!(etcd.lease_ttl_secs, 10);
    assert_eq!(etcd.claim_timeout, Duration::from_secs(12));
    assert!(!config.worker_id_given());
    assert_eq!(config.advertise_addr, None);

    // The claim timeout follows the TTL unless given.
    let mut args = etcd_args("127.0.0.1:2379");
    args.set("lease_ttl_secs", "30");
    let etcd = Config::resolve(&args, None).unwrap().etcd.unwrap();
    assert_eq!(
        (etcd.lease_ttl_secs, etcd.claim_timeout),
        (30, Duration::from_secs(32))
    );
    args.set("claim_timeout_secs", "0");
    let etcd = Config::resolve(&args, None).unwrap().etcd.unwrap();
    assert_eq!(etcd.claim_timeout, Duration::ZERO);
    args.set("claim_timeout_secs", "3600");
    let etcd = Config::resolve(&args, None).unwrap().etcd.unwrap();
    assert_eq!(etcd.claim_timeout, Duration::from_secs(3600));
    args.set("lease_ttl_secs", "2");
    assert_eq!(
        Config::resolve(&args, None)
            .unwrap()
            .etcd
            .unwrap()
            .lease_ttl_secs,
        2
    );
    args.set("lease_ttl_secs", "300");
    assert_eq!(
        Config::resolve(&args, None)
            .unwrap()
            .etcd
            .unwrap()
            .lease_ttl_secs,
        300
    );
}

#[test]
fn etcd_endpoints_are_normalized_to_http_urls() {
    assert_eq!(endpoints_of("10.0.0.1:2379"), ["http://10.0.0.1:2379"]);
    assert_eq!(
        endpoints_of("http://10.0.0.1:2379"),
        ["http://10.0.0.1:2379"]
    );
    assert_eq!(
        endpoints_of("http://10.0.0.1:2379/"),
        ["http://10.0.0.1:2379"]
    );
    assert_eq!(endpoints_of("[::1]:2379"), ["http://[::1]:2379"]);
    assert_eq!(
        endpoints_of("etcd-1.internal:2379, http://etcd-2.internal:2379 ,etcd_3:22379"),
        [
            "http://etcd-1.internal:2379",
            "http://etcd-2.internal:2379",
            "http://etcd_3:22379"
        ]
    );
    // Duplicates, however spelled, are removed; the first occurrence keeps its place.
    assert_eq!(
        endpoints_of("b:2379,a:2379,http://b:2379,b:2379/,a:2379"),
        ["http://b:2379", "http://a:2379"]
    );
    let many: Vec<String> = (1..=32).map(|i| format!("10.0.0.{i}:2379")).collect();
    assert_eq!(endpoints_of(&many.join(",")).len(), 32);
    let too_many: Vec<String> = (1..=33).map(|i| format!("10.0.0.{i}:2379")).collect();
    let got = err(&etcd_args(&too_many.join(",")));
    assert!(
        got.contains("expected at most 32 endpoints, found 33"),
        "{got}"
    );
}

#[test]
fn bad_etcd_endpoints_are_explained() {
    let name = "invalid --etcd-endpoints (or SNOWFLAKE_ETCD_ENDPOINTS): ";
    let cases: [(&str, &str); 14] = [
        ("a:2379,https://b:2379", "the same scheme"),
        ("https://a:2379,http://b:2379", "the same scheme"),
        ("", "found an empty entry"),
        ("a:2379,,b:2379", "found an empty entry"),
        ("a:2379,", "found an empty entry"),
        (" , ", "found an empty entry"),
        ("10.0.0.1", "expected http://HOST:PORT"),
        ("10.0.0.1:0", "expected http://HOST:PORT"),
        ("10.0.0.1:65536", "expected http://HOST:PORT"),
        ("10.0.0.1:port", "expected http://HOST:PORT"),
        ("10.0.0.1:-1", "expected http://HOST:PORT"),
        (":2379", "expected http://HOST:PORT"),
        ("grpc://10.0.0.1:2379", "expected http://HOST:PORT"),
        ("http://10.0.0.1:2379/v3", "expected http://HOST:PORT"),
    ];
    for (text, message) in cases {
        let got = err(&etcd_args(text));
        assert!(
            got.starts_with(name) && got.contains(message),
            "{text:?}: {got:?} lacks {message:?}"
        );
        assert_eq!(got.lines().count(), 1, "{got:?}");
    }
    let got = err(&etcd_args("https://10.0.0.1:2379,http://10.0.0.2:2379"));
    assert!(got.contains("\"http://10.0.0.2:2379\""), "{got}");
    // https:// needs the CA to verify etcd with, and TLS files need https://.
    let got = err(&etcd_args("https://10.0.0.1:2379"));
    assert!(
        got.contains("https:// etcd endpoints need --etcd-ca"),
        "{got}"
    );
    let mut args = etcd_args("http://10.0.0.1:2379");
    args.set("etcd_ca", "/etc/ssl/ca.pem");
    let got = err(&args);
    assert!(
        got.contains("--etcd-ca (or SNOWFLAKE_ETCD_CA) needs https://"),
        "{got}"
    );
    let mut args = etcd_args("http://10.0.0.1:2379");
    args.set("etcd_user", "snowflake");
    let got = err(&args);
    assert!(
        got.contains("needs a password: --etcd-password-file"),
        "{got}"
    );
    let mut args = etcd_args("http://10.0.0.1:2379");
    args.set("etcd_password_file", "/nonexistent/password");
    let got = err(&args);
    assert!(
        got.contains(
            "cannot read --etcd-password-file (or SNOWFLAKE_ETCD_PASSWORD_FILE) /nonexistent/password"
        ),
        "{got}"
    );
    let args = ServeArgs::new().with("etcd_user", "snowflake");
    let got = err(&args);
    assert!(got.contains("--etcd-user needs --etcd-endpoints"), "{got}");
    // User input echoed in an error is cut short.
    let long = format!("{}:2379", "x".repeat(1000));
    let got = err(&etcd_args(&format!("{long},a b:1")));
    assert!(got.len() < 400, "{got}");
}

#[test]
fn lease_ttl_and_claim_timeout_are_range_checked() {
    for (ttl, found) in [("1", "found 1"), ("301", "found 301"), ("0", "found 0")] {
        let mut args = etcd_args("127.0.0.1:2379");
        args.set("lease_ttl_secs", ttl);
        let got = err(&args);
        assert!(
            got.contains(
                "invalid --lease-ttl-secs (or SNOWFLAKE_LEASE_TTL_SECS): expected 2..=300"
            ) && got.contains(found),
            "{got}"
        );
    }
    let mut args = etcd_args("127.0.0.1:2379");
    args.set("lease_ttl_secs", "ten");
    assert!(err(&args).contains("expected a whole number in 2..=300, found \"ten\""));
    let mut args = etcd_args("127.0.0.1:2379");
    args.set("claim_timeout_secs", "3601");
    let got = err(&args);
    assert!(
        got.contains(
            "invalid --claim-timeout-secs (or SNOWFLAKE_CLAIM_TIMEOUT_SECS): expected 0..=3600, found 3601"
        ),
        "{got}"
    );
}

#[test]
fn etcd_settings_without_etcd_endpoints_are_refused() {
    let cases = [
        (
            ServeArgs::new().with("etcd_prefix", "/prod"),
            "--etcd-prefix needs --etcd-endpoints",
        ),
        (
            ServeArgs::new().with("lease_ttl_secs", "10"),
            "--lease-ttl-secs needs --etcd-endpoints",
        ),
        (
            ServeArgs::new().with("claim_timeout_secs", "5"),
            "--claim-timeout-secs needs --etcd-endpoints",
        ),
    ];
    assert_refused(&cases);
    // Still range-checked first: the more precise error wins.
    let got = err(&ServeArgs::new().with("lease_ttl_secs", "1"));
    assert!(got.contains("expected 2..=300, found 1"), "{got}");
}

#[test]
fn etcd_prefixes_are_checked_and_lose_a_trailing_slash() {
    let prefix_of = |text: &str| {
        let mut args = etcd_args("127.0.0.1:2379");
        args.set("etcd_prefix", text);
        Config::resolve(&args, None).map(|c| c.etcd.unwrap().prefix)
    };
    assert_eq!(prefix_of("/snowflake").unwrap(), "/snowflake");
    assert_eq!(prefix_of("/snowflake/").unwrap(), "/snowflake");
    assert_eq!(prefix_of("/prod/ids-2.v1_x").unwrap(), "/prod/ids-2.v1_x");
    assert_eq!(prefix_of("/prod/ids/").unwrap(), "/prod/ids");
    for bad in [
        "snowflake",
        "snowflake/",
        "/a//b",
        "/a b",
        "/",
        "",
        "//",
        "/a/b//",
        "/é",
        "/a\nb",
    ] {
        let got = prefix_of(bad).unwrap_err().to_string();
        assert!(
            got.starts_with("invalid --etcd-prefix (or SNOWFLAKE_ETCD_PREFIX): ")
                && got.contains("expected a key prefix like /snowflake"),
            "{bad:?}: {got}"
        );
        assert_eq!(got.lines().count(), 1, "{bad:?}: {got:?}");
    }
    let long = format!("/{}", "a".repeat(200));
    assert!(prefix_of(&long).is_err());
    assert_eq!(prefix_of(&long[..200]).unwrap(), &long[..200]);
}

#[test]
fn worker_id_given_only_when_the_worker_id_is_given() {
    let mut args = etcd_args("127.0.0.1:2379");
    assert!(!Config::resolve(&args, None).unwrap().worker_id_given());
    args.set("datacenter_id", "3");
    assert!(!Config::resolve(&args, None).unwrap().worker_id_given());
    args.set("worker_id", "0");
    let config = Config::resolve(&args, None).unwrap();
    assert!(
        config.worker_id_given(),
        "even the default value, when given"
    );
    assert_eq!((config.datacenter_id, config.worker_id), (3, 0));

    let toml = file("worker_id = 5\n");
    let from_file = Config::resolve(&ServeArgs::new().with("config", toml.path()), None).unwrap();
    assert!(from_file.worker_id_given());
    assert_eq!(from_file.worker_id, 5);
    let toml = file("datacenter_id = 5\n");
    let without = Config::resolve(&ServeArgs::new().with("config", toml.path()), None).unwrap();
    assert!(!without.worker_id_given());
}

#[test]
fn etcd_settings_from_the_config_file() {
    let toml = file(
        "etcd_endpoints = \"10.0.0.1:2379, http://10.0.0.2:2379\"\netcd_prefix = \"/prod/ids/\"\n\
         lease_ttl_secs = 20\nclaim_timeout_secs = 5\nadvertise_addr = \"ids-3.internal:7609\"\n\
         worker_id = 3\n",
    );
    let mut args = ServeArgs::new().with("config", toml.path());
    let config = Config::resolve(&args, None).unwrap();
    let etcd = config.etcd.clone().unwrap();
    assert_eq!(
        etcd.endpoints,
        ["http://10.0.0.1:2379", "http://10.0.0.2:2379"]
    );
    assert_eq!(etcd.prefix, "/prod/ids");
    assert_eq!(etcd.lease_ttl_secs, 20);
    assert_eq!(etcd.claim_timeout, Duration::from_secs(5));
    assert_eq!(
        config.advertise_addr.as_deref(),
        Some("ids-3.internal:7609")
    );
    assert!(config.worker_id_given());
    assert_eq!(config.worker_id, 3);

    // Flags override the file.
    args.set("etcd_endpoints", "10.0.0.9:2379");
    args.set("lease_ttl_secs", "60");
    let etcd = Config::resolve(&args, None).unwrap().etcd.unwrap();
    assert_eq!(etcd.endpoints, ["http://10.0.0.9:2379"]);
    assert_eq!(
        (etcd.lease_ttl_secs, etcd.prefix.as_str()),
        (60, "/prod/ids")
    );

    let shown = |contents: &str| {
        let toml = file(contents);
        let got = err(&ServeArgs::new().with("config", toml.path()));
        (got, toml.path().display().to_string())
    };
    let (got, path) = shown("etcd_endpoints = \"http://10.0.0.1:2379,https://10.0.0.2:2379\"\n");
    assert!(
        got.contains(&format!("invalid etcd_endpoints in {path}"))
            && got.contains("the same scheme"),
        "{got}"
    );
    let (got, path) = shown("etcd_endpoints = \"10.0.0.1:2379\"\nlease_ttl_secs = 1\n");
    assert!(
        got.contains(&format!(
            "invalid lease_ttl_secs in {path}: expected 2..=300, found 1"
        )),
        "{got}"
    );
    let (got, path) = shown("etcd_endpoints = \"10.0.0.1:2379\"\netcd_prefix = \"x\"\n");
    assert!(
        got.contains(&format!("invalid etcd_prefix in {path}")),
        "{got}"
    );
    let (got, path) = shown("advertise_addr = \"nowhere\"\n");
    assert!(
        got.contains(&format!("invalid advertise_addr in {path}")),
        "{got}"
    );
    let (got, _) = shown("etcd_prefix = \"/x\"\n");
    assert!(got.contains("needs --etcd-endpoints"), "{got}");
    let (got, _) = shown("etcd_endpoints = [\"10.0.0.1:2379\"]\n");
    assert!(got.contains("invalid etcd_endpoints in"), "{got}");
}

#[test]
fn advertise_addr_is_host_and_port() {
    let advertised = |text: &str| {
        Config::resolve(&ServeArgs::new().with("advertise_addr", text), None)
            .map(|c| c.advertise_addr)
    };
    for good in [
        "10.0.0.7:7609",
        "ids-3.internal:7609",
        "[::1]:7609",
        "localhost:1",
        "a:65535",
    ] {
        assert_eq!(advertised(good).unwrap().as_deref(), Some(good));
    }
    for bad in [
        "10.0.0.7",
        ":7609",
        "host:0",
        "host:65536",
        "host:port",
        "host:",
        "",
        "a b:1",
        "http://host:1",
        "host/x:1",
    ] {
        let got = advertised(bad).unwrap_err().to_string();
        assert!(
            got.starts_with("invalid --advertise-addr (or SNOWFLAKE_ADVERTISE_ADDR): ")
                && got.contains("expected HOST:PORT"),
            "{bad:?}: {got}"
        );
    }
    let long = format!("{}:1", "h".repeat(254));
    assert!(advertised(&long).is_err());
    let longest = format!("{}:1", "h".repeat(253));
    assert!(advertised(&longest).is_ok());
}

fn zk_args(servers: &str) -> ServeArgs {
    ServeArgs::new().with("zookeeper", servers)
}

#[test]
fn zookeeper_is_off_by_default_and_has_the_2010_defaults_once_on() {
    let config = Config::resolve(&ServeArgs::new(), None).unwrap();
    assert!(config.zookeeper.is_none());
    assert_eq!(config.identity_source(), "static");
    let config =
        Config::resolve(&zk_args("127.0.0.1:2181, zk2:2181,127.0.0.1:2181"), None).unwrap();
    let zk = config.zookeeper.unwrap();
    assert_eq!(zk.servers, ["127.0.0.1:2181", "zk2:2181"]);
    assert_eq!(zk.path, "/snowflake-servers");
    assert_eq!(zk.marks_path(), "/snowflake-servers-marks");
    assert_eq!(zk.session_timeout, Duration::from_secs(10));
    assert_eq!(zk.claim_timeout, Duration::from_secs(12));
    assert_eq!(zk.max_peer_skew_ms, 10_000);

    let args = zk_args("zk:2181")
        .with("zookeeper_path", "/ids/dc2/")
        .with("zookeeper_session_timeout_ms", "4000")
        .with("max_peer_skew_ms", "0")
        .with("claim_timeout_secs", "3");
    let zk = Config::resolve(&args, None).unwrap().zookeeper.unwrap();
    assert_eq!(zk.path, "/ids/dc2");
    assert_eq!(zk.session_timeout, Duration::from_millis(4000));
    assert_eq!(zk.max_peer_skew_ms, 0);
    assert_eq!(zk.claim_timeout, Duration::from_secs(3));
}

#[test]
fn bad_zookeeper_settings_are_explained() {
    for (args, needles) in [
        (zk_args("zk"), vec!["--zookeeper", "HOST:PORT", "\"zk\""]),
        (zk_args("zk:0"), vec!["--zookeeper", "\"zk:0\""]),
        (zk_args("zk:2181,"), vec!["--zookeeper", "HOST:PORT"]),
        (
            zk_args("zk:2181").with("zookeeper_session_timeout_ms", "999"),
            vec!["--zookeeper-session-timeout-ms", "1000..=120000", "999"],
        ),
        (
            zk_args("zk:2181").with("zookeeper_path", "servers"),
            vec!["--zookeeper-path", "\"servers\""],
        ),
        (
            zk_args("zk:2181").with("thrift_addr", "off"),
            vec!["--zookeeper needs the Thrift listener"],
        ),
        (
            zk_args("zk:2181").with("etcd_endpoints", "127.0.0.1:2379"),
            vec!["--etcd-endpoints and --zookeeper", "choose one"],
        ),
        (
            ServeArgs::new().with("zookeeper_path", "/x"),
            vec!["--zookeeper-path needs --zookeeper"],
        ),
        (
            ServeArgs::new().with("max_peer_skew_ms", "5"),
            vec!["--max-peer-skew-ms needs --zookeeper"],
        ),
    ] {
        let message = err(&args);
        for needle in needles {
            assert!(message.contains(needle), "{message:?} lacks {needle:?}");
        }
        assert!(!message.contains('\n'), "one line: {message:?}");
    }
    // The claim timeout also serves ZooKeeper.
    let args = zk_args("zk:2181").with("claim_timeout_secs", "4");
    assert!(Config::resolve(&args, None).is_ok());
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
        (config.worker_id, config.identity_source()),
        (7, "hostname-ordinal")
    );
    assert!(config.worker_id_given());
    assert_eq!(config.hostname, "snowflake-7");
    assert_eq!(ordinal("ids-b-31").unwrap().worker_id, 31);
    assert_eq!(ordinal("snowflake-0").unwrap().worker_id, 0);
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
        (config.worker_id, config.identity_source()),
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
    assert_eq!(config.max_clock_step_ms, 1000);
    assert_eq!(config.clock_step_trust, Duration::from_secs(10));
    let config = Config::resolve(
        &ServeArgs::new()
            .with("max_clock_step_ms", "250")
            .with("clock_step_trust_secs", "30"),
        None,
    )
    .unwrap();
    assert_eq!(config.max_clock_step_ms, 250);
    assert_eq!(config.clock_step_trust, Duration::from_secs(30));
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
    assert_eq!(config.max_clock_step_ms, 5000);
    assert_eq!(config.clock_step_trust, Duration::from_secs(2));
}

#[test]
fn resp_limits_are_settings_with_ranges() {
    let args = ServeArgs::new()
        .with("resp_addr", "127.0.0.1:6380")
        .with("resp_max_bulk_bytes", "4096")
        .with("resp_max_args", "16")
        .with("resp_max_inline_bytes", "1024");
    let config = Config::resolve(&args, None).unwrap();
    assert_eq!(config.resp_addr, Some("127.0.0.1:6380".parse().unwrap()));
    let limits = config.resp_limits;
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
    assert_eq!(defaults.max_batch, 100_000);

    // --layout (or SNOWFLAKE_LAYOUT): js-safe's ranges, and a default batch of 250 ms of its
    // rate (64,000 IDs/s).
    let js = resolve(&ServeArgs::new(), None, Some("js-safe")).unwrap();
    assert_eq!(js.layout, Layout::JS_SAFE);
    assert_eq!(js.max_batch, 16_000);
    let given = ServeArgs::new().with("max_batch", "50000");
    assert_eq!(
        resolve(&given, None, Some("js-safe")).unwrap().max_batch,
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

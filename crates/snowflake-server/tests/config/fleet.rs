//! Configuration of the fleet's coordination services: etcd and ZooKeeper settings, their
//! defaults once on, and the errors for missing or stray ones.

use super::{assert_refused, err, file};
use snowflake_server::{Config, EtcdConfig, ServeArgs};
use std::time::Duration;

fn etcd_args(endpoints: &str) -> ServeArgs {
    ServeArgs::new().with("etcd_endpoints", endpoints)
}

/// The etcd settings `args` resolve to (etcd on).
fn etcd_of(args: &ServeArgs) -> EtcdConfig {
    Config::resolve(args, None)
        .unwrap()
        .identity
        .etcd()
        .cloned()
        .unwrap()
}

fn endpoints_of(text: &str) -> Vec<String> {
    Config::resolve(&etcd_args(text), None)
        .unwrap_or_else(|e| panic!("{text:?}: {e}"))
        .identity
        .etcd()
        .cloned()
        .expect("etcd on")
        .endpoints
}

#[test]
fn etcd_is_off_by_default_and_has_defaults_once_on() {
    let config = Config::resolve(&ServeArgs::new(), None).unwrap();
    assert_eq!(config.identity.etcd(), None);
    assert_eq!(config.identity.advertise_addr, None);
    assert!(!config.identity.worker_id_given());

    let config = Config::resolve(&etcd_args("127.0.0.1:2379"), None).unwrap();
    let etcd = config.identity.etcd().cloned().expect("etcd on");
    assert_eq!(etcd.endpoints, ["http://127.0.0.1:2379"]);
    assert_eq!(etcd.prefix, "/snowflake");
    assert_eq!(etcd.lease_ttl_secs, 10);
    assert_eq!(etcd.claim_timeout, Duration::from_secs(12));
    assert!(!config.identity.worker_id_given());
    assert_eq!(config.identity.advertise_addr, None);

    // The claim timeout follows the TTL unless given.
    let mut args = etcd_args("127.0.0.1:2379");
    args.set("lease_ttl_secs", "30");
    let etcd = etcd_of(&args);
    assert_eq!(
        (etcd.lease_ttl_secs, etcd.claim_timeout),
        (30, Duration::from_secs(32))
    );
    args.set("claim_timeout_secs", "0");
    let etcd = etcd_of(&args);
    assert_eq!(etcd.claim_timeout, Duration::ZERO);
    args.set("claim_timeout_secs", "3600");
    let etcd = etcd_of(&args);
    assert_eq!(etcd.claim_timeout, Duration::from_secs(3600));
    args.set("lease_ttl_secs", "2");
    assert_eq!(etcd_of(&args).lease_ttl_secs, 2);
    args.set("lease_ttl_secs", "300");
    assert_eq!(etcd_of(&args).lease_ttl_secs, 300);
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
        Config::resolve(&args, None).map(|c| c.identity.etcd().cloned().unwrap().prefix)
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
    assert!(
        !Config::resolve(&args, None)
            .unwrap()
            .identity
            .worker_id_given()
    );
    args.set("datacenter_id", "3");
    assert!(
        !Config::resolve(&args, None)
            .unwrap()
            .identity
            .worker_id_given()
    );
    args.set("worker_id", "0");
    let config = Config::resolve(&args, None).unwrap();
    assert!(
        config.identity.worker_id_given(),
        "even the default value, when given"
    );
    assert_eq!(
        (config.identity.datacenter_id, config.identity.worker_id),
        (3, 0)
    );

    let toml = file("worker_id = 5\n");
    let from_file = Config::resolve(&ServeArgs::new().with("config", toml.path()), None).unwrap();
    assert!(from_file.identity.worker_id_given());
    assert_eq!(from_file.identity.worker_id, 5);
    let toml = file("datacenter_id = 5\n");
    let without = Config::resolve(&ServeArgs::new().with("config", toml.path()), None).unwrap();
    assert!(!without.identity.worker_id_given());
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
    let etcd = config.identity.etcd().cloned().unwrap();
    assert_eq!(
        etcd.endpoints,
        ["http://10.0.0.1:2379", "http://10.0.0.2:2379"]
    );
    assert_eq!(etcd.prefix, "/prod/ids");
    assert_eq!(etcd.lease_ttl_secs, 20);
    assert_eq!(etcd.claim_timeout, Duration::from_secs(5));
    assert_eq!(
        config.identity.advertise_addr.as_deref(),
        Some("ids-3.internal:7609")
    );
    assert!(config.identity.worker_id_given());
    assert_eq!(config.identity.worker_id, 3);

    // Flags override the file.
    args.set("etcd_endpoints", "10.0.0.9:2379");
    args.set("lease_ttl_secs", "60");
    let etcd = etcd_of(&args);
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
            .map(|c| c.identity.advertise_addr)
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
    assert!(config.identity.zookeeper().is_none());
    assert_eq!(config.identity.identity_source(), "static");
    let config =
        Config::resolve(&zk_args("127.0.0.1:2181, zk2:2181,127.0.0.1:2181"), None).unwrap();
    let zk = config.identity.zookeeper().unwrap();
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
    let zk = Config::resolve(&args, None)
        .unwrap()
        .identity
        .zookeeper()
        .cloned()
        .unwrap();
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

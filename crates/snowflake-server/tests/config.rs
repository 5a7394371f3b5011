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

#[test]
fn defaults_need_no_flags() {
    let config = Config::resolve(&ServeArgs::default(), None).unwrap();
    assert_eq!(config.http_addr.unwrap().to_string(), "127.0.0.1:8080");
    assert_eq!(config.grpc_addr.unwrap().to_string(), "127.0.0.1:50051");
    assert_eq!(config.thrift_addr.unwrap().to_string(), "127.0.0.1:7609");
    assert_eq!(config.thrift_max_frame_bytes, 65_536);
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
    let mut args = ServeArgs {
        config: Some(toml.path().to_owned()),
        ..ServeArgs::default()
    };
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

    args.worker_id = Some("7".into());
    args.http_addr = Some("off".into());
    args.grpc_addr = Some("off".into());
    args.thrift_addr = Some("off".into());
    args.max_batch = Some("4096".into());
    // Turning HTTP off leaves no listener at all, which is refused.
    assert!(err(&args).contains("every listener is off"));
    args.http_addr = Some("[::1]:0".into());
    args.thrift_addr = Some("127.0.0.1:7000".into());
    args.thrift_max_frame_bytes = Some("1024".into());
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
    assert_eq!(overridden.layout, snowflake_core::Layout::TWITTER);
}

#[test]
fn bad_values_name_the_setting_the_value_and_the_range() {
    let cases: Vec<(ServeArgs, &str)> = vec![
        (
            ServeArgs {
                worker_id: Some("40".into()),
                ..ServeArgs::default()
            },
            "invalid --worker-id (or SNOWFLAKE_WORKER_ID): invalid worker id: expected 0..=31, found 40",
        ),
        (
            ServeArgs {
                datacenter_id: Some("-1".into()),
                ..ServeArgs::default()
            },
            "invalid --datacenter-id (or SNOWFLAKE_DATACENTER_ID): invalid datacenter id: expected 0..=31, found -1",
        ),
        (
            ServeArgs {
                max_batch: Some("0".into()),
                ..ServeArgs::default()
            },
            "invalid --max-batch (or SNOWFLAKE_MAX_BATCH): expected 1..=10000000, found 0",
        ),
        (
            ServeArgs {
                max_batch: Some("lots".into()),
                ..ServeArgs::default()
            },
            "invalid --max-batch (or SNOWFLAKE_MAX_BATCH): expected a whole number in 1..=10000000, found \"lots\"",
        ),
        (
            ServeArgs {
                http_addr: Some("localhost".into()),
                ..ServeArgs::default()
            },
            "invalid --http-addr (or SNOWFLAKE_HTTP_ADDR): expected IP:PORT",
        ),
        (
            ServeArgs {
                reserve_ms: Some("50".into()),
                ..ServeArgs::default()
            },
            "invalid --reserve-ms (or SNOWFLAKE_RESERVE_MS): expected 100..=60000, found 50",
        ),
        (
            ServeArgs {
                max_backwards_wait_ms: Some("99999".into()),
                ..ServeArgs::default()
            },
            "expected 0..=10000, found 99999",
        ),
        (
            ServeArgs {
                max_connections: Some("0".into()),
                ..ServeArgs::default()
            },
            "expected 1..=1000000, found 0",
        ),
        (
            ServeArgs {
                log_format: Some("xml".into()),
                ..ServeArgs::default()
            },
            "expected human or json, found \"xml\"",
        ),
        (
            ServeArgs {
                state_dir: Some("".into()),
                ..ServeArgs::default()
            },
            "expected a directory path",
        ),
        (
            ServeArgs {
                grpc_addr: Some("50051".into()),
                ..ServeArgs::default()
            },
            "invalid --grpc-addr (or SNOWFLAKE_GRPC_ADDR): expected IP:PORT",
        ),
        (
            ServeArgs {
                thrift_addr: Some("x:1".into()),
                ..ServeArgs::default()
            },
            "invalid --thrift-addr (or SNOWFLAKE_THRIFT_ADDR)",
        ),
        (
            ServeArgs {
                thrift_max_frame_bytes: Some("16".into()),
                ..ServeArgs::default()
            },
            "expected 64..=16384000, found 16",
        ),
    ];
    for (args, message) in cases {
        let got = err(&args);
        assert!(got.contains(message), "{got:?} lacks {message:?}");
        assert_eq!(got.lines().count(), 1);
    }
    let future = Config::resolve(&ServeArgs::default(), Some("99999999999999"))
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
    let got = err(&ServeArgs {
        config: Some(unknown.path().to_owned()),
        ..ServeArgs::default()
    });
    assert!(
        got.contains("unknown setting \"wokrer_id\"") && got.contains("known settings: http_addr"),
        "{got}"
    );

    let broken = file("worker_id = \n");
    let got = err(&ServeArgs {
        config: Some(broken.path().to_owned()),
        ..ServeArgs::default()
    });
    assert!(got.contains("is not valid TOML"), "{got}");
    assert_eq!(got.lines().count(), 1);

    let wrong_type = file("worker_id = [1, 2]\n");
    let got = err(&ServeArgs {
        config: Some(wrong_type.path().to_owned()),
        ..ServeArgs::default()
    });
    assert!(
        got.contains("invalid worker_id in") && got.contains("0..=31, found \"<array>\""),
        "{got}"
    );

    let out_of_range = file("datacenter_id = 32\n");
    let got = err(&ServeArgs {
        config: Some(out_of_range.path().to_owned()),
        ..ServeArgs::default()
    });
    assert!(
        got.contains("invalid datacenter_id in") && got.contains("found 32"),
        "{got}"
    );

    let got = err(&ServeArgs {
        config: Some("/nonexistent/snowflake.toml".into()),
        ..ServeArgs::default()
    });
    assert!(
        got.contains("cannot read config file /nonexistent/snowflake.toml"),
        "{got}"
    );
}

#[test]
fn worker_threads_default_to_the_cpus_and_are_checked() {
    let config = Config::resolve(&ServeArgs::default(), None).unwrap();
    assert!(config.worker_threads >= 1);
    let one = Config::resolve(
        &ServeArgs {
            worker_threads: Some("1".into()),
            ..ServeArgs::default()
        },
        None,
    )
    .unwrap();
    assert_eq!(one.worker_threads, 1);
    let got = err(&ServeArgs {
        worker_threads: Some("0".into()),
        ..ServeArgs::default()
    });
    assert!(
        got.contains(
            "invalid --worker-threads (or SNOWFLAKE_WORKER_THREADS): expected 1..=1024, found 0"
        ),
        "{got}"
    );
}

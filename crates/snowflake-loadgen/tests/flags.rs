//! The `bench` flags: defaults, accepted forms, and one-line errors for bad values.

use clap::Parser;
use snowflake_loadgen::{BenchArgs, BenchConfig, MAX_DURATION, MAX_RATE, Protocol};
use std::process::ExitCode;
use std::time::Duration;

/// Stands in for the `snowflake bench` subcommand.
#[derive(Debug, Parser)]
struct Bench {
    #[command(flatten)]
    args: BenchArgs,
}

/// Parses `flags` as `snowflake bench` would.
fn args(flags: &[&str]) -> BenchArgs {
    Bench::try_parse_from(std::iter::once("bench").chain(flags.iter().copied()))
        .unwrap()
        .args
}

/// Parses and validates `flags`.
fn config(flags: &[&str]) -> Result<BenchConfig, String> {
    BenchConfig::try_from(&args(flags)).map_err(|err| err.to_string())
}

#[test]
fn the_defaults_target_loopback_for_ten_seconds() {
    let config = config(&[]).unwrap();
    assert_eq!(config.protocol(), Protocol::Http);
    assert_eq!(config.addr(), "127.0.0.1:8080");
    assert_eq!(config.connections(), 50);
    assert_eq!(config.duration(), Duration::from_secs(10));
    assert_eq!(config.requests(), None);
    assert_eq!(config.batch(), 1);
    assert_eq!(config.warmup(), Duration::ZERO);
    assert_eq!(config.threads(), 1);
    assert_eq!(config.rate(), None);
    assert!(!args(&[]).json());
}

#[test]
fn every_flag_is_taken() {
    let flags = [
        "--protocol",
        "http",
        "--addr",
        "[::1]:9000",
        "-c",
        "7",
        "-d",
        "2m",
        "-n",
        "500",
        "--batch",
        "100",
        "--warmup",
        "500ms",
        "--threads",
        "2",
        "--timeout",
        "1s",
        "--rate",
        "2500",
        "--json",
        "--no-progress",
    ];
    let config = config(&flags).unwrap();
    assert_eq!(config.addr(), "[::1]:9000");
    assert_eq!(config.connections(), 7);
    assert_eq!(config.duration(), Duration::from_secs(120));
    assert_eq!(config.requests(), Some(500));
    assert_eq!(config.batch(), 100);
    assert_eq!(config.warmup(), Duration::from_millis(500));
    assert_eq!(config.threads(), 2);
    assert_eq!(config.timeout(), Duration::from_secs(1));
    assert_eq!(config.rate(), Some(2500));
    assert!(!config.progress());
    assert!(args(&flags).json());
}

#[test]
fn durations_take_seconds_and_units() {
    for (text, expected) in [
        ("10", Duration::from_secs(10)),
        ("10s", Duration::from_secs(10)),
        ("500ms", Duration::from_millis(500)),
        ("2m", Duration::from_secs(120)),
        ("1h", Duration::from_secs(3600)),
        ("3600", Duration::from_secs(3600)),
    ] {
        assert_eq!(
            config(&["-d", text]).unwrap().duration(),
            expected,
            "{text}"
        );
    }
}

#[test]
fn a_rate_is_taken_up_to_ten_million_requests_per_second() {
    assert_eq!(config(&["--rate", "1"]).unwrap().rate(), Some(1));
    assert_eq!(
        config(&["--rate", "10000000"]).unwrap().rate(),
        Some(MAX_RATE)
    );
    // A rate does not bound the run: the default duration still applies.
    let config = config(&["--rate", "100"]).unwrap();
    assert_eq!(config.duration(), Duration::from_secs(10));
    assert_eq!(config.requests(), None);
}

#[test]
fn a_request_count_alone_is_capped_by_the_longest_duration() {
    let config = config(&["-n", "1000"]).unwrap();
    assert_eq!(config.requests(), Some(1000));
    assert_eq!(config.duration(), MAX_DURATION);
}

#[test]
fn bad_values_get_one_line_naming_the_flag_the_range_and_the_value() {
    for (flags, message) in [
        (
            &["-c", "0"][..],
            "invalid --connections: expected 1..=10000, found 0",
        ),
        (
            &["--connections", "10001"],
            "invalid --connections: expected 1..=10000, found 10001",
        ),
        (
            &["-c", "many"],
            "invalid --connections: expected 1..=10000, found many",
        ),
        (
            &["-c", "-1"],
            "invalid --connections: expected 1..=10000, found -1",
        ),
        (
            &["-c", "99999999999999999999"],
            "invalid --connections: expected 1..=10000, found 99999999999999999999",
        ),
        (
            &["--batch", "0"],
            "invalid --batch: expected 1..=1000000, found 0",
        ),
        (
            &["--batch", "1000001"],
            "invalid --batch: expected 1..=1000000, found 1000001",
        ),
        (
            &["-n", "0"],
            "invalid --requests: expected 1..=1000000000000, found 0",
        ),
        (
            &["--rate", "0"],
            "invalid --rate: expected 1..=10000000, found 0",
        ),
        (
            &["--rate", "10000001"],
            "invalid --rate: expected 1..=10000000, found 10000001",
        ),
        (
            &["--rate", "-100"],
            "invalid --rate: expected 1..=10000000, found -100",
        ),
        (
            &["--rate", "1.5"],
            "invalid --rate: expected 1..=10000000, found 1.5",
        ),
        (
            &["--rate", "fast"],
            "invalid --rate: expected 1..=10000000, found fast",
        ),
        (
            &["--rate", ""],
            "invalid --rate: expected 1..=10000000, found ",
        ),
        (
            &["--threads", "0"],
            "invalid --threads: expected 1..=256, found 0",
        ),
        (
            &["-d", "0"],
            "invalid --duration: expected 1ms..=3600s, found 0",
        ),
        (
            &["-d", "3601s"],
            "invalid --duration: expected 1ms..=3600s, found 3601s",
        ),
        (
            &["-d", "2h"],
            "invalid --duration: expected 1ms..=3600s, found 2h",
        ),
        (
            &["-d", "ten"],
            "invalid --duration: expected a duration like 10, 10s, 500ms or 2m in 1ms..=3600s, found ten",
        ),
        (
            &["-d", "1.5s"],
            "invalid --duration: expected a duration like 10, 10s, 500ms or 2m in 1ms..=3600s, found 1.5s",
        ),
        (
            &["-d", "-5"],
            "invalid --duration: expected a duration like 10, 10s, 500ms or 2m in 1ms..=3600s, found -5",
        ),
        (
            &["--warmup", "2h"],
            "invalid --warmup: expected 0s..=3600s, found 2h",
        ),
        (
            &["--timeout", "0"],
            "invalid --timeout: expected 1ms..=60s, found 0",
        ),
        (
            &["--addr", "nope"],
            "invalid --addr: expected HOST:PORT with a port in 1..=65535, found nope",
        ),
        (
            &["--addr", ":8080"],
            "invalid --addr: expected HOST:PORT with a port in 1..=65535, found :8080",
        ),
        (
            &["--addr", "localhost:0"],
            "invalid --addr: expected HOST:PORT with a port in 1..=65535, found localhost:0",
        ),
        (
            &["--addr", "localhost:65536"],
            "invalid --addr: expected HOST:PORT with a port in 1..=65535, found localhost:65536",
        ),
        (
            &["--addr", "::1:8080"],
            "invalid --addr: expected HOST:PORT with a port in 1..=65535, found ::1:8080",
        ),
        (
            &["--addr", "http://h:80"],
            "invalid --addr: expected HOST:PORT with a port in 1..=65535, found http://h:80",
        ),
    ] {
        assert_eq!(config(flags).unwrap_err(), message, "{flags:?}");
    }
}

#[test]
fn an_unknown_protocol_is_rejected_by_the_parser() {
    let err = Bench::try_parse_from(["bench", "--protocol", "smtp"]).unwrap_err();
    assert_eq!(err.kind(), clap::error::ErrorKind::InvalidValue);
}

#[test]
fn the_builder_checks_what_the_flags_check() {
    let err = BenchConfig::builder().batch(0).build().unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid --batch: expected 1..=1000000, found 0"
    );
    let err = BenchConfig::builder()
        .duration(Duration::from_secs(3601))
        .build()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid --duration: expected 1ms..=3600s, found 3601s"
    );
    for bad in [0, MAX_RATE + 1, u64::MAX] {
        let err = BenchConfig::builder().rate(bad).build().unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("invalid --rate: expected 1..=10000000, found {bad}")
        );
    }
    let config = BenchConfig::builder().rate(MAX_RATE).build().unwrap();
    assert_eq!(config.rate(), Some(MAX_RATE));
    let config = BenchConfig::builder().rate(5).rate(None).build().unwrap();
    assert_eq!(config.rate(), None);
}

#[test]
fn run_cli_exits_2_for_a_bad_flag_and_1_when_nothing_listens() {
    assert_eq!(
        snowflake_loadgen::run_cli(args(&["-c", "0"])),
        ExitCode::from(2)
    );
    assert_eq!(
        snowflake_loadgen::run_cli(args(&["--rate", "0"])),
        ExitCode::from(2)
    );

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let code = snowflake_loadgen::run_cli(args(&["--addr", &addr, "-c", "2", "--no-progress"]));
    assert_eq!(code, ExitCode::FAILURE);
}

#[test]
fn run_cli_exits_1_when_no_request_finished_during_the_run() {
    // A service that accepts connections (the kernel does, from the backlog) and never answers,
    // like a frozen process: every request is still waiting when a run shorter than --timeout
    // ends, so none finished and none failed. That is no measurement: exit 1, not 0.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap().to_string();
    let code = snowflake_loadgen::run_cli(args(&[
        "--addr",
        &addr,
        "-c",
        "2",
        "-d",
        "300ms",
        "--no-progress",
    ]));
    assert_eq!(code, ExitCode::FAILURE);
    drop(silent);
}

#[test]
fn each_protocol_defaults_to_the_services_listener_for_it() {
    for (protocol, addr) in [
        ("http", "127.0.0.1:8080"),
        ("thrift", "127.0.0.1:7609"),
        ("grpc", "127.0.0.1:50051"),
    ] {
        let defaulted = config(&["--protocol", protocol]).unwrap();
        assert_eq!(defaulted.protocol().name(), protocol);
        assert_eq!(defaulted.addr(), addr, "{protocol}");
        assert!(!defaulted.stream());
        // An explicit address wins.
        let explicit = config(&["--protocol", protocol, "--addr", "10.0.0.1:99"]).unwrap();
        assert_eq!(explicit.addr(), "10.0.0.1:99");
    }
    let config = BenchConfig::builder()
        .protocol(Protocol::Grpc)
        .build()
        .unwrap();
    assert_eq!(config.addr(), "127.0.0.1:50051");
    assert_eq!(Protocol::Thrift.default_addr(), "127.0.0.1:7609");
}

#[test]
fn grpc_takes_batches_and_streams() {
    let batched = config(&["--protocol", "grpc", "--batch", "100"]).unwrap();
    assert_eq!((batched.batch(), batched.stream()), (100, false));
    let streamed = config(&["--protocol", "grpc", "--stream", "--batch", "10000"]).unwrap();
    assert_eq!((streamed.batch(), streamed.stream()), (10_000, true));
}

#[test]
fn bad_protocol_combinations_get_one_line_naming_the_value() {
    for (flags, message) in [
        (
            &["--protocol", "thrift", "--batch", "2"][..],
            "invalid --batch: expected 1 with --protocol thrift (the Thrift interface has no \
             batch call), found 2",
        ),
        (
            &["--protocol", "thrift", "--batch", "100"][..],
            "invalid --batch: expected 1 with --protocol thrift (the Thrift interface has no \
             batch call), found 100",
        ),
        (
            &["--stream"][..],
            "invalid --stream: expected --protocol grpc, found --protocol http",
        ),
        (
            &["--protocol", "thrift", "--stream"][..],
            "invalid --stream: expected --protocol grpc, found --protocol thrift",
        ),
    ] {
        let err = config(flags).unwrap_err();
        assert_eq!(err, message, "{flags:?}");
        assert!(!err.contains('\n'));
        assert_eq!(snowflake_loadgen::run_cli(args(flags)), ExitCode::from(2));
    }
    let err = BenchConfig::builder()
        .protocol(Protocol::Thrift)
        .batch(5)
        .build()
        .unwrap_err();
    assert!(err.to_string().ends_with("found 5"), "{err}");
    let err = BenchConfig::builder().stream(true).build().unwrap_err();
    assert!(err.to_string().starts_with("invalid --stream"), "{err}");
}

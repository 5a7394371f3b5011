//! The Redis protocol front door (SPEC §8 "RESP") on the real binary, with Redis's own tools:
//! `redis-cli` for every command in RESP2 and RESP3 (`-3`), and `redis-benchmark -t incr`.

use crate::support::{Serve, ServeProcess, assert_exit, temp_dir, timestamp_ms, worker_in};
use std::collections::HashSet;
use std::net::SocketAddr;
use std::process::Command;

fn resp_node(dir: &std::path::Path) -> (ServeProcess, SocketAddr) {
    let node = Serve::new(dir)
        .args([
            "--resp-addr",
            "127.0.0.1:0",
            "--datacenter-id",
            "3",
            "--worker-id",
            "9",
        ])
        .start();
    let addr = node.logged_addr("resp listening");
    (node, addr)
}

/// `redis-cli -p PORT [-3] ARGS…`: what it printed (its exit status must be 0).
fn cli(addr: SocketAddr, resp3: bool, args: &[&str]) -> String {
    let mut cmd = Command::new("redis-cli");
    cmd.args(["-h", &addr.ip().to_string(), "-p", &addr.port().to_string()]);
    if resp3 {
        cmd.arg("-3");
    }
    let out = cmd
        .args(args)
        .output()
        .expect("redis-cli is installed (scripts/test installs redis-tools)");
    assert!(out.status.success(), "redis-cli {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim_end().to_owned()
}

fn id(text: &str) -> u64 {
    text.trim()
        .trim_start_matches("(integer) ")
        .parse()
        .unwrap_or_else(|_| panic!("not an ID: {text:?}"))
}

#[test]
fn redis_cli_runs_every_command_in_resp2_and_resp3() {
    let dir = temp_dir();
    let (node, addr) = resp_node(dir.path());
    let mut seen = HashSet::new();
    for resp3 in [false, true] {
        let run = |args: &[&str]| cli(addr, resp3, args);
        assert_eq!(run(&["PING"]), "PONG");
        assert_eq!(run(&["PING", "hello"]), "hello");
        assert_eq!(run(&["ECHO", "hi there"]), "hi there");
        assert_eq!(run(&["SELECT", "0"]), "OK");
        assert!(run(&["SELECT", "1"]).contains("DB index is out of range"));
        assert_eq!(run(&["CLIENT", "SETNAME", "orders"]), "OK");
        assert_eq!(run(&["CLIENT", "SETINFO", "lib-name", "x"]), "OK");
        assert!(run(&["CLIENT", "ID"]).parse::<u64>().is_ok());
        // An ID: worker 9 of datacenter 3, dated now.
        let fresh = id(&run(&["INCR", "orders"]));
        assert_eq!(worker_in(fresh), 9);
        assert!(timestamp_ms(fresh).abs_diff(crate::support::now_ms()) < 10_000);
        assert!(seen.insert(fresh));
        // INCRBY: the last of N consecutive IDs of one millisecond.
        let last = id(&run(&["INCRBY", "orders", "4096"]));
        let first = last - 4095;
        assert_eq!(first & 0xfff, 0, "a whole millisecond: {first}..={last}");
        for id in first..=last {
            assert!(seen.insert(id), "{id} twice");
        }
        assert!(run(&["INCRBY", "orders", "4097"]).contains("expected 1..=4096"));
        assert!(run(&["INCRBY", "orders", "0"]).contains("expected 1..=4096"));
        assert!(run(&["INCRBY", "orders", "-3"]).contains("expected 1..=4096"));
        let next: Vec<u64> = run(&["SNOWFLAKE.NEXT", "5"]).lines().map(id).collect();
        assert_eq!(next.len(), 5);
        assert!(next.windows(2).all(|w| w[0] < w[1]));
        assert!(next.iter().all(|&i| seen.insert(i)));
        assert!(run(&["SNOWFLAKE.NEXT", "0"]).contains("invalid count"));
        let decoded = run(&["SNOWFLAKE.DECODE", "1724551110457221119"]);
        for field in [
            "timestamp_ms",
            "1700000000000",
            "2023-11-14T22:13:20.000Z",
            "sequence",
            "4095",
        ] {
            assert!(decoded.contains(field), "{decoded}");
        }
        assert!(run(&["SNOWFLAKE.DECODE", "x"]).contains("ERR"));
        let hello = run(&["HELLO", if resp3 { "3" } else { "2" }]);
        assert!(
            hello.contains("snowflake") && hello.contains("proto"),
            "{hello}"
        );
        assert!(run(&["HELLO", "4"]).contains("NOPROTO"));
        let info = run(&["INFO"]);
        assert!(
            info.contains("redis_version:") && info.contains("worker_id:9"),
            "{info}"
        );
        assert!(run(&["NOSUCH", "a"]).contains("unknown command 'NOSUCH'"));
        assert!(run(&["INCR"]).contains("wrong number of arguments for 'incr'"));
        assert_eq!(run(&["RESET"]), "RESET");
        assert_eq!(run(&["QUIT"]), "OK");
    }
    let metrics = crate::support::get(node.addr(), "/metrics").body;
    assert!(metrics.contains("protocol=\"resp\""), "{metrics}");
    assert!(metrics.contains("snowflake_resp_ids_by_key_total{key=\"orders\"}"));
    assert_exit(&node.stop_with("TERM"), 0);
}

#[test]
fn redis_benchmark_incr_runs_clean_and_a_bad_request_closes_only_its_connection() {
    let dir = temp_dir();
    let (node, addr) = resp_node(dir.path());
    for pipeline in ["1", "16"] {
        let out = Command::new("redis-benchmark")
            .args(["-h", "127.0.0.1", "-p", &addr.port().to_string()])
            .args([
                "-t", "incr", "-n", "20000", "-c", "20", "-P", pipeline, "-q",
            ])
            .output()
            .expect("redis-benchmark is installed");
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{all}");
        assert!(
            all.contains("INCR:") && all.contains("requests per second"),
            "{all}"
        );
        assert!(!all.contains("WARNING") && !all.contains("ERR"), "{all}");
    }
    // A claim of a huge argument: answered with an error and closed, without allocating it;
    // another connection is served meanwhile.
    use std::io::{Read, Write};
    let mut bad = std::net::TcpStream::connect(addr).unwrap();
    bad.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    bad.write_all(b"*1\r\n$999999999999\r\n").unwrap();
    let mut answer = String::new();
    bad.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("-ERR Protocol error"), "{answer:?}");
    assert!(cli(addr, false, &["INCR", "k"]).parse::<u64>().is_ok());
    assert_exit(&node.stop_with("TERM"), 0);
}

#[test]
fn with_mutual_tls_redis_cli_speaks_resp_over_tls() {
    let certs = crate::certs::Certs::new();
    certs.issue("server", "snowflake-server", "ca", true, 30);
    certs.issue("client", "redis-client", "ca", false, 30);
    let dir = temp_dir();
    let node = Serve::new(dir.path())
        .args(["--resp-addr", "127.0.0.1:0"])
        .arg("--tls-cert")
        .arg(certs.path("server.crt"))
        .arg("--tls-key")
        .arg(certs.path("server.key"))
        .arg("--tls-client-ca")
        .arg(certs.path("ca.crt"))
        .start();
    let addr = node.logged_addr("resp listening");
    let served = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &addr.port().to_string(), "--tls"])
        .arg("--cacert")
        .arg(certs.path("ca.crt"))
        .arg("--cert")
        .arg(certs.path("client.crt"))
        .arg("--key")
        .arg(certs.path("client.key"))
        .args(["INCR", "k"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&served.stdout);
    assert!(text.trim().parse::<u64>().is_ok(), "{served:?}");
    assert_exit(&node.stop_with("TERM"), 0);
}

/// Sends `request` (raw RESP) on `stream` and reads one reply (up to a CRLF-ended line, or
/// a whole RESP3 map header and its fields when `lines` says how many lines to read).
fn exchange(stream: &mut std::net::TcpStream, request: &[u8], lines: usize) -> String {
    use std::io::{BufRead, BufReader, Write};
    stream.write_all(request).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut reply = String::new();
    for _ in 0..lines {
        reader.read_line(&mut reply).unwrap();
    }
    reply
}

#[test]
fn hello_auth_and_auth_are_refused_alike_never_a_false_login() {
    let dir = temp_dir();
    let (node, addr) = resp_node(dir.path());
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let no_auth = |reply: &str| {
        reply.starts_with("-ERR")
            && reply.contains("no authentication")
            && reply.contains("mutual TLS")
    };
    // HELLO 3 AUTH with any password: an error, and the connection stays on RESP2.
    let hello = exchange(
        &mut stream,
        b"*5\r\n$5\r\nHELLO\r\n$1\r\n3\r\n$4\r\nAUTH\r\n$7\r\ndefault\r\n$5\r\nwrong\r\n",
        1,
    );
    assert!(no_auth(&hello), "HELLO 3 AUTH answered {hello:?}");
    // AUTH alone (one or two arguments): the same answer.
    let auth = exchange(&mut stream, b"*2\r\n$4\r\nAUTH\r\n$5\r\nwrong\r\n", 1);
    assert!(no_auth(&auth), "AUTH pass answered {auth:?}");
    let auth = exchange(
        &mut stream,
        b"*3\r\n$4\r\nAUTH\r\n$7\r\ndefault\r\n$5\r\nwrong\r\n",
        1,
    );
    assert!(no_auth(&auth), "AUTH user pass answered {auth:?}");
    // The failed HELLO changed nothing: a bare HELLO still answers in RESP2 (an array).
    let hello = exchange(&mut stream, b"*1\r\n$5\r\nHELLO\r\n", 1);
    assert_eq!(hello, "*14\r\n", "HELLO after a refused HELLO 3 AUTH");
    drop(stream);
    // redis-cli with a password is told so too.
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &addr.port().to_string()])
        .args([
            "--user",
            "default",
            "--pass",
            "hunter2",
            "--no-auth-warning",
        ])
        .args(["PING"])
        .output()
        .unwrap();
    let shown = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(shown.contains("no authentication"), "redis-cli: {shown}");
    assert_exit(&node.stop_with("TERM"), 0);
}

//! The real `snowflake serve` binary under a moving clock (driven by libfaketime in the child
//! only), while running and across restarts, and after `kill -9` (SPEC §3, §5).

use crate::serve::{fetch_ids, number_after, number_before, unavailable};
use crate::support::{FakeClock, Serve, state_file};
use crate::support::{assert_exit, libfaketime, now_ms, temp_dir, timestamp_ms};
use std::time::{Duration, Instant};

// 7. The clock steps back while running.

#[test]
fn clock_stepped_back_5s_while_running_refuses_then_resumes() {
    let clock = FakeClock::new();
    let dir = temp_dir();
    let server = Serve::new(dir.path()).faketime(&clock).start();
    let mut before = fetch_ids(&server, 5);

    // The last ID right before the step, so "behind" is about the full 5 s: exactly 5000 ms
    // minus the time between the two requests, which `gap` bounds from above.
    let sent_at = Instant::now();
    let last = server.get("/v1/id").ids()[0];
    before.push(last);
    clock.set("-5");
    let refused = server.get("/v1/id");
    let gap_ms = u64::try_from(sent_at.elapsed().as_millis()).unwrap();
    let message = unavailable(&refused);
    assert!(message.contains("clock moved backwards"), "{message}");
    let behind = number_before(&message, " ms behind");
    // On a machine too loaded to answer two requests within 100 ms, the lower bound follows
    // the measured gap instead of failing for the harness's slowness.
    let lowest = 4900.min(5000 - gap_ms.min(5000));
    assert!(
        (lowest..=5100).contains(&behind),
        "{behind} ms behind, expected about 5000 ({gap_ms} ms between the last id and the \
         refusal): {message}"
    );
    assert_eq!(
        number_after(&message, "last issued timestamp "),
        timestamp_ms(last),
        "{message}"
    );
    let retry_after: u64 = refused.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=6).contains(&retry_after), "Retry-After {retry_after}");

    let ready = server.get("/readyz");
    assert!(
        unavailable(&ready).contains("clock moved backwards"),
        "{ready:?}"
    );
    // Nothing at all is issued while behind.
    let until = Instant::now() + Duration::from_millis(500);
    while Instant::now() < until {
        for path in ["/v1/id", "/v1/ids?count=10"] {
            let response = server.get(path);
            assert!(
                unavailable(&response).contains("clock moved backwards"),
                "{path}: {response:?}"
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }

    clock.set("+0");
    let resumed = server.poll("/v1/id", Duration::from_secs(10), |r| r.status == 200);
    let old_max = *before.iter().max().unwrap();
    let mut after = resumed.ids();
    after.extend(fetch_ids(&server, 3));
    assert!(
        after.iter().all(|&id| id > old_max),
        "an id at or below {old_max} after the clock came back"
    );
    assert_eq!(server.get("/readyz").status, 200);
    let metrics = server.get("/metrics").body;
    let refusals = metrics
        .lines()
        .find_map(|l| l.strip_prefix("snowflake_clock_backwards_refusals_total "))
        .unwrap_or_else(|| panic!("no refusal counter: {metrics}"));
    assert!(refusals.parse::<u64>().unwrap() >= 1, "{refusals}");

    let finished = server.stop_with("TERM");
    assert_exit(&finished, 0);
}

#[test]
fn small_regressions_are_waited_out_with_max_backwards_wait_ms() {
    let clock = FakeClock::new();
    let dir = temp_dir();
    let server = Serve::new(dir.path())
        .args(["--max-backwards-wait-ms", "2000"])
        .faketime(&clock)
        .start();
    let before = fetch_ids(&server, 2);
    let old_max = *before.last().unwrap();
    clock.set("-1");
    let started = Instant::now();
    let waited = server.get("/v1/id");
    let took = started.elapsed();
    assert_eq!(
        waited.status, 200,
        "a 1 s regression within the bound: {waited:?}"
    );
    assert!(waited.ids()[0] > old_max);
    assert!(
        took >= Duration::from_millis(800),
        "answered after {took:?}: it cannot have waited out a 1 s regression"
    );
    // Beyond the bound: refused as usual.
    clock.set("-5");
    let message = unavailable(&server.get("/v1/id"));
    assert!(message.contains("clock moved backwards"), "{message}");
    let finished = server.stop_with("TERM");
    assert_exit(&finished, 0);
}

/// SPEC §3: "A large forward jump just leaves a gap of unissued IDs; that is harmless" — once
/// the step is trusted (SPEC §8): at once when it is within `--max-clock-step-ms`, else once it
/// has held for `--clock-step-trust-secs`, refusing with the reason meanwhile.
#[test]
fn clock_jumping_forward_10s_leaves_a_gap_once_the_step_is_trusted() {
    for (flags, trust_secs) in [
        (["--max-clock-step-ms", "15000"], 0),
        (["--clock-step-trust-secs", "2"], 2),
    ] {
        let clock = FakeClock::new();
        let dir = temp_dir();
        let server = Serve::new(dir.path()).args(flags).faketime(&clock).start();
        let before = fetch_ids(&server, 2);
        let old_max = *before.last().unwrap();
        clock.set("+10");
        let jumped_ms = now_ms() + 10_000;
        let stepped = Instant::now();
        let mut after = Vec::new();
        let mut refused = 0;
        while Instant::now() < stepped + Duration::from_millis(1500 + trust_secs * 1000) {
            let response = server.get("/v1/id");
            if response.status == 200 {
                after.extend(response.ids());
                continue;
            }
            let message = unavailable(&response);
            assert!(
                message.contains("the clock stepped forward by")
                    && stepped.elapsed() < Duration::from_millis(trust_secs * 1000 + 500),
                "{flags:?}, {:?} after the jump: {message}",
                stepped.elapsed()
            );
            refused += 1;
        }
        assert_eq!(refused > 0, trust_secs > 0, "{flags:?}: {refused} refusals");
        assert!(
            !after.is_empty(),
            "{flags:?}: no id after the step was trusted"
        );
        assert!(after.windows(2).all(|w| w[0] < w[1]) && after[0] > old_max);
        assert!(
            timestamp_ms(after[0]) + 1000 >= jumped_ms,
            "issued at the new time"
        );
        let finished = server.stop_with("TERM");
        assert_exit(&finished, 0);
    }
}

// 8. A restart with the clock 30 s behind.

#[test]
fn restart_with_the_clock_30s_behind_waits_for_the_mark() {
    let clock = FakeClock::new();
    let dir = temp_dir();
    let first = Serve::new(dir.path()).faketime(&clock).start();
    let before = fetch_ids(&first, 5);
    let old_max = *before.iter().max().unwrap();
    let finished = first.stop_with("TERM");
    assert_exit(&finished, 0);
    let mark = state_file(dir.path(), 0, 0);
    assert_eq!(mark["kind"], "shutdown", "{mark}");
    let mark_ms = mark["high_water_ms"].as_u64().unwrap();
    assert!(mark_ms >= timestamp_ms(old_max), "{mark}");

    clock.set("-30");
    let second = Serve::new(dir.path()).faketime(&clock).start();
    let refused = second.get("/v1/id");
    let message = unavailable(&refused);
    assert!(
        message.contains("restarted with the clock behind the persisted high-water mark"),
        "{message}"
    );
    assert!(
        message.contains(&mark_ms.to_string()),
        "names the mark: {message}"
    );
    let retry_after: u64 = refused.header("retry-after").unwrap().parse().unwrap();
    assert!(
        (20..=31).contains(&retry_after),
        "Retry-After {retry_after}"
    );
    let ready = second.get("/readyz");
    assert!(
        unavailable(&ready).contains("restarted with the clock behind"),
        "{ready:?}"
    );
    // For a couple of seconds (several keeper periods), not a single ID.
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        for path in ["/v1/id", "/v1/ids?count=10", "/readyz"] {
            let response = second.get(path);
            assert!(
                unavailable(&response).contains("restarted with the clock behind"),
                "{path}: {response:?}"
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let info = second.get("/v1/info").json();
    assert_eq!(info["ready"], false, "{info}");

    clock.set("+0");
    second.poll("/readyz", Duration::from_secs(10), |r| r.status == 200);
    let after = fetch_ids(&second, 3);
    assert!(
        after.iter().all(|&id| id > old_max),
        "an id at or below {old_max} after the restart"
    );
    let finished = second.stop_with("TERM");
    assert_exit(&finished, 0);
}

// 9. A crash, then a restart at the same clock.

#[test]
fn after_kill_9_a_restart_issues_only_greater_ids() {
    let dir = temp_dir();
    let serve = || Serve::new(dir.path()).args(["--reserve-ms", "500"]);
    let first = serve().start();
    // Long enough for the reservation to be renewed a few times.
    let mut before = Vec::new();
    let until = Instant::now() + Duration::from_millis(600);
    while Instant::now() < until {
        before.extend(fetch_ids(&first, 1));
    }
    before.push(first.get("/v1/id").ids()[0]);
    let old_max = *before.iter().max().unwrap();
    first.kill9();
    let mark = state_file(dir.path(), 0, 0);
    assert_eq!(mark["kind"], "reservation", "{mark}");
    let mark_ms = mark["high_water_ms"].as_u64().unwrap();
    assert!(mark_ms >= timestamp_ms(old_max), "{mark} vs {old_max}");

    let second = serve().start();
    let mut after = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let response = second.get("/v1/id");
        if response.status == 200 {
            after.extend(response.ids());
            break;
        }
        let message = unavailable(&response);
        assert!(
            message.contains("restarted with the clock behind"),
            "{message}"
        );
        assert!(Instant::now() < deadline, "still refusing: {message}");
        std::thread::sleep(Duration::from_millis(10));
    }
    after.extend(fetch_ids(&second, 3));
    assert!(
        after.iter().all(|&id| id > old_max),
        "an id at or below {old_max} after the crash"
    );
    assert!(
        after.iter().all(|&id| timestamp_ms(id) > mark_ms),
        "an id at or below the reservation {mark_ms}"
    );
    let finished = second.stop_with("TERM");
    assert_exit(&finished, 0);
}

/// The libfaketime library is part of the test environment: its absence is a failure.
#[test]
fn libfaketime_is_installed() {
    assert!(libfaketime().is_file());
}

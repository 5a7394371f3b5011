//! A state directory whose filesystem stalls (SPEC §3, issue 12): a real stall, made with
//! `fsfreeze` on a loop-mounted ext4 image (root only, as the tests run), while requests wait for
//! a reservation and SIGTERM arrives. The state file must stay valid, never go down, and the
//! process must not wait for ever.

use crate::support::{Serve, ServeProcess, state_file, temp_dir, timestamp_ms, try_get};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// An ext4 image mounted on a loop device, which the test can freeze; thawed and unmounted
/// when dropped.
struct LoopFs {
    _dir: tempfile::TempDir,
    mount: PathBuf,
    mounted: bool,
}

fn run(program: &str, args: &[&str]) {
    let output = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program} (the test needs util-linux and e2fsprogs, which scripts/test installs): {e}"));
    assert!(
        output.status.success(),
        "{program} {args:?}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

impl LoopFs {
    fn new() -> LoopFs {
        let dir = temp_dir();
        let image = dir.path().join("fs.img");
        let mount = dir.path().join("mnt");
        std::fs::create_dir(&mount).unwrap();
        std::fs::File::create(&image)
            .unwrap()
            .set_len(32 << 20)
            .unwrap();
        let image = image.to_str().unwrap();
        run("mkfs.ext4", &["-q", "-F", image]);
        run("mount", &["-o", "loop", image, mount.to_str().unwrap()]);
        LoopFs {
            _dir: dir,
            mount,
            mounted: true,
        }
    }

    fn path(&self) -> &Path {
        &self.mount
    }

    fn freeze(&self) {
        run("fsfreeze", &["--freeze", self.mount.to_str().unwrap()]);
    }

    fn thaw(&self) {
        run("fsfreeze", &["--unfreeze", self.mount.to_str().unwrap()]);
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        if self.mounted {
            let mount = self.mount.to_str().unwrap();
            let _ = Command::new("fsfreeze")
                .args(["--unfreeze", mount])
                .output();
            let _ = Command::new("umount").args(["-l", mount]).output();
        }
    }
}

/// Polls the process's stderr for `needle`, at most `timeout`.
fn logged(node: &ServeProcess, needle: &str, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if node.stderr().contains(needle) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn a_frozen_state_filesystem_times_requests_out_and_sigterm_still_stops_the_node() {
    let fs = LoopFs::new();
    let state_dir = fs.path().join("state");
    let serve = || {
        Serve::new(&state_dir).args([
            "--reserve-ms",
            "500",
            "--request-timeout-ms",
            "300",
            "--shutdown-timeout-ms",
            "1000",
        ])
    };
    let mut node = serve().start();
    let mut issued = Vec::new();
    let warm_up = Instant::now() + Duration::from_millis(300);
    while Instant::now() < warm_up {
        issued.extend(node.get("/v1/ids?count=10").ids());
    }
    let before_ms = state_file(&state_dir, 0, 0)["high_water_ms"]
        .as_u64()
        .unwrap();

    fs.freeze();
    // The reservation runs out within 500 ms; then requests wait for a write that never comes
    // and are refused after the request timeout.
    let mut refused = 0;
    let frozen = Instant::now();
    while frozen.elapsed() < Duration::from_millis(1500) {
        let response = try_get(node.addr(), "/v1/ids?count=10").expect("the node answers");
        match response.status {
            200 => issued.extend(response.ids()),
            503 => refused += 1,
            other => panic!("{other}: {response:?}"),
        }
    }
    assert!(
        refused > 0,
        "no request was refused while the disk was frozen"
    );

    node.signal("TERM");
    let stopping = logged(
        &node,
        "cannot persist the final high-water mark",
        Duration::from_secs(5),
    );
    fs.thaw();
    assert!(
        stopping,
        "5 s after SIGTERM with the state filesystem frozen, the node had not given up on its \
         final write; stderr:\n{}",
        node.stderr()
    );
    let status = node.wait_exit(Duration::from_secs(10));
    assert_eq!(status.code(), Some(1), "{}", node.stderr());

    let mark = state_file(&state_dir, 0, 0);
    let mark_ms = mark["high_water_ms"].as_u64().unwrap();
    assert!(
        mark_ms >= before_ms,
        "the mark went down: {before_ms} -> {mark}"
    );
    let newest = issued.iter().copied().max().unwrap();
    assert!(
        mark_ms >= timestamp_ms(newest),
        "an id ({newest}) is dated after the mark on disk: {mark}"
    );

    let restarted = serve().start();
    restarted.poll("/readyz", Duration::from_secs(5), |r| r.status == 200);
    let next = restarted.get("/v1/id").ids()[0];
    assert!(next > newest, "{next} after {newest}");
    let leftovers: Vec<_> = std::fs::read_dir(&state_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let finished = restarted.stop_with("TERM");
    crate::support::assert_exit(&finished, 0);
}

//! The container image (deploy/container), run with podman: published port, IDs served, SIGTERM
//! (`podman stop`) ends it with exit status 0 and the mark persisted in the volume, a new
//! container on the same volume serves above it. Needs root and an image: scripts/test builds
//! it with `deploy/container/build` and passes its reference in `SNOWFLAKE_TEST_IMAGE` (this
//! test target is not part of a plain `cargo test`).

#[allow(dead_code, unused_imports)]
mod support;

use snowflake_testkit::ports::free_port;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// podman with a containers.conf of the test's own (COMPONENTS.md: `podman run` needs runc and
/// the ulimits set; nothing in /etc changes).
struct Podman {
    conf: PathBuf,
    _dir: tempfile::TempDir,
    /// What to remove at the end: containers, then volumes.
    containers: Vec<String>,
    volumes: Vec<String>,
}

impl Podman {
    fn new() -> Podman {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("containers.conf");
        std::fs::write(
            &conf,
            "[containers]\ndefault_ulimits = [\"nofile=20000:20000\", \"nproc=32768:32768\"]\n[engine]\nruntime = \"runc\"\n",
        )
        .unwrap();
        Podman {
            conf,
            _dir: dir,
            containers: Vec::new(),
            volumes: Vec::new(),
        }
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new("podman")
            .env("CONTAINERS_CONF", &self.conf)
            .args(args)
            .output()
            .expect("podman (scripts/test installs it)")
    }

    /// Runs podman and returns its stdout, trimmed; panics with its stderr on failure.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "podman {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        for c in &self.containers {
            let _ = self.run(&["rm", "--force", "--time", "0", c]);
        }
        for v in &self.volumes {
            let _ = self.run(&["volume", "rm", "--force", v]);
        }
    }
}

fn wait_ready(addr: SocketAddr, podman: &Podman, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if support::try_get(addr, "/readyz").is_ok_and(|r| r.status == 200) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not ready after 30 s; logs:\n{}",
            podman.ok(&["logs", name])
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The mark in the volume's state file, in ms.
fn mark_in(volume_dir: &Path) -> u64 {
    let text = std::fs::read_to_string(volume_dir.join("node-3-4.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    json["high_water_ms"]
        .as_u64()
        .unwrap_or_else(|| panic!("{json}"))
}

#[test]
fn the_image_serves_stops_cleanly_and_restarts_above_its_mark() {
    let image = std::env::var("SNOWFLAKE_TEST_IMAGE").expect(
        "SNOWFLAKE_TEST_IMAGE: build the image first (IMAGE=$(deploy/container/build | tail -1)), as scripts/test does",
    );
    let mut podman = Podman::new();
    let config = podman.ok(&[
        "image",
        "inspect",
        "--format",
        "{{.Config.User}} {{.Config.Healthcheck}} {{.Size}}",
        &image,
    ]);
    let mut fields = config.split_whitespace();
    assert_eq!(fields.next(), Some("65532:65532"), "{config}");
    assert_eq!(fields.next(), Some("<nil>"), "no HEALTHCHECK: {config}");
    let size: u64 = fields.next().and_then(|s| s.parse().ok()).unwrap();
    eprintln!("image {image}: {size} bytes");
    assert!(size < 64 << 20, "{size} bytes");

    let tag = format!("snowflake-test-{}", std::process::id());
    let volume = format!("{tag}-state");
    podman.ok(&["volume", "create", &volume]);
    podman.volumes.push(volume.clone());
    let volume_dir =
        PathBuf::from(podman.ok(&["volume", "inspect", "--format", "{{.Mountpoint}}", &volume]));

    let mut last_id = 0u64;
    for round in 0..2 {
        let name = format!("{tag}-{round}");
        let port = free_port();
        podman.ok(&[
            "run",
            "--detach",
            "--name",
            &name,
            "--publish",
            &format!("127.0.0.1:{port}:8080"),
            "--volume",
            &format!("{volume}:/var/lib/snowflake"),
            &image,
            "serve",
            "--datacenter-id",
            "3",
            "--worker-id",
            "4",
        ]);
        podman.containers.push(name.clone());
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        wait_ready(addr, &podman, &name);
        let ids = support::get(addr, "/v1/ids?count=100").ids();
        assert_eq!(ids.len(), 100);
        assert!(
            ids[0] > last_id,
            "round {round}: {} is not above the last ID before the restart, {last_id}",
            ids[0]
        );
        last_id = *ids.last().unwrap();
        // The process runs as the image's user, not root.
        let user = podman.ok(&["top", &name, "user"]);
        assert!(!user.contains("root"), "{user}");

        // SIGTERM: drained, the shutdown mark persisted in the volume, exit status 0.
        podman.ok(&["stop", "--time", "20", &name]);
        let code = podman.ok(&["inspect", "--format", "{{.State.ExitCode}}", &name]);
        assert_eq!(code, "0", "logs:\n{}", podman.ok(&["logs", &name]));
        let logs = podman.run(&["logs", &name]);
        let logs = String::from_utf8_lossy(&logs.stderr).into_owned()
            + &String::from_utf8_lossy(&logs.stdout);
        assert!(logs.contains("high-water mark persisted"), "{logs}");
        let mark = mark_in(&volume_dir);
        assert!(
            mark >= support::timestamp_ms(last_id),
            "mark {mark} below the last ID's time {}",
            support::timestamp_ms(last_id)
        );
    }
}

/// The static binary resolves host names inside the image (which has no libc and no NSS
/// modules): a node given its etcd by name (as a Kubernetes Service name would be) leases its
/// pair. The name comes from the container's /etc/hosts (`--add-host`), read by glibc's built-in
/// `files` source; the `dns` source is built in the same way.
#[test]
fn the_static_binary_resolves_the_etcd_host_name_in_the_image() {
    let image = std::env::var("SNOWFLAKE_TEST_IMAGE").expect("SNOWFLAKE_TEST_IMAGE (scripts/test)");
    let mut podman = Podman::new();
    let dir = tempfile::tempdir().unwrap();
    let (client, peer) = (free_port(), free_port());
    let mut etcd = Command::new("etcd")
        .arg("--data-dir")
        .arg(dir.path().join("etcd"))
        .args([
            "--listen-client-urls",
            &format!("http://127.0.0.1:{client}"),
            "--advertise-client-urls",
            &format!("http://127.0.0.1:{client}"),
            "--listen-peer-urls",
            &format!("http://127.0.0.1:{peer}"),
            "--initial-advertise-peer-urls",
            &format!("http://127.0.0.1:{peer}"),
            "--initial-cluster",
            &format!("default=http://127.0.0.1:{peer}"),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("etcd (scripts/test installs etcd-server)");
    let name = format!("snowflake-dns-{}", std::process::id());
    let port = free_port();
    podman.ok(&[
        "run",
        "--detach",
        "--name",
        &name,
        "--network",
        "host",
        "--add-host",
        "etcd.snowflake.test:127.0.0.1",
        &image,
        "serve",
        "--etcd-endpoints",
        &format!("http://etcd.snowflake.test:{client}"),
        "--http-addr",
        &format!("127.0.0.1:{port}"),
        "--grpc-addr",
        "off",
        "--datacenter-id",
        "5",
    ]);
    podman.containers.push(name.clone());
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    wait_ready(addr, &podman, &name);
    let info = support::get(addr, "/v1/info").json();
    assert_eq!(info["identity_source"], "etcd", "{info}");
    assert_eq!(info["lease"]["state"], "held", "{info}");
    assert_eq!(info["datacenter_id"], 5, "{info}");
    podman.ok(&["stop", "--time", "20", &name]);
    let _ = etcd.kill();
    let _ = etcd.wait();
}

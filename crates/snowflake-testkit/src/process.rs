//! Child processes of tests: signals by name, continuing a stopped child, draining a pipe.

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;

/// `kill -NAME pid`, which must succeed.
pub fn send_signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{name} {pid} failed");
}

/// SIGCONT, best effort, so that a stopped process dies at once when killed.
pub fn continue_process(child: &Child) {
    let _ = Command::new("kill")
        .arg("-CONT")
        .arg(child.id().to_string())
        .stderr(Stdio::null())
        .status();
}

/// Reads a child's pipe to its end on a thread of its own, so the child never blocks on it.
pub fn drain(mut pipe: impl Read + Send + 'static) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        bytes
    })
}

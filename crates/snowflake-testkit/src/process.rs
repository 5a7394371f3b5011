//! Child processes of tests: signals by name (through `kill(2)`), continuing a stopped child, draining a pipe.

use rustix::process::{Pid, Signal, kill_process};
use std::io::Read;
use std::process::Child;
use std::thread::JoinHandle;

/// The signal named `name` (`TERM`, `INT`, `KILL`, `STOP`, `CONT`, `HUP`, `QUIT`, `USR1`,
/// `USR2`); panics naming those for any other.
pub fn signal_named(name: &str) -> Signal {
    match name {
        "TERM" => Signal::TERM,
        "INT" => Signal::INT,
        "KILL" => Signal::KILL,
        "STOP" => Signal::STOP,
        "CONT" => Signal::CONT,
        "HUP" => Signal::HUP,
        "QUIT" => Signal::QUIT,
        "USR1" => Signal::USR1,
        "USR2" => Signal::USR2,
        _ => panic!(
            "no signal named {name:?}: use TERM, INT, KILL, STOP, CONT, HUP, QUIT, USR1 or USR2"
        ),
    }
}

/// Sends the signal `name` (see [`signal_named`]) to `pid`, which must succeed (`kill(2)`, no
/// `kill` command needed).
pub fn send_signal(pid: u32, name: &str) {
    let signal = signal_named(name);
    let process = i32::try_from(pid)
        .ok()
        .and_then(Pid::from_raw)
        .unwrap_or_else(|| panic!("not a process id: {pid}"));
    kill_process(process, signal).unwrap_or_else(|e| panic!("kill -{name} {pid}: {e}"));
}

/// SIGCONT, best effort, so that a stopped process dies at once when killed.
pub fn continue_process(child: &Child) {
    if let Some(process) = i32::try_from(child.id()).ok().and_then(Pid::from_raw) {
        let _ = kill_process(process, Signal::CONT);
    }
}

/// Reads a child's pipe to its end on a thread of its own, so the child never blocks on it.
pub fn drain(mut pipe: impl Read + Send + 'static) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        bytes
    })
}

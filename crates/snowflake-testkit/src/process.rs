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

/// Waits (at most `within`) until every thread of `pid` is stopped (state `T` in
/// `/proc/<pid>/task/*/stat`); false if one still runs then. `kill(2)` returns once SIGSTOP is
/// sent, not once it took effect: a thread already running on another core keeps running
/// until it next enters the kernel, and can answer a request meanwhile.
pub fn wait_stopped(pid: u32, within: std::time::Duration) -> bool {
    let deadline = std::time::Instant::now() + within;
    let task = format!("/proc/{pid}/task");
    loop {
        let stopped = std::fs::read_dir(&task).is_ok_and(|threads| {
            threads.flatten().all(|thread| {
                std::fs::read_to_string(thread.path().join("stat")).is_ok_and(|stat| {
                    // `pid (comm) S ...`: the state follows the last `)` (comm may hold one).
                    stat.rsplit_once(')')
                        .and_then(|(_, rest)| rest.trim_start().chars().next())
                        .is_some_and(|state| state == 'T' || state == 't')
                })
            })
        });
        if stopped {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
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

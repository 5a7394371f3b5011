//! systemd's readiness protocol, for `Type=notify` units (deploy/systemd/snowflake.service):
//! `READY=1` once the node can issue IDs (when `/readyz` says 200, not when the sockets are
//! bound), a `STATUS=` line whenever readiness changes (what `systemctl status` shows), and
//! `STOPPING=1` when the drain starts. Without `NOTIFY_SOCKET` in the environment nothing is
//! sent.

use crate::node::Node;
use sd_notify::NotifyState;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How often readiness is looked at.
const POLL: Duration = Duration::from_millis(100);
/// How often an unchanged status (its numbers aside) is sent again.
const REFRESH: Duration = Duration::from_secs(5);

fn enabled() -> bool {
    std::env::var_os("NOTIFY_SOCKET").is_some()
}

fn send(states: &[NotifyState<'_>]) {
    if let Err(err) = sd_notify::notify(false, states) {
        tracing::warn!(error = %err, "cannot notify systemd (NOTIFY_SOCKET)");
    }
}

/// Follows the node's readiness until `stop` flips: `READY=1` the first time it is ready,
/// `STATUS=` at every change.
pub async fn watch(node: Arc<Node>, mut stop: watch::Receiver<bool>) {
    if !enabled() {
        return;
    }
    let mut ready_sent = false;
    // The last status sent, without its numbers ("… 2962 ms from now" changes every poll),
    // and when: a status whose words stay the same is refreshed every few seconds only.
    let mut last: Option<(String, tokio::time::Instant)> = None;
    loop {
        let (ready, status) = match node.readiness() {
            Ok(()) => (true, "ready: issuing ids".to_owned()),
            Err(err) => (false, format!("not ready: {err}")),
        };
        let words: String = status.chars().filter(|c| !c.is_ascii_digit()).collect();
        let due = match &last {
            None => true,
            Some((w, at)) => *w != words || at.elapsed() >= REFRESH,
        };
        if due || (ready && !ready_sent) {
            let mut states = vec![NotifyState::Status(&status)];
            if ready && !ready_sent {
                states.push(NotifyState::Ready);
                ready_sent = true;
            }
            send(&states);
            last = Some((words, tokio::time::Instant::now()));
        }
        tokio::select! {
            () = tokio::time::sleep(POLL) => {}
            _ = stop.changed() => return,
        }
    }
}

/// The drain starts: `STOPPING=1`.
pub fn stopping() {
    if enabled() {
        send(&[
            NotifyState::Stopping,
            NotifyState::Status("stopping: finishing in-flight requests"),
        ]);
    }
}

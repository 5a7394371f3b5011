//! systemd's readiness protocol for the keeper's unit (deploy/systemd/snowflake-pg-keeper.service,
//! `Type=notify`): `READY=1` once the database has its first grant, `STOPPING=1` when the
//! goodbye starts. Without `NOTIFY_SOCKET` nothing is sent.

use crate::database::Identity;
use sd_notify::NotifyState;

fn send(states: &[NotifyState<'_>]) {
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return;
    }
    if let Err(err) = sd_notify::notify(false, states) {
        tracing::warn!(error = %err, "cannot notify systemd (NOTIFY_SOCKET)");
    }
}

/// The database has its first grant.
pub fn ready(identity: &Identity) {
    let status = format!("granting: the database issues ids as {identity}");
    send(&[NotifyState::Ready, NotifyState::Status(&status)]);
}

/// Waiting for something (the database, its promotion), in words.
pub fn status(text: &str) {
    send(&[NotifyState::Status(text)]);
}

/// The goodbye starts.
pub fn stopping() {
    send(&[NotifyState::Stopping]);
}

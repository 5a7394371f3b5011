//! Test certificates (the test kit's, made in-process): a CA, server certificates for
//! 127.0.0.1/localhost, and client certificates, in a directory removed when dropped.

use snowflake_testkit::certs::{self, LOOPBACK, Usage};
use std::path::PathBuf;

/// A directory of certificates; removed when dropped.
#[derive(Debug)]
pub struct Certs {
    dir: tempfile::TempDir,
}

impl Certs {
    /// A CA named `ca` (files `ca.crt`, `ca.key`).
    pub fn new() -> Certs {
        let certs = Certs {
            dir: tempfile::tempdir().expect("temp dir"),
        };
        certs.ca("ca");
        certs
    }

    /// The path of a file in the directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Another CA, `NAME.crt`/`NAME.key`.
    pub fn ca(&self, name: &str) {
        certs::ca(self.dir.path(), name, name, 3650).unwrap();
    }

    /// A certificate `NAME.crt`/`NAME.key` with common name `cn`, signed by the CA `ca`, valid
    /// for `days`; `server`: for 127.0.0.1 and localhost, else a client certificate.
    pub fn issue(&self, name: &str, cn: &str, ca: &str, server: bool, days: u32) {
        let usage = if server {
            Usage::Server(LOOPBACK)
        } else {
            Usage::Client
        };
        certs::issue(self.dir.path(), name, cn, ca, usage, days).unwrap();
    }

    /// [`Certs::issue`] for a server certificate that expired yesterday: signed three days
    /// back, valid for two days.
    pub fn issue_expired(&self, name: &str, ca: &str) {
        certs::issue_backdated(
            self.dir.path(),
            name,
            "expired",
            ca,
            Usage::Server(LOOPBACK),
            3,
            2,
        )
        .unwrap();
    }
}

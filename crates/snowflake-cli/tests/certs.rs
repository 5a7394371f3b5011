//! Test certificates, made with the `openssl` command line (COMPONENTS.md §7): a CA, server
//! certificates for 127.0.0.1/localhost, and client certificates.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A directory of certificates; removed when dropped.
#[derive(Debug)]
pub struct Certs {
    dir: tempfile::TempDir,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl is installed (scripts/test installs it)");
    assert!(
        out.status.success(),
        "openssl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
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
        openssl(
            self.dir.path(),
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.crt"),
                "-days",
                "3650",
                "-subj",
                &format!("/CN={name}"),
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
        );
    }

    /// A certificate `NAME.crt`/`NAME.key` with common name `cn`, signed by the CA `ca`, valid
    /// for `days`; `server`: for 127.0.0.1 and localhost, else a client certificate.
    pub fn issue(&self, name: &str, cn: &str, ca: &str, server: bool, days: u32) {
        let dir = self.dir.path();
        openssl(
            dir,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
                "-subj",
                &format!("/CN={cn}"),
            ],
        );
        let ext = if server {
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        } else {
            "extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        };
        std::fs::write(dir.join(format!("{name}.ext")), ext).unwrap();
        let mut args = vec![
            "x509".to_owned(),
            "-req".into(),
            "-in".into(),
            format!("{name}.csr"),
            "-CA".into(),
            format!("{ca}.crt"),
            "-CAkey".into(),
            format!("{ca}.key"),
            "-CAcreateserial".into(),
            "-out".into(),
            format!("{name}.crt"),
            "-extfile".into(),
            format!("{name}.ext"),
        ];
        args.extend(["-days".into(), days.to_string()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        openssl(dir, &args);
    }

    /// [`Certs::issue`] for a server certificate that expired yesterday: signed with openssl's
    /// clock three days back (libfaketime), valid for two days.
    pub fn issue_expired(&self, name: &str, ca: &str) {
        let out = Command::new("openssl")
            .args(["req", "-newkey", "rsa:2048", "-nodes", "-keyout"])
            .arg(format!("{name}.key"))
            .arg("-out")
            .arg(format!("{name}.csr"))
            .args(["-subj", "/CN=expired"])
            .current_dir(self.dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::write(
            self.dir.path().join(format!("{name}.ext")),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
        )
        .unwrap();
        let out = Command::new("openssl")
            .env("LD_PRELOAD", crate::support::libfaketime())
            .env("FAKETIME", "-3d")
            .args(["x509", "-req", "-in"])
            .arg(format!("{name}.csr"))
            .arg("-CA")
            .arg(format!("{ca}.crt"))
            .arg("-CAkey")
            .arg(format!("{ca}.key"))
            .args(["-CAcreateserial", "-days", "2", "-out"])
            .arg(format!("{name}.crt"))
            .arg("-extfile")
            .arg(format!("{name}.ext"))
            .current_dir(self.dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

//! Test certificates, made with the `openssl` command line (COMPONENTS.md §7) in a directory of
//! the caller's: a CA (`NAME.crt`, `NAME.key`) and the server and client certificates it signs
//! (RSA 2048, as most deployments have). Used by the CLI's tests, the comparison harness and the
//! fault campaign; never part of the product.
//!
//! Errors name the openssl command and what it printed; a missing openssl says which package
//! installs it.

use std::io;
use std::path::Path;
use std::process::Command;

/// What a certificate is for.
#[derive(Debug, Clone, Copy)]
pub enum Usage<'a> {
    /// A server's, for these subject alternative names (`IP:127.0.0.1`, `DNS:localhost`, ...);
    /// also good for client authentication (etcd's gateway dials members with its server
    /// certificate).
    Server(&'a [&'a str]),
    /// A client's (TLS client authentication only).
    Client,
}

/// The subject alternative names of a server on loopback.
pub const LOOPBACK: &[&str] = &["IP:127.0.0.1", "DNS:localhost"];

/// Runs `openssl ARGS` in `dir`; `configure` may set its environment (libfaketime, say).
fn openssl(dir: &Path, args: &[&str], configure: &dyn Fn(&mut Command)) -> io::Result<()> {
    let mut command = Command::new("openssl");
    command.args(args).current_dir(dir);
    configure(&mut command);
    let out = command.output().map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot run openssl ({e}); Debian: apt-get install openssl"),
        )
    })?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "openssl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// A self-signed CA in `dir`: `NAME.crt` and `NAME.key`, common name `cn`, valid for `days`.
pub fn ca(dir: &Path, name: &str, cn: &str, days: u32) -> io::Result<()> {
    openssl(
        dir,
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
            &days.to_string(),
            "-subj",
            &format!("/CN={cn}"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
        &|_| {},
    )
}

/// A certificate in `dir`, `NAME.crt` and `NAME.key` (and its `NAME.csr`, `NAME.ext`), common
/// name `cn`, signed by the CA `ca` (`CA.crt`, `CA.key` in `dir`), valid for `days`.
pub fn issue(
    dir: &Path,
    name: &str,
    cn: &str,
    ca: &str,
    usage: Usage<'_>,
    days: u32,
) -> io::Result<()> {
    issue_with(dir, name, cn, ca, usage, days, &|_| {})
}

/// [`issue`], with `configure` setting the environment of the openssl that signs (for a
/// certificate dated in the past: libfaketime).
pub fn issue_with(
    dir: &Path,
    name: &str,
    cn: &str,
    ca: &str,
    usage: Usage<'_>,
    days: u32,
    configure: &dyn Fn(&mut Command),
) -> io::Result<()> {
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
        &|_| {},
    )?;
    let extensions = match usage {
        Usage::Server(sans) => format!(
            "subjectAltName={}\nextendedKeyUsage=serverAuth,clientAuth\n\
             keyUsage=critical,digitalSignature,keyEncipherment\n",
            sans.join(",")
        ),
        Usage::Client => {
            "extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
                .to_owned()
        }
    };
    std::fs::write(dir.join(format!("{name}.ext")), extensions)?;
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &format!("{ca}.crt"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-out",
            &format!("{name}.crt"),
            "-days",
            &days.to_string(),
            "-extfile",
            &format!("{name}.ext"),
        ],
        configure,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(dir: &Path, name: &str) -> String {
        let out = Command::new("openssl")
            .args(["x509", "-noout", "-text", "-in"])
            .arg(dir.join(name))
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    }

    #[test]
    fn a_ca_signs_a_server_and_a_client_certificate_that_verify() {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path();
        ca(dir, "ca", "test-ca", 2).unwrap();
        issue(dir, "server", "node", "ca", Usage::Server(LOOPBACK), 2).unwrap();
        issue(dir, "client", "operator", "ca", Usage::Client, 2).unwrap();
        for name in ["server.crt", "client.crt"] {
            let out = Command::new("openssl")
                .args(["verify", "-CAfile", "ca.crt", name])
                .current_dir(dir)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let server = text(dir, "server.crt");
        assert!(server.contains("IP Address:127.0.0.1") && server.contains("DNS:localhost"));
        assert!(server.contains("TLS Web Server Authentication"));
        let client = text(dir, "client.crt");
        assert!(client.contains("CN = operator") || client.contains("CN=operator"));
        assert!(!client.contains("TLS Web Server Authentication"));
        // A CA that is not there: the error names openssl's complaint, no panic.
        let err = issue(dir, "x", "x", "missing-ca", Usage::Client, 2).unwrap_err();
        assert!(err.to_string().contains("openssl x509"), "{err}");
    }
}

//! TLS to the service: the CA that signed the nodes' certificates, and a client certificate for
//! nodes that require mutual TLS (`--tls-client-ca` on the server).

use crate::Error;
use crate::pem::{self, PemError};
use std::path::Path;

/// How the client verifies the nodes, and the identity it presents to them.
///
/// ```
/// # fn main() -> Result<(), snowflake_client::Error> {
/// # let dir = std::env::temp_dir();
/// # let ca = dir.join(format!("snowflake-client-doc-{}.pem", std::process::id()));
/// # std::fs::write(&ca, "not a certificate").unwrap();
/// use snowflake_client::Tls;
///
/// // A file that is not PEM is refused with its path and the reason.
/// let err = Tls::from_files(&ca, None).unwrap_err();
/// assert!(err.to_string().contains("no certificate"), "{err}");
/// # std::fs::remove_file(&ca).unwrap();
/// # Ok(())
/// # }
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Tls {
    ca_pem: Vec<u8>,
    identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("Tls")
            .field("mutual", &self.identity.is_some())
            .finish_non_exhaustive()
    }
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>, Error> {
    pem::read_file(path).map_err(|e| Error::Config(format!("{what} {}: {e}", path.display())))
}

fn check_certs(pem: &[u8], what: &str) -> Result<(), Error> {
    match pem::certificates(pem) {
        Ok(_) => Ok(()),
        Err(PemError::NoCertificate) => Err(Error::Config(format!("{what}: no certificate in it"))),
        Err(e) => Err(Error::Config(format!(
            "{what}: not a PEM certificate file ({e})"
        ))),
    }
}

impl Tls {
    /// From PEM bytes: the CA certificate(s), and optionally a client certificate chain and its
    /// private key (mutual TLS).
    pub fn from_pem(ca_pem: Vec<u8>, identity: Option<(Vec<u8>, Vec<u8>)>) -> Result<Tls, Error> {
        check_certs(&ca_pem, "the CA")?;
        if let Some((cert, key)) = &identity {
            check_certs(cert, "the client certificate")?;
            pem::private_key(key).map_err(|e| {
                Error::Config(format!("the client key: not a PEM private key ({e})"))
            })?;
        }
        Ok(Tls { ca_pem, identity })
    }

    /// From files: the CA, and optionally `(certificate, key)` for mutual TLS.
    pub fn from_files(ca: &Path, identity: Option<(&Path, &Path)>) -> Result<Tls, Error> {
        let ca_pem = read(ca, "the CA file")?;
        check_certs(&ca_pem, &format!("the CA file {}", ca.display()))?;
        let identity = match identity {
            None => None,
            Some((cert, key)) => {
                let cert_pem = read(cert, "the client certificate file")?;
                check_certs(
                    &cert_pem,
                    &format!("the client certificate file {}", cert.display()),
                )?;
                let key_pem = read(key, "the client key file")?;
                pem::private_key(&key_pem).map_err(|e| {
                    Error::Config(format!(
                        "the client key file {}: not a PEM private key ({e})",
                        key.display()
                    ))
                })?;
                Some((cert_pem, key_pem))
            }
        };
        Ok(Tls { ca_pem, identity })
    }

    /// Whether a client certificate is presented.
    pub fn is_mutual(&self) -> bool {
        self.identity.is_some()
    }

    /// tonic's settings for the node at `host`.
    pub(crate) fn tonic_config(&self, host: &str) -> tonic::transport::ClientTlsConfig {
        let mut config = tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(&self.ca_pem))
            .domain_name(host);
        if let Some((cert, key)) = &self.identity {
            config = config.identity(tonic::transport::Identity::from_pem(cert, key));
        }
        config
    }
}

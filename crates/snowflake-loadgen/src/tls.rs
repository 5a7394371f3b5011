//! TLS to the service for `snowflake bench`: the CA to trust, and a client certificate for a
//! service that requires mutual TLS (rustls with ring, as the server).

use crate::error::Error;
use rustls_pki_types::{CertificateDer, ServerName};
use snowflake_client::pem;
use std::path::Path;
use std::sync::Arc;

/// The CA certificates and the optional client identity, as PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct BenchTls {
    ca_pem: Vec<u8>,
    identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for BenchTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BenchTls")
            .field("mutual", &self.identity.is_some())
            .finish_non_exhaustive()
    }
}

fn read(path: &Path, flag: &'static str) -> Result<Vec<u8>, Error> {
    pem::read_file(path).map_err(|e| {
        Error::invalid(
            flag,
            "a readable PEM file",
            format!("{} ({e})", path.display()),
        )
    })
}

fn certs(
    pem: &[u8],
    path: &Path,
    flag: &'static str,
) -> Result<Vec<CertificateDer<'static>>, Error> {
    pem::certificates(pem).map_err(|e| {
        Error::invalid(
            flag,
            "a PEM certificate file",
            format!("{} ({e})", path.display()),
        )
    })
}

impl BenchTls {
    /// Reads `--tls-ca`, `--tls-client-cert` and `--tls-client-key`; `None` when none is given.
    pub fn from_files(
        ca: Option<&Path>,
        cert: Option<&Path>,
        key: Option<&Path>,
    ) -> Result<Option<BenchTls>, Error> {
        let Some(ca) = ca else {
            if cert.is_some() || key.is_some() {
                return Err(Error::invalid(
                    "--tls-client-cert",
                    "--tls-ca beside it (the CA to verify the service with)",
                    "no --tls-ca",
                ));
            }
            return Ok(None);
        };
        let ca_pem = read(ca, "--tls-ca")?;
        certs(&ca_pem, ca, "--tls-ca")?;
        let identity = match (cert, key) {
            (Some(cert), Some(key)) => {
                let cert_pem = read(cert, "--tls-client-cert")?;
                certs(&cert_pem, cert, "--tls-client-cert")?;
                let key_pem = read(key, "--tls-client-key")?;
                pem::private_key(&key_pem).map_err(|e| {
                    Error::invalid(
                        "--tls-client-key",
                        "a PEM private key file",
                        format!("{} ({e})", key.display()),
                    )
                })?;
                Some((cert_pem, key_pem))
            }
            (None, None) => None,
            (Some(_), None) => {
                return Err(Error::invalid(
                    "--tls-client-cert",
                    "--tls-client-key beside it",
                    "no --tls-client-key",
                ));
            }
            (None, Some(_)) => {
                return Err(Error::invalid(
                    "--tls-client-key",
                    "--tls-client-cert beside it",
                    "no --tls-client-cert",
                ));
            }
        };
        Ok(Some(BenchTls { ca_pem, identity }))
    }

    /// Whether a client certificate is presented (mutual TLS).
    pub fn is_mutual(&self) -> bool {
        self.identity.is_some()
    }

    /// A rustls client configuration offering `alpn`.
    pub(crate) fn client_config(&self, alpn: &[u8]) -> Result<Arc<rustls::ClientConfig>, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for cert in pem::certificates(&self.ca_pem).map_err(|e| e.to_string())? {
            roots.add(cert).map_err(|e| e.to_string())?;
        }
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots);
        let mut config = match &self.identity {
            Some((cert, key)) => {
                let chain = pem::certificates(cert).map_err(|e| e.to_string())?;
                let key = pem::private_key(key).map_err(|e| e.to_string())?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| e.to_string())?
            }
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![alpn.to_vec()];
        Ok(Arc::new(config))
    }

    /// tonic's TLS settings for the service at `host`.
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

/// The host part of `HOST:PORT` (brackets of an IPv6 address removed), as a TLS server name.
pub(crate) fn server_name(addr: &str) -> Result<ServerName<'static>, String> {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    ServerName::try_from(host.to_owned())
        .map_err(|e| format!("{host:?} is not a TLS server name: {e}"))
}

/// The host part of `HOST:PORT`, for tonic's `domain_name`.
pub(crate) fn host(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

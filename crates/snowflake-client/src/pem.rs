//! PEM files: read with a bound on their size, and the certificates and the private key in
//! them checked. The one PEM loader of the clients (this crate's [`Tls`](crate::Tls) and the
//! load generator's TLS); each caller words the error for its own setting.

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::io::Read;
use std::path::Path;

/// Larger PEM files are refused rather than read whole.
pub const MAX_PEM_BYTES: u64 = 1024 * 1024;

/// Why a PEM file or its contents cannot be used; the text is the reason alone (the caller
/// names the file or the setting).
#[derive(Debug, thiserror::Error)]
pub enum PemError {
    /// The file cannot be read.
    #[error("{0}")]
    Read(#[from] std::io::Error),
    /// The file is larger than [`MAX_PEM_BYTES`].
    #[error("larger than 1 MiB")]
    TooLarge,
    /// The contents are not valid PEM of the kind asked for.
    #[error("{0}")]
    Parse(rustls_pki_types::pem::Error),
    /// Valid PEM, but without a certificate.
    #[error("no certificate in it")]
    NoCertificate,
}

/// Reads a PEM file of at most [`MAX_PEM_BYTES`].
pub fn read_file(path: &Path) -> Result<Vec<u8>, PemError> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(MAX_PEM_BYTES + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_PEM_BYTES {
        return Err(PemError::TooLarge);
    }
    Ok(bytes)
}

/// The certificates in `pem` (at least one).
pub fn certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, PemError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(PemError::Parse)?;
    if certs.is_empty() {
        return Err(PemError::NoCertificate);
    }
    Ok(certs)
}

/// The (first) private key in `pem`.
pub fn private_key(pem: &[u8]) -> Result<PrivateKeyDer<'static>, PemError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(PemError::Parse)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_what_is_not_a_certificate_or_a_key_and_says_why() {
        assert_eq!(
            certificates(b"not pem").unwrap_err().to_string(),
            "no certificate in it"
        );
        assert!(private_key(b"not pem").is_err());
        let dir = std::env::temp_dir().join(format!("snowflake-pem-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let big = dir.join("big.pem");
        std::fs::write(&big, vec![b'a'; (MAX_PEM_BYTES + 1) as usize]).unwrap();
        assert_eq!(
            read_file(&big).unwrap_err().to_string(),
            "larger than 1 MiB"
        );
        assert!(matches!(
            read_file(&dir.join("missing.pem")),
            Err(PemError::Read(_))
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

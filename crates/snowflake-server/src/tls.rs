//! TLS on the HTTP, gRPC and RESP listeners (SPEC §8 "Security"): rustls with the ring
//! provider, no OpenSSL. The handshake itself is `listen`'s, one path for every listener.
//!
//! - `--tls-cert`/`--tls-key` (PEM): HTTPS on the HTTP address (ALPN `http/1.1`), gRPC over TLS
//!   on the gRPC address (ALPN `h2`). `--tls-client-ca`: both require a client certificate
//!   signed by one of those CAs (mutual TLS).
//! - **Rotation.** The files are read again every [`RELOAD_INTERVAL`]; when their contents
//!   changed, a new configuration is built and used for the connections accepted from then on
//!   (open connections keep theirs: nothing is dropped). Paths are opened anew each time, so a
//!   Kubernetes `..data` symlink swap is seen like any replacement. A pair that does not load (a
//!   key that does not match the certificate because only one of the two was replaced yet, an
//!   expired certificate, a file half written) keeps the previous configuration, is logged once
//!   per distinct error and counted, and is tried again at the next interval.
//! - At start the same problems stop the service with one line naming the file.

use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

/// How often the certificate files are checked for a renewal.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(1);
/// Larger certificate, key or CA files are refused rather than read.
const MAX_PEM_BYTES: u64 = 1024 * 1024;

/// The application protocol a listener's TLS handshake offers (ALPN).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alpn {
    /// `http/1.1`: the HTTP listener.
    Http1,
    /// `h2`: the gRPC listener.
    H2,
    /// None offered: the RESP listener (Redis clients offer none).
    None,
}

/// The files of `--tls-cert`, `--tls-key` and `--tls-client-ca`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain (PEM), the server's certificate first.
    pub cert: PathBuf,
    /// Its private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// The CAs client certificates must chain to; `None`: no client certificates asked.
    pub client_ca: Option<PathBuf>,
}

/// The listeners' TLS configuration, reloaded when its files change.
#[derive(Debug)]
pub struct Tls {
    files: TlsFiles,
    current: RwLock<Arc<Loaded>>,
    /// The last reload error, logged once.
    last_error: Mutex<Option<String>>,
    reloads_ok: AtomicU64,
    reloads_failed: AtomicU64,
    /// The serving certificate's not-after time (Unix seconds).
    not_after: AtomicI64,
}

/// One loaded configuration, and the file contents it came from.
#[derive(Debug)]
struct Loaded {
    contents: Vec<Vec<u8>>,
    http: Arc<ServerConfig>,
    grpc: Arc<ServerConfig>,
    /// RESP: no ALPN (Redis clients offer none).
    resp: Arc<ServerConfig>,
    not_after: i64,
}

impl Tls {
    /// Loads the files; `now_unix` (seconds) tells an expired certificate.
    pub fn load(files: TlsFiles, now_unix: i64) -> Result<Tls, String> {
        let contents = read_all(&files)?;
        let loaded = build(&files, contents, now_unix)?;
        warn_if_world_readable(&files.key);
        Ok(Tls {
            not_after: AtomicI64::new(loaded.not_after),
            files,
            current: RwLock::new(Arc::new(loaded)),
            last_error: Mutex::new(None),
            reloads_ok: AtomicU64::new(0),
            reloads_failed: AtomicU64::new(0),
        })
    }

    /// The files.
    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    fn current(&self) -> Arc<Loaded> {
        Arc::clone(&self.current.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// An acceptor offering `alpn`, with the current configuration.
    pub fn acceptor(&self, alpn: Alpn) -> TlsAcceptor {
        let current = self.current();
        TlsAcceptor::from(Arc::clone(match alpn {
            Alpn::Http1 => &current.http,
            Alpn::H2 => &current.grpc,
            Alpn::None => &current.resp,
        }))
    }

    /// Whether client certificates are required.
    pub fn mutual(&self) -> bool {
        self.files.client_ca.is_some()
    }

    /// The serving certificate's not-after time (Unix seconds).
    pub fn not_after_unix(&self) -> i64 {
        self.not_after.load(Ordering::Relaxed)
    }

    /// Successful and failed reloads so far.
    pub fn reloads(&self) -> (u64, u64) {
        (
            self.reloads_ok.load(Ordering::Relaxed),
            self.reloads_failed.load(Ordering::Relaxed),
        )
    }

    /// Reads the files again and, if they changed and load, makes them current. Returns
    /// whether a new configuration was loaded; a change that does not load keeps the old one.
    pub fn reload(&self, now_unix: i64) -> Result<bool, String> {
        let result = read_all(&self.files).and_then(|contents| {
            if contents == self.current().contents {
                return Ok(None);
            }
            build(&self.files, contents, now_unix).map(Some)
        });
        match result {
            Ok(None) => {
                *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = None;
                Ok(false)
            }
            Ok(Some(loaded)) => {
                self.not_after.store(loaded.not_after, Ordering::Relaxed);
                *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(loaded);
                *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = None;
                self.reloads_ok.fetch_add(1, Ordering::Relaxed);
                warn_if_world_readable(&self.files.key);
                tracing::info!(
                    cert = %self.files.cert.display(),
                    not_after = %format_unix_secs(self.not_after_unix()),
                    "loaded the renewed TLS certificate"
                );
                Ok(true)
            }
            Err(err) => {
                let mut last = self.last_error.lock().unwrap_or_else(|p| p.into_inner());
                // Counted once per distinct failure: a pair caught half renewed for a few
                // seconds is one failed reload, not one per interval.
                if last.as_deref() != Some(err.as_str()) {
                    self.reloads_failed.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(error = %err, "the renewed TLS files do not load; keeping the current certificate and trying again");
                    *last = Some(err.clone());
                }
                Err(err)
            }
        }
    }
}

/// Reloads `tls` every [`RELOAD_INTERVAL`] until `shutdown` flips.
pub async fn watch(tls: Arc<Tls>, mut shutdown: watch::Receiver<bool>) {
    let mut ticks = tokio::time::interval(RELOAD_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
        let tls = Arc::clone(&tls);
        // File reads: off the runtime's threads.
        let _ = tokio::task::spawn_blocking(move || tls.reload(unix_now())).await;
    }
}

/// The wall clock in Unix seconds.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The contents of the certificate, the key and the client CA file, in that order.
fn read_all(files: &TlsFiles) -> Result<Vec<Vec<u8>>, String> {
    let mut contents = vec![
        read_pem_file(&files.cert, "--tls-cert")?,
        read_pem_file(&files.key, "--tls-key")?,
    ];
    if let Some(ca) = &files.client_ca {
        contents.push(read_pem_file(ca, "--tls-client-ca")?);
    }
    Ok(contents)
}

/// Reads a whole PEM file, at most [`MAX_PEM_BYTES`].
pub fn read_pem_file(path: &Path, flag: &str) -> Result<Vec<u8>, String> {
    let file = std::fs::File::open(path)
        .map_err(|e| format!("cannot read {flag} {}: {e}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(MAX_PEM_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {flag} {}: {e}", path.display()))?;
    if bytes.len() as u64 > MAX_PEM_BYTES {
        return Err(format!(
            "{flag} {} is larger than {MAX_PEM_BYTES} bytes; expected a PEM file",
            path.display()
        ));
    }
    Ok(bytes)
}

/// The certificates of a PEM file; an error names the file when it holds none.
pub fn parse_certs(
    bytes: &[u8],
    path: &Path,
    flag: &str,
) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(bytes)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{flag} {} is not valid PEM: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{flag} {} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
            path.display()
        ));
    }
    Ok(certs)
}

/// The private key of a PEM file.
pub fn parse_key(bytes: &[u8], path: &Path, flag: &str) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_slice(bytes).map_err(|e| {
        format!(
            "{flag} {} holds no usable PEM private key (PKCS#8, PKCS#1 or SEC1): {e}",
            path.display()
        )
    })
}

/// The not-before and not-after times (Unix seconds) of a DER certificate.
fn validity(cert: &CertificateDer<'_>, path: &Path) -> Result<(i64, i64), String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).map_err(|e| {
        format!(
            "--tls-cert {}: the first certificate does not parse: {e}",
            path.display()
        )
    })?;
    let validity = parsed.validity();
    Ok((
        validity.not_before.timestamp(),
        validity.not_after.timestamp(),
    ))
}

fn build(files: &TlsFiles, contents: Vec<Vec<u8>>, now_unix: i64) -> Result<Loaded, String> {
    let certs = parse_certs(&contents[0], &files.cert, "--tls-cert")?;
    let key = parse_key(&contents[1], &files.key, "--tls-key")?;
    let (not_before, not_after) = validity(&certs[0], &files.cert)?;
    if not_after < now_unix {
        return Err(format!(
            "the certificate in --tls-cert {} expired at {}",
            files.cert.display(),
            format_unix_secs(not_after)
        ));
    }
    if not_before > now_unix {
        tracing::warn!(
            cert = %files.cert.display(),
            not_before = %format_unix_secs(not_before),
            "the TLS certificate is not valid yet (clients will refuse it until then)"
        );
    }
    let provider = provider();
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("cannot set up TLS: {e}"))?;
    let builder = match (&files.client_ca, contents.get(2)) {
        (Some(ca_path), Some(ca)) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in parse_certs(ca, ca_path, "--tls-client-ca")? {
                roots.add(cert).map_err(|e| {
                    format!(
                        "--tls-client-ca {} holds a certificate that is not a usable CA: {e}",
                        ca_path.display()
                    )
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| {
                    format!(
                        "--tls-client-ca {} cannot verify clients: {e}",
                        ca_path.display()
                    )
                })?;
            builder.with_client_cert_verifier(verifier)
        }
        _ => builder.with_no_client_auth(),
    };
    let config = builder.with_single_cert(certs, key).map_err(|e| {
        format!(
            "the key in --tls-key {} does not go with the certificate in --tls-cert {}: {e}",
            files.key.display(),
            files.cert.display()
        )
    })?;
    let with_alpn = |protocol: &[u8]| {
        let mut config = config.clone();
        config.alpn_protocols = vec![protocol.to_vec()];
        Arc::new(config)
    };
    Ok(Loaded {
        http: with_alpn(b"http/1.1"),
        grpc: with_alpn(b"h2"),
        resp: Arc::new(config.clone()),
        contents,
        not_after,
    })
}

/// Warns when the key file can be read by anyone.
fn warn_if_world_readable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = std::fs::metadata(path)
        && meta.permissions().mode() & 0o004 != 0
    {
        tracing::warn!(
            key = %path.display(),
            "the TLS key file is readable by every user on this machine; make it 0600 or 0640"
        );
    }
}

/// Unix seconds as RFC 3339 (UTC).
pub fn format_unix_secs(secs: i64) -> String {
    u64::try_from(secs).map_or_else(
        |_| secs.to_string(),
        |s| snowflake_core::format_unix_ms(s.saturating_mul(1000)),
    )
}

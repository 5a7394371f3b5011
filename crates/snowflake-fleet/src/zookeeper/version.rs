//! The ZooKeeper server's version, read with its `srvr` command at registration and checked
//! against the one the guarantee rests on: 3.8.4 or later in 3.8 (3.9.2 or later in 3.9). Older
//! servers can lose a write they acknowledged across a resync (ZOOKEEPER-4785; a fault campaign
//! against Debian's 3.8.0 saw it lose a pair's high-water mark, RELIABILITY.md), so a node
//! registering with one warns, naming both versions.

use crate::config::{ClientTls, ZooKeeperConfig};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, pem::PemObject};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// The versions the guarantee needs, as the warning and the docs spell them.
pub(crate) const REQUIRED: &str = "3.8.4 (or 3.9.2 in 3.9)";

/// How long asking one server may take.
const ASK_TIMEOUT: Duration = Duration::from_secs(2);

/// The most of `srvr`'s answer read (it is a few hundred bytes).
const MAX_ANSWER_BYTES: u64 = 16 * 1024;

/// A ZooKeeper server's version, `major.minor.patch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct ServerVersion {
    /// 3 for every release so far.
    pub(crate) major: u32,
    /// The release line (8 for 3.8).
    pub(crate) minor: u32,
    /// The patch release.
    pub(crate) patch: u32,
}

impl fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl ServerVersion {
    /// The version in `srvr`'s answer (`Zookeeper version: 3.8.0-…, built on …`).
    pub(crate) fn from_srvr(answer: &str) -> Option<ServerVersion> {
        let line = answer
            .lines()
            .find_map(|line| line.trim().strip_prefix("Zookeeper version:"))?;
        let text: String = line
            .trim()
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        let mut parts = text.split('.').map(str::parse::<u32>);
        let (Some(Ok(major)), Some(Ok(minor)), Some(Ok(patch))) =
            (parts.next(), parts.next(), parts.next())
        else {
            return None;
        };
        Some(ServerVersion {
            major,
            minor,
            patch,
        })
    }

    /// Whether the guarantee holds with it: 3.8.4 and later in 3.8, 3.9.2 and later in 3.9,
    /// every later line.
    pub(crate) fn is_supported(self) -> bool {
        let at_least = |major, minor, patch| {
            self >= ServerVersion {
                major,
                minor,
                patch,
            }
        };
        match (self.major, self.minor) {
            (3, 8) => at_least(3, 8, 4),
            (3, 9) => at_least(3, 9, 2),
            _ => at_least(3, 10, 0),
        }
    }
}

/// Asks every server of `config` its version (all at once, each within [`ASK_TIMEOUT`]) and
/// warns for each one below [`REQUIRED`]. Best effort: a server that does not answer `srvr`
/// (the command is allowed by default, but `4lw.commands.whitelist` can forbid it) is only
/// logged.
pub(super) async fn check_server_version(config: &ZooKeeperConfig) {
    let mut asking = tokio::task::JoinSet::new();
    for (index, server) in config.servers.iter().enumerate() {
        let (server, tls) = (server.clone(), config.tls.clone());
        asking.spawn(async move { (index, ask_version(&server, tls.as_ref()).await) });
    }
    let mut answers: Vec<(usize, Result<ServerVersion, String>)> = asking.join_all().await;
    answers.sort_by_key(|(index, _)| *index);
    for (index, answer) in answers {
        let server = &config.servers[index];
        match answer {
            Ok(version) if version.is_supported() => {
                tracing::debug!(%server, %version, "the ZooKeeper server's version is supported");
            }
            Ok(version) => tracing::warn!(
                %server,
                %version,
                required = REQUIRED,
                "ZooKeeper at {server} is version {version}, below {REQUIRED} that this service \
                 needs: older servers can lose a write they acknowledged across a resync \
                 (ZOOKEEPER-4785), and with it a pair's high-water mark, so a node taking the \
                 pair over could repeat ids; upgrade ZooKeeper (README, \"Run ZooKeeper 3.8.4 or \
                 later\")"
            ),
            Err(error) => tracing::info!(
                %server,
                %error,
                "cannot read the ZooKeeper server's version (its srvr command); it must be {REQUIRED} or later"
            ),
        }
    }
}

/// `srvr` on `server` (over TLS with `tls`), within [`ASK_TIMEOUT`].
async fn ask_version(server: &str, tls: Option<&ClientTls>) -> Result<ServerVersion, String> {
    let ask = async {
        let stream = TcpStream::connect(server)
            .await
            .map_err(|e| format!("cannot connect: {e}"))?;
        let answer = match tls {
            None => srvr(stream).await?,
            Some(tls) => {
                let connector = tokio_rustls::TlsConnector::from(Arc::new(client_config(tls)?));
                let host = server.rsplit_once(':').map_or(server, |(host, _)| host);
                let host = host.trim_start_matches('[').trim_end_matches(']');
                let name = ServerName::try_from(host.to_owned())
                    .map_err(|e| format!("{host:?} is not a server name: {e}"))?;
                let stream = connector
                    .connect(name, stream)
                    .await
                    .map_err(|e| format!("TLS: {e}"))?;
                srvr(stream).await?
            }
        };
        ServerVersion::from_srvr(&answer).ok_or_else(|| {
            format!(
                "no version in its answer {:?}",
                answer.chars().take(100).collect::<String>()
            )
        })
    };
    tokio::time::timeout(ASK_TIMEOUT, ask)
        .await
        .map_err(|_| format!("no answer within {} ms", ASK_TIMEOUT.as_millis()))?
}

/// Sends `srvr` and reads the answer up to the server's close.
async fn srvr(mut stream: impl AsyncRead + AsyncWrite + Unpin) -> Result<String, String> {
    stream
        .write_all(b"srvr")
        .await
        .map_err(|e| format!("cannot send srvr: {e}"))?;
    stream
        .flush()
        .await
        .map_err(|e| format!("cannot send srvr: {e}"))?;
    let mut answer = Vec::new();
    // The server closes the connection after answering; a TLS peer may skip close_notify.
    let read = (&mut stream)
        .take(MAX_ANSWER_BYTES)
        .read_to_end(&mut answer)
        .await;
    if let Err(err) = read
        && answer.is_empty()
    {
        return Err(format!("cannot read the answer: {err}"));
    }
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

/// The rustls configuration of the fleet's ZooKeeper TLS: its CA, and its client certificate
/// when it has one.
fn client_config(tls: &ClientTls) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&tls.ca_pem) {
        let cert = cert.map_err(|e| format!("--zookeeper-ca: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| format!("--zookeeper-ca: {e}"))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    match &tls.identity {
        None => Ok(builder.with_no_client_auth()),
        Some((cert, key)) => {
            let certs = CertificateDer::pem_slice_iter(cert)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("--zookeeper-cert: {e}"))?;
            let key = PrivateKeyDer::from_pem_slice(key.expose().as_bytes())
                .map_err(|e| format!("--zookeeper-key: {e}"))?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| format!("--zookeeper-cert/--zookeeper-key: {e}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ServerVersion;

    fn version(text: &str) -> Option<ServerVersion> {
        ServerVersion::from_srvr(text)
    }

    #[test]
    fn the_version_is_read_from_srvr() {
        let debian = "Zookeeper version: 3.8.0-11+deb12u2--1, built on 2024-01-01 00:00 UTC\n\
                      Latency min/avg/max: 0/0.0/0\nMode: standalone\n";
        assert_eq!(
            version(debian),
            Some(ServerVersion {
                major: 3,
                minor: 8,
                patch: 0
            })
        );
        assert_eq!(
            version("Zookeeper version: 3.9.2-e454e8c7283100c7caec6dcae2bc82aaecb63b3d, built on")
                .map(|v| v.to_string()),
            Some("3.9.2".into())
        );
        for garbage in ["", "imok", "Zookeeper version: x", "Zookeeper version: 3.8"] {
            assert_eq!(version(garbage), None, "{garbage:?}");
        }
    }

    #[test]
    fn only_versions_without_the_lost_write_are_supported() {
        let supported = |text: &str| {
            version(&format!("Zookeeper version: {text}-1, built on"))
                .unwrap()
                .is_supported()
        };
        for old in ["3.4.14", "3.7.2", "3.8.0", "3.8.3", "3.9.0", "3.9.1"] {
            assert!(!supported(old), "{old}");
        }
        for good in ["3.8.4", "3.8.5", "3.9.2", "3.9.4", "3.10.0", "4.0.0"] {
            assert!(supported(good), "{good}");
        }
    }
}

//! Resolving the settings that name files: TLS on the listeners, TLS and credentials for the
//! coordination services (read and checked now, so a bad file stops the start with one line).

use super::source::Sources;
use super::{ClientTls, ConfigError, EtcdAuth, Secret};
use crate::settings::{self, Setting};
use std::path::{Path, PathBuf};

/// `--tls-cert`, `--tls-key`, `--tls-client-ca`: all paths, the key and the certificate
/// together, the client CA only with them. The files themselves are read by [`crate::tls`].
pub(super) fn resolve_tls(src: &Sources<'_>) -> Result<Option<crate::tls::TlsFiles>, ConfigError> {
    let path =
        |setting: &Setting| path_setting(src, setting).map(|found| found.map(|(path, _)| path));
    let cert = path(&settings::TLS_CERT)?;
    let key = path(&settings::TLS_KEY)?;
    let client_ca = path(&settings::TLS_CLIENT_CA)?;
    match (cert, key) {
        (Some(cert), Some(key)) => Ok(Some(crate::tls::TlsFiles {
            cert,
            key,
            client_ca,
        })),
        (Some(_), None) => Err(ConfigError(
            "--tls-cert needs --tls-key (the certificate's private key)".into(),
        )),
        (None, Some(_)) => Err(ConfigError(
            "--tls-key needs --tls-cert (the certificate it belongs to)".into(),
        )),
        (None, None) if client_ca.is_some() => Err(ConfigError(
            "--tls-client-ca needs --tls-cert and --tls-key: client certificates are asked for \
             over TLS only"
                .into(),
        )),
        (None, None) => Ok(None),
    }
}

/// A file path setting: `Some` when given (an empty path is an error).
pub(super) fn path_setting(
    src: &Sources<'_>,
    setting: &Setting,
) -> Result<Option<(PathBuf, String)>, ConfigError> {
    match src.pick(setting) {
        Some((text, name)) if text.is_empty() => Err(ConfigError::invalid(
            &name,
            "expected a file path, found an empty string",
        )),
        Some((text, name)) => Ok(Some((PathBuf::from(text), name))),
        None => Ok(None),
    }
}

/// `--etcd-ca`, `--etcd-cert`, `--etcd-key`: read and checked now, so a bad file stops the
/// start with one line. TLS goes with `https://` endpoints, and they need a CA.
pub(super) fn resolve_etcd_tls(
    src: &Sources<'_>,
    https: bool,
) -> Result<Option<ClientTls>, ConfigError> {
    let flags = [
        &settings::ETCD_CA,
        &settings::ETCD_CERT,
        &settings::ETCD_KEY,
    ];
    if !https {
        for setting in flags {
            if let Some((_, name)) = path_setting(src, setting)? {
                return Err(ConfigError(format!(
                    "{name} needs https:// etcd endpoints (--etcd-endpoints https://HOST:PORT)"
                )));
            }
        }
        return Ok(None);
    }
    match resolve_client_tls(src, flags)? {
        Some(tls) => Ok(Some(tls)),
        None => Err(ConfigError(
            "https:// etcd endpoints need --etcd-ca (the CA that signed etcd's server certificate)"
                .into(),
        )),
    }
}

/// A CA file, and a certificate and key file, for TLS to a coordination service: read and
/// checked now. `None` when none is given; a certificate needs its key and the CA.
pub(super) fn resolve_client_tls(
    src: &Sources<'_>,
    [ca_setting, cert_setting, key_setting]: [&Setting; 3],
) -> Result<Option<ClientTls>, ConfigError> {
    let ca = path_setting(src, ca_setting)?;
    let cert = path_setting(src, cert_setting)?;
    let key = path_setting(src, key_setting)?;
    let (ca_flag, cert_flag, key_flag) =
        (ca_setting.name(), cert_setting.name(), key_setting.name());
    let read = |path: &Path, flag: &str| {
        let flag = flag.to_owned();
        let pem = crate::tls::read_pem_file(path, &flag).map_err(ConfigError)?;
        Ok::<_, ConfigError>((pem, flag))
    };
    let Some((ca_path, _)) = ca else {
        if cert.is_some() || key.is_some() {
            return Err(ConfigError(format!(
                "{cert_flag} and {key_flag} need {ca_flag} (the CA to verify the server with)"
            )));
        }
        return Ok(None);
    };
    let (ca_pem, flag) = read(&ca_path, &ca_flag)?;
    crate::tls::parse_certs(&ca_pem, &ca_path, &flag).map_err(ConfigError)?;
    let mut files = vec![ca_path];
    let identity = match (cert, key) {
        (Some((cert_path, _)), Some((key_path, _))) => {
            let (cert_pem, flag) = read(&cert_path, &cert_flag)?;
            crate::tls::parse_certs(&cert_pem, &cert_path, &flag).map_err(ConfigError)?;
            let (key_pem, flag) = read(&key_path, &key_flag)?;
            crate::tls::parse_key(&key_pem, &key_path, &flag).map_err(ConfigError)?;
            files.extend([cert_path, key_path]);
            Some((
                cert_pem,
                Secret::new(String::from_utf8_lossy(&key_pem).into_owned()),
            ))
        }
        (Some(_), None) => {
            return Err(ConfigError(format!(
                "{cert_flag} needs {key_flag} (the certificate's private key)"
            )));
        }
        (None, Some(_)) => {
            return Err(ConfigError(format!(
                "{key_flag} needs {cert_flag} (the certificate it belongs to)"
            )));
        }
        (None, None) => None,
    };
    Ok(Some(ClientTls {
        ca_pem,
        identity,
        files,
    }))
}

/// `--etcd-user` with its password from `--etcd-password-file` or `SNOWFLAKE_ETCD_PASSWORD`.
pub(super) fn resolve_etcd_auth(src: &Sources<'_>) -> Result<Option<EtcdAuth>, ConfigError> {
    let user = src.pick(&settings::ETCD_USER);
    let file = path_setting(src, &settings::ETCD_PASSWORD_FILE)?;
    let from_env = settings::ETCD_PASSWORD
        .env
        .and_then(|name| std::env::var(name).ok());
    let password = match (file, from_env) {
        (Some((path, name)), _) => Some(read_password(&path, &name)?),
        (None, Some(value)) if !value.is_empty() => Some(Secret::new(value)),
        (None, _) => None,
    };
    match (user, password) {
        (Some((user, name)), Some(password)) => {
            if user.is_empty() || user.len() > 256 || user.chars().any(char::is_control) {
                return Err(ConfigError::invalid(
                    &name,
                    "expected an etcd user name (1..=256 printable characters)",
                ));
            }
            Ok(Some(EtcdAuth { user, password }))
        }
        (Some((_, name)), None) => Err(ConfigError(format!(
            "{name} needs a password: --etcd-password-file FILE or SNOWFLAKE_ETCD_PASSWORD"
        ))),
        (None, Some(_)) => Err(ConfigError(
            "an etcd password (--etcd-password-file or SNOWFLAKE_ETCD_PASSWORD) needs --etcd-user"
                .into(),
        )),
        (None, None) => Ok(None),
    }
}

/// A password file: one line (a trailing newline is not part of it), at most 4 KiB.
fn read_password(path: &Path, name: &str) -> Result<Secret, ConfigError> {
    let bytes = crate::tls::read_pem_file(path, name).map_err(ConfigError)?;
    if bytes.len() > 4096 {
        return Err(ConfigError::invalid(
            name,
            format!(
                "{} is larger than 4096 bytes; expected one line",
                path.display()
            ),
        ));
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| ConfigError::invalid(name, format!("{} is not UTF-8 text", path.display())))?;
    let password = text.strip_suffix('\n').unwrap_or(&text);
    let password = password.strip_suffix('\r').unwrap_or(password);
    if password.is_empty() || password.contains('\n') {
        return Err(ConfigError::invalid(
            name,
            format!("{} must hold the password on one line", path.display()),
        ));
    }
    warn_if_world_readable(path);
    Ok(Secret::new(password))
}

/// A digest identity file: one line `user:password`.
pub(super) fn read_digest(path: &Path, name: &str) -> Result<Secret, ConfigError> {
    let line = read_password(path, name)?;
    match line.expose().split_once(':') {
        Some((user, password)) if !user.is_empty() && !password.is_empty() => Ok(line),
        _ => Err(ConfigError::invalid(
            name,
            format!(
                "{} must hold one line user:password (ZooKeeper's digest scheme)",
                path.display()
            ),
        )),
    }
}

/// Warns when a secret's file can be read by every user.
fn warn_if_world_readable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = std::fs::metadata(path)
        && meta.permissions().mode() & 0o004 != 0
    {
        // Logging may not be set up yet when the configuration is resolved.
        eprintln!(
            "warning: {} is readable by every user on this machine; make it 0600 or 0640",
            path.display()
        );
    }
}

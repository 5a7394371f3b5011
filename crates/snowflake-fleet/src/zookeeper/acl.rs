//! The digest protection of the fleet's znodes: with `--zookeeper-auth-file`, every znode the
//! node creates is readable by anyone and writable by that digest identity only, and znodes
//! that grant more are brought back to exactly that.

use super::session::bounded;
use crate::config::ZooKeeperConfig;
use std::time::Duration;
use zookeeper_client as zk;

/// The ACLs of every znode the node creates: protected with a digest identity, else open as in
/// 2010. ACLs are not inherited, so every create sets them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Protection {
    Open,
    /// Anyone may read (the 2010 tooling's view), and only the digest identity
    /// (`--zookeeper-auth-file`) may do anything else: `world:anyone:r` and
    /// `digest:USER:HASH:cdrwa`, spelt out. Not the `auth` scheme, which ZooKeeper expands to
    /// every identity of the session, and over TLS that includes the client certificate's
    /// subject (`x509:CN=…`): a process holding the fleet's certificate and a wrong password
    /// would then own the znodes too.
    Digest(&'static [zk::Acl]),
}

/// ZooKeeper's digest of `user:password` (`DigestAuthenticationProvider`): `user:` and the
/// base64 of the SHA-1 of the whole line.
fn digest_id(identity: &str) -> String {
    use base64::Engine as _;
    let user = identity.split_once(':').map_or(identity, |(user, _)| user);
    let hash = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, identity.as_bytes());
    format!(
        "{user}:{}",
        base64::engine::general_purpose::STANDARD.encode(hash.as_ref())
    )
}

/// The protected ACLs of `identity`, made once per identity for the life of the process (a
/// process has one; `CreateOptions` borrows its ACLs for `'static`).
fn digest_acls(identity: &str) -> &'static [zk::Acl] {
    static MADE: std::sync::Mutex<Vec<(String, &'static [zk::Acl])>> =
        std::sync::Mutex::new(Vec::new());
    let id = digest_id(identity);
    let mut made = MADE.lock().unwrap_or_else(|poison| poison.into_inner());
    if let Some((_, acls)) = made.iter().find(|(known, _)| *known == id) {
        return acls;
    }
    let acls: &'static [zk::Acl] = Box::leak(Box::new([
        zk::Acl::new_const(zk::Permission::READ, "world", "anyone"),
        zk::Acl::new(zk::Permission::ALL, zk::AuthId::new("digest", &id)),
    ]));
    made.push((id, acls));
    acls
}

/// Znodes an earlier version created over TLS (whose `auth` ACL also granted the certificate's
/// `x509` identity), or that someone set by hand, may grant more than the fleet's digest
/// identity: with a digest identity, the node's paths and its mark are brought back to exactly
/// `world:anyone:r` plus that identity (the node holds ADMIN on them through it). A znode it
/// cannot correct is logged as an error: anyone it grants could lower the mark.
pub(super) async fn tighten_acls(
    client: &zk::Client,
    paths: &[&str],
    config: &ZooKeeperConfig,
    timeout: Duration,
) {
    let (Protection::Digest(expected), Some(identity)) = (Protection::of(config), &config.auth)
    else {
        return;
    };
    let user = identity
        .expose()
        .split_once(':')
        .map_or(identity.expose(), |(user, _)| user);
    for path in paths {
        let (acl, stat) = match bounded(timeout, client.get_acl(path)).await {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(znode = %path, error = %e, "cannot read the znode's ACL");
                continue;
            }
        };
        // ZooKeeper shows a digest's hash as `x` to all but super users: the user is compared.
        let ours = acl.len() == 2
            && acl.iter().any(|a| {
                a.scheme() == "world"
                    && a.id() == "anyone"
                    && a.permission() == zk::Permission::READ
            })
            && acl.iter().any(|a| {
                a.scheme() == "digest"
                    && a.id().split(':').next() == Some(user)
                    && a.permission() == zk::Permission::ALL
            });
        if ours {
            continue;
        }
        let was = acl
            .iter()
            .map(|a| format!("{}:{}:{}", a.scheme(), a.id(), a.permission()))
            .collect::<Vec<_>>()
            .join(", ");
        match bounded(timeout, client.set_acl(path, expected, Some(stat.aversion))).await {
            Ok(_) => tracing::warn!(
                znode = %path,
                %was,
                "the znode granted more than the fleet's digest identity: its ACL is now world:anyone:r plus that identity only"
            ),
            Err(e) => tracing::error!(
                znode = %path,
                %was,
                error = %e,
                "the znode grants more than the fleet's digest identity and its ACL cannot be corrected: set it by hand (docs/security.md)"
            ),
        }
    }
}

impl Protection {
    pub(super) fn of(config: &ZooKeeperConfig) -> Protection {
        match &config.auth {
            Some(identity) => Protection::Digest(digest_acls(identity.expose())),
            None => Protection::Open,
        }
    }

    fn acls(self) -> zk::Acls<'static> {
        match self {
            Protection::Open => zk::Acls::anyone_all(),
            Protection::Digest(acls) => zk::Acls::new(acls),
        }
    }

    pub(super) fn persistent(self) -> zk::CreateOptions<'static> {
        zk::CreateMode::Persistent.with_acls(self.acls())
    }

    pub(super) fn ephemeral(self) -> zk::CreateOptions<'static> {
        zk::CreateMode::Ephemeral.with_acls(self.acls())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_digest_id_is_zookeepers() {
        // `printf snowflake:zk-pass-7 | openssl dgst -binary -sha1 | base64` (COMPONENTS.md §8).
        assert_eq!(
            super::digest_id("snowflake:zk-pass-7"),
            "snowflake:5ZvEtu0UOpFmetCdLlpab3owKiM="
        );
    }

    #[test]
    fn an_identity_gets_read_for_anyone_and_all_for_its_digest_only() {
        let acls = super::digest_acls("snowflake:zk-pass-7");
        assert_eq!(acls.len(), 2);
        assert!(std::ptr::eq(
            acls,
            super::digest_acls("snowflake:zk-pass-7")
        ));
        let text = format!("{acls:?}");
        assert!(
            text.contains("digest") && text.contains("5ZvEtu0UOpFmetCdLlpab3owKiM="),
            "{text}"
        );
        assert!(!text.contains("\"auth\""), "{text}");
    }
}

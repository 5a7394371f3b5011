//! The secure mode (`--secure`): the fleet as production runs it (SPEC §8 "Security",
//! docs/security.md). This module owns what that adds, and nothing else of the campaign changes:
//!
//! - **Its own CA and certificates**, made by the test kit at start in `OUT/secure/` (keys and
//!   passwords mode 0600): the coordination service's server certificate (IP SANs of the three
//!   members), the nodes' serving certificate (IP SANs of every node), the nodes' client
//!   certificate for the coordination service (CN `snowflake-node`), and the campaign's own
//!   client certificate (CN `campaign-client`). No certificate has a CN that is an etcd user:
//!   with `--client-cert-auth` etcd takes the CN for the user name when no password is sent.
//! - **etcd**: clients over https with `--client-cert-auth`, peers stay http inside the lab;
//!   auth on, with `root` (used only to set up), the fleet's user holding readwrite on the
//!   campaign's prefix only, and the campaign's operator user (the checker, `delete-claim`, the
//!   leader lookup) holding read on the prefix and readwrite on its claims only.
//! - **ZooKeeper**: a TLS client port only (Netty, PEM key stores; no plaintext client port, so
//!   the four-letter words go over TLS too), and the fleet's digest identity
//!   (`--zookeeper-auth-file`), which the operator must present to delete a claim.
//! - **The nodes**: HTTPS and gRPC over TLS with mutual TLS (`--tls-client-ca`), RESP over TLS
//!   (the same flags), Thrift plaintext (2010 clients); probes go to `--admin-addr`.

use crate::mode::Mode;
use anyhow::Context;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use snowflake_testkit::certs::Usage;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The etcd user of the nodes, and the user of their ZooKeeper digest identity.
pub const FLEET_USER: &str = "campaign-fleet";
/// The etcd role of the nodes: readwrite on the campaign's prefix, nothing else.
pub const FLEET_ROLE: &str = "campaign-fleet-rw";
/// The etcd user of the campaign's own reads and deletions.
pub const OPERATOR_USER: &str = "campaign-operator";
/// Its role: read on the prefix, readwrite on the claims (to delete one).
pub const OPERATOR_ROLE: &str = "campaign-operator";
/// The common name of the nodes' client certificate for the coordination service.
pub const NODE_CLIENT_CN: &str = "snowflake-node";
/// The common name of the campaign's client certificate (API, etcdctl, ZooKeeper).
pub const CAMPAIGN_CN: &str = "campaign-client";
/// ZooKeeper's TLS client port (the servers have no plaintext client port in secure mode).
pub const ZK_SECURE_PORT: u16 = 2281;
/// The nodes' admin listener (plaintext, no client certificates): probes.
pub const ADMIN_PORT: u16 = 9090;

/// The secure mode's files and secrets; see the module doc.
pub struct Secure {
    /// Where the certificates, keys and password files are (mode 0700).
    dir: PathBuf,
    root_password: String,
    fleet_password: String,
    operator_password: String,
}

impl std::fmt::Debug for Secure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the passwords.
        f.debug_struct("Secure")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

/// A random password: 16 bytes from the kernel, hex.
fn random_password() -> anyhow::Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Writes `contents` to `path` with mode 0600 (created so: never readable by others).
fn write_private(path: &Path, contents: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    file.write_all(contents.as_bytes())?;
    Ok(())
}

/// The subject alternative names of a server certificate for `ips` (and loopback).
fn server_sans(ips: &[Ipv4Addr]) -> Vec<String> {
    ips.iter()
        .map(|ip| format!("IP:{ip}"))
        .chain(["IP:127.0.0.1".to_owned()])
        .collect()
}

impl Secure {
    /// The secure mode's settings for files in `dir`, without making them.
    fn at(dir: PathBuf, passwords: [String; 3]) -> Secure {
        let [root_password, fleet_password, operator_password] = passwords;
        Secure {
            dir,
            root_password,
            fleet_password,
            operator_password,
        }
    }

    /// Makes the CA, the certificates (for coordination members at `member_ips`, nodes at
    /// `node_ips`), the passwords and their files, in `dir` (created, mode 0700).
    pub fn create(
        dir: &Path,
        member_ips: &[Ipv4Addr],
        node_ips: &[Ipv4Addr],
    ) -> anyhow::Result<Secure> {
        std::fs::create_dir_all(dir)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        let secure = Secure::at(
            dir.to_path_buf(),
            [random_password()?, random_password()?, random_password()?],
        );
        snowflake_testkit::certs::ca(dir, "ca", "campaign-ca", 30)?;
        let member_sans = server_sans(member_ips);
        let node_sans = server_sans(node_ips);
        let member_sans: Vec<&str> = member_sans.iter().map(String::as_str).collect();
        let node_sans: Vec<&str> = node_sans.iter().map(String::as_str).collect();
        for (name, cn, usage) in [
            (
                "member",
                "campaign-coordinator",
                Usage::Server(&member_sans),
            ),
            ("node", "snowflake-node-api", Usage::Server(&node_sans)),
            ("fleet", NODE_CLIENT_CN, Usage::Client),
            ("client", CAMPAIGN_CN, Usage::Client),
        ] {
            snowflake_testkit::certs::issue(dir, name, cn, "ca", usage, 30)?;
        }
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "key") {
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
            }
        }
        // ZooKeeper's PEM key store: the key and the certificate in one file.
        let key_and_cert = format!(
            "{}{}",
            std::fs::read_to_string(dir.join("member.key"))?,
            std::fs::read_to_string(dir.join("member.crt"))?
        );
        write_private(&secure.path("member.pem"), &key_and_cert)?;
        write_private(
            &secure.path("etcd-password"),
            &format!("{}\n", secure.fleet_password),
        )?;
        write_private(&secure.path("zk-auth"), &format!("{}\n", secure.zk_auth()))?;
        Ok(secure)
    }

    /// A file of the secure mode's directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn path_string(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }

    /// The fleet's ZooKeeper digest identity, `user:password`.
    pub fn zk_auth(&self) -> String {
        format!("{FLEET_USER}:{}", self.fleet_password)
    }

    /// What an etcd member adds to its command line: https for clients, client certificates
    /// required and verified.
    pub fn etcd_member_args(&self) -> Vec<String> {
        vec![
            "--cert-file".into(),
            self.path_string("member.crt"),
            "--key-file".into(),
            self.path_string("member.key"),
            "--trusted-ca-file".into(),
            self.path_string("ca.crt"),
            "--client-cert-auth".into(),
        ]
    }

    /// What a ZooKeeper server at `ip` adds to its `zoo.cfg` (instead of a plaintext client
    /// port): a TLS client port on Netty, its key and certificate, the CA of its clients.
    pub fn zookeeper_config(&self, ip: Ipv4Addr) -> String {
        format!(
            "secureClientPort={ZK_SECURE_PORT}\nsecureClientPortAddress={ip}\n\
             serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n\
             ssl.keyStore.location={}\nssl.keyStore.type=PEM\n\
             ssl.trustStore.location={}\nssl.trustStore.type=PEM\n",
            self.path_string("member.pem"),
            self.path_string("ca.crt"),
        )
    }

    /// The etcdctl commands (over TLS, before auth is turned on) that make the users and
    /// roles, then turn auth on: `root` with the root role (etcd 3.4 needs it), the fleet's user
    /// with readwrite on `prefix/` only, the operator with read on `prefix/` and readwrite on
    /// `prefix/workers/` only. Each with what goes to its stdin: a new user's password
    /// (`--interactive=false`), never on a command line.
    pub fn etcd_auth_setup(&self, prefix: &str) -> Vec<(Vec<String>, Option<String>)> {
        let prefix = format!("{}/", prefix.trim_end_matches('/'));
        let args =
            |words: &[&str]| -> Vec<String> { words.iter().map(|w| (*w).to_owned()).collect() };
        let add_user = |name: &str, password: &str| {
            (
                args(&["user", "add", name, "--interactive=false"]),
                Some(format!("{password}\n")),
            )
        };
        let workers = format!("{prefix}workers/");
        vec![
            add_user("root", &self.root_password),
            (args(&["role", "add", "root"]), None),
            (args(&["user", "grant-role", "root", "root"]), None),
            add_user(FLEET_USER, &self.fleet_password),
            (args(&["role", "add", FLEET_ROLE]), None),
            (
                args(&[
                    "role",
                    "grant-permission",
                    FLEET_ROLE,
                    "--prefix=true",
                    "readwrite",
                    &prefix,
                ]),
                None,
            ),
            (args(&["user", "grant-role", FLEET_USER, FLEET_ROLE]), None),
            add_user(OPERATOR_USER, &self.operator_password),
            (args(&["role", "add", OPERATOR_ROLE]), None),
            (
                args(&[
                    "role",
                    "grant-permission",
                    OPERATOR_ROLE,
                    "--prefix=true",
                    "read",
                    &prefix,
                ]),
                None,
            ),
            (
                args(&[
                    "role",
                    "grant-permission",
                    OPERATOR_ROLE,
                    "--prefix=true",
                    "readwrite",
                    &workers,
                ]),
                None,
            ),
            (
                args(&["user", "grant-role", OPERATOR_USER, OPERATOR_ROLE]),
                None,
            ),
            (args(&["auth", "enable"]), None),
        ]
    }

    /// etcdctl's TLS flags: the CA, and the campaign's client certificate.
    pub fn etcdctl_tls_args(&self) -> Vec<String> {
        vec![
            format!("--cacert={}", self.path_string("ca.crt")),
            format!("--cert={}", self.path_string("client.crt")),
            format!("--key={}", self.path_string("client.key")),
        ]
    }

    /// `ETCDCTL_USER` (in the environment, not on a command line) for `who`.
    pub fn etcdctl_user(&self, who: EtcdUser) -> Option<String> {
        match who {
            EtcdUser::Fleet => Some(format!("{FLEET_USER}:{}", self.fleet_password)),
            EtcdUser::Operator => Some(format!("{OPERATOR_USER}:{}", self.operator_password)),
            EtcdUser::Nobody => None,
        }
    }

    /// What a node at `ip` adds to its command line in `mode`: the coordination service's TLS
    /// and credentials, TLS with client certificates on its API, the admin listener. With
    /// `wrong_password`, an etcd password file or ZooKeeper identity that does not match (to
    /// see a misconfigured node stop the campaign at start).
    pub fn node_args(&self, mode: Mode, ip: Ipv4Addr, wrong_password: bool) -> Vec<String> {
        let mut args: Vec<String> = match mode {
            Mode::Etcd => vec![
                "--etcd-ca".into(),
                self.path_string("ca.crt"),
                "--etcd-cert".into(),
                self.path_string("fleet.crt"),
                "--etcd-key".into(),
                self.path_string("fleet.key"),
                "--etcd-user".into(),
                FLEET_USER.into(),
                "--etcd-password-file".into(),
                self.path_string(if wrong_password {
                    "wrong-password"
                } else {
                    "etcd-password"
                }),
            ],
            Mode::Zookeeper => vec![
                "--zookeeper-ca".into(),
                self.path_string("ca.crt"),
                "--zookeeper-cert".into(),
                self.path_string("fleet.crt"),
                "--zookeeper-key".into(),
                self.path_string("fleet.key"),
                "--zookeeper-auth-file".into(),
                self.path_string(if wrong_password {
                    "wrong-password"
                } else {
                    "zk-auth"
                }),
            ],
        };
        args.extend([
            "--tls-cert".into(),
            self.path_string("node.crt"),
            "--tls-key".into(),
            self.path_string("node.key"),
            "--tls-client-ca".into(),
            self.path_string("ca.crt"),
            "--admin-addr".into(),
            SocketAddr::from((ip, ADMIN_PORT)).to_string(),
        ]);
        args
    }

    /// Writes the file `node_args(…, wrong_password = true)` points at: a password (and a
    /// digest identity) that is not the fleet's.
    pub fn write_wrong_password(&self) -> anyhow::Result<()> {
        write_private(
            &self.path("wrong-password"),
            &format!("{FLEET_USER}:not-the-password\n"),
        )
    }

    /// The campaign's TLS to the nodes' API and to ZooKeeper, with its client certificate
    /// (`identity`), or without one (to see a node refuse it).
    pub fn client_tls(&self, identity: bool) -> anyhow::Result<ClientTls> {
        let ca_pem = std::fs::read(self.path("ca.crt"))?;
        let cert_pem = std::fs::read(self.path("client.crt"))?;
        let key_pem = std::fs::read(self.path("client.key"))?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&ca_pem) {
            roots.add(cert?)?;
        }
        let config = |alpn: &[&[u8]]| -> anyhow::Result<Arc<rustls::ClientConfig>> {
            let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots.clone());
            let mut config = if identity {
                let certs = CertificateDer::pem_slice_iter(&cert_pem).collect::<Result<_, _>>()?;
                builder.with_client_auth_cert(certs, PrivateKeyDer::from_pem_slice(&key_pem)?)?
            } else {
                builder.with_no_client_auth()
            };
            config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
            Ok(Arc::new(config))
        };
        let library = snowflake_client::Tls::from_pem(
            ca_pem.clone(),
            identity.then(|| (cert_pem.clone(), key_pem.clone())),
        )?;
        Ok(ClientTls {
            http: config(&[b"http/1.1"])?,
            plain: config(&[])?,
            ca_pem,
            identity: identity.then_some((cert_pem, key_pem)),
            library,
        })
    }

    /// TLS options for the campaign's ZooKeeper sessions: the CA, its client certificate.
    pub fn zookeeper_tls(&self) -> anyhow::Result<zookeeper_client::TlsOptions> {
        // The client builds its rustls configuration with the process's default provider.
        let _ = rustls::crypto::ring::default_provider().install_default();
        Ok(zookeeper_client::TlsOptions::default()
            .with_pem_ca(&std::fs::read_to_string(self.path("ca.crt"))?)?
            .with_pem_identity(
                &std::fs::read_to_string(self.path("client.crt"))?,
                &std::fs::read_to_string(self.path("client.key"))?,
            )?)
    }
}

/// Who the campaign's etcdctl authenticates as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EtcdUser {
    /// The nodes' user (the campaign uses it only to check its limits).
    Fleet,
    /// The campaign's reads and deletions.
    Operator,
    /// No user: only the client certificate, whose CN is no user.
    Nobody,
}

/// The campaign's TLS as a client of the nodes (and of ZooKeeper's four-letter words).
#[derive(Clone)]
pub struct ClientTls {
    /// HTTPS (ALPN `http/1.1`).
    pub http: Arc<rustls::ClientConfig>,
    /// RESP over TLS and ZooKeeper's four-letter words (no ALPN).
    pub plain: Arc<rustls::ClientConfig>,
    /// For gRPC (tonic's own settings).
    ca_pem: Vec<u8>,
    identity: Option<(Vec<u8>, Vec<u8>)>,
    /// For the client library.
    pub library: snowflake_client::Tls,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("mutual", &self.identity.is_some())
            .finish_non_exhaustive()
    }
}

impl ClientTls {
    /// tonic's TLS settings (the server name is the endpoint's IP, which its certificate
    /// holds).
    pub fn grpc(&self) -> tonic::transport::ClientTlsConfig {
        let mut config = tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(&self.ca_pem));
        if let Some((cert, key)) = &self.identity {
            config = config.identity(tonic::transport::Identity::from_pem(cert, key));
        }
        config
    }

    /// A TLS connection over `tcp` to the server at `addr` (verified by its IP).
    pub async fn connect(
        config: &Arc<rustls::ClientConfig>,
        addr: SocketAddr,
        tcp: tokio::net::TcpStream,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
        tokio_rustls::TlsConnector::from(Arc::clone(config))
            .connect(ServerName::IpAddress(addr.ip().into()), tcp)
            .await
    }
}

/// A ZooKeeper four-letter word over TLS (the servers' only client port in secure mode); the
/// answer, empty without one.
pub fn four_letter_tls(
    config: &Arc<rustls::ClientConfig>,
    addr: SocketAddr,
    command: &str,
) -> String {
    use std::io::{Read, Write};
    let answer = || -> anyhow::Result<String> {
        let tcp = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
        tcp.set_read_timeout(Some(Duration::from_secs(1)))?;
        tcp.set_write_timeout(Some(Duration::from_secs(1)))?;
        let connection = rustls::ClientConnection::new(
            Arc::clone(config),
            ServerName::IpAddress(addr.ip().into()),
        )?;
        let mut tls = rustls::StreamOwned::new(connection, tcp);
        tls.write_all(command.as_bytes())?;
        tls.flush()?;
        let mut out = String::new();
        // ZooKeeper closes the connection after the answer (without a close_notify).
        let _ = tls.read_to_string(&mut out);
        Ok(out)
    };
    answer().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secure() -> Secure {
        Secure::at(
            PathBuf::from("/out/secure"),
            ["rootpw".into(), "fleetpw".into(), "oppw".into()],
        )
    }

    #[test]
    fn server_certificates_name_every_ip_and_loopback() {
        let ips = [
            Ipv4Addr::new(10, 213, 40, 11),
            Ipv4Addr::new(10, 213, 40, 12),
        ];
        assert_eq!(
            server_sans(&ips),
            ["IP:10.213.40.11", "IP:10.213.40.12", "IP:127.0.0.1"]
        );
    }

    #[test]
    fn etcd_roles_give_least_privilege_and_auth_comes_last() {
        let commands = secure().etcd_auth_setup("/campaign");
        let text: Vec<String> = commands.iter().map(|(c, _)| c.join(" ")).collect();
        // Passwords go to stdin only.
        assert!(!text.iter().any(|c| c.contains("pw")), "{text:?}");
        let stdin: Vec<&str> = commands.iter().filter_map(|(_, i)| i.as_deref()).collect();
        assert_eq!(stdin, ["rootpw\n", "fleetpw\n", "oppw\n"]);
        assert!(text.contains(&"user add campaign-fleet --interactive=false".to_owned()));
        assert_eq!(text.last().map(String::as_str), Some("auth enable"));
        // The fleet: readwrite on its prefix and nothing else.
        let grants: Vec<&String> = text
            .iter()
            .filter(|c| c.contains("grant-permission"))
            .collect();
        assert_eq!(
            grants,
            [
                "role grant-permission campaign-fleet-rw --prefix=true readwrite /campaign/",
                "role grant-permission campaign-operator --prefix=true read /campaign/",
                "role grant-permission campaign-operator --prefix=true readwrite /campaign/workers/",
            ]
        );
        assert!(text.contains(&"user grant-role root root".to_owned()));
        assert!(text.contains(&"user grant-role campaign-fleet campaign-fleet-rw".to_owned()));
        // No user is named like a certificate's CN (a CN is a login without a password).
        for cn in [
            NODE_CLIENT_CN,
            CAMPAIGN_CN,
            "campaign-coordinator",
            "snowflake-node-api",
        ] {
            assert!(
                !text
                    .iter()
                    .any(|c| c.starts_with(&format!("user add {cn}:")))
            );
        }
    }

    #[test]
    fn nodes_get_tls_credentials_and_an_admin_listener() {
        let ip = Ipv4Addr::new(10, 213, 40, 21);
        let etcd = secure().node_args(Mode::Etcd, ip, false).join(" ");
        assert_eq!(
            etcd,
            "--etcd-ca /out/secure/ca.crt --etcd-cert /out/secure/fleet.crt \
             --etcd-key /out/secure/fleet.key --etcd-user campaign-fleet \
             --etcd-password-file /out/secure/etcd-password --tls-cert /out/secure/node.crt \
             --tls-key /out/secure/node.key --tls-client-ca /out/secure/ca.crt \
             --admin-addr 10.213.40.21:9090"
        );
        // The password is never on the command line.
        assert!(!etcd.contains("fleetpw"));
        let zk = secure().node_args(Mode::Zookeeper, ip, false).join(" ");
        assert!(zk.starts_with(
            "--zookeeper-ca /out/secure/ca.crt --zookeeper-cert /out/secure/fleet.crt \
             --zookeeper-key /out/secure/fleet.key --zookeeper-auth-file /out/secure/zk-auth \
             --tls-cert"
        ));
        let wrong = secure().node_args(Mode::Zookeeper, ip, true).join(" ");
        assert!(wrong.contains("--zookeeper-auth-file /out/secure/wrong-password"));
    }

    #[test]
    fn members_serve_clients_over_tls_with_client_certificates() {
        assert_eq!(
            secure().etcd_member_args().join(" "),
            "--cert-file /out/secure/member.crt --key-file /out/secure/member.key \
             --trusted-ca-file /out/secure/ca.crt --client-cert-auth"
        );
        let zk = secure().zookeeper_config(Ipv4Addr::new(10, 213, 40, 11));
        assert!(zk.contains("secureClientPort=2281\nsecureClientPortAddress=10.213.40.11\n"));
        assert!(zk.contains("ssl.keyStore.location=/out/secure/member.pem\n"));
        assert!(!zk.contains("clientPort=2181"));
        assert_eq!(secure().zk_auth(), "campaign-fleet:fleetpw");
        assert_eq!(
            secure().etcdctl_user(EtcdUser::Operator).as_deref(),
            Some("campaign-operator:oppw")
        );
        assert_eq!(secure().etcdctl_user(EtcdUser::Nobody), None);
        assert!(!format!("{:?}", secure()).contains("pw"));
    }
}

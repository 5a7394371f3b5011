//! The secure mode's refusal checks: what an unauthorized client asks of etcd and ZooKeeper
//! must be refused, reported as [`Check`]s.

use super::{Fleet, PREFIX, ZK_PATH};
use crate::secure::{EtcdUser, Secure};
use anyhow::{Context, bail};

/// A check of the secure mode's refusals (an unauthorized request must be refused), for the
/// report.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Check {
    pub name: String,
    pub passed: bool,
    /// What was seen (the refusal's message, or what was allowed that should not have been).
    pub detail: String,
}

impl std::fmt::Display for Check {
    /// `ok: NAME (DETAIL)` or `FAILED: …`, as the log and the summary print it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let verdict = if self.passed { "ok" } else { "FAILED" };
        write!(f, "{verdict}: {} ({})", self.name, self.detail)
    }
}

/// A check that `result` was refused with `expected` in its message.
fn refusal(name: &str, result: anyhow::Result<String>, expected: &str) -> Check {
    let (passed, detail) = match result {
        Ok(out) => (false, format!("allowed: {}", out.trim())),
        Err(e) => {
            // etcdctl's last line is its error; the lines before it are its retries' logs.
            let message = format!("{e:#}");
            let last = message.lines().last().unwrap_or_default().to_owned();
            (message.contains(expected), last)
        }
    };
    Check {
        name: name.to_owned(),
        passed,
        detail,
    }
}

impl Fleet {
    /// Secure etcd: users, roles and auth on (as root over TLS, before auth is on), then
    /// checks that the roles are what they should be: the fleet's user writes its prefix and
    /// nothing else, the operator reads the marks but cannot write them, and a client with a
    /// certificate but no user is refused.
    pub(super) fn secure_etcd(&self, secure: &Secure) -> anyhow::Result<Vec<Check>> {
        for (command, input) in secure.etcd_auth_setup(PREFIX) {
            let args: Vec<&str> = command.iter().map(String::as_str).collect();
            self.access
                .etcdctl_with_input(EtcdUser::Nobody, &args, input.as_deref())?;
        }
        let ping = format!("{PREFIX}/ping");
        let marks = format!("{PREFIX}/marks/");
        let allowed = [
            (
                EtcdUser::Fleet,
                vec!["put", ping.as_str(), "2"],
                "the fleet's user writes its prefix",
            ),
            (
                EtcdUser::Operator,
                vec!["get", "--prefix", "--keys-only", marks.as_str()],
                "the operator reads the marks",
            ),
        ];
        for (who, args, what) in allowed {
            self.access
                .etcdctl(who, &args)
                .with_context(|| format!("{what} ({who:?})"))?;
        }
        let outside = "/outside-the-campaign";
        let mark = format!("{PREFIX}/marks/0/31");
        let refused = [
            (
                EtcdUser::Fleet,
                vec!["put", outside, "x"],
                "etcd refuses the fleet's user outside its prefix",
            ),
            (
                EtcdUser::Operator,
                vec!["put", mark.as_str(), "x"],
                "etcd refuses the operator a write to a mark",
            ),
            (
                EtcdUser::Nobody,
                vec!["get", "--prefix", marks.as_str()],
                "etcd refuses a client certificate without a user (its CN is no user)",
            ),
        ];
        Ok(refused
            .into_iter()
            .map(|(who, args, name)| {
                refusal(name, self.access.etcdctl(who, &args), "permission denied")
            })
            .collect())
    }

    /// Secure ZooKeeper, once the nodes registered: a session with the campaign's certificate
    /// but not the fleet's digest identity may neither delete a registration nor change a mark
    /// (NoAuth), and with the identity it may write every node's registration and mark (else
    /// the start fails with that node's log: its `--zookeeper-auth-file` is not the fleet's,
    /// though its certificate let it register); and what
    /// ACL a registration has. Every attempt names a version no znode has, so that nothing
    /// changes whatever the ACL: ZooKeeper checks the ACL first (NoAuth), then the version
    /// (BadVersion: the ACL allowed it).
    pub(super) fn secure_zookeeper_checks(&self, secure: &Secure) -> anyhow::Result<Vec<Check>> {
        let auth = secure.zk_auth();
        let (acl, delete, set, held) = self
            .access
            .zookeeper(async |client| {
                let mut workers = client.list_children(ZK_PATH).await?;
                workers.sort();
                let first = workers.first().context("no registration")?;
                let registration = format!("{ZK_PATH}/{first}");
                let mark = format!("{ZK_PATH}-marks/{first}");
                let (acl, _) = client.get_acl(&registration).await?;
                let delete = client.delete(&registration, Some(i32::MAX)).await;
                let set = client
                    .set_data(&mark, b"{}", Some(i32::MAX))
                    .await
                    .map(|_| ());
                client.auth("digest", auth.as_bytes()).await?;
                // The write right on each registration and mark itself (a deletion is judged by
                // the parent's ACL, which the first node made).
                let mut held = Vec::new();
                for worker in &workers {
                    let path = format!("{ZK_PATH}/{worker}");
                    let (data, _) = client.get_data(&path).await?;
                    let address = String::from_utf8_lossy(&data).into_owned();
                    for path in [path, format!("{ZK_PATH}-marks/{worker}")] {
                        let set = client.set_data(&path, b"{}", Some(i32::MAX)).await;
                        held.push((path, address.clone(), set.map(|_| ())));
                    }
                }
                Ok((acl, delete, set, held))
            })
            .context("checking ZooKeeper's ACLs")?;
        for (path, data, set) in held {
            if !matches!(set, Err(zookeeper_client::Error::BadVersion)) {
                let node = self.nodes.iter().find(|n| data == format!("{}:7609", n.ip));
                let log = node
                    .and_then(|n| n.proc.as_ref())
                    .map_or(String::new(), |p| p.tail(20));
                bail!(
                    "the fleet's identity may not write {path} (of {}: {set:?}); \
                     its --zookeeper-auth-file is not the fleet's?\n{log}",
                    node.map_or(data.as_str(), |n| n.name.as_str())
                );
            }
        }
        let outcome = |result: Result<(), zookeeper_client::Error>| match result {
            Err(zookeeper_client::Error::NoAuth) => Err(anyhow::anyhow!("NoAuth")),
            Err(e) => Err(anyhow::anyhow!("{e:?}")),
            Ok(()) => Ok(String::new()),
        };
        let acl: Vec<String> = acl
            .iter()
            .map(|a| format!("{}:{}:{}", a.scheme(), a.id(), a.permission()))
            .collect();
        Ok(vec![
            refusal(
                "ZooKeeper refuses to delete a live registration without the fleet's identity",
                outcome(delete),
                "NoAuth",
            ),
            refusal(
                "ZooKeeper refuses to change a mark without the fleet's identity",
                outcome(set),
                "NoAuth",
            ),
            Check {
                name: "the fleet's identity may write every registration and mark \
                       (BadVersion, not NoAuth, for a version no znode has)"
                    .into(),
                passed: true,
                detail: "BadVersion".into(),
            },
            Check {
                // SPEC §8: world:anyone:r plus all rights for the digest identity, and nothing
                // for the session's certificate subject (x509), which an `auth` ACL would grant.
                name:
                    "a registration's ACL is world:anyone:r plus the fleet's digest identity only"
                        .into(),
                passed: acl.len() == 2
                    && acl
                        .iter()
                        .any(|a| a.starts_with("world:anyone:") && a.ends_with("READ"))
                    && acl
                        .iter()
                        .any(|a| a.starts_with("digest:") && a.ends_with("ALL")),
                detail: acl.join(", "),
            },
        ])
    }
}

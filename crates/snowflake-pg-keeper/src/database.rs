//! The database a keeper grants to: one connection to PostgreSQL (tokio-postgres, without TLS:
//! the keeper runs beside the database, over its Unix socket or loopback), the schema the
//! extension lives in, and the SQL of fleet mode: `snowflake_status()` read and checked,
//! `snowflake_keeper_grant(…)` renewed, `snowflake_keeper_revoke()` at the end.

use crate::error::DbError;
use snowflake_core::{Bits, Layout};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_postgres::config::Host;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, NoTls, Statement};

/// How long one connection attempt or one call may take before the connection is given up.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// Who the database issues as, from `snowflake_status()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    /// `snowflake.datacenter_id`.
    pub datacenter_id: u64,
    /// `snowflake.worker_id`.
    pub worker_id: u64,
    /// `snowflake.layout` with `snowflake.epoch_ms`.
    pub layout: Layout,
}

impl std::fmt::Display for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "datacenter {} worker {} (layout {}, epoch {})",
            self.datacenter_id,
            self.worker_id,
            self.layout.name(),
            self.layout.epoch_ms()
        )
    }
}

/// What the database said about its issuing, in a status, a grant's or a revoke's answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Observed {
    /// A standby, or a server still replaying WAL: it issues nothing.
    pub in_recovery: bool,
    /// The database's own durable mark (Unix ms), if it has one.
    pub mark_ms: Option<u64>,
    /// The last ID issued since the server started (or the floor it resumed above), if any.
    pub last_issued_ms: Option<u64>,
    /// The database's wall clock when it answered (Unix ms).
    pub now_ms: u64,
}

impl Observed {
    /// The fleet's mark to leave at a graceful stop, read from the revoke's answer when the
    /// mark written is `written_ms`. Every ID the database issued is at or below its last
    /// issued ID (or, when it issued nothing since it started, the durable mark its generator
    /// resumes above), or dated at or before its clock when it answered (the grant had ended
    /// by then); and none is above `written_ms` (each was issued under a grant up to it).
    pub fn final_mark_ms(&self, written_ms: u64) -> u64 {
        let issued = self.last_issued_ms.or(self.mark_ms).unwrap_or(0);
        issued.max(self.now_ms).min(written_ms.max(issued))
    }
}

/// One grant, as `snowflake_keeper_grant` takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The pair the keeper holds.
    pub datacenter_id: u64,
    /// The pair the keeper holds.
    pub worker_id: u64,
    /// No ID dated after this (Unix ms): the fleet's mark is at or above it.
    pub limit_ms: u64,
    /// The grant lapses this long after the database receives it, unless renewed.
    pub valid_for_ms: u64,
    /// The lease, as etcd names it (hex).
    pub lease: String,
    /// The fleet's mark found at the claim, if any: the database issues only above it.
    pub floor_ms: Option<u64>,
}

/// How the keeper reaches the database: the parsed connection string (its password, if any,
/// from a file) and a description for logs and errors, without the password.
#[derive(Debug, Clone)]
pub struct Target {
    /// The connection settings.
    pub config: tokio_postgres::Config,
    /// `postgresql://user@host:port/dbname`, never with a password.
    pub shown: String,
}

impl Target {
    /// Parses a libpq-style connection string (`host=… port=… dbname=… user=…` or a
    /// `postgresql://` URL). TLS is not supported: `sslmode=require` is refused, naming the way
    /// to connect instead.
    pub fn parse(conninfo: &str) -> Result<Target, String> {
        let mut config: tokio_postgres::Config = conninfo.parse().map_err(|e| {
            format!("invalid --postgres connection string: {e} (expected host=… port=… dbname=… user=…, or postgresql://user@host:port/dbname)")
        })?;
        if matches!(
            config.get_ssl_mode(),
            tokio_postgres::config::SslMode::Require
        ) {
            return Err(
                "invalid --postgres connection string: sslmode=require, but pg-keeper connects \
                 without TLS: it runs beside the database, so connect over its Unix socket \
                 (host=/var/run/postgresql) or loopback"
                    .to_owned(),
            );
        }
        if config.get_hosts().is_empty() {
            return Err(
                "invalid --postgres connection string: no host (give host=/var/run/postgresql \
                 for the local socket, or host=127.0.0.1)"
                    .to_owned(),
            );
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CALL_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("snowflake pg-keeper");
        }
        let shown = show(&config);
        Ok(Target { config, shown })
    }
}

/// `postgresql://user@host:port/dbname` (sockets as `host=DIR`), for logs: no password.
fn show(config: &tokio_postgres::Config) -> String {
    let hosts = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let port = config
                .get_ports()
                .get(i)
                .or_else(|| config.get_ports().first())
                .copied()
                .unwrap_or(5432);
            match host {
                Host::Tcp(name) => format!("{name}:{port}"),
                Host::Unix(dir) => format!("{}/.s.PGSQL.{port}", dir.display()),
            }
        })
        .collect::<Vec<_>>()
        .join(",");
    let user = config.get_user().unwrap_or("(default user)");
    let dbname = config.get_dbname().unwrap_or(user);
    format!("postgresql://{user}@{hosts}/{dbname}")
}

/// One open connection, with the extension's statements prepared.
#[derive(Debug)]
pub struct Database {
    /// The connection.
    client: Client,
    /// Drives the connection; aborted when this is dropped.
    driver: JoinHandle<()>,
    /// Where, for messages.
    shown: String,
    status: Statement,
    grant: Statement,
    revoke: Statement,
}

impl Drop for Database {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// Bounds one call; a call that takes longer gives the connection up.
async fn timed<T>(
    shown: &str,
    what: &str,
    call: impl Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, DbError> {
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(result) => result.map_err(|e| classify(shown, what, &e)),
        Err(_) => Err(DbError::Unreachable(format!(
            "{what} ({shown}): no answer within {} s",
            CALL_TIMEOUT.as_secs()
        ))),
    }
}

/// Whether an error from the database is worth retrying (the connection, or a server that is
/// starting, stopping or full), with the database's own words.
fn classify(shown: &str, what: &str, e: &tokio_postgres::Error) -> DbError {
    if let Some(db) = e.as_db_error() {
        let hint = db.hint().map(|h| format!(" ({h})")).unwrap_or_default();
        let text = format!(
            "{what} ({shown}): {} [SQLSTATE {}]{hint}",
            db.message(),
            db.code().code()
        );
        let retry = [
            SqlState::CANNOT_CONNECT_NOW,
            SqlState::ADMIN_SHUTDOWN,
            SqlState::CRASH_SHUTDOWN,
            SqlState::TOO_MANY_CONNECTIONS,
        ];
        return if retry.contains(db.code()) {
            DbError::Unreachable(text)
        } else {
            DbError::Refused(text)
        };
    }
    let io = std::iter::successors(std::error::Error::source(e), |s| s.source())
        .any(|s| s.is::<std::io::Error>());
    let text = format!("{what} ({shown}): {e}");
    if e.is_closed() || io || e.to_string().contains("connect") {
        DbError::Unreachable(text)
    } else {
        DbError::Refused(text)
    }
}

/// The columns every answer carries, then the database's clock.
const OBSERVED: &str = "in_recovery, mark_ms, last_issued_ms, \
                        (extract(epoch FROM clock_timestamp()) * 1000)::bigint";

impl Database {
    /// Connects, finds the extension's schema, checks that the role may grant, and prepares
    /// the statements.
    pub async fn connect(target: &Target) -> Result<Database, DbError> {
        let shown = target.shown.as_str();
        let (client, connection) = timed(
            shown,
            "cannot connect to postgresql",
            target.config.connect(NoTls),
        )
        .await?;
        let driver = tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "the connection to postgresql ended");
            }
        });
        let schema: Option<String> = timed(
            shown,
            "cannot look for the snowflake extension",
            client.query_opt(
                "SELECT quote_ident(n.nspname) FROM pg_extension e \
                 JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'snowflake'",
                &[],
            ),
        )
        .await?
        .map(|row| row.get(0));
        let Some(schema) = schema else {
            driver.abort();
            return Err(DbError::Refused(format!(
                "the snowflake extension is not created in {shown}: run CREATE EXTENSION \
                 snowflake in that database (docs/postgres.md)"
            )));
        };
        let (user, superuser): (String, bool) = timed(
            shown,
            "cannot read the role",
            client.query_one(
                "SELECT current_user::text, rolsuper FROM pg_roles WHERE rolname = current_user",
                &[],
            ),
        )
        .await
        .map(|row| (row.get(0), row.get(1)))?;
        if !superuser {
            driver.abort();
            return Err(DbError::Refused(format!(
                "role {user} is not a superuser ({shown}): snowflake_keeper_grant is \
                 superuser-only; connect as a superuser (e.g. postgres over the local socket)"
            )));
        }
        let prepare = |sql: String| {
            let client = &client;
            async move {
                timed(
                    shown,
                    "cannot prepare the keeper's statements",
                    client.prepare(&sql),
                )
                .await
            }
        };
        let status = prepare(format!(
            "SELECT {OBSERVED}, preloaded, keeper, datacenter_id, worker_id, layout, epoch_ms, \
             last_error FROM {schema}.snowflake_status()"
        ))
        .await?;
        let grant = prepare(format!(
            "SELECT {OBSERVED} FROM {schema}.snowflake_keeper_grant($1::int, $2::int, \
             $3::bigint, $4::int, $5::text, $6::bigint)"
        ))
        .await?;
        let revoke = prepare(format!(
            "SELECT {OBSERVED} FROM {schema}.snowflake_keeper_revoke()"
        ))
        .await?;
        Ok(Database {
            client,
            driver,
            shown: shown.to_owned(),
            status,
            grant,
            revoke,
        })
    }

    /// Whether the connection is gone.
    pub fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// Reads `snowflake_status()`: who the database issues as (refused when it cannot take
    /// grants: not preloaded, `snowflake.keeper` off, settings unusable), and its issuing.
    pub async fn status(&self) -> Result<(Identity, Observed), DbError> {
        let shown = &self.shown;
        let row = timed(
            shown,
            "cannot read snowflake_status()",
            self.client.query_one(&self.status, &[]),
        )
        .await?;
        let observed = observed(&row);
        let preloaded: Option<bool> = row.get(4);
        let keeper: Option<bool> = row.get(5);
        let datacenter_id: Option<i32> = row.get(6);
        let worker_id: Option<i32> = row.get(7);
        let layout: Option<String> = row.get(8);
        let epoch_ms: Option<i64> = row.get(9);
        let last_error: Option<String> = row.get(10);
        if preloaded != Some(true) {
            return Err(DbError::Refused(format!(
                "the snowflake library is not preloaded in {shown}: add snowflake to \
                 shared_preload_libraries in postgresql.conf and restart the server"
            )));
        }
        let (Some(datacenter_id), Some(worker_id), Some(layout), Some(epoch_ms)) =
            (datacenter_id, worker_id, layout, epoch_ms)
        else {
            return Err(DbError::Refused(format!(
                "the database's snowflake settings are unusable ({shown}): {}",
                last_error
                    .as_deref()
                    .unwrap_or("snowflake_status() shows no pair")
            )));
        };
        if keeper != Some(true) {
            return Err(DbError::Refused(format!(
                "snowflake.keeper is off in {shown}: its pair is static and takes no grants; set \
                 snowflake.keeper = on in postgresql.conf and restart the server to run it under \
                 pg-keeper"
            )));
        }
        let layout = layout
            .parse::<Bits>()
            .and_then(|bits| Layout::new(u64::try_from(epoch_ms).unwrap_or(0), bits))
            .map_err(|e| {
                DbError::Refused(format!("the database's layout is unusable ({shown}): {e}"))
            })?;
        let identity = Identity {
            datacenter_id: u64::try_from(datacenter_id).unwrap_or(u64::MAX),
            worker_id: u64::try_from(worker_id).unwrap_or(u64::MAX),
            layout,
        };
        Ok((identity, observed))
    }

    /// Grants (or renews) the issue limit.
    pub async fn grant(&self, grant: &Grant) -> Result<Observed, DbError> {
        let datacenter_id = i32::try_from(grant.datacenter_id).unwrap_or(i32::MAX);
        let worker_id = i32::try_from(grant.worker_id).unwrap_or(i32::MAX);
        let limit_ms = i64::try_from(grant.limit_ms).unwrap_or(i64::MAX);
        let valid_for_ms = i32::try_from(grant.valid_for_ms).unwrap_or(i32::MAX);
        let floor_ms = grant.floor_ms.map(|f| i64::try_from(f).unwrap_or(i64::MAX));
        let row = timed(
            &self.shown,
            "cannot grant the issue limit",
            self.client.query_one(
                &self.grant,
                &[
                    &datacenter_id,
                    &worker_id,
                    &limit_ms,
                    &valid_for_ms,
                    &grant.lease,
                    &floor_ms,
                ],
            ),
        )
        .await?;
        Ok(observed(&row))
    }

    /// Ends the grant at once; the answer, read after it ended, bounds every ID issued.
    pub async fn revoke(&self) -> Result<Observed, DbError> {
        let row = timed(
            &self.shown,
            "cannot revoke the grant",
            self.client.query_one(&self.revoke, &[]),
        )
        .await?;
        Ok(observed(&row))
    }
}

fn observed(row: &tokio_postgres::Row) -> Observed {
    let ms = |v: Option<i64>| v.and_then(|v| u64::try_from(v).ok());
    Observed {
        in_recovery: row.get::<_, Option<bool>>(0).unwrap_or(false),
        mark_ms: ms(row.get(1)),
        last_issued_ms: ms(row.get(2)),
        now_ms: ms(row.get(3)).unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::{Observed, Target};

    #[test]
    fn a_connection_string_is_shown_without_its_password() {
        let target =
            Target::parse("host=127.0.0.1 port=5433 user=postgres password=hunter2 dbname=app")
                .unwrap();
        assert_eq!(target.shown, "postgresql://postgres@127.0.0.1:5433/app");
        let url = Target::parse("postgresql://keeper:hunter2@db.local/app").unwrap();
        assert_eq!(url.shown, "postgresql://keeper@db.local:5432/app");
        assert!(!url.shown.contains("hunter2"));
        let socket = Target::parse("host=/var/run/postgresql user=postgres").unwrap();
        assert_eq!(
            socket.shown,
            "postgresql://postgres@/var/run/postgresql/.s.PGSQL.5432/postgres"
        );
    }

    #[test]
    fn bad_connection_strings_are_explained() {
        let err = Target::parse("host=127.0.0.1 sslmode=require").unwrap_err();
        assert!(err.contains("sslmode=require"), "{err}");
        assert!(err.contains("Unix socket"), "{err}");
        let err = Target::parse("user=postgres").unwrap_err();
        assert!(err.contains("no host"), "{err}");
        let err = Target::parse("host=127.0.0.1 port=x").unwrap_err();
        assert!(
            err.starts_with("invalid --postgres connection string"),
            "{err}"
        );
    }

    #[test]
    fn the_final_mark_covers_what_was_issued_and_never_rises() {
        let answer = |last_issued_ms, mark_ms, now_ms| Observed {
            in_recovery: false,
            mark_ms,
            last_issued_ms,
            now_ms,
        };
        // Lowered to the exact point reached.
        assert_eq!(
            answer(Some(900), Some(2_000), 500).final_mark_ms(3_000),
            900
        );
        assert_eq!(answer(Some(400), None, 500).final_mark_ms(3_000), 500);
        // Nothing issued since the start: the mark its generator resumes above.
        assert_eq!(answer(None, Some(2_000), 500).final_mark_ms(3_000), 2_000);
        // A database clock ahead of the mark written does not raise it.
        assert_eq!(answer(Some(900), None, 9_000).final_mark_ms(3_000), 3_000);
        // IDs above the mark written (issued before the keeper) keep their cover.
        assert_eq!(answer(None, Some(5_000), 500).final_mark_ms(3_000), 5_000);
    }
}

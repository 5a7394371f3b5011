//! `snowflake pg-keeper`: its flags — the database's connection string and password file of
//! its own, and `serve`'s own definitions (name, environment variable, help, parser) of the
//! fleet flags it shares: etcd, its TLS and auth, the lease, the mark's reach, the clock
//! policy, the logs, `--config` — resolved exactly as `serve` resolves them, then handed to
//! the `snowflake-pg-keeper` crate.

use crate::settings_args::{Shared, SharedKeys};
use anyhow::{Context, bail};
use clap::Args;
use snowflake_core::Layout;
use snowflake_pg_keeper::{Settings, Target};
use snowflake_server::clock_trust::ClockAnchor;
use snowflake_server::{Config, Coordination};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

#[derive(Debug, Args)]
pub struct PgKeeperArgs {
    /// The database to keep: a libpq-style connection string (`host=/var/run/postgresql
    /// user=postgres dbname=app`, or `postgresql://user@host:port/dbname`) as a superuser, to
    /// the database where `CREATE EXTENSION snowflake` ran. No TLS: run the keeper beside the
    /// database and connect over its Unix socket or loopback.
    #[arg(
        long,
        env = "SNOWFLAKE_POSTGRES",
        value_name = "CONNINFO",
        help_heading = "Database"
    )]
    postgres: String,

    /// File holding the password of the --postgres user (one line); a password written in the
    /// connection string works too, but shows in the process list unless given through
    /// SNOWFLAKE_POSTGRES.
    #[arg(
        long,
        env = "SNOWFLAKE_POSTGRES_PASSWORD_FILE",
        value_name = "FILE",
        help_heading = "Database"
    )]
    postgres_password_file: Option<PathBuf>,

    #[command(flatten)]
    serve: ServeFlags,
}

/// `serve`'s flags that `pg-keeper` shares, parsed into a `ServeArgs` whose other flags are
/// unset: their definitions are the settings table's, as `serve`'s are, so they never drift
/// apart.
type ServeFlags = Shared<KeeperFlags>;

#[derive(Debug, Clone)]
struct KeeperFlags;

impl SharedKeys for KeeperFlags {
    const KEYS: &'static [&'static str] = &[
        "config",
        "etcd_endpoints",
        "etcd_prefix",
        "etcd_ca",
        "etcd_cert",
        "etcd_key",
        "etcd_user",
        "etcd_password_file",
        "lease_ttl_secs",
        "claim_timeout_secs",
        "reserve_ms",
        "max_clock_step_ms",
        "clock_step_trust_secs",
        "hostname",
        "advertise_addr",
        "log_format",
        "log",
        "allow_cleartext_credentials",
    ];
}

/// The shared flags that take no value.
#[cfg(test)]
const SWITCHES: &[&str] = &["allow_cleartext_credentials"];

#[cfg(test)]
const SHARED: &[&str] = KeeperFlags::KEYS;

/// The keeper's settings and `serve`'s resolved configuration (for the logs), checked.
fn resolve(args: &PgKeeperArgs, layout: Option<Layout>) -> anyhow::Result<(Settings, Config)> {
    let config = Config::resolve(&args.serve.0, None)?;
    let etcd = match &config.identity.coordination {
        Some(Coordination::Etcd(etcd)) => etcd.clone(),
        Some(Coordination::ZooKeeper(_)) => bail!(
            "pg-keeper leases the database's pair from etcd only: remove zookeeper from its \
             settings (--zookeeper, SNOWFLAKE_ZOOKEEPER or the config file) and give \
             --etcd-endpoints"
        ),
        None => bail!(
            "pg-keeper needs the fleet's etcd: --etcd-endpoints URL[,URL...] (or \
             SNOWFLAKE_ETCD_ENDPOINTS, or etcd_endpoints in the config file)"
        ),
    };
    let mut target = Target::parse(&args.postgres).map_err(anyhow::Error::msg)?;
    if let Some(file) = &args.postgres_password_file {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("cannot read --postgres-password-file {}", file.display()))?;
        let password = text.lines().next().unwrap_or("");
        if password.is_empty() {
            bail!(
                "invalid --postgres-password-file {}: expected the password on its first line, \
                 found an empty line",
                file.display()
            );
        }
        target.config.password(password);
    }
    let settings = Settings {
        target,
        etcd,
        reserve_ms: config.clock.reserve_ms,
        max_clock_step_ms: config.clock.max_clock_step_ms,
        clock_step_trust: config.clock.clock_step_trust,
        hostname: config.identity.hostname.clone(),
        advertise_addr: config.identity.advertise_addr.clone(),
        layout,
    };
    Ok((settings, config))
}

/// `snowflake pg-keeper`: configuration errors exit 2; a keeper that cannot go on exits 1
/// (after revoking and releasing); SIGTERM/SIGINT revoke, leave the exact mark, release, exit 0.
pub fn run(args: &PgKeeperArgs, layout: Option<Layout>) -> ExitCode {
    // Trusted time starts here, before the database and the claim (which can take seconds).
    let clock: Arc<dyn snowflake_core::Clock> = Arc::new(snowflake_core::SystemClock);
    let anchor = ClockAnchor::now(clock.as_ref());
    let (settings, config) = match resolve(args, layout) {
        Ok(resolved) => resolved,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::from(2);
        }
    };
    if let Err(err) = crate::init_logging(&config) {
        eprintln!("error: {err}");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let shutdown = crate::shutdown_signal()?;
        tracing::info!(
            version = env!("CARGO_PKG_VERSION"),
            database = %settings.target.shown,
            coordinator = %snowflake_fleet::Coordination::Etcd(settings.etcd.clone()),
            lease_ttl_secs = settings.etcd.lease_ttl_secs,
            reserve_ms = settings.reserve_ms,
            "pg-keeper starting"
        );
        snowflake_pg_keeper::run(&settings, clock, anchor, shutdown).await?;
        anyhow::Ok(())
    });
    match result {
        Ok(()) => {
            tracing::info!("pg-keeper stopped");
            ExitCode::SUCCESS
        }
        Err(err) => {
            tracing::error!(error = %err, "stopped");
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{PgKeeperArgs, SHARED, SWITCHES, resolve};
    use clap::{Args, Command, FromArgMatches};
    use snowflake_server::settings;

    fn parse(args: &[&str]) -> Result<PgKeeperArgs, clap::Error> {
        let cmd = PgKeeperArgs::augment_args(Command::new("pg-keeper").no_binary_name(true));
        let matches = cmd.try_get_matches_from(args)?;
        PgKeeperArgs::from_arg_matches(&matches)
    }

    #[test]
    fn every_shared_flag_is_serves_and_lands_in_its_field() {
        let flags: Vec<String> = SHARED
            .iter()
            .flat_map(|id| {
                let flag = format!("--{}", id.replace('_', "-"));
                if SWITCHES.contains(id) {
                    vec![flag]
                } else {
                    vec![flag, format!("v-{id}")]
                }
            })
            .collect();
        let mut argv = vec!["--postgres", "host=127.0.0.1"];
        argv.extend(flags.iter().map(String::as_str));
        let args = parse(&argv).unwrap();
        let serve = &args.serve.0;
        for id in SHARED {
            let setting = settings::find(id).unwrap();
            let want = if SWITCHES.contains(id) {
                "true".to_owned()
            } else {
                format!("v-{id}")
            };
            assert_eq!(serve.get(setting), Some(want.as_str()), "{id}");
        }
        assert_eq!(
            serve.get(&settings::ETCD_ENDPOINTS),
            Some("v-etcd_endpoints")
        );
        assert_eq!(serve.get(&settings::ETCD_CA), Some("v-etcd_ca"));
        assert_eq!(serve.get(&settings::RESERVE_MS), Some("v-reserve_ms"));
        assert_eq!(serve.get(&settings::LOG), Some("v-log"));
        assert_eq!(
            serve.get(&settings::ADVERTISE_ADDR),
            Some("v-advertise_addr")
        );
        assert_eq!(
            serve.get(&settings::ALLOW_CLEARTEXT_CREDENTIALS),
            Some("true")
        );
        // Not a keeper flag.
        assert!(serve.get(&settings::HTTP_ADDR).is_none());
        let err = parse(&["--postgres", "host=x", "--http-addr", "off"]).unwrap_err();
        assert!(err.to_string().contains("--http-addr"), "{err}");
    }

    #[test]
    fn the_keeper_needs_etcd_and_never_zookeeper() {
        let args = parse(&["--postgres", "host=127.0.0.1"]).unwrap();
        let err = resolve(&args, None).unwrap_err().to_string();
        assert!(err.contains("needs the fleet's etcd"), "{err}");
        let args = parse(&[
            "--postgres",
            "host=127.0.0.1 sslmode=require",
            "--etcd-endpoints",
            "http://127.0.0.1:2379",
        ])
        .unwrap();
        let err = resolve(&args, None).unwrap_err().to_string();
        assert!(err.contains("sslmode=require"), "{err}");
        let args = parse(&[
            "--postgres",
            "host=127.0.0.1",
            "--etcd-endpoints",
            "http://127.0.0.1:2379",
            "--lease-ttl-secs",
            "1",
        ])
        .unwrap();
        let err = resolve(&args, None).unwrap_err().to_string();
        assert!(err.contains("lease-ttl-secs"), "{err}");
        let args = parse(&[
            "--postgres",
            "host=127.0.0.1",
            "--etcd-endpoints",
            "http://127.0.0.1:2379",
            "--lease-ttl-secs",
            "4",
        ])
        .unwrap();
        let (settings, _) = resolve(&args, None).unwrap();
        assert_eq!(settings.etcd.lease_ttl_secs, 4);
        assert_eq!(settings.reserve_ms, 3000);
    }
}

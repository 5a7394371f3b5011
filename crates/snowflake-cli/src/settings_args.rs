//! The settings table as clap arguments: `serve`'s flags, the global `--layout`/`--epoch-ms`,
//! and the subset `pg-keeper` shares, each built from its [`Setting`] (flag, environment
//! variable, value name, help, heading), so that none is spelled here.

use clap::{Arg, ArgAction, ArgMatches, Args, Command, FromArgMatches};
use snowflake_server::settings::{self, Kind, SETTINGS, ServeArgs, Setting};

/// The clap argument of `setting` (which must have a flag).
pub fn arg(setting: &'static Setting) -> Arg {
    let flag = setting
        .flag
        .unwrap_or_else(|| panic!("{} is not a flag", setting.key));
    let mut arg = Arg::new(setting.key)
        .long(flag)
        .help(setting.help_text())
        .help_heading(setting.group.heading());
    if let Some(env) = setting.env {
        arg = arg.env(env);
    }
    match setting.kind {
        Kind::Switch => arg.action(ArgAction::SetTrue),
        kind => {
            let arg = arg.value_name(setting.value_name).action(ArgAction::Set);
            if matches!(kind, Kind::Number { .. } | Kind::LayoutField) {
                arg.allow_negative_numbers(true)
            } else {
                arg
            }
        }
    }
}

/// Adds the flags of `settings` to `cmd`.
fn augment(cmd: Command, settings: impl Iterator<Item = &'static Setting>) -> Command {
    settings.map(arg).fold(cmd, Command::arg)
}

/// The values of `settings` found in `matches` (flag or environment), into `args`.
fn update(
    args: &mut ServeArgs,
    matches: &ArgMatches,
    settings: impl Iterator<Item = &'static Setting>,
) {
    for setting in settings {
        match setting.kind {
            Kind::Switch => {
                if matches.get_flag(setting.key) {
                    args.set(setting.key, "true");
                }
            }
            _ => {
                if let Some(value) = matches.get_one::<String>(setting.key) {
                    args.set(setting.key, value);
                }
            }
        }
    }
}

/// `serve`'s own flags: every setting with a flag but the global ones.
fn serve_settings() -> impl Iterator<Item = &'static Setting> {
    SETTINGS
        .iter()
        .copied()
        .filter(|s| s.flag.is_some() && !s.global)
}

/// The flags of `snowflake serve`, parsed into the server's [`ServeArgs`].
#[derive(Debug, Clone, Default)]
pub struct ServeCli(pub ServeArgs);

impl FromArgMatches for ServeCli {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let mut cli = ServeCli::default();
        cli.update_from_arg_matches(matches)?;
        Ok(cli)
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        update(&mut self.0, matches, serve_settings());
        Ok(())
    }
}

impl Args for ServeCli {
    fn augment_args(cmd: Command) -> Command {
        augment(cmd, serve_settings())
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        ServeCli::augment_args(cmd)
    }
}

/// A list of `serve`'s settings another subcommand takes too, by key.
pub trait SharedKeys {
    /// The settings' keys, in the order of `--help`.
    const KEYS: &'static [&'static str];
}

/// Some of `serve`'s flags (`pg-keeper`'s fleet flags, `state`'s target): `serve`'s
/// definitions, parsed into a [`ServeArgs`] whose other settings are unset.
#[derive(Debug, Clone)]
pub struct Shared<K>(pub ServeArgs, std::marker::PhantomData<K>);

impl<K> Default for Shared<K> {
    fn default() -> Self {
        Shared(ServeArgs::new(), std::marker::PhantomData)
    }
}

/// The settings `keys` names, in its order.
fn shared(keys: &'static [&'static str]) -> impl Iterator<Item = &'static Setting> {
    keys.iter().map(|key| {
        settings::find(key).unwrap_or_else(|| panic!("{key} is not in the settings table"))
    })
}

impl<K: SharedKeys> FromArgMatches for Shared<K> {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let mut flags = Shared::default();
        flags.update_from_arg_matches(matches)?;
        Ok(flags)
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        update(&mut self.0, matches, shared(K::KEYS));
        Ok(())
    }
}

impl<K: SharedKeys> Args for Shared<K> {
    fn augment_args(cmd: Command) -> Command {
        augment(cmd, shared(K::KEYS))
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

/// The global `--layout` and `--epoch-ms`, from the table.
#[derive(Debug, Clone, Default)]
pub struct LayoutArgs {
    /// `--layout` (or `SNOWFLAKE_LAYOUT`).
    pub layout: Option<String>,
    /// `--epoch-ms` (or `SNOWFLAKE_EPOCH_MS`).
    pub epoch_ms: Option<String>,
}

impl FromArgMatches for LayoutArgs {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let mut args = LayoutArgs::default();
        args.update_from_arg_matches(matches)?;
        Ok(args)
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        if let Some(value) = matches.get_one::<String>(settings::LAYOUT.key) {
            self.layout = Some(value.clone());
        }
        if let Some(value) = matches.get_one::<String>(settings::EPOCH_MS.key) {
            self.epoch_ms = Some(value.clone());
        }
        Ok(())
    }
}

impl Args for LayoutArgs {
    fn augment_args(cmd: Command) -> Command {
        let global = |setting: &'static Setting| {
            // Not under a heading of its own: the global flags go with every subcommand's.
            arg(setting).global(true).help_heading(None)
        };
        cmd.arg(global(&settings::LAYOUT))
            .arg(global(&settings::EPOCH_MS))
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        LayoutArgs::augment_args(cmd)
    }
}

#[cfg(test)]
mod tests {
    use super::ServeCli;
    use clap::{Args, Command, FromArgMatches};
    use snowflake_server::Config;
    use std::time::Duration;

    /// Set in the child process that [`settings_from_the_environment`] starts.
    const CHILD: &str = "SNOWFLAKE_CONFIG_TEST_CHILD";

    fn parse(argv: &[&str]) -> ServeCli {
        let cmd = ServeCli::augment_args(Command::new("serve").no_binary_name(true));
        ServeCli::from_arg_matches(&cmd.try_get_matches_from(argv).unwrap()).unwrap()
    }

    /// The environment variables are read by clap into the same settings as the flags; this
    /// runs in a child process so that setting them cannot race the other tests' threads.
    /// (Moved from the server's `tests/config.rs` with clap.)
    #[test]
    fn settings_from_the_environment() {
        if std::env::var_os(CHILD).is_none() {
            let mut child = std::process::Command::new(std::env::current_exe().unwrap());
            // Only the variables set here: none inherited from whoever runs the tests.
            for (name, _) in std::env::vars_os() {
                if name.to_string_lossy().starts_with("SNOWFLAKE_") {
                    child.env_remove(name);
                }
            }
            let output = child
                .args([
                    "--exact",
                    "settings_args::tests::settings_from_the_environment",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD, "1")
                .env("SNOWFLAKE_WORKER_ID", "4")
                .env("SNOWFLAKE_ETCD_ENDPOINTS", "10.0.0.1:2379,10.0.0.2:2379")
                .env("SNOWFLAKE_ETCD_PREFIX", "/env/")
                .env("SNOWFLAKE_LEASE_TTL_SECS", "5")
                .env("SNOWFLAKE_ADVERTISE_ADDR", "ids-4.internal:7609")
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&output.stdout);
            assert!(
                output.status.success() && stdout.contains("1 passed"),
                "{stdout}\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
            return;
        }
        let cli = parse(&[]);
        let config = Config::resolve(&cli.0, None).unwrap();
        assert!(config.identity.worker_id_given());
        assert_eq!(config.identity.worker_id, 4);
        let etcd = config.identity.etcd().unwrap();
        assert_eq!(
            etcd.endpoints,
            ["http://10.0.0.1:2379", "http://10.0.0.2:2379"]
        );
        assert_eq!(etcd.prefix, "/env");
        assert_eq!(
            (etcd.lease_ttl_secs, etcd.claim_timeout),
            (5, Duration::from_secs(7))
        );
        assert_eq!(
            config.identity.advertise_addr.as_deref(),
            Some("ids-4.internal:7609")
        );
        // A flag overrides its variable.
        let cli = parse(&["--lease-ttl-secs", "1"]);
        let got = Config::resolve(&cli.0, None).unwrap_err().to_string();
        assert!(
            got.contains(
                "invalid --lease-ttl-secs (or SNOWFLAKE_LEASE_TTL_SECS): expected 2..=300, found 1"
            ),
            "{got}"
        );
    }

    #[test]
    fn every_flag_of_the_table_reaches_its_setting() {
        use snowflake_server::settings::{Kind, SETTINGS};
        let mut argv = Vec::new();
        let serve: Vec<_> = SETTINGS
            .iter()
            .filter(|s| s.flag.is_some() && !s.global)
            .collect();
        for setting in &serve {
            argv.push(format!("--{}", setting.flag.unwrap()));
            if setting.kind != Kind::Switch {
                argv.push(format!("v-{}", setting.key));
            }
        }
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let cli = parse(&argv);
        for setting in serve {
            let want = match setting.kind {
                Kind::Switch => "true".to_owned(),
                _ => format!("v-{}", setting.key),
            };
            assert_eq!(cli.0.get(setting), Some(want.as_str()), "{}", setting.key);
        }
    }
}

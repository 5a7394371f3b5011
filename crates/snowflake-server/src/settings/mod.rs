//! The settings table of `snowflake serve`: each setting defined once — flag, environment
//! variable, config-file key, default, range, help — from which the binary builds
//! `serve --help`, the config file's known keys are taken, and `docs/configuration.md` is
//! generated.
//!
//! The model is ripgrep's flag definitions: one description per setting, read by every place
//! that needs it. Unlike ripgrep, this crate does not parse the command line: clap lives in the
//! binary, which turns each [`Setting`] into a clap argument and hands the values it found back
//! as [`ServeArgs`]. [`crate::config::Config::resolve`] then reads them, the config file and the
//! defaults, through the same [`Setting`]s.

mod base;
mod doc;
mod fleet;
mod table;

pub use doc::markdown;
pub use fleet::*;
pub use table::*;

use std::collections::BTreeMap;

/// One setting of `snowflake serve`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    /// The key in the config file, and the setting's id (e.g. `http_addr`).
    pub key: &'static str,
    /// The long flag, without `--` (e.g. `http-addr`); `None`: not a flag.
    pub flag: Option<&'static str>,
    /// The environment variable (e.g. `SNOWFLAKE_HTTP_ADDR`); `None`: not read from it.
    pub env: Option<&'static str>,
    /// Whether the config file may hold it.
    pub in_file: bool,
    /// What the value is (e.g. `ADDR`, `MS`); empty for a switch.
    pub value_name: &'static str,
    /// How the value is read, and its range.
    pub kind: Kind,
    /// The value when none is given.
    pub default: DefaultValue,
    /// The section of `--help` and of docs/configuration.md.
    pub group: Group,
    /// What it does, in sentences; the range and the default are added from `kind` and
    /// `default`.
    pub help: &'static str,
    /// A flag of every subcommand (`--layout`, `--epoch-ms`), not of `serve` alone.
    pub global: bool,
}

/// How a setting's value is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Text checked by the setting's own parser (an address, a URL list, a prefix...).
    Text,
    /// A file or directory path (not empty).
    Path,
    /// A whole number in `min..=max` (in `unit`).
    Number {
        /// The smallest value accepted.
        min: u64,
        /// The largest value accepted.
        max: u64,
        /// What it counts (`ms`, `s`, `bytes`), or empty.
        unit: &'static str,
    },
    /// A number whose range comes from the layout (datacenter and worker ids, the epoch).
    LayoutField,
    /// On when given (`true` or `false` in the file and the environment).
    Switch,
    /// A TOML table, only in the config file.
    Table,
}

/// A setting's value when none is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefaultValue {
    /// No value: the feature is off or the setting unused.
    None,
    /// This value, read like a given one.
    Value(&'static str),
    /// Computed when the configuration is resolved, as described.
    Computed(&'static str),
}

/// The sections settings are grouped in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Group {
    /// The config file.
    Service,
    /// The ID layout (flags of every subcommand).
    Layout,
    /// The listen addresses.
    Listeners,
    /// Sizes, counts and time limits of requests and connections.
    Limits,
    /// The clock policy and the restart-safety reach.
    Clock,
    /// TLS on the listeners.
    Tls,
    /// The (datacenter, worker) pair, given or derived from the host name.
    Identity,
    /// The state directory.
    State,
    /// The logs.
    Logging,
    /// Leasing the pair from etcd.
    Etcd,
    /// Registering the worker id in ZooKeeper.
    ZooKeeper,
}

impl Group {
    /// The heading in `--help` and docs/configuration.md.
    pub fn heading(self) -> &'static str {
        match self {
            Group::Service => "Service",
            Group::Layout => "Layout",
            Group::Listeners => "Listeners",
            Group::Limits => "Limits",
            Group::Clock => "Clock",
            Group::Tls => "TLS",
            Group::Identity => "Identity",
            Group::State => "State",
            Group::Logging => "Logging",
            Group::Etcd => "Fleet (etcd)",
            Group::ZooKeeper => "Fleet (ZooKeeper)",
        }
    }
}

impl Setting {
    /// The range, when the setting has one of its own: `64..=16384000 bytes`.
    pub fn range(&self) -> Option<String> {
        match self.kind {
            Kind::Number { min, max, unit: "" } => Some(format!("{min}..={max}")),
            Kind::Number { min, max, unit } => Some(format!("{min}..={max} {unit}")),
            _ => None,
        }
    }

    /// The default as shown: `65536`, `off`, `the number of CPUs`; `None` when there is none.
    pub fn default_text(&self) -> Option<&'static str> {
        match self.default {
            DefaultValue::None => None,
            DefaultValue::Value(text) | DefaultValue::Computed(text) => Some(text),
        }
    }

    /// The help of `--help`: the sentences, the range and the default.
    pub fn help_text(&self) -> String {
        let mut text = self.help.to_owned();
        if let Some(range) = self.range() {
            text.push_str(&format!(" Range: {range}."));
        }
        if let Some(default) = self.default_text() {
            text.push_str(&format!(" [default: {default}]"));
        }
        text
    }

    /// How an error names it when given on the command line or in the environment:
    /// `--http-addr (or SNOWFLAKE_HTTP_ADDR)`.
    pub fn given_name(&self) -> String {
        match (self.flag, self.env) {
            (Some(flag), Some(env)) => format!("--{flag} (or {env})"),
            (Some(flag), None) => format!("--{flag}"),
            (None, Some(env)) => env.to_owned(),
            (None, None) => self.key.to_owned(),
        }
    }

    /// How a message refers to it: `--http-addr`, else its variable, else its file key.
    pub fn name(&self) -> String {
        match (self.flag, self.env) {
            (Some(flag), _) => format!("--{flag}"),
            (None, Some(env)) => env.to_owned(),
            (None, None) => format!("[{}]", self.key),
        }
    }
}

/// The setting with this config-file key.
pub fn find(key: &str) -> Option<&'static Setting> {
    SETTINGS.iter().copied().find(|s| s.key == key)
}

/// The keys a config file may hold, in the table's order.
pub fn file_keys() -> impl Iterator<Item = &'static str> {
    SETTINGS.iter().filter(|s| s.in_file).map(|s| s.key)
}

/// The values given on the command line or in the environment (the binary's clap fills them
/// from the table; tests build them with [`ServeArgs::with`]), by setting key.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServeArgs {
    values: BTreeMap<&'static str, String>,
}

impl ServeArgs {
    /// No value given: every setting from the config file or its default.
    pub fn new() -> ServeArgs {
        ServeArgs::default()
    }

    /// `self` with `key` given as `value` (a switch: `true`).
    ///
    /// # Panics
    /// When `key` is not a setting of the table that a flag or variable gives: a mistake in
    /// the calling code, never in input.
    #[must_use]
    pub fn with(mut self, key: &str, value: impl AsRef<std::ffi::OsStr>) -> ServeArgs {
        self.set(key, value);
        self
    }

    /// Gives `key` as `value`; see [`ServeArgs::with`].
    ///
    /// # Panics
    /// As [`ServeArgs::with`].
    pub fn set(&mut self, key: &str, value: impl AsRef<std::ffi::OsStr>) -> &mut ServeArgs {
        let setting = find(key)
            .filter(|s| s.flag.is_some() || s.env.is_some())
            .unwrap_or_else(|| panic!("{key:?} is not a flag of the settings table"));
        self.values
            .insert(setting.key, value.as_ref().to_string_lossy().into_owned());
        self
    }

    /// Forgets a given value.
    pub fn unset(&mut self, key: &str) -> &mut ServeArgs {
        self.values.remove(key);
        self
    }

    /// The value given for `setting`, if any.
    pub fn get(&self, setting: &Setting) -> Option<&str> {
        self.values.get(setting.key).map(String::as_str)
    }

    /// Whether `setting` was given.
    pub fn is_given(&self, setting: &Setting) -> bool {
        self.values.contains_key(setting.key)
    }
}

#[cfg(test)]
mod tests {
    use super::{DefaultValue, Kind, SETTINGS};

    #[test]
    fn every_setting_is_spelled_one_way() {
        let mut keys = std::collections::BTreeSet::new();
        for s in SETTINGS {
            assert!(keys.insert(s.key), "{} twice", s.key);
            if let Some(flag) = s.flag {
                assert_eq!(flag, s.key.replace('_', "-"), "{}", s.key);
            }
            if let Some(env) = s.env {
                assert_eq!(
                    env,
                    format!("SNOWFLAKE_{}", s.key.to_uppercase()),
                    "{}",
                    s.key
                );
            }
            assert!(
                s.flag.is_some() || s.env.is_some() || s.in_file,
                "{}",
                s.key
            );
            assert_eq!(
                s.value_name.is_empty(),
                matches!(s.kind, Kind::Switch | Kind::Table)
            );
            assert!(
                s.help.ends_with('.') && !s.help.contains("[default"),
                "{}",
                s.key
            );
        }
    }

    #[test]
    fn every_default_value_is_in_its_range() {
        for s in SETTINGS {
            if let (DefaultValue::Value(text), Kind::Number { min, max, .. }) = (s.default, s.kind)
            {
                let n: u64 = text.parse().unwrap();
                assert!((min..=max).contains(&n), "{}", s.key);
            }
        }
        assert!(
            super::EPOCH_MS
                .default_text()
                .unwrap()
                .ends_with(&snowflake_core::TWITTER_EPOCH_MS.to_string())
        );
    }
}

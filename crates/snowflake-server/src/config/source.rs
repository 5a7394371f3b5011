//! Where a setting's value comes from: the flag or environment variable (as the binary found
//! them), else the `--config` file, else the settings table's default; with the name an error
//! gives that source.

use super::ConfigError;
use super::parse::parse_number;
use crate::settings::{self, DefaultValue, Kind, ServeArgs, Setting};
use std::path::{Path, PathBuf};

/// A config file larger than this is refused rather than read.
const MAX_CONFIG_FILE_BYTES: u64 = 1024 * 1024;

/// The `--config` file, parsed, with only keys of the settings table.
#[derive(Debug)]
pub(super) struct ConfigFile {
    pub(super) path: PathBuf,
    pub(super) table: toml::Table,
}

impl ConfigFile {
    pub(super) fn read(path: &Path) -> Result<ConfigFile, ConfigError> {
        let shown = path.display();
        let meta = std::fs::metadata(path)
            .map_err(|e| ConfigError(format!("cannot read config file {shown}: {e}")))?;
        if meta.len() > MAX_CONFIG_FILE_BYTES {
            return Err(ConfigError(format!(
                "config file {shown} is {} bytes; a config file is at most {MAX_CONFIG_FILE_BYTES} bytes",
                meta.len()
            )));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError(format!("cannot read config file {shown}: {e}")))?;
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            ConfigError(format!(
                "config file {shown} is not valid TOML: {}",
                e.to_string().replace('\n', " ")
            ))
        })?;
        if let Some(unknown) = table
            .keys()
            .find(|k| !settings::file_keys().any(|known| known == k.as_str()))
        {
            return Err(ConfigError(format!(
                "unknown setting {unknown:?} in config file {shown}; known settings: {}",
                settings::file_keys().collect::<Vec<_>>().join(", ")
            )));
        }
        Ok(ConfigFile {
            path: path.to_owned(),
            table,
        })
    }

    /// Whether the file gives `setting`.
    pub(super) fn gives(&self, setting: &Setting) -> bool {
        self.table.contains_key(setting.key)
    }
}

/// The flags/environment and the config file, read through the settings table.
pub(super) struct Sources<'a> {
    pub(super) args: &'a ServeArgs,
    pub(super) file: Option<&'a ConfigFile>,
}

impl Sources<'_> {
    /// The value of a setting from the flag/environment, else the file; with its source's name.
    pub(super) fn pick(&self, setting: &Setting) -> Option<(String, String)> {
        if let Some(value) = self.args.get(setting) {
            return Some((value.to_owned(), setting.given_name()));
        }
        let file = self.file.filter(|_| setting.in_file)?;
        let value = file.table.get(setting.key)?;
        let name = format!("{} in {}", setting.key, file.path.display());
        let text = match value {
            toml::Value::String(s) => s.clone(),
            toml::Value::Integer(i) => i.to_string(),
            // `{:?}` keeps the fraction or exponent (`3.0`, `100000.0`), so a float is never
            // taken for a whole number.
            toml::Value::Float(f) => format!("{f:?}"),
            toml::Value::Boolean(b) => b.to_string(),
            other => format!("<{}>", other.type_str()),
        };
        Some((text, name))
    }

    /// [`Sources::pick`], else the table's default value (named as such).
    pub(super) fn pick_or_default(&self, setting: &Setting) -> Option<(String, String)> {
        self.pick(setting).or_else(|| match setting.default {
            DefaultValue::Value(text) => Some((
                text.to_owned(),
                format!("the default of {}", setting.name()),
            )),
            DefaultValue::None | DefaultValue::Computed(_) => None,
        })
    }

    /// Whether the flag/environment or the file gives `setting`.
    pub(super) fn is_given(&self, setting: &Setting) -> bool {
        self.args.is_given(setting) || self.file.is_some_and(|f| f.gives(setting))
    }

    /// A number setting when given, checked against the table's range.
    pub(super) fn number(&self, setting: &Setting) -> Result<Option<u64>, ConfigError> {
        let Kind::Number { min, max, .. } = setting.kind else {
            unreachable!("{} is not a number setting", setting.key)
        };
        match self.pick(setting) {
            None => Ok(None),
            Some((text, name)) => parse_number(&text, min, max)
                .map(Some)
                .map_err(|e| ConfigError::invalid(&name, e)),
        }
    }

    /// A number setting, given or the table's default.
    pub(super) fn number_or_default(&self, setting: &Setting) -> Result<u64, ConfigError> {
        if let Some(n) = self.number(setting)? {
            return Ok(n);
        }
        let (DefaultValue::Value(text), Kind::Number { min, max, .. }) =
            (setting.default, setting.kind)
        else {
            unreachable!("{} has no default number", setting.key)
        };
        parse_number(text, min, max)
            .map_err(|e| ConfigError::invalid(&format!("the default of {}", setting.name()), e))
    }
}

//! The extension's settings (`snowflake.*` in `postgresql.conf`), as text in and a checked
//! [`Config`] out, with errors that name the setting, the value and the valid range.

use snowflake_core::{Bits, Field, Layout};

/// The settings as PostgreSQL holds them: text, `None` when unset.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawSettings {
    /// `snowflake.datacenter_id`.
    pub datacenter_id: Option<String>,
    /// `snowflake.worker_id`.
    pub worker_id: Option<String>,
    /// `snowflake.layout` (default `twitter`).
    pub layout: Option<String>,
    /// `snowflake.epoch_ms` (default: the layout's epoch).
    pub epoch_ms: Option<String>,
    /// `snowflake.reserve_ms` (default 3000).
    pub reserve_ms: Option<String>,
    /// `snowflake.max_clock_step_ms` (default 1000).
    pub max_clock_step_ms: Option<String>,
    /// `snowflake.clock_step_trust_secs` (default 10).
    pub clock_step_trust_secs: Option<String>,
    /// `snowflake.keeper` (default off).
    pub keeper: bool,
}

/// The checked settings of one database cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// The layout, with its epoch.
    pub layout: Layout,
    /// The datacenter id, within the layout's range.
    pub datacenter_id: u64,
    /// The worker id, within the layout's range.
    pub worker_id: u64,
    /// How far ahead of the clock a reservation reaches, in milliseconds.
    pub reserve_ms: u64,
    /// A forward clock step larger than this is not trusted until it holds.
    pub max_clock_step_ms: u64,
    /// How long such a step must hold, in milliseconds.
    pub clock_step_trust_ms: u64,
    /// Whether the pair is kept by `snowflake pg-keeper`: then IDs are issued only under a live
    /// grant.
    pub keeper: bool,
}

/// Default of `snowflake.reserve_ms`, as `serve --reserve-ms`.
pub const DEFAULT_RESERVE_MS: u64 = 3000;
/// Default of `snowflake.max_clock_step_ms`, as `serve --max-clock-step-ms`.
pub const DEFAULT_MAX_CLOCK_STEP_MS: u64 = 1000;
/// Default of `snowflake.clock_step_trust_secs`, as `serve --clock-step-trust-secs`.
pub const DEFAULT_CLOCK_STEP_TRUST_SECS: u64 = 10;

/// Why the settings cannot be used: one line naming the setting and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SettingsError(pub String);

fn unset(value: &Option<String>) -> Option<&str> {
    value.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

/// Parses a decimal setting in `min..=max`, or `default` when unset.
fn number(
    name: &str,
    value: &Option<String>,
    min: u64,
    max: u64,
    default: u64,
) -> Result<u64, SettingsError> {
    let Some(text) = unset(value) else {
        return Ok(default);
    };
    match text.parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(SettingsError(format!(
            "invalid {name}: expected {min}..={max}, found {text:?}"
        ))),
    }
}

/// The widths named by `snowflake.layout` (core's names: `twitter`, `js-safe`,
/// `custom:T,D,W,S`), before the epoch is applied.
fn layout_bits(name: Option<&str>) -> Result<Bits, SettingsError> {
    name.unwrap_or("twitter")
        .parse::<Bits>()
        .and_then(|bits| bits.check())
        .map_err(|e| SettingsError(format!("snowflake.layout: {e}")))
}

impl RawSettings {
    /// Checks every setting; `now_ms` is the wall clock (a custom epoch must not be in the
    /// future).
    pub fn check(&self, now_ms: u64) -> Result<Config, SettingsError> {
        let bits = layout_bits(unset(&self.layout))?;
        let layout = match unset(&self.epoch_ms) {
            None => Layout::new_at(snowflake_core::TWITTER_EPOCH_MS, bits, now_ms),
            Some(text) => {
                let epoch = text.parse::<u64>().map_err(|_| {
                    SettingsError(format!(
                        "invalid snowflake.epoch_ms: expected unix milliseconds, found {text:?}"
                    ))
                })?;
                Layout::new_at(epoch, bits, now_ms)
            }
        }
        .map_err(|e| SettingsError(format!("snowflake.layout/snowflake.epoch_ms: {e}")))?;
        let pair = |name: &str, field: Field, value: &Option<String>| {
            let (_, max) = layout.range(field);
            let text = unset(value).ok_or_else(|| {
                SettingsError(format!(
                    "{name} is not set: add `{name} = N` (N in 0..={max}) to postgresql.conf and restart the server"
                ))
            })?;
            layout
                .parse(field, text)
                .map_err(|e| SettingsError(format!("{name}: {e}")))
        };
        let datacenter_id = pair(
            "snowflake.datacenter_id",
            Field::DatacenterId,
            &self.datacenter_id,
        )?;
        let worker_id = pair("snowflake.worker_id", Field::WorkerId, &self.worker_id)?;
        let reserve_ms = number(
            "snowflake.reserve_ms",
            &self.reserve_ms,
            100,
            60_000,
            DEFAULT_RESERVE_MS,
        )?;
        let max_clock_step_ms = number(
            "snowflake.max_clock_step_ms",
            &self.max_clock_step_ms,
            1,
            3_600_000,
            DEFAULT_MAX_CLOCK_STEP_MS,
        )?;
        let trust_secs = number(
            "snowflake.clock_step_trust_secs",
            &self.clock_step_trust_secs,
            1,
            3600,
            DEFAULT_CLOCK_STEP_TRUST_SECS,
        )?;
        Ok(Config {
            layout,
            datacenter_id,
            worker_id,
            reserve_ms,
            max_clock_step_ms,
            clock_step_trust_ms: trust_secs * 1000,
            keeper: self.keeper,
        })
    }

    /// Only the layout settings (`snowflake.layout`, `snowflake.epoch_ms`): what the pure SQL
    /// functions need, usable even when the pair is unset.
    pub fn layout(&self, now_ms: u64) -> Result<Layout, SettingsError> {
        let pairless = RawSettings {
            datacenter_id: Some("0".into()),
            worker_id: Some("0".into()),
            reserve_ms: None,
            max_clock_step_ms: None,
            clock_step_trust_secs: None,
            ..self.clone()
        };
        pairless.check(now_ms).map(|c| c.layout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000_000;

    fn raw(dc: &str, w: &str) -> RawSettings {
        RawSettings {
            datacenter_id: Some(dc.into()),
            worker_id: Some(w.into()),
            ..RawSettings::default()
        }
    }

    #[test]
    fn defaults_are_twitter_and_the_service_defaults() {
        let config = raw("7", "13").check(NOW).unwrap();
        assert_eq!(config.layout, Layout::TWITTER);
        assert_eq!((config.datacenter_id, config.worker_id), (7, 13));
        assert_eq!(config.reserve_ms, 3000);
        assert_eq!(config.max_clock_step_ms, 1000);
        assert_eq!(config.clock_step_trust_ms, 10_000);
        assert!(!config.keeper);
    }

    #[test]
    fn unset_pair_names_the_setting_and_the_fix() {
        let err = RawSettings::default().check(NOW).unwrap_err().to_string();
        assert_eq!(
            err,
            "snowflake.datacenter_id is not set: add `snowflake.datacenter_id = N` (N in 0..=31) to postgresql.conf and restart the server"
        );
        let err = raw("1", " ").check(NOW).unwrap_err().to_string();
        assert!(err.starts_with("snowflake.worker_id is not set"), "{err}");
    }

    #[test]
    fn out_of_range_values_name_setting_value_and_range() {
        let err = raw("32", "0").check(NOW).unwrap_err().to_string();
        assert_eq!(
            err,
            "snowflake.datacenter_id: invalid datacenter id: expected 0..=31, found 32"
        );
        let err = raw("0", "-1").check(NOW).unwrap_err().to_string();
        assert_eq!(
            err,
            "snowflake.worker_id: invalid worker id: expected 0..=31, found -1"
        );
        let err = raw("0", "x").check(NOW).unwrap_err().to_string();
        assert!(
            err.contains("expected a decimal integer in 0..=31"),
            "{err}"
        );
        let mut r = raw("0", "0");
        r.reserve_ms = Some("50".into());
        assert_eq!(
            r.check(NOW).unwrap_err().to_string(),
            "invalid snowflake.reserve_ms: expected 100..=60000, found \"50\""
        );
        let mut r = raw("0", "0");
        r.layout = Some("bogus".into());
        let err = r.check(NOW).unwrap_err().to_string();
        assert!(
            err.starts_with(
                "snowflake.layout: invalid layout: expected twitter, js-safe or custom:T,D,W,S"
            ),
            "{err}"
        );
        r.layout = Some("custom:20,5,5,12".into());
        let err = r.check(NOW).unwrap_err().to_string();
        assert!(
            err.contains("the timestamp needs at least 30 bits"),
            "{err}"
        );
    }

    #[test]
    fn named_and_custom_layouts_bound_the_pair() {
        let mut r = raw("3", "15");
        r.layout = Some("js-safe".into());
        let config = r.check(NOW).unwrap();
        assert_eq!(config.layout.bits(), Bits::JS_SAFE);
        r.worker_id = Some("16".into());
        assert_eq!(
            r.check(NOW).unwrap_err().to_string(),
            "snowflake.worker_id: invalid worker id: expected 0..=15, found 16"
        );
        let mut r = raw("0", "1023");
        r.layout = Some("custom:41,0,10,12".into());
        assert_eq!(r.check(NOW).unwrap().worker_id, 1023);
    }

    #[test]
    fn a_future_epoch_is_refused() {
        let mut r = raw("0", "0");
        r.epoch_ms = Some((NOW + 1).to_string());
        let err = r.check(NOW).unwrap_err().to_string();
        assert!(err.contains("is in the future"), "{err}");
        r.epoch_ms = Some("1600000000000".into());
        assert_eq!(r.check(NOW).unwrap().layout.epoch_ms(), 1_600_000_000_000);
    }

    #[test]
    fn the_layout_alone_needs_no_pair() {
        assert_eq!(RawSettings::default().layout(NOW).unwrap(), Layout::TWITTER);
    }
}

//! The common ground of every setting's definition: [`BASE`], the defaults each one starts
//! from, and [`number`], a numeric kind with its range.

use super::{DefaultValue, Group, Kind, Setting};

/// What every setting starts from: a text value in the flag, the environment and the file.
pub(super) const BASE: Setting = Setting {
    key: "",
    flag: None,
    env: None,
    in_file: true,
    value_name: "",
    kind: Kind::Text,
    default: DefaultValue::None,
    group: Group::Service,
    help: "",
    global: false,
};

pub(super) const fn number(min: u64, max: u64, unit: &'static str) -> Kind {
    Kind::Number { min, max, unit }
}

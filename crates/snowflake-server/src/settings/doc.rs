//! docs/configuration.md, written from the settings table.

use super::{Group, Kind, SETTINGS, Setting};

/// The page docs/configuration.md: every setting of `snowflake serve`, by group.
pub fn markdown() -> String {
    let mut page = String::from(
        "<!-- Generated from crates/snowflake-server/src/settings/table.rs: do not edit by hand.\n     \
         Regenerate: SNOWFLAKE_REGENERATE_DOCS=1 cargo test -p snowflake-server --test lib configuration_doc -->\n\
         # Configuration\n\n\
         Every setting of `snowflake serve`, as `snowflake serve --help` lists them. Each is read \
         from, first to last: its flag, its environment variable, its key in the TOML file given \
         by `--config` (or `SNOWFLAKE_CONFIG`), and its default. Everything is checked before a \
         listener is bound: a bad value stops the start with one line naming the setting, the \
         value and what is valid, and exit status 2. A config file holding a key not listed \
         here is refused, with the list of known keys.\n\n\
         ```toml\n\
         # /etc/snowflake/snowflake.toml\n\
         http_addr = \"0.0.0.0:8080\"\n\
         datacenter_id = 1\n\
         worker_id = 3\n\
         state_dir = \"/var/lib/snowflake\"\n\
         ```\n\n\
         `--layout` and `--epoch-ms` are flags of every subcommand (`snowflake --layout js-safe \
         serve`); the other flags belong to `serve`. Where worker ids come from in a fleet: \
         [fleet.md](fleet.md); TLS and secrets: [security.md](security.md).\n",
    );
    let mut group: Option<Group> = None;
    for setting in SETTINGS {
        if group != Some(setting.group) {
            group = Some(setting.group);
            page.push_str(&format!(
                "\n## {}\n\n| flag | environment | file key | default | range |\n|---|---|---|---|---|\n",
                setting.group.heading()
            ));
            // The descriptions follow the group's table.
        }
        page.push_str(&row(setting));
        let last_of_group = SETTINGS
            .iter()
            .skip_while(|s| s.key != setting.key)
            .nth(1)
            .is_none_or(|next| next.group != setting.group);
        if last_of_group {
            page.push('\n');
            for s in SETTINGS.iter().filter(|s| s.group == setting.group) {
                page.push_str(&format!("- **{}**: {}\n", title(s), s.help));
            }
        }
    }
    page
}

/// How the page names a setting: its flag, else its variable, else its key.
fn title(setting: &Setting) -> String {
    match (setting.flag, setting.env) {
        (Some(flag), _) => format!("`--{flag}`"),
        (None, Some(env)) => format!("`{env}`"),
        (None, None) => format!("`[{}]`", setting.key),
    }
}

fn row(setting: &Setting) -> String {
    let code = |text: Option<String>| text.map_or_else(|| "—".to_owned(), |t| format!("`{t}`"));
    let flag = match (setting.flag, setting.kind) {
        (Some(flag), Kind::Switch) => Some(format!("--{flag}")),
        (Some(flag), _) => Some(format!("--{flag} {}", setting.value_name)),
        (None, _) => None,
    };
    let key = setting.in_file.then(|| match setting.kind {
        Kind::Table => format!("[{}]", setting.key),
        _ => setting.key.to_owned(),
    });
    let default = setting.default_text().map_or_else(
        || "—".to_owned(),
        |text| match setting.default {
            super::DefaultValue::Value(_) => format!("`{text}`"),
            _ => text.to_owned(),
        },
    );
    let range = match setting.kind {
        Kind::LayoutField => "from the layout".to_owned(),
        Kind::Switch => "`true`, `false`".to_owned(),
        _ => setting.range().unwrap_or_else(|| "—".to_owned()),
    };
    format!(
        "| {} | {} | {} | {default} | {range} |\n",
        code(flag),
        code(setting.env.map(str::to_owned)),
        code(key)
    )
}

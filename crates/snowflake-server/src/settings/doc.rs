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
         value and what is valid, and exit status 2.\n\n\
         <!-- doc-test: file snowflake.toml -->\n\
         ```toml\n\
         # snowflake.toml\n\
         http_addr = \"127.0.0.1:8080\"\n\
         datacenter_id = 1\n\
         worker_id = 3\n\
         state_dir = \"snowflake-state\"\n\
         ```\n\n\
         A flag overrides the file, and names itself when its value is wrong:\n\n\
         <!-- doc-test: output -->\n\
         ```console\n\
         $ snowflake serve --config snowflake.toml --worker-id 40\n\
         error: invalid --worker-id (or SNOWFLAKE_WORKER_ID): invalid worker id: expected 0..=31, found 40\n\
         ```\n\n\
         A key the file may not hold is refused with the list of those it may:\n\n\
         <!-- doc-test: file typo.toml -->\n\
         ```toml\n\
         wokrer_id = 3\n\
         ```\n\n\
         <!-- doc-test: output -->\n\
         ```console\n\
         $ snowflake serve --config typo.toml\n",
    );
    page.push_str(&format!(
        "error: unknown setting \"wokrer_id\" in config file typo.toml; known settings: {}\n```\n\n",
        super::file_keys().collect::<Vec<_>>().join(", ")
    ));
    page.push_str(
        "`--layout` and `--epoch-ms` are flags of every subcommand (`snowflake --layout js-safe \
         serve`); the other flags belong to `serve`. Where worker ids come from in a fleet: \
         [fleet.md](fleet.md); TLS and secrets: [security.md](security.md).\n",
    );
    let mut groups: Vec<Group> = Vec::new();
    for setting in SETTINGS {
        if !groups.contains(&setting.group) {
            groups.push(setting.group);
        }
    }
    for group in groups {
        let members = || SETTINGS.iter().filter(move |s| s.group == group);
        page.push_str(&format!(
            "\n## {}\n\n| flag | environment | file key | default | range |\n|---|---|---|---|---|\n",
            group.heading()
        ));
        for setting in members() {
            page.push_str(&row(setting));
        }
        page.push('\n');
        for setting in members() {
            page.push_str(&format!("- **{}**: {}\n", title(setting), setting.help));
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
    // A `|` in a cell (`on|off`) would end it, even inside code.
    let cells = [
        code(flag),
        code(setting.env.map(str::to_owned)),
        code(key),
        default,
        range,
    ]
    .map(|cell| cell.replace('|', "\\|"));
    format!("| {} |\n", cells.join(" | "))
}

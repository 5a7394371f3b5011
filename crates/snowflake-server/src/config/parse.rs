//! The parsers of `snowflake serve`'s setting values: addresses, endpoint lists, prefixes,
//! host names, numbers in a range; each error names what is valid and what was found.

use snowflake_core::Layout;
use std::net::SocketAddr;
use std::path::PathBuf;

pub(super) fn parse_addr(text: &str) -> Result<Option<SocketAddr>, String> {
    if text == "off" {
        return Ok(None);
    }
    text.parse::<SocketAddr>().map(Some).map_err(|_| {
        format!("expected IP:PORT (e.g. 127.0.0.1:8080 or [::1]:8080) or off, found {text:?}")
    })
}

/// The most etcd members one node may be given.
const MAX_ETCD_ENDPOINTS: usize = 32;

/// `HOST:PORT`: a non-empty host of letters, digits, `.-_` (or a bracketed IPv6 address) and a
/// port in 1..=65535.
pub(super) fn is_host_port(text: &str) -> bool {
    text.rsplit_once(':').is_some_and(|(host, port)| {
        !host.is_empty()
            && port.parse::<u16>().is_ok_and(|p| p > 0)
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b".-_[]:".contains(&b))
    })
}

/// `URL[,URL...]`: each `http://HOST:PORT` (or `HOST:PORT`, meaning http).
pub(super) fn parse_endpoints(text: &str) -> Result<Vec<String>, String> {
    let mut urls = Vec::new();
    for item in text.split(',').map(str::trim) {
        let shown: String = item.chars().take(100).collect();
        if item.is_empty() {
            return Err(format!(
                "expected a comma-separated list of http://HOST:PORT, found an empty entry in {:?}",
                text.chars().take(200).collect::<String>()
            ));
        }
        let (scheme, authority) = match item.strip_prefix("https://") {
            Some(rest) => ("https", rest),
            None => ("http", item.strip_prefix("http://").unwrap_or(item)),
        };
        let authority = authority.strip_suffix('/').unwrap_or(authority);
        if !is_host_port(authority) {
            return Err(format!(
                "expected http://HOST:PORT or https://HOST:PORT (e.g. http://127.0.0.1:2379), \
                 found {shown:?}"
            ));
        }
        let url = format!("{scheme}://{authority}");
        if urls
            .first()
            .is_some_and(|first: &String| !first.starts_with(&format!("{scheme}://")))
        {
            return Err(format!(
                "expected every endpoint to use the same scheme (all http:// or all https://), \
                 found {shown:?} beside {:?}",
                urls[0]
            ));
        }
        if url.parse::<http::Uri>().is_err() {
            return Err(format!("expected http://HOST:PORT, found {shown:?}"));
        }
        if !urls.contains(&url) {
            urls.push(url);
        }
    }
    if urls.len() > MAX_ETCD_ENDPOINTS {
        return Err(format!(
            "expected at most {MAX_ETCD_ENDPOINTS} endpoints, found {}",
            urls.len()
        ));
    }
    Ok(urls)
}

/// A key prefix: `/` then segments of letters, digits, `-`, `_` and `.`, separated by `/`.
pub(super) fn parse_prefix(text: &str) -> Result<String, String> {
    let shown: String = text.chars().take(100).collect();
    let trimmed = text.strip_suffix('/').unwrap_or(text);
    let valid = trimmed.len() <= 200
        && trimmed.starts_with('/')
        && trimmed[1..].split('/').all(|segment| {
            !segment.is_empty()
                && segment
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        });
    if valid {
        Ok(trimmed.to_owned())
    } else {
        Err(format!(
            "expected a key prefix like /snowflake or /prod/ids (`/`-separated segments of \
             letters, digits, `-`, `_`, `.`; at most 200 characters), found {shown:?}"
        ))
    }
}

/// `HOST:PORT[,HOST:PORT...]` of a ZooKeeper ensemble.
pub(super) fn parse_servers(text: &str) -> Result<Vec<String>, String> {
    let mut servers = Vec::new();
    for item in text.split(',').map(str::trim) {
        let shown: String = item.chars().take(100).collect();
        if !is_host_port(item) {
            return Err(format!(
                "expected HOST:PORT[,HOST:PORT...] (e.g. 127.0.0.1:2181), found {shown:?}"
            ));
        }
        if !servers.iter().any(|s| s == item) {
            servers.push(item.to_owned());
        }
    }
    if servers.len() > MAX_ETCD_ENDPOINTS {
        return Err(format!(
            "expected at most {MAX_ETCD_ENDPOINTS} servers, found {}",
            servers.len()
        ));
    }
    Ok(servers)
}

/// A host name: letters, digits, `-`, `.` and `_`, at most 253 characters.
pub(super) fn parse_hostname(text: &str) -> Result<String, String> {
    let valid = !text.is_empty()
        && text.len() <= 253
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b));
    if valid {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "expected a host name (letters, digits, `-`, `.`, `_`; at most 253 characters), found {:?}",
            text.chars().take(100).collect::<String>()
        ))
    }
}

/// The machine's host name (`unknown` if it cannot be read).
pub fn machine_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// The worker id at the end of a StatefulSet pod's host name: `snowflake-7` → 7. Only the
/// canonical spelling a StatefulSet gives (no leading zero, `0` alone): `snowflake-07` is
/// refused, because `snowflake-7` and `snowflake-07` would otherwise both claim worker 7.
pub fn worker_from_ordinal(hostname: &str, layout: &Layout) -> Result<u64, String> {
    let ordinal = hostname
        .rsplit_once('-')
        .map(|(_, tail)| tail)
        .filter(|tail| !tail.is_empty() && tail.bytes().all(|b| b.is_ascii_digit()));
    let Some(ordinal) = ordinal else {
        return Err(format!(
            "host name {hostname:?} does not end in -N (a StatefulSet ordinal, as in snowflake-7)"
        ));
    };
    let max = layout.max_worker_id();
    if ordinal.len() > 1 && ordinal.starts_with('0') {
        return Err(format!(
            "the ordinal {ordinal} of host name {hostname:?} has a leading zero; a StatefulSet \
             ordinal never does (snowflake-7, not snowflake-07), and two spellings of one number \
             would claim one worker id: expected 0..={max} written without leading zeros"
        ));
    }
    match ordinal.parse::<u64>() {
        Ok(n) if n <= max => Ok(n),
        _ => Err(format!(
            "the ordinal {ordinal} of host name {hostname:?} is not a worker id: expected 0..={max}"
        )),
    }
}

/// The config file's `[worker_id_map]`: host name → worker id, no worker given twice.
pub(super) fn parse_worker_map(
    value: &toml::Value,
    layout: &Layout,
) -> Result<std::collections::BTreeMap<String, u64>, String> {
    let Some(table) = value.as_table() else {
        return Err(format!(
            "expected a table of host name = worker id, found a {}",
            value.type_str()
        ));
    };
    let max = layout.max_worker_id();
    let mut map = std::collections::BTreeMap::new();
    let mut by_worker: std::collections::BTreeMap<u64, &str> = std::collections::BTreeMap::new();
    for (host, worker) in table {
        parse_hostname(host)?;
        let worker = match worker.as_integer() {
            Some(w) if (0..=i64::try_from(max).unwrap_or(i64::MAX)).contains(&w) => {
                u64::try_from(w).unwrap_or(0)
            }
            _ => {
                return Err(format!(
                    "worker id of {host:?}: expected 0..={max}, found {worker}"
                ));
            }
        };
        if let Some(other) = by_worker.insert(worker, host) {
            return Err(format!(
                "{other:?} and {host:?} both map to worker {worker}: two live processes must \
                 never share a worker id"
            ));
        }
        map.insert(host.clone(), worker);
    }
    Ok(map)
}

/// `HOST:PORT` other machines can reach this node at.
pub(super) fn parse_advertise(text: &str) -> Result<String, String> {
    let shown: String = text.chars().take(100).collect();
    match text.rsplit_once(':') {
        Some((host, _)) if host.len() <= 253 && is_host_port(text) => Ok(text.to_owned()),
        _ => Err(format!(
            "expected HOST:PORT (e.g. 10.0.0.7:7609 or ids-3.internal:7609), found {shown:?}"
        )),
    }
}

pub(super) fn parse_number(text: &str, min: u64, max: u64) -> Result<u64, String> {
    let shown: String = text.chars().take(40).collect();
    // `u64::from_str` accepts a leading `+`; a setting is plain digits.
    let parsed = if text.starts_with('+') {
        "+".parse::<u64>()
    } else {
        text.parse::<u64>()
    };
    match parsed {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        Ok(_) => Err(format!("expected {min}..={max}, found {shown}")),
        Err(_)
            if text
                .strip_prefix('-')
                .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())) =>
        {
            Err(format!("expected {min}..={max}, found {shown}"))
        }
        Err(_) => Err(format!(
            "expected a whole number in {min}..={max}, found {shown:?}"
        )),
    }
}

/// `$XDG_STATE_HOME/snowflake`, else `$HOME/.local/state/snowflake`, else `./snowflake-state`.
pub fn default_state_dir() -> PathBuf {
    let non_empty = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(dir) = non_empty("XDG_STATE_HOME") {
        dir.join("snowflake")
    } else if let Some(home) = non_empty("HOME") {
        home.join(".local/state/snowflake")
    } else {
        PathBuf::from("snowflake-state")
    }
}

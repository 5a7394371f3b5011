//! [`Config::resolve`]: every setting of the table read from its sources, parsed, checked
//! against the others (one coordination service, no stray fleet flags, at least one listener).

use super::files::{path_setting, read_digest, resolve_client_tls, resolve_etcd_auth};
use super::files::{resolve_etcd_tls, resolve_tls};
use super::parse::{
    default_state_dir, machine_hostname, parse_addr, parse_advertise, parse_endpoints,
    parse_hostname, parse_prefix, parse_servers, parse_worker_map, worker_from_ordinal,
};
use super::source::{ConfigFile, Sources};
use super::{
    ClockConfig, Config, ConfigError, Coordination, EtcdConfig, IdentityConfig, LimitsConfig,
    ListenerConfig, LogConfig, LogFormat, ServeArgs, WorkerSource, ZooKeeperConfig,
    default_max_batch,
};
use crate::settings::{self as s, Setting};
use snowflake_core::{Field, Layout, TWITTER_EPOCH_MS};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

impl Config {
    /// Resolves flags/environment (`args`, plus the global `--epoch-ms`), the config file and
    /// the defaults into a checked configuration.
    pub fn resolve(args: &ServeArgs, epoch_ms: Option<&str>) -> Result<Config, ConfigError> {
        Config::resolve_with_layout(args, epoch_ms, None)
    }

    /// [`Config::resolve`] with the global `--layout` (env `SNOWFLAKE_LAYOUT`, file key
    /// `layout`) too.
    pub fn resolve_with_layout(
        args: &ServeArgs,
        epoch_ms: Option<&str>,
        layout: Option<&str>,
    ) -> Result<Config, ConfigError> {
        let mut args = args.clone();
        if let Some(text) = epoch_ms {
            args.set(s::EPOCH_MS.key, text);
        }
        if let Some(text) = layout {
            args.set(s::LAYOUT.key, text);
        }
        let file = match args.get(&s::CONFIG) {
            Some(path) => Some(ConfigFile::read(std::path::Path::new(path))?),
            None => None,
        };
        let src = Sources {
            args: &args,
            file: file.as_ref(),
        };
        let layout = resolve_layout(&src)?;
        let addr = |setting: &Setting| -> Result<Option<SocketAddr>, ConfigError> {
            match src.pick_or_default(setting) {
                Some((text, name)) => parse_addr(&text).map_err(|e| ConfigError::invalid(&name, e)),
                None => Ok(None),
            }
        };
        let http_addr = addr(&s::HTTP_ADDR)?;
        let grpc_addr = addr(&s::GRPC_ADDR)?;
        let thrift_addr = addr(&s::THRIFT_ADDR)?;
        let admin_addr = addr(&s::ADMIN_ADDR)?;
        let resp_addr = addr(&s::RESP_ADDR)?;
        let admin_status_page = match src.pick_or_default(&s::ADMIN_STATUS_PAGE) {
            Some((text, _)) if text == "on" => true,
            Some((text, _)) if text == "off" => false,
            Some((text, name)) => {
                return Err(ConfigError::invalid(
                    &name,
                    format!("expected on or off, found {text:?}"),
                ));
            }
            None => true,
        };
        let tls = resolve_tls(&src)?;
        let field = |setting: &Setting, field: Field, or_default: bool| {
            let found = if or_default {
                src.pick_or_default(setting)
            } else {
                src.pick(setting)
            };
            match found {
                Some((text, name)) => layout
                    .parse(field, &text)
                    .map(Some)
                    .map_err(|e| ConfigError::invalid(&name, e)),
                None => Ok::<_, ConfigError>(None),
            }
        };
        let datacenter_id = field(&s::DATACENTER_ID, Field::DatacenterId, true)?.unwrap_or(0);
        // Whether the worker id was given matters (a fleet claims a given one exactly).
        let given_worker = field(&s::WORKER_ID, Field::WorkerId, false)?;
        let hostname = match src.pick(&s::HOSTNAME) {
            Some((text, name)) => {
                parse_hostname(&text).map_err(|e| ConfigError::invalid(&name, e))?
            }
            None => machine_hostname(),
        };
        let (worker_id, worker_source) =
            resolve_worker(&src, file.as_ref(), &layout, given_worker, &hostname)?;
        let state_dir = match src.pick(&s::STATE_DIR) {
            Some((text, name)) if text.is_empty() => {
                return Err(ConfigError::invalid(
                    &name,
                    "expected a directory path, found an empty string",
                ));
            }
            Some((text, _)) => PathBuf::from(text),
            None => default_state_dir(),
        };
        let size = |setting: &Setting| {
            src.number_or_default(setting)
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
        };
        let thrift_max_frame_bytes = size(&s::THRIFT_MAX_FRAME_BYTES)?;
        let grpc_max_concurrent_streams =
            u32::try_from(src.number_or_default(&s::GRPC_MAX_CONCURRENT_STREAMS)?).unwrap_or(1024);
        let resp_limits = crate::resp::parse::Limits {
            max_bulk_bytes: size(&s::RESP_MAX_BULK_BYTES)?,
            max_args: size(&s::RESP_MAX_ARGS)?,
            max_inline_bytes: size(&s::RESP_MAX_INLINE_BYTES)?,
        };
        // A batch of at most 250 ms of the layout's rate by default, so that one never outlasts
        // a client's call timeout (16,000 under js-safe); Twitter's keeps the ceiling.
        let max_batch = src
            .number(&s::MAX_BATCH)?
            .unwrap_or_else(|| default_max_batch(&layout));
        let max_backwards_wait_ms = src.number_or_default(&s::MAX_BACKWARDS_WAIT_MS)?;
        let reserve_ms = src.number_or_default(&s::RESERVE_MS)?;
        let max_clock_step_ms = src.number_or_default(&s::MAX_CLOCK_STEP_MS)?;
        let clock_step_trust =
            Duration::from_secs(src.number_or_default(&s::CLOCK_STEP_TRUST_SECS)?);
        let max_connections = size(&s::MAX_CONNECTIONS)?;
        let request_timeout = Duration::from_millis(src.number_or_default(&s::REQUEST_TIMEOUT_MS)?);
        let idle_timeout = Duration::from_millis(src.number_or_default(&s::IDLE_TIMEOUT_MS)?);
        let shutdown_timeout =
            Duration::from_millis(src.number_or_default(&s::SHUTDOWN_TIMEOUT_MS)?);
        let worker_threads = match src.number(&s::WORKER_THREADS)? {
            Some(n) => usize::try_from(n).unwrap_or(1),
            None => std::thread::available_parallelism().map_or(1, usize::from),
        };
        let log_format = match src.pick_or_default(&s::LOG_FORMAT) {
            Some((text, _)) if text == "human" => LogFormat::Human,
            Some((text, _)) if text == "json" => LogFormat::Json,
            Some((text, name)) => {
                return Err(ConfigError::invalid(
                    &name,
                    format!("expected human or json, found {text:?}"),
                ));
            }
            None => LogFormat::Human,
        };
        let log = src
            .pick_or_default(&s::LOG)
            .map_or_else(|| "info".to_owned(), |(text, _)| text);
        let advertise_addr = match src.pick(&s::ADVERTISE_ADDR) {
            Some((text, name)) => {
                Some(parse_advertise(&text).map_err(|e| ConfigError::invalid(&name, e))?)
            }
            None => None,
        };
        let claim_timeout = src.number(&s::CLAIM_TIMEOUT_SECS)?;
        let etcd = resolve_etcd(&src, claim_timeout)?;
        let zookeeper = resolve_zookeeper(&src, claim_timeout, etcd.is_some(), thrift_addr)?;
        if http_addr.is_none()
            && grpc_addr.is_none()
            && thrift_addr.is_none()
            && resp_addr.is_none()
        {
            return Err(ConfigError(
                "every listener is off (--http-addr, --grpc-addr and --thrift-addr): the service would \
                 have no way to hand out ids"
                    .into(),
            ));
        }
        let coordination = match (etcd, zookeeper) {
            (Some(etcd), _) => Some(Coordination::Etcd(etcd)),
            (None, Some(zookeeper)) => Some(Coordination::ZooKeeper(zookeeper)),
            (None, None) => None,
        };
        refuse_cleartext_credentials(&src, coordination.as_ref())?;
        Ok(Config {
            layout,
            listeners: ListenerConfig {
                http_addr,
                grpc_addr,
                thrift_addr,
                resp_addr,
                admin_addr,
                admin_status_page,
                tls,
            },
            limits: LimitsConfig {
                thrift_max_frame_bytes,
                resp: resp_limits,
                grpc_max_concurrent_streams,
                max_batch,
                max_connections,
                request_timeout,
                idle_timeout,
                shutdown_timeout,
                worker_threads,
            },
            clock: ClockConfig {
                max_backwards_wait_ms,
                reserve_ms,
                max_clock_step_ms,
                clock_step_trust,
            },
            identity: IdentityConfig {
                datacenter_id,
                worker_id,
                worker_source,
                coordination,
                advertise_addr,
                hostname,
            },
            state_dir,
            logging: LogConfig { log_format, log },
        })
    }
}

/// `--epoch-ms` and `--layout`: Twitter's widths and epoch unless given.
fn resolve_layout(src: &Sources<'_>) -> Result<Layout, ConfigError> {
    let mut layout = Layout::TWITTER;
    let epoch = match src.pick(&s::EPOCH_MS) {
        Some((text, name)) => {
            let epoch = Layout::TWITTER
                .parse(Field::Epoch, &text)
                .map_err(|e| ConfigError::invalid(&name, e))?;
            layout = Layout::with_epoch(epoch).map_err(|e| ConfigError::invalid(&name, e))?;
            Some((epoch, name))
        }
        None => None,
    };
    if let Some((text, name)) = src.pick(&s::LAYOUT) {
        let bits: snowflake_core::Bits =
            text.parse().map_err(|e| ConfigError::invalid(&name, e))?;
        let epoch_ms = epoch.as_ref().map_or(TWITTER_EPOCH_MS, |(ms, _)| *ms);
        layout = Layout::new(epoch_ms, bits).map_err(|e| {
            let names = epoch
                .as_ref()
                .map_or_else(|| name.clone(), |(_, epoch)| format!("{name} and {epoch}"));
            ConfigError::invalid(&names, e)
        })?;
    }
    Ok(layout)
}

/// The worker id, whether the configuration gave it, and where it came from: `--worker-id`,
/// the host name's ordinal or the file's `[worker_id_map]` (at most one of them).
fn resolve_worker(
    src: &Sources<'_>,
    file: Option<&ConfigFile>,
    layout: &Layout,
    given: Option<u64>,
    hostname: &str,
) -> Result<(u64, WorkerSource), ConfigError> {
    let from_hostname = match src.pick(&s::WORKER_ID_FROM_HOSTNAME) {
        Some((text, name)) => match text.as_str() {
            "true" => Some(name),
            "false" => None,
            _ => {
                return Err(ConfigError::invalid(
                    &name,
                    format!("expected true or false, found {text:?}"),
                ));
            }
        },
        None => None,
    };
    let map = match file.and_then(|f| f.table.get(s::WORKER_ID_MAP.key).map(|v| (f, v))) {
        Some((file, value)) => Some(parse_worker_map(value, layout).map_err(|e| {
            ConfigError::invalid(&format!("[worker_id_map] in {}", file.path.display()), e)
        })?),
        None => None,
    };
    match (given, from_hostname, map) {
        (_, Some(_), Some(_)) => Err(ConfigError(
            "--worker-id-from-hostname and a [worker_id_map] both give the worker id; keep one"
                .into(),
        )),
        (Some(_), Some(_), None) | (Some(_), None, Some(_)) => Err(ConfigError(
            "--worker-id and --worker-id-from-hostname (or a [worker_id_map]) both give the \
             worker id; keep one"
                .into(),
        )),
        (None, Some(name), None) => {
            let worker = worker_from_ordinal(hostname, layout)
                .map_err(|e| ConfigError::invalid(&name, e))?;
            Ok((worker, WorkerSource::HostnameOrdinal))
        }
        (None, None, Some(map)) => {
            let worker = *map.get(hostname).ok_or_else(|| {
                ConfigError(format!(
                    "host name {hostname:?} is not in the config file's [worker_id_map] \
                     (it has {}); add it, or set --hostname",
                    map.keys()
                        .map(|k| format!("{k:?}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?;
            Ok((worker, WorkerSource::HostnameMap))
        }
        (Some(worker), None, None) => Ok((worker, WorkerSource::Static)),
        (None, None, None) => Ok((0, WorkerSource::Unset)),
    }
}

/// `--etcd-endpoints` and the settings that need it.
fn resolve_etcd(
    src: &Sources<'_>,
    claim_timeout: Option<u64>,
) -> Result<Option<EtcdConfig>, ConfigError> {
    let prefix = src.pick(&s::ETCD_PREFIX);
    let ttl = src.number(&s::LEASE_TTL_SECS)?;
    let Some((text, name)) = src.pick(&s::ETCD_ENDPOINTS) else {
        let stray = [
            (prefix.is_some(), &s::ETCD_PREFIX),
            (ttl.is_some(), &s::LEASE_TTL_SECS),
            (src.args.is_given(&s::ETCD_CA), &s::ETCD_CA),
            (src.args.is_given(&s::ETCD_CERT), &s::ETCD_CERT),
            (src.args.is_given(&s::ETCD_KEY), &s::ETCD_KEY),
            (src.args.is_given(&s::ETCD_USER), &s::ETCD_USER),
            (
                src.args.is_given(&s::ETCD_PASSWORD_FILE),
                &s::ETCD_PASSWORD_FILE,
            ),
            (
                claim_timeout.is_some() && !src.is_given(&s::ZOOKEEPER),
                &s::CLAIM_TIMEOUT_SECS,
            ),
        ];
        if let Some((_, setting)) = stray.iter().find(|(set, _)| *set) {
            return Err(ConfigError(format!(
                "{} needs --etcd-endpoints (or SNOWFLAKE_ETCD_ENDPOINTS): without a \
                 coordination service the pair comes from --datacenter-id/--worker-id alone",
                setting.name()
            )));
        }
        return Ok(None);
    };
    let endpoints = parse_endpoints(&text).map_err(|e| ConfigError::invalid(&name, e))?;
    let mut etcd = EtcdConfig::new(endpoints);
    if let Some((text, name)) = src.pick_or_default(&s::ETCD_PREFIX) {
        etcd.prefix = parse_prefix(&text).map_err(|e| ConfigError::invalid(&name, e))?;
    }
    etcd.lease_ttl_secs = src.number_or_default(&s::LEASE_TTL_SECS)?;
    etcd.claim_timeout = Duration::from_secs(claim_timeout.unwrap_or(etcd.lease_ttl_secs + 2));
    let https = etcd.endpoints.iter().any(|e| e.starts_with("https://"));
    etcd.tls = resolve_etcd_tls(src, https)?;
    etcd.auth = resolve_etcd_auth(src)?;
    Ok(Some(etcd))
}

/// `--zookeeper` and the settings that need it.
fn resolve_zookeeper(
    src: &Sources<'_>,
    claim_timeout: Option<u64>,
    etcd: bool,
    thrift_addr: Option<SocketAddr>,
) -> Result<Option<ZooKeeperConfig>, ConfigError> {
    let zk_path = src.pick(&s::ZOOKEEPER_PATH);
    let session_timeout = src.number(&s::ZOOKEEPER_SESSION_TIMEOUT_MS)?;
    let skew = src.number(&s::MAX_PEER_SKEW_MS)?;
    let Some((text, name)) = src.pick(&s::ZOOKEEPER) else {
        let stray = [
            (zk_path.is_some(), &s::ZOOKEEPER_PATH),
            (
                src.args.is_given(&s::ZOOKEEPER_AUTH_FILE),
                &s::ZOOKEEPER_AUTH_FILE,
            ),
            (src.args.is_given(&s::ZOOKEEPER_CA), &s::ZOOKEEPER_CA),
            (src.args.is_given(&s::ZOOKEEPER_CERT), &s::ZOOKEEPER_CERT),
            (src.args.is_given(&s::ZOOKEEPER_KEY), &s::ZOOKEEPER_KEY),
            (session_timeout.is_some(), &s::ZOOKEEPER_SESSION_TIMEOUT_MS),
            (skew.is_some(), &s::MAX_PEER_SKEW_MS),
        ];
        if let Some((_, setting)) = stray.iter().find(|(set, _)| *set) {
            return Err(ConfigError(format!(
                "{} needs --zookeeper (or SNOWFLAKE_ZOOKEEPER)",
                setting.name()
            )));
        }
        return Ok(None);
    };
    if etcd {
        return Err(ConfigError(
            "--etcd-endpoints and --zookeeper both lease the worker id; choose one coordination \
             service"
                .into(),
        ));
    }
    if thrift_addr.is_none() {
        return Err(ConfigError(
            "--zookeeper needs the Thrift listener (--thrift-addr): the znode holds this node's \
             Thrift address, and peers check each other over Thrift"
                .into(),
        ));
    }
    let servers = parse_servers(&text).map_err(|e| ConfigError::invalid(&name, e))?;
    let mut zk = ZooKeeperConfig::new(servers);
    if let Some((text, name)) = src.pick_or_default(&s::ZOOKEEPER_PATH) {
        zk.path = parse_prefix(&text).map_err(|e| ConfigError::invalid(&name, e))?;
    }
    zk.session_timeout =
        Duration::from_millis(src.number_or_default(&s::ZOOKEEPER_SESSION_TIMEOUT_MS)?);
    zk.max_peer_skew_ms = src.number_or_default(&s::MAX_PEER_SKEW_MS)?;
    zk.claim_timeout = match claim_timeout {
        Some(secs) => Duration::from_secs(secs),
        None => zk.session_timeout + Duration::from_secs(2),
    };
    if let Some((path, name)) = path_setting(src, &s::ZOOKEEPER_AUTH_FILE)? {
        zk.auth = Some(read_digest(&path, &name)?);
    }
    zk.tls = resolve_client_tls(
        src,
        [&s::ZOOKEEPER_CA, &s::ZOOKEEPER_CERT, &s::ZOOKEEPER_KEY],
    )?;
    Ok(Some(zk))
}

/// Refuses credentials that would cross the network unencrypted (an etcd password to an
/// `http://` endpoint, a ZooKeeper digest identity without TLS) unless
/// `--allow-cleartext-credentials` says the network is trusted.
fn refuse_cleartext_credentials(
    src: &Sources<'_>,
    coordination: Option<&Coordination>,
) -> Result<(), ConfigError> {
    let allowed = match src.pick(&s::ALLOW_CLEARTEXT_CREDENTIALS) {
        Some((text, name)) => match text.as_str() {
            "true" => true,
            "false" => false,
            _ => {
                return Err(ConfigError::invalid(
                    &name,
                    format!("expected true or false, found {text:?}"),
                ));
            }
        },
        None => false,
    };
    if allowed {
        return Ok(());
    }
    const WAY_OUT: &str = "or, only on a network you trust, pass --allow-cleartext-credentials \
        (SNOWFLAKE_ALLOW_CLEARTEXT_CREDENTIALS=true, allow_cleartext_credentials = true in the \
        config file)";
    if let Some(Coordination::Etcd(etcd)) = coordination
        && let Some(auth) = &etcd.auth
    {
        let plain: Vec<&str> = etcd
            .endpoints
            .iter()
            .filter(|e| e.starts_with("http://"))
            .map(String::as_str)
            .collect();
        if !plain.is_empty() {
            return Err(ConfigError(format!(
                "refusing to send the etcd password of --etcd-user {:?} in cleartext to {}: \
                 anyone on the network path could read it and then rewrite or delete the \
                 fleet's claims and marks (duplicate IDs). Use https:// endpoints with \
                 --etcd-ca, {WAY_OUT}",
                auth.user,
                plain.join(",")
            )));
        }
    }
    if let Some(Coordination::ZooKeeper(zookeeper)) = coordination
        && zookeeper.auth.is_some()
        && zookeeper.tls.is_none()
    {
        return Err(ConfigError(format!(
            "refusing to send the ZooKeeper digest identity of --zookeeper-auth-file in cleartext \
             to {}: anyone on the network path could read it and then rewrite or delete the \
             fleet's znodes and marks (duplicate IDs). Use ZooKeeper's secure client port with \
             --zookeeper-ca (and --zookeeper-cert/--zookeeper-key), {WAY_OUT}",
            zookeeper.servers.join(",")
        )));
    }
    Ok(())
}

//! Prometheus metrics, all named `snowflake_…`, with bounded label sets.

use crate::latency::{Histogram, Latencies, LatencyCollector, RouteLatencies};
use crate::node::readiness::{NOT_READY_REASONS, NodeShared};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use std::sync::Arc;

/// The front end a request came through; a metrics label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// HTTP/JSON.
    Http,
    /// gRPC.
    Grpc,
    /// The 2010 Thrift protocol.
    Thrift,
    /// The Redis protocol (RESP2/RESP3).
    Resp,
}

impl Protocol {
    /// Every front end.
    pub const ALL: [Protocol; 4] = [
        Protocol::Http,
        Protocol::Grpc,
        Protocol::Thrift,
        Protocol::Resp,
    ];

    /// The lowercase label value.
    pub const fn name(self) -> &'static str {
        match self {
            Protocol::Http => "http",
            Protocol::Grpc => "grpc",
            Protocol::Thrift => "thrift",
            Protocol::Resp => "resp",
        }
    }
}

/// Labels of `snowflake_ids_issued_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProtocolLabels {
    /// `http`, `grpc` or `thrift`.
    pub protocol: &'static str,
}

/// Labels of `snowflake_requests_total`: a fixed route template (never the raw path) and the
/// status code, so the set stays bounded.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// `http`, `grpc` or `thrift`.
    pub protocol: &'static str,
    /// The route template or method name, e.g. `/v1/ids` or `unmatched`.
    pub route: &'static str,
    /// The HTTP status code (or the protocol's equivalent).
    pub status: u16,
}

/// Labels of `snowflake_thrift_ids_by_agent_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AgentLabels {
    /// The Thrift user agent, or `other` past the first [`MAX_AGENTS`] distinct ones.
    pub agent: String,
}

/// The label for `value` in a family capped at [`MAX_AGENTS`] distinct labels of at most
/// [`MAX_AGENT_LABEL`] bytes (`known` holds those given so far): `value` itself, or `other`.
fn capped_label(
    known: &std::sync::Mutex<std::collections::HashSet<String>>,
    value: Option<&str>,
) -> String {
    let Some(value) = value.filter(|v| v.len() <= MAX_AGENT_LABEL) else {
        return "other".to_owned();
    };
    let mut known = known.lock().unwrap_or_else(|poison| poison.into_inner());
    if known.contains(value) || known.len() < MAX_AGENTS {
        known.insert(value.to_owned());
        value.to_owned()
    } else {
        "other".to_owned()
    }
}

/// Labels of `snowflake_resp_ids_by_key_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KeyLabels {
    /// The key of `INCR key`, or `other`.
    pub key: String,
}

/// At most this many distinct user agents get their own counter (the 2010 server kept one per
/// agent without bound); later ones are counted as `other`.
pub const MAX_AGENTS: usize = 100;
/// Longer user agents are counted as `other`.
const MAX_AGENT_LABEL: usize = 64;

/// The service's counters, and the registry that encodes them with the node's live gauges.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    ids_issued: Family<ProtocolLabels, Counter>,
    requests: Family<RequestLabels, Counter>,
    /// Requests refused because the clock was behind the last issued ID.
    pub clock_backwards_refusals: Counter,
    /// Clock regressions waited out within `--max-backwards-wait-ms`.
    pub clock_backwards_waits: Counter,
    /// Forward steps of the wall clock larger than `--max-clock-step-ms`, detected.
    pub clock_forward_steps: Counter,
    /// Durable writes of the high-water mark.
    pub state_writes: Counter,
    /// Failed writes of the high-water mark.
    pub state_write_errors: Counter,
    /// Writes of the high-water mark to the coordination service (etcd).
    pub lease_mark_writes: Counter,
    /// Failed writes of the high-water mark to the coordination service.
    pub lease_mark_write_errors: Counter,
    /// Connections refused because the connection cap was reached.
    pub connections_rejected: Counter,
    /// Thrift connections closed for an oversized, negative or garbage frame.
    pub thrift_bad_frames: Counter,
    /// Thrift `get_id` calls refused for an invalid user agent.
    pub thrift_invalid_agents: Counter,
    thrift_ids_by_agent: Family<AgentLabels, Counter>,
    /// The agents that have a counter of their own.
    known_agents: std::sync::Mutex<std::collections::HashSet<String>>,
    resp_ids_by_key: Family<KeyLabels, Counter>,
    /// The RESP keys that have a counter of their own.
    known_keys: std::sync::Mutex<std::collections::HashSet<String>>,
    /// The listeners' TLS, once the service runs with it.
    tls: Arc<std::sync::OnceLock<Arc<crate::tls::Tls>>>,
    /// `snowflake_request_duration_seconds`.
    latencies: Arc<Latencies>,
    /// The node-wide budget for bulk replies: `snowflake_bulk_*`.
    pub bulk: crate::bulk::BulkMetrics,
}

impl Metrics {
    pub(crate) fn new(shared: Arc<NodeShared>) -> Metrics {
        let mut registry = Registry::with_prefix("snowflake");
        let ids_issued = Family::<ProtocolLabels, Counter>::default();
        registry.register("ids_issued", "IDs issued, by protocol", ids_issued.clone());
        // Every protocol's series from the start (at 0), so rates and the status page's total
        // see the same set whatever has been used yet.
        for protocol in Protocol::ALL {
            drop(ids_issued.get_or_create(&ProtocolLabels {
                protocol: protocol.name(),
            }));
        }
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "requests",
            "Requests handled, by protocol, route and status",
            requests.clone(),
        );
        let clock_backwards_refusals = Counter::default();
        registry.register(
            "clock_backwards_refusals",
            "Requests refused because the clock was behind the last issued ID",
            clock_backwards_refusals.clone(),
        );
        let clock_backwards_waits = Counter::default();
        registry.register(
            "clock_backwards_waits",
            "Clock regressions waited out within --max-backwards-wait-ms",
            clock_backwards_waits.clone(),
        );
        let clock_forward_steps = Counter::default();
        registry.register(
            "clock_forward_steps",
            "Forward steps of the wall clock larger than --max-clock-step-ms (not trusted until they hold for --clock-step-trust-secs)",
            clock_forward_steps.clone(),
        );
        let state_writes = Counter::default();
        registry.register(
            "state_writes",
            "Durable writes of the high-water mark",
            state_writes.clone(),
        );
        let state_write_errors = Counter::default();
        registry.register(
            "state_write_errors",
            "Failed writes of the high-water mark",
            state_write_errors.clone(),
        );
        let lease_mark_writes = Counter::default();
        registry.register(
            "lease_mark_writes",
            "Writes of the high-water mark to the coordination service (etcd), made only while the pair is held",
            lease_mark_writes.clone(),
        );
        let lease_mark_write_errors = Counter::default();
        registry.register(
            "lease_mark_write_errors",
            "Failed writes of the high-water mark to the coordination service",
            lease_mark_write_errors.clone(),
        );
        let connections_rejected = Counter::default();
        registry.register(
            "connections_rejected",
            "Connections refused because the connection cap was reached",
            connections_rejected.clone(),
        );
        let thrift_bad_frames = Counter::default();
        registry.register(
            "thrift_bad_frames",
            "Thrift connections closed for an oversized, negative or garbage frame",
            thrift_bad_frames.clone(),
        );
        let thrift_invalid_agents = Counter::default();
        registry.register(
            "thrift_invalid_agents",
            "Thrift get_id calls refused for an invalid user agent",
            thrift_invalid_agents.clone(),
        );
        let thrift_ids_by_agent = Family::<AgentLabels, Counter>::default();
        registry.register(
            "thrift_ids_by_agent",
            "IDs issued over Thrift, by user agent (the first 100 agents; then \"other\")",
            thrift_ids_by_agent.clone(),
        );
        registry.register_collector(Box::new(NodeCollector { shared }));
        let resp_ids_by_key = Family::<KeyLabels, Counter>::default();
        registry.register(
            "resp_ids_by_key",
            "IDs issued over RESP by INCR/INCRBY key (the first 100 keys, then other)",
            resp_ids_by_key.clone(),
        );
        let tls = Arc::new(std::sync::OnceLock::new());
        registry.register_collector(Box::new(TlsCollector {
            tls: Arc::clone(&tls),
        }));
        let bulk = crate::bulk::BulkMetrics::default();
        registry.register(
            "bulk_waiting",
            "Requests for more than 1024 ids waiting for the node-wide budget for large replies",
            bulk.waiting.clone(),
        );
        registry.register(
            "bulk_bytes_held",
            "Bytes of the node-wide budget for large replies held by replies in progress",
            bulk.held.clone(),
        );
        registry.register(
            "bulk_refused",
            "Requests for more than 1024 ids refused because too many were already waiting for the node-wide budget for large replies",
            bulk.refused.clone(),
        );
        let latencies = Arc::new(Latencies::default());
        registry.register_collector(Box::new(LatencyCollector(Arc::clone(&latencies))));
        Metrics {
            registry,
            ids_issued,
            requests,
            clock_backwards_refusals,
            clock_backwards_waits,
            clock_forward_steps,
            state_writes,
            state_write_errors,
            lease_mark_writes,
            lease_mark_write_errors,
            connections_rejected,
            thrift_bad_frames,
            thrift_invalid_agents,
            thrift_ids_by_agent,
            known_agents: std::sync::Mutex::default(),
            resp_ids_by_key,
            known_keys: std::sync::Mutex::default(),
            tls,
            latencies,
            bulk,
        }
    }

    /// A connection's own cache of the latency histograms of `protocol`'s routes.
    pub fn route_latencies(&self, protocol: Protocol) -> RouteLatencies {
        RouteLatencies::new(protocol.name(), Arc::clone(&self.latencies))
    }

    /// The latency histogram of `route` over `protocol`: fetch it once (per route closure or
    /// connection), then observe each request with two atomic adds.
    pub fn latency(&self, protocol: Protocol, route: &'static str) -> Arc<Histogram> {
        self.latencies.histogram(protocol.name(), route)
    }

    /// Exposes the TLS metrics of `tls` (the certificate's expiry, reloads) from now on.
    pub fn set_tls(&self, tls: Arc<crate::tls::Tls>) {
        let _ = self.tls.set(tls);
    }

    /// The counter of IDs issued over Thrift to `agent` (already validated): fetch it once per
    /// agent a connection uses (it shares the registered counter).
    pub fn thrift_agent_counter(&self, agent: &str) -> Counter {
        let label = capped_label(&self.known_agents, Some(agent));
        self.thrift_ids_by_agent
            .get_or_create(&AgentLabels { agent: label })
            .clone()
    }

    /// Counts `n` IDs asked for over RESP under `key` (`INCR key`): the first [`MAX_AGENTS`]
    /// keys of printable ASCII up to 64 bytes get their own label, the rest count as `other`.
    pub fn resp_key_ids(&self, key: &[u8], n: u64) {
        self.resp_key_counter(key).inc_by(n);
    }

    /// IDs issued since the start, over every protocol.
    pub fn ids_issued_total(&self) -> u64 {
        Protocol::ALL
            .into_iter()
            .map(|protocol| {
                self.ids_issued
                    .get_or_create(&ProtocolLabels {
                        protocol: protocol.name(),
                    })
                    .get()
            })
            .sum()
    }

    /// The counter of IDs issued over `protocol`, for a caller that counts many (it shares the
    /// registered counter).
    pub fn ids_issued_counter(&self, protocol: Protocol) -> Counter {
        self.ids_issued
            .get_or_create(&ProtocolLabels {
                protocol: protocol.name(),
            })
            .clone()
    }

    /// Counts `n` IDs issued over `protocol`.
    pub fn ids_issued(&self, protocol: Protocol, n: u64) {
        self.ids_issued
            .get_or_create(&ProtocolLabels {
                protocol: protocol.name(),
            })
            .inc_by(n);
    }

    /// The counter of requests by `protocol`, `route` and `status`, for a caller that counts
    /// many (it shares the registered counter).
    pub fn request_counter(&self, protocol: Protocol, route: &'static str, status: u16) -> Counter {
        self.requests
            .get_or_create(&RequestLabels {
                protocol: protocol.name(),
                route,
                status,
            })
            .clone()
    }

    /// The counter of RESP IDs for `key` (see [`Metrics::resp_key_ids`]).
    pub fn resp_key_counter(&self, key: &[u8]) -> Counter {
        let key = std::str::from_utf8(key)
            .ok()
            .filter(|k| k.len() <= MAX_AGENT_LABEL && k.bytes().all(|b| b.is_ascii_graphic()));
        let label = capped_label(&self.known_keys, key);
        self.resp_ids_by_key
            .get_or_create(&KeyLabels { key: label })
            .clone()
    }

    /// Counts one request.
    pub fn request(&self, protocol: Protocol, route: &'static str, status: u16) {
        self.requests
            .get_or_create(&RequestLabels {
                protocol: protocol.name(),
                route,
                status,
            })
            .inc();
    }

    /// The OpenMetrics text of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(4096);
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// Labels of `snowflake_tls_reloads_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    /// `ok` or `error`.
    result: &'static str,
}

/// The TLS metrics, present only when the listeners use TLS.
#[derive(Debug)]
struct TlsCollector {
    tls: Arc<std::sync::OnceLock<Arc<crate::tls::Tls>>>,
}

impl Collector for TlsCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let Some(tls) = self.tls.get() else {
            return Ok(());
        };
        let expiry = ConstGauge::new(tls.not_after_unix());
        expiry.encode(encoder.encode_descriptor(
            "tls_certificate_expiry_timestamp_seconds",
            "When the serving TLS certificate expires (its not-after time, Unix seconds)",
            None,
            expiry.metric_type(),
        )?)?;
        let (ok, failed) = tls.reloads();
        let mut family = encoder.encode_descriptor(
            "tls_reloads",
            "Renewed TLS certificate files loaded (ok) or refused, keeping the current ones (error)",
            None,
            prometheus_client::metrics::MetricType::Counter,
        )?;
        for (result, count) in [("ok", ok), ("error", failed)] {
            let labels = ResultLabels { result };
            ConstCounter::new(count).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

/// Reads the node's live state at each scrape.
#[derive(Debug)]
struct NodeCollector {
    shared: Arc<NodeShared>,
}

impl Collector for NodeCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let shared = &self.shared;
        let stats = shared.generator.stats();
        let snapshot = shared.snapshot();

        let waits = ConstCounter::new(stats.exhaustion_waits);
        waits.encode(encoder.encode_descriptor(
            "sequence_exhaustion_waits",
            "Times a millisecond's 4096 sequence numbers ran out and the generator waited for the next",
            None,
            waits.metric_type(),
        )?)?;

        let info = ConstGauge::new(1i64);
        let labels = [
            (
                "datacenter_id",
                shared.generator.datacenter_id().to_string(),
            ),
            ("worker_id", shared.generator.worker_id().to_string()),
            ("identity_source", shared.identity_source.to_string()),
        ];
        let mut family = encoder.encode_descriptor(
            "node",
            "The node's identity (always 1; the labels carry the values)",
            None,
            info.metric_type(),
        )?;
        info.encode(family.encode_family(&labels.as_slice())?)?;

        for (name, help, value) in [
            (
                "ready",
                "1 while the node can issue IDs, else 0",
                i64::from(snapshot.ready),
            ),
            (
                "restart_mark_waiting",
                "1 while a restarted node waits for its clock to pass the persisted high-water mark",
                i64::from(snapshot.waiting_for_mark),
            ),
            (
                "high_water_mark_ms",
                "The persisted high-water mark (Unix ms): no issued ID is above it",
                clamp(snapshot.persisted_mark_ms),
            ),
            (
                "issue_limit_ms",
                "The last timestamp (Unix ms) the generator may issue at right now (0 = closed)",
                clamp(shared.generator.issue_limit_ms()),
            ),
            (
                "last_issued_ms",
                "The timestamp (Unix ms) of the last issued ID, or of the mark resumed from",
                clamp(shared.generator.last_issued_ms().unwrap_or(0)),
            ),
        ] {
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }

        {
            let mut family = encoder.encode_descriptor(
                "not_ready_reason",
                "1 for the reason the node cannot issue IDs right now (0 for the others; all 0 while ready)",
                None,
                prometheus_client::metrics::MetricType::Gauge,
            )?;
            for reason in NOT_READY_REASONS {
                let value = i64::from(snapshot.not_ready_reason == Some(reason));
                let labels = [("reason", reason)];
                ConstGauge::new(value).encode(family.encode_family(&labels.as_slice())?)?;
            }
        }

        if let Some(lease) = shared.coordinator.as_ref().map(|c| c.info()) {
            for (name, help, value) in [
                (
                    "lease_held",
                    "1 while the pair's lease is provably held (including while a renewal is being retried), else 0",
                    i64::from(lease.state != "lost"),
                ),
                (
                    "lease_remaining_ms",
                    "Milliseconds before the node stops issuing unless its lease is renewed",
                    clamp(lease.remaining_ms),
                ),
                (
                    "lease_ttl_seconds",
                    "The lease TTL granted by the coordination service",
                    clamp(lease.ttl_secs),
                ),
            ] {
                let gauge = ConstGauge::new(value);
                gauge.encode(encoder.encode_descriptor(
                    name,
                    help,
                    None,
                    gauge.metric_type(),
                )?)?;
            }
            for (name, help, value) in [
                (
                    "lease_renewals",
                    "Successful lease renewals (keep-alives)",
                    lease.renewals,
                ),
                (
                    "lease_renewal_failures",
                    "Failed lease renewal attempts",
                    lease.renewal_failures,
                ),
                (
                    "lease_losses",
                    "Times the lease was lost (expired or taken away)",
                    lease.losses,
                ),
                (
                    "lease_claim_skipped_pairs",
                    "Free pairs the claim passed over because their high-water mark was far ahead of the clock",
                    lease.skipped_ahead,
                ),
            ] {
                let counter = ConstCounter::new(value);
                counter.encode(encoder.encode_descriptor(
                    name,
                    help,
                    None,
                    counter.metric_type(),
                )?)?;
            }
        }

        if let Some(fleet) = shared.fleet.get().filter(|f| f.read_at_ms > 0) {
            let held = u64::try_from(fleet.held.len()).unwrap_or(u64::MAX);
            let datacenter = [("datacenter_id", fleet.datacenter_id.to_string())];
            for (name, help, value) in [
                (
                    "fleet_pairs_held",
                    "Worker ids held in this node's datacenter, as last read from the coordination service",
                    clamp(held),
                ),
                (
                    "fleet_pairs_free",
                    "Worker ids free in this node's datacenter (what another node could still claim)",
                    clamp(fleet.workers.saturating_sub(held)),
                ),
                (
                    "fleet_read_timestamp_ms",
                    "When the held pairs were last read successfully (Unix ms; 0 = never)",
                    clamp(fleet.read_at_ms),
                ),
            ] {
                let mut family = encoder.encode_descriptor(
                    name,
                    help,
                    None,
                    prometheus_client::metrics::MetricType::Gauge,
                )?;
                ConstGauge::new(value).encode(family.encode_family(&datacenter.as_slice())?)?;
            }
        }
        Ok(())
    }
}

fn clamp(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

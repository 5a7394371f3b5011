//! The alert rules and the Grafana dashboard (deploy/prometheus, deploy/grafana) against a real
//! Prometheus (the Debian package) scraping real nodes: `promtool` checks and unit-tests the
//! rules; every series the rules and the dashboard name exists in what was scraped (so a renamed
//! metric breaks this test, not a dashboard); every panel's query, variables substituted,
//! returns data; and freezing etcd (SIGSTOP) makes the lease alert fire in Prometheus itself.

use crate::certs::Certs;
use crate::etcd_cluster::{EtcdCluster, free_ports};
use crate::support::{Serve, ServeProcess, get, temp_dir};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

fn deploy(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy")
        .join(path)
}

/// Panels of this row need a fleet (a lease, free pairs): only the fleet case runs them.
const FLEET_ROW: &str = "Fleet and lease";

/// Series that only a fleet node exports.
fn fleet_only(name: &str) -> bool {
    name.starts_with("snowflake_lease_") || name.starts_with("snowflake_fleet_")
}

/// A real Prometheus on a free loopback port, scraping `targets` every second as job
/// `snowflake` and evaluating alerts.yml every second. Killed on drop.
struct Prometheus {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    fn start(targets: &[String]) -> Prometheus {
        let dir = temp_dir();
        let port = free_ports(1)[0];
        let targets: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - '{}'\n\
             scrape_configs:\n  - job_name: snowflake\n    static_configs:\n      - targets: [{}]\n",
            deploy("prometheus/alerts.yml").display(),
            targets.join(", ")
        );
        let config_path = dir.path().join("prometheus.yml");
        std::fs::write(&config_path, config).unwrap();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("prometheus (the Debian package; scripts/test installs it)");
        let prometheus = Prometheus {
            child,
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !curl(&format!("http://127.0.0.1:{port}/-/ready"), &[]).contains("Ready") {
            assert!(
                Instant::now() < deadline,
                "prometheus not ready: {}",
                prometheus.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        prometheus
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// `GET /api/v1/{path}` with `params`, as JSON; panics unless the status is success.
    fn api(&self, path: &str, params: &[(&str, &str)]) -> serde_json::Value {
        let mut args = vec!["--get".to_owned()];
        for (name, value) in params {
            args.push("--data-urlencode".to_owned());
            args.push(format!("{name}={value}"));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let body = curl(
            &format!("http://127.0.0.1:{}/api/v1/{path}", self.port),
            &args,
        );
        let json: serde_json::Value = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("prometheus answered {body:?}: {e}"));
        assert_eq!(json["status"], "success", "{path} {params:?}: {json}");
        json["data"].clone()
    }

    /// The instant vector of `query`.
    fn query(&self, query: &str) -> Vec<serde_json::Value> {
        self.api("query", &[("query", query)])["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Every metric name scraped so far.
    fn names(&self) -> BTreeSet<String> {
        self.api("label/__name__/values", &[])
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect()
    }

    /// Waits until `query` returns at least one series whose value satisfies `ok`.
    fn wait_for(&self, query: &str, timeout: Duration, ok: impl Fn(f64) -> bool) {
        let deadline = Instant::now() + timeout;
        loop {
            let result = self.query(query);
            if result.iter().any(|s| value(s).is_some_and(&ok)) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{query} never satisfied within {timeout:?}: {result:?}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// The alerts Prometheus has right now, as (name, state).
    fn alerts(&self) -> Vec<(String, String, serde_json::Value)> {
        self.api("alerts", &[])["alerts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                (
                    a["labels"]["alertname"].as_str().unwrap_or("").to_owned(),
                    a["state"].as_str().unwrap_or("").to_owned(),
                    a.clone(),
                )
            })
            .collect()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn curl(url: &str, args: &[&str]) -> String {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10"])
        .args(args)
        .arg(url)
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A sample's value (`[time, "value"]`).
fn value(series: &serde_json::Value) -> Option<f64> {
    series["value"][1].as_str()?.parse().ok()
}

/// The metric names an expression refers to (`snowflake_…` and `up`), with the histogram's
/// `_bucket` etc. kept as written (that is the series name Prometheus stores).
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let starts_word = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        if starts_word {
            let end = expr[i..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .map_or(expr.len(), |n| i + n);
            let word = &expr[i..end];
            if word.starts_with("snowflake_") || word == "up" {
                names.insert(word.to_owned());
            }
            i = end.max(i + 1);
        } else {
            i += 1;
        }
    }
    names
}

/// The alert names of alerts.yml, in order.
fn alert_names() -> Vec<String> {
    let text = std::fs::read_to_string(deploy("prometheus/alerts.yml")).unwrap();
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .map(|name| name.trim().to_owned())
        .collect()
}

/// Every alert's expression as the running Prometheus loaded it from alerts.yml.
fn alert_exprs(prometheus: &Prometheus) -> Vec<(String, String)> {
    let mut exprs = Vec::new();
    for group in prometheus.api("rules", &[])["groups"].as_array().unwrap() {
        for rule in group["rules"].as_array().unwrap() {
            exprs.push((
                rule["name"].as_str().unwrap().to_owned(),
                rule["query"].as_str().unwrap().to_owned(),
            ));
        }
    }
    let names: Vec<String> = exprs.iter().map(|(n, _)| n.clone()).collect();
    assert_eq!(
        names,
        alert_names(),
        "Prometheus loaded other rules than alerts.yml has"
    );
    exprs
}

/// One dashboard panel query: the row it is in, the panel's title, the expression.
struct PanelQuery {
    row: String,
    title: String,
    expr: String,
}

fn dashboard() -> serde_json::Value {
    let text = std::fs::read_to_string(deploy("grafana/snowflake.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Every panel's queries, in order, with the row each panel sits under.
fn panel_queries() -> Vec<PanelQuery> {
    let mut row = String::new();
    let mut queries = Vec::new();
    for panel in dashboard()["panels"].as_array().unwrap() {
        if panel["type"] == "row" {
            row = panel["title"].as_str().unwrap().to_owned();
            continue;
        }
        for target in panel["targets"].as_array().unwrap() {
            queries.push(PanelQuery {
                row: row.clone(),
                title: panel["title"].as_str().unwrap().to_owned(),
                expr: target["expr"].as_str().unwrap().to_owned(),
            });
        }
    }
    queries
}

/// `expr` with the dashboard's variables as Grafana would substitute them with "All" selected.
fn substitute(expr: &str) -> String {
    expr.replace("$__rate_interval", "15s")
        .replace("$instance", ".*")
        .replace("$datacenter", ".*")
        .replace("$worker", ".*")
}

/// Keeps IDs (and some refusals: a count of 0 is a 400) flowing from `nodes` until dropped.
struct Traffic {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Traffic {
    fn start(addrs: Vec<std::net::SocketAddr>) -> Traffic {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                for &addr in &addrs {
                    let _ = crate::support::try_get(addr, "/v1/id");
                    let _ = crate::support::try_get(addr, "/v1/ids?count=10");
                    let _ = crate::support::try_get(addr, "/v1/ids?count=0");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Traffic {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Traffic {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Checks that every series named by the alerts and the dashboard (those `wanted` keeps) is in
/// what Prometheus scraped, and that every panel query (of the rows `rows` keeps) returns at
/// least one finite value.
fn check_against(
    prometheus: &Prometheus,
    wanted: impl Fn(&str) -> bool,
    rows: impl Fn(&str) -> bool,
) {
    let mut referenced = BTreeSet::new();
    for (_, expr) in alert_exprs(prometheus) {
        referenced.extend(metric_names(&expr));
    }
    for query in panel_queries() {
        referenced.extend(metric_names(&query.expr));
    }
    let scraped = prometheus.names();
    let missing: Vec<&String> = referenced
        .iter()
        .filter(|n| wanted(n) && !scraped.contains(*n))
        .collect();
    assert!(
        missing.is_empty(),
        "series named by the alerts or the dashboard that no node exports: {missing:?}\nscraped: {scraped:?}"
    );

    let mut empty = Vec::new();
    for query in panel_queries().iter().filter(|q| rows(&q.row)) {
        let expr = substitute(&query.expr);
        // A rate needs two samples in its window and traffic in it: retry for a few seconds.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let result = prometheus.query(&expr);
            if result.iter().any(|s| value(s).is_some_and(f64::is_finite)) {
                break;
            }
            if Instant::now() > deadline {
                empty.push(format!(
                    "{} / {}: {expr} -> {result:?}",
                    query.row, query.title
                ));
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    assert!(
        empty.is_empty(),
        "panel queries without data:\n{}",
        empty.join("\n")
    );
}

#[test]
fn promtool_checks_and_unit_tests_the_alert_rules() {
    let check = Command::new("promtool")
        .args(["check", "rules"])
        .arg(deploy("prometheus/alerts.yml"))
        .output()
        .expect("promtool (the prometheus package)");
    assert!(
        check.status.success(),
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    let test = Command::new("promtool")
        .args(["test", "rules"])
        .arg(deploy("prometheus/alerts_test.yml"))
        .output()
        .unwrap();
    assert!(
        test.status.success(),
        "{}{}",
        String::from_utf8_lossy(&test.stdout),
        String::from_utf8_lossy(&test.stderr)
    );
    // Every alert has a test case.
    let tests = std::fs::read_to_string(deploy("prometheus/alerts_test.yml")).unwrap();
    for alert in alert_names() {
        assert!(
            tests.contains(&format!("alertname: {alert}\n")),
            "alerts_test.yml has no case for {alert}"
        );
    }
}

#[test]
fn the_dashboard_states_its_schema_and_every_panel_has_a_query() {
    let dashboard = dashboard();
    assert!(dashboard["schemaVersion"].as_u64().is_some_and(|v| v >= 36));
    let variables: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    for name in ["datasource", "datacenter", "worker", "instance"] {
        assert!(
            variables.contains(&name),
            "no ${name} variable: {variables:?}"
        );
    }
    let queries = panel_queries();
    assert!(queries.len() >= 15, "{} queries", queries.len());
    for query in &queries {
        assert!(
            query.expr.contains("instance=~\"$instance\""),
            "{} ignores the node variable: {}",
            query.title,
            query.expr
        );
    }
}

/// A plain node with traffic and a TLS node (scraped on its admin listener): every series of
/// the alerts and the dashboard except the fleet's, and every panel outside the fleet row.
#[test]
fn a_real_prometheus_scrapes_every_series_the_alerts_and_the_dashboard_use() {
    let plain_dir = temp_dir();
    let plain = Serve::new(plain_dir.path())
        .args(["--datacenter-id", "1", "--worker-id", "1"])
        .start();
    let certs = Certs::new();
    certs.issue("server", "snowflake-server", "ca", true, 30);
    let tls_dir = temp_dir();
    let tls = Serve::new(tls_dir.path())
        .args(["--datacenter-id", "1", "--worker-id", "2"])
        .arg("--tls-cert")
        .arg(certs.path("server.crt"))
        .arg("--tls-key")
        .arg(certs.path("server.key"))
        .args(["--admin-addr", "127.0.0.1:0"])
        .start();
    let _traffic = Traffic::start(vec![plain.addr()]);
    let prometheus = Prometheus::start(&[plain.addr().to_string(), tls.admin_addr().to_string()]);
    prometheus.wait_for("sum(up{job=\"snowflake\"})", Duration::from_secs(30), |v| {
        v == 2.0
    });
    check_against(
        &prometheus,
        |name| !fleet_only(name),
        |row| row != FLEET_ROW,
    );
    // Both nodes ready and serving: no alert is firing, nor pending (most have a `for:` longer
    // than this test, so pending is what would show a rule that is wrong).
    let alerts = prometheus.alerts();
    assert!(alerts.is_empty(), "{alerts:?}");
    drop(tls);
    drop(plain);
}

/// Two nodes leasing from a real etcd: every series and panel, the fleet's included; then etcd
/// frozen with SIGSTOP: the nodes fence, and Prometheus fires the lease alert.
#[test]
fn freezing_etcd_fires_the_lease_alert_through_prometheus() {
    let etcd = EtcdCluster::start(1);
    let dirs = [temp_dir(), temp_dir()];
    let nodes: Vec<ServeProcess> = dirs
        .iter()
        .map(|d| {
            Serve::new(d.path())
                .args([
                    "--etcd-endpoints",
                    &etcd.endpoints(),
                    "--lease-ttl-secs",
                    "3",
                ])
                .args(["--datacenter-id", "4"])
                .start()
        })
        .collect();
    let traffic = Traffic::start(nodes.iter().map(ServeProcess::addr).collect());
    let targets: Vec<String> = nodes.iter().map(|n| n.addr().to_string()).collect();
    let prometheus = Prometheus::start(&targets);
    prometheus.wait_for("sum(up{job=\"snowflake\"})", Duration::from_secs(30), |v| {
        v == 2.0
    });
    // Both nodes' views of the datacenter show two held pairs (read every 10 s).
    prometheus.wait_for(
        "min(snowflake_fleet_pairs_held{job=\"snowflake\",datacenter_id=\"4\"})",
        Duration::from_secs(30),
        |v| v == 2.0,
    );
    check_against(
        &prometheus,
        |name| !name.starts_with("snowflake_tls_"),
        |_| true,
    );
    assert!(
        !prometheus
            .alerts()
            .iter()
            .any(|(name, _, _)| name.starts_with("SnowflakeLease")),
        "a lease alert before etcd froze: {:?}",
        prometheus.alerts()
    );

    etcd.stop(0);
    let deadline = Instant::now() + Duration::from_secs(60);
    let fired = loop {
        let alerts = prometheus.alerts();
        if let Some(alert) = alerts
            .iter()
            .find(|(name, state, _)| name == "SnowflakeLeaseLost" && state == "firing")
        {
            break alert.2.clone();
        }
        assert!(
            Instant::now() < deadline,
            "SnowflakeLeaseLost never fired while etcd was frozen: {alerts:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(fired["labels"]["severity"], "critical", "{fired}");
    // The nodes say why they are not ready, and so does the readiness alert's series.
    let reasons = prometheus.query("snowflake_not_ready_reason{job=\"snowflake\"} == 1");
    assert_eq!(
        reasons.len(),
        2,
        "{reasons:?} {:?}",
        prometheus.query("snowflake_ready")
    );
    for series in &reasons {
        assert_eq!(
            series["metric"]["reason"], "lease_not_proven",
            "{reasons:?}"
        );
    }
    for node in &nodes {
        assert_eq!(get(node.addr(), "/readyz").status, 503);
    }
    etcd.cont(0);
    drop(traffic);
}

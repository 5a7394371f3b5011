//! The Kubernetes manifests (deploy/kubernetes), checked offline: no cluster runs here.
//!
//! Every kustomization (the default and each overlay) is rendered with `kubectl kustomize` twice,
//! by the kubectl on PATH and by Debian's kubectl 1.20, whose kustomize 2.0.3 is the oldest the
//! manifests are written for, and the two renderings must agree. Each rendering is validated
//! strictly by tests/kubernetes/validate.py (kubernetes-validate's strict schemas of Kubernetes
//! 1.30, the oldest the manifests support, 1.33 and 1.37; the prometheus-operator CRDs for the
//! ServiceMonitor), and the properties that matter are asserted on it: one workload kind per
//! rendering, at most 32 pairs per datacenter, probes on the port the node's admin listener
//! binds, the security context, a grace period that covers the drain, a Service per protocol.
//! The settings are also run: the rendered environment starts real nodes.
//!
//! The tools come from scripts/test, which installs them and names them in SNOWFLAKE_TEST_*
//! variables; a missing one fails the test, nothing is skipped.

use crate::etcd_cluster::EtcdCluster;
use crate::kubernetes_render::*;
use crate::support::{Serve, ServeProcess, get, info, temp_dir};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

#[test]
fn every_kustomization_renders_alike_with_kustomize_2_0_3_and_validates_strictly() {
    let all = renderings();
    let names: Vec<&str> = all.keys().map(String::as_str).collect();
    for expected in [
        "default",
        "ordinal",
        "datacenter-2",
        "etcd-tls",
        "autoscaled",
    ] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }
    // The default is leased/ exactly (the overlays build on leased/).
    let leased = validate(&render_with(
        &kubectl(),
        &repo().join("deploy/kubernetes/leased"),
    ))
    .unwrap();
    assert_eq!(normalized(&leased), normalized(rendering("default")));
}

#[test]
fn the_default_is_the_etcd_leased_fleet_as_a_deployment() {
    let docs = rendering("default");
    let deployment = workload("default", docs);
    assert_eq!(deployment["kind"], "Deployment");
    let env = environment(docs, container(&deployment));
    assert!(
        env.get("SNOWFLAKE_ETCD_ENDPOINTS")
            .is_some_and(|v| !v.is_empty()),
        "{env:?}"
    );
    assert_eq!(
        env.get("SNOWFLAKE_DATACENTER_ID").map(String::as_str),
        Some(DEFAULT_DATACENTER)
    );
    // Leased, not pinned: no worker id, no host-name ordinal.
    assert!(!env.contains_key("SNOWFLAKE_WORKER_ID"), "{env:?}");
    assert!(
        !env.contains_key("SNOWFLAKE_WORKER_ID_FROM_HOSTNAME"),
        "{env:?}"
    );
    // The marks are in etcd: the state directory may be an emptyDir.
    let volumes = &deployment["spec"]["template"]["spec"]["volumes"];
    assert!(
        volumes
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["name"] == "state" && v["emptyDir"].is_object()),
        "{volumes}"
    );
    let image = container(&deployment)["image"].as_str().unwrap();
    assert_eq!(
        image,
        format!("localhost/snowflake:{}", env!("CARGO_PKG_VERSION")),
        "the image deploy/container/build prints"
    );
}

#[test]
fn the_ordinal_overlay_is_a_statefulset_of_at_most_32_with_its_own_datacenter_and_volumes() {
    let docs = rendering("ordinal");
    let set = workload("ordinal", docs);
    assert_eq!(set["kind"], "StatefulSet");
    let env = environment(docs, container(&set));
    assert_eq!(
        env.get("SNOWFLAKE_WORKER_ID_FROM_HOSTNAME")
            .map(String::as_str),
        Some("true")
    );
    for key in env.keys() {
        assert!(
            !key.starts_with("SNOWFLAKE_ETCD_") && key != "SNOWFLAKE_LEASE_TTL_SECS",
            "the ordinal pods hold no lease: {key}"
        );
    }
    // Never a datacenter the leased fleets of these manifests use.
    let datacenter = env["SNOWFLAKE_DATACENTER_ID"].as_str();
    assert!(
        ![DEFAULT_DATACENTER, OVERLAY_DATACENTER].contains(&datacenter),
        "{datacenter}"
    );
    // Ordinals 0..31 are the worker ids.
    assert!(replicas(&set) <= WORKERS_PER_DATACENTER, "{set}");
    let start = set["spec"]["ordinals"]["start"].as_u64().unwrap_or(0);
    assert!(
        start + replicas(&set) <= WORKERS_PER_DATACENTER,
        "ordinals {start}.. leave the worker id range"
    );
    // Its marks are local: a claim per pod, mounted at the state directory.
    let claims = set["spec"]["volumeClaimTemplates"].as_array().unwrap();
    assert!(claims.iter().any(|c| c["metadata"]["name"] == "state"));
    let mounted = container(&set)["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["name"] == "state" && m["mountPath"] == env["SNOWFLAKE_STATE_DIR"].as_str());
    assert!(mounted, "the claim is mounted at SNOWFLAKE_STATE_DIR");
    assert!(
        !set["spec"]["template"]["spec"]["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|v| v["name"] == "state"),
        "the claim, not a pod volume, backs the state"
    );
    let governing = set["spec"]["serviceName"].as_str().unwrap();
    assert!(
        of_kind(docs, "Service")
            .iter()
            .any(|s| s["metadata"]["name"] == governing && s["spec"]["clusterIP"] == "None"),
        "the governing Service {governing} is rendered and headless"
    );
}

#[test]
fn no_rendering_plans_more_pairs_than_a_datacenter_has() {
    for (name, docs) in renderings() {
        let workload = workload(name, docs);
        let autoscalers = of_kind(docs, "HorizontalPodAutoscaler");
        for hpa in &autoscalers {
            assert_eq!(
                hpa["spec"]["scaleTargetRef"]["name"],
                workload["metadata"]["name"]
            );
        }
        let most = autoscalers
            .iter()
            .map(|h| h["spec"]["maxReplicas"].as_u64().unwrap())
            .chain([replicas(&workload)])
            .max()
            .unwrap();
        match workload["kind"].as_str().unwrap() {
            "Deployment" => {
                let update = &workload["spec"]["strategy"];
                assert_eq!(update["type"], "RollingUpdate", "{name}");
                // A number, never a percentage that grows with the replicas.
                let surge = update["rollingUpdate"]["maxSurge"]
                    .as_u64()
                    .unwrap_or_else(|| panic!("{name}: maxSurge must be a number"));
                assert!(
                    most + surge <= PLANNED_PAIRS_MAX,
                    "{name}: {most} replicas + maxSurge {surge} > {PLANNED_PAIRS_MAX} of \
                     {WORKERS_PER_DATACENTER} pairs"
                );
                if !autoscalers.is_empty() {
                    assert!(
                        workload["spec"]["replicas"].is_null(),
                        "{name}: the autoscaler owns the replica count"
                    );
                }
            }
            "StatefulSet" => {
                assert!(
                    autoscalers.is_empty(),
                    "{name}: ordinals above 31 would follow"
                );
                assert!(most <= WORKERS_PER_DATACENTER, "{name}: {most} replicas");
            }
            other => panic!("{name}: unexpected workload {other}"),
        }
    }
}

#[test]
fn probes_ports_security_and_the_grace_period_match_what_the_node_does() {
    for (name, docs) in renderings() {
        let workload = workload(name, docs);
        let pod = &workload["spec"]["template"]["spec"];
        let c = container(&workload);
        let env = environment(docs, c);

        // The probes reach the admin listener, on the port it binds.
        let admin = listener_port(&env, "SNOWFLAKE_ADMIN_ADDR")
            .unwrap_or_else(|| panic!("{name}: no admin listener for the probes"));
        for (probe, path) in [
            ("startupProbe", "/healthz"),
            ("readinessProbe", "/readyz"),
            ("livenessProbe", "/healthz"),
        ] {
            let get = &c[probe]["httpGet"];
            assert_eq!(get["path"], path, "{name}: {probe}");
            assert_eq!(
                resolve_port(c, &get["port"]),
                admin,
                "{name}: {probe} on a port the admin listener does not bind"
            );
            assert!(
                get["scheme"].is_null() || get["scheme"] == "HTTP",
                "{name}: the admin listener is plaintext"
            );
        }

        // Every listener has its container port, and every container port a listener.
        let listeners: BTreeMap<&str, u64> = [
            ("http", "SNOWFLAKE_HTTP_ADDR"),
            ("grpc", "SNOWFLAKE_GRPC_ADDR"),
            ("resp", "SNOWFLAKE_RESP_ADDR"),
            ("thrift", "SNOWFLAKE_THRIFT_ADDR"),
            ("admin", "SNOWFLAKE_ADMIN_ADDR"),
        ]
        .into_iter()
        .filter_map(|(port_name, key)| Some((port_name, listener_port(&env, key)?)))
        .collect();
        let declared: BTreeMap<&str, u64> = c["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["name"].as_str().unwrap(),
                    p["containerPort"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            declared, listeners,
            "{name}: container ports against the listeners"
        );

        // A Service per protocol, each forwarding to a port the node listens on.
        let mut served = BTreeSet::new();
        for service in of_kind(docs, "Service") {
            assert_eq!(
                service["spec"]["selector"],
                pod_labels_selector(&workload),
                "{name}: {}",
                service["metadata"]["name"]
            );
            for port in service["spec"]["ports"].as_array().unwrap() {
                let target = resolve_port(c, &port["targetPort"]);
                assert!(
                    listeners.values().any(|&p| p == target),
                    "{name}: {} forwards to {target}, where nothing listens",
                    service["metadata"]["name"]
                );
                served.insert(port["port"].as_u64().unwrap());
            }
        }
        for port in [8080, 50051, 6380] {
            assert!(served.contains(&port), "{name}: no Service for port {port}");
        }

        // Prometheus scrapes the admin port, by the name the admin Service gives it.
        let [monitor] = of_kind(docs, "ServiceMonitor")[..] else {
            panic!("{name}: one ServiceMonitor")
        };
        let endpoint = &monitor["spec"]["endpoints"][0];
        assert_eq!(endpoint["path"], "/metrics");
        let selected: Vec<&Value> = of_kind(docs, "Service")
            .into_iter()
            .filter(|s| {
                monitor["spec"]["selector"]["matchLabels"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .all(|(k, v)| &s["metadata"]["labels"][k] == v)
            })
            .collect();
        assert_eq!(
            selected.len(),
            1,
            "{name}: the ServiceMonitor selects one Service"
        );
        let scraped = selected[0]["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == endpoint["port"])
            .unwrap_or_else(|| panic!("{name}: no port {} to scrape", endpoint["port"]));
        assert_eq!(resolve_port(c, &scraped["targetPort"]), admin);

        // The security context (the container's, else the pod's).
        let effective = |field: &str| {
            let own = &c["securityContext"][field];
            if own.is_null() {
                pod["securityContext"][field].clone()
            } else {
                own.clone()
            }
        };
        assert_eq!(effective("runAsNonRoot"), json!(true), "{name}");
        assert_eq!(effective("runAsUser"), json!(65532), "{name}");
        assert_eq!(effective("runAsGroup"), json!(65532), "{name}");
        assert_eq!(
            effective("seccompProfile"),
            json!({"type": "RuntimeDefault"})
        );
        let own = &c["securityContext"];
        assert_eq!(own["readOnlyRootFilesystem"], json!(true), "{name}");
        assert_eq!(own["allowPrivilegeEscalation"], json!(false), "{name}");
        assert_eq!(own["capabilities"]["drop"], json!(["ALL"]), "{name}");
        assert!(own["capabilities"]["add"].is_null(), "{name}");
        assert!(own["privileged"].is_null() || own["privileged"] == json!(false));
        // The state directory is a volume: the root filesystem is read-only.
        assert!(
            c["volumeMounts"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m["name"] == "state"
                    && m["mountPath"] == env["SNOWFLAKE_STATE_DIR"].as_str()),
            "{name}"
        );

        // Memory is requested and limited; the limit leaves room above the request.
        let resources = &c["resources"];
        assert!(resources["requests"]["memory"].is_string(), "{name}");
        assert!(resources["requests"]["cpu"].is_string(), "{name}");
        assert!(resources["limits"]["memory"].is_string(), "{name}");

        // SIGTERM comes after the preStop sleep; the node then drains for up to the shutdown
        // timeout, writes its final mark (bounded by the same timeout) and releases its lease
        // (an etcd call of at most 2 s). The kubelet must wait for all of it.
        let pre_stop = c["lifecycle"]["preStop"]["sleep"]["seconds"]
            .as_u64()
            .unwrap_or_else(|| panic!("{name}: a preStop sleep (the image has no shell)"));
        assert!(pre_stop >= 1, "{name}");
        let shutdown_ms: u64 = env
            .get("SNOWFLAKE_SHUTDOWN_TIMEOUT_MS")
            .map_or(10_000, |v| v.parse().unwrap());
        let grace = pod["terminationGracePeriodSeconds"].as_u64().unwrap();
        let needed = pre_stop + 2 * shutdown_ms.div_ceil(1000) + 2;
        assert!(
            grace >= needed,
            "{name}: terminationGracePeriodSeconds {grace} < preStop {pre_stop} s + 2 x \
             shutdown {shutdown_ms} ms + 2 s"
        );
    }
}

/// The matchLabels of a workload's selector (what its Services must select).
fn pod_labels_selector(workload: &Value) -> Value {
    workload["spec"]["selector"]["matchLabels"].clone()
}

#[test]
fn the_pod_disruption_budget_and_network_policy_cover_the_pods_and_their_ports() {
    for (name, docs) in renderings() {
        let workload = workload(name, docs);
        let selector = pod_labels_selector(&workload);
        let [pdb] = of_kind(docs, "PodDisruptionBudget")[..] else {
            panic!("{name}: one PodDisruptionBudget")
        };
        assert_eq!(pdb["spec"]["selector"]["matchLabels"], selector, "{name}");
        assert_eq!(pdb["spec"]["maxUnavailable"], json!(1), "{name}");

        let policies = of_kind(docs, "NetworkPolicy");
        let mut ingress_ports = BTreeSet::new();
        let mut egress_ports = BTreeSet::new();
        for policy in &policies {
            assert_eq!(policy["spec"]["podSelector"]["matchLabels"], selector);
            for rule in policy["spec"]["ingress"].as_array().into_iter().flatten() {
                for port in rule["ports"].as_array().unwrap() {
                    ingress_ports.insert(port["port"].as_u64().unwrap());
                }
            }
            for rule in policy["spec"]["egress"].as_array().into_iter().flatten() {
                for port in rule["ports"].as_array().unwrap() {
                    egress_ports.insert(port["port"].as_u64().unwrap());
                }
            }
        }
        let env = environment(docs, container(&workload));
        for key in [
            "SNOWFLAKE_HTTP_ADDR",
            "SNOWFLAKE_GRPC_ADDR",
            "SNOWFLAKE_RESP_ADDR",
            "SNOWFLAKE_ADMIN_ADDR",
        ] {
            let port = listener_port(&env, key).unwrap();
            assert!(ingress_ports.contains(&port), "{name}: no ingress to {key}");
        }
        assert!(egress_ports.contains(&53), "{name}: DNS");
        let leased = env.contains_key("SNOWFLAKE_ETCD_ENDPOINTS");
        for endpoint in env
            .get("SNOWFLAKE_ETCD_ENDPOINTS")
            .into_iter()
            .flat_map(|v| v.split(','))
        {
            let port: u64 = endpoint.rsplit(':').next().unwrap().parse().unwrap();
            assert!(
                egress_ports.contains(&port),
                "{name}: no egress to {endpoint}"
            );
        }
        assert_eq!(
            egress_ports.contains(&2379),
            leased,
            "{name}: egress to etcd exactly when leased"
        );
    }
}

#[test]
fn the_datacenter_overlay_changes_the_datacenter_id_and_nothing_else() {
    let datacenter = |name: &str| {
        let docs = rendering(name);
        environment(docs, container(&workload(name, docs)))["SNOWFLAKE_DATACENTER_ID"].clone()
    };
    assert_eq!(datacenter("default"), DEFAULT_DATACENTER);
    assert_eq!(datacenter("datacenter-2"), OVERLAY_DATACENTER);
    let without_datacenter = |name: &str| {
        let mut docs = normalized(rendering(name));
        for doc in &mut docs {
            if doc["kind"] == "ConfigMap" {
                doc["data"]
                    .as_object_mut()
                    .unwrap()
                    .remove("SNOWFLAKE_DATACENTER_ID");
            }
        }
        docs
    };
    assert_eq!(
        without_datacenter("default"),
        without_datacenter("datacenter-2")
    );
}

#[test]
fn the_etcd_tls_overlay_reads_its_certificates_and_password_from_mounted_secrets() {
    let docs = rendering("etcd-tls");
    let deployment = workload("etcd-tls", docs);
    let c = container(&deployment);
    let env = environment(docs, c);
    for endpoint in env["SNOWFLAKE_ETCD_ENDPOINTS"].split(',') {
        assert!(endpoint.starts_with("https://"), "{endpoint}");
    }
    assert!(
        !env.contains_key("SNOWFLAKE_ETCD_PASSWORD"),
        "never a plain value"
    );
    assert!(
        c["args"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| !a.as_str().unwrap().contains("password")),
        "never a flag"
    );
    assert!(
        c["env"]
            .as_array()
            .into_iter()
            .flatten()
            .all(|v| v["valueFrom"]["secretKeyRef"].is_null())
    );
    // Every file setting names a file of a Secret mounted read-only.
    let volumes = deployment["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap();
    for key in [
        "SNOWFLAKE_ETCD_CA",
        "SNOWFLAKE_ETCD_CERT",
        "SNOWFLAKE_ETCD_KEY",
        "SNOWFLAKE_ETCD_PASSWORD_FILE",
    ] {
        let file = Path::new(&env[key]);
        let mount = c["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| file.parent() == Some(Path::new(m["mountPath"].as_str().unwrap())))
            .unwrap_or_else(|| panic!("{key}={}: not in a mounted directory", file.display()));
        assert_eq!(mount["readOnly"], json!(true), "{key}");
        let volume = volumes.iter().find(|v| v["name"] == mount["name"]).unwrap();
        let file_name = file.file_name().unwrap().to_str().unwrap();
        let from_secret = volume["projected"]["sources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| {
                s["secret"]["items"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|i| i["path"] == file_name)
            });
        assert!(from_secret, "{key}: {file_name} comes from a Secret");
    }
    assert!(env.contains_key("SNOWFLAKE_ETCD_USER"));
}

/// The `[env: NAME=]` names of `snowflake serve --help`.
fn serve_variables() -> BTreeSet<String> {
    let out = Command::new(crate::support::binary())
        .args(["serve", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    // Wrapped for the terminal: `[env:` may end a line and the name start the next.
    let help = String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    help.split("[env: ")
        .skip(1)
        .map(|rest| rest.split('=').next().unwrap().to_owned())
        .collect()
}

#[test]
fn every_setting_in_the_manifests_is_one_the_service_reads() {
    // clap ignores a variable it does not know: a misspelt one would silently fall back to the
    // default (a listener on loopback only, the probes failing for ever).
    let known = serve_variables();
    assert!(known.contains("SNOWFLAKE_ADMIN_ADDR"), "{known:?}");
    for (name, docs) in renderings() {
        let env = environment(docs, container(&workload(name, docs)));
        for key in env.keys() {
            assert!(
                known.contains(key),
                "{name}: {key} is not a setting of snowflake serve"
            );
        }
    }
}

/// The rendered environment of `name`'s workload, made runnable on this machine: listeners on
/// loopback ports of their own, the state in `state_dir`, human logs (which the test helpers
/// read), and `extra` on top.
fn rendered_serve(name: &str, state_dir: &Path, extra: &[(&str, &str)]) -> Serve {
    let docs = rendering(name);
    let workload = workload(name, docs);
    let c = container(&workload);
    let args: Vec<&str> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(args, ["serve"], "{name}");
    let mut serve = Serve::bare();
    for (key, value) in environment(docs, c) {
        serve = serve.env(key, value);
    }
    for key in [
        "SNOWFLAKE_HTTP_ADDR",
        "SNOWFLAKE_GRPC_ADDR",
        "SNOWFLAKE_RESP_ADDR",
        "SNOWFLAKE_ADMIN_ADDR",
    ] {
        serve = serve.env(key, "127.0.0.1:0");
    }
    serve = serve
        .env("SNOWFLAKE_STATE_DIR", state_dir)
        .env("SNOWFLAKE_LOG_FORMAT", "human");
    for (key, value) in extra {
        serve = serve.env(key, value);
    }
    serve
}

/// Waits until the node's admin listener answers /readyz 200 and /healthz 200, as the probes
/// would.
fn wait_probes_pass(node: &ServeProcess) {
    let admin = node.admin_addr();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        if get(admin, "/readyz").status == 200 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "/readyz never 200: {}",
            node.stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(get(admin, "/healthz").status, 200);
}

#[test]
fn the_ordinal_settings_start_a_node_that_is_worker_n_of_pod_snowflake_n() {
    let state = temp_dir();
    let node = rendered_serve(
        "ordinal",
        state.path(),
        &[("SNOWFLAKE_HOSTNAME", "snowflake-7")],
    )
    .start();
    wait_probes_pass(&node);
    let info = info(&node);
    assert_eq!(info["worker_id"], 7, "{info}");
    let datacenter = environment(
        rendering("ordinal"),
        container(&workload("ordinal", rendering("ordinal"))),
    )["SNOWFLAKE_DATACENTER_ID"]
        .parse::<u64>()
        .unwrap();
    assert_eq!(info["datacenter_id"], datacenter, "{info}");
}

#[test]
fn the_default_settings_start_nodes_that_lease_distinct_workers_from_etcd() {
    let etcd = EtcdCluster::start(1);
    let endpoints = etcd.endpoints();
    let (state_a, state_b) = (temp_dir(), temp_dir());
    let extra = [("SNOWFLAKE_ETCD_ENDPOINTS", endpoints.as_str())];
    let a = rendered_serve("default", state_a.path(), &extra).start();
    let b = rendered_serve("default", state_b.path(), &extra).start();
    wait_probes_pass(&a);
    wait_probes_pass(&b);
    let (info_a, info_b) = (info(&a), info(&b));
    for info in [&info_a, &info_b] {
        assert_eq!(info["identity_source"], "etcd", "{info}");
        assert_eq!(info["datacenter_id"], 1, "{info}");
    }
    assert_ne!(info_a["worker_id"], info_b["worker_id"]);
}

#[test]
fn the_validator_rejects_unknown_fields_in_built_in_and_custom_resources() {
    let docs = rendering("default");
    // The rendering as it is passes (as JSON, which is YAML too).
    let as_yaml = |docs: &[Value]| {
        docs.iter()
            .map(|d| format!("---\n{d}\n"))
            .collect::<String>()
    };
    validate(&as_yaml(docs)).expect("the rendering validates");

    let broken = |kind: &str, edit: &dyn Fn(&mut Value)| {
        let mut docs = docs.to_vec();
        let doc = docs.iter_mut().find(|d| d["kind"] == kind).unwrap();
        edit(doc);
        validate(&as_yaml(&docs)).expect_err("an unknown field must fail")
    };
    // A misspelt field deep in the pod template.
    let error = broken("Deployment", &|d| {
        d["spec"]["template"]["spec"]["containers"][0]["securityContext"]["readOnlyRootFS"] =
            json!(true);
    });
    assert!(error.contains("readOnlyRootFS"), "{error}");
    // One in a ServiceMonitor, which only the CRD schema knows (an API server would prune it).
    let error = broken("ServiceMonitor", &|d| {
        d["spec"]["endpoints"][0]["intervall"] = json!("15s");
    });
    assert!(error.contains("intervall"), "{error}");
    // Its metadata is checked as strictly as a built-in kind's.
    let error = broken("ServiceMonitor", &|d| d["metadata"]["label"] = json!({}));
    assert!(error.contains("'label' was unexpected"), "{error}");

    // The same mechanism checks PrometheusRules.
    let rule = json!({
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "snowflake"},
        "spec": {"groups": [{"name": "snowflake", "rules": [
            {"alert": "SnowflakeNotReady", "expr": "snowflake_ready == 0", "for": "1m",
             "labels": {"severity": "page"}}
        ]}]}
    });
    validate(&as_yaml(std::slice::from_ref(&rule))).expect("a PrometheusRule validates");
    let mut bad_rule = rule.clone();
    bad_rule["spec"]["groups"][0]["rules"][0]["fore"] = json!("1m");
    let error = validate(&as_yaml(&[bad_rule])).expect_err("an unknown rule field must fail");
    assert!(error.contains("fore"), "{error}");

    // A kind with no schema at all fails rather than being skipped.
    let widget =
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}});
    let error = validate(&as_yaml(&[widget])).expect_err("no schema must fail");
    assert!(error.contains("Widget"), "{error}");
}

/// The PrometheusRule of every rendering is deploy/prometheus/alerts.yml, unchanged, and the
/// ServiceMonitor names the scrape job `snowflake`, which those rules select on.
#[test]
fn the_prometheus_rule_is_alerts_yml_and_the_job_is_snowflake() {
    let alerts = std::fs::read_to_string(repo().join("deploy/prometheus/alerts.yml")).unwrap();
    let indented: String = alerts.lines().map(|l| format!("  {l}\n")).collect();
    let wrapped = format!(
        "apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata:\n  name: alerts-yml\nspec:\n{indented}"
    );
    let parsed =
        validate(&wrapped).unwrap_or_else(|e| panic!("alerts.yml as a PrometheusRule: {e}"));
    let expected = &parsed[0]["spec"];
    assert!(
        expected["groups"][0]["rules"]
            .as_array()
            .is_some_and(|r| r.len() >= 10),
        "{expected}"
    );
    for (name, docs) in renderings() {
        let [rule] = of_kind(docs, "PrometheusRule")[..] else {
            panic!("{name}: one PrometheusRule")
        };
        assert_eq!(
            &rule["spec"], expected,
            "{name}: the PrometheusRule differs from deploy/prometheus/alerts.yml (copy it again)"
        );
        let [monitor] = of_kind(docs, "ServiceMonitor")[..] else {
            panic!("{name}: one ServiceMonitor")
        };
        let job_label = monitor["spec"]["jobLabel"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: the ServiceMonitor sets no jobLabel"));
        let scraped = of_kind(docs, "Service")
            .into_iter()
            .find(|s| {
                monitor["spec"]["selector"]["matchLabels"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .all(|(k, v)| &s["metadata"]["labels"][k] == v)
            })
            .unwrap_or_else(|| panic!("{name}: the ServiceMonitor selects no Service"));
        assert_eq!(
            scraped["metadata"]["labels"][job_label], "snowflake",
            "{name}: the job label would not be `snowflake`, which the alerts select"
        );
    }
}

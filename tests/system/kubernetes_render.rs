//! What the Kubernetes tests ([`crate::kubernetes`]) render and read: the tools scripts/test
//! provides, `kubectl kustomize` with both kubectls, the strict validator, and the parts of a
//! rendering (workloads, containers, environment, ports) the assertions look at.

use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The Kubernetes versions every rendering is validated against: the oldest the manifests
/// support (the preStop sleep action is on by default from 1.30), one between, and the newest
/// kubernetes-validate 1.37.0 knows.
pub(crate) const KUBERNETES_VERSIONS: [&str; 3] = ["1.30", "1.33", "1.37"];
/// Pairs per datacenter: the worker id has 5 bits.
pub(crate) const WORKERS_PER_DATACENTER: u64 = 32;
/// Of those, what a Deployment (replicas, or the autoscaler's maximum, plus maxSurge) may plan
/// for: the rest is headroom for pods that still hold a pair without being counted (stopping
/// pods until they release it, crashed processes until their lease expires, pods on an
/// unreachable node). The manifests say the same.
pub(crate) const PLANNED_PAIRS_MAX: u64 = 24;
/// The default's datacenter id, and the datacenter overlay's.
pub(crate) const DEFAULT_DATACENTER: &str = "1";
pub(crate) const OVERLAY_DATACENTER: &str = "2";

pub(crate) fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A tool scripts/test provides through `var`; fails with what to do when it is missing.
pub(crate) fn tool(var: &str, what: &str) -> PathBuf {
    let path = std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            panic!(
                "{var} is not set: it names {what}. Run the tests with scripts/test, which \
                 installs it and sets {var}"
            )
        });
    assert!(
        path.exists(),
        "{var}={} does not exist ({what}): run scripts/test, which installs it",
        path.display()
    );
    path
}

pub(crate) fn kubectl() -> PathBuf {
    tool(
        "SNOWFLAKE_TEST_KUBECTL",
        "the kubectl that renders the manifests",
    )
}

pub(crate) fn kubectl_debian() -> PathBuf {
    tool(
        "SNOWFLAKE_TEST_KUBECTL_DEBIAN",
        "Debian's kubectl 1.20 (kustomize 2.0.3), unpacked from the kubernetes-client package",
    )
}

/// The prometheus-operator CRDs the custom resources are validated against.
pub(crate) fn crds() -> Vec<PathBuf> {
    let dir = tool(
        "SNOWFLAKE_TEST_PROMETHEUS_CRDS",
        "the directory of the prometheus-operator CRDs (tests/kubernetes/crds)",
    );
    ["servicemonitors", "prometheusrules"]
        .iter()
        .map(|kind| {
            let path = dir.join(format!("{kind}.monitoring.coreos.com.yaml"));
            assert!(path.is_file(), "{} is missing", path.display());
            path
        })
        .collect()
}

/// Runs tests/kubernetes/validate.py on `yaml`: the documents as JSON when they are valid,
/// else what the validator said.
pub(crate) fn validate(yaml: &str) -> Result<Vec<Value>, String> {
    let python = tool(
        "SNOWFLAKE_TEST_KUBERNETES_PYTHON",
        "the Python of the venv with kubernetes-validate (tests/kubernetes/requirements.txt)",
    );
    let mut command = Command::new(python);
    command.arg(repo().join("tests/kubernetes/validate.py"));
    for version in KUBERNETES_VERSIONS {
        command.args(["-k", version]);
    }
    for crd in crds() {
        command.arg("--crd").arg(crd);
    }
    let mut child = command
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run validate.py");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(yaml.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    match out.status.code() {
        Some(0) => Ok(serde_json::from_slice(&out.stdout).expect("validate.py prints JSON")),
        Some(1) if !stderr.trim().is_empty() => Err(stderr),
        _ => panic!("validate.py broke ({}): {stderr}", out.status),
    }
}

/// `kubectl kustomize dir` with `kubectl`: the rendered YAML.
pub(crate) fn render_with(kubectl: &Path, dir: &Path) -> String {
    let out = Command::new(kubectl)
        .arg("kustomize")
        .arg(dir)
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", kubectl.display()));
    assert!(
        out.status.success(),
        "{} kustomize {}: {}",
        kubectl.display(),
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Every kustomization one applies: the default (the directory itself) and each overlay, by
/// name.
pub(crate) fn kustomizations() -> Vec<(String, PathBuf)> {
    let root = repo().join("deploy/kubernetes");
    let mut all = vec![("default".to_owned(), root.clone())];
    let mut overlays: Vec<_> = std::fs::read_dir(root.join("overlays"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.join("kustomization.yaml").is_file())
        .collect();
    overlays.sort();
    for path in overlays {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        all.push((name, path));
    }
    all
}

/// The documents of one rendering, as both kubectl versions would apply them: the generated
/// ConfigMap's hash suffix replaced by `<hash>` (the two kustomize versions hash differently),
/// empty metadata maps dropped (2.0.3 writes `labels: {}`), sorted by kind and name.
pub(crate) fn normalized(docs: &[Value]) -> Vec<Value> {
    let mut renames = HashMap::new();
    for doc in docs {
        if doc["kind"] == "ConfigMap" {
            let name = doc["metadata"]["name"].as_str().unwrap();
            if let Some((stem, hash)) = name.rsplit_once('-')
                && hash.len() == 10
            {
                renames.insert(name.to_owned(), format!("{stem}-<hash>"));
            }
        }
    }
    fn walk(value: &Value, renames: &HashMap<String, String>) -> Value {
        match value {
            Value::String(s) => Value::String(renames.get(s).cloned().unwrap_or_else(|| s.clone())),
            Value::Array(items) => Value::Array(items.iter().map(|v| walk(v, renames)).collect()),
            Value::Object(map) => Value::Object(
                map.iter()
                    .filter(|(k, v)| {
                        !(matches!(k.as_str(), "labels" | "annotations")
                            && v.as_object().is_some_and(|m| m.is_empty()))
                    })
                    .map(|(k, v)| (k.clone(), walk(v, renames)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
    let mut out: Vec<Value> = docs.iter().map(|d| walk(d, &renames)).collect();
    out.sort_by_key(|d| format!("{}/{}", d["kind"], d["metadata"]["name"]));
    out
}

/// Each kustomization's rendering by the kubectl on PATH, validated; rendered once per test
/// run. Panics if one does not render, does not validate, or renders differently with
/// Debian's kubectl 1.20.
pub(crate) fn renderings() -> &'static BTreeMap<String, Vec<Value>> {
    static RENDERINGS: OnceLock<BTreeMap<String, Vec<Value>>> = OnceLock::new();
    RENDERINGS.get_or_init(|| {
        let (current, debian) = (kubectl(), kubectl_debian());
        let mut all = BTreeMap::new();
        for (name, dir) in kustomizations() {
            let docs = validate(&render_with(&current, &dir))
                .unwrap_or_else(|e| panic!("{name}: the rendering does not validate:\n{e}"));
            let old = validate(&render_with(&debian, &dir)).unwrap_or_else(|e| {
                panic!("{name}: the rendering of kubectl 1.20 does not validate:\n{e}")
            });
            assert_eq!(
                normalized(&docs),
                normalized(&old),
                "{name}: {} and kubectl 1.20 (kustomize 2.0.3) render it differently",
                current.display()
            );
            all.insert(name, docs);
        }
        all
    })
}

pub(crate) fn rendering(name: &str) -> &'static [Value] {
    renderings()
        .get(name)
        .unwrap_or_else(|| panic!("no kustomization {name}"))
}

pub(crate) fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

/// The one workload of a rendering (a Deployment or a StatefulSet, never both).
pub(crate) fn workload(name: &str, docs: &[Value]) -> Value {
    let workloads: Vec<&Value> = docs
        .iter()
        .filter(|d| {
            matches!(
                d["kind"].as_str(),
                Some("Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" | "Pod")
            )
        })
        .collect();
    assert_eq!(
        workloads.len(),
        1,
        "{name}: exactly one workload, found {:?}",
        workloads
            .iter()
            .map(|w| format!("{}/{}", w["kind"], w["metadata"]["name"]))
            .collect::<Vec<_>>()
    );
    workloads[0].clone()
}

/// The `snowflake` container of a workload.
pub(crate) fn container(workload: &Value) -> &Value {
    workload["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "snowflake")
        .expect("a container named snowflake")
}

/// The container's environment as the kubelet gives it: every envFrom ConfigMap, then `env`
/// (which wins). Values from the downward API show as `<fieldRef:PATH>`.
pub(crate) fn environment(docs: &[Value], container: &Value) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for from in container["envFrom"].as_array().into_iter().flatten() {
        let name = from["configMapRef"]["name"]
            .as_str()
            .expect("envFrom names ConfigMaps only");
        let map = of_kind(docs, "ConfigMap")
            .into_iter()
            .find(|m| m["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("envFrom names ConfigMap {name}, which is not rendered"));
        for (key, value) in map["data"].as_object().unwrap() {
            env.insert(key.clone(), value.as_str().unwrap().to_owned());
        }
    }
    for var in container["env"].as_array().into_iter().flatten() {
        let value = match var["value"].as_str() {
            Some(v) => v.to_owned(),
            None => format!("<fieldRef:{}>", var["valueFrom"]["fieldRef"]["fieldPath"]),
        };
        env.insert(var["name"].as_str().unwrap().to_owned(), value);
    }
    env
}

/// The port a listener setting binds (`0.0.0.0:9090` → 9090); `None` for `off` or unset.
pub(crate) fn listener_port(env: &BTreeMap<String, String>, key: &str) -> Option<u64> {
    let value = env.get(key)?;
    if value == "off" {
        return None;
    }
    let addr: SocketAddr = value
        .parse()
        .unwrap_or_else(|e| panic!("{key}={value}: {e}"));
    assert!(
        addr.ip().is_unspecified(),
        "{key}={value}: a pod's listener must bind every interface"
    );
    Some(u64::from(addr.port()))
}

/// A container port given by number or by name, as a number.
pub(crate) fn resolve_port(container: &Value, port: &Value) -> u64 {
    if let Some(number) = port.as_u64() {
        return number;
    }
    let name = port.as_str().unwrap();
    container["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no container port named {name}"))["containerPort"]
        .as_u64()
        .unwrap()
}

pub(crate) fn replicas(workload: &Value) -> u64 {
    // Unset means 1 (the API default), or whatever an autoscaler sets.
    workload["spec"]["replicas"].as_u64().unwrap_or(1)
}

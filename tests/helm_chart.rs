//! The Helm chart (`charts/refill`) kept in step with `manifests/`: rendered with its
//! default values by the real helm (built from its Go module by
//! `e2e/cluster/build-helm.sh`), it gives exactly the objects of `manifests/`, and its
//! values change what they say. The chart's install on a cluster is tested with the
//! Velero release check in `e2e/tests/velero.rs`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;
use serde_json::Value;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn helm() -> &'static Path {
    static HELM: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    HELM.get_or_init(|| refill_e2e::cluster::helm().expect("building helm"))
}

fn documents(text: &str) -> Vec<Value> {
    yaml_serde::Deserializer::from_str(text)
        .map(|doc| Value::deserialize(doc).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

/// Objects by `kind namespace/name`.
fn by_key(objects: Vec<Value>) -> BTreeMap<String, Value> {
    objects
        .into_iter()
        .map(|o| {
            let key = format!(
                "{} {}/{}",
                o["kind"].as_str().unwrap_or_default(),
                o["metadata"]["namespace"].as_str().unwrap_or_default(),
                o["metadata"]["name"].as_str().unwrap_or_default()
            );
            (key, o)
        })
        .collect()
}

fn render(args: &[&str]) -> BTreeMap<String, Value> {
    let out = Command::new(helm())
        .args(["template", "refill"])
        .arg(repo().join("charts/refill"))
        .args(["--namespace", "refill-system"])
        .args(args)
        .output()
        .expect("running helm template");
    assert!(
        out.status.success(),
        "helm template failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    by_key(documents(&String::from_utf8(out.stdout).unwrap()))
}

fn manifests() -> BTreeMap<String, Value> {
    let mut all = Vec::new();
    for file in [
        "rbac.yaml",
        "rbac-gitops.yaml",
        "deployment.yaml",
        "metrics.yaml",
        "servicemonitor.yaml",
    ] {
        let text = std::fs::read_to_string(repo().join("manifests").join(file)).unwrap();
        // The chart's namespace is made by `helm install --create-namespace`.
        all.extend(
            documents(&text)
                .into_iter()
                .filter(|o| o["kind"] != "Namespace"),
        );
    }
    by_key(all)
}

#[test]
fn the_chart_with_its_defaults_renders_the_objects_of_manifests() {
    let chart = render(&["--set", "metrics.serviceMonitor.enabled=true"]);
    let want = manifests();
    let keys = |m: &BTreeMap<String, Value>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&chart), keys(&want));
    for (key, object) in &want {
        assert_eq!(
            &chart[key], object,
            "{key} differs between charts/refill and manifests/"
        );
    }
}

#[test]
fn the_charts_crds_are_those_of_manifests() {
    let chart = std::fs::read_to_string(repo().join("charts/refill/crds/crds.yaml")).unwrap();
    let manifests = std::fs::read_to_string(repo().join("manifests/crds.yaml")).unwrap();
    assert!(
        chart == manifests,
        "charts/refill/crds/crds.yaml is out of date: cp manifests/crds.yaml charts/refill/crds/"
    );
}

#[test]
fn the_values_change_what_they_name() {
    let chart = render(&[
        "--set",
        "veleroNamespace=backups,replicas=3,image.tag=1.2.3,image.pullPolicy=Always",
        "--set",
        "logFormat=json,tenantRoles=false,metrics.service=false,gitopsRoles=false,requestGitOps=refuse",
        "--set",
        "extraArgs={--lease-duration=30s}",
        "--set",
        "concurrency=4,requestsPerNamespace=2,nodeGrace=30s",
    ]);
    assert!(chart.contains_key("Role backups/refill"));
    assert!(chart.contains_key("RoleBinding backups/refill"));
    assert!(!chart.contains_key("ClusterRole /refill-requests-edit"));
    assert!(!chart.contains_key("ClusterRole /refill-gitops"));
    assert!(!chart.contains_key("Service refill-system/refill-metrics"));
    assert!(!chart.contains_key("ServiceMonitor refill-system/refill"));
    let deployment = &chart["Deployment refill-system/refill"];
    assert_eq!(deployment["spec"]["replicas"], 3);
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "ghcr.io/refill-dev/refill:1.2.3");
    assert_eq!(container["imagePullPolicy"], "Always");
    assert_eq!(
        container["args"],
        serde_json::json!([
            "controller",
            "--namespace",
            "backups",
            "--concurrency",
            "4",
            "--requests-per-namespace",
            "2",
            "--request-gitops",
            "refuse",
            "--node-grace",
            "30s",
            "--lease-duration=30s"
        ])
    );
    let env = container["env"].as_array().unwrap();
    assert!(
        env.iter()
            .any(|e| e["name"] == "REFILL_LOG_FORMAT" && e["value"] == "json")
    );
}

#[test]
fn the_admission_guard_is_off_by_default_and_renders_the_manifest_when_on() {
    let guard = |m: &BTreeMap<String, Value>| {
        m.iter()
            .filter(|(k, _)| {
                k.starts_with("ValidatingAdmissionPolicy") || k.contains("refill-admission-guard")
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<BTreeMap<_, _>>()
    };
    assert!(guard(&render(&[])).is_empty(), "the guard is opt-in");
    let text = std::fs::read_to_string(repo().join("manifests/admission-guard.yaml")).unwrap();
    let want = by_key(documents(&text));
    let chart = guard(&render(&["--set", "admissionGuard.enabled=true"]));
    assert_eq!(
        chart, want,
        "charts/refill and manifests/admission-guard.yaml differ"
    );
}

#[test]
fn the_grafana_dashboard_is_off_by_default_and_holds_the_repositorys_json_when_on() {
    // ConfigMaps that Grafana's sidecar would load, under its label `key`.
    let dashboards = |m: &BTreeMap<String, Value>, key: &str| {
        m.iter()
            .filter(|(_, o)| o["kind"] == "ConfigMap" && !o["metadata"]["labels"][key].is_null())
            .map(|(k, o)| (k.clone(), o.clone()))
            .collect::<Vec<_>>()
    };
    let default = render(&[]);
    assert!(
        dashboards(&default, "grafana_dashboard").is_empty(),
        "the dashboard is opt-in"
    );
    assert!(!default.contains_key("ConfigMap refill-system/refill-dashboard"));

    let text =
        std::fs::read_to_string(repo().join("charts/refill/dashboards/refill.json")).unwrap();
    let want: Value = serde_json::from_str(&text).unwrap();
    let holds_the_dashboard = |object: &Value| {
        let data = object["data"].as_object().unwrap();
        assert_eq!(data.len(), 1, "one dashboard: {:?}", data.keys());
        let json = data.values().next().unwrap().as_str().unwrap();
        assert_eq!(serde_json::from_str::<Value>(json).unwrap(), want);
        assert_eq!(json, text.trim_end());
    };

    let on = dashboards(
        &render(&["--set", "dashboard.enabled=true"]),
        "grafana_dashboard",
    );
    assert_eq!(on.len(), 1, "{on:?}");
    let (key, object) = &on[0];
    assert_eq!(key, "ConfigMap refill-system/refill-dashboard");
    assert_eq!(object["metadata"]["labels"]["grafana_dashboard"], "1");
    holds_the_dashboard(object);

    let elsewhere = render(&[
        "--set",
        "dashboard.enabled=true,dashboard.namespace=monitoring,dashboard.label.key=dashboards.example.com/grafana",
        "--set-string",
        "dashboard.label.value=refill,dashboard.annotations.grafana_folder=Backups",
    ]);
    let on = dashboards(&elsewhere, "dashboards.example.com/grafana");
    assert_eq!(on.len(), 1, "{on:?}");
    let (key, object) = &on[0];
    assert_eq!(key, "ConfigMap monitoring/refill-dashboard");
    assert_eq!(
        object["metadata"]["labels"]["dashboards.example.com/grafana"],
        "refill"
    );
    assert_eq!(
        object["metadata"]["annotations"]["grafana_folder"],
        "Backups"
    );
    holds_the_dashboard(object);
}

//! The files of `manifests/` fit together as a user applies them: the metrics
//! Service reaches the controller's pods on the port that serves `/metrics`, the
//! example ServiceMonitor scrapes that Service, and the RBAC lets the replicas keep
//! their leader Lease. (The objects themselves are applied and run by the tests on
//! the local cluster; this catches a rename in one file that another still uses.)

use serde::Deserialize;
use serde_json::Value;

fn objects(file: &str) -> Vec<Value> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("manifests")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    yaml_serde::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap())
        .collect()
}

fn one(file: &str, kind: &str) -> Value {
    let mut found: Vec<Value> = objects(file)
        .into_iter()
        .filter(|o| o["kind"] == kind)
        .collect();
    assert_eq!(found.len(), 1, "{file} holds {} {kind}s", found.len());
    found.remove(0)
}

/// Whether every `key: value` of `selector` is among `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    let selector = selector.as_object().expect("a selector is a map");
    !selector.is_empty() && selector.iter().all(|(k, v)| labels[k] == *v)
}

#[test]
fn the_metrics_service_reaches_the_controller_port_that_serves_metrics() {
    let deployment = one("deployment.yaml", "Deployment");
    let service = one("metrics.yaml", "Service");
    let pod = &deployment["spec"]["template"];
    assert!(selects(
        &service["spec"]["selector"],
        &pod["metadata"]["labels"]
    ));
    let target = &service["spec"]["ports"][0]["targetPort"];
    let ports = pod["spec"]["containers"][0]["ports"].as_array().unwrap();
    let port = ports
        .iter()
        .find(|p| p["name"] == *target)
        .unwrap_or_else(|| panic!("no container port named {target}"));
    // The controller's --probe-addr default, where /metrics answers.
    assert_eq!(port["containerPort"], 8080);
    assert_eq!(
        service["metadata"]["namespace"],
        deployment["metadata"]["namespace"]
    );
}

#[test]
fn the_service_monitor_scrapes_the_metrics_service() {
    let service = one("metrics.yaml", "Service");
    let monitor = one("servicemonitor.yaml", "ServiceMonitor");
    assert!(selects(
        &monitor["spec"]["selector"]["matchLabels"],
        &service["metadata"]["labels"]
    ));
    assert_eq!(
        monitor["spec"]["endpoints"][0]["port"],
        service["spec"]["ports"][0]["name"]
    );
    assert_eq!(monitor["spec"]["endpoints"][0]["path"], "/metrics");
}

#[test]
fn the_replicas_may_keep_their_leader_lease_in_veleros_namespace() {
    let role = one("rbac.yaml", "Role");
    let rules = role["rules"].as_array().unwrap();
    let leases = rules
        .iter()
        .find(|r| r["apiGroups"][0] == "coordination.k8s.io" && r["resources"][0] == "leases")
        .expect("a rule for leases");
    for verb in ["get", "create", "patch"] {
        assert!(
            leases["verbs"]
                .as_array()
                .unwrap()
                .iter()
                .any(|v| v == verb),
            "leases: no {verb}"
        );
    }
    let deployment = one("deployment.yaml", "Deployment");
    assert!(deployment["spec"]["replicas"].as_i64().unwrap() >= 2);
    let budget = one("deployment.yaml", "PodDisruptionBudget");
    assert!(selects(
        &budget["spec"]["selector"]["matchLabels"],
        &deployment["spec"]["template"]["metadata"]["labels"]
    ));
}

/// The VolumePopulator names the kind refill fills claims from, as its CRD is
/// served, and its own CRD (for clusters without it) is of the version it uses.
#[test]
fn the_volume_populator_registers_refills_backup_volume() {
    let backup_volume = objects("crds.yaml")
        .into_iter()
        .find(|crd| crd["spec"]["names"]["kind"] == "BackupVolume")
        .expect("crds.yaml holds BackupVolume");
    let populator = one("populator.yaml", "VolumePopulator");
    assert_eq!(
        populator["sourceKind"]["group"],
        backup_volume["spec"]["group"]
    );
    assert_eq!(populator["sourceKind"]["kind"], "BackupVolume");
    let crd = one("populator.yaml", "CustomResourceDefinition");
    let version = populator["apiVersion"].as_str().unwrap();
    assert_eq!(
        format!(
            "{}/{}",
            crd["spec"]["group"].as_str().unwrap(),
            crd["spec"]["versions"][0]["name"].as_str().unwrap()
        ),
        version
    );
    assert_eq!(crd["spec"]["scope"], "Cluster");
}

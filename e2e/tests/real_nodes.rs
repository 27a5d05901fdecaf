//! Pods that really run: on the local cluster's real nodes (kubelet, containerd,
//! runc; see `e2e/cluster/nodes.sh`) containers start from the images built in
//! `e2e/images`, mount volumes that are directories on this machine, and reach the
//! API server through its in-cluster address.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::{ConfigMap, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{ListParams, LogParams};
use refill_e2e::fixture;
use refill_e2e::{
    LOCAL_PATH_CLASS, REAL_NODE_LABEL, REAL_NODE_TAINT, REAL_NODES, TESTBOX_IMAGE, TestEnv,
    is_pod_ready, run_test, wait_for,
};
use serde_json::{Value, json};

/// Pods on a real node start in a few seconds; a busy machine (two cores, builds
/// running beside the tests) may take much longer.
const TIMEOUT: Duration = Duration::from_secs(120);

/// What lets a pod onto a real node.
fn toleration() -> Value {
    json!([{ "key": REAL_NODE_TAINT, "operator": "Exists", "effect": "NoSchedule" }])
}

/// A container of the test image running `/testbox <args>`.
fn testbox(name: &str, args: &[&str], mounts: Value) -> Value {
    json!({
        "name": name,
        "image": TESTBOX_IMAGE,
        "imagePullPolicy": "Never",
        "args": args,
        "volumeMounts": mounts,
    })
}

fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_name.as_deref()
}

/// Waits for the pod to be Running and Ready, and returns it.
async fn wait_ready(env: &TestEnv, name: &str) -> Result<Pod> {
    let pods = env.api::<Pod>();
    wait_for(format!("pod {name} ready"), TIMEOUT, || async {
        let pod = pods.get(name).await?;
        Ok(is_pod_ready(&pod).then_some(pod))
    })
    .await
}

/// Waits for a pod with restartPolicy Never to end, and returns its phase.
async fn wait_finished(env: &TestEnv, name: &str) -> Result<String> {
    let pods = env.api::<Pod>();
    wait_for(format!("pod {name} finished"), TIMEOUT, || async {
        let pod = pods.get(name).await?;
        let phase = pod.status.and_then(|s| s.phase).unwrap_or_default();
        Ok(matches!(phase.as_str(), "Succeeded" | "Failed").then_some(phase))
    })
    .await
}

#[tokio::test]
async fn real_nodes_are_ready_labelled_and_tainted() -> Result<()> {
    run_test("real-nodes", |env| async move {
        let nodes = env.api_all::<Node>();
        let real = nodes
            .list(&ListParams::default().labels(&format!("{REAL_NODE_LABEL}=real")))
            .await?;
        let mut names: Vec<String> = real
            .items
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        names.sort();
        ensure!(names == REAL_NODES, "real nodes are {names:?}");
        for node in &real.items {
            let name = node.metadata.name.as_deref().unwrap_or_default();
            let ready = node
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            ensure!(ready, "node {name} is not Ready");
            let tainted = node
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .into_iter()
                .flatten()
                .any(|t| t.key == REAL_NODE_TAINT && t.effect == "NoSchedule");
            ensure!(tainted, "node {name} lacks the {REAL_NODE_TAINT} taint");
            // A real kubelet reports what it runs on; kwok reports nothing of the kind.
            let info = node
                .status
                .as_ref()
                .and_then(|s| s.node_info.as_ref())
                .context("no nodeInfo")?;
            ensure!(
                info.container_runtime_version.starts_with("containerd://"),
                "node {name} runs {}",
                info.container_runtime_version
            );
        }
        Ok(())
    })
    .await
}

#[tokio::test]
async fn init_container_writes_into_a_local_pv_on_a_real_node() -> Result<()> {
    run_test("real-local-pv", |env| async move {
        let ns = env.namespace().to_string();
        let class = format!("{ns}-local");
        fixture::storage_class(&env.client, &class, &env.ns.labels()).await?;
        let dir: PathBuf = env.cluster.scratch_dir(&ns)?;
        // Any user in the pod may write there, as on a freshly provisioned disk.
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777))?;
        let pv = format!("{ns}-data");
        fixture::local_pv_of_class(
            &env.client,
            &pv,
            REAL_NODES[0],
            &dir,
            &env.ns.labels(),
            &class,
        )
        .await?;
        fixture::pvc_of_class(&env.client, &ns, "data", Some(&pv), &[], &class).await?;
        let text = format!("written on a real node in {ns}");
        env.create::<Pod>(json!({
            "metadata": { "name": "writer" },
            "spec": {
                "tolerations": toleration(),
                "initContainers": [testbox("init", &["write", "/data/hello.txt", &text],
                    json!([{ "name": "data", "mountPath": "/data" }]))],
                "containers": [testbox("main", &["sleep"],
                    json!([{ "name": "data", "mountPath": "/data" }]))],
                "volumes": [{ "name": "data", "persistentVolumeClaim": { "claimName": "data" } }],
                "terminationGracePeriodSeconds": 1,
            }
        }))
        .await?;
        let pod = wait_ready(&env, "writer").await?;
        ensure!(
            node_of(&pod) == Some(REAL_NODES[0]),
            "the pod runs on {:?}, not on its volume's node",
            node_of(&pod)
        );
        let init = pod
            .status
            .as_ref()
            .and_then(|s| s.init_container_statuses.as_ref())
            .and_then(|s| s.first())
            .and_then(|s| s.state.as_ref())
            .and_then(|s| s.terminated.as_ref())
            .context("the init container has not terminated")?;
        ensure!(
            init.exit_code == 0,
            "init container exited {}",
            init.exit_code
        );
        let written = std::fs::read_to_string(dir.join("hello.txt"))
            .with_context(|| format!("reading hello.txt in {}", dir.display()))?;
        ensure!(written == text, "the PV's directory holds {written:?}");
        Ok(())
    })
    .await
}

#[tokio::test]
async fn wait_for_first_consumer_claim_binds_on_the_node_its_pod_lands_on() -> Result<()> {
    run_test("real-wffc", |env| async move {
        // The second real node, so that the test shows the choice follows the pod.
        let node = REAL_NODES[1];
        let claims = env.api::<PersistentVolumeClaim>();
        env.create::<PersistentVolumeClaim>(json!({
            "metadata": { "name": "data" },
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": LOCAL_PATH_CLASS,
                "resources": { "requests": { "storage": "16Mi" } },
            }
        }))
        .await?;
        // Unbound until a pod consumes it.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let claim = claims.get("data").await?;
        let phase = claim.status.and_then(|s| s.phase).unwrap_or_default();
        ensure!(
            phase == "Pending",
            "the claim is {phase} before any pod uses it"
        );

        let text = "provisioned where the pod runs";
        env.create::<Pod>(json!({
            "metadata": { "name": "consumer" },
            "spec": {
                "tolerations": toleration(),
                "nodeSelector": { "kubernetes.io/hostname": node },
                "initContainers": [testbox("init", &["write", "/data/where.txt", text],
                    json!([{ "name": "data", "mountPath": "/data" }]))],
                "containers": [testbox("main", &["sleep"],
                    json!([{ "name": "data", "mountPath": "/data" }]))],
                "volumes": [{ "name": "data", "persistentVolumeClaim": { "claimName": "data" } }],
                "terminationGracePeriodSeconds": 1,
            }
        }))
        .await?;
        let pod = wait_ready(&env, "consumer").await?;
        ensure!(node_of(&pod) == Some(node), "pod on {:?}", node_of(&pod));

        let claim = claims.get("data").await?;
        let volume = claim
            .spec
            .and_then(|s| s.volume_name)
            .context("the claim has no volume")?;
        let pv = env.api_all::<PersistentVolume>().get(&volume).await?;
        let spec = pv.spec.context("PV without spec")?;
        let affinity_nodes: Vec<String> = spec
            .node_affinity
            .and_then(|a| a.required)
            .into_iter()
            .flat_map(|r| r.node_selector_terms)
            .flat_map(|t| t.match_expressions.unwrap_or_default())
            .flat_map(|e| e.values.unwrap_or_default())
            .collect();
        ensure!(
            affinity_nodes == [node],
            "the volume is pinned to {affinity_nodes:?}"
        );
        let path = spec
            .host_path
            .map(|h| h.path)
            .or(spec.local.map(|l| l.path))
            .context("the volume has neither hostPath nor local path")?;
        let node_dir = env.cluster.real_node_dir(node).join("local-path");
        ensure!(
            PathBuf::from(&path).starts_with(&node_dir),
            "the volume's directory {path} is not under {}",
            node_dir.display()
        );
        let written = std::fs::read_to_string(PathBuf::from(&path).join("where.txt"))
            .with_context(|| format!("reading where.txt in {path}"))?;
        ensure!(written == text, "the volume holds {written:?}");
        Ok(())
    })
    .await
}

#[tokio::test]
async fn pod_with_in_cluster_config_reads_from_the_api_server() -> Result<()> {
    run_test("real-in-cluster", |env| async move {
        let ns = env.namespace().to_string();
        env.create::<ConfigMap>(json!({
            "metadata": { "name": "greeting" },
            "data": { "message": "hello from the API server" },
        }))
        .await?;
        env.create::<k8s_openapi::api::core::v1::ServiceAccount>(json!({
            "metadata": { "name": "reader" },
        }))
        .await?;
        env.create::<Role>(json!({
            "metadata": { "name": "read-configmaps" },
            "rules": [{ "apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"] }],
        }))
        .await?;
        env.create::<RoleBinding>(json!({
            "metadata": { "name": "reader" },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read-configmaps" },
            "subjects": [{ "kind": "ServiceAccount", "name": "reader", "namespace": ns }],
        }))
        .await?;
        let path = format!("/api/v1/namespaces/{ns}/configmaps/greeting");
        for (pod, account) in [("allowed", "reader"), ("denied", "default")] {
            env.create::<Pod>(json!({
                "metadata": { "name": pod },
                "spec": {
                    "serviceAccountName": account,
                    "restartPolicy": "Never",
                    // The toleration only allows real nodes; the selector picks them.
                    "nodeSelector": { REAL_NODE_LABEL: "real" },
                    "tolerations": toleration(),
                    "containers": [testbox("api", &["api", &path], json!([]))],
                }
            }))
            .await?;
        }
        let pods = env.api::<Pod>();
        // The ServiceAccount with the Role reads the ConfigMap...
        let phase = wait_finished(&env, "allowed").await?;
        // Logs come through the API server from the node's kubelet.
        let logs = pods.logs("allowed", &LogParams::default()).await?;
        ensure!(phase == "Succeeded", "pod allowed {phase}: {logs}");
        ensure!(
            logs.contains("hello from the API server"),
            "pod allowed printed {logs}"
        );
        // ...and the one without is refused by RBAC, so the token was what counted.
        let phase = wait_finished(&env, "denied").await?;
        let logs = pods.logs("denied", &LogParams::default()).await?;
        ensure!(phase == "Failed", "pod denied {phase}: {logs}");
        ensure!(logs.contains("403"), "pod denied printed {logs}");
        Ok(())
    })
    .await
}

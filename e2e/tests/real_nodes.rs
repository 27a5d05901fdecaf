//! Pods that really run: on the local cluster's real nodes (kubelet, containerd,
//! runc; see `e2e/cluster/nodes.sh`) containers start from the images built in
//! `e2e/images`, mount volumes that are directories on this machine, and reach the
//! API server through its in-cluster address.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{
    ConfigMap, Node, PersistentVolume, PersistentVolumeClaim, Pod, SecurityContext,
};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{ListParams, LogParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use refill::api::{DataRestoreSpec, Phase, RestoreHelperOverrides};
use refill_e2e::fixture;
use refill_e2e::node_agent::{self, NodeAgentConfig};
use refill_e2e::{
    LOCAL_PATH_CLASS, REAL_NODE_LABEL, REAL_NODE_TAINT, REAL_NODES, REFILL_IMAGE,
    RESTORE_HELPER_IMAGE, TESTBOX_IMAGE, TestEnv, is_pod_ready, run_test, wait_for,
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

/// The toleration of the real nodes' taint for every pod of a namespace, by
/// PodTolerationRestriction's namespace annotation: pods that refill creates (the
/// stand-ins) get it as the workload's own pods do.
async fn tolerate_real_nodes(env: &TestEnv) -> Result<()> {
    let annotation = serde_json::to_string(&toleration())?;
    env.api_all::<k8s_openapi::api::core::v1::Namespace>()
        .patch(
            env.namespace(),
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "annotations": {
                "scheduler.alpha.kubernetes.io/defaultTolerations": annotation,
            }}})),
        )
        .await?;
    Ok(())
}

/// `manifests/deployment.yaml` as a user applies it, changed only where this
/// cluster differs: the locally imported image (never pulled), Velero's namespace,
/// and the real node it runs on.
fn controller_deployment(velero_namespace: &str, node: &str) -> Result<Deployment> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../manifests/deployment.yaml");
    let yaml = std::fs::read_to_string(&path)?;
    let mut deployment: Deployment = serde_yaml::from_str(&yaml)?;
    let spec = deployment
        .spec
        .as_mut()
        .and_then(|s| s.template.spec.as_mut())
        .context("deployment.yaml has no pod spec")?;
    spec.node_selector = Some([("kubernetes.io/hostname".to_string(), node.to_string())].into());
    spec.tolerations = Some(serde_json::from_value(toleration())?);
    let container = spec
        .containers
        .iter_mut()
        .find(|c| c.name == "refill")
        .context("deployment.yaml has no refill container")?;
    container.image = Some(REFILL_IMAGE.to_string());
    container.image_pull_policy = Some("Never".to_string());
    let args = container.args.as_mut().context("no args")?;
    let at = args
        .iter()
        .position(|a| a == "--namespace")
        .context("no --namespace")?;
    args[at + 1] = velero_namespace.to_string();
    Ok(deployment)
}

#[tokio::test]
async fn controller_pod_from_the_manifests_restores_a_claim_on_a_real_node() -> Result<()> {
    run_test("real-controller", |env| async move {
        let ns = env.namespace().to_string();
        let client = env.client.clone();
        tolerate_real_nodes(&env).await?;
        env.cluster.load_refill_image().await?;
        fixture::install_refill(&client, &ns).await?;

        // The controller on one real node...
        let controllers: Api<Deployment> =
            Api::namespaced(client.clone(), fixture::CONTROLLER_SA.0);
        let deployment = controller_deployment(&ns, REAL_NODES[0])?;
        controllers
            .patch(
                "refill",
                &PatchParams::apply("refill-e2e").force(),
                &Patch::Apply(&deployment),
            )
            .await?;
        let result = restore_with_controller_pod(&env, &ns).await;
        // One controller Deployment serves the whole cluster; it goes with the test.
        controllers
            .delete("refill", &kube::api::DeleteParams::foreground())
            .await?;
        result
    })
    .await
}

async fn restore_with_controller_pod(env: &TestEnv, ns: &str) -> Result<()> {
    let client = env.client.clone();
    let system_pods: Api<Pod> = Api::namespaced(client.clone(), fixture::CONTROLLER_SA.0);
    let controller = wait_for("refill's controller pod ready", TIMEOUT, || async {
        let pods = system_pods
            .list(&ListParams::default().labels("app.kubernetes.io/name=refill"))
            .await?;
        Ok(pods
            .items
            .into_iter()
            .find(|p| p.metadata.deletion_timestamp.is_none() && is_pod_ready(p)))
    })
    .await?;
    ensure!(
        node_of(&controller) == Some(REAL_NODES[0]),
        "the controller runs on {:?}",
        node_of(&controller)
    );

    // ...restores a claim whose data and consumer live on the other.
    let node = REAL_NODES[1];
    let scratch = env.cluster.scratch_dir(ns)?;
    let snapshots = scratch.join("snapshots");
    let dir = scratch.join("pv");
    std::fs::create_dir_all(&snapshots)?;
    std::fs::create_dir_all(&dir)?;
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777))?;
    let pv = format!("{ns}-data");
    fixture::bound_local_volume(&client, ns, "data", &pv, node, &dir, &env.ns.labels()).await?;
    let good: &[u8] = b"the rows as they were at backup time\n";
    std::fs::write(dir.join("app.db"), good)?;
    env.create::<Deployment>(json!({
        "metadata": { "name": "app" },
        "spec": {
            "replicas": 1,
            "selector": { "matchLabels": { "app": "app" } },
            "template": {
                "metadata": { "labels": { "app": "app" } },
                "spec": {
                    "containers": [testbox("app", &["sleep"],
                        json!([{ "name": "data", "mountPath": "/data" }]))],
                    "volumes": [{ "name": "data", "persistentVolumeClaim": { "claimName": "data" } }],
                    "terminationGracePeriodSeconds": 1,
                }
            }
        }
    }))
    .await?;
    let pods = fixture::wait_ready_pods(&client, ns, "app", 1, TIMEOUT).await?;
    ensure!(
        node_of(&pods[0]) == Some(node),
        "app runs on {:?}",
        node_of(&pods[0])
    );
    fixture::backup(
        &client,
        ns,
        "nightly",
        &snapshots,
        &[fixture::BackedUpVolume {
            namespace: ns,
            pvc: "data",
            pod: &pods[0].name_any(),
            volume: "data",
            snapshot_id: format!("{ns}-data"),
            files: vec![("app.db", good.to_vec())],
        }],
    )
    .await?;
    std::fs::write(dir.join("app.db"), b"corrupted")?;

    // The simulated node agent moves the data; the stand-in's restore-wait runs our
    // helper program, which waits for the done file for real.
    let mut agent = NodeAgentConfig::new(&snapshots);
    agent.velero_namespace = ns.to_string();
    agent.simulate_restore_helper = false;
    let _agent = node_agent::spawn(client.clone(), agent);
    let spec = DataRestoreSpec {
        backup_name: Some("nightly".into()),
        pvcs: vec![format!("{ns}/data")],
        restore_helper: Some(RestoreHelperOverrides {
            image: Some(RESTORE_HELPER_IMAGE.into()),
            // As the user that wrote the done files (the simulated node agent runs
            // as root), so that the helper may remove them as Velero's does.
            security_context: Some(SecurityContext {
                run_as_user: Some(0),
                run_as_non_root: Some(false),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    fixture::data_restore(&client, ns, "fix-app", spec).await?;
    let done = fixture::wait_finished(&client, ns, "fix-app", Duration::from_secs(180)).await?;
    let status = done.status.context("no status")?;
    ensure!(status.phase == Phase::Completed, "{status:#?}");
    ensure!(
        status.volumes[0].node.as_deref() == Some(node),
        "{:#?}",
        status.volumes[0]
    );
    ensure!(
        fixture::read(&dir, "app.db")? == good,
        "app.db not restored"
    );
    ensure!(
        !dir.join(".velero").exists(),
        "the restore helper left the done files"
    );
    // The consumer is back, on its node.
    let pods = fixture::wait_ready_pods(&client, ns, "app", 1, TIMEOUT).await?;
    ensure!(
        node_of(&pods[0]) == Some(node),
        "app runs on {:?}",
        node_of(&pods[0])
    );
    // The restore-wait container really ran our helper to its end.
    let events = env
        .api::<k8s_openapi::api::core::v1::Event>()
        .list(&ListParams::default())
        .await?;
    let helper_started = events.items.iter().any(|e| {
        e.reason.as_deref() == Some("Started")
            && e.message
                .as_deref()
                .unwrap_or_default()
                .contains("restore-wait")
    });
    ensure!(helper_started, "no event shows restore-wait started");
    Ok(())
}

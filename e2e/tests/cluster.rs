//! The local cluster behaves like a real one in the ways refill depends on:
//! workloads scale, the scheduler honours node affinity and local volumes,
//! the simulated kubelet holds `restore-wait` pods, and RBAC is enforced.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use refill_e2e::{
    NODES, RESTORE_WAIT_CONTAINER, RESTORE_WAIT_DONE, TestEnv, is_pod_ready, run_test, wait_for,
};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(60);

/// Pods matching `selector` that are not being deleted.
async fn live_pods(pods: &Api<Pod>, selector: &str) -> Result<Vec<Pod>> {
    let list = pods.list(&ListParams::default().labels(selector)).await?;
    Ok(list
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect())
}

fn node_of(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("")
}

/// Waits until exactly `count` pods match `selector`, all Running and Ready.
async fn wait_ready_pods(env: &TestEnv, selector: &str, count: usize) -> Result<Vec<Pod>> {
    let pods = env.api::<Pod>();
    wait_for(
        format!("{count} ready pods with {selector}"),
        TIMEOUT,
        || async {
            let live = live_pods(&pods, selector).await?;
            Ok((live.len() == count && live.iter().all(is_pod_ready)).then_some(live))
        },
    )
    .await
}

async fn scale(env: &TestEnv, name: &str, replicas: i32) -> Result<()> {
    env.api::<Deployment>()
        .patch_scale(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "replicas": replicas } })),
        )
        .await?;
    Ok(())
}

#[tokio::test]
async fn deployment_scaled_to_zero_loses_its_pods_and_gets_them_back() -> Result<()> {
    run_test("scale", |env| async move {
        env.create::<Deployment>(json!({
            "metadata": { "name": "web" },
            "spec": {
                "replicas": 3,
                "selector": { "matchLabels": { "app": "web" } },
                "template": {
                    "metadata": { "labels": { "app": "web" } },
                    "spec": { "containers": [{ "name": "web", "image": "registry.invalid/web:1" }] }
                }
            }
        }))
        .await?;
        wait_ready_pods(&env, "app=web", 3).await?;

        scale(&env, "web", 0).await?;
        let pods = env.api::<Pod>();
        // Gone from the API altogether, not merely terminating: a pod that
        // still exists may still hold its volume.
        wait_for("all web pods deleted", TIMEOUT, || async {
            let all = pods.list(&ListParams::default().labels("app=web")).await?;
            Ok(all.items.is_empty().then_some(()))
        })
        .await?;

        scale(&env, "web", 2).await?;
        let back = wait_ready_pods(&env, "app=web", 2).await?;
        for pod in &back {
            ensure!(
                NODES.contains(&node_of(pod)),
                "pod on unexpected node {:?}",
                node_of(pod)
            );
        }
        Ok(())
    })
    .await
}

#[tokio::test]
async fn required_node_affinity_is_honoured() -> Result<()> {
    run_test("affinity", |env| async move {
        for i in 0..6 {
            env.create::<Pod>(json!({
                "metadata": { "name": format!("pinned-{i}"), "labels": { "app": "pinned" } },
                "spec": {
                    "affinity": { "nodeAffinity": { "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{ "matchExpressions": [{
                            "key": "kubernetes.io/hostname",
                            "operator": "In",
                            "values": ["node-b", "node-c"]
                        }] }]
                    } } },
                    "containers": [{ "name": "app", "image": "registry.invalid/app:1" }]
                }
            }))
            .await?;
        }
        let pods = wait_ready_pods(&env, "app=pinned", 6).await?;
        let nodes: BTreeSet<&str> = pods.iter().map(node_of).collect();
        ensure!(
            nodes.iter().all(|n| *n == "node-b" || *n == "node-c"),
            "pods landed on {nodes:?}"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn wait_for_first_consumer_claim_binds_local_volume_on_the_pods_node() -> Result<()> {
    run_test("local-pv", |env| async move {
        let ns = env.namespace().to_string();
        let class = format!("{ns}-local");
        env.api_all::<StorageClass>()
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "metadata": { "name": class, "labels": env.ns.labels() },
                    "provisioner": "kubernetes.io/no-provisioner",
                    "volumeBindingMode": "WaitForFirstConsumer"
                }))?,
            )
            .await?;
        // One local volume on node-a and one on node-b, each a real directory.
        for node in ["node-a", "node-b"] {
            let path = env.cluster.scratch_dir(&format!("{ns}/{node}"))?;
            env.api_all::<PersistentVolume>()
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(json!({
                        "metadata": { "name": format!("{ns}-{node}"), "labels": env.ns.labels() },
                        "spec": {
                            "capacity": { "storage": "1Gi" },
                            "accessModes": ["ReadWriteOnce"],
                            "persistentVolumeReclaimPolicy": "Retain",
                            "storageClassName": class,
                            "local": { "path": path },
                            "nodeAffinity": { "required": { "nodeSelectorTerms": [{ "matchExpressions": [{
                                "key": "kubernetes.io/hostname", "operator": "In", "values": [node]
                            }] }] } }
                        }
                    }))?,
                )
                .await?;
        }
        env.create::<PersistentVolumeClaim>(json!({
            "metadata": { "name": "data" },
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": class,
                "resources": { "requests": { "storage": "1Gi" } }
            }
        }))
        .await?;
        let claims = env.api::<PersistentVolumeClaim>();
        let claim = claims.get("data").await?;
        ensure!(
            claim.spec.as_ref().and_then(|s| s.volume_name.as_ref()).is_none(),
            "claim bound before it had a consumer"
        );

        env.create::<Pod>(json!({
            "metadata": { "name": "consumer", "labels": { "app": "consumer" } },
            "spec": {
                "affinity": { "nodeAffinity": { "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{ "matchExpressions": [{
                        "key": "kubernetes.io/hostname", "operator": "In", "values": ["node-b"]
                    }] }]
                } } },
                "containers": [{
                    "name": "app",
                    "image": "registry.invalid/app:1",
                    "volumeMounts": [{ "name": "data", "mountPath": "/data" }]
                }],
                "volumes": [{ "name": "data", "persistentVolumeClaim": { "claimName": "data" } }]
            }
        }))
        .await?;
        let pod = wait_ready_pods(&env, "app=consumer", 1).await?.remove(0);
        ensure!(node_of(&pod) == "node-b", "pod on {:?}", node_of(&pod));

        let volume = wait_for("claim data bound", TIMEOUT, || async {
            let claim = claims.get("data").await?;
            let phase = claim.status.as_ref().and_then(|s| s.phase.clone());
            let volume = claim.spec.and_then(|s| s.volume_name);
            Ok(volume.filter(|_| phase.as_deref() == Some("Bound")))
        })
        .await?;
        ensure!(
            volume == format!("{ns}-node-b"),
            "claim bound to {volume}, not to the volume on node-b"
        );
        Ok(())
    })
    .await
}

/// The state kwok gives a held pod: Pending, restore-wait running, not initialized.
fn is_held(pod: &Pod) -> bool {
    let Some(status) = &pod.status else {
        return false;
    };
    let restore_wait_running = status.init_container_statuses.iter().flatten().any(|c| {
        c.name == RESTORE_WAIT_CONTAINER && c.state.as_ref().is_some_and(|s| s.running.is_some())
    });
    let initialized = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Initialized" && c.status == "True");
    status.phase.as_deref() == Some("Pending")
        && restore_wait_running
        && !initialized
        && status.pod_ip.is_some()
}

fn pod_with_init(name: &str, init: &str) -> serde_json::Value {
    json!({
        "metadata": { "name": name, "labels": { "pod": name } },
        "spec": {
            "initContainers": [
                { "name": init, "image": "registry.invalid/init:1" },
                { "name": "second-init", "image": "registry.invalid/init:1" }
            ],
            "containers": [{ "name": "app", "image": "registry.invalid/app:1" }]
        }
    })
}

#[tokio::test]
async fn restore_wait_init_container_holds_the_pod_until_annotated() -> Result<()> {
    run_test("restore-wait", |env| async move {
        let pods = env.api::<Pod>();
        env.create::<Pod>(pod_with_init("held", RESTORE_WAIT_CONTAINER))
            .await?;
        wait_for("pod held in restore-wait", TIMEOUT, || async {
            Ok(is_held(&pods.get("held").await?).then_some(()))
        })
        .await?;

        // A pod whose init container has another name runs at once. It was
        // created after the held pod reached its state, so by the time it is
        // ready the simulated kubelet has had every chance to move the held pod
        // on; it must not have. A wrong annotation value does not release it either.
        pods.patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "annotations": { RESTORE_WAIT_DONE: "false" } } })),
        )
        .await?;
        env.create::<Pod>(pod_with_init("plain", "setup")).await?;
        let plain = wait_ready_pods(&env, "pod=plain", 1).await?.remove(0);
        let plain_inits = plain
            .status
            .and_then(|s| s.init_container_statuses)
            .unwrap_or_default();
        ensure!(
            plain_inits.len() == 2
                && plain_inits.iter().all(|c| c
                    .state
                    .as_ref()
                    .and_then(|s| s.terminated.as_ref())
                    .is_some_and(|t| t.exit_code == 0)),
            "init containers of the plain pod did not complete: {plain_inits:?}"
        );
        let held = pods.get("held").await?;
        ensure!(
            is_held(&held),
            "held pod moved on without the annotation: {:?}",
            held.status
        );

        pods.patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "annotations": { RESTORE_WAIT_DONE: "true" } } })),
        )
        .await?;
        let released = wait_ready_pods(&env, "pod=held", 1).await?.remove(0);
        let restore_wait = released
            .status
            .and_then(|s| s.init_container_statuses)
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.name == RESTORE_WAIT_CONTAINER)
            .context("no restore-wait status")?;
        ensure!(
            restore_wait
                .state
                .and_then(|s| s.terminated)
                .is_some_and(|t| t.exit_code == 0),
            "restore-wait did not exit 0"
        );

        // A held pod can still be deleted (the namespace cleanup relies on it).
        env.create::<Pod>(pod_with_init("doomed", RESTORE_WAIT_CONTAINER))
            .await?;
        wait_for("pod doomed held", TIMEOUT, || async {
            Ok(is_held(&pods.get("doomed").await?).then_some(()))
        })
        .await?;
        pods.delete("doomed", &DeleteParams::default()).await?;
        wait_for("pod doomed gone", TIMEOUT, || async {
            Ok(pods.get_opt("doomed").await?.is_none().then_some(()))
        })
        .await?;
        Ok(())
    })
    .await
}

#[tokio::test]
async fn job_pods_complete() -> Result<()> {
    run_test("job", |env| async move {
        env.create::<Job>(json!({
            "metadata": { "name": "once" },
            "spec": {
                "backoffLimit": 0,
                "template": { "spec": {
                    "restartPolicy": "Never",
                    "containers": [{ "name": "task", "image": "registry.invalid/task:1" }]
                } }
            }
        }))
        .await?;
        let jobs = env.api::<Job>();
        wait_for("job once succeeded", TIMEOUT, || async {
            let job = jobs.get("once").await?;
            Ok((job.status.and_then(|s| s.succeeded) == Some(1)).then_some(()))
        })
        .await
    })
    .await
}

#[tokio::test]
async fn service_account_is_bound_by_rbac() -> Result<()> {
    run_test("rbac", |env| async move {
        let ns = env.namespace().to_string();
        env.create::<ServiceAccount>(json!({ "metadata": { "name": "nobody" } }))
            .await?;
        let client = env.cluster.service_account_client(&ns, "nobody").await?;
        let pods: Api<Pod> = Api::namespaced(client, &ns);

        match pods.list(&ListParams::default()).await {
            Err(kube::Error::Api(e)) if e.code == 403 => {}
            other => anyhow::bail!("expected 403 Forbidden, got {other:?}"),
        }

        // The same token works once RBAC allows it: the 403 was authorization,
        // not a token the apiserver failed to authenticate.
        env.create::<Role>(json!({
            "metadata": { "name": "pod-reader" },
            "rules": [{ "apiGroups": [""], "resources": ["pods"], "verbs": ["list"] }]
        }))
        .await?;
        env.create::<RoleBinding>(json!({
            "metadata": { "name": "nobody-reads-pods" },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader" },
            "subjects": [{ "kind": "ServiceAccount", "name": "nobody", "namespace": ns }]
        }))
        .await?;
        wait_for("nobody may list pods", TIMEOUT, || async {
            match pods.list(&ListParams::default()).await {
                Ok(_) => Ok(Some(())),
                Err(kube::Error::Api(e)) if e.code == 403 => Ok(None),
                Err(e) => Err(e.into()),
            }
        })
        .await?;

        // Requests of service accounts reach the audit log, which benchmarks read.
        let audit = env.cluster.audit_log_path();
        let user = format!("system:serviceaccount:{ns}:nobody");
        wait_for("the account's requests in the audit log", TIMEOUT, || async {
            let text = tokio::fs::read_to_string(&audit).await?;
            Ok(text.lines().any(|l| l.contains(&user)).then_some(()))
        })
        .await
    })
    .await
}

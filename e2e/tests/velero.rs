//! Restores through the real Velero (v1.18, `e2e/cluster/velero.sh`) on the real
//! nodes: Velero takes the backup with kopia into the local S3 server, refill's
//! controller runs as a pod from `manifests/`, and Velero's node agent (through its
//! data-mover pod) moves the bytes back into the mounted volume, released by
//! Velero's own `restore-wait` helper. Every file's bytes, mode, owner and every
//! symlink are compared with what the application wrote before the backup.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, PodSpec};
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use refill::api::{
    ConsumerKind, ConsumerPolicy, ConsumerState, DataRestore, DataRestoreRequest, DataRestoreSpec,
    PathRestore, Phase, PodVolumePhase, PodVolumeRestore, RestoreTarget,
};
use refill::labels;
use refill_e2e::velero::{self, VELERO_NAMESPACE};
use refill_e2e::velero_app::{
    TIMEOUT, app_template, controller, damage, deploy_app, forget, nothing_left_behind,
    on_real_nodes, same_tree,
};
use refill_e2e::{Cluster, LOCAL_PATH_CLASS, OwnCluster, TestEnv};
use refill_e2e::{fixture, in_cluster, run_test, run_test_on, wait_for};
use serde_json::json;

async fn restore(
    client: &Client,
    name: &str,
    backup: &str,
    pvcs: Vec<String>,
) -> Result<DataRestore> {
    let spec = DataRestoreSpec {
        backup_name: Some(backup.into()),
        pvcs,
        ..Default::default()
    };
    fixture::data_restore(client, VELERO_NAMESPACE, name, spec).await?;
    fixture::wait_finished(client, VELERO_NAMESPACE, name, TIMEOUT).await
}

#[tokio::test]
async fn velero_node_agent_restores_a_deployments_claim_in_place() -> Result<()> {
    run_test("velero-deploy", |env| async move {
        controller(&env).await?;
        a_deployments_claim_restored_in_place(&env).await
    })
    .await
}

/// The same restore through the oldest Velero release refill is tested with
/// (`VELERO_COMPAT_VERSION` in `e2e/cluster/versions.env`, v1.14): its node agent
/// moves the data itself (no data-mover pod), knows no Accepted or Prepared phase,
/// and names its done file after the owner marked `controller: true`. In a cluster
/// of its own with one real node, since a cluster holds one release's CRDs; refill
/// is installed there with its Helm chart (`charts/refill`).
#[tokio::test]
async fn the_oldest_velero_tested_restores_a_deployments_claim_in_place() -> Result<()> {
    let want = velero::version("VELERO_COMPAT_VERSION")?;
    // REFILL_VELERO_COMPAT_PORT_OFFSET moves it (default 400), for a second checkout's
    // run beside this one.
    let offset = std::env::var("REFILL_VELERO_COMPAT_PORT_OFFSET")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    let own: &'static OwnCluster = Box::leak(Box::new(
        OwnCluster::new(&format!("cluster-velero-{want}-{offset}"), offset)
            .with("REFILL_VELERO_VERSION", &want)
            .with("REFILL_REAL_NODES", "1")
            .with("REFILL_NODES", "1")
            // Its test needs neither the CSI driver nor Flux: less to start.
            .with("REFILL_CSI", "0")
            .with("REFILL_FLUX", "0"),
    ));
    let cluster: &'static Cluster = Box::leak(Box::new(own.start().await.with_context(|| {
        format!(
            "starting a cluster with Velero {want} in {}",
            own.dir.display()
        )
    })?));
    let outcome = run_test_on(cluster, "velero-compat", |env| async move {
        let running = velero::running_version(&env.client).await?;
        ensure!(
            running == want,
            "the cluster runs Velero {running}, not {want}"
        );
        // This cluster gets refill the other way users install it: the Helm chart.
        in_cluster::install_with_helm(env.cluster, &env.client, VELERO_NAMESPACE, TIMEOUT).await?;
        a_deployments_claim_restored_in_place(&env).await
    })
    .await;
    own.stop_if_asked().await;
    outcome
}

/// An app's files damaged and deleted after a backup come back byte for byte, with
/// modes, owners and the symlink, and the app runs again.
async fn a_deployments_claim_restored_in_place(env: &TestEnv) -> Result<()> {
    let ns = env.namespace().to_string();
    let client = env.client.clone();
    let (_, dir) = deploy_app(&client, &ns, 8).await?;
    let want = velero::tree(&dir)?;
    ensure!(want.len() >= 10, "the app wrote only {want:?}");

    let backup = format!("{ns}-nightly");
    velero::backup_namespaces(&client, &backup, &[&ns], TIMEOUT).await?;
    let pvbs = velero::pod_volume_backups(&client, &backup).await?;
    ensure!(pvbs.len() == 1, "{} PodVolumeBackups, want 1", pvbs.len());

    damage(&dir)?;
    ensure!(
        same_tree(&want, &dir).is_err(),
        "the damage changed nothing"
    );

    let done = restore(&client, &ns, &backup, vec![format!("{ns}/data")]).await?;
    let status = done.status.clone().unwrap_or_default();
    ensure!(status.phase == Phase::Completed, "{status:#?}");
    same_tree(&want, &dir)?;
    fixture::wait_ready_pods(&client, &ns, "app", 1, TIMEOUT).await?;
    nothing_left_behind(&client, &ns, &done).await?;
    forget(&client, &ns, &backup).await
}

/// consumers: None, acknowledged: Velero's node agent writes beside the running app,
/// through a stand-in on the app's node; the app's pod is never stopped.
#[tokio::test]
async fn velero_node_agent_restores_under_a_running_app_when_asked() -> Result<()> {
    run_test("velero-online", |env| async move {
        controller(&env).await?;
        let ns = env.namespace().to_string();
        let client = env.client.clone();
        let (app, dir) = deploy_app(&client, &ns, 2).await?;
        let want = velero::tree(&dir)?;
        let backup = format!("{ns}-nightly");
        velero::backup_namespaces(&client, &backup, &[&ns], TIMEOUT).await?;
        damage(&dir)?;

        let spec = DataRestoreSpec {
            backup_name: Some(backup.clone()),
            pvcs: vec![format!("{ns}/data")],
            consumers: ConsumerPolicy::None,
            acknowledge_running_consumers: true,
            ..Default::default()
        };
        fixture::data_restore(&client, VELERO_NAMESPACE, &ns, spec).await?;
        let done = fixture::wait_finished(&client, VELERO_NAMESPACE, &ns, TIMEOUT).await?;
        let status = done.status.clone().unwrap_or_default();
        ensure!(status.phase == Phase::Completed, "{status:#?}");
        same_tree(&want, &dir)?;
        ensure!(status.consumers.is_empty(), "{:#?}", status.consumers);
        // The same pod ran throughout, and the stand-in shared its node.
        let pods = fixture::wait_ready_pods(&client, &ns, "app", 1, TIMEOUT).await?;
        ensure!(
            pods[0].uid() == app.uid(),
            "the app's pod was replaced: {:?} -> {:?}",
            app.uid(),
            pods[0].uid()
        );
        ensure!(
            status.volumes[0].node == node_of(&app),
            "stand-in on {:?}, app on {:?}",
            status.volumes[0].node,
            node_of(&app)
        );
        nothing_left_behind(&client, &ns, &done).await?;
        forget(&client, &ns, &backup).await
    })
    .await
}

/// An operator's path restore: two files corrupted (one keeping its size), one
/// deleted, a stray file under a chosen path and newer good files elsewhere. Velero's
/// node agent fills a scratch claim, refill's copier puts back exactly the chosen paths
/// with their owners, modes and times, mirror deletes the stray file, and everything
/// outside the paths stays as the app left it.
#[tokio::test]
async fn a_path_restore_puts_back_only_the_chosen_files_with_their_metadata() -> Result<()> {
    run_test("velero-paths", |env| async move {
        use std::os::unix::fs::MetadataExt;
        controller(&env).await?;
        let ns = env.namespace().to_string();
        let client = env.client.clone();
        let (_, dir) = deploy_app(&client, &ns, 2).await?;
        let want = velero::tree(&dir)?;
        let mtime = |path: &Path| -> Result<(i64, i64)> {
            let m = std::fs::symlink_metadata(path)?;
            Ok((m.mtime(), m.mtime_nsec()))
        };
        let db_time = mtime(&dir.join("db/main.db"))?;
        let backup = format!("{ns}-nightly");
        velero::backup_namespaces(&client, &backup, &[&ns], TIMEOUT).await?;

        damage(&dir)?;
        std::fs::write(dir.join("db/stray.tmp"), b"not in the backup")?;
        std::fs::create_dir_all(dir.join("notes"))?;
        std::fs::write(dir.join("notes/today.txt"), b"written after the backup")?;
        let after_damage = velero::tree(&dir)?;

        let spec = DataRestoreSpec {
            backup_name: Some(backup.clone()),
            pvcs: vec![format!("{ns}/data")],
            paths: Some(PathRestore {
                include: vec!["db".into(), "etc/*.conf".into()],
                exclude: vec![],
                mirror: true,
            }),
            ..Default::default()
        };
        fixture::data_restore(&client, VELERO_NAMESPACE, &ns, spec).await?;
        let done = fixture::wait_finished(&client, VELERO_NAMESPACE, &ns, TIMEOUT).await?;
        let status = done.status.clone().unwrap_or_default();
        ensure!(status.phase == Phase::Completed, "{status:#?}");
        let volume = &status.volumes[0];
        let copied = volume.copied.clone().context("no copy summary")?;
        ensure!(
            copied.files_written >= 2 && copied.deleted == 1,
            "{copied:?}"
        );
        ensure!(
            volume
                .message
                .as_deref()
                .is_some_and(|m| m.starts_with("chosen paths restored: ")),
            "{volume:#?}"
        );

        // Under the chosen paths: the backup, to the owner, mode and byte.
        let have = velero::tree(&dir)?;
        let chosen = |path: &str| path.starts_with("db") || path == "etc/app.conf";
        for (path, entry) in &want {
            if chosen(path) {
                ensure!(
                    have.get(path) == Some(entry),
                    "{path}: want {entry:?}, have {:?}",
                    have.get(path)
                );
            }
        }
        ensure!(
            !have.contains_key("db/stray.tmp"),
            "mirror left the stray file"
        );
        ensure!(
            mtime(&dir.join("db/main.db"))? == db_time,
            "db/main.db lost its modification time"
        );
        // Outside them: as the app left it, damage and newer files alike.
        for (path, entry) in &after_damage {
            if !chosen(path) && path != "etc" {
                ensure!(
                    have.get(path) == Some(entry),
                    "{path} changed: {entry:?} -> {:?}",
                    have.get(path)
                );
            }
        }
        ensure!(
            !have.contains_key("current"),
            "the deleted symlink is outside the paths"
        );
        ensure!(
            have.contains_key("notes/today.txt"),
            "a newer file was lost"
        );

        // The app is back; stand-in, copier and scratch claim are gone.
        fixture::wait_ready_pods(&client, &ns, "app", 1, TIMEOUT).await?;
        nothing_left_behind(&client, &ns, &done).await?;
        let pods = Api::<Pod>::namespaced(client.clone(), &ns);
        let claims = Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns);
        let scratch = volume
            .scratch_pvc
            .clone()
            .context("no scratch claim named")?;
        wait_for("copier pod and scratch claim gone", TIMEOUT, || async {
            let copier = pods
                .get_opt(&labels::copier_pod_name(&format!("{ns}/data")))
                .await?;
            let claim = claims.get_opt(&scratch).await?;
            Ok(
                (copier.is_none() && claim.is_none_or(|c| c.metadata.deletion_timestamp.is_some()))
                    .then_some(()),
            )
        })
        .await?;
        forget(&client, &ns, &backup).await
    })
    .await
}

/// A new claim filled beside the PVC, and the app moved onto it: the Deployment
/// labelled `refill.dev/switch-claim=data` runs on its damaged claim while Velero's node
/// agent fills the new one, then comes back on the new claim in one write, and its pod
/// reads the backup's data there. The PVC keeps its files, damage included, untouched.
#[tokio::test]
async fn a_new_claim_restore_switches_the_labelled_deployment_onto_the_restored_data() -> Result<()>
{
    run_test("velero-switch", |env| async move {
        controller(&env).await?;
        let ns = env.namespace().to_string();
        let client = env.client.clone();
        let (_, dir) = deploy_app(&client, &ns, 2).await?;
        // The app's init container writes the same tree into any empty claim, so the
        // pod's proof of reading the backup is a file only the backup holds.
        std::fs::write(dir.join("backed-up"), format!("{ns} before its backup\n"))?;
        let want = velero::tree(&dir)?;
        let sum = want["backed-up"].content.clone();
        // The pod is Ready only while it reads those bytes: the kubelet runs the
        // probe in the app's container, through the claim its pod mounts.
        let deployments = env.api::<Deployment>();
        let probe = json!({
            "exec": { "command": ["/testbox", "check", "/data/backed-up", sum] },
            // A busy two-core machine may be slow to start a process in the container.
            "periodSeconds": 2, "timeoutSeconds": 10, "failureThreshold": 1,
        });
        deployments
            .patch(
                "app",
                &PatchParams::default(),
                &Patch::Strategic(json!({
                    "metadata": { "labels": BTreeMap::from([(labels::SWITCH_CLAIM, "data")]) },
                    "spec": { "template": { "spec": { "containers": [
                        { "name": "app", "readinessProbe": probe },
                    ]}}},
                })),
            )
            .await?;
        let pods = env.api::<Pod>();
        wait_for("the app's one pod probed and Ready", TIMEOUT, || async {
            let all = pods
                .list(&ListParams::default().labels("app=app"))
                .await?
                .items;
            let probed = |p: &Pod| {
                p.spec
                    .as_ref()
                    .is_some_and(|s| s.containers.iter().any(|c| c.readiness_probe.is_some()))
            };
            Ok(
                (all.len() == 1 && probed(&all[0]) && refill_e2e::is_pod_ready(&all[0]))
                    .then_some(()),
            )
        })
        .await?;

        let backup = format!("{ns}-nightly");
        velero::backup_namespaces(&client, &backup, &[&ns], TIMEOUT).await?;
        damage(&dir)?;
        std::fs::write(dir.join("backed-up"), b"damaged\n")?;
        // The probe tells: the app's pod on the damaged claim is no longer Ready.
        fixture::wait_ready_pods(&client, &ns, "app", 0, TIMEOUT).await?;
        let damaged = velero::tree(&dir)?;
        ensure!(
            same_tree(&want, &dir).is_err(),
            "the damage changed nothing"
        );
        let claims = env.api::<PersistentVolumeClaim>();
        let claim_version = claims.get("data").await?.resource_version();

        let spec = DataRestoreSpec {
            backup_name: Some(backup.clone()),
            pvcs: vec![format!("{ns}/data")],
            target: RestoreTarget::NewClaim,
            switch_workloads: true,
            ..Default::default()
        };
        fixture::data_restore(&client, VELERO_NAMESPACE, &ns, spec).await?;
        let done = fixture::wait_finished(&client, VELERO_NAMESPACE, &ns, TIMEOUT).await?;
        let status = done.status.clone().unwrap_or_default();
        ensure!(status.phase == Phase::Completed, "{status:#?}");
        let new_claim = labels::new_claim_name("data", &ns);
        ensure!(
            status.volumes[0].target_pvc.as_deref() == Some(new_claim.as_str()),
            "{:#?}",
            status.volumes[0]
        );

        // The PVC and its files are as the damage left them.
        let diff = velero::tree_diff(&damaged, &velero::tree(&dir)?);
        ensure!(
            diff.is_empty(),
            "the PVC's files changed:\n{}",
            diff.join("\n")
        );
        ensure!(
            claims.get("data").await?.resource_version() == claim_version,
            "the PVC was written to"
        );
        // The new claim holds the backup.
        same_tree(&want, &velero::claim_dir(&client, &ns, &new_claim).await?)?;

        // The Deployment is back, on the new claim, with the way back noted.
        let app = deployments.get("app").await?;
        let spec = app.spec.clone().unwrap_or_default();
        let named = claims_of(spec.template.spec.as_ref());
        ensure!(named == [new_claim.clone()], "the template names {named:?}");
        ensure!(spec.replicas == Some(1), "replicas {:?}", spec.replicas);
        let annotations = app.annotations();
        ensure!(
            annotations.get(labels::SWITCHED_FROM).map(String::as_str) == Some("data")
                && annotations.get(labels::SWITCHED_BY)
                    == Some(&format!("{VELERO_NAMESPACE}/{ns}")),
            "{annotations:#?}"
        );
        ensure!(
            [
                labels::QUIESCED_BY,
                labels::QUIESCED_BY_RESTORE,
                labels::ORIGINAL_REPLICAS
            ]
            .iter()
            .all(|key| !annotations.contains_key(*key)),
            "marks of the stop left: {annotations:#?}"
        );
        ensure!(
            matches!(
                status.consumers.as_slice(),
                [c] if c.kind == ConsumerKind::Deployment
                    && c.name == "app"
                    && c.state == ConsumerState::Switched
                    && c.switch_to.as_deref() == Some(new_claim.as_str())
            ),
            "{:#?}",
            status.consumers
        );

        // Its Ready pod mounts the new claim: the probe read the backup's bytes there.
        let ready = fixture::wait_ready_pods(&client, &ns, "app", 1, TIMEOUT).await?;
        let mounted = claims_of(ready[0].spec.as_ref());
        ensure!(
            mounted == [new_claim.clone()],
            "the Ready pod {} mounts {mounted:?}",
            ready[0].name_any()
        );

        nothing_left_behind(&client, &ns, &done).await?;
        forget(&client, &ns, &backup).await
    })
    .await
}

/// The claims a pod (or a pod template) names among its volumes.
fn claims_of(spec: Option<&PodSpec>) -> Vec<String> {
    spec.iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| Some(v.persistent_volume_claim.as_ref()?.claim_name.clone()))
        .collect()
}

#[tokio::test]
async fn velero_node_agent_restores_every_claim_of_a_stateful_set() -> Result<()> {
    run_test("velero-sts", |env| async move {
        let ns = env.namespace().to_string();
        let client = env.client.clone();
        controller(&env).await?;
        on_real_nodes(&client, &ns).await?;
        // No volumes of its own: the claims come from the claim template
        // (data-db-0, data-db-1).
        let template = app_template("db", 4, json!([]));
        env.create::<k8s_openapi::api::apps::v1::StatefulSet>(json!({
            "metadata": { "name": "db" },
            "spec": {
                "replicas": 2,
                "serviceName": "db",
                "selector": { "matchLabels": { "app": "db" } },
                "template": template,
                "volumeClaimTemplates": [{
                    "metadata": { "name": "data" },
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "storageClassName": LOCAL_PATH_CLASS,
                        "resources": { "requests": { "storage": "64Mi" } },
                    }
                }],
            }
        }))
        .await?;
        fixture::wait_ready_pods(&client, &ns, "db", 2, TIMEOUT).await?;
        let claims = ["data-db-0", "data-db-1"];
        let mut wants = Vec::new();
        for claim in claims {
            let dir = velero::claim_dir(&client, &ns, claim).await?;
            wants.push((velero::tree(&dir)?, dir));
        }

        let backup = format!("{ns}-nightly");
        velero::backup_namespaces(&client, &backup, &[&ns], TIMEOUT).await?;
        ensure!(velero::pod_volume_backups(&client, &backup).await?.len() == 2);
        for (_, dir) in &wants {
            damage(dir)?;
        }

        let pvcs = claims.iter().map(|c| format!("{ns}/{c}")).collect();
        let done = restore(&client, &ns, &backup, pvcs).await?;
        let status = done.status.clone().unwrap_or_default();
        ensure!(status.phase == Phase::Completed, "{status:#?}");
        for (want, dir) in &wants {
            same_tree(want, dir)?;
        }
        fixture::wait_ready_pods(&client, &ns, "db", 2, TIMEOUT).await?;
        nothing_left_behind(&client, &ns, &done).await?;
        forget(&client, &ns, &backup).await
    })
    .await
}

/// A standby's claim, made anew and never used (WaitForFirstConsumer, so unbound),
/// filled from the backup of the claim it replaces: the stand-in goes to the
/// candidate node, the provisioner binds the claim there, and the app started
/// later finds its files.
#[tokio::test]
async fn velero_node_agent_fills_an_unbound_claim_on_a_candidate_node() -> Result<()> {
    run_test("velero-wffc", |env| async move {
        let ns = env.namespace().to_string();
        let client = env.client.clone();
        controller(&env).await?;
        let (pod, first_dir) = deploy_app(&client, &ns, 4).await?;
        let first_node = node_of(&pod);
        let want = velero::tree(&first_dir)?;
        let backup = format!("{ns}-primary");
        velero::backup_namespaces(&client, &backup, &[&ns], TIMEOUT).await?;

        // The standby: the app at 0 and a new, unbound claim of the same name.
        let deployments = env.api::<Deployment>();
        deployments
            .patch(
                "app",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": 0}})),
            )
            .await?;
        fixture::wait_ready_pods(&client, &ns, "app", 0, TIMEOUT).await?;
        let claims = env.api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>();
        claims.delete("data", &Default::default()).await?;
        wait_for("the old claim gone", TIMEOUT, || async {
            Ok(claims.get_opt("data").await?.is_none().then_some(()))
        })
        .await?;
        fixture::pvc_of_class(&client, &ns, "data", None, &[], LOCAL_PATH_CLASS).await?;
        // The other real node than the first time, so the data cannot be a leftover.
        let candidate = if first_node.as_deref() == Some("real-a") {
            "real-b"
        } else {
            "real-a"
        };

        let spec = DataRestoreSpec {
            backup_name: Some(backup.clone()),
            pvcs: vec![format!("{ns}/data")],
            candidate_nodes: [(format!("{ns}/data"), vec![candidate.to_string()])].into(),
            ..Default::default()
        };
        fixture::data_restore(&client, VELERO_NAMESPACE, &ns, spec).await?;
        let done = fixture::wait_finished(&client, VELERO_NAMESPACE, &ns, TIMEOUT).await?;
        let status = done.status.clone().unwrap_or_default();
        ensure!(status.phase == Phase::Completed, "{status:#?}");
        ensure!(
            status.volumes[0].node.as_deref() == Some(candidate),
            "{:#?}",
            status.volumes[0]
        );
        same_tree(&want, &velero::claim_dir(&client, &ns, "data").await?)?;

        deployments
            .patch(
                "app",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": 1}})),
            )
            .await?;
        let pods = fixture::wait_ready_pods(&client, &ns, "app", 1, TIMEOUT).await?;
        ensure!(
            node_of(&pods[0]).as_deref() == Some(candidate),
            "app runs on {:?}",
            node_of(&pods[0])
        );
        nothing_left_behind(&client, &ns, &done).await?;
        forget(&client, &ns, &backup).await
    })
    .await
}

fn node_of(pod: &Pod) -> Option<String> {
    pod.spec.as_ref()?.node_name.clone()
}

/// A snapshot whose data is gone from the repository: Velero's node agent fails
/// that PodVolumeRestore, the other volume is restored, the restore ends
/// PartiallyFailed, and both apps are back.
#[tokio::test]
async fn a_restore_velero_fails_ends_partly_failed_with_every_app_back() -> Result<()> {
    run_test("velero-fail", |env| async move {
        let ns = env.namespace().to_string();
        let client = env.client.clone();
        controller(&env).await?;
        // A second namespace, whose repository loses its data.
        let other = refill_e2e::TestNamespace::create(&client, "velero-fail-b").await?;
        let result = fail_one_of_two(&env, &ns, other.name()).await;
        other.cleanup().await?;
        result
    })
    .await
}

async fn fail_one_of_two(env: &TestEnv, ns: &str, other: &str) -> Result<()> {
    let client = env.client.clone();
    let mut dirs = Vec::new();
    for namespace in [ns, other] {
        let (_, dir) = deploy_app(&client, namespace, 2).await?;
        dirs.push((velero::tree(&dir)?, dir));
    }
    let backup = format!("{ns}-nightly");
    velero::backup_namespaces(&client, &backup, &[ns, other], TIMEOUT).await?;
    for (_, dir) in &dirs {
        damage(dir)?;
    }
    let removed = velero::remove_snapshot_data(&env.cluster.dir, other)?;
    ensure!(removed > 0, "no data blobs in {other}'s repository");

    let done = restore(
        &client,
        ns,
        &backup,
        vec![format!("{ns}/data"), format!("{other}/data")],
    )
    .await?;
    let status = done.status.clone().unwrap_or_default();
    ensure!(status.phase == Phase::PartiallyFailed, "{status:#?}");
    let failed: Vec<&str> = status
        .volumes
        .iter()
        .filter(|v| v.phase == refill::api::VolumePhase::Failed)
        .map(|v| v.pvc.as_str())
        .collect();
    ensure!(failed == [format!("{other}/data").as_str()], "{status:#?}");
    same_tree(&dirs[0].0, &dirs[0].1)?;
    for namespace in [ns, other] {
        fixture::wait_ready_pods(&client, namespace, "app", 1, TIMEOUT).await?;
        nothing_left_behind(&client, namespace, &done).await?;
    }
    forget(&client, ns, &backup).await
}

/// A cancel while Velero's data mover copies: the PodVolumeRestore ends (Canceled,
/// or Failed as Velero v1.18.3 reports it), and the app comes back only after that,
/// so nothing writes under it.
#[tokio::test]
async fn a_cancel_mid_copy_brings_the_app_back_only_after_velero_stopped() -> Result<()> {
    run_test("velero-cancel", |env| async move {
        let ns = env.namespace().to_string();
        let client = env.client.clone();
        controller(&env).await?;
        let (_, dir) = deploy_app(&client, &ns, 384).await?;
        let backup = format!("{ns}-nightly");
        velero::backup_namespaces(&client, &backup, &[&ns], TIMEOUT).await?;
        std::fs::remove_file(dir.join("db/main.db"))?;

        let spec = DataRestoreSpec {
            backup_name: Some(backup.clone()),
            pvcs: vec![format!("{ns}/data")],
            ..Default::default()
        };
        let created = fixture::data_restore(&client, VELERO_NAMESPACE, &ns, spec).await?;
        let uid = created.uid().unwrap_or_default();
        let pvrs: Api<PodVolumeRestore> = Api::namespaced(client.clone(), VELERO_NAMESPACE);
        let pvr = wait_for("Velero copying", TIMEOUT, || async {
            let list = pvrs.list(&ListParams::default()).await?;
            Ok(list.items.into_iter().find(|p| {
                p.owner_references().iter().any(|o| o.uid == uid)
                    && p.status.as_ref().and_then(|s| s.phase) == Some(PodVolumePhase::InProgress)
            }))
        })
        .await?;
        let restores: Api<DataRestore> = Api::namespaced(client.clone(), VELERO_NAMESPACE);
        restores
            .patch(
                &ns,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"cancel": true}})),
            )
            .await?;
        let done = fixture::wait_finished(&client, VELERO_NAMESPACE, &ns, TIMEOUT).await?;
        let status = done.status.clone().unwrap_or_default();
        ensure!(status.phase == Phase::Canceled, "{status:#?}");
        let ended = pvrs.get(&pvr.name_any()).await?;
        let pvr_status = ended.status.clone().unwrap_or_default();
        // refill asked Velero to cancel. Velero v1.18.3's data mover stops at once,
        // but its node agent does not get the "canceled" message from it and ends the
        // PodVolumeRestore Failed (empty message) when the data-mover pod exits, about
        // a minute later: either way, what matters is that it ended first.
        ensure!(
            ended.spec.cancel == Some(true),
            "refill did not cancel {}",
            ended.name_any()
        );
        ensure!(
            matches!(
                pvr_status.phase,
                Some(PodVolumePhase::Canceled | PodVolumePhase::Failed)
            ),
            "the PodVolumeRestore ended {:?}",
            pvr_status.phase
        );
        let stopped = pvr_status.completion_timestamp.clone().map(|t| t.0);
        let pods = fixture::wait_ready_pods(&client, &ns, "app", 1, TIMEOUT).await?;
        let started = pods[0].metadata.creation_timestamp.clone().map(|t| t.0);
        ensure!(
            stopped.is_some() && started >= stopped,
            "the app's pod was made at {started:?}, before Velero stopped at {stopped:?}"
        );
        nothing_left_behind(&client, &ns, &done).await?;
        forget(&client, &ns, &backup).await
    })
    .await
}

/// How often each of the controller's containers has restarted, by pod UID.
async fn controller_restarts(client: &Client) -> Result<BTreeMap<String, i32>> {
    let pods = Api::<Pod>::namespaced(client.clone(), fixture::CONTROLLER_SA.0)
        .list(&ListParams::default().labels("app.kubernetes.io/name=refill"))
        .await?;
    Ok(pods
        .items
        .iter()
        .map(|p| {
            let restarts = p
                .status
                .iter()
                .flat_map(|s| s.container_statuses.iter().flatten())
                .map(|c| c.restart_count)
                .sum();
            (p.uid().unwrap_or_default(), restarts)
        })
        .collect())
}

/// An application team, holding only the built-in `edit` role in its namespace,
/// puts its own claim back with a DataRestoreRequest, which refill carries out
/// through a DataRestore in Velero's namespace that the team cannot see. A request
/// for another namespace's claim or from a backup without the namespace is refused
/// naming the field, with nothing made for it; the restore helper's image cannot be
/// set at all; and the team's account gets 403 in Velero's namespace and in others.
#[tokio::test]
async fn a_team_restores_its_own_claim_with_a_request_and_nothing_else() -> Result<()> {
    run_test("velero-team", |env| async move {
        let ns = env.namespace().to_string();
        let admin = env.client.clone();
        controller(&env).await?;
        // Counted from here: the controller's pods outlive tests, and a real node that
        // an earlier test started over restarted the containers it ran.
        let restarts_before = controller_restarts(&admin).await?;
        let (_, dir) = deploy_app(&admin, &ns, 2).await?;
        let want = velero::tree(&dir)?;
        let backup = format!("{ns}-nightly");
        velero::backup_namespaces(&admin, &backup, &[&ns], TIMEOUT).await?;
        damage(&dir)?;

        let team = fixture::team_client(&env).await?;
        let requests: Api<DataRestoreRequest> = Api::namespaced(team.clone(), &ns);
        requests
            .create(
                &Default::default(),
                &fixture::request("fix-data", &backup, &["data"])?,
            )
            .await?;
        // Beside it, a request whose backupName has a two-byte character across byte
        // 57, where label values are cut: it once panicked the controller, and both
        // replicas crash-looped with every restore of the cluster stopped.
        let wide = fixture::wide_backup_name();
        requests
            .create(
                &Default::default(),
                &fixture::request("wide-name", &wide, &["data"])?,
            )
            .await?;
        fixture::refused_naming(&requests, "wide-name", "spec.backupName", TIMEOUT).await?;
        let done = fixture::request_finished(&requests, "fix-data", TIMEOUT).await?;
        let status = done.status.clone().unwrap_or_default();
        ensure!(status.restore.phase == Phase::Completed, "{status:#?}");
        same_tree(&want, &dir)?;
        fixture::wait_ready_pods(&admin, &ns, "app", 1, TIMEOUT).await?;
        let carried_out_by = status.data_restore.clone().unwrap_or_default();
        ensure!(
            carried_out_by.starts_with(&format!("{VELERO_NAMESPACE}/req-")),
            "{carried_out_by}"
        );

        // Refused: another namespace's claim; a backup that does not hold this one.
        // Nothing of the app is touched by a refusal. (Its Deployment's controller
        // writes its status a moment after the pod is Ready: that is waited for first.)
        fixture::wait_settled(&admin, &ns, "app", 1, TIMEOUT).await?;
        let deployments = Api::<Deployment>::namespaced(admin.clone(), &ns);
        let untouched = deployments.get("app").await?.resource_version();
        let refusals = [
            (
                "other-claim",
                backup.clone(),
                "default/data".to_string(),
                "spec.pvcs[0]",
            ),
            (
                "other-backup",
                "no-such-backup".to_string(),
                "data".to_string(),
                "spec.backupName",
            ),
        ];
        for (name, backup, claim, field) in refusals {
            let created = requests
                .create(
                    &Default::default(),
                    &fixture::request(name, &backup, &[claim])?,
                )
                .await?;
            let ended = fixture::request_finished(&requests, name, TIMEOUT).await?;
            let status = ended.status.clone().unwrap_or_default();
            ensure!(status.restore.phase == Phase::Failed, "{name}: {status:#?}");
            ensure!(
                status.restore.errors.iter().any(|e| e.starts_with(field)),
                "{name}: the error does not name {field}: {:?}",
                status.restore.errors
            );
            ensure!(status.data_restore.is_none(), "{name}: {status:#?}");
            let made = Api::<DataRestore>::namespaced(admin.clone(), VELERO_NAMESPACE)
                .list(&ListParams::default().labels(&format!(
                    "{}={}",
                    refill::labels::REQUEST_UID,
                    created.uid().unwrap_or_default()
                )))
                .await?;
            ensure!(made.items.is_empty(), "{name}: a DataRestore was made");
        }
        let now = deployments.get("app").await?.resource_version();
        ensure!(
            now == untouched,
            "a refused request changed the app's Deployment"
        );

        // The helper's image is not the team's to set: the kind has no such field.
        let mut with_image =
            serde_json::to_value(fixture::request("with-image", &backup, &["data"])?)?;
        with_image["spec"]["restoreHelper"] = json!({"image": "registry.example/any:1"});
        // Created with strict field validation, as kubectl does: an unknown field is an
        // error, not dropped.
        let post = http::Request::post(format!(
            "/apis/refill.dev/v1alpha1/namespaces/{ns}/datarestorerequests?fieldValidation=Strict"
        ))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&with_image)?)?;
        let refused = team.request::<serde_json::Value>(post).await;
        match refused {
            Err(kube::Error::Api(e)) if e.code == 400 && e.message.contains("restoreHelper") => {}
            other => anyhow::bail!("a request with restoreHelper was not refused: {other:?}"),
        }

        // Nothing beyond its namespace.
        let forbidden =
            |e: kube::Result<_>| matches!(e, Err(kube::Error::Api(ref s)) if s.code == 403);
        let in_velero = Api::<DataRestore>::namespaced(team.clone(), VELERO_NAMESPACE)
            .list(&ListParams::default())
            .await;
        ensure!(
            forbidden(in_velero.map(drop)),
            "the team may list DataRestores"
        );
        let elsewhere = Api::<DataRestoreRequest>::namespaced(team.clone(), "default")
            .list(&ListParams::default())
            .await;
        ensure!(
            forbidden(elsewhere.map(drop)),
            "the team may list requests in default"
        );

        // No request of the team restarted the controller.
        let restarts: i32 = controller_restarts(&admin)
            .await?
            .iter()
            .map(|(pod, now)| now - restarts_before.get(pod).copied().unwrap_or(0))
            .sum();
        ensure!(restarts == 0, "the controller restarted {restarts} times");

        // Deleting the request deletes its DataRestore.
        requests.delete("fix-data", &Default::default()).await?;
        let restore_name = carried_out_by
            .split_once('/')
            .map(|(_, n)| n.to_string())
            .unwrap_or_default();
        let restores = Api::<DataRestore>::namespaced(admin.clone(), VELERO_NAMESPACE);
        wait_for("the request's DataRestore gone", TIMEOUT, || async {
            Ok(restores
                .get_opt(&restore_name)
                .await?
                .is_none()
                .then_some(()))
        })
        .await?;
        velero::delete_backup(&admin, &backup).await
    })
    .await
}

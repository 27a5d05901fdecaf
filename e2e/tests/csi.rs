//! The CSI driver of the real nodes (`e2e/cluster/csi.sh`): volumes provisioned on
//! the node of their pod by the CSI external-provisioner, a claim left to a volume
//! populator, a volume re-bound to another claim as a populator does it, and
//! Velero's file-system backup and restore of a volume of the driver.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::{Event, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use refill::api::PodVolumePhase;
use refill_e2e::csi::{
    CSI_CLASS, CSI_DRIVER, CSI_TOPOLOGY_KEY, app_pod_spec, kubelet_mount_path, node_mount_points,
    volume_dir,
};
use refill_e2e::velero::{self, VELERO_NAMESPACE};
use refill_e2e::velero_app::on_real_nodes;
use refill_e2e::{
    REAL_NODE_LABEL, REAL_NODES, TESTBOX_IMAGE, TestEnv, fixture, run_test, wait_for,
};
use serde_json::{Value, json};

/// Pods on a real node start in seconds, on a busy two-core machine in much more.
const TIMEOUT: Duration = Duration::from_secs(120);

/// Velero's backups and restores move data through kopia and data-mover pods.
const VELERO_TIMEOUT: Duration = Duration::from_secs(300);

/// A data source that no populator of the cluster handles.
fn unhandled_source() -> Value {
    json!({ "apiGroup": "example.test", "kind": "Nothing", "name": "x" })
}

/// A claim of the driver's class, with a `dataSourceRef` when given.
fn claim(name: &str, source: Option<Value>) -> Value {
    let mut spec = json!({
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": CSI_CLASS,
        "resources": { "requests": { "storage": "16Mi" } },
    });
    if let Some(source) = source {
        spec["dataSourceRef"] = source;
    }
    json!({ "metadata": { "name": name }, "spec": spec })
}

/// What a pod does with its volume, mounted at /data.
enum Does {
    /// Writes `text` to /data/<file> in an init container, then reads it back.
    WriteThenRead(&'static str, String),
    /// Only reads: its readiness probe checks /data/<file> holds `text`.
    Read(&'static str, String),
}

/// A pod on a real node (`node`, or any) mounting `claim` at /data, Ready only
/// while its readiness probe finds the file's bytes: the pod itself reads them.
fn pod(name: &str, claim: &str, node: Option<&str>, does: &Does) -> Value {
    let mounts = json!([{ "name": "data", "mountPath": "/data" }]);
    let (file, text) = match does {
        Does::WriteThenRead(file, text) | Does::Read(file, text) => (*file, text),
    };
    let path = format!("/data/{file}");
    let init = match does {
        Does::WriteThenRead(..) => json!([{
            "name": "write", "image": TESTBOX_IMAGE, "imagePullPolicy": "Never",
            "args": ["write", path, text], "volumeMounts": mounts,
        }]),
        Does::Read(..) => json!([]),
    };
    let mut selector = BTreeMap::from([(REAL_NODE_LABEL.to_string(), "real".to_string())]);
    if let Some(node) = node {
        selector.insert("kubernetes.io/hostname".to_string(), node.to_string());
    }
    json!({
        "metadata": { "name": name, "labels": { "app": name } },
        "spec": app_pod_spec(json!(selector), init, claim, (&path, text)),
    })
}

/// The pod (labelled `app: <name>` by [`pod`]) once Ready.
async fn wait_ready(env: &TestEnv, name: &str, timeout: Duration) -> Result<Pod> {
    let mut pods = fixture::wait_ready_pods(&env.client, env.namespace(), name, 1, timeout).await?;
    Ok(pods.remove(0))
}

/// A claim of the driver's class (with a `dataSourceRef` when given) and a pod
/// of [`pod`] using it; returns the claim as created.
async fn claim_and_pod(
    env: &TestEnv,
    (claim_name, source): (&str, Option<Value>),
    (pod_name, node): (&str, Option<&str>),
    does: &Does,
) -> Result<PersistentVolumeClaim> {
    let created = env
        .create::<PersistentVolumeClaim>(claim(claim_name, source))
        .await?;
    env.create::<Pod>(pod(pod_name, claim_name, node, does))
        .await?;
    Ok(created)
}

/// Deletes a namespaced object and waits until it is gone.
async fn delete_and_wait<K>(api: &Api<K>, name: &str) -> Result<()>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    wait_for(format!("{name} gone"), TIMEOUT, || async {
        Ok(api.get_opt(name).await?.is_none().then_some(()))
    })
    .await
}

/// The PV a claim is bound to.
async fn bound_volume(env: &TestEnv, claim: &str) -> Result<PersistentVolume> {
    let pvc = env.api::<PersistentVolumeClaim>().get(claim).await?;
    let name = pvc
        .spec
        .and_then(|s| s.volume_name)
        .filter(|v| !v.is_empty())
        .with_context(|| format!("claim {claim} is not bound"))?;
    Ok(env.api_all::<PersistentVolume>().get(&name).await?)
}

/// The PV's CSI volume handle, checking it is a volume of this driver, of its
/// class, pinned by topology to `node` alone.
fn csi_volume_on(pv: &PersistentVolume, node: &str) -> Result<String> {
    let name = pv.name_any();
    let spec = pv.spec.as_ref().context("PV without spec")?;
    let csi = spec
        .csi
        .as_ref()
        .with_context(|| format!("PV {name} is not a CSI volume: {spec:?}"))?;
    ensure!(
        csi.driver == CSI_DRIVER,
        "PV {name} is of driver {}",
        csi.driver
    );
    ensure!(
        spec.storage_class_name.as_deref() == Some(CSI_CLASS),
        "PV {name} is of class {:?}",
        spec.storage_class_name
    );
    let pinned: Vec<(String, Vec<String>)> = spec
        .node_affinity
        .as_ref()
        .and_then(|a| a.required.as_ref())
        .into_iter()
        .flat_map(|r| &r.node_selector_terms)
        .flat_map(|t| t.match_expressions.clone().unwrap_or_default())
        .map(|e| (e.key, e.values.unwrap_or_default()))
        .collect();
    ensure!(
        pinned == [(CSI_TOPOLOGY_KEY.to_string(), vec![node.to_string()])],
        "PV {name} is pinned to {pinned:?}, not to {node}"
    );
    Ok(csi.volume_handle.clone())
}

#[tokio::test]
async fn a_claim_of_the_csi_class_is_provisioned_on_its_pods_node() -> Result<()> {
    run_test("csi-provision", |env| async move {
        // The second real node, so that the node followed the pod, not a default.
        let node = REAL_NODES[1];
        let text = format!("written through the CSI driver in {}", env.namespace());
        let does = Does::WriteThenRead("hello.txt", text.clone());
        claim_and_pod(&env, ("data", None), ("app", Some(node)), &does).await?;
        let app = wait_ready(&env, "app", TIMEOUT).await?;

        let pv = bound_volume(&env, "data").await?;
        let handle = csi_volume_on(&pv, node)?;
        let dir = volume_dir(env.cluster, node, &handle);
        let written = std::fs::read_to_string(dir.join("hello.txt"))
            .with_context(|| format!("reading hello.txt in {}", dir.display()))?;
        ensure!(written == text, "the volume's directory holds {written:?}");
        // The driver mounts in its own container; the mount reached the node's
        // namespace, where the kubelet and Velero's node agent look for it.
        let mount = kubelet_mount_path(&app.uid().unwrap_or_default(), &pv.name_any());
        let points = node_mount_points(env.cluster, node)?;
        ensure!(points.contains(&mount), "{mount} is not mounted on {node}");

        // The claim gone, the provisioner deletes the PV and the driver the
        // directory (reclaim policy Delete).
        delete_and_wait(&env.api::<Pod>(), "app").await?;
        ensure!(
            !node_mount_points(env.cluster, node)?.contains(&mount),
            "{mount} is still mounted on {node} after its pod went"
        );
        delete_and_wait(&env.api::<PersistentVolumeClaim>(), "data").await?;
        let volumes = env.api_all::<PersistentVolume>();
        wait_for(format!("PV {} deleted", pv.name_any()), TIMEOUT, || async {
            Ok(volumes
                .get_opt(&pv.name_any())
                .await?
                .is_none()
                .then_some(()))
        })
        .await?;
        ensure!(!dir.exists(), "{} outlived its volume", dir.display());
        Ok(())
    })
    .await
}

/// The provisioner's Events on a claim.
async fn claim_events(env: &TestEnv, claim: &str) -> Result<Vec<Event>> {
    let selector = format!("involvedObject.kind=PersistentVolumeClaim,involvedObject.name={claim}");
    Ok(env
        .api::<Event>()
        .list(&ListParams::default().fields(&selector))
        .await?
        .items)
}

/// PVs whose claimRef names the claim with `uid`.
async fn volumes_of(env: &TestEnv, uid: &str) -> Result<Vec<String>> {
    let all = env
        .api_all::<PersistentVolume>()
        .list(&ListParams::default())
        .await?;
    Ok(all
        .items
        .into_iter()
        .filter(|pv| {
            pv.spec
                .as_ref()
                .and_then(|s| s.claim_ref.as_ref())
                .and_then(|r| r.uid.as_deref())
                == Some(uid)
        })
        .map(|pv| pv.name_any())
        .collect())
}

#[tokio::test]
async fn a_claim_whose_data_source_no_populator_handles_stays_pending() -> Result<()> {
    run_test("csi-populator-left", |env| async move {
        let claims = env.api::<PersistentVolumeClaim>();
        let source = Some(unhandled_source());
        let does = Does::Read("x", String::new());
        let pvc = claim_and_pod(&env, ("data", source), ("app", None), &does).await?;
        let uid = pvc.uid().unwrap_or_default();
        // The scheduler picks a node for the pod, and the provisioner of that node
        // is asked, sees the data source, and leaves the claim to a populator.
        let event = wait_for("the provisioner's populator Event", TIMEOUT, || async {
            Ok(claim_events(&env, "data").await?.into_iter().find(|e| {
                e.message
                    .as_deref()
                    .unwrap_or_default()
                    .contains("external populator")
            }))
        })
        .await?;
        let source = event.source.and_then(|s| s.component).unwrap_or_default();
        ensure!(
            source == "external-provisioner" && event.reason.as_deref() == Some("Provisioning"),
            "the populator Event came from {source:?}"
        );
        let selected = claims
            .get("data")
            .await?
            .annotations()
            .get("volume.kubernetes.io/selected-node")
            .cloned()
            .context("the claim has no selected node")?;
        ensure!(
            REAL_NODES.contains(&selected.as_str()),
            "selected node {selected}"
        );
        // A provisioner that ignored the data source would have made a PV by now;
        // give a slow one a few more seconds.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let pvc = claims.get("data").await?;
        let status = pvc
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default();
        ensure!(status == "Pending", "the claim is {status}");
        let volume = pvc.spec.as_ref().and_then(|s| s.volume_name.clone());
        ensure!(volume.is_none(), "the claim names volume {volume:?}");
        let made = volumes_of(&env, &uid).await?;
        ensure!(made.is_empty(), "PVs {made:?} were made for the claim");
        let app = env.api::<Pod>().get("app").await?;
        let phase = app.status.and_then(|s| s.phase).unwrap_or_default();
        ensure!(phase == "Pending", "the pod is {phase}");
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_volume_rebound_to_a_claim_with_a_data_source_keeps_its_files() -> Result<()> {
    run_test("csi-rebind", |env| async move {
        let ns = env.namespace().to_string();
        let node = REAL_NODES[0];
        let text = format!("filled through the prime claim in {ns}");
        let claims = env.api::<PersistentVolumeClaim>();
        let volumes = env.api_all::<PersistentVolume>();

        // The populator's part: a prime claim provisioned and filled on a node.
        let does = Does::WriteThenRead("data.txt", text.clone());
        claim_and_pod(&env, ("prime", None), ("filler", Some(node)), &does).await?;
        wait_ready(&env, "filler", TIMEOUT).await?;
        let pv = bound_volume(&env, "prime").await?;
        let handle = csi_volume_on(&pv, node)?;
        delete_and_wait(&env.api::<Pod>(), "filler").await?;

        // The user's claim, Pending: nobody handles its data source.
        let user = env
            .create::<PersistentVolumeClaim>(claim("data", Some(unhandled_source())))
            .await?;
        // The PV moves to the user's claim first, so that deleting the prime claim
        // releases nothing: the reclaim policy (Delete) never applies.
        let claim_ref = json!({ "spec": { "claimRef": {
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "namespace": ns, "name": "data", "uid": user.uid(),
            "resourceVersion": null,
        }}});
        volumes
            .patch(
                &pv.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&claim_ref),
            )
            .await?;
        delete_and_wait(&claims, "prime").await?;

        let bound = wait_for("the user's claim bound", TIMEOUT, || async {
            let pvc = claims.get("data").await?;
            let phase = pvc
                .status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_default();
            Ok((phase == "Bound").then_some(pvc))
        })
        .await?;
        let name = bound.spec.and_then(|s| s.volume_name).unwrap_or_default();
        ensure!(
            name == pv.name_any(),
            "the claim is bound to {name}, not {}",
            pv.name_any()
        );
        let after = volumes.get(&name).await?;
        ensure!(
            csi_volume_on(&after, node)? == handle,
            "the PV's handle changed"
        );

        // Its pod lands where the volume is, and reads what the prime's pod wrote.
        env.create::<Pod>(pod("app", "data", None, &Does::Read("data.txt", text)))
            .await?;
        let app = wait_ready(&env, "app", TIMEOUT).await?;
        let on = app.spec.and_then(|s| s.node_name).unwrap_or_default();
        ensure!(
            on == node,
            "the pod runs on {on}, not on the volume's node {node}"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn velero_backs_up_and_restores_a_volume_of_the_csi_driver() -> Result<()> {
    run_test("csi-velero", |env| async move {
        let ns = env.namespace().to_string();
        let client = env.client.clone();
        on_real_nodes(&client, &ns).await?;
        // Bytes enough to count, unique to the run.
        let text = format!("{ns} backed up through the CSI driver\n").repeat(200);
        // A pod writes the file and goes; the app, which only reads, is what
        // Velero backs up and restores: a restored file cannot come from the app.
        let does = Does::WriteThenRead("payload.txt", text.clone());
        claim_and_pod(&env, ("data", None), ("filler", None), &does).await?;
        let filler = wait_ready(&env, "filler", TIMEOUT).await?;
        let node = filler.spec.and_then(|s| s.node_name).unwrap_or_default();
        delete_and_wait(&env.api::<Pod>(), "filler").await?;
        env.create::<Pod>(pod(
            "app",
            "data",
            None,
            &Does::Read("payload.txt", text.clone()),
        ))
        .await?;
        wait_ready(&env, "app", TIMEOUT).await?;
        let pv = bound_volume(&env, "data").await?;
        csi_volume_on(&pv, &node)?;

        let backup = format!("{ns}-csi");
        velero::backup_namespaces(&client, &backup, &[&ns], VELERO_TIMEOUT).await?;
        let pvbs = velero::pod_volume_backups(&client, &backup).await?;
        ensure!(pvbs.len() == 1, "{} PodVolumeBackups, want 1", pvbs.len());
        let pvb = &pvbs[0];
        let status = pvb.status.clone().unwrap_or_default();
        ensure!(
            status.phase == Some(PodVolumePhase::Completed),
            "{status:#?}"
        );
        let progress = status.progress.clone().unwrap_or_default();
        let size = i64::try_from(text.len())?;
        ensure!(
            progress.total_bytes == size && progress.bytes_done == size,
            "the backup counted {progress:?}, the file has {size} bytes"
        );

        // The app and its claim gone (the volume with them), Velero brings both
        // back: a new volume of the driver, the file written by the node agent.
        delete_and_wait(&env.api::<Pod>(), "app").await?;
        delete_and_wait(&env.api::<PersistentVolumeClaim>(), "data").await?;
        let restore = format!("{ns}-csi");
        velero::run_to_completion(
            &client,
            json!({
                "apiVersion": "velero.io/v1",
                "kind": "Restore",
                "metadata": { "name": restore, "namespace": VELERO_NAMESPACE },
                "spec": { "backupName": backup, "includedNamespaces": [ns] },
            }),
            VELERO_TIMEOUT,
        )
        .await?;
        let app = wait_ready(&env, "app", VELERO_TIMEOUT).await?;
        let restored = bound_volume(&env, "data").await?;
        ensure!(restored.name_any() != pv.name_any(), "the old PV came back");
        let on = app.spec.and_then(|s| s.node_name).unwrap_or_default();
        let handle = csi_volume_on(&restored, &on)?;
        let dir = volume_dir(env.cluster, &on, &handle);
        let back = std::fs::read_to_string(dir.join("payload.txt"))
            .with_context(|| format!("reading payload.txt in {}", dir.display()))?;
        ensure!(back == text, "the restored file differs");

        velero::velero_api(&client, "Restore")
            .delete(&restore, &DeleteParams::default())
            .await?;
        velero::delete_backup(&client, &backup).await
    })
    .await
}

//! The demo's objects in the cluster: the shop application (a Deployment and a
//! StatefulSet on local PVs of the real nodes), its Velero backup (taken by Velero),
//! and the removal of what an earlier run left.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Namespace, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use refill::api::{Backup, DataRestore};
use refill_e2e::{TESTBOX_IMAGE, fixture, real_node_annotations, velero, wait_for};
use serde_json::json;

use super::data::{self, File};

pub const NS: &str = "shop";
pub const VELERO_NS: &str = "velero";
/// Backups are named `shop-nightly-<seconds since the epoch>`: a Velero backup stays
/// in object storage until Velero deletes it, so each run takes a new one.
pub const BACKUP_PREFIX: &str = "shop-nightly";
pub const RESTORE: &str = "shop-fix";
/// On the demo's PVs (cluster-scoped, so not removed with the namespace).
const PART_OF: (&str, &str) = ("app.kubernetes.io/part-of", "refill-demo");

/// Real pods and Velero on a busy two-core machine.
const TIMEOUT: Duration = Duration::from_secs(300);

/// One PVC of the shop, with the files it holds when the backup is taken.
pub struct Volume {
    pub pvc: String,
    /// The workload that mounts it.
    pub workload: &'static str,
    pub node: &'static str,
    /// The local PV's directory.
    pub dir: PathBuf,
    pub files: Vec<File>,
}

impl Volume {
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|(_, d)| d.len() as u64).sum()
    }
}

/// The shop's volumes: web-content for the Deployment `web`, data-db-0..2 for the
/// StatefulSet `db`, spread over the two real nodes.
pub fn volumes(volumes_dir: &Path) -> Vec<Volume> {
    let mut out = vec![Volume {
        pvc: "web-content".into(),
        workload: "web",
        node: "real-b",
        dir: volumes_dir.join("web-content"),
        files: data::web_content(),
    }];
    for (i, node) in ["real-a", "real-b", "real-a"].into_iter().enumerate() {
        let pvc = format!("data-db-{i}");
        out.push(Volume {
            dir: volumes_dir.join(&pvc),
            pvc,
            workload: "db",
            node,
            files: data::db_data(i as u64),
        });
    }
    out
}

async fn delete_and_wait<K>(api: &Api<K>, name: &str, what: &str) -> Result<bool>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    if api.get_opt(name).await?.is_none() {
        return Ok(false);
    }
    api.delete(name, &DeleteParams::default()).await?;
    wait_for(format!("{what} to be gone"), TIMEOUT, || async {
        Ok(api.get_opt(name).await?.is_none().then_some(()))
    })
    .await?;
    Ok(true)
}

/// Removes what an earlier run made: the restore (the controller, already running,
/// releases its finalizer), the backup (through Velero), the namespace and the PVs.
/// Returns what was found.
pub async fn remove_previous_run(client: &Client) -> Result<Vec<String>> {
    let mut removed = Vec::new();
    let restores: Api<DataRestore> = Api::namespaced(client.clone(), VELERO_NS);
    if delete_and_wait(&restores, RESTORE, "the previous DataRestore").await? {
        removed.push("restore".to_string());
    }
    if delete_backups(client).await? > 0 {
        removed.push("backup".to_string());
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if namespaces.get_opt(NS).await?.is_some() {
        empty_namespace(client).await?;
    }
    if delete_and_wait(&namespaces, NS, "the previous namespace shop").await? {
        removed.push("namespace".to_string());
    }
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let selector = format!("{}={}", PART_OF.0, PART_OF.1);
    let list = ListParams::default().labels(&selector);
    let old = pvs.list(&list).await?.items.len();
    if old > 0 {
        pvs.delete_collection(&DeleteParams::default(), &list)
            .await?;
        wait_for("the previous PVs to be gone", TIMEOUT, || async {
            Ok(pvs.list(&list).await?.items.is_empty().then_some(()))
        })
        .await?;
        removed.push(format!("{old} PVs"));
    }
    Ok(removed)
}

/// Deletes the shop's workloads, pods (at once: they hold nothing to save) and claims, which the namespace controller would do too, but with pauses
/// between its attempts that add up to about 15 seconds.
async fn empty_namespace(client: &Client) -> Result<()> {
    let all = ListParams::default();
    let delete = DeleteParams::background();
    Api::<Deployment>::namespaced(client.clone(), NS)
        .delete_collection(&delete, &all)
        .await?;
    Api::<StatefulSet>::namespaced(client.clone(), NS)
        .delete_collection(&delete, &all)
        .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::background()
    };
    wait_for("the previous pods to be gone", TIMEOUT, || async {
        // The ReplicaSet may still make a pod before it is gone itself.
        pods.delete_collection(&now, &all).await?;
        Ok(pods.list(&all).await?.items.is_empty().then_some(()))
    })
    .await?;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    pvcs.delete_collection(&delete, &all).await?;
    wait_for("the previous claims to be gone", TIMEOUT, || async {
        Ok(pvcs.list(&all).await?.items.is_empty().then_some(()))
    })
    .await
}

/// Namespace `shop`: its volumes with their files, the Deployment `web` (2 replicas)
/// and the StatefulSet `db` (3 replicas), all pods Ready.
pub async fn create_app(client: &Client, volumes: &[Volume]) -> Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    // Every pod of the namespace (refill's stand-ins too) goes to a real node.
    let ns: Namespace = serde_json::from_value(json!({
        "metadata": {"name": NS, "labels": {PART_OF.0: PART_OF.1},
            "annotations": real_node_annotations()}
    }))?;
    api.create(&PostParams::default(), &ns).await?;
    for v in volumes {
        if v.dir.exists() {
            std::fs::remove_dir_all(&v.dir)
                .with_context(|| format!("removing {}", v.dir.display()))?;
        }
        std::fs::create_dir_all(&v.dir)?;
        data::write_all(&v.dir, &v.files)?;
        local_pv(client, v).await?;
        fixture::pvc(client, NS, &v.pvc, None, &[("app", v.workload)]).await?;
    }
    let web: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": NS},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": pod_template("web", json!([
                {"name": "data", "persistentVolumeClaim": {"claimName": "web-content"}}
            ])),
        }
    }))?;
    Api::<Deployment>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &web)
        .await?;
    let db: StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "db", "namespace": NS},
        "spec": {
            "replicas": 3,
            "serviceName": "db",
            "selector": {"matchLabels": {"app": "db"}},
            "template": pod_template("db", json!([])),
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": fixture::STORAGE_CLASS,
                    "resources": {"requests": {"storage": "1Gi"}},
                }
            }],
        }
    }))?;
    Api::<StatefulSet>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &db)
        .await?;
    fixture::wait_ready_pods(client, NS, "web", 2, TIMEOUT).await?;
    fixture::wait_ready_pods(client, NS, "db", 3, TIMEOUT).await?;
    Ok(())
}

/// A pod of the test image that runs until stopped, with its volume at /data.
fn pod_template(app: &str, volumes: serde_json::Value) -> serde_json::Value {
    json!({
        "metadata": {"labels": {"app": app}},
        "spec": {
            "containers": [{
                "name": "app", "image": TESTBOX_IMAGE, "imagePullPolicy": "Never",
                "args": ["sleep"], "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            }],
            "volumes": volumes,
            "terminationGracePeriodSeconds": 1,
            // As root, like the files it owns; Velero's helper in refill's stand-in
            // then runs as root too and removes the node agent's done files.
            "securityContext": {"runAsUser": 0, "runAsGroup": 0},
        }
    })
}

/// A local PV on the volume's node, reserved for its claim (`claimRef`). The claim is
/// bound when the first pod using it is scheduled, as usual for local volumes; a claim
/// naming its volume instead (`volumeName`) can wait for the PV controller's next
/// resync, 15 seconds.
async fn local_pv(client: &Client, v: &Volume) -> Result<PersistentVolume> {
    let pv: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": format!("{NS}-{}", v.pvc), "labels": {PART_OF.0: PART_OF.1}},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": fixture::STORAGE_CLASS,
            "claimRef": {"namespace": NS, "name": v.pvc},
            "local": {"path": v.dir},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [v.node]}
            ]}]}},
        }
    }))?;
    Ok(Api::<PersistentVolume>::all(client.clone())
        .create(&PostParams::default(), &pv)
        .await?)
}

/// Has Velero back up namespace `shop` (every volume by file-system backup, kopia)
/// and returns the backup's name once it is Completed.
pub async fn create_backup(client: &Client) -> Result<String> {
    let secs = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)?
        .as_secs();
    let name = format!("{BACKUP_PREFIX}-{secs}");
    velero::backup_namespaces(client, &name, &[NS], TIMEOUT).await?;
    Ok(name)
}

/// Asks Velero to delete every backup an earlier run took (as `velero backup
/// delete` does, so that its data goes from object storage too), and waits until
/// they are gone. Returns how many there were.
async fn delete_backups(client: &Client) -> Result<usize> {
    let backups: Api<Backup> = Api::namespaced(client.clone(), VELERO_NS);
    let old: Vec<String> = backups
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|b| b.metadata.name)
        .filter(|n| n.starts_with(&format!("{BACKUP_PREFIX}-")))
        .collect();
    for name in &old {
        velero::delete_backup(client, name).await?;
    }
    for name in &old {
        wait_for(
            format!("Velero to delete backup {name}"),
            TIMEOUT,
            || async { Ok(backups.get_opt(name).await?.is_none().then_some(())) },
        )
        .await?;
    }
    Ok(old.len())
}

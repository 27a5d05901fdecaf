//! The demo's objects in the cluster: the shop application (a Deployment and a
//! StatefulSet on local PVs), its Velero backup, and the removal of what an earlier
//! run left.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Namespace, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use refill::api::{Backup, DataRestore, PodVolumeBackup};
use refill::labels;
use refill_e2e::fixture::{self, BackedUpVolume};
use refill_e2e::wait_for;
use serde_json::json;

use super::data::{self, File};

pub const NS: &str = "shop";
pub const VELERO_NS: &str = "velero";
pub const BACKUP: &str = "shop-nightly";
pub const RESTORE: &str = "shop-fix";
/// On the demo's PVs (cluster-scoped, so not removed with the namespace).
const PART_OF: (&str, &str) = ("app.kubernetes.io/part-of", "refill-demo");

const TIMEOUT: Duration = Duration::from_secs(120);

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

    /// A kopia-like snapshot ID, the same on every run.
    pub fn snapshot_id(&self) -> String {
        data::sha256_hex(format!("{BACKUP}/{NS}/{}", self.pvc).as_bytes())[..32].to_string()
    }
}

/// The shop's volumes: web-content for the Deployment `web`, data-db-0..2 for the
/// StatefulSet `db`, spread over the three nodes.
pub fn volumes(volumes_dir: &Path) -> Vec<Volume> {
    let mut out = vec![Volume {
        pvc: "web-content".into(),
        workload: "web",
        node: "node-c",
        dir: volumes_dir.join("web-content"),
        files: data::web_content(),
    }];
    for (i, node) in ["node-a", "node-b", "node-c"].into_iter().enumerate() {
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
/// releases its finalizer), the backup, the namespace and the PVs. Returns what was
/// found.
pub async fn remove_previous_run(client: &Client) -> Result<Vec<String>> {
    let mut removed = Vec::new();
    let restores: Api<DataRestore> = Api::namespaced(client.clone(), VELERO_NS);
    if delete_and_wait(&restores, RESTORE, "the previous DataRestore").await? {
        removed.push("restore".to_string());
    }
    let pvbs: Api<PodVolumeBackup> = Api::namespaced(client.clone(), VELERO_NS);
    let selector = format!("{}={BACKUP}", labels::BACKUP_NAME);
    pvbs.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels(&selector),
    )
    .await?;
    let backups: Api<Backup> = Api::namespaced(client.clone(), VELERO_NS);
    if delete_and_wait(&backups, BACKUP, "the previous Backup").await? {
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

/// Deletes the shop's workloads, pods (at once: the simulated kubelet has nothing to
/// stop) and claims, which the namespace controller would do too, but with pauses
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

/// Creates namespace `name` unless it exists.
pub async fn ensure_namespace(client: &Client, name: &str) -> Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    if api.get_opt(name).await?.is_none() {
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
        api.create(&PostParams::default(), &ns).await?;
    }
    Ok(())
}

/// Namespace `shop`: its volumes with their files, the Deployment `web` (2 replicas)
/// and the StatefulSet `db` (3 replicas), all pods Ready.
pub async fn create_app(client: &Client, volumes: &[Volume]) -> Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({
        "metadata": {"name": NS, "labels": {PART_OF.0: PART_OF.1}}
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
    fixture::deployment(client, NS, "web", 2, &["web-content"]).await?;
    fixture::statefulset(client, NS, "db", 3).await?;
    fixture::wait_ready_pods(client, NS, "web", 2, TIMEOUT).await?;
    fixture::wait_ready_pods(client, NS, "db", 3, TIMEOUT).await?;
    Ok(())
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

/// A Completed Velero Backup `shop-nightly` with a PodVolumeBackup per volume, as
/// Velero's file-system backup leaves them, and the snapshots' files in `snapshots`
/// for the simulated node agent.
pub async fn create_backup(client: &Client, volumes: &[Volume], snapshots: &Path) -> Result<()> {
    if snapshots.exists() {
        std::fs::remove_dir_all(snapshots)?;
    }
    std::fs::create_dir_all(snapshots)?;
    let web_pods = fixture::ready_pods(client, NS, "web").await?;
    let web_pod = web_pods
        .first()
        .and_then(|p| p.metadata.name.clone())
        .context("no web pod")?;
    let pods: Vec<String> = volumes
        .iter()
        .map(|v| match v.pvc.strip_prefix("data-") {
            Some(pod) => pod.to_string(),
            None => web_pod.clone(),
        })
        .collect();
    let backed_up: Vec<BackedUpVolume> = volumes
        .iter()
        .zip(&pods)
        .map(|(v, pod)| BackedUpVolume {
            namespace: NS,
            pvc: &v.pvc,
            pod,
            volume: "data",
            snapshot_id: v.snapshot_id(),
            files: v
                .files
                .iter()
                .map(|(n, d)| (n.as_str(), d.clone()))
                .collect(),
        })
        .collect();
    fixture::backup(client, VELERO_NS, BACKUP, snapshots, &backed_up).await?;
    // What Velero also records, for `refill backup describe`.
    let backups: Api<Backup> = Api::namespaced(client.clone(), VELERO_NS);
    let spec = json!({"spec": {"includedNamespaces": [NS], "defaultVolumesToFsBackup": true}});
    backups
        .patch(BACKUP, &PatchParams::default(), &Patch::Merge(spec))
        .await?;
    let now = SystemTime::now();
    let status = json!({"status": {
        "startTimestamp": humantime::format_rfc3339_seconds(now - Duration::from_secs(4)).to_string(),
        "completionTimestamp": humantime::format_rfc3339_seconds(now).to_string(),
    }});
    backups
        .patch_status(BACKUP, &PatchParams::default(), &Patch::Merge(status))
        .await?;
    Ok(())
}

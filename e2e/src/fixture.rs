//! Scenes for refill's tests, demo and benchmark: refill installed with its own RBAC,
//! a controller running as its ServiceAccount, local PVs with real directories, and a
//! Velero backup (Backup, PodVolumeBackups, snapshot data) of chosen PVCs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use anyhow::{Context as _, Result};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::{ApiResource, Discovery};
use kube::runtime::WatchStreamExt;
use kube::runtime::conditions;
use kube::runtime::reflector::{self, Store, reflector};
use kube::runtime::wait::await_condition;
use kube::runtime::watcher::{self, watcher};
use kube::{Api, Client, ResourceExt};
use refill::api::{
    Backup, BackupPhase, BackupStatus, DataRestore, DataRestoreSpec, Phase, PodVolumeBackup,
    PodVolumeBackupSpec, PodVolumeBackupStatus, PodVolumePhase, PodVolumeRestore, Progress,
};
use refill::labels;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::watch;

use crate::cluster::Cluster;
use crate::node_agent::{self, NodeAgentConfig, NodeAgentHandle};
use crate::support::wait_for;

/// The StorageClass of the fixtures' local PVs: no provisioner, bound on first consumer.
pub const STORAGE_CLASS: &str = "refill-local";
/// The controller's ServiceAccount, as `manifests/rbac.yaml` defines it.
pub const CONTROLLER_SA: (&str, &str) = ("refill-system", "refill");

fn repo_file(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

fn apply_params() -> PatchParams {
    PatchParams::apply("refill-e2e").force()
}

/// Applies every document of a YAML file by server-side apply, `velero` namespaces
/// replaced by `velero_namespace`.
async fn apply_yaml(client: &Client, yaml: &str, velero_namespace: &str) -> Result<()> {
    let discovery = Discovery::new(client.clone()).run().await?;
    for document in serde_yaml::Deserializer::from_str(yaml) {
        let mut obj = DynamicObject::deserialize(document)?;
        if obj.metadata.namespace.as_deref() == Some("velero") {
            obj.metadata.namespace = Some(velero_namespace.to_string());
        }
        let types = obj
            .types
            .clone()
            .context("manifest without apiVersion/kind")?;
        let gvk = kube::api::GroupVersionKind::try_from(&types)?;
        let (resource, caps) = discovery
            .resolve_gvk(&gvk)
            .with_context(|| format!("the cluster does not serve {gvk:?}"))?;
        let api: Api<DynamicObject> = match (&obj.metadata.namespace, caps.scope) {
            (Some(ns), kube::discovery::Scope::Namespaced) => {
                Api::namespaced_with(client.clone(), ns, &resource)
            }
            _ => Api::all_with(client.clone(), &resource),
        };
        api.patch(&obj.name_any(), &apply_params(), &Patch::Apply(&obj))
            .await
            .with_context(|| format!("applying {:?} {}", gvk.kind, obj.name_any()))?;
    }
    Ok(())
}

/// Applies the CRDs of a YAML stream and waits until they are served.
pub async fn apply_crds(client: &Client, yaml: &str) -> Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut names = Vec::new();
    for document in serde_yaml::Deserializer::from_str(yaml) {
        let crd = CustomResourceDefinition::deserialize(document)?;
        crds.patch(&crd.name_any(), &apply_params(), &Patch::Apply(&crd))
            .await?;
        names.push(crd.name_any());
    }
    for name in names {
        let established = await_condition(crds.clone(), &name, conditions::is_crd_established());
        tokio::time::timeout(Duration::from_secs(30), established).await??;
    }
    Ok(())
}

/// Installs refill's CRDs (from `manifests/crds.yaml`), the Velero CRDs it uses, its
/// ServiceAccount and ClusterRole, and its Role in `velero_namespace`: what a user
/// applies from `manifests/`, with Velero's namespace where the test wants it.
pub async fn install_refill(client: &Client, velero_namespace: &str) -> Result<()> {
    let crds = std::fs::read_to_string(repo_file("manifests/crds.yaml"))?;
    apply_crds(client, &crds).await?;
    node_agent::require_velero_crds(client).await?;
    let rbac = std::fs::read_to_string(repo_file("manifests/rbac.yaml"))?;
    apply_yaml(client, &rbac, velero_namespace).await?;
    let sc: StorageClass = serde_json::from_value(json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": STORAGE_CLASS},
        "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "WaitForFirstConsumer",
    }))?;
    Api::<StorageClass>::all(client.clone())
        .patch(STORAGE_CLASS, &apply_params(), &Patch::Apply(&sc))
        .await?;
    Ok(())
}

/// A StorageClass like [`STORAGE_CLASS`] under another name: unbound claims of one test
/// can then bind only to that test's volumes.
pub async fn storage_class(
    client: &Client,
    name: &str,
    labels: &BTreeMap<String, String>,
) -> Result<()> {
    let sc: StorageClass = serde_json::from_value(json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": name, "labels": labels},
        "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "WaitForFirstConsumer",
    }))?;
    Api::<StorageClass>::all(client.clone())
        .patch(name, &apply_params(), &Patch::Apply(&sc))
        .await?;
    Ok(())
}

/// A refill controller running in this process as refill's ServiceAccount, so RBAC
/// applies exactly as in a cluster. Dropping it stops the controller, as a kill would.
pub struct ControllerHandle {
    task: tokio::task::JoinHandle<()>,
}

impl ControllerHandle {
    pub async fn start(cluster: &Cluster, velero_namespace: &str) -> Result<Self> {
        let config = refill::controller::Config {
            namespace: velero_namespace.to_string(),
            ..Default::default()
        };
        Self::start_with(cluster, config).await
    }

    /// Like [`ControllerHandle::start`], with a configuration of the test's own.
    pub async fn start_with(cluster: &Cluster, cfg: refill::controller::Config) -> Result<Self> {
        // The controller's log goes where the test harness shows it for a failed test.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "refill=debug,kube=warn".into()),
            )
            .with_test_writer()
            .try_init();
        let mut config = cluster
            .service_account_config(CONTROLLER_SA.0, CONTROLLER_SA.1)
            .await?;
        config.headers.push((
            http::header::USER_AGENT,
            http::HeaderValue::from_static(refill::controller::USER_AGENT),
        ));
        let client = Client::try_from(config)?;
        let task = tokio::spawn(async move {
            if let Err(e) = refill::controller::run(client, cfg).await {
                eprintln!("controller stopped: {e:#}");
            }
        });
        Ok(ControllerHandle { task })
    }

    /// Stops the controller at once, wherever it is.
    pub async fn kill(mut self) {
        self.task.abort();
        let _ = (&mut self.task).await;
    }
}

impl Drop for ControllerHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A simulated node agent for `velero_namespace`, restoring snapshots from `snapshots`.
pub fn node_agent(client: &Client, velero_namespace: &str, snapshots: &Path) -> NodeAgentHandle {
    let mut cfg = NodeAgentConfig::new(snapshots);
    cfg.velero_namespace = velero_namespace.to_string();
    node_agent::spawn(client.clone(), cfg)
}

/// A static local PV on `node` whose data lives in `dir`. `labels` lets a test's
/// cleanup find it (see [`crate::TestNamespace::labels`]).
pub async fn local_pv(
    client: &Client,
    name: &str,
    node: &str,
    dir: &Path,
    labels: &BTreeMap<String, String>,
) -> Result<PersistentVolume> {
    local_pv_of_class(client, name, node, dir, labels, STORAGE_CLASS).await
}

/// [`local_pv`] in the StorageClass `class`.
pub async fn local_pv_of_class(
    client: &Client,
    name: &str,
    node: &str,
    dir: &Path,
    labels: &BTreeMap<String, String>,
    class: &str,
) -> Result<PersistentVolume> {
    std::fs::create_dir_all(dir)?;
    let pv: PersistentVolume = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce", "ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": class,
            "local": {"path": dir.to_string_lossy()},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
            ]}]}},
        }
    }))?;
    Ok(Api::<PersistentVolume>::all(client.clone())
        .create(&PostParams::default(), &pv)
        .await?)
}

/// A claim on the fixtures' StorageClass; with `volume` it is bound to that PV ahead.
pub async fn pvc(
    client: &Client,
    ns: &str,
    name: &str,
    volume: Option<&str>,
    labels: &[(&str, &str)],
) -> Result<PersistentVolumeClaim> {
    pvc_of_class(client, ns, name, volume, labels, STORAGE_CLASS).await
}

/// [`pvc`] in the StorageClass `class`.
pub async fn pvc_of_class(
    client: &Client,
    ns: &str,
    name: &str,
    volume: Option<&str>,
    labels: &[(&str, &str)],
    class: &str,
) -> Result<PersistentVolumeClaim> {
    let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
    let mut spec = json!({
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": class,
        "resources": {"requests": {"storage": "1Gi"}},
    });
    if let Some(volume) = volume {
        spec["volumeName"] = json!(volume);
    }
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": spec,
    }))?;
    Ok(Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pvc)
        .await?)
}

/// A local PV on `node` reserved for the claim `ns/name` (through its claimRef), and
/// that claim: the binder pairs them at once, where a claim naming its volume would
/// wait for the binder's periodic resync.
pub async fn bound_local_volume(
    client: &Client,
    ns: &str,
    claim: &str,
    pv: &str,
    node: &str,
    dir: &Path,
    labels: &BTreeMap<String, String>,
) -> Result<PersistentVolumeClaim> {
    local_pv(client, pv, node, dir, labels).await?;
    let reserve = json!({"spec": {"claimRef": {"namespace": ns, "name": claim}}});
    Api::<PersistentVolume>::all(client.clone())
        .patch(pv, &PatchParams::default(), &Patch::Merge(reserve))
        .await?;
    pvc(client, ns, claim, None, &[]).await?;
    // The PV controller binds the pair on its own time. Until it has, the claim looks
    // unbound (a validation would ask for candidate nodes) and its resourceVersion moves.
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    wait_for(
        format!("claim {ns}/{claim} to bind to {pv}"),
        Duration::from_secs(60),
        || async {
            let found = claims.get(claim).await?;
            let bound = found.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
            Ok(bound.then_some(found))
        },
    )
    .await
}

/// A pod template that mounts `claims` (volume `data-N`, or `data` for one claim).
pub fn pod_template(app: &str, claims: &[&str]) -> serde_json::Value {
    let volumes: Vec<_> = claims
        .iter()
        .enumerate()
        .map(|(i, c)| json!({"name": volume_name(claims.len(), i), "persistentVolumeClaim": {"claimName": c}}))
        .collect();
    let mounts: Vec<_> = (0..claims.len())
        .map(|i| json!({"name": volume_name(claims.len(), i), "mountPath": format!("/data/{i}")}))
        .collect();
    // As Pod Security's `restricted` level asks, so the app also runs in namespaces
    // that enforce it.
    json!({
        "metadata": {"labels": {"app": app}},
        "spec": {
            "securityContext": {
                "runAsUser": 1001, "runAsGroup": 1001, "fsGroup": 1001, "runAsNonRoot": true,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [{"name": "app", "image": "registry.local/app:1", "volumeMounts": mounts,
                            "securityContext": {
                                "runAsUser": 1001, "allowPrivilegeEscalation": false,
                                "capabilities": {"drop": ["ALL"]},
                            }}],
            "volumes": volumes,
        }
    })
}

fn volume_name(count: usize, i: usize) -> String {
    if count == 1 {
        "data".into()
    } else {
        format!("data-{i}")
    }
}

pub async fn deployment(
    client: &Client,
    ns: &str,
    name: &str,
    replicas: i32,
    claims: &[&str],
) -> Result<Deployment> {
    let d: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": pod_template(name, claims),
        }
    }))?;
    Ok(Api::<Deployment>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &d)
        .await?)
}

/// A StatefulSet with one claim per replica (`data-<name>-<i>`), bound to the PVs the
/// caller made.
pub async fn statefulset(
    client: &Client,
    ns: &str,
    name: &str,
    replicas: i32,
) -> Result<StatefulSet> {
    let mut template = pod_template(name, &[]);
    template["spec"]["containers"][0]["volumeMounts"] =
        json!([{"name": "data", "mountPath": "/data"}]);
    let s: StatefulSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": template,
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": STORAGE_CLASS,
                         "resources": {"requests": {"storage": "1Gi"}}},
            }],
        }
    }))?;
    Ok(Api::<StatefulSet>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &s)
        .await?)
}

/// One backed-up volume: the PVC, the pod that mounted it, and the snapshot's files.
pub struct BackedUpVolume<'a> {
    pub namespace: &'a str,
    pub pvc: &'a str,
    pub pod: &'a str,
    pub volume: &'a str,
    pub snapshot_id: String,
    pub files: Vec<(&'a str, Vec<u8>)>,
}

/// Creates a Completed Velero Backup with a Completed PodVolumeBackup for each volume,
/// as Velero's backup (or its sync to a standby cluster) leaves them, and writes each
/// snapshot's files where the simulated node agent reads them. Velero's CRDs have no
/// status subresource, so the status is written with the object, as Velero does.
pub async fn backup(
    client: &Client,
    velero_namespace: &str,
    name: &str,
    snapshots: &Path,
    volumes: &[BackedUpVolume<'_>],
) -> Result<Backup> {
    let backups: Api<Backup> = Api::namespaced(client.clone(), velero_namespace);
    let mut b = Backup::new(name, Default::default());
    b.spec.storage_location = Some("default".into());
    let created = backups.create(&PostParams::default(), &b).await?;
    let status = BackupStatus {
        phase: Some(BackupPhase::Completed),
        ..Default::default()
    };
    let created = backups
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status})),
        )
        .await
        .map(|_| created)?;
    let uid = created.uid().unwrap_or_default();
    let pvbs: Api<PodVolumeBackup> = Api::namespaced(client.clone(), velero_namespace);
    for (i, v) in volumes.iter().enumerate() {
        let files: Vec<(&str, &[u8])> = v.files.iter().map(|(p, d)| (*p, d.as_slice())).collect();
        node_agent::write_snapshot(snapshots, &v.snapshot_id, &files)?;
        let total: i64 = v.files.iter().map(|(_, d)| d.len() as i64).sum();
        let pvb_name = format!("{name}-{i}");
        let mut pvb = PodVolumeBackup::new(
            &pvb_name,
            PodVolumeBackupSpec {
                node: "node-a".into(),
                pod: k8s_openapi::api::core::v1::ObjectReference {
                    kind: Some("Pod".into()),
                    namespace: Some(v.namespace.into()),
                    name: Some(v.pod.into()),
                    ..Default::default()
                },
                volume: v.volume.into(),
                backup_storage_location: "default".into(),
                repo_identifier: format!("s3:s3.local/velero/kopia/{}", v.namespace),
                uploader_type: Some("kopia".into()),
                ..Default::default()
            },
        );
        pvb.metadata.labels = Some(BTreeMap::from([
            (labels::BACKUP_NAME.to_string(), labels::label_value(name)),
            (labels::BACKUP_UID.to_string(), uid.clone()),
        ]));
        pvb.metadata.annotations = Some(BTreeMap::from([(
            labels::PVC_NAME_ANNOTATION.to_string(),
            v.pvc.to_string(),
        )]));
        pvbs.create(&PostParams::default(), &pvb).await?;
        let status = PodVolumeBackupStatus {
            phase: Some(PodVolumePhase::Completed),
            snapshot_id: Some(v.snapshot_id.clone()),
            progress: Some(Progress {
                total_bytes: total,
                bytes_done: total,
            }),
            ..Default::default()
        };
        pvbs.patch(
            &pvb_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status})),
        )
        .await?;
    }
    Ok(created)
}

/// Creates a DataRestore.
pub async fn data_restore(
    client: &Client,
    velero_namespace: &str,
    name: &str,
    spec: DataRestoreSpec,
) -> Result<DataRestore> {
    let dr = DataRestore::new(name, spec);
    Ok(
        Api::<DataRestore>::namespaced(client.clone(), velero_namespace)
            .create(&PostParams::default(), &dr)
            .await?,
    )
}

/// Waits until the DataRestore reaches a final phase and returns it.
pub async fn wait_finished(
    client: &Client,
    velero_namespace: &str,
    name: &str,
    timeout: Duration,
) -> Result<DataRestore> {
    let api: Api<DataRestore> = Api::namespaced(client.clone(), velero_namespace);
    wait_for(format!("DataRestore {name} to finish"), timeout, || async {
        let dr = api.get(name).await?;
        let done = dr.status.as_ref().is_some_and(|s| s.phase.is_terminal());
        Ok(done.then_some(dr))
    })
    .await
}

/// Waits until the DataRestore reaches `phase`.
pub async fn wait_phase(
    client: &Client,
    velero_namespace: &str,
    name: &str,
    phase: Phase,
    timeout: Duration,
) -> Result<DataRestore> {
    let api: Api<DataRestore> = Api::namespaced(client.clone(), velero_namespace);
    wait_for(
        format!("DataRestore {name} to reach {phase:?}"),
        timeout,
        || async {
            let dr = api.get(name).await?;
            Ok((dr.status.as_ref().map(|s| s.phase) == Some(phase)).then_some(dr))
        },
    )
    .await
}

/// Pods in `ns` with label `app=<app>` that are Ready.
pub async fn ready_pods(client: &Client, ns: &str, app: &str) -> Result<Vec<Pod>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let list = pods
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await?;
    Ok(list
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && crate::support::is_pod_ready(p))
        .collect())
}

/// Waits until exactly `count` pods of `app` are Ready.
pub async fn wait_ready_pods(
    client: &Client,
    ns: &str,
    app: &str,
    count: usize,
    timeout: Duration,
) -> Result<Vec<Pod>> {
    wait_for(format!("{count} ready pods of {app}"), timeout, || async {
        let pods = ready_pods(client, ns, app).await?;
        Ok((pods.len() == count).then_some(pods))
    })
    .await
}

/// Pods of this restore's stand-ins still in `ns`.
pub async fn stand_in_pods(client: &Client, ns: &str) -> Result<Vec<Pod>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let selector = format!("{}={}", labels::ROLE, labels::ROLE_STAND_IN);
    Ok(pods
        .list(&ListParams::default().labels(&selector))
        .await?
        .items)
}

/// Reads a file of a local PV's directory.
pub fn read(dir: &Path, file: &str) -> Result<Vec<u8>> {
    std::fs::read(dir.join(file)).with_context(|| format!("reading {}", dir.join(file).display()))
}

/// The resourceVersion of every object of these kinds in `ns`, for proving nothing changed.
pub async fn resource_versions(client: &Client, ns: &str) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let discovery = Discovery::new(client.clone()).run().await?;
    for (group, kind) in [
        ("apps", "Deployment"),
        ("apps", "StatefulSet"),
        ("apps", "ReplicaSet"),
        ("apps", "DaemonSet"),
        ("", "Pod"),
        ("", "PersistentVolumeClaim"),
        ("batch", "CronJob"),
    ] {
        let gvk = kube::api::GroupVersionKind::gvk(group, "v1", kind);
        let (resource, _): (ApiResource, _) =
            discovery.resolve_gvk(&gvk).context("kind not served")?;
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
        for obj in api.list(&ListParams::default()).await? {
            out.insert(
                format!("{kind}/{}", obj.name_any()),
                obj.resource_version().unwrap_or_default(),
            );
        }
    }
    Ok(out)
}

/// What a test saw of one pod: which claims it mounts and when it ran, by this
/// process's clock (the clock of the simulated node agent's write log).
#[derive(Clone, Debug)]
pub struct PodLife {
    pub name: String,
    /// `namespace/name` of every claim it mounts.
    pub claims: Vec<String>,
    /// One of refill's stand-in pods.
    pub stand_in: bool,
    /// When it was first seen on a node (it may run, and write, from then on). For a
    /// pod already running when the watch began: its `status.startTime`.
    pub started: Option<SystemTime>,
    /// When it was seen finished or gone.
    pub ended: Option<SystemTime>,
}

/// Watches of one namespace, kept while a test runs: DataRestores, PodVolumeRestores,
/// pods (with the life of every pod, so that pods deleted since are not missed),
/// Deployments, StatefulSets and CronJobs. A test waits on them with
/// [`Observer::until`] instead of polling the API server.
pub struct Observer {
    pub restores: Store<DataRestore>,
    pub pvrs: Store<PodVolumeRestore>,
    pub pods: Store<Pod>,
    pub deployments: Store<Deployment>,
    pub statefulsets: Store<StatefulSet>,
    pub cronjobs: Store<CronJob>,
    lives: Arc<Mutex<BTreeMap<String, PodLife>>>,
    changed: watch::Receiver<u64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Observer {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

fn claims_of(pod: &Pod) -> Vec<String> {
    let ns = pod.namespace().unwrap_or_default();
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| v.persistent_volume_claim.as_ref())
        .map(|c| format!("{ns}/{}", c.claim_name))
        .collect()
}

fn record_pod(lives: &Mutex<BTreeMap<String, PodLife>>, pod: &Pod, initial: bool, gone: bool) {
    let Some(uid) = pod.uid() else {
        return;
    };
    let now = SystemTime::now();
    let mut lives = lives.lock().unwrap_or_else(|e| e.into_inner());
    let life = lives.entry(uid).or_insert_with(|| PodLife {
        name: pod.name_any(),
        claims: claims_of(pod),
        stand_in: pod.labels().get(labels::ROLE).map(String::as_str) == Some(labels::ROLE_STAND_IN),
        started: None,
        ended: None,
    });
    let status = pod.status.clone().unwrap_or_default();
    let on_node = pod.spec.as_ref().is_some_and(|s| s.node_name.is_some());
    if life.started.is_none() && (on_node || gone) {
        // A pod that ran before the watch began: its own start time (whole seconds,
        // so never later than the truth).
        let since = status
            .start_time
            .filter(|_| initial)
            .map(|t| SystemTime::UNIX_EPOCH + Duration::from_secs(t.0.as_second().max(0) as u64));
        life.started = Some(since.unwrap_or(now).min(now));
    }
    let finished = matches!(status.phase.as_deref(), Some("Succeeded" | "Failed"));
    if life.ended.is_none() && (gone || finished) {
        life.ended = Some(now);
    }
}

impl Observer {
    /// Starts the watches of `ns` and waits until each has its first list.
    pub async fn start(client: &Client, ns: &str) -> Result<Observer> {
        let (tx, changed) = watch::channel(0u64);
        let tx = Arc::new(tx);
        let lives: Arc<Mutex<BTreeMap<String, PodLife>>> = Arc::default();
        let mut tasks = Vec::new();

        fn follow<K>(
            api: Api<K>,
            tx: Arc<watch::Sender<u64>>,
            tasks: &mut Vec<tokio::task::JoinHandle<()>>,
            mut on_event: impl FnMut(&watcher::Event<K>) + Send + 'static,
        ) -> Store<K>
        where
            K: kube::Resource
                + Clone
                + std::fmt::Debug
                + serde::de::DeserializeOwned
                + Send
                + Sync
                + 'static,
            K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
        {
            let (store, writer) = reflector::store();
            let stream = reflector(
                writer,
                watcher(api, watcher::Config::default()).default_backoff(),
            );
            tasks.push(tokio::spawn(async move {
                let mut stream = std::pin::pin!(stream);
                while let Some(event) = stream.next().await {
                    if let Ok(event) = event {
                        on_event(&event);
                    }
                    tx.send_modify(|n| *n += 1);
                }
            }));
            store
        }

        let restores = follow::<DataRestore>(
            Api::namespaced(client.clone(), ns),
            tx.clone(),
            &mut tasks,
            |_| {},
        );
        let pvrs = follow::<PodVolumeRestore>(
            Api::namespaced(client.clone(), ns),
            tx.clone(),
            &mut tasks,
            |_| {},
        );
        let pod_lives = lives.clone();
        let mut listed: Vec<String> = Vec::new();
        let pods = follow(
            Api::<Pod>::namespaced(client.clone(), ns),
            tx.clone(),
            &mut tasks,
            move |event| match event {
                watcher::Event::Apply(pod) => record_pod(&pod_lives, pod, false, false),
                watcher::Event::Delete(pod) => record_pod(&pod_lives, pod, false, true),
                watcher::Event::Init => listed.clear(),
                watcher::Event::InitApply(pod) => {
                    record_pod(&pod_lives, pod, true, false);
                    listed.extend(pod.uid());
                }
                // After a broken watch (an API server restart), pods missing from the new
                // list went while nobody looked.
                watcher::Event::InitDone => {
                    let now = SystemTime::now();
                    let mut lives = pod_lives.lock().unwrap_or_else(|e| e.into_inner());
                    for (uid, life) in lives.iter_mut() {
                        if life.ended.is_none() && !listed.contains(uid) {
                            life.ended = Some(now);
                        }
                    }
                }
            },
        );
        let deployments = follow::<Deployment>(
            Api::namespaced(client.clone(), ns),
            tx.clone(),
            &mut tasks,
            |_| {},
        );
        let statefulsets = follow::<StatefulSet>(
            Api::namespaced(client.clone(), ns),
            tx.clone(),
            &mut tasks,
            |_| {},
        );
        let cronjobs = follow::<CronJob>(
            Api::namespaced(client.clone(), ns),
            tx.clone(),
            &mut tasks,
            |_| {},
        );
        let observer = Observer {
            restores,
            pvrs,
            pods,
            deployments,
            statefulsets,
            cronjobs,
            lives,
            changed,
            tasks,
        };
        let ready = async {
            observer.restores.wait_until_ready().await?;
            observer.pvrs.wait_until_ready().await?;
            observer.pods.wait_until_ready().await?;
            observer.deployments.wait_until_ready().await?;
            observer.statefulsets.wait_until_ready().await?;
            observer.cronjobs.wait_until_ready().await
        };
        tokio::time::timeout(Duration::from_secs(60), ready)
            .await
            .with_context(|| format!("the watches of namespace {ns} did not list within 60s"))??;
        Ok(observer)
    }

    /// Evaluates `check` on every change seen until it returns a value; an error
    /// naming `what` after `timeout`.
    pub async fn until<T>(
        &self,
        what: impl std::fmt::Display,
        timeout: Duration,
        mut check: impl FnMut(&Observer) -> Option<T>,
    ) -> Result<T> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut changed = self.changed.clone();
        loop {
            changed.borrow_and_update();
            if let Some(value) = check(self) {
                return Ok(value);
            }
            match tokio::time::timeout_at(deadline, changed.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => anyhow::bail!("the watches stopped while waiting for {what}"),
                Err(_) => anyhow::bail!("timed out after {timeout:?} waiting for {what}"),
            }
        }
    }

    /// The DataRestore `name` as last seen.
    pub fn restore(&self, name: &str) -> Option<Arc<DataRestore>> {
        self.restores
            .state()
            .into_iter()
            .find(|r| r.name_any() == name)
    }

    pub fn deployment(&self, name: &str) -> Option<Arc<Deployment>> {
        self.deployments
            .state()
            .into_iter()
            .find(|d| d.name_any() == name)
    }

    pub fn statefulset(&self, name: &str) -> Option<Arc<StatefulSet>> {
        self.statefulsets
            .state()
            .into_iter()
            .find(|d| d.name_any() == name)
    }

    pub fn cronjob(&self, name: &str) -> Option<Arc<CronJob>> {
        self.cronjobs
            .state()
            .into_iter()
            .find(|d| d.name_any() == name)
    }

    /// refill's stand-in pods now.
    pub fn stand_ins(&self) -> Vec<Arc<Pod>> {
        self.pods
            .state()
            .into_iter()
            .filter(|p| {
                p.labels().get(labels::ROLE).map(String::as_str) == Some(labels::ROLE_STAND_IN)
            })
            .collect()
    }

    /// Every pod seen since the watch began, gone ones too.
    pub fn pod_lives(&self) -> Vec<PodLife> {
        self.lives
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }
}

fn at(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

/// Writes into a volume while a pod of its claim other than a stand-in ran, by more
/// than `grace` (the time refill may need to notice a pod someone else started; zero
/// where refill itself decides when pods start). One line per overlap; a write or pod
/// not ended counts as going on at `now`.
pub fn writes_under_running_pods(
    writes: &[node_agent::VolumeWrite],
    pods: &[PodLife],
    grace: Duration,
    now: SystemTime,
) -> Vec<String> {
    let mut found = Vec::new();
    for w in writes {
        let w_end = w.last.unwrap_or(now);
        for p in pods
            .iter()
            .filter(|p| !p.stand_in && p.claims.contains(&w.claim))
        {
            let Some(started) = p.started else {
                continue;
            };
            let p_end = p.ended.unwrap_or(now);
            let from = w.first.max(started);
            let to = w_end.min(p_end);
            let Ok(overlap) = to.duration_since(from) else {
                continue;
            };
            if overlap > grace || (grace.is_zero() && from <= to) {
                found.push(format!(
                    "{} of {} wrote into {} from {} to {} while pod {} ran (from {} to {}): {overlap:?} under a running consumer",
                    w.what,
                    if w.pvr.is_empty() { "the restore helper" } else { w.pvr.as_str() },
                    w.claim,
                    at(w.first),
                    w.last.map_or("(still writing)".into(), at),
                    p.name,
                    at(started),
                    p.ended.map_or("(still running)".into(), at),
                ));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(1_000_000 + ms)
    }

    #[test]
    fn a_write_overlapping_a_running_consumer_is_found_and_others_are_not() {
        let write = |first, last: Option<u64>| node_agent::VolumeWrite {
            claim: "ns/data".into(),
            pvr: "r1-x".into(),
            what: "copy".into(),
            first: t(first),
            last: last.map(t),
        };
        let pod = |name: &str, started, ended: Option<u64>, stand_in| PodLife {
            name: name.into(),
            claims: vec!["ns/data".into()],
            stand_in,
            started: Some(t(started)),
            ended: ended.map(t),
        };
        let pods = [
            pod("web-old", 0, Some(100), false),
            pod("stand-in", 100, Some(900), true),
            pod("web-new", 1000, None, false),
        ];
        let clean = [write(200, Some(800))];
        assert!(writes_under_running_pods(&clean, &pods, Duration::ZERO, t(2000)).is_empty());
        let late = [write(200, Some(1500))];
        let found = writes_under_running_pods(&late, &pods, Duration::ZERO, t(2000));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("web-new"), "{found:?}");
        assert!(
            writes_under_running_pods(&late, &pods, Duration::from_secs(1), t(2000)).is_empty()
        );
        let open = [write(200, None)];
        assert_eq!(
            writes_under_running_pods(&open, &pods, Duration::ZERO, t(2000)).len(),
            1
        );
        let other_claim = [node_agent::VolumeWrite {
            claim: "ns/other".into(),
            ..write(200, Some(1500))
        }];
        assert!(writes_under_running_pods(&other_claim, &pods, Duration::ZERO, t(2000)).is_empty());
    }
}

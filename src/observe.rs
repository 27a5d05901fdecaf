//! Reads the cluster facts that decisions are made from. Nothing here writes.

mod labelled;
pub(crate) mod managers;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{DynamicObject, ListParams, ObjectList};
use kube::{Api, Client};

use crate::api::{ConsumerKind, GitOpsSpec, PodVolumeBackup};
use crate::gitops;
use crate::labels;
use crate::mounts::Mounts;
use crate::plan::{
    ConsumerRef, Owner, is_top_workload, mounts_claim, template_mounts, template_spec, top_owner,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

pub use labelled::labelled_workloads;

/// What the controller keeps knowing between reads, so that asking again costs nothing:
/// which pods mount which claims, from its pod watch, which nodes are Ready, from its
/// node watch, and owner references read lately.
#[derive(Default)]
pub struct Known {
    pub mounts: Mounts,
    pub claims: crate::claims::Claims,
    pub nodes: crate::nodes::Nodes,
    pub owners: OwnerCache,
}

/// Owner references of ReplicaSets and Jobs by their UID, kept for a short while:
/// validating a restore and starting its volumes walk the same owners moments apart. An
/// object's owners change only when it is adopted or orphaned; the time limit bounds how
/// long such a change can go unseen.
pub struct OwnerCache {
    entries: Mutex<HashMap<String, (Instant, Owners)>>,
    keep: Duration,
}

impl Default for OwnerCache {
    fn default() -> Self {
        OwnerCache {
            entries: Mutex::default(),
            keep: Duration::from_secs(30),
        }
    }
}

/// An object's owner references; None when the object is gone.
type Owners = Option<Vec<OwnerReference>>;

impl OwnerCache {
    fn get(&self, uid: &str) -> Option<Owners> {
        let entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        entries
            .get(uid)
            .filter(|(at, _)| at.elapsed() < self.keep)
            .map(|(_, refs)| refs.clone())
    }

    fn put(&self, uid: &str, refs: Owners) {
        let mut entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        entries.retain(|_, (at, _)| at.elapsed() < self.keep);
        entries.insert(uid.to_string(), (Instant::now(), refs));
    }
}

/// Where the reads of a decision come from: the API, and first what the controller
/// knows from its watches when the controller is the reader. The CLI and the controller
/// read through the same functions, so a dry run and the controller decide from the
/// same facts in the same words.
#[derive(Clone, Copy)]
pub struct Reads<'a> {
    client: &'a Client,
    known: Option<&'a Known>,
    workloads: Option<&'a Workloads>,
    /// From how many namespaces objects are listed for the whole cluster at once;
    /// None: never (a person running the CLI may list only some namespaces).
    cluster_wide_from: Option<usize>,
}

/// The workloads of some namespaces, read with one list per kind for the whole cluster:
/// a restore of claims in a hundred namespaces would otherwise list seven kinds in each.
/// Only those whose pod template mounts one of the claims asked about are kept.
#[derive(Default)]
pub struct Workloads {
    namespaces: BTreeSet<String>,
    by_namespace: BTreeMap<String, Vec<(ConsumerKind, String, serde_json::Value)>>,
}

/// Objects a cluster-wide list returns per page, which bounds what is held at once: a
/// page of workloads parsed as JSON takes some 40 KiB an object, and the seven kinds of
/// workloads are listed side by side.
const PAGE: u32 = 100;

impl<'a> Reads<'a> {
    /// Every read goes to the API server (the CLI).
    pub fn api(client: &'a Client) -> Self {
        Reads {
            client,
            known: None,
            workloads: None,
            cluster_wide_from: None,
        }
    }

    /// Reads answer from `known` where it can (the controller), and objects of
    /// `cluster_wide_from` namespaces or more are listed for the whole cluster at once.
    pub fn watched(client: &'a Client, known: &'a Known, cluster_wide_from: usize) -> Self {
        Reads {
            client,
            known: Some(known),
            workloads: None,
            cluster_wide_from: Some(cluster_wide_from),
        }
    }

    /// Whether objects of `namespaces` namespaces are read with one list for the whole
    /// cluster: on the controller, when they are many.
    pub fn cluster_wide(&self, namespaces: usize) -> bool {
        self.cluster_wide_from
            .is_some_and(|from| namespaces >= from)
    }

    /// The claims of the namespaces `wanted`, by namespace, one cluster-wide paged list.
    pub async fn claims_of(
        &self,
        wanted: &BTreeSet<String>,
    ) -> kube::Result<BTreeMap<String, Vec<PersistentVolumeClaim>>> {
        let mut found: BTreeMap<String, Vec<PersistentVolumeClaim>> = BTreeMap::new();
        let api = Api::<PersistentVolumeClaim>::all(self.client.clone());
        for_each_listed(&api, "", |pvc: PersistentVolumeClaim| {
            let namespace = pvc.metadata.namespace.clone().unwrap_or_default();
            if wanted.contains(&namespace) {
                found.entry(namespace).or_default().push(pvc);
            }
        })
        .await?;
        Ok(found)
    }

    /// These reads, answering for workloads from `workloads` where it covers the
    /// namespace.
    pub fn with_workloads(self, workloads: &'a Workloads) -> Self {
        Reads {
            workloads: Some(workloads),
            ..self
        }
    }

    pub fn client(&self) -> &'a Client {
        self.client
    }
}

/// The pods that mount each of `claims` (names in `namespace`), resolved to their top
/// owners with the replica counts they ask for now. Stand-in pods of the restore
/// `own_uid` are not consumers.
pub async fn consumers(
    reads: Reads<'_>,
    namespace: &str,
    claims: &[&str],
    own_uid: &str,
    git_ops: &GitOpsSpec,
) -> kube::Result<BTreeMap<String, Vec<ConsumerRef>>> {
    let pods = pods_mounting(reads, namespace, claims).await?;
    let found = Found {
        pods: &pods,
        claims,
        own_uid,
        git_ops,
    };
    consumers_in(reads, namespace, found, Replicas::Read).await
}

/// What [`consumers_in`] looks among: pods already read, the claims asked about, the
/// restore asking (its stand-ins are no consumers) and how it finds GitOps objects.
#[derive(Clone, Copy)]
pub struct Found<'a> {
    pub pods: &'a [Arc<Pod>],
    pub claims: &'a [&'a str],
    pub own_uid: &'a str,
    pub git_ops: &'a GitOpsSpec,
}

/// The pods of `namespace` that mount any of `claims`: from the controller's index when
/// it has one ready, else from a list of the namespace.
pub async fn pods_mounting(
    reads: Reads<'_>,
    namespace: &str,
    claims: &[&str],
) -> kube::Result<Vec<Arc<Pod>>> {
    let Reads { client, known, .. } = reads;
    if let Some(found) = known.and_then(|k| k.mounts.mounting(namespace, claims)) {
        return Ok(found);
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    Ok(pods
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|p| claims.iter().any(|c| mounts_claim(p, c)))
        .map(Arc::new)
        .collect())
}

/// Whether [`consumers_in`] reads each workload's replica count. Stopping a workload
/// reads it anyway (and records it on the object), so only a plan shown before any
/// stop needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replicas {
    Read,
    Skip,
}

/// Like [`consumers`], over pods already read.
pub async fn consumers_in(
    reads: Reads<'_>,
    namespace: &str,
    found: Found<'_>,
    read_replicas: Replicas,
) -> kube::Result<BTreeMap<String, Vec<ConsumerRef>>> {
    let Found {
        pods,
        claims,
        own_uid,
        git_ops,
    } = found;
    let mut owner_cache = OwnersMet::new();
    let mut replica_cache: BTreeMap<(ConsumerKind, String), Option<i32>> = BTreeMap::new();
    let mut out: BTreeMap<String, Vec<ConsumerRef>> = BTreeMap::new();
    for claim in claims {
        out.insert(format!("{namespace}/{claim}"), Vec::new());
    }
    for pod in pods {
        // A pod being deleted still holds the volume until it is gone, so it counts.
        if is_own_stand_in(pod, own_uid) {
            continue;
        }
        let mounted: Vec<&&str> = claims.iter().filter(|c| mounts_claim(pod, c)).collect();
        if mounted.is_empty() {
            continue;
        }
        // Another restore's stand-in: the claim is being restored by it.
        if is_stand_in(pod) {
            let restore = stand_in_restore(pod).unwrap_or_else(|| "(unknown)".into());
            let found = Mounting {
                owner: Owner::StandIn { restore },
                replicas: None,
                managed_by: Vec::new(),
            };
            push_refs(&mut out, namespace, pod, &mounted, found);
            continue;
        }
        let owner = walk_owners(reads, namespace, pod, &mut owner_cache).await?;
        let replicas = match &owner {
            Owner::Known(kind, name) if kind.is_scalable() && read_replicas == Replicas::Read => {
                let key = (*kind, name.clone());
                if !replica_cache.contains_key(&key) {
                    let replicas = replicas_of(reads.client, namespace, *kind, name).await?;
                    replica_cache.insert(key.clone(), replicas);
                }
                replica_cache[&key]
            }
            _ => None,
        };
        // A bare pod is its own workload: the GitOps marks are on it. A workload's
        // are on the workload, read below.
        let managed_by = match &owner {
            Owner::Known(ConsumerKind::Pod, _) => managers_of(&pod.metadata, git_ops),
            _ => Vec::new(),
        };
        let found = Mounting {
            owner,
            replicas,
            managed_by,
        };
        push_refs(&mut out, namespace, pod, &mounted, found);
    }
    // Workloads whose pod template mounts a claim are consumers too, with no pod running
    // now (at 0 replicas, a CronJob between runs): started mid-restore, they would write.
    let listed = match reads.workloads.filter(|w| w.namespaces.contains(namespace)) {
        Some(read) => read
            .by_namespace
            .get(namespace)
            .cloned()
            .unwrap_or_default(),
        None => workloads(reads.client, namespace).await?,
    };
    for (kind, name, workload) in listed {
        if !is_top_workload(kind, &workload) {
            continue;
        }
        let managed_by = managers_in_json(&workload["metadata"], git_ops);
        // Its pods, found above, are managed as it is.
        if !managed_by.is_empty() {
            let owner = Owner::Known(kind, name.clone());
            for r in out.values_mut().flatten().filter(|r| r.owner == owner) {
                r.managed_by = managed_by.clone();
            }
        }
        for claim in claims {
            if !template_mounts(kind, &name, &workload, claim) {
                continue;
            }
            let refs = out.entry(format!("{namespace}/{claim}")).or_default();
            let owner = Owner::Known(kind, name.clone());
            if refs.iter().any(|r| r.owner == owner) {
                continue;
            }
            let replicas = kind.is_scalable().then(|| {
                workload["spec"]["replicas"]
                    .as_i64()
                    .map(|r| r as i32)
                    .unwrap_or(1)
            });
            refs.push(ConsumerRef {
                namespace: namespace.to_string(),
                pod: None,
                node: None,
                owner,
                replicas,
                template: template_spec(kind, &workload).map(Box::new),
                managed_by: managed_by.clone(),
            });
        }
    }
    Ok(out)
}

/// The owner references of ReplicaSets and Jobs met while walking pods' owner chains.
type OwnersMet = BTreeMap<(String, String), Owners>;

/// The top owner of `pod` (in `namespace`).
async fn walk_owners(
    reads: Reads<'_>,
    namespace: &str,
    pod: &Pod,
    met: &mut OwnersMet,
) -> kube::Result<Owner> {
    // Owner lookups are few (one per ReplicaSet or Job) and need async, so they are
    // fetched first and handed to the pure walk as a map.
    for owner in pod.metadata.owner_references.iter().flatten() {
        let key = (owner.kind.clone(), owner.name.clone());
        if matches!(owner.kind.as_str(), "ReplicaSet" | "Job") && !met.contains_key(&key) {
            let refs = owners_of(reads, namespace, owner).await?;
            met.insert(key, refs);
        }
    }
    Ok(top_owner(pod, |kind, name| {
        met.get(&(kind.to_string(), name.to_string()))
            .cloned()
            .flatten()
    }))
}

/// The top owner of each of `pods` (in `namespace`), in their order.
pub async fn top_owners(
    reads: Reads<'_>,
    namespace: &str,
    pods: &[Arc<Pod>],
) -> kube::Result<Vec<Owner>> {
    let mut met = OwnersMet::new();
    let mut owners = Vec::with_capacity(pods.len());
    for pod in pods {
        owners.push(walk_owners(reads, namespace, pod, &mut met).await?);
    }
    Ok(owners)
}

/// Files `pod` as a consumer of each claim it mounts.
fn push_refs(
    out: &mut BTreeMap<String, Vec<ConsumerRef>>,
    namespace: &str,
    pod: &Pod,
    mounted: &[&&str],
    found: Mounting,
) {
    for claim in mounted {
        out.entry(format!("{namespace}/{claim}"))
            .or_default()
            .push(ConsumerRef {
                namespace: namespace.to_string(),
                pod: pod.metadata.name.clone(),
                node: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
                owner: found.owner.clone(),
                replicas: found.replicas,
                template: None,
                managed_by: found.managed_by.clone(),
            });
    }
}

/// What a pod mounting claims was found to be: whose it is, that owner's replica
/// count, and the GitOps objects that manage it.
struct Mounting {
    owner: Owner,
    replicas: Option<i32>,
    managed_by: Vec<gitops::GitOpsRef>,
}

/// The kinds whose pod templates can mount a claim.
const TEMPLATE_KINDS: [ConsumerKind; 7] = [
    ConsumerKind::Deployment,
    ConsumerKind::StatefulSet,
    ConsumerKind::ReplicaSet,
    ConsumerKind::ReplicationController,
    ConsumerKind::DaemonSet,
    ConsumerKind::Job,
    ConsumerKind::CronJob,
];

/// Every workload of `namespace` with its kind, name and JSON, read side by side.
async fn workloads(
    client: &Client,
    namespace: &str,
) -> kube::Result<Vec<(ConsumerKind, String, serde_json::Value)>> {
    let lists = TEMPLATE_KINDS.map(|kind| async move {
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), namespace, &kind.api_resource());
        let mut found = Vec::new();
        for_each_listed(&api, "", |obj: DynamicObject| {
            let name = obj.metadata.name.clone().unwrap_or_default();
            found.push((kind, name, object_json(obj)));
        })
        .await?;
        Ok::<_, kube::Error>(found)
    });
    Ok(futures::future::try_join_all(lists)
        .await?
        .into_iter()
        .flatten()
        .collect())
}

/// The workloads of the namespaces of `claims` (by namespace) that mount one of them,
/// read cluster-wide when the controller asks about many namespaces; None when they are
/// better read namespace by namespace.
pub async fn workloads_mounting(
    reads: Reads<'_>,
    claims: &BTreeMap<String, Vec<String>>,
    git_ops: &GitOpsSpec,
) -> kube::Result<Option<Workloads>> {
    if !reads.cluster_wide(claims.len()) {
        return Ok(None);
    }
    let lists = TEMPLATE_KINDS.map(|kind| async move {
        let api: Api<DynamicObject> = Api::all_with(reads.client.clone(), &kind.api_resource());
        let mut kept = Vec::new();
        for_each_listed(&api, "", |obj: DynamicObject| {
            let namespace = obj.metadata.namespace.clone().unwrap_or_default();
            let Some(wanted) = claims.get(&namespace) else {
                return;
            };
            let name = obj.metadata.name.clone().unwrap_or_default();
            let json = slim(kind, obj, git_ops);
            if !wanted
                .iter()
                .any(|c| template_mounts(kind, &name, &json, c))
            {
                return;
            }
            // The owners of ReplicaSets and Jobs are what a pod's top owner is found
            // through: known now, they need no read of their own.
            let uid = json["metadata"]["uid"].as_str();
            if let (Some(known), Some(uid), ConsumerKind::ReplicaSet | ConsumerKind::Job) =
                (reads.known, uid, kind)
            {
                let owners = serde_json::from_value(json["metadata"]["ownerReferences"].clone());
                known.owners.put(uid, Some(owners.unwrap_or_default()));
            }
            // Only a workload no other one controls is a consumer of its own.
            if is_top_workload(kind, &json) {
                kept.push((namespace, (kind, name, json)));
            }
        })
        .await?;
        Ok::<_, kube::Error>(kept)
    });
    let mut found = Workloads {
        namespaces: claims.keys().cloned().collect(),
        by_namespace: BTreeMap::new(),
    };
    for (namespace, workload) in futures::future::try_join_all(lists)
        .await?
        .into_iter()
        .flatten()
    {
        found
            .by_namespace
            .entry(namespace)
            .or_default()
            .push(workload);
    }
    Ok(Some(found))
}

/// What of a listed workload deciding about it needs (its name, owners, spec, and a
/// Job's conditions), so that the workloads of a thousand namespaces are held cheaply.
fn slim(kind: ConsumerKind, obj: DynamicObject, git_ops: &GitOpsSpec) -> serde_json::Value {
    let mut json = obj.data;
    let conditions = json["status"]["conditions"].take();
    json["status"] = match kind {
        ConsumerKind::Job => serde_json::json!({ "conditions": conditions }),
        _ => serde_json::Value::Null,
    };
    let meta = obj.metadata;
    let marks = |map: Option<BTreeMap<String, String>>| -> BTreeMap<String, String> {
        map.into_iter()
            .flatten()
            .filter(|(k, _)| gitops::is_tracking_key(k, git_ops))
            .collect()
    };
    json["metadata"] = serde_json::json!({
        "name": meta.name,
        "namespace": meta.namespace,
        "uid": meta.uid,
        "ownerReferences": meta.owner_references.unwrap_or_default(),
    });
    // Only the marks of GitOps tools, and only when there are some.
    for (field, kept) in [
        ("labels", marks(meta.labels)),
        ("annotations", marks(meta.annotations)),
    ] {
        if !kept.is_empty() {
            json["metadata"][field] = serde_json::json!(kept);
        }
    }
    json
}

/// The GitOps objects managing an object, from its metadata.
fn managers_of(meta: &ObjectMeta, git_ops: &GitOpsSpec) -> Vec<gitops::GitOpsRef> {
    fn lookup<'a>(map: &'a Option<BTreeMap<String, String>>, key: &str) -> Option<&'a str> {
        map.as_ref()?.get(key).map(String::as_str)
    }
    gitops::managers(
        |k| lookup(&meta.labels, k),
        |k| lookup(&meta.annotations, k),
        git_ops,
    )
}

/// [`managers_of`], from metadata as JSON.
fn managers_in_json(meta: &serde_json::Value, git_ops: &GitOpsSpec) -> Vec<gitops::GitOpsRef> {
    gitops::managers(
        |k| meta["labels"][k].as_str(),
        |k| meta["annotations"][k].as_str(),
        git_ops,
    )
}

/// Hands every object `api` lists (with these labels; "" for all) to `each`, [`PAGE`]
/// at a time: see [`for_each_page`].
pub(crate) async fn for_each_listed<K>(
    api: &Api<K>,
    labels: &str,
    each: impl FnMut(K),
) -> kube::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut params = ListParams::default().limit(PAGE);
    if !labels.is_empty() {
        params = params.labels(labels);
    }
    for_each_page(
        params,
        move |params| async move { api.list(&params).await },
        each,
    )
    .await
}

/// Objects a page holds when only their names are kept (a metadata list).
pub const NAME_PAGE: u32 = 500;

/// PodVolumeBackups a page holds: one is a few KiB once its managed fields are gone,
/// and a backup of thousands of volumes is read in a few pages.
pub const PVB_PAGE: u32 = 500;

/// Hands every PodVolumeBackup `api` lists of the backup `backup` (None: of every
/// backup) to `each`, paged ([`PVB_PAGE`]) and without managed fields: a backup holds
/// one per pod volume, and each request reads the backup's.
pub async fn for_each_pod_volume_backup(
    api: &Api<PodVolumeBackup>,
    backup: Option<&str>,
    each: impl FnMut(PodVolumeBackup),
) -> kube::Result<()> {
    let selector = match backup {
        Some(backup) => format!("{}={}", labels::BACKUP_NAME, labels::label_value(backup)),
        None => labels::BACKUP_NAME.to_string(),
    };
    let params = ListParams::default().labels(&selector).limit(PVB_PAGE);
    for_each_page(
        params,
        move |params| async move { api.list(&params).await },
        each,
    )
    .await
}

/// Hands every object `fetch` lists with `params` (a `limit` set: the page size) to
/// `each`, a page at a time and each without its managed fields (who wrote which field:
/// often most of an object, and nothing here reads it), so that a list of many objects
/// holds no more than a page of them at once, and `each` keeps what it needs.
pub(crate) async fn for_each_page<K, Page>(
    mut params: ListParams,
    fetch: impl Fn(ListParams) -> Page,
    mut each: impl FnMut(K),
) -> kube::Result<()>
where
    K: kube::Resource + Clone,
    Page: std::future::Future<Output = kube::Result<ObjectList<K>>>,
{
    loop {
        let page = fetch(params.clone()).await?;
        for mut object in page.items {
            object.meta_mut().managed_fields = None;
            each(object);
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(()),
        }
    }
}

/// A dynamic object as one JSON value, metadata included, as pure decisions read it.
pub fn object_json(object: DynamicObject) -> serde_json::Value {
    let mut json = object.data;
    json["metadata"] = serde_json::to_value(&object.metadata).unwrap_or_default();
    json
}

/// Whether the pod is a stand-in of any restore.
pub fn is_stand_in(pod: &Pod) -> bool {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::ROLE))
        .map(String::as_str)
        == Some(labels::ROLE_STAND_IN)
}

pub fn is_own_stand_in(pod: &Pod, own_uid: &str) -> bool {
    is_stand_in(pod) && is_own(pod, own_uid)
}

/// A path restore's copier pod of the restore `own_uid`.
pub fn is_own_copier(pod: &Pod, own_uid: &str) -> bool {
    let role = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::ROLE));
    role.map(String::as_str) == Some(labels::ROLE_COPIER) && is_own(pod, own_uid)
}

fn is_own(pod: &Pod, own_uid: &str) -> bool {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::DATA_RESTORE_UID))
        .map(String::as_str)
        == Some(own_uid)
}

/// `namespace/name` of the DataRestore a stand-in pod serves, as it is annotated.
pub fn stand_in_restore(pod: &Pod) -> Option<String> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(labels::DATA_RESTORE_ANNOTATION)
        .cloned()
}

/// The owner references of `owner` (a ReplicaSet or a Job), from what the controller
/// kept when it read them lately.
async fn owners_of(
    reads: Reads<'_>,
    namespace: &str,
    owner: &OwnerReference,
) -> kube::Result<Owners> {
    let Reads { client, known, .. } = reads;
    if let Some(kept) = known.and_then(|k| k.owners.get(&owner.uid)) {
        return Ok(kept);
    }
    let name = owner.name.as_str();
    let meta = match owner.kind.as_str() {
        "ReplicaSet" => Api::<ReplicaSet>::namespaced(client.clone(), namespace)
            .get_opt(name)
            .await?
            .map(|o| o.metadata),
        "Job" => Api::<Job>::namespaced(client.clone(), namespace)
            .get_opt(name)
            .await?
            .map(|o| o.metadata),
        _ => None,
    };
    let refs = meta.map(|m| m.owner_references.unwrap_or_default());
    if let Some(k) = known {
        k.owners.put(&owner.uid, refs.clone());
    }
    Ok(refs)
}

/// The replica count a scalable workload asks for now (`spec.replicas`, default 1).
pub async fn replicas_of(
    client: &Client,
    namespace: &str,
    kind: ConsumerKind,
    name: &str,
) -> kube::Result<Option<i32>> {
    if !kind.is_scalable() {
        return Ok(None);
    }
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &kind.api_resource());
    Ok(api.get_opt(name).await?.map(|obj| replicas(&obj)))
}

/// `spec.replicas` of a scalable workload (Kubernetes' default is 1).
pub fn replicas(obj: &DynamicObject) -> i32 {
    obj.data["spec"]["replicas"]
        .as_i64()
        .map(|r| r as i32)
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pages as an API server serves them: `names` split into pages of the request's
    /// limit, each object with managed fields, a continue token between pages.
    fn served(names: &[&str], params: &ListParams) -> ObjectList<PodVolumeBackup> {
        let limit = params.limit.unwrap() as usize;
        let from: usize = params
            .continue_token
            .as_deref()
            .map_or(0, |t| t.parse().unwrap());
        let items = names[from..]
            .iter()
            .take(limit)
            .map(|name| {
                let mut pvb = PodVolumeBackup::new(name, Default::default());
                pvb.metadata.managed_fields = Some(vec![Default::default()]);
                pvb
            })
            .collect();
        let next = from + limit;
        serde_json::from_value(serde_json::json!({
            "metadata": {"continue": if next < names.len() { next.to_string() } else { String::new() }},
            "items": serde_json::to_value::<Vec<PodVolumeBackup>>(items).unwrap(),
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn a_paged_list_hands_over_every_object_without_managed_fields() {
        let names = ["a", "b", "c", "d", "e"];
        let asked = Mutex::new(Vec::new());
        let mut seen = Vec::new();
        let params = ListParams::default().labels("x").limit(2);
        for_each_page(
            params,
            |params| {
                asked.lock().unwrap().push(params.clone());
                let page = served(&names, &params);
                async move { Ok(page) }
            },
            |pvb: PodVolumeBackup| {
                assert_eq!(pvb.metadata.managed_fields, None);
                seen.push(pvb.metadata.name.unwrap());
            },
        )
        .await
        .unwrap();
        assert_eq!(seen, names);
        let asked = asked.into_inner().unwrap();
        let tokens: Vec<_> = asked.iter().map(|p| p.continue_token.clone()).collect();
        assert_eq!(tokens, [None, Some("2".into()), Some("4".into())]);
        assert!(
            asked
                .iter()
                .all(|p| p.limit == Some(2) && p.label_selector.as_deref() == Some("x"))
        );
    }

    #[test]
    fn a_listed_workload_keeps_what_deciding_needs() {
        let object = |kind: &str| -> DynamicObject {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "v1", "kind": kind,
                "metadata": {"name": "w", "namespace": "shop", "uid": "u1",
                    "annotations": {"big": "x".repeat(1000)},
                    "labels": {"a": "b", gitops::KUSTOMIZATION_NAME: "shop",
                        gitops::KUSTOMIZATION_NAMESPACE: "flux-system"},
                    "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob",
                        "name": "c", "uid": "u0", "controller": true}]},
                "spec": {"replicas": 3, "template": {"spec": {"volumes": [
                    {"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}}},
                "status": {"replicas": 3, "conditions": [{"type": "Complete", "status": "True"}]}
            }))
            .unwrap()
        };
        let deployment = slim(
            ConsumerKind::Deployment,
            object("Deployment"),
            &GitOpsSpec::default(),
        );
        assert!(deployment["status"].is_null());
        assert!(deployment["metadata"]["annotations"].is_null());
        assert!(deployment["metadata"]["labels"]["a"].is_null());
        assert_eq!(
            managers_in_json(&deployment["metadata"], &GitOpsSpec::default())[0].name,
            "shop",
            "a GitOps tool's marks are kept"
        );
        assert_eq!(deployment["metadata"]["uid"], "u1");
        assert_eq!(deployment["spec"]["replicas"], 3);
        assert!(template_mounts(
            ConsumerKind::Deployment,
            "w",
            &deployment,
            "data"
        ));
        assert!(
            !is_top_workload(ConsumerKind::Deployment, &deployment),
            "owned"
        );
        let job = slim(ConsumerKind::Job, object("Job"), &GitOpsSpec::default());
        assert_eq!(job["status"]["conditions"][0]["type"], "Complete");
    }

    fn owner(name: &str) -> Owners {
        Some(vec![OwnerReference {
            kind: "Deployment".into(),
            name: name.into(),
            ..Default::default()
        }])
    }

    #[test]
    fn owners_are_kept_for_a_while_then_read_again() {
        let cache = OwnerCache::default();
        assert!(cache.get("rs-uid").is_none());
        cache.put("rs-uid", owner("web"));
        cache.put("gone-uid", None);
        assert_eq!(cache.get("rs-uid"), Some(owner("web")));
        assert_eq!(
            cache.get("gone-uid"),
            Some(None),
            "a gone owner is known too"
        );

        let expired = OwnerCache {
            keep: Duration::ZERO,
            ..Default::default()
        };
        expired.put("rs-uid", owner("web"));
        assert!(expired.get("rs-uid").is_none());
    }
}

//! Who uses a claim now: the pods that mount it, each walked up its owner chain to the
//! workload that holds its replica count, and the workloads whose pod templates mount
//! it with no pod running.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Api;
use kube::api::ListParams;

use crate::api::{ConsumerKind, GitOpsSpec};
use crate::gitops;
use crate::plan::{ConsumerRef, Owner, Workload, mounts_claim, top_owner};

use super::own_pods::{is_own_stand_in, is_stand_in, stand_in_restore};
use super::reads::{Owners, Reads};
use super::replicas::replicas_of;
use super::workloads::workloads;

/// The pods that mount each of `claims` (names in `namespace`), resolved to their top
/// owners with the replica counts they ask for now. Stand-in pods of the restore
/// `own_uid` are not consumers.
pub(crate) async fn consumers(
    reads: Reads<'_>,
    namespace: &str,
    claims: &[&str],
    own_uid: &str,
    git_ops: &GitOpsSpec,
) -> kube::Result<BTreeMap<String, Vec<ConsumerRef>>> {
    let pods = pods_mounting(reads, namespace, claims).await?;
    let found = Search {
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
pub(crate) struct Search<'a> {
    pub pods: &'a [Arc<Pod>],
    pub claims: &'a [&'a str],
    pub own_uid: &'a str,
    pub git_ops: &'a GitOpsSpec,
}

/// The pods of `namespace` that mount any of `claims`: from the controller's index when
/// it has one ready, else from a list of the namespace.
pub(crate) async fn pods_mounting(
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
pub(crate) enum Replicas {
    Read,
    Skip,
}

/// Like [`consumers`], over pods already read.
pub(crate) async fn consumers_in(
    reads: Reads<'_>,
    namespace: &str,
    found: Search<'_>,
    read_replicas: Replicas,
) -> kube::Result<BTreeMap<String, Vec<ConsumerRef>>> {
    let Search {
        pods,
        claims,
        own_uid,
        git_ops,
    } = found;
    // Workloads whose pod template mounts a claim are consumers too (below); listed
    // first, they also give the replica counts of the owners of the pods found.
    let read;
    let listed = match reads.workloads.and_then(|w| w.of(namespace)) {
        Some(listed) => listed,
        None => {
            let watched = reads
                .known
                .and_then(|k| k.templates.workloads(namespace, git_ops));
            read = match watched {
                Some(watched) => watched,
                None => workloads(reads.client, namespace, git_ops).await?,
            };
            &read
        }
    };
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
                    let replicas = match listed_replicas(listed, *kind, name) {
                        Some(known) => known,
                        None => replicas_of(reads.client, namespace, *kind, name).await?,
                    };
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
    // With no pod running now (at 0 replicas, a CronJob between runs): started
    // mid-restore, they would write.
    for workload in listed {
        add_workload(&mut out, namespace, claims, workload);
    }
    Ok(out)
}

/// The replica count of the workload `kind`/`name` as the list just read holds it:
/// `Some(count)` when it was listed (the count None for a kind that does not scale),
/// None when it was not (a workload whose template no longer mounts the claim its
/// pods still do), to be read then. Pure.
fn listed_replicas(listed: &[Workload], kind: ConsumerKind, name: &str) -> Option<Option<i32>> {
    listed
        .iter()
        .find(|w| w.kind == kind && w.name == name)
        .map(|w| w.replicas)
}

/// Files a workload found by its pod template: its GitOps managers onto its pods
/// already found, and itself as a consumer of each of `claims` its template mounts
/// that no pod of it was found mounting.
fn add_workload(
    out: &mut BTreeMap<String, Vec<ConsumerRef>>,
    namespace: &str,
    claims: &[&str],
    workload: &Workload,
) {
    let owner = Owner::Known(workload.kind, workload.name.clone());
    // Its pods, found above, are managed as it is.
    if !workload.managed_by.is_empty() {
        for r in out.values_mut().flatten().filter(|r| r.owner == owner) {
            r.managed_by = workload.managed_by.clone();
        }
    }
    for claim in claims {
        if !workload.mounts(claim) {
            continue;
        }
        let refs = out.entry(format!("{namespace}/{claim}")).or_default();
        if refs.iter().any(|r| r.owner == owner) {
            continue;
        }
        refs.push(ConsumerRef {
            namespace: namespace.to_string(),
            pod: None,
            node: None,
            owner: owner.clone(),
            replicas: workload.replicas,
            template: workload.template_spec().map(Box::new),
            managed_by: workload.managed_by.clone(),
        });
    }
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
pub(crate) async fn top_owners(
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

/// The GitOps objects managing an object, from its metadata.
fn managers_of(meta: &ObjectMeta, git_ops: &GitOpsSpec) -> Vec<gitops::GitOpsRef> {
    gitops::managers_marked(meta.labels.as_ref(), meta.annotations.as_ref(), git_ops)
}

/// The owner references of `owner` (a ReplicaSet or a Job), from what the controller
/// kept when it read them lately.
async fn owners_of(
    reads: Reads<'_>,
    namespace: &str,
    owner: &OwnerReference,
) -> kube::Result<Owners> {
    let Reads { client, known, .. } = reads;
    let name = owner.name.as_str();
    let kind = match owner.kind.as_str() {
        "ReplicaSet" => Some(ConsumerKind::ReplicaSet),
        "Job" => Some(ConsumerKind::Job),
        _ => None,
    };
    let watched = known
        .zip(kind)
        .and_then(|(k, kind)| k.templates.owners(kind, namespace, name, &owner.uid));
    if let Some(watched) = watched {
        return Ok(Some(watched));
    }
    if let Some(kept) = known.and_then(|k| k.owners.get(&owner.uid)) {
        return Ok(kept);
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Listed;

    fn listed(kind: ConsumerKind, name: &str, spec: serde_json::Value) -> Workload {
        let object = serde_json::json!({"metadata": {"name": name}, "spec": spec});
        serde_json::from_value::<Listed>(object)
            .unwrap()
            .into_workload(kind, &GitOpsSpec::default())
    }

    #[test]
    fn a_listed_owner_gives_its_replicas_without_a_read() {
        let found = [
            listed(
                ConsumerKind::Deployment,
                "web",
                serde_json::json!({"replicas": 3}),
            ),
            listed(ConsumerKind::StatefulSet, "db", serde_json::json!({})),
            listed(ConsumerKind::DaemonSet, "agent", serde_json::json!({})),
        ];
        let of = |kind, name| listed_replicas(&found, kind, name);
        assert_eq!(of(ConsumerKind::Deployment, "web"), Some(Some(3)));
        assert_eq!(
            of(ConsumerKind::StatefulSet, "db"),
            Some(Some(1)),
            "the default"
        );
        assert_eq!(
            of(ConsumerKind::DaemonSet, "agent"),
            Some(None),
            "it does not scale"
        );
        assert_eq!(
            of(ConsumerKind::StatefulSet, "web"),
            None,
            "another kind: read it"
        );
        assert_eq!(
            of(ConsumerKind::Deployment, "api"),
            None,
            "not listed: read it"
        );
    }
}

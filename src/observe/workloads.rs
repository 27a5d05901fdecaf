//! The workloads whose pod templates can mount claims, listed kind by kind and held as
//! [`Workload`]s: what deciding about them reads, not their specs.

use std::collections::{BTreeMap, BTreeSet};

use kube::Client;

use crate::api::{ConsumerKind, GitOpsSpec};
use crate::plan::{Listed, Workload};

use super::paging::for_each_shaped;
use super::reads::Reads;

/// The kinds whose pod templates can mount a claim.
pub(crate) const TEMPLATE_KINDS: [ConsumerKind; 7] = [
    ConsumerKind::Deployment,
    ConsumerKind::StatefulSet,
    ConsumerKind::ReplicaSet,
    ConsumerKind::ReplicationController,
    ConsumerKind::DaemonSet,
    ConsumerKind::Job,
    ConsumerKind::CronJob,
];

/// The workloads of some namespaces, read with one list per kind for the whole cluster:
/// a restore of claims in a hundred namespaces would otherwise list seven kinds in each.
/// Only those whose pod template mounts one of the claims asked about are kept.
#[derive(Default)]
pub(crate) struct Workloads {
    namespaces: BTreeSet<String>,
    by_namespace: BTreeMap<String, Vec<Workload>>,
}

impl Workloads {
    /// The workloads kept of `namespace`; None when it was not read.
    pub(crate) fn of(&self, namespace: &str) -> Option<&[Workload]> {
        self.namespaces.contains(namespace).then(|| {
            self.by_namespace
                .get(namespace)
                .map_or(&[][..], Vec::as_slice)
        })
    }
}

/// Every workload of `namespace` that is a consumer of its own ([`Listed::is_top`]),
/// its GitOps managers found with `git_ops`, the kinds read side by side.
pub(crate) async fn workloads(
    client: &Client,
    namespace: &str,
    git_ops: &GitOpsSpec,
) -> kube::Result<Vec<Workload>> {
    of_every_kind(|kind| async move {
        let mut found = Vec::new();
        for_each_shaped(
            client,
            &kind.api_resource(),
            Some(namespace),
            "",
            |listed: Listed| {
                if listed.is_top(kind) {
                    found.push(listed.into_workload(kind, git_ops));
                }
            },
        )
        .await?;
        Ok(found)
    })
    .await
}

/// What `read` finds of each of [`TEMPLATE_KINDS`], the kinds read side by side.
pub(super) async fn of_every_kind<T, Read>(
    read: impl Fn(ConsumerKind) -> Read,
) -> kube::Result<Vec<T>>
where
    Read: Future<Output = kube::Result<Vec<T>>>,
{
    Ok(futures::future::try_join_all(TEMPLATE_KINDS.map(read))
        .await?
        .into_iter()
        .flatten()
        .collect())
}

/// The workloads of the namespaces of `claims` (by namespace) that mount one of them:
/// from the controller's watches once they listed every kind, else read cluster-wide
/// when the controller asks about many namespaces; None when they are better read
/// namespace by namespace.
pub(crate) async fn workloads_mounting(
    reads: Reads<'_>,
    claims: &BTreeMap<String, Vec<String>>,
    git_ops: &GitOpsSpec,
) -> kube::Result<Option<Workloads>> {
    if let Some(watched) = reads
        .known
        .and_then(|k| watched(&k.templates, claims, git_ops))
    {
        return Ok(Some(watched));
    }
    if !reads.cluster_wide(claims.len()) {
        return Ok(None);
    }
    let lists = of_every_kind(|kind| async move {
        let mut kept = Vec::new();
        for_each_shaped(
            reads.client,
            &kind.api_resource(),
            None,
            "",
            |mut listed: Listed| {
                let namespace = listed.metadata.namespace.clone().unwrap_or_default();
                let Some(wanted) = claims.get(&namespace) else {
                    return;
                };
                let top = listed.is_top(kind);
                let uid = listed.metadata.uid.take();
                let owners = listed.metadata.owner_references.take();
                let workload = listed.into_workload(kind, git_ops);
                if !wanted.iter().any(|c| workload.mounts(c)) {
                    return;
                }
                // The owners of ReplicaSets and Jobs are what a pod's top owner is found
                // through: known now, they need no read of their own.
                if let (Some(known), Some(uid), ConsumerKind::ReplicaSet | ConsumerKind::Job) =
                    (reads.known, uid, kind)
                {
                    known.owners.put(&uid, Some(owners.unwrap_or_default()));
                }
                // Only a workload no other one controls is a consumer of its own.
                if top {
                    kept.push((namespace, workload));
                }
            },
        )
        .await?;
        Ok(kept)
    });
    let mut found = Workloads {
        namespaces: claims.keys().cloned().collect(),
        by_namespace: BTreeMap::new(),
    };
    for (namespace, workload) in lists.await? {
        found
            .by_namespace
            .entry(namespace)
            .or_default()
            .push(workload);
    }
    Ok(Some(found))
}

/// [`workloads_mounting`] answered from the controller's watches; None before they
/// listed every kind.
fn watched(
    index: &crate::template_mounts::TemplateMounts,
    claims: &BTreeMap<String, Vec<String>>,
    git_ops: &GitOpsSpec,
) -> Option<Workloads> {
    let mut found = Workloads {
        namespaces: claims.keys().cloned().collect(),
        by_namespace: BTreeMap::new(),
    };
    for (namespace, wanted) in claims {
        let kept: Vec<Workload> = index
            .workloads(namespace, git_ops)?
            .into_iter()
            .filter(|w| wanted.iter().any(|c| w.mounts(c)))
            .collect();
        if !kept.is_empty() {
            found.by_namespace.insert(namespace.clone(), kept);
        }
    }
    Some(found)
}

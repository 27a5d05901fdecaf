//! Where reads come from, and what the controller keeps knowing between them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Api, Client};

use super::paging::for_each_listed;
use super::workloads::Workloads;

/// What the controller keeps knowing between reads, so that asking again costs nothing:
/// which pods mount which claims, from its pod watch, which workloads' pod templates do,
/// from its workload watches, which nodes are Ready, from its node watch, and owner
/// references read lately.
#[derive(Default)]
pub(crate) struct Known {
    pub mounts: crate::mounts::Mounts,
    pub templates: crate::template_mounts::TemplateMounts,
    pub claims: crate::claims::Claims,
    pub nodes: crate::nodes::Nodes,
    pub owners: OwnerCache,
}

/// Owner references of ReplicaSets and Jobs by their UID, kept for a short while:
/// validating a restore and starting its volumes walk the same owners moments apart. An
/// object's owners change only when it is adopted or orphaned; the time limit bounds how
/// long such a change can go unseen.
pub(crate) struct OwnerCache {
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
pub(super) type Owners = Option<Vec<OwnerReference>>;

impl OwnerCache {
    pub(super) fn get(&self, uid: &str) -> Option<Owners> {
        let entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        entries
            .get(uid)
            .filter(|(at, _)| at.elapsed() < self.keep)
            .map(|(_, refs)| refs.clone())
    }

    pub(super) fn put(&self, uid: &str, refs: Owners) {
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
pub(crate) struct Reads<'a> {
    pub(super) client: &'a Client,
    pub(super) known: Option<&'a Known>,
    pub(super) workloads: Option<&'a Workloads>,
    /// From how many namespaces objects are listed for the whole cluster at once;
    /// None: never (a person running the CLI may list only some namespaces).
    cluster_wide_from: Option<usize>,
}

impl<'a> Reads<'a> {
    /// Every read goes to the API server (the CLI).
    pub(crate) fn api(client: &'a Client) -> Self {
        Reads {
            client,
            known: None,
            workloads: None,
            cluster_wide_from: None,
        }
    }

    /// Reads answer from `known` where it can (the controller), and objects of
    /// `cluster_wide_from` namespaces or more are listed for the whole cluster at once.
    pub(crate) fn watched(client: &'a Client, known: &'a Known, cluster_wide_from: usize) -> Self {
        Reads {
            client,
            known: Some(known),
            workloads: None,
            cluster_wide_from: Some(cluster_wide_from),
        }
    }

    /// Whether objects of `namespaces` namespaces are read with one list for the whole
    /// cluster: on the controller, when they are many.
    pub(crate) fn cluster_wide(&self, namespaces: usize) -> bool {
        self.cluster_wide_from
            .is_some_and(|from| namespaces >= from)
    }

    /// The claims of the namespaces `wanted`, by namespace, one cluster-wide paged list.
    pub(crate) async fn claims_of(
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
    pub(crate) fn with_workloads(self, workloads: &'a Workloads) -> Self {
        Reads {
            workloads: Some(workloads),
            ..self
        }
    }

    pub(crate) fn client(&self) -> &'a Client {
        self.client
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

//! Which pods mount which claims, kept up to date from a pod watch.
//!
//! Waiting for a volume to be released, and checking that nobody mounts it while it is
//! written, are asked of every quiescing or restoring volume on every pass. Answering
//! from the watch the controller has anyway costs no request; listing the namespace each
//! time cost several per volume. Only pods that mount a claim are kept, and only what
//! the decisions read of them, so memory follows the pods that matter, not the cluster.
//!
//! Each pod is held as its trimmed manifest's JSON text, read back when asked for: the
//! typed `Pod` with its one container took about 5 KiB whatever it held (most of its
//! fields are empty options), the text of a workload's pod a few hundred bytes; a
//! restore of ten thousand claims holds ten thousand of them at once. Reading one back
//! costs microseconds, against a pass that asks once per working volume.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodStatus};
use kube::ResourceExt;
use kube::runtime::watcher::Event;

use crate::plan::mounts_claim;

type Key = (String, String);

/// A kept pod: its name and its trimmed manifest as JSON text.
type Kept = (Box<str>, Arc<str>);

#[derive(Default)]
struct Index {
    /// `(namespace, claim)` → pods mounting it (a claim has few: a Vec, not a map).
    by_claim: HashMap<Key, Vec<Kept>>,
    /// `(namespace, pod)` → the claims it is filed under, to unfile it.
    claims_of: HashMap<Key, Box<[String]>>,
    /// A pod could not be kept: until a relist, only the API can answer.
    broken: bool,
}

impl Index {
    fn insert(&mut self, pod: Pod) {
        let (ns, name) = (pod.namespace().unwrap_or_default(), pod.name_any());
        self.remove(&ns, &name);
        let claims = claims(&pod);
        if claims.is_empty() {
            return;
        }
        // Serializing a Pod we just read cannot fail; were it to, holding nothing for
        // it would hide a consumer, so the index would rather not answer (see `broken`).
        let Ok(text) = serde_json::to_string(&trimmed(pod)) else {
            self.broken = true;
            return;
        };
        let text: Arc<str> = text.into();
        for claim in &claims {
            self.by_claim
                .entry((ns.clone(), claim.clone()))
                .or_default()
                .push((name.as_str().into(), text.clone()));
        }
        self.claims_of.insert((ns, name), claims.into());
    }

    fn remove(&mut self, ns: &str, name: &str) {
        let Some(claims) = self.claims_of.remove(&(ns.to_string(), name.to_string())) else {
            return;
        };
        for claim in claims {
            let key = (ns.to_string(), claim);
            if let Some(pods) = self.by_claim.get_mut(&key) {
                pods.retain(|(pod, _)| &**pod != name);
                if pods.is_empty() {
                    self.by_claim.remove(&key);
                }
            }
        }
    }
}

#[derive(Default)]
struct MountsState {
    live: Index,
    /// The index being rebuilt by a (re)list; it replaces `live` when the list is done,
    /// so pods deleted while the watch was down do not linger.
    relisting: Option<Index>,
    /// Whether a first list completed: before that, the index knows nothing.
    ready: bool,
}

/// The shared index. Cheap to read from many reconciles at once.
#[derive(Default)]
pub(crate) struct Mounts {
    state: RwLock<MountsState>,
}

impl Mounts {
    /// Folds one watch event in.
    pub(crate) fn apply(&self, event: &Event<Pod>) {
        let mut state = self
            .state
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match event {
            Event::Init => state.relisting = Some(Index::default()),
            Event::InitApply(pod) => state
                .relisting
                .get_or_insert_with(Index::default)
                .insert(pod.clone()),
            Event::InitDone => {
                state.live = state.relisting.take().unwrap_or_default();
                state.ready = true;
            }
            Event::Apply(pod) => state.live.insert(pod.clone()),
            Event::Delete(pod) => state
                .live
                .remove(&pod.namespace().unwrap_or_default(), &pod.name_any()),
        }
    }

    /// The pods that mount any of `claims` in `namespace`, each once, by the same rule
    /// as everywhere else ([`mounts_claim`]: a finished pod holds nothing); None until
    /// the first list is done, when only the API can answer.
    pub(crate) fn mounting(&self, namespace: &str, claims: &[&str]) -> Option<Vec<Arc<Pod>>> {
        let state = self
            .state
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !state.ready || state.live.broken {
            return None;
        }
        let mut found: BTreeMap<&str, Arc<Pod>> = BTreeMap::new();
        for claim in claims {
            let key = (namespace.to_string(), claim.to_string());
            for (name, text) in state.live.by_claim.get(&key).into_iter().flatten() {
                if found.contains_key(&**name) {
                    continue;
                }
                // Text this index wrote itself; should it not read back, the API answers.
                let pod: Pod = serde_json::from_str(text).ok()?;
                if mounts_claim(&pod, claim) {
                    found.insert(name, Arc::new(pod));
                }
            }
        }
        Some(found.into_values().collect())
    }

    /// How many pods are kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.state
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .live
            .claims_of
            .len()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn claims(pod: &Pod) -> Vec<String> {
    let mut claims: Vec<String> = pod
        .spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| v.persistent_volume_claim.as_ref())
        .map(|c| c.claim_name.clone())
        .collect();
    claims.sort();
    claims.dedup();
    claims
}

/// What consumers are decided from: the spec (volumes, security, the manifest of a bare
/// pod), owners, labels and annotations, and whether the pod has finished. Managed
/// fields and the rest of the status are most of a pod's size and are never read.
fn trimmed(mut pod: Pod) -> Pod {
    pod.metadata.managed_fields = None;
    pod.status = pod.status.map(|s| PodStatus {
        phase: s.phase,
        ..Default::default()
    });
    // A pod a workload controls is read for its claims, node, owners and what its
    // stand-in copies (security contexts, tolerations); the rest of its spec was most
    // of what the index held, a thousand pods over. A bare pod stays whole: it is
    // deleted to stop it, and its manifest is what brings it back.
    let controlled = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true));
    if controlled {
        pod.spec = pod.spec.map(|s| PodSpec {
            volumes: s.volumes,
            node_name: s.node_name,
            security_context: s.security_context,
            tolerations: s.tolerations,
            containers: s
                .containers
                .into_iter()
                .map(|c| Container {
                    name: c.name,
                    security_context: c.security_context,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        });
    }
    pod
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerStatus, PersistentVolumeClaimVolumeSource, PodSpec, Volume,
    };
    use kube::api::ObjectMeta;

    fn pod(ns: &str, name: &str, claims: &[&str]) -> Pod {
        Pod {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                managed_fields: Some(vec![Default::default()]),
                ..Default::default()
            },
            spec: Some(PodSpec {
                volumes: Some(
                    claims
                        .iter()
                        .map(|c| Volume {
                            name: format!("v-{c}"),
                            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                                claim_name: c.to_string(),
                                read_only: None,
                            }),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                container_statuses: Some(vec![ContainerStatus::default()]),
                ..Default::default()
            }),
        }
    }

    fn names(found: Option<Vec<Arc<Pod>>>) -> Vec<String> {
        found.expect("ready").iter().map(|p| p.name_any()).collect()
    }

    fn listed(pods: Vec<Pod>) -> Mounts {
        let mounts = Mounts::default();
        mounts.apply(&Event::Init);
        for p in pods {
            mounts.apply(&Event::InitApply(p));
        }
        mounts.apply(&Event::InitDone);
        mounts
    }

    #[test]
    fn a_controlled_pod_keeps_what_decisions_read_and_a_bare_pod_stays_whole() {
        use k8s_openapi::api::core::v1::{PodSecurityContext, SecurityContext, Toleration};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
        let full = |controlled: bool| {
            let mut p = pod("a", "web", &["data"]);
            if controlled {
                p.metadata.owner_references = Some(vec![OwnerReference {
                    kind: "ReplicaSet".into(),
                    name: "web-1".into(),
                    controller: Some(true),
                    ..Default::default()
                }]);
            }
            let spec = p.spec.as_mut().unwrap();
            spec.node_name = Some("n1".into());
            spec.security_context = Some(PodSecurityContext {
                fs_group: Some(1000),
                ..Default::default()
            });
            spec.tolerations = Some(vec![Toleration {
                key: Some("dedicated".into()),
                ..Default::default()
            }]);
            spec.containers = vec![Container {
                name: "app".into(),
                image: Some("shop:1".into()),
                security_context: Some(SecurityContext {
                    run_as_user: Some(7),
                    ..Default::default()
                }),
                ..Default::default()
            }];
            p
        };
        let kept = trimmed(full(true));
        let spec = kept.spec.as_ref().unwrap();
        let original = full(true).spec.unwrap();
        assert_eq!(spec.volumes, original.volumes);
        assert_eq!(spec.node_name, original.node_name);
        assert_eq!(spec.security_context, original.security_context);
        assert_eq!(spec.tolerations, original.tolerations);
        assert_eq!(spec.containers[0].name, "app");
        assert_eq!(
            spec.containers[0].security_context,
            original.containers[0].security_context
        );
        assert_eq!(spec.containers[0].image, None, "not read, not kept");
        assert!(mounts_claim(&kept, "data"));
        assert_eq!(kept.metadata.managed_fields, None);

        let bare = trimmed(full(false));
        assert_eq!(bare.spec, full(false).spec, "its manifest brings it back");
    }

    #[test]
    fn knows_nothing_before_the_first_list_is_done() {
        let mounts = Mounts::default();
        mounts.apply(&Event::Init);
        mounts.apply(&Event::InitApply(pod("a", "web", &["data"])));
        assert!(mounts.mounting("a", &["data"]).is_none());
        mounts.apply(&Event::InitDone);
        assert_eq!(names(mounts.mounting("a", &["data"])), ["web"]);
    }

    #[test]
    fn files_pods_under_each_claim_of_their_namespace_only() {
        let mounts = listed(vec![
            pod("a", "web", &["data", "logs"]),
            pod("a", "job", &["logs"]),
            pod("b", "web", &["data"]),
            pod("a", "plain", &[]),
        ]);
        assert_eq!(names(mounts.mounting("a", &["data"])), ["web"]);
        assert_eq!(names(mounts.mounting("a", &["logs"])), ["job", "web"]);
        assert_eq!(
            names(mounts.mounting("a", &["data", "logs"])),
            ["job", "web"]
        );
        assert_eq!(names(mounts.mounting("b", &["logs"])), Vec::<String>::new());
        assert_eq!(mounts.len(), 3, "a pod without claims is not kept");
    }

    #[test]
    fn follows_changes_and_deletions() {
        let mounts = listed(vec![pod("a", "web", &["data"])]);
        mounts.apply(&Event::Apply(pod("a", "web", &["other"])));
        assert!(names(mounts.mounting("a", &["data"])).is_empty());
        assert_eq!(names(mounts.mounting("a", &["other"])), ["web"]);
        mounts.apply(&Event::Delete(pod("a", "web", &["other"])));
        assert!(names(mounts.mounting("a", &["other"])).is_empty());
        assert!(mounts.is_empty());
    }

    #[test]
    fn a_relist_drops_pods_deleted_while_the_watch_was_down() {
        let mounts = listed(vec![
            pod("a", "gone", &["data"]),
            pod("a", "kept", &["data"]),
        ]);
        mounts.apply(&Event::Init);
        mounts.apply(&Event::InitApply(pod("a", "kept", &["data"])));
        // Until the relist is done, the last complete view answers.
        assert_eq!(names(mounts.mounting("a", &["data"])), ["gone", "kept"]);
        mounts.apply(&Event::InitDone);
        assert_eq!(names(mounts.mounting("a", &["data"])), ["kept"]);
    }

    #[test]
    fn a_finished_pod_mounts_nothing() {
        let mut done = pod("a", "job-1", &["data"]);
        done.status.as_mut().unwrap().phase = Some("Succeeded".into());
        let mounts = listed(vec![done, pod("a", "web", &["data"])]);
        assert_eq!(names(mounts.mounting("a", &["data"])), ["web"]);
        let mut failed = pod("a", "web", &["data"]);
        failed.status.as_mut().unwrap().phase = Some("Failed".into());
        mounts.apply(&Event::Apply(failed));
        assert!(names(mounts.mounting("a", &["data"])).is_empty());
    }

    #[test]
    fn keeps_only_what_decisions_read() {
        let mounts = listed(vec![pod("a", "web", &["data"])]);
        let kept = &mounts.mounting("a", &["data"]).unwrap()[0];
        assert!(kept.metadata.managed_fields.is_none());
        let status = kept.status.as_ref().unwrap();
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert!(status.container_statuses.is_none());
        assert!(kept.spec.is_some());
    }
}

//! Which workloads' pod templates mount claims, kept up to date from a watch of each
//! kind that has a pod template.
//!
//! A volume that starts looks for its consumers again (some may have come since the
//! restore was validated), and a workload at 0 replicas or a CronJob between runs is
//! found only by its pod template. Listing the seven kinds in the volume's namespace
//! each time cost seven requests per volume at the default parallelism, where volumes
//! start a few at a time all through the restore; a ReplicaSet's owners, read to walk a
//! pod up to its Deployment, one more. Answered from the watches the controller keeps,
//! they cost none. Only workloads whose template mounts a claim are kept, shaped as
//! [`Listed`] (what deciding about them reads), so memory follows the workloads that
//! matter, not the cluster.

use std::collections::BTreeMap;
use std::sync::RwLock;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::DynamicObject;
use kube::runtime::watcher::Event;

use crate::api::{ConsumerKind, GitOpsSpec};
use crate::plan::{Listed, Workload};

/// What is kept of a workload whose pod template mounts a claim: the [`Workload`] a
/// consumer is held as (its template as text, a few hundred bytes), and what finding
/// its managers and walking owners up to it read.
struct Kept {
    workload: Workload,
    /// A consumer of its own (see [`Listed::is_top`]).
    top: bool,
    uid: Option<String>,
    owners: Box<[OwnerReference]>,
    /// The replicas its spec sets now (a stop's 0 included), where [`Workload`] holds
    /// those it asks for: what tells a stopped workload that was scaled back.
    spec_replicas: Option<i32>,
    /// Its labels, and the annotations a decision reads: a restore's own GitOps spec
    /// (the label Argo CD tracks with) says which of them name its managers. Held as
    /// slices, made maps again when asked for: a map's first node takes room for eleven
    /// entries, and a workload has a handful.
    labels: Option<Pairs>,
    annotations: Option<Pairs>,
}

type Pairs = Box<[(String, String)]>;

fn pairs(map: &BTreeMap<String, String>) -> Pairs {
    map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

fn map(pairs: &Option<Pairs>) -> Option<BTreeMap<String, String>> {
    pairs.as_ref().map(|p| p.iter().cloned().collect())
}

impl Kept {
    /// None for a workload whose template mounts no claim.
    fn of(kind: ConsumerKind, object: &DynamicObject) -> Option<Kept> {
        let mut listed: Listed = serde_json::from_value(object.data.clone()).ok()?;
        if listed.mounts_no_claim(kind) {
            return None;
        }
        let meta = &object.metadata;
        let annotations: Option<BTreeMap<String, String>> = meta.annotations.as_ref().map(|all| {
            all.iter()
                .filter(|(key, _)| Listed::ANNOTATIONS_READ.contains(&key.as_str()))
                .map(|(key, value)| (key.clone(), value.clone()))
                .collect()
        });
        listed.metadata.name = meta.name.clone();
        listed.metadata.owner_references = meta.owner_references.clone();
        listed.metadata.annotations = annotations.clone();
        let top = listed.is_top(kind);
        let spec_replicas = listed.spec_replicas();
        Some(Kept {
            // Its managers are found again for each restore's GitOps spec.
            workload: listed.into_workload(kind, &GitOpsSpec::default()),
            top,
            uid: meta.uid.clone(),
            owners: meta.owner_references.clone().unwrap_or_default().into(),
            spec_replicas,
            labels: meta.labels.as_ref().map(pairs),
            annotations: annotations.as_ref().map(pairs),
        })
    }
}

/// One kind's workloads that mount claims, by namespace and name: one map, not one per
/// namespace, whose first node would take room for eleven workloads where most
/// namespaces have one.
#[derive(Default)]
struct Index {
    by_name: BTreeMap<(String, String), Kept>,
}

impl Index {
    fn insert(&mut self, kind: ConsumerKind, object: &DynamicObject) {
        let meta = &object.metadata;
        let (Some(namespace), Some(name)) = (&meta.namespace, &meta.name) else {
            return;
        };
        let key = (namespace.clone(), name.clone());
        match Kept::of(kind, object) {
            Some(kept) => self.by_name.insert(key, kept),
            None => self.by_name.remove(&key),
        };
    }

    fn remove(&mut self, namespace: &str, name: &str) {
        self.by_name
            .remove(&(namespace.to_string(), name.to_string()));
    }

    fn in_namespace<'a>(&'a self, namespace: &'a str) -> impl Iterator<Item = &'a Kept> {
        self.by_name
            .range((namespace.to_string(), String::new())..)
            .take_while(move |((ns, _), _)| ns == namespace)
            .map(|(_, kept)| kept)
    }
}

#[derive(Default)]
struct KindState {
    live: Index,
    /// The index being rebuilt by a (re)list; it replaces `live` when the list is done,
    /// so workloads deleted while the watch was down do not linger.
    relisting: Option<Index>,
    /// Whether a first list completed: before that, the index knows nothing.
    ready: bool,
}

/// The shared index of every kind. Cheap to read from many reconciles at once.
#[derive(Default)]
pub(crate) struct TemplateMounts {
    kinds: RwLock<BTreeMap<ConsumerKind, KindState>>,
}

impl TemplateMounts {
    /// Folds one event of `kind`'s watch in.
    pub(crate) fn apply(&self, kind: ConsumerKind, event: &Event<DynamicObject>) {
        let mut kinds = self
            .kinds
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let state = kinds.entry(kind).or_default();
        match event {
            Event::Init => state.relisting = Some(Index::default()),
            Event::InitApply(object) => state
                .relisting
                .get_or_insert_with(Index::default)
                .insert(kind, object),
            Event::InitDone => {
                state.live = state.relisting.take().unwrap_or_default();
                state.ready = true;
            }
            Event::Apply(object) => state.live.insert(kind, object),
            Event::Delete(object) => {
                let meta = &object.metadata;
                if let (Some(namespace), Some(name)) = (&meta.namespace, &meta.name) {
                    state.live.remove(namespace, name);
                }
            }
        }
    }

    /// Whether every kind's first list completed.
    fn ready(kinds: &BTreeMap<ConsumerKind, KindState>) -> bool {
        crate::observe::workloads::TEMPLATE_KINDS
            .iter()
            .all(|kind| kinds.get(kind).is_some_and(|s| s.ready))
    }

    /// The workloads of `namespace` that are consumers of their own and whose pod
    /// templates mount a claim, their GitOps managers found with `git_ops`; None until
    /// every kind's first list is done, when only the API can answer.
    pub(crate) fn workloads(&self, namespace: &str, git_ops: &GitOpsSpec) -> Option<Vec<Workload>> {
        let kinds = self
            .kinds
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !Self::ready(&kinds) {
            return None;
        }
        let found = kinds
            .values()
            .flat_map(|state| state.live.in_namespace(namespace))
            .filter(|kept| kept.top)
            .map(|kept| {
                let mut workload = kept.workload.clone();
                workload.managed_by = crate::gitops::managers_marked(
                    map(&kept.labels).as_ref(),
                    map(&kept.annotations).as_ref(),
                    git_ops,
                );
                workload
            })
            .collect();
        Some(found)
    }

    /// The owner references of the ReplicaSet or Job `name` of `namespace` whose UID
    /// is `uid`, when the index holds it (its template mounts a claim, as the template
    /// of one whose pods mount a claim does); None when it does not know it.
    pub(crate) fn owners(
        &self,
        kind: ConsumerKind,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> Option<Vec<OwnerReference>> {
        self.with_kept(kind, namespace, name, |kept| {
            // A ReplicaSet made again under the same name is another object.
            (kept.uid.as_deref() == Some(uid)).then(|| kept.owners.to_vec())
        })
        .flatten()
    }

    /// Whether the watch last showed the scalable workload `kind` `namespace/name` as
    /// the stop of the restore with UID `uid` left it: at 0 replicas, under its mark.
    /// False when it cannot tell (a kind not stopped by scaling, a workload not kept).
    ///
    /// A stopped workload whose old pods linger is otherwise read from the API now and
    /// then until they go; where a slow control plane keeps thousands of them for
    /// minutes, those reads were most of a restore's requests. A watch that lags only
    /// tells a restart later: the volume waits while any pod mounts its claim.
    pub(crate) fn still_stopped_by(
        &self,
        kind: ConsumerKind,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> bool {
        if !kind.is_scalable() {
            return false;
        }
        self.with_kept(kind, namespace, name, |kept| {
            let marked = kept.annotations.as_ref().is_some_and(|pairs| {
                pairs
                    .iter()
                    .any(|(key, value)| key == crate::labels::QUIESCED_BY && value == uid)
            });
            marked && kept.spec_replicas == Some(0)
        })
        .unwrap_or(false)
    }

    /// What `read` says of the kept workload `kind` `namespace/name`; None when the
    /// index does not hold it.
    fn with_kept<T>(
        &self,
        kind: ConsumerKind,
        namespace: &str,
        name: &str,
        read: impl FnOnce(&Kept) -> T,
    ) -> Option<T> {
        let kinds = self
            .kinds
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let kept = kinds
            .get(&kind)?
            .live
            .by_name
            .get(&(namespace.to_string(), name.to_string()))?;
        Some(read(kept))
    }

    /// How many workloads are kept, of every kind.
    #[cfg(test)]
    fn len(&self) -> usize {
        let kinds = self
            .kinds
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        kinds.values().map(|s| s.live.by_name.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;

    fn object(name: &str, spec: serde_json::Value) -> DynamicObject {
        let mut object = DynamicObject {
            types: None,
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("shop".into()),
                uid: Some(format!("{name}-uid")),
                ..Default::default()
            },
            data: serde_json::json!({ "spec": spec }),
        };
        object.metadata.annotations = Some(BTreeMap::from([
            (
                "kubectl.kubernetes.io/last-applied-configuration".to_string(),
                "x".repeat(10_000),
            ),
            (
                crate::gitops::ARGO_CD_TRACKING_ID.to_string(),
                "shop:apps/Deployment:shop/db".into(),
            ),
        ]));
        object
    }

    fn mounting(claim: &str) -> serde_json::Value {
        serde_json::json!({
            "replicas": 2,
            "template": {"spec": {"volumes": [{"persistentVolumeClaim": {"claimName": claim}}]}}
        })
    }

    fn ready(index: &TemplateMounts) {
        for kind in crate::observe::workloads::TEMPLATE_KINDS {
            index.apply(kind, &Event::Init);
            index.apply(kind, &Event::InitDone);
        }
    }

    #[test]
    fn answers_only_once_every_kind_was_listed() {
        let index = TemplateMounts::default();
        assert!(index.workloads("shop", &GitOpsSpec::default()).is_none());
        index.apply(ConsumerKind::Deployment, &Event::Init);
        index.apply(ConsumerKind::Deployment, &Event::InitDone);
        assert!(
            index.workloads("shop", &GitOpsSpec::default()).is_none(),
            "the other kinds are not listed yet"
        );
        ready(&index);
        assert_eq!(
            index.workloads("shop", &GitOpsSpec::default()),
            Some(Vec::new())
        );
    }

    #[test]
    fn tells_a_workload_still_stopped_only_at_zero_under_the_restores_mark() {
        let index = TemplateMounts::default();
        ready(&index);
        let stopped = |name: &str, replicas: i32, holder: &str| {
            let mut spec = mounting("data");
            spec["replicas"] = replicas.into();
            let mut db = object(name, spec);
            db.metadata
                .annotations
                .get_or_insert_default()
                .insert(crate::labels::QUIESCED_BY.to_string(), holder.to_string());
            db
        };
        let apply = |kind, object| index.apply(kind, &Event::Apply(object));
        apply(ConsumerKind::Deployment, stopped("db", 0, "r-1"));
        let still = |kind, name: &str, uid: &str| index.still_stopped_by(kind, "shop", name, uid);
        assert!(still(ConsumerKind::Deployment, "db", "r-1"));
        assert!(
            !still(ConsumerKind::Deployment, "db", "r-2"),
            "another restore's mark"
        );
        assert!(
            !still(ConsumerKind::StatefulSet, "db", "r-1"),
            "another kind"
        );
        assert!(!still(ConsumerKind::Deployment, "web", "r-1"), "not kept");

        apply(ConsumerKind::Deployment, stopped("db", 3, "r-1"));
        assert!(!still(ConsumerKind::Deployment, "db", "r-1"), "scaled back");
        apply(ConsumerKind::Deployment, object("db", mounting("data")));
        assert!(
            !still(ConsumerKind::Deployment, "db", "r-1"),
            "its mark went"
        );

        // A kind stopped otherwise than by scaling is never answered from the index.
        apply(ConsumerKind::DaemonSet, stopped("agent", 0, "r-1"));
        assert!(!still(ConsumerKind::DaemonSet, "agent", "r-1"));
    }

    #[test]
    fn keeps_the_workloads_that_mount_claims_as_they_change() {
        let index = TemplateMounts::default();
        ready(&index);
        let db = object("db", mounting("data"));
        index.apply(ConsumerKind::Deployment, &Event::Apply(db.clone()));
        index.apply(
            ConsumerKind::Deployment,
            &Event::Apply(object("web", serde_json::json!({"replicas": 1}))),
        );
        index.apply(
            ConsumerKind::StatefulSet,
            &Event::Apply(object(
                "pg",
                serde_json::json!({"volumeClaimTemplates": [{"metadata": {"name": "wal"}}]}),
            )),
        );
        assert_eq!(
            index.len(),
            2,
            "a workload mounting no claim is not kept; one making its own is"
        );
        let pg = index.workloads("shop", &GitOpsSpec::default()).unwrap();
        assert!(pg.iter().any(|w| w.name == "pg" && w.mounts("wal-pg-0")));
        index.apply(
            ConsumerKind::StatefulSet,
            &Event::Delete(object("pg", serde_json::json!({}))),
        );
        let found = index.workloads("shop", &GitOpsSpec::default()).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].name.as_str(), found[0].replicas), ("db", Some(2)));
        assert!(found[0].mounts("data"));
        assert_eq!(found[0].managed_by.len(), 1, "its tracking id is kept");
        assert!(
            index
                .workloads("other", &GitOpsSpec::default())
                .unwrap()
                .is_empty()
        );

        // Its template changed to mount nothing: it is no consumer any more.
        index.apply(
            ConsumerKind::Deployment,
            &Event::Apply(object("db", serde_json::json!({"replicas": 2}))),
        );
        assert_eq!(index.len(), 0);
        index.apply(ConsumerKind::Deployment, &Event::Apply(db.clone()));
        index.apply(ConsumerKind::Deployment, &Event::Delete(db));
        assert_eq!(index.len(), 0);
    }

    #[test]
    fn a_relist_drops_what_was_deleted_meanwhile() {
        let index = TemplateMounts::default();
        ready(&index);
        let kind = ConsumerKind::StatefulSet;
        index.apply(kind, &Event::Apply(object("db", mounting("data"))));
        index.apply(kind, &Event::Init);
        index.apply(kind, &Event::InitApply(object("cache", mounting("cache"))));
        assert_eq!(
            index.len(),
            1,
            "the live index answers until the list is done"
        );
        index.apply(kind, &Event::InitDone);
        let found = index.workloads("shop", &GitOpsSpec::default()).unwrap();
        let names: Vec<&str> = found.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(names, ["cache"]);
    }

    #[test]
    fn owned_workloads_answer_for_their_owners_only() {
        let index = TemplateMounts::default();
        ready(&index);
        let mut rs = object("db-5d9", mounting("data"));
        rs.metadata.owner_references = Some(vec![OwnerReference {
            kind: "Deployment".into(),
            name: "db".into(),
            controller: Some(true),
            ..Default::default()
        }]);
        index.apply(ConsumerKind::ReplicaSet, &Event::Apply(rs));
        assert!(
            index
                .workloads("shop", &GitOpsSpec::default())
                .unwrap()
                .is_empty(),
            "a Deployment's ReplicaSet is no consumer of its own"
        );
        let owners = index.owners(ConsumerKind::ReplicaSet, "shop", "db-5d9", "db-5d9-uid");
        assert_eq!(owners.unwrap()[0].name, "db");
        assert!(
            index
                .owners(ConsumerKind::ReplicaSet, "shop", "db-5d9", "an-older-uid")
                .is_none(),
            "another object of the same name"
        );
        assert!(
            index
                .owners(ConsumerKind::Job, "shop", "db-5d9", "db-5d9-uid")
                .is_none()
        );
    }

    #[test]
    fn what_no_decision_reads_is_not_kept() {
        let kept = Kept::of(ConsumerKind::Deployment, &object("db", mounting("data"))).unwrap();
        let annotations = kept.annotations.unwrap();
        let keys: Vec<&str> = annotations.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, [crate::gitops::ARGO_CD_TRACKING_ID]);
    }

    #[test]
    fn managers_follow_each_restore_s_own_gitops_spec() {
        let index = TemplateMounts::default();
        ready(&index);
        let mut db = object("db", mounting("data"));
        db.metadata.annotations = None;
        db.metadata.labels = Some(BTreeMap::from([(
            "app.kubernetes.io/instance".to_string(),
            "shop".to_string(),
        )]));
        index.apply(ConsumerKind::Deployment, &Event::Apply(db));
        let tracking_labels = GitOpsSpec {
            argo_cd_instance_label: Some("app.kubernetes.io/instance".into()),
            ..Default::default()
        };
        let found = index.workloads("shop", &tracking_labels).unwrap();
        assert_eq!(found[0].managed_by.len(), 1);
        let found = index.workloads("shop", &GitOpsSpec::default()).unwrap();
        assert!(found[0].managed_by.is_empty(), "the label alone names none");
    }
}

//! What a DataRestore will do, decided from facts read beforehand: no API calls here.
//!
//! The controller's Validating phase and `refill restore create --dry-run` both run
//! these functions, so a request is refused with the same words in both places.

mod backup;
mod consumers;
pub(crate) mod gitops;
mod placement;
mod selector;
pub(crate) mod spec;
mod switch;
mod volumes;
mod workload;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;

use crate::api::{
    Backup, ConsumerKind, DataRestoreSpec, GitOpsRecord, PodVolumeBackup, RestoreTarget,
};
use crate::gitops::GitOpsRef;

pub(crate) use backup::{BackupChoice, resolve_backup};
pub(crate) use consumers::{
    ConsumerRef, Owner, consumer_actions, mounts_claim, template_claim_names, top_owner,
};
pub(crate) use placement::{beside_original, beside_running_consumers, placement, pv_nodes};
pub(crate) use selector::{label_selector, parse_pvc_key};
pub(crate) use spec::{duration, spec_errors};
pub(crate) use switch::{Labelled, switches};
pub(crate) use volumes::{completed_by_pvc, select_volumes, selection_field};
pub(crate) use workload::{Listed, Workload, replicas_asked};

/// Everything validation needs, read from the cluster beforehand.
#[derive(Default, Debug, Clone)]
pub(crate) struct Facts {
    pub backup: Option<Backup>,
    pub pod_volume_backups: Vec<PodVolumeBackup>,
    /// Current PVCs by `namespace/name`.
    pub pvcs: BTreeMap<String, PersistentVolumeClaim>,
    /// The nodes each existing PV of a selected claim is pinned to, by PV name
    /// ([`placement::pv_nodes`]).
    pub pv_nodes: BTreeMap<String, Vec<String>>,
    pub storage_classes: BTreeMap<String, StorageClass>,
    pub nodes: BTreeSet<String>,
    /// PVCs held by another active DataRestore, with its name.
    pub held_by_others: BTreeMap<String, String>,
    /// Pods that mount each selected PVC now, resolved to the workload that owns them.
    pub consumers: BTreeMap<String, Vec<ConsumerRef>>,
    /// With spec.switchWorkloads: the workloads labelled to be switched, in the
    /// namespaces of the selected PVCs.
    pub labelled: Vec<Labelled>,
    /// The GitOps objects the consumers name, as read (spec.gitOps.policy Pause).
    pub git_ops: BTreeMap<GitOpsRef, gitops::ManagerSeen>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Plan {
    pub backup_name: String,
    pub volumes: Vec<PlannedVolume>,
    pub consumers: Vec<PlannedConsumer>,
    /// The GitOps objects managing consumers, and what becomes of each.
    pub git_ops: Vec<GitOpsRecord>,
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PlannedVolume {
    /// `namespace/name`.
    pub pvc: String,
    pub pvc_uid: Option<String>,
    pub pod_volume_backup: String,
    /// The pod volume's name at backup time; the stand-in pod uses it too.
    pub volume: String,
    pub snapshot_id: String,
    pub total_bytes: i64,
    pub uploader_type: Option<String>,
    pub placement: Placement,
}

/// Where the stand-in pod for a PVC may run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Placement {
    /// Bound claim with no node affinity, or a claim the scheduler may place anywhere.
    Anywhere,
    /// Bound to a PV; the scheduler follows its node affinity.
    BoundTo { pv: String, nodes: Vec<String> },
    /// Unbound WaitForFirstConsumer claim: only the user's candidate nodes.
    Candidates(Vec<String>),
    /// A ReadWriteOnce claim whose consumers keep running (consumers: None): the nodes
    /// their pods run on.
    BesideConsumers(Vec<String>),
    /// A new claim (target: NewClaim) beside a PVC whose volume is on these nodes: the
    /// copy is made where the workloads using the PVC can run.
    BesideOriginal(Vec<String>),
}

impl Placement {
    /// The nodes the stand-in pod is pinned to; empty when the scheduler chooses.
    pub(crate) fn pinned_nodes(&self) -> &[String] {
        match self {
            Placement::Candidates(nodes)
            | Placement::BesideConsumers(nodes)
            | Placement::BesideOriginal(nodes) => nodes,
            Placement::Anywhere | Placement::BoundTo { .. } => &[],
        }
    }

    /// The one node a bound volume is on, when its PV says so (a node-local volume):
    /// known from the start, so that a wait on that node is named even before any pod
    /// of the restore is placed.
    pub(crate) fn volume_node(&self) -> Option<&str> {
        match self {
            Placement::BoundTo { nodes, .. } if nodes.len() == 1 => Some(&nodes[0]),
            _ => None,
        }
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Placement::Anywhere => write!(f, "any node"),
            Placement::BoundTo { pv, nodes } if nodes.is_empty() => write!(f, "where PV {pv} is"),
            Placement::BoundTo { pv, nodes } => {
                write!(f, "node {} (PV {pv})", nodes.join(", "))
            }
            Placement::Candidates(nodes) => write!(f, "candidates {}", nodes.join(", ")),
            Placement::BesideConsumers(nodes) => {
                write!(f, "node {} (where its consumers run)", nodes.join(", "))
            }
            Placement::BesideOriginal(nodes) => {
                write!(f, "node {} (where the PVC's volume is)", nodes.join(", "))
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PlannedConsumer {
    pub kind: ConsumerKind,
    pub namespace: String,
    pub name: String,
    pub replicas: Option<i32>,
    pub pvcs: Vec<String>,
    pub action: ConsumerAction,
    /// With spec.switchWorkloads: the new claim it comes back on.
    pub switch_to: Option<String>,
    /// The GitOps objects that manage it.
    pub managed_by: Vec<GitOpsRef>,
}

impl PlannedConsumer {
    /// `Deployment shop/web`, as the status names consumers.
    pub(crate) fn describe(&self) -> String {
        self.kind.describe(&self.namespace, &self.name)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConsumerAction {
    ScaleToZero,
    DeletePod,
    ParkDaemonSet,
    SuspendCronJob,
    WaitForJob,
}

impl fmt::Display for ConsumerAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConsumerAction::ScaleToZero => "scale to 0",
            ConsumerAction::DeletePod => "delete, re-create afterwards",
            ConsumerAction::ParkDaemonSet => "park on no node",
            ConsumerAction::SuspendCronJob => "suspend",
            ConsumerAction::WaitForJob => "wait until it ends",
        })
    }
}

/// Why a request cannot go ahead. Each entry is a sentence meant for a person.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", errors.join("; "))]
pub(crate) struct Invalid {
    pub errors: Vec<String>,
}

impl Invalid {
    pub(crate) fn one(message: impl Into<String>) -> Self {
        Invalid {
            errors: vec![message.into()],
        }
    }
}

/// Said wherever a restore runs under its consumers (status warnings, the Warning
/// condition, an Event, the CLI).
pub(crate) const ONLINE_WARNING: &str = "spec.consumers is None: files are overwritten under applications that keep running; they may read half-restored files, and what they write meanwhile may be overwritten";

/// Checks everything before anything is touched, and decides what will happen.
/// `restore` is the DataRestore's name, which the claims made beside PVCs carry.
pub(crate) fn plan(spec: &DataRestoreSpec, restore: &str, facts: &Facts) -> Result<Plan, Invalid> {
    let backup = facts
        .backup
        .as_ref()
        .ok_or_else(|| Invalid::one("the backup was not resolved"))?;
    let backup_name = backup.metadata.name.clone().unwrap_or_default();
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    let new_claim = spec.target == RestoreTarget::NewClaim;
    let online = spec.writes_under_running_consumers();
    if online {
        warnings.push(ONLINE_WARNING.to_string());
    }

    let selected = select_volumes(spec, &backup_name, &facts.pod_volume_backups, &facts.pvcs)?;

    let mut volumes = Vec::new();
    for (pvc_key, pvb) in &selected {
        // A restore into a new claim writes nothing another restore writes.
        if let Some(other) = facts.held_by_others.get(pvc_key).filter(|_| !new_claim) {
            errors.push(format!(
                "{}: PVC {pvc_key} is already being restored by DataRestore {other}; wait until it ends, or leave this PVC out",
                selection_field(spec, pvc_key)
            ));
        }
        let pvc = &facts.pvcs[pvc_key];
        let candidates = spec.candidate_nodes.get(pvc_key).map(Vec::as_slice);
        let placed = placement(
            pvc_key,
            pvc,
            &facts.pv_nodes,
            &facts.storage_classes,
            candidates,
            &facts.nodes,
        )
        .and_then(|(placement, warning)| {
            // A claim beside the PVC (a new claim, or the scratch claim of a staged or
            // path restore) is filled where the PVC's volume is, so that what copies
            // from it into the PVC (the copier) or mounts it later can reach both.
            let beside = new_claim || spec.fills_scratch_first(pvc_key);
            let placement = if beside {
                beside_original(placement)
            } else {
                placement
            };
            if new_claim {
                return Ok((placement, warning));
            }
            if !online {
                return Ok((placement, warning));
            }
            let running = facts.consumers.get(pvc_key).map(Vec::as_slice);
            beside_running_consumers(pvc_key, pvc, placement, running.unwrap_or_default())
                .map(|placement| (placement, warning))
        });
        match placed {
            Ok((placement, warning)) => {
                warnings.extend(warning);
                let status = pvb.status.clone().unwrap_or_default();
                volumes.push(PlannedVolume {
                    pvc: pvc_key.clone(),
                    pvc_uid: pvc.metadata.uid.clone(),
                    pod_volume_backup: pvb.metadata.name.clone().unwrap_or_default(),
                    volume: pvb.spec.volume.clone(),
                    snapshot_id: status.snapshot_id.unwrap_or_default(),
                    total_bytes: status.progress.map(|p| p.total_bytes).unwrap_or_default(),
                    uploader_type: pvb.spec.uploader_type.clone(),
                    placement,
                })
            }
            Err(message) => errors.push(message),
        }
    }
    // Most often a misspelt PVC: the one meant would go without its candidates, or be
    // restored whole instead of its paths.
    for (field, key) in spec
        .candidate_nodes
        .keys()
        .map(|k| ("spec.candidateNodes", k))
        .chain(spec.pvc_paths.keys().map(|k| ("spec.pvcPaths", k)))
    {
        if !selected.iter().any(|(pvc, _)| pvc == key) {
            errors.push(format!(
                "{field}[\"{key}\"]: PVC {key} is not among the PVCs to restore; fix the key to name a selected PVC, or remove the entry"
            ));
        }
    }

    let selected_keys: Vec<String> = selected.iter().map(|(pvc, _)| pvc.clone()).collect();
    let switched = switches(
        spec,
        restore,
        &selected_keys,
        &facts.labelled,
        &facts.consumers,
    );
    errors.extend(switched.errors);
    warnings.extend(switched.warnings);
    let mut consumers = match consumer_actions(spec.consumer_policy(), &facts.consumers) {
        Ok(consumers) => consumers,
        Err(invalid) => {
            errors.extend(
                invalid
                    .errors
                    .into_iter()
                    .map(|e| format!("spec.consumers: {e}")),
            );
            Vec::new()
        }
    };
    consumers.extend(switched.consumers);
    let git_ops = gitops::decide(
        &spec.git_ops(),
        &gitops::managing(&consumers),
        &facts.git_ops,
    );
    errors.extend(git_ops.errors);
    warnings.extend(git_ops.warnings);

    if errors.is_empty() {
        Ok(Plan {
            backup_name,
            volumes,
            consumers,
            git_ops: git_ops.records,
            warnings,
        })
    } else {
        Err(Invalid { errors })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{
        PathRestore, PodVolumeBackupSpec, PodVolumeBackupStatus, PodVolumePhase, RestoreMethod,
    };
    use crate::labels::PVC_NAME_ANNOTATION;
    use k8s_openapi::api::core::v1::{
        NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, ObjectReference, PersistentVolume,
        PersistentVolumeClaimSpec, PersistentVolumeSpec, VolumeNodeAffinity,
    };

    /// Backup `b1` holding `shop/data`, which exists and is bound.
    fn facts() -> Facts {
        let mut pvb = PodVolumeBackup::new(
            "b1-0",
            PodVolumeBackupSpec {
                pod: ObjectReference {
                    namespace: Some("shop".into()),
                    name: Some("web-0".into()),
                    ..Default::default()
                },
                volume: "data".into(),
                ..Default::default()
            },
        );
        pvb.metadata.annotations = Some([(PVC_NAME_ANNOTATION.to_string(), "data".into())].into());
        pvb.status = Some(PodVolumeBackupStatus {
            phase: Some(PodVolumePhase::Completed),
            ..Default::default()
        });
        let mut pvc = PersistentVolumeClaim::default();
        pvc.metadata.name = Some("data".into());
        pvc.spec = Some(PersistentVolumeClaimSpec {
            volume_name: Some("pv-1".into()),
            ..Default::default()
        });
        Facts {
            backup: Some(Backup::new("b1", Default::default())),
            pod_volume_backups: vec![pvb],
            pvcs: [("shop/data".to_string(), pvc)].into(),
            ..Default::default()
        }
    }

    fn spec() -> DataRestoreSpec {
        DataRestoreSpec {
            backup_name: Some("b1".into()),
            pvcs: vec!["shop/data".into()],
            ..Default::default()
        }
    }

    /// `facts()` with the volume of shop/data a local PV on node-b.
    fn on_a_local_volume() -> Facts {
        let term = NodeSelectorTerm {
            match_expressions: Some(vec![NodeSelectorRequirement {
                key: "kubernetes.io/hostname".into(),
                operator: "In".into(),
                values: Some(vec!["node-b".into()]),
            }]),
            ..Default::default()
        };
        let pv = PersistentVolume {
            spec: Some(PersistentVolumeSpec {
                node_affinity: Some(VolumeNodeAffinity {
                    required: Some(NodeSelector {
                        node_selector_terms: vec![term],
                    }),
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut facts = facts();
        facts.pv_nodes.insert("pv-1".into(), pv_nodes(&pv));
        facts
    }

    /// `facts()` with shop/data unbound, of a WaitForFirstConsumer class, and node-a.
    fn unbound() -> Facts {
        let mut facts = facts();
        let pvc = facts.pvcs.get_mut("shop/data").unwrap();
        pvc.spec = Some(PersistentVolumeClaimSpec {
            storage_class_name: Some("local".into()),
            ..Default::default()
        });
        let class = StorageClass {
            volume_binding_mode: Some("WaitForFirstConsumer".into()),
            ..Default::default()
        };
        facts.storage_classes.insert("local".into(), class);
        facts.nodes.insert("node-a".into());
        facts
    }

    fn placed(spec: &DataRestoreSpec, facts: &Facts) -> Result<Placement, Invalid> {
        plan(spec, "r1", facts).map(|plan| plan.volumes[0].placement.clone())
    }

    #[test]
    fn a_staged_volume_is_filled_where_the_pvcs_volume_is_as_a_path_restore_is() {
        let facts = on_a_local_volume();
        let direct = placed(&spec(), &facts).unwrap();
        assert_eq!(
            direct,
            Placement::BoundTo {
                pv: "pv-1".into(),
                nodes: vec!["node-b".into()]
            }
        );
        let beside = Placement::BesideOriginal(vec!["node-b".into()]);
        let staged = DataRestoreSpec {
            method: RestoreMethod::Staged,
            ..spec()
        };
        assert_eq!(placed(&staged, &facts).unwrap(), beside);
        let paths = DataRestoreSpec {
            paths: Some(PathRestore {
                include: vec!["db".into()],
                ..Default::default()
            }),
            ..spec()
        };
        assert_eq!(placed(&paths, &facts).unwrap(), beside);
    }

    #[test]
    fn a_staged_unbound_wait_for_first_consumer_claim_needs_candidates_as_any() {
        let mut staged = DataRestoreSpec {
            method: RestoreMethod::Staged,
            ..spec()
        };
        let err = placed(&staged, &unbound()).unwrap_err();
        assert_eq!(err.errors.len(), 1, "{err}");
        assert!(
            err.errors[0].starts_with("spec.candidateNodes[\"shop/data\"]: missing"),
            "{err}"
        );
        staged.candidate_nodes = [("shop/data".to_string(), vec!["node-a".to_string()])].into();
        assert_eq!(
            placed(&staged, &unbound()).unwrap(),
            Placement::Candidates(vec!["node-a".into()])
        );
    }

    #[test]
    fn candidates_for_a_pvc_not_restored_are_refused() {
        assert!(plan(&spec(), "r1", &facts()).is_ok());
        let mut spec = spec();
        spec.candidate_nodes = [("shop/other".to_string(), vec!["node-a".to_string()])].into();
        let err = plan(&spec, "r1", &facts()).unwrap_err();
        assert_eq!(err.errors.len(), 1, "{err}");
        assert!(
            err.errors[0].starts_with("spec.candidateNodes[\"shop/other\"]: ")
                && err.errors[0].contains("not among the PVCs to restore"),
            "{err}"
        );
    }

    #[test]
    fn a_pvc_held_by_another_restore_names_its_entry() {
        let mut facts = facts();
        facts
            .held_by_others
            .insert("shop/data".into(), "earlier".into());
        let err = plan(&spec(), "r1", &facts).unwrap_err();
        assert!(
            err.errors[0].starts_with("spec.pvcs[0]: ")
                && err.errors[0].contains("already being restored by DataRestore earlier"),
            "{err}"
        );
    }

    #[test]
    fn consumer_refusals_name_the_consumers_field() {
        let mut facts = facts();
        facts.consumers.insert(
            "shop/data".into(),
            vec![ConsumerRef {
                namespace: "shop".into(),
                pod: Some("web-0".into()),
                node: None,
                owner: Owner::Known(ConsumerKind::Deployment, "web".into()),
                replicas: Some(1),
                template: None,
                managed_by: vec![],
            }],
        );
        let mut spec = spec();
        spec.consumers = crate::api::ConsumerPolicy::Refuse;
        let err = plan(&spec, "r1", &facts).unwrap_err();
        assert!(
            err.errors[0].starts_with("spec.consumers: ")
                && err.errors[0].contains("spec.consumers is Refuse, which forbids"),
            "{err}"
        );
    }
}

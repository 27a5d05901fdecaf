//! Who uses a PVC, and how each consumer is stopped.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use crate::api::{ConsumerKind, ConsumerPolicy};
use crate::gitops::GitOpsRef;

use super::{ConsumerAction, Invalid, PlannedConsumer};

/// The object at the top of a pod's owner chain, which is what holds the replica count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Owner {
    Known(ConsumerKind, String),
    /// Owned by something refill cannot stop (an operator's own kind, say).
    Unsupported {
        kind: String,
        name: String,
    },
    /// The stand-in pod of another DataRestore (`namespace/name`), which restores the
    /// claim now.
    StandIn {
        restore: String,
    },
}

/// A consumer of a PVC: a pod mounting it, resolved to its top owner, or a workload whose
/// pod template mounts it (even with no pod running now).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ConsumerRef {
    pub namespace: String,
    /// The pod found mounting the claim; None when found from a pod template.
    pub pod: Option<String>,
    /// The node that pod runs on, if it was scheduled.
    pub node: Option<String>,
    pub owner: Owner,
    /// Replicas of the owner now, for scalable kinds.
    pub replicas: Option<i32>,
    /// The pod template's spec, when found from a template: with no pod running, the
    /// stand-in takes the identity and tolerations a pod of the workload would have.
    /// Only those are kept of it (its security contexts and tolerations).
    pub template: Option<Box<PodSpec>>,
    /// The GitOps objects that manage the workload (or bare pod), from its marks.
    pub managed_by: Vec<GitOpsRef>,
}

impl ConsumerRef {
    /// How it was found, for messages: `pod shop/web-1 (Deployment web)`, or
    /// `the pod template of CronJob shop/nightly`.
    pub(crate) fn describe(&self) -> String {
        let ns = &self.namespace;
        let owner = match &self.owner {
            Owner::Known(kind, name) => format!("{kind:?} {name}"),
            Owner::Unsupported { kind, name } => format!("{kind} {name}"),
            Owner::StandIn { restore } => format!("stand-in of DataRestore {restore}"),
        };
        match &self.pod {
            Some(pod) => format!("pod {ns}/{pod} ({owner})"),
            None => format!("the pod template of {owner} in {ns}"),
        }
    }
}

/// A workload's pod template, given the workload as JSON.
fn pod_template(kind: ConsumerKind, workload: &serde_json::Value) -> &serde_json::Value {
    match kind {
        ConsumerKind::CronJob => &workload["spec"]["jobTemplate"]["spec"]["template"],
        _ => &workload["spec"]["template"],
    }
}

/// The claim each volume of a workload's pod template names, by the volume's index
/// (None for a volume of another kind), given the workload as JSON.
pub(crate) fn template_claim_names(
    kind: ConsumerKind,
    workload: &serde_json::Value,
) -> Vec<Option<&str>> {
    pod_template(kind, workload)["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| v["persistentVolumeClaim"]["claimName"].as_str())
        .collect()
}

fn controller_of(owners: &[OwnerReference]) -> Option<&OwnerReference> {
    owners.iter().find(|o| o.controller == Some(true))
}

/// Whether a pod mounts the claim and still runs (finished pods hold no volume).
pub(crate) fn mounts_claim(pod: &Pod, claim: &str) -> bool {
    let finished = matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded") | Some("Failed")
    );
    !finished
        && pod
            .spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten())
            .filter_map(|v| v.persistent_volume_claim.as_ref())
            .any(|c| c.claim_name == claim)
}

/// Walks a pod's owner chain. `owners_of(kind, name)` gives the owner references of an
/// intermediate object (a ReplicaSet or a Job), or None when it is gone.
pub(crate) fn top_owner(
    pod: &Pod,
    owners_of: impl Fn(&str, &str) -> Option<Vec<OwnerReference>>,
) -> Owner {
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let own = pod.metadata.owner_references.clone().unwrap_or_default();
    let Some(owner) = controller_of(&own) else {
        return Owner::Known(ConsumerKind::Pod, pod_name);
    };
    let name = owner.name.clone();
    let above = |kind: &str| {
        owners_of(kind, &name)
            .and_then(|refs| controller_of(&refs).cloned())
            .map(|o| (o.kind, o.name))
    };
    match owner.kind.as_str() {
        "ReplicaSet" => match above("ReplicaSet") {
            None => Owner::Known(ConsumerKind::ReplicaSet, name),
            Some((kind, parent)) if kind == "Deployment" => {
                Owner::Known(ConsumerKind::Deployment, parent)
            }
            Some((kind, parent)) => Owner::Unsupported { kind, name: parent },
        },
        "Job" => match above("Job") {
            None => Owner::Known(ConsumerKind::Job, name),
            Some((kind, parent)) if kind == "CronJob" => {
                Owner::Known(ConsumerKind::CronJob, parent)
            }
            Some((kind, parent)) => Owner::Unsupported { kind, name: parent },
        },
        "StatefulSet" => Owner::Known(ConsumerKind::StatefulSet, name),
        "ReplicationController" => Owner::Known(ConsumerKind::ReplicationController, name),
        "DaemonSet" => Owner::Known(ConsumerKind::DaemonSet, name),
        other => Owner::Unsupported {
            kind: other.to_string(),
            name,
        },
    }
}

fn action(kind: ConsumerKind) -> ConsumerAction {
    match kind {
        ConsumerKind::Deployment
        | ConsumerKind::StatefulSet
        | ConsumerKind::ReplicaSet
        | ConsumerKind::ReplicationController => ConsumerAction::ScaleToZero,
        ConsumerKind::DaemonSet => ConsumerAction::ParkDaemonSet,
        ConsumerKind::CronJob => ConsumerAction::SuspendCronJob,
        ConsumerKind::Job => ConsumerAction::WaitForJob,
        ConsumerKind::Pod => ConsumerAction::DeletePod,
    }
}

/// How each consumer is stopped under the policy; one entry per workload, however
/// many selected PVCs or pods lead to it.
pub(crate) fn consumer_actions(
    policy: ConsumerPolicy,
    consumers: &BTreeMap<String, Vec<ConsumerRef>>,
) -> Result<Vec<PlannedConsumer>, Invalid> {
    let mut errors = Vec::new();
    let mut planned: BTreeMap<(ConsumerKind, String, String), PlannedConsumer> = BTreeMap::new();
    for (pvc, refs) in consumers {
        for consumer in refs {
            let ns = &consumer.namespace;
            let (kind, name) = match &consumer.owner {
                Owner::Known(kind, name) => (*kind, name),
                // Left running, whatever owns it.
                Owner::Unsupported { .. } if policy == ConsumerPolicy::None => continue,
                Owner::Unsupported { .. } => {
                    errors.push(format!(
                        "PVC {pvc} is used by {}, which refill cannot stop; stop it yourself and retry",
                        consumer.describe()
                    ));
                    continue;
                }
                Owner::StandIn { restore } => {
                    errors.push(format!(
                        "PVC {pvc} is being restored by DataRestore {restore}; restore it again after that one ends"
                    ));
                    continue;
                }
            };
            let refused = match policy {
                // Left running: nothing to stop, nothing to refuse.
                ConsumerPolicy::None => continue,
                ConsumerPolicy::Refuse => {
                    Some("spec.consumers is Refuse, which forbids restoring a PVC in use")
                }
                ConsumerPolicy::ScaleDown
                    if matches!(kind, ConsumerKind::Pod | ConsumerKind::DaemonSet) =>
                {
                    Some(
                        "it cannot be scaled down; set spec.consumers to Detach (--consumers detach) to stop it: a bare pod is deleted and re-created, a DaemonSet parked on no node",
                    )
                }
                _ => None,
            };
            if let Some(why) = refused {
                errors.push(format!(
                    "PVC {pvc} is used by {}: {why}",
                    consumer.describe()
                ));
                continue;
            }
            let entry = planned
                .entry((kind, ns.clone(), name.clone()))
                .or_insert_with(|| PlannedConsumer {
                    kind,
                    namespace: ns.clone(),
                    name: name.clone(),
                    replicas: consumer.replicas,
                    pvcs: Vec::new(),
                    action: action(kind),
                    switch_to: None,
                    managed_by: Vec::new(),
                });
            if !entry.pvcs.contains(pvc) {
                entry.pvcs.push(pvc.clone());
            }
            for manager in &consumer.managed_by {
                if !entry.managed_by.contains(manager) {
                    entry.managed_by.push(manager.clone());
                }
            }
        }
    }
    if errors.is_empty() {
        Ok(planned.into_values().collect())
    } else {
        errors.dedup();
        Err(Invalid { errors })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PersistentVolumeClaimVolumeSource, PodSpec, Volume};

    fn owner_ref(kind: &str, name: &str) -> OwnerReference {
        OwnerReference {
            kind: kind.into(),
            name: name.into(),
            controller: Some(true),
            ..Default::default()
        }
    }

    fn pod(name: &str, owner: Option<(&str, &str)>, claim: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some(name.into());
        p.metadata.owner_references = owner.map(|(k, n)| vec![owner_ref(k, n)]);
        p.spec = Some(PodSpec {
            volumes: Some(vec![Volume {
                name: "data".into(),
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: claim.into(),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ..Default::default()
        });
        p
    }

    fn chain(kind: &str, name: &str) -> Option<Vec<OwnerReference>> {
        match (kind, name) {
            ("ReplicaSet", "web-7d9") => Some(vec![owner_ref("Deployment", "web")]),
            ("ReplicaSet", "rollout-1") => Some(vec![owner_ref("Rollout", "canary")]),
            ("Job", "backup-123") => Some(vec![owner_ref("CronJob", "backup")]),
            _ => Some(vec![]),
        }
    }

    #[test]
    fn owner_chains_end_at_the_object_holding_replicas() {
        let cases = [
            (
                Some(("ReplicaSet", "web-7d9")),
                Owner::Known(ConsumerKind::Deployment, "web".into()),
            ),
            (
                Some(("ReplicaSet", "lonely")),
                Owner::Known(ConsumerKind::ReplicaSet, "lonely".into()),
            ),
            (
                Some(("StatefulSet", "db")),
                Owner::Known(ConsumerKind::StatefulSet, "db".into()),
            ),
            (
                Some(("Job", "backup-123")),
                Owner::Known(ConsumerKind::CronJob, "backup".into()),
            ),
            (
                Some(("DaemonSet", "agent")),
                Owner::Known(ConsumerKind::DaemonSet, "agent".into()),
            ),
            (None, Owner::Known(ConsumerKind::Pod, "p".into())),
            (
                Some(("ReplicaSet", "rollout-1")),
                Owner::Unsupported {
                    kind: "Rollout".into(),
                    name: "canary".into(),
                },
            ),
        ];
        for (owner, want) in cases {
            assert_eq!(top_owner(&pod("p", owner, "c"), chain), want, "{owner:?}");
        }
    }

    #[test]
    fn finished_pods_do_not_hold_the_volume() {
        let mut p = pod("p", None, "data");
        assert!(mounts_claim(&p, "data"));
        assert!(!mounts_claim(&p, "other"));
        p.status = Some(k8s_openapi::api::core::v1::PodStatus {
            phase: Some("Succeeded".into()),
            ..Default::default()
        });
        assert!(!mounts_claim(&p, "data"));
    }

    fn consumer(pod: &str, owner: Owner, replicas: Option<i32>) -> ConsumerRef {
        ConsumerRef {
            namespace: "ns".into(),
            pod: Some(pod.into()),
            node: None,
            owner,
            replicas,
            template: None,
            managed_by: vec![],
        }
    }

    #[test]
    fn a_workload_is_planned_once_for_all_its_claims() {
        let sts = || Owner::Known(ConsumerKind::StatefulSet, "db".into());
        let consumers = [
            (
                "ns/data-db-0".to_string(),
                vec![consumer("db-0", sts(), Some(3))],
            ),
            (
                "ns/data-db-1".to_string(),
                vec![consumer("db-1", sts(), Some(3))],
            ),
        ]
        .into();
        let planned = consumer_actions(ConsumerPolicy::ScaleDown, &consumers).unwrap();
        assert_eq!(planned.len(), 1);
        assert_eq!(planned[0].pvcs, vec!["ns/data-db-0", "ns/data-db-1"]);
        assert_eq!(planned[0].replicas, Some(3));
        assert_eq!(planned[0].action, ConsumerAction::ScaleToZero);
    }

    #[test]
    fn policies_decide_what_may_be_stopped() {
        let bare = [(
            "ns/c".to_string(),
            vec![consumer(
                "p",
                Owner::Known(ConsumerKind::Pod, "p".into()),
                None,
            )],
        )]
        .into();
        let err = consumer_actions(ConsumerPolicy::ScaleDown, &bare).unwrap_err();
        assert!(
            err.errors[0].contains("cannot be scaled down; set spec.consumers to Detach"),
            "{err}"
        );
        let planned = consumer_actions(ConsumerPolicy::Detach, &bare).unwrap();
        assert_eq!(planned[0].action, ConsumerAction::DeletePod);

        let deploy = [(
            "ns/c".to_string(),
            vec![consumer(
                "w-1",
                Owner::Known(ConsumerKind::Deployment, "w".into()),
                Some(2),
            )],
        )]
        .into();
        let err = consumer_actions(ConsumerPolicy::Refuse, &deploy).unwrap_err();
        assert!(err.errors[0].contains("Refuse"), "{err}");
        // Left running: whatever they are, none is stopped and none refused.
        assert_eq!(consumer_actions(ConsumerPolicy::None, &deploy), Ok(vec![]));
        assert_eq!(consumer_actions(ConsumerPolicy::None, &bare), Ok(vec![]));

        let odd = [(
            "ns/c".to_string(),
            vec![consumer(
                "x",
                Owner::Unsupported {
                    kind: "Rollout".into(),
                    name: "r".into(),
                },
                None,
            )],
        )]
        .into();
        assert!(consumer_actions(ConsumerPolicy::Detach, &odd).is_err());

        let cron = [(
            "ns/c".to_string(),
            vec![ConsumerRef {
                pod: None,
                node: None,
                ..consumer(
                    "",
                    Owner::Known(ConsumerKind::CronJob, "nightly".into()),
                    None,
                )
            }],
        )]
        .into();
        let planned = consumer_actions(ConsumerPolicy::ScaleDown, &cron).unwrap();
        assert_eq!(
            planned[0].action,
            ConsumerAction::SuspendCronJob,
            "a CronJob is suspended, not refused"
        );

        let restoring = [(
            "ns/c".to_string(),
            vec![consumer(
                "refill-c-1",
                Owner::StandIn {
                    restore: "velero/first".into(),
                },
                None,
            )],
        )]
        .into();
        let err = consumer_actions(ConsumerPolicy::Detach, &restoring).unwrap_err();
        assert_eq!(
            err.errors,
            vec![
                "PVC ns/c is being restored by DataRestore velero/first; restore it again after that one ends"
            ],
            "never a hint to detach refill's own stand-in"
        );
    }
}

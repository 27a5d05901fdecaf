//! The stand-in pod: it mounts the PVC in place of the stopped consumers so the node
//! agent can reach the volume. In a whole-volume restore that deletes extra files it
//! also sets the volume's files aside before `restore-wait` and removes them after,
//! so that one pod serves the volume.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, Container, EmptyDirVolumeSource, NodeAffinity, NodeSelector, NodeSelectorRequirement,
    NodeSelectorTerm, PersistentVolumeClaimVolumeSource, Pod, PodSpec, PodStatus, Toleration,
    Volume,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::api::ConsumerSecurity;
use crate::controller::build::copier;
use crate::labels;

/// The idle container's image when the DataRestore names none: it only has to run.
pub const DEFAULT_IMAGE: &str = "registry.k8s.io/pause:3.10";
/// The stand-in's one container, which only holds the volume mounted.
pub(crate) const IDLE_CONTAINER: &str = "idle";

/// What a stand-in pod is made of.
pub struct StandIn<'a> {
    /// The pod's name.
    pub name: String,
    /// The PVC's namespace, where the pod runs.
    pub namespace: &'a str,
    /// The PVC the pod mounts.
    pub claim: &'a str,
    /// The pod volume's name, as in the backup: the node agent finds the volume by it.
    pub volume: &'a str,
    /// `namespace/name` of the DataRestore.
    pub restore_key: String,
    /// The DataRestore's UID.
    pub restore_uid: &'a str,
    /// Nodes the pod may run on; empty: wherever the scheduler puts it.
    pub candidate_nodes: &'a [String],
    /// The consumer's security contexts, so that the stand-in may write as it did.
    pub security: Option<&'a ConsumerSecurity>,
    /// The consumer's tolerations: its volume may be on a tainted node.
    pub tolerations: &'a [Toleration],
    /// The idle container's image.
    pub image: &'a str,
    /// Velero's restore-wait init container.
    pub restore_wait: Container,
    /// A whole-volume restore that deletes extra files: refill's set-aside init
    /// container, run before `restore-wait`, and its tidy container, run after it in
    /// place of the idle one.
    pub set_aside_and_tidy: Option<(Container, Container)>,
}

/// Never `nodeName`: that bypasses the scheduler, and an unbound WaitForFirstConsumer
/// claim would never bind. Required node affinity keeps the scheduler in charge.
pub(crate) fn candidate_affinity(nodes: &[String]) -> Option<Affinity> {
    (!nodes.is_empty()).then(|| Affinity {
        node_affinity: Some(NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_fields: Some(vec![NodeSelectorRequirement {
                        key: "metadata.name".into(),
                        operator: "In".into(),
                        values: Some(nodes.to_vec()),
                    }]),
                    ..Default::default()
                }],
            }),
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// The metadata of a pod refill makes for a restore: its role, the restore's UID (what
/// watches and "is it ours" go by) and the restore's `namespace/name`.
pub(crate) fn own_pod_metadata(
    name: String,
    namespace: &str,
    role: &str,
    restore_uid: &str,
    restore_key: String,
) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: Some(namespace.to_string()),
        labels: Some(BTreeMap::from([
            (labels::ROLE.to_string(), role.to_string()),
            (
                labels::DATA_RESTORE_UID.to_string(),
                restore_uid.to_string(),
            ),
        ])),
        annotations: Some(BTreeMap::from([(
            labels::DATA_RESTORE_ANNOTATION.to_string(),
            restore_key,
        )])),
        ..Default::default()
    }
}

/// Why a pod is not scheduled, when its conditions say.
pub fn unscheduled(status: &PodStatus) -> Option<String> {
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        .map(|c| c.message.clone().unwrap_or_else(|| "not scheduled".into()))
}

/// The stand-in pod of `s`.
pub fn pod(s: StandIn<'_>) -> Pod {
    let container_security = s.security.and_then(|c| c.container.clone());
    let idle = Container {
        name: IDLE_CONTAINER.into(),
        image: Some(s.image.to_string()),
        image_pull_policy: Some("IfNotPresent".into()),
        // The helper's requests and limits (Velero's settings): a namespace whose
        // quota asks every container for them admits the stand-in.
        resources: s.restore_wait.resources.clone(),
        security_context: container_security.or(s.restore_wait.security_context.clone()),
        ..Default::default()
    };
    let mut volumes = vec![Volume {
        name: s.volume.to_string(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: s.claim.to_string(),
            ..Default::default()
        }),
        ..Default::default()
    }];
    // Velero's node agent finds restore-wait by its name wherever it is among the init
    // containers, and starts once it runs (pod_volume_restore_controller.go,
    // getInitContainerIndex and isInitContainerRunning, alike in v1.14.0 and v1.18.1):
    // the set-aside may come before it. Once it exited, the data is in and the tidy runs.
    let (init_containers, containers) = match s.set_aside_and_tidy {
        Some((set_aside, tidy)) => {
            volumes.push(Volume {
                name: copier::STATE_VOLUME.into(),
                empty_dir: Some(EmptyDirVolumeSource {
                    size_limit: Some(Quantity("1Mi".into())),
                    ..Default::default()
                }),
                ..Default::default()
            });
            (vec![set_aside, s.restore_wait], vec![tidy])
        }
        None => (vec![s.restore_wait], vec![idle]),
    };
    Pod {
        metadata: own_pod_metadata(
            s.name,
            s.namespace,
            labels::ROLE_STAND_IN,
            s.restore_uid,
            s.restore_key,
        ),
        spec: Some(PodSpec {
            init_containers: Some(init_containers),
            containers,
            volumes: Some(volumes),
            security_context: s.security.and_then(|c| c.pod.clone()),
            affinity: candidate_affinity(s.candidate_nodes),
            tolerations: (!s.tolerations.is_empty()).then(|| s.tolerations.to_vec()),
            restart_policy: Some("Never".into()),
            termination_grace_period_seconds: Some(1),
            automount_service_account_token: Some(false),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSecurityContext, SecurityContext};

    fn stand_in<'a>(nodes: &'a [String], security: Option<&'a ConsumerSecurity>) -> StandIn<'a> {
        StandIn {
            name: "refill-data-abc".into(),
            namespace: "shop",
            claim: "data",
            volume: "vol",
            restore_key: "velero/r1".into(),
            restore_uid: "uid-1",
            candidate_nodes: nodes,
            security,
            tolerations: &[],
            image: DEFAULT_IMAGE,
            restore_wait: Container {
                name: "restore-wait".into(),
                security_context: Some(SecurityContext {
                    run_as_user: Some(1000),
                    ..Default::default()
                }),
                ..Default::default()
            },
            set_aside_and_tidy: None,
        }
    }

    #[test]
    fn candidates_become_required_affinity_never_node_name() {
        let nodes = vec!["node-b".to_string(), "node-c".to_string()];
        let pod = pod(stand_in(&nodes, None));
        let spec = pod.spec.unwrap();
        assert!(spec.node_name.is_none());
        let terms = spec
            .affinity
            .unwrap()
            .node_affinity
            .unwrap()
            .required_during_scheduling_ignored_during_execution
            .unwrap()
            .node_selector_terms;
        let req = &terms[0].match_fields.as_ref().unwrap()[0];
        assert_eq!(
            (req.key.as_str(), req.operator.as_str()),
            ("metadata.name", "In")
        );
        assert_eq!(req.values.as_ref().unwrap(), &nodes);
    }

    #[test]
    fn restore_wait_comes_first_and_the_claim_is_mounted() {
        let pod = pod(stand_in(&[], None));
        assert_eq!(
            pod.metadata.labels.unwrap()[labels::DATA_RESTORE_UID],
            "uid-1"
        );
        let spec = pod.spec.unwrap();
        assert!(spec.affinity.is_none());
        assert!(spec.tolerations.is_none());
        assert_eq!(spec.init_containers.unwrap()[0].name, "restore-wait");
        let volume = &spec.volumes.unwrap()[0];
        assert_eq!(volume.name, "vol");
        assert_eq!(
            volume.persistent_volume_claim.as_ref().unwrap().claim_name,
            "data"
        );
    }

    #[test]
    fn the_consumer_security_context_is_kept() {
        let security = ConsumerSecurity {
            pod: Some(PodSecurityContext {
                fs_group: Some(2000),
                run_as_user: Some(999),
                ..Default::default()
            }),
            container: Some(SecurityContext {
                run_as_user: Some(999),
                ..Default::default()
            }),
        };
        let spec = pod(stand_in(&[], Some(&security))).spec.unwrap();
        assert_eq!(spec.security_context.unwrap().fs_group, Some(2000));
        assert_eq!(
            spec.containers[0]
                .security_context
                .as_ref()
                .unwrap()
                .run_as_user,
            Some(999)
        );
    }

    #[test]
    fn the_consumer_tolerations_are_kept_so_it_runs_where_the_consumer_ran() {
        let tolerations = vec![Toleration {
            key: Some("dedicated".into()),
            operator: Some("Equal".into()),
            value: Some("db".into()),
            effect: Some("NoSchedule".into()),
            ..Default::default()
        }];
        let spec = pod(StandIn {
            tolerations: &tolerations,
            ..stand_in(&[], None)
        })
        .spec
        .unwrap();
        assert_eq!(spec.tolerations, Some(tolerations));
    }
}

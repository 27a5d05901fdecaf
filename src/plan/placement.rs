//! Where a PVC's stand-in pod may run.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;

use super::{ConsumerRef, Placement};

fn storage_class_name(pvc: &PersistentVolumeClaim) -> Option<&str> {
    pvc.spec.as_ref()?.storage_class_name.as_deref()
}

/// The PV the claim is bound to, or pre-bound to: once `spec.volumeName` is set the
/// volume is chosen, even while the binder has not caught up.
fn bound_volume(pvc: &PersistentVolumeClaim) -> Option<&str> {
    pvc.spec
        .as_ref()?
        .volume_name
        .as_deref()
        .filter(|v| !v.is_empty())
}

/// The values of node-affinity terms on `kubernetes.io/hostname`, which is how local
/// PVs say where they are. All a plan needs of a PV: validation keeps this and drops the
/// PV as it is read (a PV is a few KB, and a restore may select thousands).
pub(crate) fn pv_nodes(pv: &PersistentVolume) -> Vec<String> {
    let terms = pv
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
        .map(|r| r.node_selector_terms.clone())
        .unwrap_or_default();
    terms
        .iter()
        .flat_map(|t| t.match_expressions.iter().flatten())
        .filter(|e| e.key == "kubernetes.io/hostname" && e.operator == "In")
        .flat_map(|e| e.values.clone().unwrap_or_default())
        .collect()
}

/// Decides the placement, or explains why the PVC cannot be restored as asked.
/// The second value is a warning worth showing.
pub(crate) fn placement(
    key: &str,
    pvc: &PersistentVolumeClaim,
    pv_nodes: &BTreeMap<String, Vec<String>>,
    storage_classes: &BTreeMap<String, StorageClass>,
    candidates: Option<&[String]>,
    nodes: &BTreeSet<String>,
) -> Result<(Placement, Option<String>), String> {
    if let Some(pv_name) = bound_volume(pvc) {
        let nodes = pv_nodes.get(pv_name).cloned().unwrap_or_default();
        let warning = candidates.map(|_| {
            format!(
                "{key} is bound to PV {pv_name}; its candidate nodes are not needed and are ignored"
            )
        });
        return Ok((
            Placement::BoundTo {
                pv: pv_name.to_string(),
                nodes,
            },
            warning,
        ));
    }
    let class = storage_class_name(pvc);
    let wait_for_consumer = class
        .and_then(|c| storage_classes.get(c))
        .and_then(|sc| sc.volume_binding_mode.as_deref())
        == Some("WaitForFirstConsumer");
    if !wait_for_consumer {
        return Ok((
            Placement::Anywhere,
            Some(format!(
                "{key} is not bound yet; the stand-in pod waits until it is"
            )),
        ));
    }
    let candidates = candidates.unwrap_or_default();
    if candidates.is_empty() {
        return Err(format!(
            "spec.candidateNodes[\"{key}\"]: missing; PVC {key} is unbound and its StorageClass \"{}\" binds on first consumer: name the nodes its volume may be created on, or the volume could land where its workload can never run",
            class.unwrap_or_default()
        ));
    }
    let missing: Vec<&str> = candidates
        .iter()
        .filter(|n| !nodes.contains(n.as_str()))
        .map(String::as_str)
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "spec.candidateNodes[\"{key}\"]: these nodes do not exist: {}; name nodes of the cluster (kubectl get nodes)",
            missing.join(", ")
        ));
    }
    Ok((Placement::Candidates(candidates.to_vec()), None))
}

/// Where the stand-in of a new claim (target: NewClaim) runs, given where the PVC's own
/// stand-in would: on the nodes of a PVC's local volume, so the copy is where the
/// workloads that use the PVC can mount it; otherwise where the scheduler likes, or on
/// the user's candidates.
pub(crate) fn beside_original(original: Placement) -> Placement {
    match original {
        Placement::BoundTo { nodes, .. } if !nodes.is_empty() => Placement::BesideOriginal(nodes),
        Placement::Candidates(nodes) => Placement::Candidates(nodes),
        _ => Placement::Anywhere,
    }
}

/// With consumers left running (consumers: None), the stand-in must share the claim
/// with their pods: a ReadWriteOnce volume is attached to one node at a time, so the
/// stand-in goes where they run; a ReadWriteOncePod volume admits no second pod at all.
pub(crate) fn beside_running_consumers(
    key: &str,
    pvc: &PersistentVolumeClaim,
    placement: Placement,
    consumers: &[ConsumerRef],
) -> Result<Placement, String> {
    let modes = pvc
        .spec
        .as_ref()
        .and_then(|s| s.access_modes.clone())
        .unwrap_or_default();
    let pods: Vec<&ConsumerRef> = consumers.iter().filter(|c| c.pod.is_some()).collect();
    if pods.is_empty() {
        return Ok(placement);
    }
    if modes.iter().any(|m| m == "ReadWriteOncePod") {
        return Err(format!(
            "spec.consumers: PVC {key} is ReadWriteOncePod and mounted by {}, so no stand-in pod can mount it while that runs; leave spec.consumers out to stop it during the restore",
            pods[0].describe()
        ));
    }
    let shared = modes
        .iter()
        .any(|m| m == "ReadWriteMany" || m == "ReadOnlyMany");
    let mut nodes: Vec<String> = pods.iter().filter_map(|c| c.node.clone()).collect();
    nodes.sort();
    nodes.dedup();
    // A PV's own node affinity already says where.
    let pinned = matches!(&placement, Placement::BoundTo { nodes, .. } if !nodes.is_empty())
        || matches!(placement, Placement::BesideOriginal(_));
    Ok(if pinned || shared || nodes.is_empty() {
        placement
    } else {
        Placement::BesideConsumers(nodes)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PersistentVolumeClaimSpec,
        PersistentVolumeClaimStatus, PersistentVolumeSpec, VolumeNodeAffinity,
    };

    fn pvc(class: &str, bound_to: Option<&str>) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            spec: Some(PersistentVolumeClaimSpec {
                storage_class_name: Some(class.into()),
                volume_name: bound_to.map(Into::into),
                ..Default::default()
            }),
            status: Some(PersistentVolumeClaimStatus {
                phase: Some(
                    if bound_to.is_some() {
                        "Bound"
                    } else {
                        "Pending"
                    }
                    .into(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn classes() -> BTreeMap<String, StorageClass> {
        let class = |mode: &str| StorageClass {
            volume_binding_mode: Some(mode.into()),
            ..Default::default()
        };
        let (wffc, immediate) = (class("WaitForFirstConsumer"), class("Immediate"));
        [("local".to_string(), wffc), ("fast".to_string(), immediate)].into()
    }

    /// The nodes a local PV on `node` is pinned to, as validation keeps them.
    fn local_pv(node: &str) -> Vec<String> {
        pv_nodes(&PersistentVolume {
            spec: Some(PersistentVolumeSpec {
                node_affinity: Some(VolumeNodeAffinity {
                    required: Some(NodeSelector {
                        node_selector_terms: vec![NodeSelectorTerm {
                            match_expressions: Some(vec![NodeSelectorRequirement {
                                key: "kubernetes.io/hostname".into(),
                                operator: "In".into(),
                                values: Some(vec![node.into()]),
                            }]),
                            ..Default::default()
                        }],
                    }),
                }),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    fn nodes() -> BTreeSet<String> {
        ["node-a", "node-b"].map(String::from).into()
    }

    #[test]
    fn bound_claims_follow_their_volume() {
        let pvs = [("pv-1".to_string(), local_pv("node-b"))].into();
        let (placement, warning) = placement(
            "ns/db",
            &pvc("local", Some("pv-1")),
            &pvs,
            &classes(),
            None,
            &nodes(),
        )
        .unwrap();
        assert_eq!(
            placement,
            Placement::BoundTo {
                pv: "pv-1".into(),
                nodes: vec!["node-b".into()]
            }
        );
        assert!(warning.is_none());
        assert_eq!(placement.volume_node(), Some("node-b"));
        let network = Placement::BoundTo {
            pv: "pv-2".into(),
            nodes: vec![],
        };
        assert_eq!(network.volume_node(), None);
        assert_eq!(Placement::Anywhere.volume_node(), None);
    }

    #[test]
    fn a_pre_bound_claim_counts_as_bound() {
        let mut claim = pvc("local", Some("pv-1"));
        claim.status = None;
        let pvs = [("pv-1".to_string(), local_pv("node-a"))].into();
        let (placement, _) = placement("ns/db", &claim, &pvs, &classes(), None, &nodes()).unwrap();
        assert!(matches!(placement, Placement::BoundTo { .. }));
    }

    #[test]
    fn unbound_wait_for_first_consumer_needs_existing_candidates() {
        let none = BTreeMap::new();
        let err = placement(
            "ns/db",
            &pvc("local", None),
            &none,
            &classes(),
            None,
            &nodes(),
        )
        .unwrap_err();
        assert!(err.contains("candidateNodes[\"ns/db\"]"), "{err}");
        let ghost = vec!["node-z".to_string()];
        let err = placement(
            "ns/db",
            &pvc("local", None),
            &none,
            &classes(),
            Some(&ghost),
            &nodes(),
        )
        .unwrap_err();
        assert!(err.contains("do not exist: node-z"), "{err}");
        let good = vec!["node-a".to_string()];
        let (placement, _) = placement(
            "ns/db",
            &pvc("local", None),
            &none,
            &classes(),
            Some(&good),
            &nodes(),
        )
        .unwrap();
        assert_eq!(placement, Placement::Candidates(good));
    }

    #[test]
    fn unbound_immediate_claims_go_anywhere_with_a_warning() {
        let (placement, warning) = placement(
            "ns/db",
            &pvc("fast", None),
            &BTreeMap::new(),
            &classes(),
            None,
            &nodes(),
        )
        .unwrap();
        assert_eq!(placement, Placement::Anywhere);
        assert!(warning.is_some());
    }

    #[test]
    fn running_consumers_keep_the_stand_in_beside_them() {
        use crate::api::ConsumerKind;
        use crate::plan::Owner;
        let running = |node: &str| ConsumerRef {
            namespace: "shop".into(),
            pod: Some(format!("web-{node}")),
            node: Some(node.into()),
            owner: Owner::Known(ConsumerKind::Deployment, "web".into()),
            replicas: Some(1),
            template: None,
            managed_by: vec![],
        };
        let claim = |mode: &str| {
            let mut claim = pvc("fast", Some("pv-1"));
            claim.spec.as_mut().unwrap().access_modes = Some(vec![mode.into()]);
            claim
        };
        let anywhere = || Placement::BoundTo {
            pv: "pv-1".into(),
            nodes: vec![],
        };
        let beside = |mode: &str, consumers: &[ConsumerRef]| {
            beside_running_consumers("shop/data", &claim(mode), anywhere(), consumers)
        };
        // Attached to one node at a time: where the app runs.
        assert_eq!(
            beside("ReadWriteOnce", &[running("node-b")]),
            Ok(Placement::BesideConsumers(vec!["node-b".into()]))
        );
        // Any node may mount it; and with no pod running there is nothing to follow.
        assert_eq!(
            beside("ReadWriteMany", &[running("node-b")]),
            Ok(anywhere())
        );
        assert_eq!(beside("ReadWriteOnce", &[]), Ok(anywhere()));
        // A local PV already says where.
        let local = Placement::BoundTo {
            pv: "pv-1".into(),
            nodes: vec!["node-a".into()],
        };
        let kept = beside_running_consumers(
            "shop/data",
            &claim("ReadWriteOnce"),
            local.clone(),
            &[running("node-a")],
        );
        assert_eq!(kept, Ok(local));
        // One pod only: the stand-in could never start.
        let refused = beside("ReadWriteOncePod", &[running("node-b")]).unwrap_err();
        assert!(
            refused.starts_with("spec.consumers: PVC shop/data is ReadWriteOncePod")
                && refused.contains("pod shop/web-node-b"),
            "{refused}"
        );
    }
}

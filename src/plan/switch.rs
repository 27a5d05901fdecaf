//! Which workloads a `switchWorkloads` restore moves onto its new claims, decided from
//! the workloads labelled [`labels::SWITCH_CLAIM`]. Pure.
//!
//! A workload is switched by its pod template: it is scaled to zero, waited for, and
//! scaled back with the template naming the new claim. So only the scalable kinds
//! whose template names the claim among its volumes can be switched; a StatefulSet's
//! claims from volumeClaimTemplates cannot, since those templates are immutable.

use std::collections::BTreeMap;

use crate::api::{ConsumerKind, DataRestoreSpec, RestoreTarget};
use crate::labels;

use super::{ConsumerAction, ConsumerRef, Owner, PlannedConsumer};

const FIELD: &str = "spec.switchWorkloads";

/// A workload that carries [`labels::SWITCH_CLAIM`], as validation read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Labelled {
    pub kind: ConsumerKind,
    pub namespace: String,
    pub name: String,
    /// The claim the label names.
    pub claim: String,
    /// Its pod template names the claim among its volumes.
    pub mounts_by_name: bool,
    /// Controlled by another workload (a Deployment's ReplicaSet): that one is switched.
    pub owned: bool,
    /// `spec.replicas`, for the scalable kinds.
    pub replicas: Option<i32>,
    /// [`labels::SWITCHED_FROM`]: a restore switched it before, from this claim.
    pub switched_from: Option<String>,
}

/// What switching means for the selected claims `selected` (`namespace/name`).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Switches {
    pub consumers: Vec<PlannedConsumer>,
    pub errors: Vec<String>,
    pub warnings: Vec<String>,
}

/// The workloads to switch, each with the new claim it gets, and what is refused or
/// worth a warning. `restore` names the new claims ([`labels::new_claim_name`]);
/// `consumers` are the claims' consumers as validation found them.
pub(crate) fn switches(
    spec: &DataRestoreSpec,
    restore: &str,
    selected: &[String],
    labelled: &[Labelled],
    consumers: &BTreeMap<String, Vec<ConsumerRef>>,
) -> Switches {
    let mut out = Switches::default();
    if !spec.switch_workloads || spec.target != RestoreTarget::NewClaim {
        return out;
    }
    for pvc in selected {
        let (ns, claim) = pvc.split_once('/').unwrap_or(("", pvc));
        if claim.len() > 63 {
            out.errors.push(format!(
                "{FIELD}: the name of PVC {pvc} is longer than a label value may be (63 characters), so no workload can name it in {}; restore it without spec.switchWorkloads and point the workloads at its new claim yourself",
                labels::SWITCH_CLAIM
            ));
            continue;
        }
        let new_claim = labels::new_claim_name(claim, restore);
        let mine: Vec<&Labelled> = labelled
            .iter()
            .filter(|l| l.namespace == ns && l.claim == claim && !l.owned)
            .collect();
        if mine.is_empty() {
            out.warnings.push(format!(
                "{FIELD}: no workload in namespace {ns} carries the label {}={claim}, so none is switched onto the new claim {new_claim} of PVC {pvc}",
                labels::SWITCH_CLAIM
            ));
        }
        for workload in &mine {
            match refusal(workload) {
                Some(why) => out.errors.push(format!(
                    "{FIELD}: {:?} {ns}/{} carries the label {}={claim}, but {why}",
                    workload.kind,
                    workload.name,
                    labels::SWITCH_CLAIM
                )),
                None => out.consumers.push(PlannedConsumer {
                    kind: workload.kind,
                    namespace: ns.to_string(),
                    name: workload.name.clone(),
                    replicas: workload.replicas,
                    pvcs: vec![pvc.clone()],
                    action: ConsumerAction::ScaleToZero,
                    switch_to: Some(new_claim.clone()),
                    managed_by: Vec::new(),
                }),
            }
        }
        // The claim's other consumers keep it, and are better named than surprising.
        let switched =
            |kind: ConsumerKind, name: &str| mine.iter().any(|l| l.kind == kind && l.name == name);
        let mut staying: Vec<String> = consumers
            .get(pvc)
            .into_iter()
            .flatten()
            .filter_map(|c| match &c.owner {
                Owner::Known(kind, name) if !switched(*kind, name) => {
                    Some(format!("{kind:?} {ns}/{name}"))
                }
                Owner::Unsupported { kind, name } => Some(format!("{kind} {ns}/{name}")),
                _ => None,
            })
            .collect();
        staying.sort();
        staying.dedup();
        if !staying.is_empty() {
            out.warnings.push(format!(
                "{FIELD}: these consumers of PVC {pvc} carry no label {}={claim}, so they stay on it, running: {}",
                labels::SWITCH_CLAIM,
                staying.join(", ")
            ));
        }
    }
    out
}

/// Why a labelled workload cannot be switched, if it cannot.
fn refusal(workload: &Labelled) -> Option<String> {
    let claim = &workload.claim;
    if !workload.kind.is_scalable() {
        return Some(
            "only Deployments, StatefulSets, ReplicaSets and ReplicationControllers are switched (scaled to zero, then back on the new claim); remove the label and point it at the new claim yourself".to_string(),
        );
    }
    if workload.mounts_by_name {
        return None;
    }
    let before = match &workload.switched_from {
        Some(from) => format!(
            " (a restore switched it from PVC {from} already, see its annotation {})",
            labels::SWITCHED_FROM
        ),
        None => String::new(),
    };
    let stateful = if workload.kind == ConsumerKind::StatefulSet {
        "; a claim from volumeClaimTemplates cannot be switched"
    } else {
        ""
    };
    Some(format!(
        "its pod template does not name PVC {claim} among its volumes{before}{stateful}; remove the label, or fix it to name the claim the template mounts"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labelled(kind: ConsumerKind, name: &str, claim: &str) -> Labelled {
        Labelled {
            kind,
            namespace: "shop".into(),
            name: name.into(),
            claim: claim.into(),
            mounts_by_name: true,
            owned: false,
            replicas: Some(2),
            switched_from: None,
        }
    }

    fn spec() -> DataRestoreSpec {
        DataRestoreSpec {
            target: RestoreTarget::NewClaim,
            switch_workloads: true,
            ..Default::default()
        }
    }

    fn consumer(kind: ConsumerKind, name: &str) -> ConsumerRef {
        ConsumerRef {
            namespace: "shop".into(),
            pod: Some(format!("{name}-0")),
            node: None,
            owner: Owner::Known(kind, name.into()),
            replicas: Some(1),
            template: None,
            managed_by: vec![],
        }
    }

    #[test]
    fn labelled_workloads_of_a_selected_claim_are_switched_onto_its_new_claim() {
        let found = [
            labelled(ConsumerKind::Deployment, "web", "data"),
            labelled(ConsumerKind::StatefulSet, "cache", "data"),
            // Another claim's label, and a ReplicaSet its Deployment controls.
            labelled(ConsumerKind::Deployment, "other", "logs"),
            Labelled {
                owned: true,
                ..labelled(ConsumerKind::ReplicaSet, "web-5d8f", "data")
            },
        ];
        let consumers = BTreeMap::from([(
            "shop/data".to_string(),
            vec![
                consumer(ConsumerKind::Deployment, "web"),
                consumer(ConsumerKind::Deployment, "report"),
            ],
        )]);
        let out = switches(&spec(), "r1", &["shop/data".into()], &found, &consumers);
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        let new_claim = labels::new_claim_name("data", "r1");
        let names: Vec<(&str, Option<&str>)> = out
            .consumers
            .iter()
            .map(|c| (c.name.as_str(), c.switch_to.as_deref()))
            .collect();
        assert_eq!(
            names,
            [("web", Some(&*new_claim)), ("cache", Some(&*new_claim))]
        );
        assert_eq!(out.consumers[0].pvcs, ["shop/data"]);
        assert_eq!(out.consumers[0].replicas, Some(2));
        assert_eq!(
            out.warnings,
            [
                "spec.switchWorkloads: these consumers of PVC shop/data carry no label refill.dev/switch-claim=data, so they stay on it, running: Deployment shop/report"
            ]
        );
    }

    #[test]
    fn what_cannot_be_switched_is_refused_by_name() {
        let found = [
            labelled(ConsumerKind::CronJob, "nightly", "data"),
            Labelled {
                mounts_by_name: false,
                ..labelled(ConsumerKind::StatefulSet, "db", "data")
            },
            Labelled {
                mounts_by_name: false,
                switched_from: Some("data".into()),
                ..labelled(ConsumerKind::Deployment, "web", "data")
            },
        ];
        let out = switches(
            &spec(),
            "r1",
            &["shop/data".into()],
            &found,
            &BTreeMap::new(),
        );
        assert!(out.consumers.is_empty());
        assert_eq!(out.errors.len(), 3, "{:#?}", out.errors);
        assert!(
            out.errors[0].starts_with("spec.switchWorkloads: CronJob shop/nightly carries the label refill.dev/switch-claim=data, but only Deployments"),
            "{}",
            out.errors[0]
        );
        assert!(
            out.errors[1].contains("does not name PVC data among its volumes; a claim from volumeClaimTemplates cannot be switched"),
            "{}",
            out.errors[1]
        );
        assert!(
            out.errors[2].contains("switched it from PVC data already"),
            "{}",
            out.errors[2]
        );
    }

    #[test]
    fn no_label_warns_and_no_switch_asked_does_nothing() {
        let out = switches(&spec(), "r1", &["shop/data".into()], &[], &BTreeMap::new());
        assert!(out.consumers.is_empty() && out.errors.is_empty());
        assert!(
            out.warnings[0].contains(
                "no workload in namespace shop carries the label refill.dev/switch-claim=data"
            ),
            "{:?}",
            out.warnings
        );
        let found = [labelled(ConsumerKind::Deployment, "web", "data")];
        let plain = DataRestoreSpec {
            switch_workloads: false,
            ..spec()
        };
        assert_eq!(
            switches(
                &plain,
                "r1",
                &["shop/data".into()],
                &found,
                &BTreeMap::new()
            ),
            Switches::default()
        );
        let long = format!("shop/{}", "d".repeat(64));
        let out = switches(&spec(), "r1", &[long], &found, &BTreeMap::new());
        assert!(
            out.errors[0].contains("longer than a label value"),
            "{:?}",
            out.errors
        );
    }
}

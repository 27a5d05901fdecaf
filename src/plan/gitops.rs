//! What a restore does with the GitOps objects that manage its consumers
//! (spec.gitOps), decided from what validation read of them. Pure.

use std::collections::BTreeMap;

use crate::api::{GitOpsPolicy, GitOpsRecord, GitOpsSpec, GitOpsState};
use crate::gitops::GitOpsRef;

use super::PlannedConsumer;

/// What validation found of a GitOps object a consumer names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    Exists,
    /// Gone, or its kind is not served: nothing reconciles the consumer from it.
    Missing,
    /// refill may not read it: the server's words.
    Unreadable(String),
}

/// The GitOps objects of the consumers to stop, each with the consumers it manages,
/// in a fixed order.
pub fn managing(consumers: &[PlannedConsumer]) -> BTreeMap<GitOpsRef, Vec<String>> {
    let mut found: BTreeMap<GitOpsRef, Vec<String>> = BTreeMap::new();
    for consumer in consumers {
        for manager in &consumer.managed_by {
            found
                .entry(manager.clone())
                .or_default()
                .push(consumer.describe());
        }
    }
    found
}

/// The records to start with, and why the request is refused, if it is.
pub struct Decided {
    pub records: Vec<GitOpsRecord>,
    pub errors: Vec<String>,
    pub warnings: Vec<String>,
}

/// Decides, under spec.gitOps, what becomes of each GitOps object managing consumers.
pub fn decide(
    spec: &GitOpsSpec,
    managing: &BTreeMap<GitOpsRef, Vec<String>>,
    seen: &BTreeMap<GitOpsRef, Seen>,
) -> Decided {
    let mut decided = Decided {
        records: Vec::new(),
        errors: Vec::new(),
        warnings: Vec::new(),
    };
    for (target, workloads) in managing {
        let what = target.describe();
        let who = workloads.join(", ");
        let (state, message) = match spec.policy {
            GitOpsPolicy::Refuse => {
                decided.errors.push(format!(
                    "spec.gitOps.policy: {who} is managed by {what}, and Refuse forbids a restore under a GitOps tool; set it to Pause (the default) to suspend {what} during the restore, or suspend it yourself and set Ignore"
                ));
                continue;
            }
            GitOpsPolicy::Ignore => (
                GitOpsState::NotPaused,
                Some(format!(
                    "spec.gitOps.policy is Ignore: if {what} scales {who} back up during the restore, its volumes fail"
                )),
            ),
            GitOpsPolicy::Pause => match seen.get(target).unwrap_or(&Seen::Exists) {
                Seen::Exists => (GitOpsState::Found, None),
                Seen::Missing => {
                    let note = format!(
                        "{who} carries the marks of {what}, which does not exist: nothing to pause"
                    );
                    decided.warnings.push(note.clone());
                    (GitOpsState::NotPaused, Some(note))
                }
                Seen::Unreadable(why) => {
                    decided.errors.push(format!(
                        "spec.gitOps.policy: {who} is managed by {what}, and pausing it (the Pause policy) needs refill to read and patch it, which was refused: {why}; grant it with manifests/rbac-gitops.yaml, or set spec.gitOps.policy to Ignore"
                    ));
                    continue;
                }
            },
        };
        decided.records.push(GitOpsRecord {
            kind: target.kind,
            namespace: target.namespace.clone(),
            name: target.name.clone(),
            workloads: workloads.clone(),
            state,
            original: None,
            message,
            paused_at: None,
            resumed_at: None,
        });
    }
    decided
}

/// Adds the GitOps objects of consumers found after validation (a volume starting)
/// to the records, or their consumers to a record there is. Under Refuse, the first
/// new one is the reason the volume cannot start.
pub fn merge(
    spec: &GitOpsSpec,
    records: &mut Vec<GitOpsRecord>,
    consumers: &[PlannedConsumer],
) -> Result<(), String> {
    for (target, workloads) in managing(consumers) {
        let existing = records.iter_mut().find(|r| {
            r.kind == target.kind && r.namespace == target.namespace && r.name == target.name
        });
        match existing {
            Some(record) => {
                for workload in workloads {
                    if !record.workloads.contains(&workload) {
                        record.workloads.push(workload);
                    }
                }
                // Let go already (its first consumers came back): paused again.
                if record.state == GitOpsState::Resumed {
                    record.state = GitOpsState::Found;
                }
            }
            None => {
                let mut new = decide(
                    spec,
                    &BTreeMap::from([(target, workloads)]),
                    &BTreeMap::new(),
                );
                if let Some(error) = new.errors.pop() {
                    return Err(error);
                }
                records.append(&mut new.records);
            }
        }
    }
    Ok(())
}

/// Whether the consumer `described` (`Deployment shop/web`) must wait before it is
/// stopped: a GitOps object managing it is not paused yet.
pub fn waits_for_pause(records: &[GitOpsRecord], described: &str) -> bool {
    records.iter().any(|r| {
        matches!(r.state, GitOpsState::Found | GitOpsState::Pausing)
            && r.workloads.iter().any(|w| w == described)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ConsumerKind, GitOpsKind};
    use crate::plan::ConsumerAction;

    fn kustomization(name: &str) -> GitOpsRef {
        GitOpsRef {
            kind: GitOpsKind::Kustomization,
            namespace: "flux-system".into(),
            name: name.into(),
        }
    }

    fn deployment(name: &str, managed_by: Vec<GitOpsRef>) -> PlannedConsumer {
        PlannedConsumer {
            kind: ConsumerKind::Deployment,
            namespace: "shop".into(),
            name: name.into(),
            replicas: Some(1),
            pvcs: vec![format!("shop/{name}")],
            action: ConsumerAction::ScaleToZero,
            switch_to: None,
            managed_by,
        }
    }

    fn policy(policy: GitOpsPolicy) -> GitOpsSpec {
        GitOpsSpec {
            policy,
            ..Default::default()
        }
    }

    #[test]
    fn one_record_per_object_with_every_consumer_it_manages() {
        let consumers = [
            deployment("web", vec![kustomization("shop")]),
            deployment("db", vec![kustomization("shop")]),
            deployment("cache", vec![]),
        ];
        let found = managing(&consumers);
        assert_eq!(found.len(), 1);
        assert_eq!(
            found[&kustomization("shop")],
            ["Deployment shop/web", "Deployment shop/db"]
        );
    }

    #[test]
    fn each_policy_decides_its_own_way() {
        let managing = managing(&[deployment("web", vec![kustomization("shop")])]);
        let seen = BTreeMap::from([(kustomization("shop"), Seen::Exists)]);

        let paused = decide(&policy(GitOpsPolicy::Pause), &managing, &seen);
        assert!(paused.errors.is_empty());
        assert_eq!(paused.records[0].state, GitOpsState::Found);

        let ignored = decide(&policy(GitOpsPolicy::Ignore), &managing, &seen);
        assert_eq!(ignored.records[0].state, GitOpsState::NotPaused);
        assert!(ignored.errors.is_empty());

        let refused = decide(&policy(GitOpsPolicy::Refuse), &managing, &seen);
        assert!(refused.records.is_empty());
        assert!(
            refused.errors[0].starts_with(
                "spec.gitOps.policy: Deployment shop/web is managed by Flux Kustomization flux-system/shop"
            ),
            "{}",
            refused.errors[0]
        );
    }

    #[test]
    fn a_missing_object_warns_and_an_unreadable_one_refuses() {
        let managing = managing(&[deployment("web", vec![kustomization("shop")])]);
        let missing = BTreeMap::from([(kustomization("shop"), Seen::Missing)]);
        let decided = decide(&policy(GitOpsPolicy::Pause), &managing, &missing);
        assert_eq!(decided.records[0].state, GitOpsState::NotPaused);
        assert_eq!(decided.warnings.len(), 1);
        let forbidden = BTreeMap::from([(
            kustomization("shop"),
            Seen::Unreadable("kustomizations is forbidden".into()),
        )]);
        let decided = decide(&policy(GitOpsPolicy::Pause), &managing, &forbidden);
        assert!(decided.records.is_empty());
        assert!(
            decided.errors[0].contains("kustomizations is forbidden")
                && decided.errors[0].contains("manifests/rbac-gitops.yaml"),
            "{}",
            decided.errors[0]
        );
    }

    #[test]
    fn a_consumer_waits_until_its_manager_is_paused() {
        let managing = managing(&[deployment("web", vec![kustomization("shop")])]);
        let mut records = decide(&policy(GitOpsPolicy::Pause), &managing, &BTreeMap::new()).records;
        assert!(waits_for_pause(&records, "Deployment shop/web"));
        assert!(!waits_for_pause(&records, "Deployment shop/db"));
        records[0].state = GitOpsState::Pausing;
        assert!(waits_for_pause(&records, "Deployment shop/web"));
        for state in [GitOpsState::Paused, GitOpsState::NotPaused] {
            records[0].state = state;
            assert!(
                !waits_for_pause(&records, "Deployment shop/web"),
                "{state:?}"
            );
        }
    }

    #[test]
    fn consumers_found_later_join_their_record_or_make_one() {
        let spec = policy(GitOpsPolicy::Pause);
        let mut records = decide(
            &spec,
            &managing(&[deployment("web", vec![kustomization("shop")])]),
            &BTreeMap::new(),
        )
        .records;
        records[0].state = GitOpsState::Paused;
        let later = [
            deployment("db", vec![kustomization("shop")]),
            deployment("mail", vec![kustomization("mail")]),
        ];
        merge(&spec, &mut records, &later).unwrap();
        assert_eq!(records.len(), 2);
        assert_eq!(
            records[0].workloads,
            ["Deployment shop/web", "Deployment shop/db"]
        );
        assert_eq!(records[0].state, GitOpsState::Paused, "paused already");
        assert_eq!(records[1].state, GitOpsState::Found);
        let refuse = policy(GitOpsPolicy::Refuse);
        let error = merge(&refuse, &mut Vec::new(), &later[..1]).unwrap_err();
        assert!(error.contains("Refuse"), "{error}");
    }
}

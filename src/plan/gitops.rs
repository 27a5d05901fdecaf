//! What a restore does with the GitOps objects that manage its consumers
//! (spec.gitOps), decided from what validation read of them. Pure.
//!
//! A consumer's marks only name an object; under Pause it is paused for the consumers
//! it lists itself ([`crate::gitops::verify`]). One that does not, or is gone, or was
//! never there, is the same to the restore: a warning that names the consumer and not
//! the object, no record and no pause, so that a team learns nothing from its restore
//! about objects it cannot read.

use std::collections::{BTreeMap, BTreeSet};

use crate::api::{ConsumerKind, GitOpsKind, GitOpsPolicy, GitOpsRecord, GitOpsSpec, GitOpsState};
use crate::gitops::GitOpsRef;

use super::PlannedConsumer;

/// What validation found of a GitOps object a consumer names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ManagerSeen {
    /// Read: of the consumers that name it (`Kind namespace/name`), those it lists
    /// itself among what it manages. Gone, or of a kind not served, it lists none.
    Lists(BTreeSet<String>),
    /// refill may not read it: the server's words.
    Unreadable(String),
}

/// A workload whose marks name a GitOps object.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Named {
    pub kind: ConsumerKind,
    pub namespace: String,
    pub name: String,
}

impl Named {
    /// `Deployment shop/web`, as records name consumers.
    pub(crate) fn describe(&self) -> String {
        self.kind.describe(&self.namespace, &self.name)
    }
}

/// The GitOps objects to read before deciding, each with the workloads whose marks
/// name it: all of them under Pause, but those a record already holds (checked when
/// it was made); none under the other policies, which read nothing.
pub(crate) fn to_read<'a>(
    spec: &GitOpsSpec,
    workloads: impl IntoIterator<Item = (Named, &'a [GitOpsRef])>,
    records: &[GitOpsRecord],
) -> BTreeMap<GitOpsRef, BTreeSet<Named>> {
    let mut found: BTreeMap<GitOpsRef, BTreeSet<Named>> = BTreeMap::new();
    if spec.policy != GitOpsPolicy::Pause {
        return found;
    }
    for (workload, managers) in workloads {
        for manager in managers {
            let held = records.iter().any(|r| {
                r.kind == manager.kind
                    && r.namespace == manager.namespace
                    && r.name == manager.name
                    && r.workloads.contains(&workload.describe())
            });
            if !held {
                found
                    .entry(manager.clone())
                    .or_default()
                    .insert(workload.clone());
            }
        }
    }
    found
}

/// The GitOps objects of the consumers to stop, each with the consumers it manages,
/// in a fixed order.
pub(crate) fn managing(consumers: &[PlannedConsumer]) -> BTreeMap<GitOpsRef, Vec<String>> {
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
pub(crate) struct Decided {
    pub records: Vec<GitOpsRecord>,
    pub errors: Vec<String>,
    pub warnings: Vec<String>,
}

/// What a consumer whose marks no object backs is told: the tool whose marks it
/// carries (its own labels say as much), never the object's name, namespace, nor
/// whether it exists.
pub(crate) fn not_backed(kind: GitOpsKind, workload: &str) -> String {
    format!(
        "{workload} carries {tool} marks that no {tool} backs by listing {workload} among what it manages: nothing was paused for it; if something scales it back up during the restore, its volumes fail",
        tool = kind.tool()
    )
}

/// Whether the object `target`, as seen, lists the consumer `workload`.
fn backs(seen: &BTreeMap<GitOpsRef, ManagerSeen>, target: &GitOpsRef, workload: &str) -> bool {
    matches!(seen.get(target), Some(ManagerSeen::Lists(listed)) if listed.contains(workload))
}

/// Decides, under spec.gitOps, what becomes of each GitOps object managing consumers.
pub(crate) fn decide(
    spec: &GitOpsSpec,
    managing: &BTreeMap<GitOpsRef, Vec<String>>,
    seen: &BTreeMap<GitOpsRef, ManagerSeen>,
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
            // Decided from the marks alone, reading nothing: a forged mark refuses
            // only the restore of the workload that carries it, whatever the object
            // named is or is not.
            GitOpsPolicy::Refuse => {
                decided.errors.push(format!(
                    "spec.gitOps.policy: {who} carries the marks of {what}, and Refuse forbids a restore under a GitOps tool; set it to Pause (the default) to suspend {what} during the restore, or suspend it yourself and set Ignore"
                ));
                continue;
            }
            GitOpsPolicy::Ignore => (
                GitOpsState::NotPaused,
                Some(format!(
                    "spec.gitOps.policy is Ignore: if {what} scales {who} back up during the restore, its volumes fail"
                )),
            ),
            GitOpsPolicy::Pause => {
                if let Some(ManagerSeen::Unreadable(why)) = seen.get(target) {
                    decided.errors.push(format!(
                        "spec.gitOps.policy: {who} carries the marks of {what}, and pausing it (the Pause policy) needs refill to read and patch it, which was refused: {why}; grant it with manifests/rbac-gitops.yaml, or set spec.gitOps.policy to Ignore"
                    ));
                    continue;
                }
                let (backed, not): (Vec<String>, Vec<String>) = workloads
                    .iter()
                    .cloned()
                    .partition(|w| backs(seen, target, w));
                decided
                    .warnings
                    .extend(not.iter().map(|w| not_backed(target.kind, w)));
                if backed.is_empty() {
                    continue;
                }
                decided
                    .records
                    .push(record(target, backed, GitOpsState::Found, None));
                continue;
            }
        };
        decided
            .records
            .push(record(target, workloads.clone(), state, message));
    }
    decided
}

fn record(
    target: &GitOpsRef,
    workloads: Vec<String>,
    state: GitOpsState,
    message: Option<String>,
) -> GitOpsRecord {
    GitOpsRecord {
        kind: target.kind,
        namespace: target.namespace.clone(),
        name: target.name.clone(),
        workloads,
        state,
        original: None,
        message,
        paused_at: None,
        resumed_at: None,
    }
}

/// Adds the GitOps objects of consumers found after validation (a volume starting)
/// to the records, or their consumers to a record there is, decided as [`decide`]
/// does from what was `seen` of them. Returns the warnings; under Refuse, or when an
/// object to pause cannot be read, the first error is why the volume cannot start.
pub(crate) fn merge(
    spec: &GitOpsSpec,
    records: &mut Vec<GitOpsRecord>,
    consumers: &[PlannedConsumer],
    seen: &BTreeMap<GitOpsRef, ManagerSeen>,
) -> Result<Vec<String>, String> {
    let mut warnings = Vec::new();
    for (target, workloads) in managing(consumers) {
        let existing = records.iter().position(|r| {
            r.kind == target.kind && r.namespace == target.namespace && r.name == target.name
        });
        let (held, new): (Vec<String>, Vec<String>) = match existing {
            Some(i) => workloads
                .into_iter()
                .partition(|w| records[i].workloads.contains(w)),
            None => (Vec::new(), workloads),
        };
        let mut decided = decide(spec, &BTreeMap::from([(target, new)]), seen);
        if let Some(error) = decided.errors.pop() {
            return Err(error);
        }
        warnings.append(&mut decided.warnings);
        match existing {
            None => records.append(&mut decided.records),
            Some(i) => {
                let record = &mut records[i];
                let added = decided
                    .records
                    .pop()
                    .map(|r| r.workloads)
                    .unwrap_or_default();
                // Let go already (its first consumers came back): paused again.
                if record.state == GitOpsState::Resumed && !(held.is_empty() && added.is_empty()) {
                    record.state = GitOpsState::Found;
                }
                record.workloads.extend(added);
            }
        }
    }
    Ok(warnings)
}

/// Whether the consumer `described` (`Deployment shop/web`) must wait before it is
/// stopped: a GitOps object managing it is not paused yet.
pub(crate) fn waits_for_pause(records: &[GitOpsRecord], described: &str) -> bool {
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

    /// What validation saw of `target`: it lists these consumers.
    fn lists(target: GitOpsRef, workloads: &[&str]) -> BTreeMap<GitOpsRef, ManagerSeen> {
        let listed = workloads.iter().map(|w| w.to_string()).collect();
        BTreeMap::from([(target, ManagerSeen::Lists(listed))])
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
        let seen = lists(kustomization("shop"), &["Deployment shop/web"]);

        let paused = decide(&policy(GitOpsPolicy::Pause), &managing, &seen);
        assert!(paused.errors.is_empty());
        assert_eq!(paused.records[0].state, GitOpsState::Found);

        let ignored = decide(&policy(GitOpsPolicy::Ignore), &managing, &seen);
        assert_eq!(ignored.records[0].state, GitOpsState::NotPaused);
        assert!(ignored.errors.is_empty());

        // Refuse reads nothing: the marks alone refuse.
        let refused = decide(&policy(GitOpsPolicy::Refuse), &managing, &BTreeMap::new());
        assert!(refused.records.is_empty());
        assert!(
            refused.errors[0].starts_with(
                "spec.gitOps.policy: Deployment shop/web carries the marks of Flux Kustomization flux-system/shop"
            ),
            "{}",
            refused.errors[0]
        );
    }

    #[test]
    fn marks_no_object_backs_pause_nothing_and_name_nothing() {
        let platform = GitOpsRef {
            kind: GitOpsKind::Kustomization,
            namespace: "platform".into(),
            name: "platform-apps".into(),
        };
        let managing = managing(&[deployment("web", vec![platform.clone()])]);
        let spec = policy(GitOpsPolicy::Pause);
        // Read and not listing it, gone, or never read: told the same.
        let mut told = BTreeSet::new();
        for seen in [
            lists(platform.clone(), &[]),
            lists(platform, &["Deployment shop/other"]),
            BTreeMap::new(),
        ] {
            let decided = decide(&spec, &managing, &seen);
            assert!(decided.records.is_empty(), "{seen:?}");
            assert!(decided.errors.is_empty(), "{seen:?}");
            assert_eq!(decided.warnings.len(), 1);
            let warning = &decided.warnings[0];
            assert!(
                !warning.contains("platform"),
                "names nothing of the object: {warning}"
            );
            assert!(warning.contains("Deployment shop/web"), "{warning}");
            told.insert(warning.clone());
        }
        assert_eq!(told.len(), 1, "{told:?}");
    }

    #[test]
    fn an_object_is_paused_for_the_consumers_it_lists_only() {
        let consumers = [
            deployment("web", vec![kustomization("shop")]),
            deployment("db", vec![kustomization("shop")]),
        ];
        let seen = lists(kustomization("shop"), &["Deployment shop/web"]);
        let decided = decide(&policy(GitOpsPolicy::Pause), &managing(&consumers), &seen);
        assert_eq!(decided.records.len(), 1);
        assert_eq!(decided.records[0].workloads, ["Deployment shop/web"]);
        assert_eq!(decided.warnings.len(), 1);
        assert!(
            decided.warnings[0].starts_with("Deployment shop/db carries Flux Kustomization marks")
        );
        assert!(!waits_for_pause(&decided.records, "Deployment shop/db"));
    }

    #[test]
    fn an_unreadable_object_refuses() {
        let managing = managing(&[deployment("web", vec![kustomization("shop")])]);
        let forbidden = BTreeMap::from([(
            kustomization("shop"),
            ManagerSeen::Unreadable("kustomizations is forbidden".into()),
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
    fn only_pause_reads_and_never_what_a_record_holds() {
        let shop = [kustomization("shop")];
        let web = Named {
            kind: ConsumerKind::Deployment,
            namespace: "shop".into(),
            name: "web".into(),
        };
        let db = Named {
            name: "db".into(),
            ..web.clone()
        };
        let workloads = || [(web.clone(), &shop[..]), (db.clone(), &shop[..])];
        let pause = policy(GitOpsPolicy::Pause);
        let all = to_read(&pause, workloads(), &[]);
        assert_eq!(
            all[&kustomization("shop")],
            BTreeSet::from([web.clone(), db.clone()])
        );
        let records = decide(
            &pause,
            &managing(&[deployment("web", shop.to_vec())]),
            &lists(kustomization("shop"), &["Deployment shop/web"]),
        )
        .records;
        let left = to_read(&pause, workloads(), &records);
        assert_eq!(left[&kustomization("shop")], BTreeSet::from([db.clone()]));
        for other in [GitOpsPolicy::Ignore, GitOpsPolicy::Refuse] {
            assert!(to_read(&policy(other), workloads(), &[]).is_empty());
        }
    }

    #[test]
    fn a_consumer_waits_until_its_manager_is_paused() {
        let managing = managing(&[deployment("web", vec![kustomization("shop")])]);
        let seen = lists(kustomization("shop"), &["Deployment shop/web"]);
        let mut records = decide(&policy(GitOpsPolicy::Pause), &managing, &seen).records;
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
            &lists(kustomization("shop"), &["Deployment shop/web"]),
        )
        .records;
        records[0].state = GitOpsState::Paused;
        let later = [
            deployment("db", vec![kustomization("shop")]),
            deployment("mail", vec![kustomization("mail")]),
            deployment("forged", vec![kustomization("shop")]),
        ];
        let mut seen = lists(kustomization("shop"), &["Deployment shop/db"]);
        seen.extend(lists(kustomization("mail"), &["Deployment shop/mail"]));
        let warnings = merge(&spec, &mut records, &later, &seen).unwrap();
        assert_eq!(records.len(), 2);
        assert_eq!(
            records[0].workloads,
            ["Deployment shop/web", "Deployment shop/db"]
        );
        assert_eq!(records[0].state, GitOpsState::Paused, "paused already");
        assert_eq!(records[1].state, GitOpsState::Found);
        assert_eq!(warnings.len(), 1);
        assert!(
            warnings[0].starts_with("Deployment shop/forged"),
            "{warnings:?}"
        );

        // Let go, then a consumer it holds starts again: paused again.
        records[0].state = GitOpsState::Resumed;
        merge(&spec, &mut records, &later[..1], &BTreeMap::new()).unwrap();
        assert_eq!(records[0].state, GitOpsState::Found);
        // Not for a consumer it does not list.
        records[0].state = GitOpsState::Resumed;
        merge(&spec, &mut records, &later[2..], &BTreeMap::new()).unwrap();
        assert_eq!(records[0].state, GitOpsState::Resumed);

        let refuse = policy(GitOpsPolicy::Refuse);
        let error = merge(&refuse, &mut Vec::new(), &later[..1], &BTreeMap::new()).unwrap_err();
        assert!(error.contains("Refuse"), "{error}");
    }
}

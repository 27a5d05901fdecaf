use super::*;

fn spec(backup: &str, pvcs: &[&str]) -> DataRestoreRequestSpec {
    DataRestoreRequestSpec {
        backup_name: backup.into(),
        pvcs: pvcs.iter().map(|p| p.to_string()).collect(),
        ..Default::default()
    }
}

fn holding(namespaces: &[&str]) -> BTreeSet<String> {
    namespaces.iter().map(|n| n.to_string()).collect()
}

#[test]
fn claims_of_the_own_namespace_become_the_data_restores_by_namespace_and_name() {
    let mut request = spec("nightly", &["data", "team-a/logs"]);
    request.candidate_nodes = [("data".to_string(), vec!["node-a".to_string()])].into();
    request.cancel = true;
    let dr = data_restore_spec("team-a", &request, &holding(&["team-a", "team-b"])).unwrap();
    assert_eq!(dr.backup_name.as_deref(), Some("nightly"));
    assert_eq!(dr.pvcs, ["team-a/data", "team-a/logs"]);
    assert!(dr.included_namespaces.is_empty());
    assert_eq!(dr.candidate_nodes["team-a/data"], ["node-a"]);
    assert!(dr.cancel);
    assert!(dr.restore_helper.is_none() && dr.stand_in_image.is_none());
}

/// A request restores whole claims in place: it has no target and no paths, so every
/// method and every choice of extra files is one its DataRestore can carry out.
#[test]
fn method_and_extra_files_are_carried_into_a_data_restore_that_takes_them() {
    use crate::api::{ExtraFiles, RestoreMethod};
    for method in [RestoreMethod::Direct, RestoreMethod::Staged] {
        for extra_files in [ExtraFiles::Delete, ExtraFiles::Keep] {
            let request = DataRestoreRequestSpec {
                method,
                extra_files,
                ..spec("nightly", &["data"])
            };
            let dr = data_restore_spec("team-a", &request, &holding(&["team-a"])).unwrap();
            assert_eq!((dr.method, dr.extra_files), (method, extra_files));
            assert_eq!(
                crate::plan::spec_errors(&dr),
                Vec::<String>::new(),
                "{method:?} {extra_files:?}"
            );
        }
    }
}

#[test]
fn no_claims_named_means_every_claim_of_the_namespace_in_the_backup() {
    let dr = data_restore_spec("team-a", &spec("nightly", &[]), &holding(&["team-a"])).unwrap();
    assert_eq!(dr.included_namespaces, ["team-a"]);
    assert!(dr.pvcs.is_empty());
}

#[test]
fn a_claim_of_another_namespace_is_refused_naming_the_field() {
    let errors = data_restore_spec(
        "team-a",
        &spec("nightly", &["data", "team-b/data"]),
        &holding(&["team-a", "team-b"]),
    )
    .unwrap_err();
    assert_eq!(errors.len(), 1);
    assert!(errors[0].starts_with("spec.pvcs[1]: \"team-b/data\" is in namespace team-b"));
    assert!(errors[0].contains("its own namespace (team-a)"));
}

#[test]
fn a_candidate_node_key_of_another_namespace_is_refused_too() {
    let mut request = spec("nightly", &[]);
    request.candidate_nodes = [("team-b/data".to_string(), vec!["n".to_string()])].into();
    let errors = data_restore_spec("team-a", &request, &holding(&["team-a"])).unwrap_err();
    assert!(errors[0].starts_with("spec.candidateNodes[\"team-b/data\"]"));
}

#[test]
fn a_backup_without_the_namespace_and_a_missing_backup_get_the_same_answer() {
    let without =
        data_restore_spec("team-a", &spec("other", &["data"]), &holding(&["team-b"])).unwrap_err();
    let missing =
        data_restore_spec("team-a", &spec("other", &["data"]), &holding(&[])).unwrap_err();
    assert_eq!(without, missing);
    assert_eq!(
        without,
        ["spec.backupName: no backup \"other\" holds volumes of namespace team-a"]
    );
}

#[test]
fn every_reason_is_given_at_once() {
    let errors =
        data_restore_spec("team-a", &spec("", &["Bad_Name", "x/y"]), &holding(&[])).unwrap_err();
    assert_eq!(errors.len(), 3, "{errors:?}");
    assert_eq!(errors[0], "spec.backupName: required");
    assert!(errors[1].starts_with("spec.pvcs[0]: \"Bad_Name\" is not a claim name"));
    assert!(errors[2].starts_with("spec.pvcs[1]"));
}

/// A claim name is refused here exactly when the DataRestore made of the request
/// would refuse it, so that a team reads the reason on its own request.
#[test]
fn claim_names_are_dns_subdomains() {
    for bad in ["a.-b", "a-.b", "a..b"] {
        let errors = data_restore_spec("team-a", &spec("nightly", &[bad]), &holding(&["team-a"]))
            .unwrap_err();
        assert_eq!(errors.len(), 1, "{bad}: {errors:?}");
        assert!(
            errors[0].starts_with(&format!("spec.pvcs[0]: {bad:?} is not a claim name: ")),
            "{bad}: {errors:?}"
        );
    }
    let long = "d".repeat(64);
    let dr =
        data_restore_spec("team-a", &spec("nightly", &[&long]), &holding(&["team-a"])).unwrap();
    assert!(crate::plan::spec_errors(&dr).is_empty());
}

#[test]
fn data_restore_names_are_valid_readable_and_differ_per_request_object() {
    let a = data_restore_name("team-a", "fix-db", "uid-1");
    assert!(a.starts_with("req-team-a-fix-db-"), "{a}");
    assert_ne!(a, data_restore_name("team-a", "fix-db", "uid-2"));
    let long = data_restore_name(&"n".repeat(63), &"r".repeat(253), "uid");
    assert!(long.len() <= 63, "{}", long.len());
    assert_eq!(crate::k8s_names::dns_subdomain(&long), Ok(()));
}

#[test]
fn a_refused_request_is_failed_with_its_errors_in_a_condition() {
    let status = refused(
        vec!["spec.backupName: required".into()],
        Some(3),
        &Default::default(),
    );
    assert_eq!(status.restore.phase, Phase::Failed);
    let stalled = status
        .restore
        .conditions
        .iter()
        .find(|c| c.type_ == "Stalled")
        .expect("a Stalled condition");
    assert_eq!(stalled.status, "True");
    assert_eq!(stalled.message, "spec.backupName: required");
    assert_eq!(stalled.observed_generation, Some(3));
}

#[test]
fn a_request_whose_data_restore_was_deleted_mid_way_fails_saying_so() {
    let running = DataRestoreRequestStatus {
        data_restore: Some("velero/req-team-a-fix-1234abcd".into()),
        restore: DataRestoreStatus {
            phase: Phase::Restoring,
            observed_generation: Some(1),
            ..Default::default()
        },
    };
    let status = lost(&running, Some(1));
    assert_eq!(status.restore.phase, Phase::Failed);
    assert_eq!(status.data_restore, running.data_restore);
    assert!(
        status.restore.errors[0].starts_with(
            "DataRestore velero/req-team-a-fix-1234abcd, which carried the request out, was deleted"
        ),
        "{:?}",
        status.restore.errors
    );
}

#[test]
fn a_waiting_request_says_why_in_its_reconciling_condition_and_writes_once() {
    let why = "waiting for its turn: ... (--requests-per-namespace=1)".to_string();
    let first = waiting(why.clone(), Some(1), &Default::default());
    assert_eq!(first.restore.phase, Phase::New);
    assert!(first.data_restore.is_none());
    let reconciling = first
        .restore
        .conditions
        .iter()
        .find(|c| c.type_ == status::condition::RECONCILING)
        .unwrap();
    assert_eq!(
        (reconciling.status.as_str(), reconciling.reason.as_str()),
        ("True", WAITING_FOR_TURN)
    );
    assert_eq!(reconciling.message, why);
    // Looked at again, still waiting: the same status, so nothing is written.
    assert_eq!(waiting(why, Some(1), &first), first);
}

#[test]
fn a_backup_name_that_is_not_a_name_is_refused_naming_the_field() {
    // A wide character across byte 57, where a label value is cut.
    let wide = format!("{}é{}", "a".repeat(56), "b".repeat(10));
    for bad in [wide.as_str(), "a,b", "Nightly", "x=y"] {
        let errors =
            data_restore_spec("team-a", &spec(bad, &[]), &holding(&["team-a"])).unwrap_err();
        assert_eq!(errors.len(), 1, "{bad}: {errors:?}");
        assert!(
            errors[0].starts_with("spec.backupName: ")
                && errors[0].contains("is not a backup name"),
            "{bad}: {errors:?}"
        );
    }
}

use super::*;
use crate::api::{BackupPhase, BackupStatus, PodVolumeBackupStatus, PodVolumePhase};
use k8s_openapi::api::core::v1::{PersistentVolumeClaimSpec, TypedObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

fn claim_with(source: TypedObjectReference) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: kube::api::ObjectMeta {
            name: Some("db".into()),
            namespace: Some("shop".into()),
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            data_source_ref: Some(source),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn ours(name: &str, namespace: Option<&str>) -> TypedObjectReference {
    TypedObjectReference {
        api_group: Some(GROUP.into()),
        kind: KIND.into(),
        name: name.into(),
        namespace: namespace.map(String::from),
    }
}

#[test]
fn only_refills_kind_is_taken_and_only_from_the_claims_namespace() {
    assert_eq!(
        data_source(&claim_with(ours("db", None))),
        Some(Ok("db".into()))
    );
    assert_eq!(
        data_source(&claim_with(ours("db", Some("shop")))),
        Some(Ok("db".into()))
    );
    let other = data_source(&claim_with(ours("db", Some("bank")))).unwrap();
    assert!(other.unwrap_err().contains("spec.dataSourceRef.namespace"));
    let bad = data_source(&claim_with(ours("../x", None))).unwrap();
    assert!(bad.unwrap_err().starts_with("spec.dataSourceRef.name"));
    let mut snapshot = ours("db", None);
    snapshot.api_group = Some("snapshot.storage.k8s.io".into());
    snapshot.kind = "VolumeSnapshot".into();
    assert_eq!(data_source(&claim_with(snapshot)), None);
    assert_eq!(data_source(&PersistentVolumeClaim::default()), None);
}

fn backup_volume(backup: Option<&str>, schedule: Option<&str>, claim: &str) -> BackupVolume {
    let mut bv = BackupVolume::new(
        "db",
        BackupVolumeSpec {
            backup: backup.map(String::from),
            schedule: schedule.map(String::from),
            claim: claim.into(),
        },
    );
    bv.metadata.namespace = Some("shop".into());
    bv
}

#[test]
fn the_claim_is_always_of_the_objects_own_namespace() {
    let w = wanted(&backup_volume(Some("nightly-1"), None, "db")).unwrap();
    assert_eq!(w.from, Origin::Backup("nightly-1".into()));
    assert_eq!(w.claim_key, "shop/db");
    // A slash cannot smuggle another namespace in.
    let err = wanted(&backup_volume(Some("b"), None, "bank/db")).unwrap_err();
    assert!(err.contains("spec.claim:"), "{err}");
    let w = wanted(&backup_volume(None, Some("nightly"), "db")).unwrap();
    assert_eq!(w.from, Origin::Schedule("nightly".into()));
}

#[test]
fn every_wrong_field_is_named() {
    let err = wanted(&backup_volume(Some("a"), Some("b"), "db")).unwrap_err();
    assert!(err.contains("both set"), "{err}");
    let err = wanted(&backup_volume(None, None, "db")).unwrap_err();
    assert!(err.contains("both missing"), "{err}");
    let err = wanted(&backup_volume(Some("B A D"), None, "")).unwrap_err();
    assert!(
        err.contains("spec.backup:") && err.contains("spec.claim: it is empty"),
        "{err}"
    );
    let long = "x".repeat(10_000);
    let err = wanted(&backup_volume(None, Some(&long), "db")).unwrap_err();
    assert!(err.contains("spec.schedule:"), "{err}");
}

fn made(name: &str, phase: BackupPhase, done: i64) -> Backup {
    let mut b = Backup::new(name, Default::default());
    b.status = Some(BackupStatus {
        phase: Some(phase),
        completion_timestamp: Some(Time(Timestamp::from_second(done).unwrap())),
        ..Default::default()
    });
    b
}

#[test]
fn the_backup_is_the_named_usable_one_or_the_schedules_newest_completed() {
    let named = Origin::Backup("b".into());
    assert!(
        super::backup(&named, None, &[])
            .unwrap_err()
            .contains("not found")
    );
    let failed = made("b", BackupPhase::Failed, 1);
    assert!(
        super::backup(&named, Some(&failed), &[])
            .unwrap_err()
            .contains("is Failed")
    );
    let ok = made("b", BackupPhase::PartiallyFailed, 1);
    assert!(super::backup(&named, Some(&ok), &[]).is_ok());

    let schedule = Origin::Schedule("nightly".into());
    let list = [
        made("n-1", BackupPhase::Completed, 100),
        made("n-3", BackupPhase::InProgress, 300),
        made("n-2", BackupPhase::Completed, 200),
    ];
    let chosen = super::backup(&schedule, None, &list).unwrap();
    assert_eq!(chosen.metadata.name.as_deref(), Some("n-2"));
    let err = super::backup(&schedule, None, &list[1..2]).unwrap_err();
    assert!(err.starts_with("spec.schedule:"), "{err}");
}

fn pvb(ns: &str, claim: &str, phase: PodVolumePhase) -> PodVolumeBackup {
    let mut p = PodVolumeBackup::new("p", Default::default());
    p.metadata.annotations = Some(
        [(
            crate::labels::PVC_NAME_ANNOTATION.to_string(),
            claim.to_string(),
        )]
        .into(),
    );
    p.spec.pod.namespace = Some(ns.into());
    p.status = Some(PodVolumeBackupStatus {
        phase: Some(phase),
        ..Default::default()
    });
    p
}

#[test]
fn only_a_completed_backup_of_the_claim_itself_is_taken() {
    let pvbs = [
        pvb("bank", "db", PodVolumePhase::Completed),
        pvb("shop", "db", PodVolumePhase::Failed),
    ];
    let err = pod_volume_backup("b", "shop/db", &pvbs).unwrap_err();
    assert!(
        err.contains("holds no completed file-system backup"),
        "{err}"
    );
    let pvbs = [pvb("shop", "db", PodVolumePhase::Completed)];
    assert!(pod_volume_backup("b", "shop/db", &pvbs).is_ok());
}

mod hostile {
    use super::*;
    use crate::hostile_input::hostile_text;
    use proptest::prelude::*;

    proptest! {
        /// Whatever a team writes in a claim's data source or a BackupVolume, it is
        /// refused by field or taken, never a panic, and a taken claim is always of
        /// the object's own namespace.
        #[test]
        fn any_source_is_refused_or_taken_within_its_namespace(
            name in hostile_text(),
            namespace in proptest::option::of(hostile_text()),
            backup in proptest::option::of(hostile_text()),
            schedule in proptest::option::of(hostile_text()),
            claim in hostile_text(),
        ) {
            let _ = data_source(&claim_with(ours(&name, namespace.as_deref())));
            let bv = backup_volume(backup.as_deref(), schedule.as_deref(), &claim);
            if let Ok(w) = wanted(&bv) {
                prop_assert_eq!(w.claim_key, format!("shop/{claim}"));
                prop_assert!(!claim.contains('/'));
            }
        }
    }
}

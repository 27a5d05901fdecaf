//! The claims a restore makes beside a PVC: a sibling of its StorageClass, access
//! modes, volume mode and size, empty until the node agent writes the backup's files
//! into it. A `target: NewClaim` restore's belongs to no one, so that it outlives the
//! restore: it is the restore's result. A path restore's scratch claim is deleted when
//! its volume ends (an owner in another namespace is not allowed).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PersistentVolumeClaimSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::labels;

/// The claim `name` beside `original`, made by the restore `restore_key`
/// (`namespace/name`) in `role` ([`labels::ROLE_NEW_CLAIM`] or [`labels::ROLE_SCRATCH`]).
pub(crate) fn claim(
    original: &PersistentVolumeClaim,
    name: &str,
    restore_key: &str,
    role: &str,
) -> PersistentVolumeClaim {
    let spec = original.spec.clone().unwrap_or_default();
    // What was asked for, or else what the volume has.
    let requests = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.clone())
        .filter(|r| r.contains_key("storage"))
        .or_else(|| {
            let capacity = original
                .status
                .as_ref()?
                .capacity
                .as_ref()?
                .get("storage")?;
            Some(BTreeMap::from([("storage".to_string(), capacity.clone())]))
        });
    let namespace = original.metadata.namespace.clone().unwrap_or_default();
    let original_name = original.metadata.name.clone().unwrap_or_default();
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.clone()),
            labels: Some(BTreeMap::from([(
                labels::ROLE.to_string(),
                role.to_string(),
            )])),
            annotations: Some(BTreeMap::from([
                (
                    labels::RESTORED_FROM_ANNOTATION.to_string(),
                    format!("{namespace}/{original_name}"),
                ),
                (
                    labels::DATA_RESTORE_ANNOTATION.to_string(),
                    restore_key.to_string(),
                ),
            ])),
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: spec.access_modes,
            storage_class_name: spec.storage_class_name,
            volume_mode: spec.volume_mode,
            resources: Some(k8s_openapi::api::core::v1::VolumeResourceRequirements {
                requests,
                ..Default::default()
            }),
            // Never the original's volumeName, selector or dataSource: a volume of its own.
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Whether `existing` is the claim this restore made (found again after a restart).
pub(crate) fn is_made_by(existing: &PersistentVolumeClaim, restore_key: &str) -> bool {
    existing
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(labels::DATA_RESTORE_ANNOTATION))
        .is_some_and(|r| r == restore_key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PersistentVolumeClaimStatus, VolumeResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use kube::ResourceExt;

    fn original(requests: Option<&str>, capacity: &str) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some("data".into()),
                namespace: Some("shop".into()),
                labels: Some(BTreeMap::from([("app".to_string(), "web".to_string())])),
                ..Default::default()
            },
            spec: Some(PersistentVolumeClaimSpec {
                access_modes: Some(vec!["ReadWriteOnce".into()]),
                storage_class_name: Some("local".into()),
                volume_mode: Some("Filesystem".into()),
                volume_name: Some("pv-1".into()),
                resources: requests.map(|r| VolumeResourceRequirements {
                    requests: Some(BTreeMap::from([(
                        "storage".to_string(),
                        Quantity(r.into()),
                    )])),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            status: Some(PersistentVolumeClaimStatus {
                capacity: Some(BTreeMap::from([(
                    "storage".to_string(),
                    Quantity(capacity.into()),
                )])),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn a_new_claim_copies_class_modes_and_size_but_not_the_volume() {
        let made = claim(
            &original(Some("1Gi"), "2Gi"),
            "data-r1-abcde",
            "velero/r1",
            labels::ROLE_NEW_CLAIM,
        );
        let spec = made.spec.as_ref().unwrap();
        assert_eq!(spec.storage_class_name.as_deref(), Some("local"));
        assert_eq!(spec.access_modes, Some(vec!["ReadWriteOnce".to_string()]));
        assert_eq!(spec.volume_mode.as_deref(), Some("Filesystem"));
        let size = |c: &PersistentVolumeClaim| {
            c.spec
                .as_ref()
                .unwrap()
                .resources
                .as_ref()
                .unwrap()
                .requests
                .as_ref()
                .unwrap()["storage"]
                .0
                .clone()
        };
        assert_eq!(size(&made), "1Gi");
        assert_eq!(spec.volume_name, None, "a volume of its own");
        assert_eq!(made.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(
            made.labels().get(labels::ROLE).map(String::as_str),
            Some("new-claim")
        );
        assert_eq!(
            made.annotations()
                .get(labels::RESTORED_FROM_ANNOTATION)
                .map(String::as_str),
            Some("shop/data")
        );
        assert!(
            made.labels().get("app").is_none(),
            "the app's selectors must not match it"
        );
        assert!(is_made_by(&made, "velero/r1"));
        assert!(!is_made_by(&made, "velero/r2"));
        // No request recorded: the size the volume has.
        assert_eq!(
            size(&claim(
                &original(None, "2Gi"),
                "x",
                "velero/r1",
                labels::ROLE_SCRATCH
            )),
            "2Gi"
        );
    }
}

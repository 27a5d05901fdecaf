//! The PodVolumeRestore handed to the node agent, and the VolumePluginRestore that
//! reports its progress.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};

use crate::api::{
    DataRestore, PodVolumeBackup, PodVolumeRestore, PodVolumeRestoreSpec, Progress,
    VolumePluginRestore, VolumePluginRestoreSpec, VolumePluginRestoreStatus, VolumeStatus,
    plugin_keys,
};
use crate::labels::{self, label_value};

/// The DataRestore must be the FIRST owner: the node agent names its done file after
/// the first owner's UID, and `restore-wait` waits for exactly that UID.
fn owner(dr: &DataRestore) -> OwnerReference {
    let mut owner = dr
        .controller_owner_ref(&())
        .expect("a stored DataRestore has a name and UID");
    owner.block_owner_deletion = None;
    owner
}

/// The PodVolumeRestore that asks the node agent to restore `pvb`'s snapshot into the
/// volume of the stand-in `pod`, owned by `dr` (its first owner, as the node agent needs).
pub fn pod_volume_restore(
    dr: &DataRestore,
    name: &str,
    volume: &VolumeStatus,
    pvb: &PodVolumeBackup,
    pod: &Pod,
) -> PodVolumeRestore {
    let uid = dr.uid().unwrap_or_default();
    let mut pvr_labels = BTreeMap::from([
        (
            labels::RESTORE_NAME.to_string(),
            label_value(&dr.name_any()),
        ),
        (labels::RESTORE_UID.to_string(), uid.clone()),
        (labels::DATA_RESTORE_UID.to_string(), uid),
    ]);
    if let Some(pvc_uid) = &volume.pvc_uid {
        pvr_labels.insert(labels::PVC_UID.to_string(), pvc_uid.clone());
    }
    owned_by(
        owner(dr),
        ObjectMeta {
            name: Some(name.to_string()),
            namespace: dr.namespace(),
            labels: Some(pvr_labels),
            ..Default::default()
        },
        &volume.volume,
        pvb,
        pod,
    )
}

/// The PodVolumeRestore of `meta` writing `pvb`'s snapshot into the volume `volume` of
/// `pod`, with `owner` its first and only owner: the node agent names its done file
/// after that owner's UID, which `restore-wait` in the pod waits for.
pub(crate) fn owned_by(
    owner: OwnerReference,
    mut meta: ObjectMeta,
    volume: &str,
    pvb: &PodVolumeBackup,
    pod: &Pod,
) -> PodVolumeRestore {
    let pod_uid = pod.uid().unwrap_or_default();
    meta.labels
        .get_or_insert_with(Default::default)
        .insert(labels::POD_UID.to_string(), pod_uid.clone());
    meta.owner_references = Some(vec![owner]);
    let status = pvb.status.clone().unwrap_or_default();
    PodVolumeRestore {
        metadata: meta,
        spec: PodVolumeRestoreSpec {
            pod: ObjectReference {
                kind: Some("Pod".into()),
                api_version: Some("v1".into()),
                namespace: pod.namespace(),
                name: Some(pod.name_any()),
                uid: Some(pod_uid),
                ..Default::default()
            },
            volume: volume.to_string(),
            backup_storage_location: pvb.spec.backup_storage_location.clone(),
            repo_identifier: pvb.spec.repo_identifier.clone(),
            uploader_type: pvb.spec.uploader_type.clone(),
            snapshot_id: status.snapshot_id.unwrap_or_default(),
            source_namespace: pvb.spec.pod.namespace.clone().unwrap_or_default(),
            uploader_settings: pvb.spec.uploader_settings.clone(),
            cancel: None,
            snapshot_size: status.progress.map(|p| p.total_bytes),
        },
        status: None,
    }
}

/// The VolumePluginRestore that reports one volume's restore to users.
pub(crate) fn volume_plugin_restore(
    dr: &DataRestore,
    name: &str,
    backup_name: &str,
    volume: &VolumeStatus,
    uploader_type: Option<&str>,
) -> VolumePluginRestore {
    let snapshot = volume.snapshot_id.clone().unwrap_or_default();
    let vpr_labels = BTreeMap::from([
        (labels::BACKUP_NAME.to_string(), label_value(backup_name)),
        (labels::SNAPSHOT_ID.to_string(), label_value(&snapshot)),
        (
            labels::PROVIDER.to_string(),
            label_value(crate::api::PROVIDER),
        ),
        (
            labels::DATA_RESTORE_UID.to_string(),
            dr.uid().unwrap_or_default(),
        ),
    ]);
    VolumePluginRestore {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: dr.namespace(),
            labels: Some(vpr_labels),
            owner_references: Some(vec![owner(dr)]),
            ..Default::default()
        },
        spec: VolumePluginRestoreSpec {
            snapshot_id: snapshot,
            backup_name: backup_name.to_string(),
            provider: crate::api::PROVIDER.to_string(),
            volume_type: uploader_type.unwrap_or("kopia").to_string(),
            volume_az: None,
        },
        status: None,
    }
}

/// The VolumePluginRestore status mirroring one volume's status.
pub(crate) fn plugin_status(volume: &VolumeStatus) -> VolumePluginRestoreStatus {
    let mut specific = BTreeMap::from([(plugin_keys::PVC.to_string(), volume.pvc.clone())]);
    for (key, value) in [
        (plugin_keys::POD, &volume.stand_in_pod),
        (plugin_keys::NODE, &volume.node),
        (plugin_keys::POD_VOLUME_RESTORE, &volume.pod_volume_restore),
    ] {
        if let Some(value) = value {
            specific.insert(key.to_string(), value.clone());
        }
    }
    if volume.target_pvc.is_some() {
        specific.insert(plugin_keys::TARGET_PVC.to_string(), volume.written_claim());
    }
    VolumePluginRestoreStatus {
        phase: Some(format!("{:?}", volume.phase)),
        volume_id: Some(volume.pvc.clone()),
        message: volume.message.clone(),
        start_timestamp: volume.start_time.clone(),
        completion_timestamp: volume.completion_time.clone(),
        progress: Some(Progress {
            total_bytes: volume.total_bytes,
            bytes_done: volume.bytes_done,
        }),
        plugin_specific: specific,
        record: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{DataRestoreSpec, PodVolumeBackupSpec, PodVolumeBackupStatus};

    fn restore() -> DataRestore {
        let mut dr = DataRestore::new("nightly-fix", DataRestoreSpec::default());
        dr.metadata.namespace = Some("velero".into());
        dr.metadata.uid = Some("dr-uid".into());
        dr
    }

    #[test]
    fn the_pvr_carries_velero_labels_owner_and_pvb_fields() {
        let mut pvb = PodVolumeBackup::new(
            "b1-xyz",
            PodVolumeBackupSpec {
                backup_storage_location: "default".into(),
                repo_identifier: "s3:repo/shop".into(),
                uploader_type: Some("kopia".into()),
                pod: ObjectReference {
                    namespace: Some("shop".into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        );
        pvb.status = Some(PodVolumeBackupStatus {
            snapshot_id: Some("snap-1".into()),
            progress: Some(Progress {
                total_bytes: 4096,
                bytes_done: 4096,
            }),
            ..Default::default()
        });
        let mut pod = Pod::default();
        pod.metadata.name = Some("refill-data-1".into());
        pod.metadata.namespace = Some("shop".into());
        pod.metadata.uid = Some("pod-uid".into());
        let volume = VolumeStatus {
            pvc: "shop/data".into(),
            pvc_uid: Some("pvc-uid".into()),
            volume: "data".into(),
            ..Default::default()
        };
        let pvr = pod_volume_restore(&restore(), "nightly-fix-1", &volume, &pvb, &pod);
        let owners = pvr.metadata.owner_references.unwrap();
        assert_eq!(
            (owners[0].uid.as_str(), owners[0].kind.as_str()),
            ("dr-uid", "DataRestore")
        );
        let l = pvr.metadata.labels.unwrap();
        assert_eq!(l[labels::RESTORE_NAME], "nightly-fix");
        assert_eq!(l[labels::RESTORE_UID], "dr-uid");
        assert_eq!(l[labels::POD_UID], "pod-uid");
        assert_eq!(l[labels::PVC_UID], "pvc-uid");
        assert_eq!(pvr.metadata.namespace.as_deref(), Some("velero"));
        let s = pvr.spec;
        assert_eq!(s.pod.uid.as_deref(), Some("pod-uid"));
        assert_eq!(
            (s.snapshot_id.as_str(), s.repo_identifier.as_str()),
            ("snap-1", "s3:repo/shop")
        );
        assert_eq!(
            (
                s.backup_storage_location.as_str(),
                s.source_namespace.as_str()
            ),
            ("default", "shop")
        );
        assert_eq!(
            (s.snapshot_size, s.uploader_type.as_deref()),
            (Some(4096), Some("kopia"))
        );
        assert_eq!(s.volume, "data");
    }

    #[test]
    fn the_plugin_restore_is_labelled_like_velero_designed() {
        let volume = VolumeStatus {
            pvc: "shop/data".into(),
            snapshot_id: Some("snap-1".into()),
            ..Default::default()
        };
        let vpr = volume_plugin_restore(&restore(), "n", &"b".repeat(80), &volume, Some("restic"));
        let l = vpr.metadata.labels.unwrap();
        assert_eq!(l[labels::BACKUP_NAME].len(), 63);
        assert_eq!(l[labels::SNAPSHOT_ID], "snap-1");
        assert_eq!(vpr.spec.volume_type, "restic");
        let status = plugin_status(&VolumeStatus {
            node: Some("node-a".into()),
            ..volume
        });
        assert_eq!(status.plugin_specific[plugin_keys::NODE], "node-a");
        assert_eq!(status.volume_id.as_deref(), Some("shop/data"));
    }
}

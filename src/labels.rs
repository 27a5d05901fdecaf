//! Label and annotation keys, and the names of the objects refill creates.
//!
//! Names are derived from the DataRestore's UID and the PVC, so that a restarted
//! controller finds (or re-creates, idempotently) the very same objects.

use sha2::{Digest, Sha256};

/// On a PodVolumeBackup (and a VolumePluginRestore): the name of its Backup, as a
/// label value.
pub const BACKUP_NAME: &str = "velero.io/backup-name";
/// On a PodVolumeBackup: the UID of its Backup, which tells apart two backups of the
/// same name.
pub const BACKUP_UID: &str = "velero.io/backup-uid";
/// On a Backup: the Schedule that made it.
pub const SCHEDULE_NAME: &str = "velero.io/schedule-name";
/// Annotation on a PodVolumeBackup: the name of the PVC whose volume it backed up.
pub const PVC_NAME_ANNOTATION: &str = "velero.io/pvc-name";
/// On a PodVolumeRestore: the UID of the PVC it writes to.
pub(crate) const PVC_UID: &str = "velero.io/pvc-uid";
/// On a PodVolumeRestore: the name of the restore it belongs to (here the
/// DataRestore's).
pub const RESTORE_NAME: &str = "velero.io/restore-name";
/// On a PodVolumeRestore: the UID of the restore it belongs to, which the node agent
/// names its done file after.
pub const RESTORE_UID: &str = "velero.io/restore-uid";
/// On a PodVolumeRestore: the UID of the pod it writes into.
pub(crate) const POD_UID: &str = "velero.io/pod-uid";
/// On a VolumePluginRestore: the snapshot it restores.
pub(crate) const SNAPSHOT_ID: &str = "velero.io/snapshot-id";
/// On a VolumePluginRestore: the provider that restores the volume.
pub(crate) const PROVIDER: &str = "velero.io/provider";
/// On Velero's plugin ConfigMaps, with [`POD_VOLUME_RESTORE_PLUGIN`] picking the
/// restore helper's.
pub(crate) const PLUGIN_CONFIG: &str = "velero.io/plugin-config";
/// With value `RestoreItemAction`: the ConfigMap that configures the restore helper
/// (image, resources, security context).
pub(crate) const POD_VOLUME_RESTORE_PLUGIN: &str = "velero.io/pod-volume-restore";

/// On everything refill creates: the owning DataRestore's UID.
pub const DATA_RESTORE_UID: &str = "refill.dev/data-restore-uid";
/// On stand-in pods: `namespace/name` of the DataRestore, to map pod events back to it.
pub(crate) const DATA_RESTORE_ANNOTATION: &str = "refill.dev/data-restore";
/// What a pod refill creates is for; its one value is [`ROLE_STAND_IN`].
pub const ROLE: &str = "refill.dev/role";
/// [`ROLE`] of a stand-in pod.
pub const ROLE_STAND_IN: &str = "stand-in";
/// The role of a claim refill made and filled for `target: NewClaim`.
pub(crate) const ROLE_NEW_CLAIM: &str = "new-claim";
/// The role of the scratch claim a path restore fills with the whole snapshot.
pub const ROLE_SCRATCH: &str = "scratch";
/// The role of the pod that copies a path restore's paths into the PVC.
pub const ROLE_COPIER: &str = "copier";
/// How every copier pod's name begins (see [`copier_pod_name`]).
pub const COPIER_POD_PREFIX: &str = "refill-copy-";
/// On a claim made for `target: NewClaim`: `namespace/name` of the claim it copies.
pub const RESTORED_FROM_ANNOTATION: &str = "refill.dev/restored-from";
/// On a stopped consumer: the UID of the DataRestore that stopped it. Written with the
/// resourceVersion read, it is the lock that lets only one restore stop a workload.
pub const QUIESCED_BY: &str = "refill.dev/quiesced-by";
/// Beside [`QUIESCED_BY`]: `namespace/name` of that DataRestore, for messages.
pub const QUIESCED_BY_RESTORE: &str = "refill.dev/quiesced-by-restore";
/// On a bare pod refill created again after the restore: the UID of that DataRestore,
/// by which a pod found under the name later is known for refill's own.
pub(crate) const RECREATED_BY: &str = "refill.dev/recreated-by";
/// On a scaled-down workload: its replica count before.
pub const ORIGINAL_REPLICAS: &str = "refill.dev/original-replicas";
/// On a parked DaemonSet or suspended CronJob: what to put back, as JSON.
pub(crate) const ORIGINAL_STATE: &str = "refill.dev/original";
/// Label a user puts on a workload, naming a claim it mounts: a `target: NewClaim`
/// restore of that claim with `switchWorkloads` moves the workload onto the new claim.
pub const SWITCH_CLAIM: &str = "refill.dev/switch-claim";
/// On a switched workload: the claim its pod template named before, the record of
/// what to switch it back to.
pub const SWITCHED_FROM: &str = "refill.dev/switched-from";
/// On a switched workload: `namespace/name` of the DataRestore that switched it.
pub const SWITCHED_BY: &str = "refill.dev/switched-by";

/// On a GitOps object paused for restores: the UIDs of the DataRestores that hold the
/// pause, comma-separated. The last one to let go puts the object back as it was.
pub const PAUSED_BY: &str = "refill.dev/paused-by";
/// Beside [`PAUSED_BY`]: what the object was before the first of them paused it, as JSON
/// (Flux: spec.suspend; Argo CD: the skip-reconcile annotation; null: unset).
pub const PAUSED_FROM: &str = "refill.dev/paused-from";

/// On a DataRestore a DataRestoreSchedule made: the schedule's UID.
pub(crate) const SCHEDULE_UID: &str = "refill.dev/schedule-uid";

/// On a DataRestore made for a team's DataRestoreRequest: the request's UID, and
/// (annotation) its `namespace/name`.
pub const REQUEST_UID: &str = "refill.dev/request-uid";
/// Annotation beside [`REQUEST_UID`]: `namespace/name` of the DataRestoreRequest.
pub(crate) const REQUEST_ANNOTATION: &str = "refill.dev/request";

/// refill's finalizer on DataRestores and DataRestoreRequests: deleting one waits until
/// the consumers it stopped are back.
pub const FINALIZER: &str = "refill.dev/finalizer";
/// refill's finalizer on a claim it fills as a volume populator: deleting the claim
/// mid-fill waits until what the fill made is gone.
pub const POPULATOR_FINALIZER: &str = "refill.dev/populator";
/// Label of what a fill makes in Velero's namespace (the prime claim, its pod, the
/// PodVolumeRestore): the UID of the claim it fills.
pub const POPULATES_UID: &str = "refill.dev/populates-uid";
/// Annotation beside [`POPULATES_UID`]: `namespace/name` of the claim it fills.
pub const POPULATES: &str = "refill.dev/populates";
/// [`ROLE`] of a fill's prime claim and of the pod that holds it for the node agent.
pub const ROLE_PRIME: &str = "prime";
/// Annotation on a claim refill fills: how many fills failed so far.
pub(crate) const FILL_FAILURES: &str = "refill.dev/fill-failures";
/// Annotation on a claim refill fills: when the last fill failed (RFC 3339).
pub(crate) const LAST_FILL_FAILURE: &str = "refill.dev/last-fill-failure";
/// Annotation on a claim refill fills: the PV it handed the claim, written before the
/// PV's `claimRef` is.
pub const HANDED_VOLUME: &str = "refill.dev/handed-volume";
/// The scheduler's choice of node for a WaitForFirstConsumer claim.
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";

/// refill's field manager in server-side apply, and how its own changes are told
/// from others' in `managedFields`.
pub const FIELD_MANAGER: &str = "refill";

/// A label value as Velero writes it: names longer than 63 characters become their
/// first 57 characters and the first 6 hex digits of the SHA-256 of the whole name.
///
/// Velero cuts at byte 57, which for the names Kubernetes allows (ASCII) is the 57th
/// character. Any other text comes from a user and must not panic here: it is cut at
/// the last character boundary at or before byte 57, and stays an invalid name for
/// validation to refuse by its field.
pub fn label_value(value: &str) -> String {
    if value.len() <= 63 {
        return value.to_string();
    }
    let digest = hex::encode(Sha256::digest(value.as_bytes()));
    format!("{}{}", prefix_within(value, 57), &digest[..6])
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character
/// boundary.
pub(crate) fn prefix_within(text: &str, max: usize) -> &str {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

fn short_hash(parts: &[&str]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update(part.as_bytes());
        hasher.update([0]);
    }
    hex::encode(hasher.finalize())[..10].to_string()
}

/// `prefix-<hash>`, the prefix cut so the whole stays a valid 63-character DNS label.
fn derived_name(prefix: &str, parts: &[&str]) -> String {
    let hash = short_hash(parts);
    let room = 63 - hash.len() - 1;
    let prefix: String = prefix.chars().take(room).collect();
    let prefix = prefix.trim_end_matches(['-', '.']);
    format!("{prefix}-{hash}")
}

/// The stand-in pod for one PVC (`namespace/name`); it lives in the PVC's namespace, so
/// only the claim's name shows. The name depends on the claim alone, not on the
/// restore: creating it is then the claim's lock, and a second restore of the same claim
/// gets a conflict instead of a second writer.
pub fn stand_in_pod_name(pvc_key: &str) -> String {
    let claim = pvc_key.rsplit('/').next().unwrap_or(pvc_key);
    derived_name(&format!("refill-{claim}"), &[pvc_key])
}

/// The DataRestore of one run of a DataRestoreSchedule, from what the run is for (a
/// backup, a cron time): a second attempt of the same run finds the first one's.
pub(crate) fn schedule_run_name(schedule: &str, uid: &str, run: &str) -> String {
    derived_name(schedule, &[uid, run])
}

/// The claim a `target: NewClaim` restore fills for the PVC `claim`: named after the
/// claim and the restore, so a restarted controller finds the one it made, and a
/// second restore of the same claim makes its own.
pub fn new_claim_name(claim: &str, restore_name: &str) -> String {
    derived_name(&format!("{claim}-{restore_name}"), &[claim, restore_name])
}

/// The scratch claim a path restore of `claim` fills with the whole snapshot: per
/// restore, like [`new_claim_name`], so that a restarted controller finds its own.
pub(crate) fn scratch_claim_name(claim: &str, restore_name: &str) -> String {
    derived_name(
        &format!("refill-scratch-{claim}"),
        &[claim, restore_name, ROLE_SCRATCH],
    )
}

/// The pod that copies the chosen paths into the PVC `pvc_key`. Like the stand-in's, it
/// derives from the claim alone.
pub fn copier_pod_name(pvc_key: &str) -> String {
    let claim = pvc_key.rsplit('/').next().unwrap_or(pvc_key);
    derived_name(
        &format!("{COPIER_POD_PREFIX}{claim}"),
        &[pvc_key, ROLE_COPIER],
    )
}

/// The prime claim, its pod and its PodVolumeRestore of the fill of the claim with
/// `claim_uid`, in Velero's namespace: one fill per claim at a time.
pub fn prime_name(claim_uid: &str) -> String {
    derived_name("refill-prime", &[claim_uid, ROLE_PRIME])
}

/// The PodVolumeRestore of the fill of the claim with `claim_uid`: not the prime
/// pod's name, since Velero's node agent makes a pod named after the PodVolumeRestore
/// in its namespace to move the data.
pub fn prime_restore_name(claim_uid: &str) -> String {
    derived_name("refill-fill", &[claim_uid, "restore"])
}

/// The PodVolumeRestore (and VolumePluginRestore) for one PVC of one DataRestore.
pub(crate) fn pod_volume_restore_name(
    restore_name: &str,
    restore_uid: &str,
    pvc_key: &str,
) -> String {
    derived_name(restore_name, &[restore_uid, pvc_key])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_label_values_are_kept() {
        assert_eq!(label_value("nightly-20260101"), "nightly-20260101");
        let exactly_63 = "a".repeat(63);
        assert_eq!(label_value(&exactly_63), exactly_63);
    }

    #[test]
    fn long_label_values_are_cut_and_hashed_like_velero() {
        let long = format!("{}-backup", "x".repeat(70));
        let value = label_value(&long);
        assert_eq!(value.len(), 63);
        assert_eq!(&value[..57], &long[..57]);
        let digest = hex::encode(Sha256::digest(long.as_bytes()));
        assert_eq!(&value[57..], &digest[..6]);
    }

    #[test]
    fn derived_names_are_stable_valid_and_distinct() {
        let a = stand_in_pod_name("shop/data-web-0");
        assert!(
            a.starts_with("refill-data-web-0-") && !a.contains('/'),
            "{a}"
        );
        assert_eq!(a, stand_in_pod_name("shop/data-web-0"));
        assert_ne!(a, stand_in_pod_name("shop/data-web-1"));
        assert_ne!(a, stand_in_pod_name("other/data-web-0"));
        let long = stand_in_pod_name(&"p".repeat(200));
        assert!(long.len() <= 63, "{long}");
        let pvr = pod_volume_restore_name("restore-", "uid", "ns/pvc");
        assert!(!pvr.contains("--"), "{pvr}");
    }

    #[test]
    fn a_long_value_with_a_wide_character_at_the_cut_does_not_panic() {
        // 56 bytes, then a two-byte character across byte 57.
        let value = format!("{}é{}", "a".repeat(56), "b".repeat(10));
        let cut = label_value(&value);
        assert!(cut.starts_with(&"a".repeat(56)), "{cut}");
        assert_eq!(cut.len(), 62);
        assert_eq!(prefix_within("é", 1), "");
        assert_eq!(prefix_within("ab", 9), "ab");
    }
}

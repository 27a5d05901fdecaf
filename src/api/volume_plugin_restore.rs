//! `VolumePluginRestore`: per-volume restore progress in the shape Velero designed for
//! volume plugins, so tools that read that shape read refill's progress too.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Progress;
use super::data_restore::{ConsumerRecord, VolumeStatus};
use super::gitops::GitOpsRecord;

/// `status.pluginSpecific` keys refill fills in.
pub(crate) mod plugin_keys {
    /// `namespace/name` of the PVC being restored.
    pub(crate) const PVC: &str = "pvc";
    /// The stand-in pod that mounts the PVC.
    pub(crate) const POD: &str = "pod";
    /// The node the data is written on.
    pub(crate) const NODE: &str = "node";
    /// The Velero PodVolumeRestore that writes the data.
    pub(crate) const POD_VOLUME_RESTORE: &str = "podVolumeRestore";
    /// With target NewClaim: `namespace/name` of the claim the files are written into.
    pub(crate) const TARGET_PVC: &str = "targetPVC";
}

/// The provider named in spec.provider and the `velero.io/provider` label (a label
/// value, so without a slash).
pub(crate) const PROVIDER: &str = "refill-fsb";

/// Which snapshot of which backup a volume is restored from.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[kube(
    group = "refill.dev",
    version = "v1alpha1",
    kind = "VolumePluginRestore",
    namespaced,
    status = "VolumePluginRestoreStatus",
    shortname = "vpr",
    category = "refill",
    printcolumn = r#"{"name":"Backup","type":"string","jsonPath":".spec.backupName"}"#,
    printcolumn = r#"{"name":"Volume","type":"string","jsonPath":".status.volumeID"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Done","type":"integer","jsonPath":".status.progress.bytesDone"}"#,
    printcolumn = r#"{"name":"Total","type":"integer","jsonPath":".status.progress.totalBytes"}"#,
    doc = "The progress of one volume of a DataRestore, in the shape Velero gives volume plugin restores; refill keeps it up to date."
)]
#[serde(rename_all = "camelCase")]
pub struct VolumePluginRestoreSpec {
    /// The snapshot the volume's files come from.
    #[serde(rename = "snapshotID")]
    pub snapshot_id: String,
    /// The Velero Backup that holds the snapshot.
    pub backup_name: String,
    /// Who restores the volume: always `refill-fsb`.
    pub provider: String,
    /// The uploader that made the snapshot (`kopia` or `restic`).
    pub volume_type: String,
    /// Zone of the node the data lands on, when known.
    #[serde(default, rename = "volumeAZ", skip_serializing_if = "Option::is_none")]
    pub volume_az: Option<String>,
}

/// The volume's restore as the DataRestore's status shows it.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumePluginRestoreStatus {
    /// The volume's phase in the DataRestore (Pending, Quiescing, StartingStandIn,
    /// Restoring, RemovingStandIn, Copying, Switching, Aborting, Completed, Failed or
    /// Canceled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// `namespace/name` of the PVC.
    #[serde(default, rename = "volumeID", skip_serializing_if = "Option::is_none")]
    pub volume_id: Option<String>,
    /// The latest news of the volume: what it waits for, or why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the volume's consumers began to be stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_timestamp: Option<Time>,
    /// When the volume ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_timestamp: Option<Time>,
    /// Bytes written so far, of the total to write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,
    /// Where the work happens: `pvc`, `pod` (the stand-in), `node` and
    /// `podVolumeRestore`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub plugin_specific: BTreeMap<String, String>,
    /// refill's own record of the volume: the DataRestore's state of it, and of the
    /// consumers that come back through it, as one JSON text (`jq '.status.record |
    /// fromjson'` reads it). The DataRestore keeps only counts, so that its size does
    /// not grow with its volumes.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "record_text")]
    #[schemars(with = "Option<String>")]
    pub record: Option<VolumeRecord>,
}

/// The record as written: a restore writes each volume's record about ten times, and
/// the API server checks and tracks an object of a custom resource field by field on
/// every write (the record's fields were about half of what a write cost it), a string
/// once. A record written as an object, by a refill before this, is read as well, so a
/// restore it began goes on.
mod record_text {
    use serde::de::Error as _;
    use serde::ser::Error as _;
    use serde::{Deserialize, Deserializer, Serializer};

    use super::VolumeRecord;

    pub(super) fn serialize<S: Serializer>(
        record: &Option<VolumeRecord>,
        to: S,
    ) -> Result<S::Ok, S::Error> {
        match record {
            Some(record) => {
                to.serialize_str(&serde_json::to_string(record).map_err(S::Error::custom)?)
            }
            None => to.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        from: D,
    ) -> Result<Option<VolumeRecord>, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            Text(String),
            Object(Box<VolumeRecord>),
        }
        Ok(match Option::<Written>::deserialize(from)? {
            None => None,
            Some(Written::Text(text)) => {
                Some(serde_json::from_str(&text).map_err(D::Error::custom)?)
            }
            Some(Written::Object(record)) => Some(*record),
        })
    }
}

/// One volume of a DataRestore as refill keeps it.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumeRecord {
    /// Where the volume comes in the DataRestore's list (its order of work).
    pub index: u32,
    /// The volume's restore.
    pub volume: VolumeStatus,
    /// The consumers whose first PVC in this restore is this volume's, with what
    /// brings each back. Written before any of them is stopped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub consumers: Vec<ConsumerRecord>,
    /// The GitOps objects whose first managed consumer is kept with this volume, with
    /// what puts each back. Written before any of them is paused.
    #[serde(default, rename = "gitOps", skip_serializing_if = "Vec::is_empty")]
    pub git_ops: Vec<GitOpsRecord>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::VolumePhase;

    fn status() -> VolumePluginRestoreStatus {
        VolumePluginRestoreStatus {
            phase: Some("Restoring".into()),
            record: Some(VolumeRecord {
                index: 3,
                volume: VolumeStatus {
                    pvc: "shop/data".into(),
                    phase: VolumePhase::Restoring,
                    ..Default::default()
                },
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_record_is_written_as_one_json_text_and_read_back_as_written() {
        let written = serde_json::to_value(status()).unwrap();
        let text = written["record"].as_str().expect("a JSON text");
        let record: serde_json::Value = serde_json::from_str(text).unwrap();
        assert_eq!(
            (&record["index"], &record["volume"]["pvc"]),
            (&json!(3), &json!("shop/data"))
        );
        let read: VolumePluginRestoreStatus = serde_json::from_value(written).unwrap();
        assert_eq!(read, status());
        let none = serde_json::to_value(VolumePluginRestoreStatus::default()).unwrap();
        assert_eq!(none, json!({}));
        let read: VolumePluginRestoreStatus = serde_json::from_value(none).unwrap();
        assert_eq!(read.record, None);
    }

    #[test]
    fn a_record_an_earlier_refill_wrote_as_an_object_is_read_too() {
        let mut written = serde_json::to_value(status()).unwrap();
        written["record"] = serde_json::to_value(status().record).unwrap();
        assert!(written["record"].is_object());
        let read: VolumePluginRestoreStatus = serde_json::from_value(written).unwrap();
        assert_eq!(read, status());
    }

    #[test]
    fn a_record_that_is_not_one_is_refused_not_taken_as_empty() {
        for bad in [json!("{\"index\": \"three\"}"), json!("not json"), json!(7)] {
            let written = json!({"phase": "Restoring", "record": bad});
            assert!(
                serde_json::from_value::<VolumePluginRestoreStatus>(written).is_err(),
                "{bad} was read"
            );
        }
    }
}

//! `VolumePluginRestore`: per-volume restore progress in the shape Velero designed for
//! volume plugins, so tools that read that shape read refill's progress too.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Progress;

/// `status.pluginSpecific` keys refill fills in.
pub mod plugin_keys {
    pub const PVC: &str = "pvc";
    pub const POD: &str = "pod";
    pub const NODE: &str = "node";
    pub const POD_VOLUME_RESTORE: &str = "podVolumeRestore";
}

/// The provider named in spec.provider and the `velero.io/provider` label (a label
/// value, so without a slash).
pub const PROVIDER: &str = "refill-fsb";

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
    printcolumn = r#"{"name":"Total","type":"integer","jsonPath":".status.progress.totalBytes"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct VolumePluginRestoreSpec {
    #[serde(rename = "snapshotID")]
    pub snapshot_id: String,
    pub backup_name: String,
    pub provider: String,
    /// The uploader that made the snapshot (`kopia` or `restic`).
    pub volume_type: String,
    /// Zone of the node the data lands on, when known.
    #[serde(default, rename = "volumeAZ", skip_serializing_if = "Option::is_none")]
    pub volume_az: Option<String>,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumePluginRestoreStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// `namespace/name` of the PVC.
    #[serde(default, rename = "volumeID", skip_serializing_if = "Option::is_none")]
    pub volume_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_timestamp: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_timestamp: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub plugin_specific: BTreeMap<String, String>,
}

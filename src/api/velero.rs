//! The `velero.io/v1` objects refill touches, with Velero's own field names.
//!
//! Only the fields refill reads or writes are typed; the CRD YAML refill ships for them
//! (used by tests and the demo) keeps every other field through
//! `x-kubernetes-preserve-unknown-fields`, so objects written by Velero survive a round trip.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub const VELERO_GROUP: &str = "velero.io";
pub const VELERO_API_VERSION: &str = "velero.io/v1";

/// Phase of a Velero Backup.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum BackupPhase {
    New,
    Queued,
    ReadyToStart,
    FailedValidation,
    InProgress,
    WaitingForPluginOperations,
    WaitingForPluginOperationsPartiallyFailed,
    Finalizing,
    FinalizingPartiallyFailed,
    Completed,
    PartiallyFailed,
    Failed,
    Deleting,
    #[serde(other)]
    Unknown,
}

impl BackupPhase {
    /// Only these phases leave data in the repository that can be restored.
    pub fn holds_usable_data(self) -> bool {
        matches!(self, BackupPhase::Completed | BackupPhase::PartiallyFailed)
    }
}

#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[kube(
    group = "velero.io",
    version = "v1",
    kind = "Backup",
    namespaced,
    status = "BackupStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct BackupSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_location: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub included_namespaces: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_volumes_to_fs_backup: Option<bool>,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<BackupPhase>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_timestamp: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_timestamp: Option<Time>,
}

#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[kube(
    group = "velero.io",
    version = "v1",
    kind = "Schedule",
    namespaced,
    status = "ScheduleStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleSpec {
    #[serde(default)]
    pub schedule: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_backup: Option<Time>,
}

#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[kube(
    group = "velero.io",
    version = "v1",
    kind = "BackupStorageLocation",
    namespaced,
    status = "BackupStorageLocationStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct BackupStorageLocationSpec {
    #[serde(default)]
    pub provider: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_mode: Option<String>,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupStorageLocationStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
}

/// Phase shared by PodVolumeBackup and PodVolumeRestore.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum PodVolumePhase {
    New,
    Accepted,
    Prepared,
    InProgress,
    Canceling,
    Canceled,
    Completed,
    Failed,
    #[serde(other)]
    Unknown,
}

impl PodVolumePhase {
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            PodVolumePhase::Completed | PodVolumePhase::Failed | PodVolumePhase::Canceled
        )
    }
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    #[serde(default)]
    pub total_bytes: i64,
    #[serde(default)]
    pub bytes_done: i64,
}

#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[kube(
    group = "velero.io",
    version = "v1",
    kind = "PodVolumeBackup",
    namespaced,
    status = "PodVolumeBackupStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct PodVolumeBackupSpec {
    #[serde(default)]
    pub node: String,
    #[serde(default)]
    pub pod: ObjectReference,
    #[serde(default)]
    pub volume: String,
    #[serde(default)]
    pub backup_storage_location: String,
    #[serde(default)]
    pub repo_identifier: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uploader_type: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub uploader_settings: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel: Option<bool>,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodVolumeBackupStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<PodVolumePhase>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(
        default,
        rename = "snapshotID",
        skip_serializing_if = "Option::is_none"
    )]
    pub snapshot_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_timestamp: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_timestamp: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incremental_bytes: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted_timestamp: Option<Time>,
}

#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[kube(
    group = "velero.io",
    version = "v1",
    kind = "PodVolumeRestore",
    namespaced,
    status = "PodVolumeRestoreStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct PodVolumeRestoreSpec {
    pub pod: ObjectReference,
    pub volume: String,
    pub backup_storage_location: String,
    pub repo_identifier: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uploader_type: Option<String>,
    #[serde(rename = "snapshotID")]
    pub snapshot_id: String,
    pub source_namespace: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub uploader_settings: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_size: Option<i64>,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodVolumeRestoreStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<PodVolumePhase>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_timestamp: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_timestamp: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted_timestamp: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

impl PodVolumeRestore {
    /// An empty phase counts as New: that is what the node agent picks up.
    pub fn phase(&self) -> PodVolumePhase {
        self.status
            .as_ref()
            .and_then(|s| s.phase)
            .unwrap_or(PodVolumePhase::New)
    }
}

impl PodVolumeBackup {
    pub fn phase(&self) -> Option<PodVolumePhase> {
        self.status.as_ref().and_then(|s| s.phase)
    }
}

impl Backup {
    pub fn phase(&self) -> Option<BackupPhase> {
        self.status.as_ref().and_then(|s| s.phase)
    }
}

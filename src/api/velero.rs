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

/// Phase of a Velero Backup.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum BackupPhase {
    /// Created; Velero's backup controller has not looked at it yet.
    New,
    /// Waiting in Velero's queue for a free slot among concurrent backups.
    Queued,
    /// Out of the queue; the backup controller starts it next.
    ReadyToStart,
    /// Refused by Velero's validation; it never ran and holds nothing.
    FailedValidation,
    /// Velero is backing up resources and pod volumes.
    InProgress,
    /// Resources are backed up; asynchronous plugin operations (snapshot uploads, data
    /// movers) still run. Not usable yet.
    WaitingForPluginOperations,
    /// As WaitingForPluginOperations, with errors already recorded: it will end
    /// PartiallyFailed.
    WaitingForPluginOperationsPartiallyFailed,
    /// Plugin operations are done; Velero is writing the final state of what they
    /// changed. Not usable yet.
    Finalizing,
    /// As Finalizing, with errors already recorded: it will end PartiallyFailed.
    FinalizingPartiallyFailed,
    /// Ran to its end without errors.
    Completed,
    /// Ran to its end, but some items failed to back up; the rest is usable.
    PartiallyFailed,
    /// An error stopped it before it could finish.
    Failed,
    /// The backup and its data in object storage are being deleted.
    Deleting,
    /// A phase this version of refill does not know (a newer Velero's).
    #[serde(other)]
    Unknown,
}

impl BackupPhase {
    /// Only these phases leave data in the repository that can be restored.
    pub(crate) fn holds_usable_data(self) -> bool {
        matches!(self, BackupPhase::Completed | BackupPhase::PartiallyFailed)
    }
}

/// What a [`Backup`] was asked to take, as far as refill reads it.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[kube(
    group = "velero.io",
    version = "v1",
    kind = "Backup",
    namespaced,
    status = "BackupStatus",
    schema = "disabled",
    doc = "A Velero Backup, whose pod volume snapshots a DataRestore restores from."
)]
#[serde(rename_all = "camelCase")]
pub struct BackupSpec {
    /// The BackupStorageLocation the backup is stored in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_location: Option<String>,
    /// Namespaces whose objects the backup took; empty means every namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub included_namespaces: Vec<String>,
    /// Whether every pod volume was backed up with file-system backup, not only the
    /// volumes annotated for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_volumes_to_fs_backup: Option<bool>,
}

/// How a [`Backup`] went.
#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupStatus {
    /// Where the backup is in its life; unset until Velero first writes the status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<BackupPhase>,
    /// When Velero started running the backup (server time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_timestamp: Option<Time>,
    /// When the backup ended, failed ones included (server time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_timestamp: Option<Time>,
}

/// When a [`Schedule`] makes backups.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[kube(
    group = "velero.io",
    version = "v1",
    kind = "Schedule",
    namespaced,
    status = "ScheduleStatus",
    schema = "disabled",
    doc = "A Velero Schedule: makes Backups on a cron schedule, labelled with its name."
)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleSpec {
    /// The cron expression saying when a backup is made.
    #[serde(default)]
    pub schedule: String,
    /// Whether making backups is suspended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
}

/// What a [`Schedule`] last did.
#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleStatus {
    /// `New`, `Enabled` or `FailedValidation`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// When the schedule last made a backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_backup: Option<Time>,
}

/// Phase shared by PodVolumeBackup and PodVolumeRestore.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum PodVolumePhase {
    /// Created; no node agent has taken it yet.
    New,
    /// A node agent took it and is preparing the data path (the pod that moves the
    /// data).
    Accepted,
    /// The data path is ready; the transfer starts next.
    Prepared,
    /// The data is being moved; `status.progress` counts the bytes.
    InProgress,
    /// `spec.cancel` was set; the node agent is stopping the transfer.
    Canceling,
    /// Stopped on request before the end.
    Canceled,
    /// All data moved.
    Completed,
    /// Ended with an error; `status.message` says which.
    Failed,
    /// A phase this version of refill does not know (a newer Velero's).
    #[serde(other)]
    Unknown,
}

impl PodVolumePhase {
    /// The node agent is done with it: Completed, Failed or Canceled.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            PodVolumePhase::Completed | PodVolumePhase::Failed | PodVolumePhase::Canceled
        )
    }
}

/// How far a transfer has got, in bytes.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    /// Size of the data to move (for a restore, the snapshot's size).
    #[serde(default)]
    pub total_bytes: i64,
    /// Bytes moved so far.
    #[serde(default)]
    pub bytes_done: i64,
}

/// Which pod volume a [`PodVolumeBackup`] backed up, and into which repository.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[kube(
    group = "velero.io",
    version = "v1",
    kind = "PodVolumeBackup",
    namespaced,
    status = "PodVolumeBackupStatus",
    schema = "disabled",
    doc = "A Velero PodVolumeBackup: the file-system backup of one pod volume in a Backup."
)]
#[serde(rename_all = "camelCase")]
pub struct PodVolumeBackupSpec {
    /// The node the pod ran on, whose node agent made the backup.
    #[serde(default)]
    pub node: String,
    /// The pod whose volume was backed up; its namespace is the PVC's.
    #[serde(default)]
    pub pod: ObjectReference,
    /// The volume's name in the pod's spec (not the PVC's name).
    #[serde(default)]
    pub volume: String,
    /// The BackupStorageLocation holding the backup repository.
    #[serde(default)]
    pub backup_storage_location: String,
    /// Identifies the backup repository (one per namespace and location) that holds
    /// the snapshot.
    #[serde(default)]
    pub repo_identifier: String,
    /// The uploader that made the snapshot: "kopia" or "restic".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uploader_type: Option<String>,
    /// Tags stored with the snapshot; Velero's include `backup`, the Backup's name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// Uploader options the backup ran with (e.g. parallel file uploads); a restore
    /// passes them on.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub uploader_settings: BTreeMap<String, String>,
    /// Set to ask the node agent to stop the backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel: Option<bool>,
}

/// How a [`PodVolumeBackup`] went, and the snapshot it made.
#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodVolumeBackupStatus {
    /// Where the backup is; only a Completed one has a snapshot to restore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<PodVolumePhase>,
    /// The path the node agent backed the volume up from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The snapshot in the repository that holds the volume's files.
    #[serde(
        default,
        rename = "snapshotID",
        skip_serializing_if = "Option::is_none"
    )]
    pub snapshot_id: Option<String>,
    /// Why it failed, or other news from the node agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the node agent started the backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_timestamp: Option<Time>,
    /// When it ended, failed ones included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_timestamp: Option<Time>,
    /// The volume's total size and the bytes backed up; `totalBytes` is what a
    /// restore of it will write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,
    /// Bytes new or changed since the previous backup of the volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incremental_bytes: Option<i64>,
    /// When a node agent accepted it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted_timestamp: Option<Time>,
}

/// Which snapshot a [`PodVolumeRestore`] writes into which pod volume.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[kube(
    group = "velero.io",
    version = "v1",
    kind = "PodVolumeRestore",
    namespaced,
    status = "PodVolumeRestoreStatus",
    schema = "disabled",
    doc = "A Velero PodVolumeRestore: a node agent writes a snapshot into a pod's volume."
)]
#[serde(rename_all = "camelCase")]
pub struct PodVolumeRestoreSpec {
    /// The pod whose volume is written to; its `restore-wait` init container holds it
    /// until the data is in.
    pub pod: ObjectReference,
    /// The volume's name in that pod's spec.
    pub volume: String,
    /// The BackupStorageLocation holding the backup repository.
    pub backup_storage_location: String,
    /// Where the backup repository is, as the PodVolumeBackup recorded it.
    pub repo_identifier: String,
    /// The uploader that made the snapshot: "kopia" or "restic".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uploader_type: Option<String>,
    /// The snapshot to restore.
    #[serde(rename = "snapshotID")]
    pub snapshot_id: String,
    /// The namespace the volume was backed up from, whose repository holds the
    /// snapshot.
    pub source_namespace: String,
    /// Uploader options, as the backup ran with them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub uploader_settings: BTreeMap<String, String>,
    /// Set to ask the node agent to stop the restore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel: Option<bool>,
    /// The snapshot's logical size in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_size: Option<i64>,
}

/// How far the node agent has got with a [`PodVolumeRestore`].
#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodVolumeRestoreStatus {
    /// Where the restore is; unset until a node agent writes it (read as New).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<PodVolumePhase>,
    /// Why it failed or was canceled, or other news from the node agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the node agent started the restore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_timestamp: Option<Time>,
    /// When it ended, failed ones included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_timestamp: Option<Time>,
    /// The snapshot's size and the bytes restored so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,
    /// When a node agent accepted it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted_timestamp: Option<Time>,
    /// The node whose node agent handles it.
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
    /// The phase, None before a node agent has written one.
    pub fn phase(&self) -> Option<PodVolumePhase> {
        self.status.as_ref().and_then(|s| s.phase)
    }
}

impl Backup {
    /// The phase, None before Velero has written one.
    pub(crate) fn phase(&self) -> Option<BackupPhase> {
        self.status.as_ref().and_then(|s| s.phase)
    }

    /// Whether Velero finished it without errors.
    pub(crate) fn is_completed(&self) -> bool {
        self.phase() == Some(BackupPhase::Completed)
    }

    /// When it ended (Velero's clock), else when it was made: the order of backups.
    pub(crate) fn completed_at(&self) -> Option<k8s_openapi::jiff::Timestamp> {
        self.status
            .as_ref()
            .and_then(|s| s.completion_timestamp.as_ref())
            .or(self.metadata.creation_timestamp.as_ref())
            .map(|t| t.0)
    }
}

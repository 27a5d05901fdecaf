//! `BackupVolume`: the data source of a PersistentVolumeClaim whose volume is to come
//! up holding what a Velero file-system backup holds of a claim of the same namespace.
//! A claim names it in `spec.dataSourceRef` and refill, as a volume populator, fills a
//! volume from the backup and binds the claim to it.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The backup and the claim in it whose files a new volume starts with.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[kube(
    group = "refill.dev",
    version = "v1alpha1",
    kind = "BackupVolume",
    namespaced,
    shortname = "bv",
    category = "refill",
    printcolumn = r#"{"name":"Backup","type":"string","jsonPath":".spec.backup"}"#,
    printcolumn = r#"{"name":"Schedule","type":"string","jsonPath":".spec.schedule"}"#,
    printcolumn = r#"{"name":"Claim","type":"string","jsonPath":".spec.claim"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    doc = "A volume's files as a Velero file-system backup holds them: a PersistentVolumeClaim naming it in spec.dataSourceRef is bound to a volume refill filled from the backup."
)]
#[serde(rename_all = "camelCase")]
pub struct BackupVolumeSpec {
    /// A Velero Backup in Velero's namespace. Exactly one of backup and schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = super::bounds::NAME))]
    pub backup: Option<String>,
    /// A Velero Schedule in Velero's namespace: its newest Completed backup when the
    /// fill starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = super::bounds::NAME))]
    pub schedule: Option<String>,
    /// The claim of this object's own namespace in the backup whose files the new
    /// volume holds. Another namespace's claims cannot be named.
    #[schemars(length(max = super::bounds::NAME))]
    pub claim: String,
}

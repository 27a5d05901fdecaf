//! `DataRestoreRequest`: a restore an application team asks for in its own namespace,
//! without access to Velero's. It may name only that namespace's claims and only a
//! backup that holds that namespace's volumes, and it has no say over the restore
//! helper's image or security. refill carries it out through a DataRestore in
//! Velero's namespace, which the team can neither see nor change, and copies that
//! restore's progress back here.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::data_restore::{
    ConsumerPolicy, DataRestoreStatus, ExtraFiles, FailurePolicy, RestoreMethod,
};
use super::gitops::GitOpsSpec;

/// What a team asks to restore: a backup and claims of its own namespace.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[kube(
    group = "refill.dev",
    version = "v1alpha1",
    kind = "DataRestoreRequest",
    namespaced,
    status = "DataRestoreRequestStatus",
    shortname = "drr",
    category = "refill",
    printcolumn = r#"{"name":"Backup","type":"string","jsonPath":".spec.backupName"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Volumes","type":"string","jsonPath":".status.summary"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    doc = "A team's request to restore the files of claims in its own namespace from a Velero backup; refill carries it out through a DataRestore in Velero's namespace and reports its progress here."
)]
#[serde(rename_all = "camelCase")]
pub struct DataRestoreRequestSpec {
    /// The Velero Backup to restore from; it must hold volumes of this namespace.
    #[schemars(length(max = super::bounds::NAME))]
    pub backup_name: String,
    /// Claims of this namespace to restore, by name. Empty: every claim of this
    /// namespace the backup holds. At most 5000.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = super::bounds::CLAIMS), inner(length(max = super::bounds::NAMESPACED_NAME)))]
    pub pvcs: Vec<String>,
    /// Nodes the stand-in pod may run on, keyed by claim name; required for a claim
    /// that is unbound with a WaitForFirstConsumer StorageClass. At most 5000 claims,
    /// of at most 5000 nodes each.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = super::bounds::candidate_nodes)]
    pub candidate_nodes: BTreeMap<String, Vec<String>>,
    /// How each claim's files are put back, as a DataRestore's spec.method: Direct
    /// (consumers stop for the whole restore) or Staged (they stop only while the
    /// difference is copied in).
    #[serde(default, skip_serializing_if = "RestoreMethod::is_direct")]
    pub method: RestoreMethod,
    /// What happens to files the backup does not hold, as a DataRestore's
    /// spec.extraFiles: Delete (the default) or Keep.
    #[serde(default, skip_serializing_if = "ExtraFiles::is_delete")]
    pub extra_files: ExtraFiles,
    /// What to do with pods that mount a claim being restored.
    #[serde(default)]
    pub consumers: ConsumerPolicy,
    /// Must be true with consumers: None, saying that files are overwritten under
    /// applications that keep running.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub acknowledge_running_consumers: bool,
    /// What to do with the stopped consumers when a volume fails.
    #[serde(default)]
    pub on_failure: FailurePolicy,
    /// What to do with the Flux or Argo CD objects that manage the consumers, as a
    /// DataRestore's spec.gitOps; the cluster's admin may allow less
    /// (`refill controller --request-gitops`). Only an object that itself lists a
    /// consumer is ever paused.
    #[serde(default, rename = "gitOps", skip_serializing_if = "Option::is_none")]
    pub git_ops: Option<GitOpsSpec>,
    /// How long one volume may take (default `4h`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = super::bounds::SHORT_TEXT))]
    pub volume_timeout: Option<String>,
    /// How long the whole request may take (default `24h`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = super::bounds::SHORT_TEXT))]
    pub timeout: Option<String>,
    /// Set to true to stop the restore; consumers are brought back as after a failure.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cancel: bool,
}

/// The DataRestore's status as the team may see it.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DataRestoreRequestStatus {
    /// The DataRestore carrying the request out, `namespace/name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_restore: Option<String>,
    /// That DataRestore's status (phase, volumes, consumers, conditions, errors),
    /// with this request's generation; for a refused request, why it was refused,
    /// each error naming the field at fault.
    #[serde(flatten)]
    pub restore: DataRestoreStatus,
}

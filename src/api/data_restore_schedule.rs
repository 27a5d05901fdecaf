//! `DataRestoreSchedule`: restores made again and again from one template, as Velero's
//! Schedule makes backups: on each new Completed backup of a Velero Schedule (a
//! standby cluster refreshed from the primary's backups), and/or at cron times. It
//! never runs two of its restores at once.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::data_restore::{DataRestoreSpec, Phase};

/// How many finished restores of each kind a schedule keeps when its spec does not say.
pub(crate) const DEFAULT_HISTORY_LIMIT: u32 = 3;

/// The restores to make, and when.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[kube(
    group = "refill.dev",
    version = "v1alpha1",
    kind = "DataRestoreSchedule",
    namespaced,
    status = "DataRestoreScheduleStatus",
    shortname = "drs",
    category = "refill",
    printcolumn = r#"{"name":"Follows","type":"string","jsonPath":".spec.veleroSchedule"}"#,
    printcolumn = r#"{"name":"Cron","type":"string","jsonPath":".spec.cron"}"#,
    printcolumn = r#"{"name":"Paused","type":"boolean","jsonPath":".spec.paused"}"#,
    printcolumn = r#"{"name":"Last Backup","type":"string","jsonPath":".status.lastBackup"}"#,
    printcolumn = r#"{"name":"Last Result","type":"string","jsonPath":".status.lastResult"}"#,
    printcolumn = r#"{"name":"Active","type":"string","jsonPath":".status.active"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    doc = "Restores of the same PVCs made again and again from a DataRestore template: for each new Completed backup of a Velero Schedule, and/or at cron times; never two at once."
)]
#[serde(rename_all = "camelCase")]
pub struct DataRestoreScheduleSpec {
    /// The DataRestore each run makes. With veleroSchedule, its backupName and
    /// scheduleName stay empty: each run names the backup it restores.
    pub template: DataRestoreSpec,
    /// A Velero Schedule in this namespace: each new Completed backup of it is
    /// restored (the newest first: backups that arrive while a restore runs are not
    /// queued, the newest of them is taken next). Its newest Completed backup when the
    /// schedule is made is restored at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = super::bounds::NAME))]
    pub velero_schedule: Option<String>,
    /// Also (or only) restore at these times, a cron expression in UTC (`0 3 * * *`):
    /// from veleroSchedule's newest Completed backup, or else the template's backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = super::bounds::SHORT_TEXT))]
    pub cron: Option<String>,
    /// While true no restore starts; one running goes on.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// Completed restores kept (default 3); older ones are deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub successful_history_limit: Option<u32>,
    /// Restores that ended otherwise kept (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_history_limit: Option<u32>,
}

/// What the schedule has done, written by the controller alone.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DataRestoreScheduleStatus {
    /// The metadata.generation of the spec this status was written for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The backup of the newest restore made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_backup: Option<String>,
    /// The newest DataRestore made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_restore: Option<String>,
    /// How the newest finished restore ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_result: Option<Phase>,
    /// When the newest restore was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run_time: Option<Time>,
    /// The cron time last taken (or the schedule's creation): times before it are
    /// not run again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_cron_time: Option<Time>,
    /// When cron starts the next restore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_run_time: Option<Time>,
    /// The restore running now, if one is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<String>,
    /// Why the schedule cannot run, each naming its field.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
    /// Ready, Reconciling and Stalled in kstatus style.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = super::bounds::CONDITIONS))]
    pub conditions: Vec<Condition>,
}

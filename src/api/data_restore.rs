//! `DataRestore`: one request to put the files of some PVCs back as a Velero backup
//! holds them, leaving every other object in place.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    PodSecurityContext, ResourceRequirements, SecurityContext, Toleration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::gitops::{GitOpsRecord, GitOpsSpec, GitOpsState};
use super::paths::{CopySummary, PathRestore};

/// The `apiVersion` of refill's own kinds.
pub const API_VERSION: &str = "refill.dev/v1alpha1";

/// What to restore and how: the backup, the PVCs, and what to do with the workloads
/// that use them.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
#[kube(
    group = "refill.dev",
    version = "v1alpha1",
    kind = "DataRestore",
    namespaced,
    status = "DataRestoreStatus",
    shortname = "dr",
    category = "refill",
    printcolumn = r#"{"name":"Backup","type":"string","jsonPath":".status.backupName"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Volumes","type":"string","jsonPath":".status.summary"}"#,
    printcolumn = r#"{"name":"Started","type":"date","jsonPath":".status.startTime"}"#,
    printcolumn = r#"{"name":"Completed","type":"date","jsonPath":".status.completionTime"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    doc = "A restore of the files of some PVCs from a Velero file-system backup, in place: the PVCs, their volumes and every other object stay as they are."
)]
#[serde(rename_all = "camelCase")]
pub struct DataRestoreSpec {
    /// The Velero Backup to restore from. Exactly one of backupName and scheduleName.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = super::bounds::NAME))]
    pub backup_name: Option<String>,
    /// A Velero Schedule: its newest Completed backup is used, chosen once during
    /// validation and recorded in status.backupName.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = super::bounds::NAME))]
    pub schedule_name: Option<String>,
    /// Restore every file-system-backed PVC of the backup in these namespaces (at
    /// most 5000).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = super::bounds::CLAIMS), inner(length(max = super::bounds::LABEL)))]
    pub included_namespaces: Vec<String>,
    /// PVCs to restore, each as `namespace/name` (at most 5000).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = super::bounds::CLAIMS), inner(length(max = super::bounds::NAMESPACED_NAME)))]
    pub pvcs: Vec<String>,
    /// Restore the backup's PVCs whose current labels match. Alone it covers every
    /// namespace; with includedNamespaces, only those. At most 256 expressions, of
    /// at most 256 values each.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = super::bounds::kubernetes_lists)]
    pub selector: Option<LabelSelector>,
    /// Nodes the stand-in pod may run on, keyed by `namespace/name` of the PVC. Required
    /// for a PVC that is unbound with a WaitForFirstConsumer StorageClass. At most
    /// 5000 PVCs, of at most 5000 nodes each.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = super::bounds::candidate_nodes)]
    pub candidate_nodes: BTreeMap<String, Vec<String>>,
    /// Where the files go: back into each PVC (InPlace), or into a new PVC beside it
    /// (NewClaim), which leaves the PVC and its consumers untouched (see
    /// switchWorkloads).
    #[serde(default, skip_serializing_if = "RestoreTarget::is_in_place")]
    pub target: RestoreTarget,
    /// With target NewClaim: once a new claim holds the backup, move the workloads
    /// labelled `refill.dev/switch-claim: <PVC name>` onto it. Each is stopped, waited
    /// for until none of its pods mounts the PVC, and started again with its pod
    /// template naming the new claim, in one write; if the restore fails or is canceled
    /// first, it comes back on the PVC as it was.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub switch_workloads: bool,
    /// Put back only these paths of every selected PVC (in place only), instead of the
    /// whole volume: files changed or added since the backup elsewhere are kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paths: Option<PathRestore>,
    /// Paths for single PVCs, keyed by `namespace/name`; overrides spec.paths for them.
    /// At most 5000 PVCs.
    #[serde(
        default,
        rename = "pvcPaths",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    #[schemars(transform = super::bounds::claim_map)]
    pub pvc_paths: BTreeMap<String, PathRestore>,
    /// How each volume's files are put back in place. Direct: its consumers stop,
    /// then Velero's node agent writes the backup into the PVC. Staged: the node agent
    /// first fills a scratch claim beside the PVC while the consumers keep running;
    /// only then do they stop, while refill's copier makes the PVC equal to the
    /// scratch claim (writing only what differs), so that they are down only for the
    /// difference. What the app writes during the fill is discarded all the same.
    /// Path restores always work as Staged. Staged is refused with target NewClaim,
    /// which fills the new claim directly and stops nothing.
    #[serde(default, skip_serializing_if = "RestoreMethod::is_direct")]
    pub method: RestoreMethod,
    /// What happens to the PVC's files and directories that the backup does not hold.
    /// Delete (the default): they are removed, and the volume ends exactly as the
    /// backup holds it (Velero's `.velero` folder aside). Keep: the backup's files are
    /// written over what is there and nothing is removed. Path restores follow their
    /// own `mirror` instead. Keep is refused with target NewClaim (a new claim holds
    /// only the backup) and with spec.paths.
    #[serde(default, skip_serializing_if = "ExtraFiles::is_delete")]
    pub extra_files: ExtraFiles,
    /// What to do with pods that mount a PVC being restored.
    #[serde(default)]
    pub consumers: ConsumerPolicy,
    /// Must be true with consumers: None, saying that files are overwritten under
    /// applications that keep running and may read or write them meanwhile.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub acknowledge_running_consumers: bool,
    /// What to do with the stopped consumers when a volume fails.
    #[serde(default)]
    pub on_failure: FailurePolicy,
    /// What to do with Flux Kustomizations, HelmReleases and Argo CD Applications that
    /// manage the consumers: by default they are paused for the restore, since they
    /// would scale a stopped consumer back up.
    #[serde(default, rename = "gitOps", skip_serializing_if = "Option::is_none")]
    pub git_ops: Option<GitOpsSpec>,
    /// How long one volume may take, from quiesce to done (e.g. `30m`; default `4h`,
    /// as Velero's own pod volume operations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = super::bounds::SHORT_TEXT))]
    pub volume_timeout: Option<String>,
    /// How long the whole request may take (e.g. `12h`; default `24h`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = super::bounds::SHORT_TEXT))]
    pub timeout: Option<String>,
    /// How many volumes are restored at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel: Option<u32>,
    /// Settings for the `restore-wait` init container; unset fields come from Velero's
    /// restore-helper ConfigMap, then from Velero's defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_helper: Option<RestoreHelperOverrides>,
    /// Image of the stand-in pod's idle container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = super::bounds::IMAGE))]
    pub stand_in_image: Option<String>,
    /// Set to true to stop the restore; consumers are brought back as after a failure.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cancel: bool,
}

/// What to do with the workloads whose pods mount a PVC being restored: nothing may
/// write to a volume while its data is put back.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ConsumerPolicy {
    /// Scale Deployments, StatefulSets, ReplicaSets and ReplicationControllers to zero,
    /// suspend CronJobs and wait for running Jobs; refuse bare pods and DaemonSets.
    #[default]
    ScaleDown,
    /// Also stop consumers that cannot be scaled: delete and re-create bare pods,
    /// park DaemonSets on no node, suspend CronJobs, wait for Jobs.
    Detach,
    /// Fail if anything mounts the PVC.
    Refuse,
    /// Stop nothing: the files are put back while the consumers run, which overwrites
    /// files under a running application. Needs spec.acknowledgeRunningConsumers.
    None,
}

/// How a volume's files are put back in place (spec.method).
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum RestoreMethod {
    /// Consumers stop first; the node agent writes into the PVC itself. Downtime is
    /// the whole restore.
    #[default]
    Direct,
    /// The node agent fills a scratch claim while consumers run; they stop only while
    /// refill's copier makes the PVC equal to it. Needs room for a second copy of the
    /// volume for the length of the restore.
    Staged,
}

impl RestoreMethod {
    /// The default, left out when serialized.
    pub(crate) fn is_direct(&self) -> bool {
        *self == RestoreMethod::Direct
    }
}

/// What a restore does with what the PVC holds and the backup does not (spec.extraFiles).
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ExtraFiles {
    /// Removed: the volume ends exactly as the backup holds it.
    #[default]
    Delete,
    /// Left where they are beside the backup's files.
    Keep,
}

impl ExtraFiles {
    /// The default, left out when serialized.
    pub(crate) fn is_delete(&self) -> bool {
        *self == ExtraFiles::Delete
    }
}

/// Where a restore puts the files of a PVC.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum RestoreTarget {
    /// Into the PVC itself, its consumers stopped meanwhile (see consumers).
    #[default]
    InPlace,
    /// Into a new PVC in the same namespace, of the same StorageClass, access modes and
    /// size, named in status.volumes[].targetPVC and kept after the restore; nothing is
    /// stopped. Workloads are pointed at it by the user, or by refill with
    /// switchWorkloads.
    NewClaim,
}

impl RestoreTarget {
    /// The default, left out when serialized.
    pub(crate) fn is_in_place(&self) -> bool {
        *self == RestoreTarget::InPlace
    }
}

impl DataRestoreSpec {
    /// How consumers are actually treated: a restore into new claims writes nowhere
    /// they read, so it stops none of them.
    pub(crate) fn consumer_policy(&self) -> ConsumerPolicy {
        match self.target {
            RestoreTarget::InPlace => self.consumers,
            RestoreTarget::NewClaim => ConsumerPolicy::None,
        }
    }

    /// The paths to put back of the PVC `pvc_key` (`namespace/name`), when only some are.
    pub(crate) fn paths_for(&self, pvc_key: &str) -> Option<&PathRestore> {
        self.pvc_paths.get(pvc_key).or(self.paths.as_ref())
    }

    /// The PVC `pvc_key` is filled through a scratch claim beside it, its consumers
    /// stopped only after: Staged in place, or a path restore.
    pub(crate) fn fills_scratch_first(&self, pvc_key: &str) -> bool {
        self.target == RestoreTarget::InPlace
            && (self.method == RestoreMethod::Staged || self.paths_for(pvc_key).is_some())
    }

    /// Nothing the backup lacks is removed: asked for (Keep), or a direct restore beside
    /// consumers that keep running (consumers: None), whose volume is not emptied under
    /// them. A staged one removes extra files with its copy, as it writes the rest.
    pub(crate) fn keeps_extra_files(&self) -> bool {
        self.extra_files == ExtraFiles::Keep
            || (self.method == RestoreMethod::Direct && self.writes_under_running_consumers())
    }

    /// How the files are put back, in words, for Events, `describe` and `--dry-run`.
    pub fn way(&self) -> String {
        if self.target == RestoreTarget::NewClaim {
            return "into new claims beside the PVCs; nothing is stopped".into();
        }
        let extra = match self.extra_files {
            ExtraFiles::Delete => "files the backup does not hold are removed",
            ExtraFiles::Keep => "files the backup does not hold are kept",
        };
        let way = match self.method {
            RestoreMethod::Direct if self.writes_under_running_consumers() => format!(
                "Direct beside running consumers: the node agent writes the backup over the PVC's files, and files the backup does not hold are kept{}",
                match self.extra_files {
                    ExtraFiles::Delete => " (a volume is not emptied under a running application; method Staged removes them)",
                    ExtraFiles::Keep => "",
                }
            ),
            RestoreMethod::Direct => match self.extra_files {
                ExtraFiles::Delete => "Direct: consumers stop for the whole restore; each PVC's files are set aside in it, the node agent writes the backup into the emptied PVC, then what was set aside is removed, so it ends exactly as the backup (a restore that does not complete puts the files back)".to_string(),
                ExtraFiles::Keep => format!("Direct: consumers stop for the whole restore; the node agent writes the backup over the PVC's files, and {extra}"),
            },
            RestoreMethod::Staged => format!("Staged: the node agent fills a scratch claim while consumers run; they stop only while the PVC is made equal to it (what they wrote meanwhile is discarded), and {extra}"),
        };
        if self.paths.is_some() || !self.pvc_paths.is_empty() {
            return format!(
                "{way}; path restores fill a scratch claim first and copy the chosen paths (spec.paths.mirror says whether extra files go)"
            );
        }
        way
    }

    /// spec.gitOps, or its defaults.
    pub fn git_ops(&self) -> std::borrow::Cow<'_, GitOpsSpec> {
        match &self.git_ops {
            Some(spec) => std::borrow::Cow::Borrowed(spec),
            None => std::borrow::Cow::Owned(GitOpsSpec::default()),
        }
    }

    /// Files are overwritten under consumers that keep running (consumers: None, in
    /// place).
    pub(crate) fn writes_under_running_consumers(&self) -> bool {
        self.target == RestoreTarget::InPlace && self.consumers == ConsumerPolicy::None
    }
}

/// What happens to the stopped consumers of a volume that was not restored.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum FailurePolicy {
    /// Bring consumers back to their replica counts after a failure.
    #[default]
    Resume,
    /// Leave consumers stopped after a failure, with their records kept for later.
    KeepStopped,
}

/// Settings of the `restore-wait` init container that win over Velero's restore-helper
/// ConfigMap.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreHelperOverrides {
    /// Image with Velero's restore helper (default: the ConfigMap's image, else the
    /// Velero server's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = super::bounds::IMAGE))]
    pub image: Option<String>,
    /// Command that runs the helper (default: the ConfigMap's, else
    /// `/velero-restore-helper`). At most 256 words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = super::bounds::COMMAND), inner(length(max = super::bounds::PATH)))]
    pub command: Option<Vec<String>>,
    /// CPU and memory of the container (default: the ConfigMap's, else 100m CPU and
    /// 128Mi memory, requested and limited).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = super::bounds::kubernetes_lists)]
    pub resources: Option<ResourceRequirements>,
    /// Security context of the container (default: the ConfigMap's, else the
    /// consumer's container's, else a restricted one with the consumer pod's user and
    /// group), so that it can remove the node agent's done file from the volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = super::bounds::kubernetes_lists)]
    pub security_context: Option<SecurityContext>,
}

/// The steps of the reconcile state machine, in order.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Phase {
    /// Accepted, nothing checked yet.
    #[default]
    New,
    /// Checking the backup, the PVCs and the nodes; nothing in the cluster is changed.
    Validating,
    /// Volumes are being restored, each through its own phases.
    Restoring,
    /// Stand-in pods are removed and consumers brought back.
    Finalizing,
    /// Every volume was restored and its consumers brought back.
    Completed,
    /// Some volumes were restored and some were not; `errors` says which and why.
    PartiallyFailed,
    /// No volume was restored: validation refused the request, or every volume
    /// failed; `errors` says why.
    Failed,
    /// Stopped by spec.cancel or by deleting the DataRestore before it ended.
    Canceled,
}

impl Phase {
    /// The restore has ended: nothing of it runs any more.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Phase::Completed | Phase::PartiallyFailed | Phase::Failed | Phase::Canceled
        )
    }
}

/// What the controller has done so far, written by it alone.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DataRestoreStatus {
    /// Where the restore is; Completed, PartiallyFailed, Failed and Canceled are final.
    #[serde(default)]
    pub phase: Phase,
    /// The metadata.generation of the spec this status was written for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The backup in use, resolved from the spec once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_name: Option<String>,
    /// `done/total` volumes, for `kubectl get`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// How many volumes the restore has, and how many are in each phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_counts: Option<VolumeCounts>,
    /// How many consumers the restore found, and how many are in each state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer_counts: Option<ConsumerCounts>,
    /// The volumes that need a person's eyes (failed, partly written, with a warning,
    /// past their deadline), the first few of them; `volumeCounts` says how many in all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = super::bounds::NOTED_VOLUMES))]
    pub needs_attention: Vec<VolumeNote>,
    /// Deprecated, never written: each volume's record now lives in its
    /// VolumePluginRestore (`status.record`). Read once from a restore that an earlier
    /// refill left under way, to carry it across the upgrade.
    // In memory: every PVC to restore and where its restore is. Not written into the
    // DataRestore, so that it stays the same size whatever the number of volumes and a
    // pass writes only the volumes that changed; [`crate::controller::ledger`] keeps
    // and assembles them.
    #[serde(default, skip_serializing)]
    pub volumes: Vec<VolumeStatus>,
    /// Deprecated, never written: each consumer's record now lives in the
    /// VolumePluginRestore of the first of its PVCs. Read once, as `volumes` is.
    #[serde(default, skip_serializing)]
    pub consumers: Vec<ConsumerRecord>,
    /// How many GitOps objects manage the consumers, and how many are in each state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_ops_counts: Option<GitOpsCounts>,
    /// Deprecated, never written: each GitOps object's record now lives in the
    /// VolumePluginRestore of the first volume of the consumers it manages (a cluster
    /// whose every namespace has its own Kustomization has as many as volumes). Read
    /// once, as `volumes` is.
    #[serde(default, rename = "gitOps", skip_serializing)]
    pub git_ops: Vec<GitOpsRecord>,
    /// When the controller took the restore up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the restore ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// Why the request was refused or volumes failed, each naming the field or PVC at
    /// fault; the first ones, and a last line that says how many more there are.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = super::bounds::STATUS_LINES))]
    pub errors: Vec<String>,
    /// What validation found worth knowing that does not stop the restore (a PVC not
    /// bound yet, candidate nodes ignored); bounded as errors are.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = super::bounds::STATUS_LINES))]
    pub warnings: Vec<String>,
    /// Ready, Reconciling and Stalled in kstatus style, and Warning while a volume
    /// needs a person.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = super::bounds::CONDITIONS))]
    pub conditions: Vec<Condition>,
}

impl DataRestoreStatus {
    /// The counts of volumes and consumers and the volumes that need a person, from the
    /// whole restore; `record_of` names the VolumePluginRestore that keeps a volume.
    pub(crate) fn tally(&mut self, record_of: impl Fn(&VolumeStatus) -> String) {
        let status = self;
        if status.volumes.is_empty() {
            return;
        }
        let mut volumes = VolumeCounts {
            total: status.volumes.len() as u32,
            ..Default::default()
        };
        let mut noted: Vec<(u8, VolumeNote)> = Vec::new();
        for v in &status.volumes {
            *volumes.phases.entry(v.phase).or_default() += 1;
            volumes.partly_written += u32::from(v.partly_written);
            volumes.warnings += u32::from(v.warning.is_some());
            volumes.bytes_done += v.bytes_done;
            volumes.total_bytes += v.total_bytes;
            // A warning waits on a person now; a failure has ended.
            let rank = match (&v.warning, v.phase) {
                (Some(_), _) => 0,
                (None, VolumePhase::Failed) => 1,
                (None, _) if v.partly_written => 2,
                _ => continue,
            };
            noted.push((
                rank,
                VolumeNote {
                    pvc: v.pvc.clone(),
                    phase: v.phase,
                    message: v.warning.clone().or_else(|| v.message.clone()),
                    partly_written: v.partly_written,
                    volume_plugin_restore: Some(record_of(v)),
                },
            ));
        }
        noted.sort_by_key(|(rank, _)| *rank);
        noted.truncate(super::bounds::NOTED_VOLUMES as usize);
        status.needs_attention = noted.into_iter().map(|(_, note)| note).collect();
        status.volume_counts = Some(volumes);
        let mut consumers = ConsumerCounts {
            total: status.consumers.len() as u32,
            ..Default::default()
        };
        for c in &status.consumers {
            *consumers.states.entry(c.state).or_default() += 1;
        }
        status.consumer_counts = (consumers.total > 0).then_some(consumers);
        let mut git_ops = GitOpsCounts {
            total: status.git_ops.len() as u32,
            ..Default::default()
        };
        for g in &status.git_ops {
            *git_ops.states.entry(g.state).or_default() += 1;
        }
        status.git_ops_counts = (git_ops.total > 0).then_some(git_ops);
    }
}

/// Where one volume is in its own restore.
#[derive(
    Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
pub enum VolumePhase {
    /// Waiting for a slot (see spec.parallel).
    #[default]
    Pending,
    /// Its consumers are being stopped; waiting until no pod mounts the PVC. A staged
    /// or path restore comes here only once its scratch claim is filled.
    Quiescing,
    /// Direct, with spec.extraFiles Delete: the stand-in pod is made, and its first
    /// init container (`set-aside`) moves what the PVC holds (Velero's `.velero`
    /// folder aside) into a directory of its root, `.refill-aside-<DataRestore UID>`,
    /// so that the backup goes into an empty volume; a restore that does not complete
    /// puts those files back. Its PodVolumeRestore is made once that is done.
    Clearing,
    /// The stand-in pod and its PodVolumeRestore are created; waiting for `restore-wait`
    /// to run, which is when the node agent can start.
    StartingStandIn,
    /// `restore-wait` runs; the node agent moves the data.
    Restoring,
    /// The data is in: `restore-wait` cleans up and the stand-in pod is removed (one
    /// that tidies goes on to Tidying once `restore-wait` exited). The volume no
    /// longer counts against spec.parallel (unless paths are copied next), but its
    /// consumers stay stopped until the stand-in is gone.
    RemovingStandIn,
    /// Staged, or with paths: the snapshot is in the scratch claim, the stand-in gone
    /// and the consumers stopped; refill's copier pod makes the PVC equal to the
    /// scratch claim (or copies the chosen paths into it).
    Copying,
    /// Direct, with spec.extraFiles Delete: the backup is in and `restore-wait` has
    /// exited; the stand-in's main container (`tidy`) removes the files set aside in
    /// Clearing, and the stand-in is deleted once it is done (a copier pod tidies
    /// instead when the stand-in went first). The consumers stay stopped until then.
    /// A stop here no longer puts anything back.
    Tidying,
    /// With switchWorkloads: the new claim holds the backup; the workloads to switch
    /// are stopped and waited for until none of their pods mounts the PVC. They come
    /// back on the new claim once the volume Completed.
    Switching,
    /// The volume failed or was canceled while a node agent may be writing to it: its
    /// PodVolumeRestore is canceled and waited for, then the stand-in pod removed. Only
    /// then does it end (as `outcome` says), and only then may its consumers come back.
    Aborting,
    /// The backup's files are in the volume.
    Completed,
    /// Not restored; `message` says why and `partlyWritten` whether its files changed.
    Failed,
    /// Stopped on request before it completed; `partlyWritten` says whether its files
    /// changed.
    Canceled,
}

impl VolumePhase {
    /// The volume has ended and nothing writes to it any more.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            VolumePhase::Completed | VolumePhase::Failed | VolumePhase::Canceled
        )
    }
    /// Holds consumers stopped or a stand-in pod that has to go.
    pub(crate) fn is_active(self) -> bool {
        matches!(
            self,
            VolumePhase::Quiescing
                | VolumePhase::Clearing
                | VolumePhase::StartingStandIn
                | VolumePhase::Restoring
                | VolumePhase::RemovingStandIn
                | VolumePhase::Copying
                | VolumePhase::Tidying
                | VolumePhase::Switching
                | VolumePhase::Aborting
        )
    }
}

/// One PVC's restore.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumeStatus {
    /// `namespace/name` of the PVC.
    pub pvc: String,
    /// Where the volume is in its own restore.
    #[serde(default)]
    pub phase: VolumePhase,
    /// With target NewClaim: the name of the PVC the files go into, in the PVC's
    /// namespace.
    #[serde(default, rename = "targetPVC", skip_serializing_if = "Option::is_none")]
    pub target_pvc: Option<String>,
    /// With paths: which of the backup's files are put back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paths: Option<PathRestore>,
    /// Staged, or with paths: the claim the node agent fills with the whole snapshot,
    /// from which the PVC is made equal (or the chosen paths copied); deleted when the
    /// volume ends.
    #[serde(
        default,
        rename = "scratchPVC",
        skip_serializing_if = "Option::is_none"
    )]
    pub scratch_pvc: Option<String>,
    /// Staged, or with paths: what the copy did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copied: Option<CopySummary>,
    /// The backup's files are written over what the volume holds and nothing is
    /// removed (spec.extraFiles Keep).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keep_extra_files: bool,
    /// Direct with extra files deleted: how many entries of the volume's root were set
    /// aside before the node agent wrote the backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cleared: Option<u64>,
    /// How many entries went with the set-aside files once the backup was in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tidied: Option<u64>,
    /// A restore that did not complete after Clearing: how many entries of the
    /// volume's root were put back where they were. The volume is then as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub put_back: Option<u64>,
    /// UID of the PVC when validated; the PodVolumeRestore is labelled with it.
    #[serde(default, rename = "pvcUID", skip_serializing_if = "Option::is_none")]
    pub pvc_uid: Option<String>,
    /// The PodVolumeBackup the data comes from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_volume_backup: Option<String>,
    /// The uploader that made the snapshot (`kopia` or `restic`), as the
    /// PodVolumeBackup says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uploader_type: Option<String>,
    /// The pod volume's name; the stand-in pod mounts the PVC under it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub volume: String,
    /// For an unbound WaitForFirstConsumer claim: the nodes the stand-in may run on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub candidate_nodes: Vec<String>,
    /// Security settings of the consumer's pod, kept for the stand-in so that restored
    /// files get the owner the application expects.
    // Boxed: the two typed security contexts take 800 bytes whatever they hold, and
    // the controller holds and copies a record per volume, ten thousand in a large
    // restore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer_security: Option<Box<ConsumerSecurity>>,
    /// Tolerations of the consumer's pod, kept for the stand-in so that it may run
    /// where the consumer ran (a tainted node, the only one its local volume is on).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub consumer_tolerations: Vec<Toleration>,
    /// The snapshot the files come from, as the PodVolumeBackup recorded it.
    #[serde(
        default,
        rename = "snapshotID",
        skip_serializing_if = "Option::is_none"
    )]
    pub snapshot_id: Option<String>,
    /// The pod that mounts the PVC while its data is written, in the PVC's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stand_in_pod: Option<String>,
    /// The UID of that stand-in, from when refill first saw it: a pod with the
    /// stand-in's labels is refill's only if it is this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stand_in_uid: Option<String>,
    /// The UID of a path restore's copier pod, likewise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copier_uid: Option<String>,
    /// The node the data is written on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The Velero PodVolumeRestore that writes the data, in the DataRestore's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_volume_restore: Option<String>,
    /// Bytes written so far, as the node agent reports them.
    #[serde(default)]
    pub bytes_done: i64,
    /// Bytes to write: the size the backup recorded, then the node agent's figure.
    #[serde(default)]
    pub total_bytes: i64,
    /// The latest news of the volume: what it waits for, or why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// While Aborting: how the volume ends once nothing writes to it (Failed or Canceled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<VolumePhase>,
    /// The node agent may have written part of the backup into the volume before it
    /// stopped: its files are a mix of the backup and what was there before.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub partly_written: bool,
    /// Something that does not stop the volume yet but needs a person (no node agent
    /// takes its PodVolumeRestore, a cancel that is not acknowledged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
    /// When it began Aborting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abort_time: Option<Time>,
    /// When its consumers began to be stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
}

impl VolumeStatus {
    /// The node agent fills a scratch claim first (Staged, or a path restore), and the
    /// consumers are stopped only after: for the copy into the PVC.
    pub(crate) fn fills_scratch_first(&self) -> bool {
        self.scratch_pvc.is_some()
    }

    /// Direct into the PVC itself, with what the backup lacks removed: the PVC's files
    /// are set aside first (phase Clearing), and removed after (Tidying).
    pub(crate) fn clears_first(&self) -> bool {
        self.target_pvc.is_none() && self.scratch_pvc.is_none() && !self.keep_extra_files
    }

    /// The consumers of the PVC must be stopped while the volume is in its phase:
    /// from the stop until nothing writes. A volume filling its scratch claim first
    /// leaves them running until the fill is done.
    pub(crate) fn holds_consumers_stopped(&self) -> bool {
        if self.fills_scratch_first() {
            matches!(self.phase, VolumePhase::Quiescing | VolumePhase::Copying)
        } else {
            self.phase.is_active()
        }
    }

    /// `namespace/name` of the claim the files are written into: the PVC itself, or
    /// with target NewClaim the claim made for it.
    pub(crate) fn written_claim(&self) -> String {
        self.beside(self.target_pvc.as_deref())
    }

    /// `namespace/name` of the claim the node agent writes: with paths the scratch
    /// claim, else [`Self::written_claim`]. The stand-in mounts it.
    pub(crate) fn agent_claim(&self) -> String {
        match &self.scratch_pvc {
            Some(scratch) => self.beside(Some(scratch)),
            None => self.written_claim(),
        }
    }

    /// `namespace/name` of the claim `name` in the PVC's namespace, or of the PVC.
    fn beside(&self, name: Option<&str>) -> String {
        match name {
            Some(name) => {
                let ns = self.pvc.split_once('/').map_or("", |(ns, _)| ns);
                format!("{ns}/{name}")
            }
            None => self.pvc.clone(),
        }
    }
}

/// How many volumes a restore has, by phase.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumeCounts {
    /// Every volume of the restore.
    pub total: u32,
    /// How many are in each phase (only phases that have some).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub phases: BTreeMap<VolumePhase, u32>,
    /// How many ended with files that are a mix of the backup and what was there.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub partly_written: u32,
    /// How many carry a warning: something waits on a person.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub warnings: u32,
    /// Bytes written so far into all volumes, as the node agents report them.
    #[serde(default)]
    pub bytes_done: i64,
    /// Bytes to write into all volumes.
    #[serde(default)]
    pub total_bytes: i64,
}

/// How many consumers a restore found, by state.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConsumerCounts {
    /// Every consumer of the restore's volumes.
    pub total: u32,
    /// How many are in each state (only states that have some).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub states: BTreeMap<ConsumerState, u32>,
}

/// How many GitOps objects manage a restore's consumers, by state.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitOpsCounts {
    /// Every GitOps object found managing a consumer.
    pub total: u32,
    /// How many are in each state (only states that have some).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub states: BTreeMap<GitOpsState, u32>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A volume that needs a person's eyes, in brief; its VolumePluginRestore has the rest.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumeNote {
    /// `namespace/name` of the PVC.
    pub pvc: String,
    /// Where the volume is.
    pub phase: VolumePhase,
    /// What needs a look: the volume's warning, else its message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Its files may be a mix of the backup and what was there before.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub partly_written: bool,
    /// The VolumePluginRestore with the volume's whole record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_plugin_restore: Option<String>,
}

/// A consumer's pod and container security contexts, copied to the stand-in pod.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConsumerSecurity {
    /// The pod's security context (user, group, fsGroup).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodSecurityContext>,
    /// The first container's security context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<SecurityContext>,
}

/// What kind of object a consumer is, which decides how it is stopped.
#[derive(
    Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema,
)]
pub enum ConsumerKind {
    /// Scaled to zero, then back to its replica count.
    Deployment,
    /// Scaled to zero, then back to its replica count.
    StatefulSet,
    /// A ReplicaSet no Deployment owns: scaled to zero, then back.
    ReplicaSet,
    /// Scaled to zero, then back to its replica count.
    ReplicationController,
    /// Parked on no node with a node selector nothing matches, then let back.
    DaemonSet,
    /// Suspended, then set back as it was; its running Jobs are waited for.
    CronJob,
    /// Waited for until it ends, never stopped.
    Job,
    /// A pod no controller owns: deleted, and created again from its manifest.
    Pod,
}

impl ConsumerKind {
    /// Where the API serves this kind, for generic reads and patches.
    pub(crate) fn api_resource(self) -> kube::api::ApiResource {
        let (group, version) = match self {
            ConsumerKind::Deployment
            | ConsumerKind::StatefulSet
            | ConsumerKind::ReplicaSet
            | ConsumerKind::DaemonSet => ("apps", "v1"),
            ConsumerKind::CronJob | ConsumerKind::Job => ("batch", "v1"),
            ConsumerKind::ReplicationController | ConsumerKind::Pod => ("", "v1"),
        };
        let gvk = kube::api::GroupVersionKind::gvk(group, version, &format!("{self:?}"));
        kube::api::ApiResource::from_gvk(&gvk)
    }

    /// `Deployment shop/web`: how a workload is named in messages and in
    /// status.gitOps[].workloads, which links a GitOps object to the consumers it manages.
    pub fn describe(self, namespace: &str, name: &str) -> String {
        format!("{self:?} {namespace}/{name}")
    }

    /// Stopped by scaling it to zero replicas.
    pub(crate) fn is_scalable(self) -> bool {
        matches!(
            self,
            ConsumerKind::Deployment
                | ConsumerKind::StatefulSet
                | ConsumerKind::ReplicaSet
                | ConsumerKind::ReplicationController
        )
    }
}

/// Where a consumer is: running, stopped by this restore, or back.
#[derive(
    Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
pub enum ConsumerState {
    /// Found during validation, not stopped yet.
    #[default]
    Running,
    /// Recorded before the stop is applied, so that whatever happens next, the finish
    /// step looks at the object and brings it back if refill's mark is on it.
    Stopping,
    /// Stopped by this restore (scaled to zero, parked, suspended or deleted; a Job is
    /// only waited for); its PVCs are restored meanwhile.
    Stopped,
    /// Brought back as it was before, once all its PVCs ended.
    Resumed,
    /// Left stopped on purpose (onFailure: KeepStopped); the record stays on the object.
    KeptStopped,
    /// Another DataRestore had stopped it already (see heldBy); this restore did not
    /// touch it and refused the volumes it mounts.
    HeldByOther,
    /// Brought back on the new claim (switchTo) instead of the PVC, as
    /// spec.switchWorkloads asked.
    Switched,
    /// Deleted by someone while it was stopped: nothing to bring back.
    Gone,
    /// A bare pod whose name another pod took while it was stopped: refill left that
    /// pod as it is and did not create the recorded one again.
    Replaced,
}

/// A workload refill stops while its PVCs are restored, and what brings it back.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConsumerRecord {
    /// What kind of object the consumer is, which decides how it is stopped.
    pub kind: ConsumerKind,
    /// The workload's namespace (its PVCs').
    pub namespace: String,
    /// The workload's name.
    pub name: String,
    /// `namespace/name` of every selected PVC it mounts; it comes back only when all are done.
    pub pvcs: Vec<String>,
    /// Where it is: running, stopped by this restore, or back.
    #[serde(default)]
    pub state: ConsumerState,
    /// Replica count before the scale-down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// A DaemonSet's node selector, a CronJob's suspend flag, or a bare pod's manifest,
    /// as JSON: whatever brings the consumer back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original: Option<String>,
    /// `namespace/name` of the DataRestore that holds it, when state is HeldByOther.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_by: Option<String>,
    /// With switchWorkloads: the new claim it is moved onto once its PVC's new claim
    /// holds the backup. Such a consumer is stopped only then (volume phase Switching).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switch_to: Option<String>,
    /// When refill stopped it: the start of the app's downtime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_at: Option<Time>,
    /// When refill brought it back: the end of the app's downtime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_at: Option<Time>,
    /// A bare pod's UID when refill found it: it is deleted only while it is still
    /// that pod, never another made under its name since.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

impl ConsumerRecord {
    /// What identifies the workload: kind, namespace and name.
    pub fn key(&self) -> (ConsumerKind, &str, &str) {
        (self.kind, &self.namespace, &self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_volume_s_record_stays_small() {
        // The controller holds one per volume and copies them each pass: ten thousand
        // in a large restore. The typed security contexts alone took 800 bytes.
        let size = std::mem::size_of::<VolumeStatus>();
        assert!(size <= 768, "VolumeStatus takes {size} bytes");
    }

    #[test]
    fn extra_files_go_unless_kept_or_the_consumers_keep_running() {
        let spec = |method, extra_files, consumers| DataRestoreSpec {
            method,
            extra_files,
            consumers,
            ..Default::default()
        };
        use ConsumerPolicy::{None as Online, ScaleDown};
        use ExtraFiles::{Delete, Keep};
        use RestoreMethod::{Direct, Staged};
        assert!(!spec(Direct, Delete, ScaleDown).keeps_extra_files());
        assert!(spec(Direct, Keep, ScaleDown).keeps_extra_files());
        assert!(
            spec(Direct, Delete, Online).keeps_extra_files(),
            "never emptied under a running app"
        );
        assert!(!spec(Staged, Delete, Online).keeps_extra_files());
        assert!(spec(Direct, Delete, ScaleDown).way().contains("emptied"));
        assert!(
            spec(Staged, Delete, ScaleDown)
                .way()
                .contains("scratch claim")
        );
        assert!(
            spec(Direct, Delete, Online)
                .way()
                .contains("method Staged removes them")
        );
    }

    #[test]
    fn staged_and_path_restores_fill_a_scratch_claim_first() {
        let staged = DataRestoreSpec {
            method: RestoreMethod::Staged,
            ..Default::default()
        };
        assert!(staged.fills_scratch_first("shop/data"));
        let into_new = DataRestoreSpec {
            target: RestoreTarget::NewClaim,
            ..staged
        };
        assert!(!into_new.fills_scratch_first("shop/data"));
        let paths = DataRestoreSpec {
            pvc_paths: [("shop/data".to_string(), PathRestore::default())].into(),
            ..Default::default()
        };
        assert!(paths.fills_scratch_first("shop/data"));
        assert!(!paths.fills_scratch_first("shop/other"));
    }
}

//! Where a claim's data comes from, pure: its `dataSourceRef`, the BackupVolume it
//! names, the backup that picks and the PodVolumeBackup of the claim in it. Everything
//! here was written by whoever may write claims in a namespace: each check names the
//! field, and nothing reaches past the claim's own namespace.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;

use crate::api::{Backup, BackupVolume, BackupVolumeSpec, PodVolumeBackup};
use crate::k8s_names;

/// The API group of the data sources refill fills.
pub(crate) const GROUP: &str = "refill.dev";
/// The kind of the data sources refill fills.
pub(crate) const KIND: &str = "BackupVolume";

/// The BackupVolume a claim names as its data source, if it names one of refill's.
/// `Err` when it names one refill may not use: in another namespace, or by a name no
/// object can have.
pub(crate) fn data_source(claim: &PersistentVolumeClaim) -> Option<Result<String, String>> {
    let source = claim.spec.as_ref()?.data_source_ref.as_ref()?;
    if source.api_group.as_deref() != Some(GROUP) || source.kind != KIND {
        return None;
    }
    let own = claim.metadata.namespace.as_deref().unwrap_or_default();
    if let Some(other) = source.namespace.as_deref().filter(|ns| *ns != own) {
        return Some(Err(format!(
            "spec.dataSourceRef.namespace: \"{}\" is not the claim's namespace; a BackupVolume fills claims of its own namespace only",
            shown(other)
        )));
    }
    Some(
        k8s_names::dns_subdomain(&source.name)
            .map(|()| source.name.clone())
            .map_err(|e| format!("spec.dataSourceRef.name: not a BackupVolume name: {e}")),
    )
}

/// What a BackupVolume asks for, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Wanted {
    /// Which backup.
    pub from: Origin,
    /// The claim of the BackupVolume's namespace, `namespace/name` as in the backup.
    pub claim_key: String,
}

/// A backup by name, or a schedule's newest Completed one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Origin {
    Backup(String),
    Schedule(String),
}

/// The BackupVolume's spec, checked; `Err` names each wrong field.
pub(crate) fn wanted(source: &BackupVolume) -> Result<Wanted, String> {
    let spec: &BackupVolumeSpec = &source.spec;
    let name = source.metadata.name.as_deref().unwrap_or_default();
    let namespace = source.metadata.namespace.as_deref().unwrap_or_default();
    let mut errors = Vec::new();
    let check = |field: &str, value: &str| {
        k8s_names::dns_subdomain(value).map_err(|e| format!("spec.{field}: {e}"))
    };
    let from = match (spec.backup.as_deref(), spec.schedule.as_deref()) {
        (Some(backup), None) => check("backup", backup).map(|()| Origin::Backup(backup.into())),
        (None, Some(schedule)) => {
            check("schedule", schedule).map(|()| Origin::Schedule(schedule.into()))
        }
        (Some(_), Some(_)) => {
            Err("spec.backup and spec.schedule are both set: keep exactly one".into())
        }
        (None, None) => Err(
            "spec.backup and spec.schedule are both missing: name a Velero Backup, or a Schedule for its newest Completed backup"
                .into(),
        ),
    };
    let from = from.map_err(|e| errors.push(e)).ok();
    let claim_ok = check("claim", &spec.claim)
        .map_err(|e| errors.push(e))
        .is_ok();
    match from {
        Some(from) if claim_ok && errors.is_empty() => Ok(Wanted {
            from,
            claim_key: format!("{namespace}/{}", spec.claim),
        }),
        _ => Err(format!(
            "BackupVolume {namespace}/{name}: {}",
            errors.join("; ")
        )),
    }
}

/// The backup `from` picks among what was read: the named one (`named`), or the
/// newest Completed one of the schedule's (`of_schedule`).
pub(crate) fn backup<'a>(
    from: &Origin,
    named: Option<&'a Backup>,
    of_schedule: &'a [Backup],
) -> Result<&'a Backup, String> {
    match from {
        Origin::Backup(name) => {
            let backup = named.ok_or_else(|| {
                format!("spec.backup: backup \"{name}\" not found in Velero's namespace")
            })?;
            match backup.phase() {
                Some(phase) if phase.holds_usable_data() => Ok(backup),
                phase => Err(format!(
                    "spec.backup: backup \"{name}\" is {}; only a Completed or PartiallyFailed backup holds files to fill from",
                    phase.map_or_else(|| "without a phase".into(), |p| format!("{p:?}"))
                )),
            }
        }
        Origin::Schedule(schedule) => of_schedule
            .iter()
            .filter(|b| b.is_completed())
            .max_by_key(|b| (b.completed_at(), b.metadata.name.clone()))
            .ok_or_else(|| {
                format!(
                    "spec.schedule: schedule \"{schedule}\" has no Completed backup in Velero's namespace yet"
                )
            }),
    }
}

/// The PodVolumeBackup of `claim_key` among the backup's, the newest Completed one.
pub(crate) fn pod_volume_backup<'a>(
    backup: &str,
    claim_key: &str,
    pvbs: &'a [PodVolumeBackup],
) -> Result<&'a PodVolumeBackup, String> {
    crate::plan::completed_by_pvc(pvbs)
        .remove(claim_key)
        .ok_or_else(|| {
            format!(
                "spec.claim: backup \"{backup}\" holds no completed file-system backup (PodVolumeBackup) of claim {claim_key}; a later backup may"
            )
        })
}

/// At most a name's length of what a user wrote, for a message.
fn shown(text: &str) -> &str {
    crate::labels::prefix_within(text, 253)
}

#[cfg(test)]
mod tests;

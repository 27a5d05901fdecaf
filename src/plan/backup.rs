//! Which Velero Backup a request restores from.

use crate::api::{Backup, BackupPhase, DataRestoreSpec};

use super::Invalid;

/// What the spec names: a backup, or a schedule whose newest Completed backup is meant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BackupChoice {
    Named(String),
    Schedule(String),
}

impl BackupChoice {
    pub(crate) fn from_spec(spec: &DataRestoreSpec) -> Result<Self, Invalid> {
        let named = spec.backup_name.as_deref().filter(|s| !s.is_empty());
        let schedule = spec.schedule_name.as_deref().filter(|s| !s.is_empty());
        match (named, schedule) {
            (Some(b), None) => Ok(BackupChoice::Named(b.to_string())),
            (None, Some(s)) => Ok(BackupChoice::Schedule(s.to_string())),
            (Some(_), Some(_)) => Err(Invalid::one(
                "spec.backupName and spec.scheduleName are both set: keep exactly one",
            )),
            (None, None) => Err(Invalid::one(
                "spec.backupName and spec.scheduleName are both missing: set backupName, or scheduleName for a schedule's newest Completed backup",
            )),
        }
    }
}

/// Picks the backup to use. `found` is the named backup as read (None when absent);
/// for a schedule, `schedule_backups` are the backups labelled with its name.
pub(crate) fn resolve_backup(
    choice: &BackupChoice,
    namespace: &str,
    found: Option<&Backup>,
    schedule_exists: bool,
    schedule_backups: &[Backup],
) -> Result<Backup, Invalid> {
    match choice {
        BackupChoice::Named(name) => {
            let backup = found.ok_or_else(|| {
                Invalid::one(format!(
                    "spec.backupName: backup \"{name}\" not found in namespace \"{namespace}\"; check the name against the namespace's Velero Backups"
                ))
            })?;
            match backup.phase() {
                Some(phase) if phase.holds_usable_data() => Ok(backup.clone()),
                phase => Err(Invalid::one(format!(
                    "spec.backupName: backup \"{name}\" is {}; only a Completed or PartiallyFailed backup can be restored: wait until it ends, or name another backup",
                    phase
                        .map(|p| format!("{p:?}"))
                        .unwrap_or_else(|| "without a phase".into())
                ))),
            }
        }
        BackupChoice::Schedule(schedule) => schedule_backups
            .iter()
            .filter(|b| b.phase() == Some(BackupPhase::Completed))
            .max_by_key(|b| {
                let status = b.status.clone().unwrap_or_default();
                (
                    status
                        .completion_timestamp
                        .or(status.start_timestamp)
                        .map(|t| t.0),
                    b.metadata.creation_timestamp.clone().map(|t| t.0),
                )
            })
            .cloned()
            .ok_or_else(|| {
                Invalid::one(if schedule_exists || !schedule_backups.is_empty() {
                    format!("spec.scheduleName: schedule \"{schedule}\" has no Completed backup yet; wait for one, or name a backup in spec.backupName instead")
                } else {
                    format!("spec.scheduleName: schedule \"{schedule}\" not found in namespace \"{namespace}\"; check the name against the namespace's Velero Schedules")
                })
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::BackupStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    fn backup(name: &str, phase: BackupPhase, completed_secs: i64) -> Backup {
        let mut b = Backup::new(name, Default::default());
        b.status = Some(BackupStatus {
            phase: Some(phase),
            completion_timestamp: Some(Time(Timestamp::from_second(completed_secs).unwrap())),
            ..Default::default()
        });
        b
    }

    #[test]
    fn exactly_one_source_is_required() {
        let mut spec = DataRestoreSpec::default();
        assert!(BackupChoice::from_spec(&spec).is_err());
        spec.backup_name = Some("b".into());
        assert_eq!(
            BackupChoice::from_spec(&spec).unwrap(),
            BackupChoice::Named("b".into())
        );
        spec.schedule_name = Some("s".into());
        assert!(BackupChoice::from_spec(&spec).is_err());
    }

    #[test]
    fn named_backup_must_exist_and_hold_data() {
        let choice = BackupChoice::Named("b".into());
        let err = resolve_backup(&choice, "velero", None, false, &[]).unwrap_err();
        assert_eq!(
            err.errors,
            vec![
                "spec.backupName: backup \"b\" not found in namespace \"velero\"; check the name against the namespace's Velero Backups"
            ]
        );
        let failed = backup("b", BackupPhase::Failed, 1);
        let err = resolve_backup(&choice, "velero", Some(&failed), false, &[]).unwrap_err();
        assert!(err.errors[0].contains("is Failed"), "{err}");
        let partial = backup("b", BackupPhase::PartiallyFailed, 1);
        assert!(resolve_backup(&choice, "velero", Some(&partial), false, &[]).is_ok());
    }

    #[test]
    fn schedule_takes_its_newest_completed_backup() {
        let choice = BackupChoice::Schedule("nightly".into());
        let backups = [
            backup("n-1", BackupPhase::Completed, 100),
            backup("n-3", BackupPhase::Failed, 300),
            backup("n-2", BackupPhase::Completed, 200),
        ];
        let chosen = resolve_backup(&choice, "velero", None, true, &backups).unwrap();
        assert_eq!(chosen.metadata.name.as_deref(), Some("n-2"));
        let err = resolve_backup(&choice, "velero", None, false, &[]).unwrap_err();
        assert!(err.errors[0].contains("not found"), "{err}");
        let err = resolve_backup(&choice, "velero", None, true, &backups[1..2]).unwrap_err();
        assert!(err.errors[0].contains("no Completed backup"), "{err}");
    }
}

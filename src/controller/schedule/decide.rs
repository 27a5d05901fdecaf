//! What a DataRestoreSchedule does now, from its spec, its status and what was read:
//! start a restore (and for which backup), delete old ones, when to look again. Pure.

use std::str::FromStr;
use std::time::Duration;

use croner::Cron;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use crate::api::{
    DEFAULT_HISTORY_LIMIT, DataRestoreScheduleSpec, DataRestoreScheduleStatus, Phase,
};
use crate::controller::status::condition::{READY, RECONCILING, STALLED};

/// A DataRestore the schedule made.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Made {
    pub name: String,
    /// Its phase (New until the DataRestore controller took it).
    pub phase: Phase,
    /// The backup it restores, once known.
    pub backup: Option<String>,
    pub created: Timestamp,
    /// Being deleted already.
    pub deleting: bool,
}

/// What the schedule saw this pass.
#[derive(Debug, Clone)]
pub(crate) struct ScheduleSeen {
    /// The schedule's own creation: cron times before it are not run.
    pub created: Timestamp,
    pub made: Vec<Made>,
    /// The newest Completed backup of spec.veleroSchedule.
    pub newest_backup: Option<String>,
    pub now: Timestamp,
}

/// A restore to start.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Start {
    /// The backup to restore; None: the template's own backupName or scheduleName.
    pub backup: Option<String>,
    /// Why, for its Event: `new backup nightly-2026…` or `cron time …`.
    pub why: String,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Decision {
    pub status: DataRestoreScheduleStatus,
    pub start: Option<Start>,
    /// Finished restores beyond the history limits, oldest first.
    pub delete: Vec<String>,
    /// When to look again at the latest, for cron.
    pub requeue: Option<Duration>,
}

/// Every mistake in the spec, each naming its field.
pub(crate) fn spec_errors(spec: &DataRestoreScheduleSpec) -> Vec<String> {
    let mut errors = Vec::new();
    if spec.velero_schedule.is_none() && spec.cron.is_none() {
        errors.push("spec.veleroSchedule and spec.cron are both empty, so nothing would ever start a restore: name the Velero Schedule whose new backups to restore, or a cron time (or both)".into());
    }
    if let Some(cron) = &spec.cron
        && let Err(e) = Cron::from_str(cron)
    {
        errors.push(format!(
            "spec.cron: \"{cron}\" is not a cron expression ({e}); write five fields in UTC, such as \"0 3 * * *\""
        ));
    }
    let template = &spec.template;
    let names_backup = template.backup_name.is_some() || template.schedule_name.is_some();
    if spec.velero_schedule.is_some() && names_backup {
        errors.push("spec.template.backupName and spec.template.scheduleName must be empty with spec.veleroSchedule: each run restores the backup of that schedule it was started for".into());
    }
    if spec.velero_schedule.is_none() && spec.cron.is_some() && !names_backup {
        errors.push("spec.template: with spec.cron alone, name what each run restores: template.scheduleName (its newest Completed backup) or template.backupName".into());
    }
    // The template's own checks, with a backup filled in as each run fills it.
    let mut filled = template.clone();
    if !names_backup {
        filled.backup_name = Some("each-run".into());
    }
    for error in crate::plan::spec_errors(&filled) {
        errors.push(match error.starts_with("spec.") {
            true => under_template(&error),
            false => format!("spec.template: {error}"),
        });
    }
    errors
}

/// A message of a DataRestore's checks about the template: each field it names, the
/// one at fault and those it goes against (`spec.target is NewClaim`), is named where
/// it is in the schedule, under spec.template. Only a field name is changed, where one
/// starts (first, or after a space or a parenthesis): a quoted value stays as written.
fn under_template(message: &str) -> String {
    let mut out = String::with_capacity(message.len() + 32);
    let mut copied = 0;
    for (at, field) in message.match_indices("spec.") {
        let starts_a_field = message[..at]
            .chars()
            .next_back()
            .is_none_or(|c| c == ' ' || c == '(');
        if starts_a_field {
            out.push_str(&message[copied..at]);
            out.push_str("spec.template.");
            copied = at + field.len();
        }
    }
    out.push_str(&message[copied..]);
    out
}

fn chrono_of(at: Timestamp) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::from_timestamp(at.as_second(), 0).unwrap_or_default()
}

fn timestamp_of(at: chrono::DateTime<chrono::Utc>) -> Option<Timestamp> {
    Timestamp::from_second(at.timestamp()).ok()
}

/// The schedule's decision now.
pub(crate) fn decide(
    spec: &DataRestoreScheduleSpec,
    previous: &DataRestoreScheduleStatus,
    generation: Option<i64>,
    seen: &ScheduleSeen,
) -> Decision {
    let mut status = DataRestoreScheduleStatus {
        observed_generation: generation,
        errors: spec_errors(spec),
        conditions: previous.conditions.clone(),
        ..previous.clone()
    };
    let mut made: Vec<&Made> = seen.made.iter().collect();
    made.sort_by_key(|m| std::cmp::Reverse((m.created, m.name.clone())));
    let active = made.iter().find(|m| !m.phase.is_terminal());
    status.active = active.map(|m| m.name.clone());
    if let Some(newest) = made.first() {
        status.last_restore = Some(newest.name.clone());
        // The restores themselves are the record of what was restored: a status
        // written over (or lost) cannot make a backup look new again.
        if let Some(backup) = &newest.backup {
            status.last_backup = Some(backup.clone());
        }
    }
    status.last_result = made.iter().find(|m| m.phase.is_terminal()).map(|m| m.phase);

    let cron = spec.cron.as_deref().and_then(|c| Cron::from_str(c).ok());
    let now = chrono_of(seen.now);
    let cron_from = previous
        .last_cron_time
        .as_ref()
        .map(|t| t.0)
        .unwrap_or(seen.created);
    let cron_due = cron
        .as_ref()
        .and_then(|c| c.find_previous_occurrence(&now, true).ok())
        .and_then(timestamp_of)
        .filter(|at| *at > cron_from);
    status.last_cron_time = Some(Time(cron_from));
    status.next_run_time = cron
        .as_ref()
        .and_then(|c| c.find_next_occurrence(&now, false).ok())
        .and_then(timestamp_of)
        .map(Time);

    let new_backup = spec
        .velero_schedule
        .as_ref()
        .and(seen.newest_backup.as_ref())
        .filter(|b| status.last_backup.as_ref() != Some(*b));
    let mut start = None;
    if status.errors.is_empty() && !spec.paused && active.is_none() {
        if let Some(backup) = new_backup {
            start = Some(Start {
                backup: Some(backup.clone()),
                why: format!("new backup {backup}"),
            });
        } else if let Some(at) = cron_due {
            start = match (&spec.velero_schedule, &seen.newest_backup) {
                (Some(_), Some(backup)) => Some(Start {
                    backup: Some(backup.clone()),
                    why: format!("cron time {at}"),
                }),
                // Nothing to restore yet: this time is passed over, not kept waiting.
                (Some(_), None) => None,
                (None, _) => Some(Start {
                    backup: None,
                    why: format!("cron time {at}"),
                }),
            };
        }
        // A run now also answers the cron time that came due with it.
        if let Some(at) = cron_due {
            status.last_cron_time = Some(Time(at));
        }
    }
    if let Some(start) = &start
        && let Some(backup) = &start.backup
    {
        status.last_backup = Some(backup.clone());
    }

    let delete = over_history(spec, &made);
    let requeue = status.next_run_time.as_ref().map(|next| {
        let wait = next
            .0
            .as_second()
            .saturating_sub(seen.now.as_second())
            .max(1);
        Duration::from_secs(wait as u64)
    });
    Decision {
        status,
        start,
        delete,
        requeue,
    }
}

/// The finished restores beyond the history limits (`made` newest first), oldest first.
fn over_history(spec: &DataRestoreScheduleSpec, made: &[&Made]) -> Vec<String> {
    let keep_ok = spec
        .successful_history_limit
        .unwrap_or(DEFAULT_HISTORY_LIMIT) as usize;
    let keep_failed = spec.failed_history_limit.unwrap_or(DEFAULT_HISTORY_LIMIT) as usize;
    let (mut ok, mut failed) = (0, 0);
    let mut delete = Vec::new();
    for m in made.iter().filter(|m| m.phase.is_terminal() && !m.deleting) {
        let (count, keep) = if m.phase == Phase::Completed {
            (&mut ok, keep_ok)
        } else {
            (&mut failed, keep_failed)
        };
        *count += 1;
        if *count > keep {
            delete.push(m.name.clone());
        }
    }
    delete.reverse();
    delete
}

/// Ready, Reconciling and Stalled in kstatus style. Ready: the newest restore
/// completed and none runs, so a pipeline can `kubectl wait --for=condition=Ready` for
/// a refresh; a transition time is kept while its condition's status stays.
pub(crate) fn conditions(
    spec: &DataRestoreScheduleSpec,
    status: &DataRestoreScheduleStatus,
    generation: Option<i64>,
    now: Time,
) -> Vec<Condition> {
    let stalled = !status.errors.is_empty();
    let (ready, reason, message) = if stalled {
        (false, "InvalidSpec", status.errors.join("; "))
    } else if let Some(active) = &status.active {
        (
            false,
            "Restoring",
            format!("DataRestore {active} is running"),
        )
    } else {
        match (status.last_result, &status.last_restore) {
            (Some(Phase::Completed), Some(last)) => (
                true,
                "Completed",
                format!("DataRestore {last} completed; waiting for the next run"),
            ),
            (Some(phase), Some(last)) => (
                false,
                "LastRestoreFailed",
                format!("DataRestore {last} ended {phase:?}"),
            ),
            _ if spec.paused => (false, "Paused", "paused before any restore".into()),
            _ => (false, "Waiting", "no restore made yet".into()),
        }
    };
    let wanted = [
        (READY, ready),
        (RECONCILING, status.active.is_some() && !stalled),
        (STALLED, stalled),
    ];
    wanted
        .into_iter()
        .map(|(type_, on)| {
            let state = if on { "True" } else { "False" };
            let last_transition_time = status
                .conditions
                .iter()
                .find(|c| c.type_ == type_ && c.status == state)
                .map_or_else(|| now.clone(), |c| c.last_transition_time.clone());
            Condition {
                type_: type_.into(),
                status: state.into(),
                reason: reason.into(),
                message: message.clone(),
                observed_generation: generation,
                last_transition_time,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{DataRestoreSpec, ExtraFiles, PathRestore, RestoreMethod, RestoreTarget};

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + second).unwrap()
    }

    fn following() -> DataRestoreScheduleSpec {
        DataRestoreScheduleSpec {
            template: DataRestoreSpec {
                included_namespaces: vec!["shop".into()],
                ..Default::default()
            },
            velero_schedule: Some("nightly".into()),
            ..Default::default()
        }
    }

    fn made(name: &str, phase: Phase, backup: &str, created: i64) -> Made {
        Made {
            name: name.into(),
            phase,
            backup: Some(backup.into()),
            created: at(created),
            deleting: false,
        }
    }

    fn seen(made: Vec<Made>, newest: Option<&str>, now: i64) -> ScheduleSeen {
        ScheduleSeen {
            created: at(0),
            made,
            newest_backup: newest.map(String::from),
            now: at(now),
        }
    }

    #[test]
    fn a_new_backup_starts_one_restore_and_an_old_one_none() {
        let spec = following();
        let first = decide(
            &spec,
            &Default::default(),
            Some(1),
            &seen(vec![], Some("b1"), 10),
        );
        assert_eq!(first.start.unwrap().backup.as_deref(), Some("b1"));
        assert_eq!(first.status.last_backup.as_deref(), Some("b1"));
        let done = vec![made("s-1", Phase::Completed, "b1", 10)];
        let again = decide(
            &spec,
            &first.status,
            Some(1),
            &seen(done.clone(), Some("b1"), 20),
        );
        assert!(again.start.is_none(), "b1 was restored already");
        assert_eq!(again.status.last_result, Some(Phase::Completed));
        let next = decide(&spec, &again.status, Some(1), &seen(done, Some("b2"), 30));
        assert_eq!(next.start.unwrap().backup.as_deref(), Some("b2"));
    }

    #[test]
    fn never_two_at_once_and_the_newest_backup_wins() {
        let spec = following();
        let running = vec![made("s-1", Phase::Restoring, "b1", 10)];
        let busy = decide(
            &spec,
            &Default::default(),
            Some(1),
            &seen(running, Some("b3"), 20),
        );
        assert!(busy.start.is_none(), "one restore at a time");
        assert_eq!(busy.status.active.as_deref(), Some("s-1"));
        // b2 and b3 arrived meanwhile: b3 is taken, b2 never.
        let ended = vec![made("s-1", Phase::Completed, "b1", 10)];
        let next = decide(&spec, &busy.status, Some(1), &seen(ended, Some("b3"), 30));
        assert_eq!(next.start.unwrap().backup.as_deref(), Some("b3"));
    }

    #[test]
    fn a_paused_or_invalid_schedule_starts_nothing() {
        let mut spec = following();
        spec.paused = true;
        assert!(
            decide(
                &spec,
                &Default::default(),
                None,
                &seen(vec![], Some("b1"), 1)
            )
            .start
            .is_none()
        );
        let mut wrong = following();
        wrong.template.backup_name = Some("b0".into());
        let decided = decide(
            &wrong,
            &Default::default(),
            None,
            &seen(vec![], Some("b1"), 1),
        );
        assert!(decided.start.is_none());
        assert!(
            decided.status.errors[0].starts_with("spec.template.backupName"),
            "{:?}",
            decided.status.errors
        );
    }

    #[test]
    fn spec_mistakes_name_their_fields() {
        let none = DataRestoreScheduleSpec {
            template: following().template,
            ..Default::default()
        };
        assert!(spec_errors(&none)[0].starts_with("spec.veleroSchedule and spec.cron"));
        let mut bad_cron = following();
        bad_cron.cron = Some("61 * * * *".into());
        assert!(spec_errors(&bad_cron)[0].starts_with("spec.cron: \"61 * * * *\""));
        let cron_alone = DataRestoreScheduleSpec {
            template: following().template,
            cron: Some("0 3 * * *".into()),
            ..Default::default()
        };
        assert!(spec_errors(&cron_alone)[0].starts_with("spec.template: with spec.cron alone"));
        let mut bad_template = following();
        bad_template.template.parallel = Some(0);
        let errors = spec_errors(&bad_template);
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with("spec.template.parallel")),
            "{errors:?}"
        );
        assert!(spec_errors(&following()).is_empty());
    }

    #[test]
    fn a_template_names_its_fields_and_those_they_go_against_under_the_template() {
        let mut staged = following();
        staged.template.target = RestoreTarget::NewClaim;
        staged.template.method = RestoreMethod::Staged;
        staged.template.extra_files = ExtraFiles::Keep;
        let errors = spec_errors(&staged);
        assert_eq!(errors.len(), 2, "{errors:#?}");
        assert!(
            errors[0].starts_with(
                "spec.template.method: is Staged, but spec.template.target is NewClaim"
            ) && errors[0]
                .contains("remove spec.template.method, or leave spec.template.target out"),
            "{}",
            errors[0]
        );
        assert!(
            errors[1].starts_with(
                "spec.template.extraFiles: is Keep, but spec.template.target is NewClaim"
            ),
            "{}",
            errors[1]
        );
        let mut kept = following();
        kept.template.extra_files = ExtraFiles::Keep;
        kept.template.paths = Some(PathRestore {
            include: vec!["db".into()],
            ..Default::default()
        });
        let errors = spec_errors(&kept);
        assert_eq!(errors.len(), 1, "{errors:#?}");
        assert!(
            errors[0].starts_with(
                "spec.template.extraFiles: is Keep, but spec.template.paths puts back"
            ) && errors[0].contains("only with spec.template.paths.mirror")
                && !errors[0].contains(" spec.paths"),
            "{}",
            errors[0]
        );
        let mut whole = following();
        whole.template.method = RestoreMethod::Staged;
        whole.template.extra_files = ExtraFiles::Keep;
        assert!(spec_errors(&whole).is_empty());
    }

    #[test]
    fn only_field_names_are_put_under_the_template() {
        assert_eq!(
            under_template("spec.pvcs, spec.includedNamespaces and spec.selector are all empty"),
            "spec.template.pvcs, spec.template.includedNamespaces and spec.template.selector are all empty"
        );
        assert_eq!(
            under_template(
                "spec.backupName: \"spec.x\" is not a backup name (see spec.scheduleName)"
            ),
            "spec.template.backupName: \"spec.x\" is not a backup name (see spec.template.scheduleName)"
        );
    }

    #[test]
    fn cron_runs_once_per_time_from_the_template_and_says_when_next() {
        let spec = DataRestoreScheduleSpec {
            template: DataRestoreSpec {
                schedule_name: Some("nightly".into()),
                included_namespaces: vec!["shop".into()],
                ..Default::default()
            },
            // Every minute: at(0) is a whole minute (1_800_000_000 = 30_000_000 × 60).
            cron: Some("* * * * *".into()),
            ..Default::default()
        };
        let early = decide(&spec, &Default::default(), None, &seen(vec![], None, 30));
        assert!(
            early.start.is_none(),
            "no cron time since the schedule was made"
        );
        assert_eq!(
            early.status.next_run_time.as_ref().map(|t| t.0),
            Some(at(60))
        );
        assert_eq!(early.requeue, Some(Duration::from_secs(30)));
        let due = decide(&spec, &early.status, None, &seen(vec![], None, 61));
        assert_eq!(
            due.start.as_ref().unwrap().backup,
            None,
            "the template's schedule"
        );
        assert_eq!(
            due.status.last_cron_time.as_ref().map(|t| t.0),
            Some(at(60))
        );
        let started = vec![Made {
            backup: None,
            ..made("s-1", Phase::Completed, "", 61)
        }];
        let same_minute = decide(&spec, &due.status, None, &seen(started, None, 70));
        assert!(same_minute.start.is_none(), "each cron time runs once");
    }

    #[test]
    fn ready_means_the_newest_restore_completed_and_none_runs() {
        let spec = following();
        let state = |status: &DataRestoreScheduleStatus| {
            conditions(&spec, status, None, Time(at(0)))
                .into_iter()
                .map(|c| (c.type_, c.status))
                .collect::<Vec<_>>()
        };
        let pair = |t: &str, s: &str| (t.to_string(), s.to_string());
        let mut status = DataRestoreScheduleStatus {
            active: Some("s-1".into()),
            ..Default::default()
        };
        assert_eq!(
            state(&status)[..2],
            [pair("Ready", "False"), pair("Reconciling", "True")]
        );
        status.active = None;
        status.last_restore = Some("s-1".into());
        status.last_result = Some(Phase::Completed);
        assert_eq!(state(&status)[0], pair("Ready", "True"));
        status.errors = vec!["spec.cron: wrong".into()];
        assert_eq!(state(&status)[2], pair("Stalled", "True"));
    }

    #[test]
    fn history_keeps_the_newest_of_each_kind() {
        let spec = DataRestoreScheduleSpec {
            successful_history_limit: Some(1),
            failed_history_limit: Some(1),
            ..following()
        };
        let made = vec![
            made("s-1", Phase::Completed, "b1", 1),
            made("s-2", Phase::Failed, "b2", 2),
            made("s-3", Phase::Completed, "b3", 3),
            made("s-4", Phase::PartiallyFailed, "b4", 4),
            made("s-5", Phase::Restoring, "b5", 5),
        ];
        let decided = decide(&spec, &Default::default(), None, &seen(made, Some("b5"), 9));
        assert_eq!(decided.delete, ["s-1", "s-2"]);
        assert_eq!(decided.status.last_result, Some(Phase::PartiallyFailed));
    }
}

//! Status bookkeeping: conditions in kstatus style, the summary column and the final
//! outcome. Pure functions.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use crate::api::{DataRestoreStatus, Phase, VolumePhase, VolumeStatus, bounds};

pub(super) mod condition {
    pub(crate) const READY: &str = "Ready";
    pub(crate) const RECONCILING: &str = "Reconciling";
    pub(crate) const STALLED: &str = "Stalled";
    /// True while a volume waits on something a person must look at (no node agent takes
    /// its PodVolumeRestore, a cancel the node agent does not acknowledge).
    pub(crate) const WARNING: &str = "Warning";
    pub(crate) const VOLUME_WARNING: &str = "VolumeWarning";
    pub(crate) const NO_WARNING: &str = "NoWarning";
    /// True while a restore with consumers: None runs: files change under live apps.
    pub(crate) const RUNNING_CONSUMERS: &str = "RunningConsumers";
}

/// Now, as a status time.
pub(super) fn now() -> Time {
    stored(Timestamp::now())
}

/// `at` as the API server keeps a status time: to the whole second. A record holding
/// the nanoseconds differs from what the next pass reads back, and every copy of it
/// (a VolumePluginRestore) would be written again for nothing.
pub(super) fn stored(at: Timestamp) -> Time {
    Time(Timestamp::from_second(at.as_second()).unwrap_or(at))
}

/// The result once every volume has ended.
pub(super) fn outcome(volumes: &[VolumeStatus], canceled: bool) -> Phase {
    let completed = volumes
        .iter()
        .filter(|v| v.phase == VolumePhase::Completed)
        .count();
    if canceled {
        Phase::Canceled
    } else if completed == volumes.len() {
        Phase::Completed
    } else if completed == 0 {
        Phase::Failed
    } else {
        Phase::PartiallyFailed
    }
}

pub(super) fn summary(volumes: &[VolumeStatus]) -> String {
    let done = volumes.iter().filter(|v| v.phase.is_terminal()).count();
    format!("{done}/{}", volumes.len())
}

/// How many volumes are in each phase, as `Phase=count` pairs, for logs.
pub(super) fn phase_counts(volumes: &[VolumeStatus]) -> String {
    let mut counts: Vec<(String, usize)> = Vec::new();
    for v in volumes {
        let name = format!("{:?}", v.phase);
        match counts.iter_mut().find(|(n, _)| *n == name) {
            Some((_, c)) => *c += 1,
            None => counts.push((name, 1)),
        }
    }
    counts
        .iter()
        .map(|(n, c)| format!("{n}={c}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The reason of the conditions (and the final Event) for a phase.
pub(super) fn reason(phase: Phase) -> &'static str {
    match phase {
        Phase::New => "Accepted",
        Phase::Validating => "Validating",
        Phase::Restoring => "Restoring",
        Phase::Finalizing => "Finalizing",
        Phase::Completed => "Completed",
        Phase::PartiallyFailed => "PartiallyFailed",
        Phase::Failed => "Failed",
        Phase::Canceled => "Canceled",
    }
}

/// Ready, Reconciling and Stalled for the phase, keeping a condition's transition time
/// when its status did not change, so an unchanged status is not rewritten. `online`:
/// the restore leaves its consumers running (consumers: None), which warns while it runs.
pub(super) fn conditions(
    status: &DataRestoreStatus,
    generation: Option<i64>,
    online: bool,
) -> Vec<Condition> {
    let phase = status.phase;
    let message = match phase {
        Phase::Completed => format!("all {} volumes restored", status.volumes.len()),
        Phase::Failed | Phase::PartiallyFailed | Phase::Canceled => {
            status.errors.first().cloned().unwrap_or_else(|| {
                format!(
                    "{} of {} volumes restored",
                    done(status),
                    status.volumes.len()
                )
            })
        }
        _ => format!("{} of {} volumes done", done(status), status.volumes.len()),
    };
    let wanted = [
        (condition::READY, phase == Phase::Completed),
        (condition::RECONCILING, !phase.is_terminal()),
        (
            condition::STALLED,
            phase.is_terminal() && phase != Phase::Completed,
        ),
    ];
    let warning = status
        .volumes
        .iter()
        .find_map(|v| {
            v.warning
                .as_ref()
                .map(|w| (condition::VOLUME_WARNING, format!("{}: {w}", v.pvc)))
        })
        .or_else(|| {
            let writing = online && !phase.is_terminal() && phase != Phase::New;
            writing.then(|| {
                let text = crate::plan::ONLINE_WARNING.to_string();
                (condition::RUNNING_CONSUMERS, text)
            })
        });
    let condition = |type_: &str, on: bool, reason: &str, message: String| {
        let state = if on { "True" } else { "False" };
        let previous = status.conditions.iter().find(|c| c.type_ == type_);
        let last_transition_time = match previous {
            Some(p) if p.status == state => p.last_transition_time.clone(),
            _ => now(),
        };
        Condition {
            type_: type_.to_string(),
            status: state.to_string(),
            reason: reason.to_string(),
            message,
            observed_generation: generation,
            last_transition_time,
        }
    };
    let mut conditions: Vec<Condition> = wanted
        .into_iter()
        .map(|(type_, on)| condition(type_, on, reason(phase), message.clone()))
        .collect();
    conditions.push(match warning {
        Some((reason, text)) => condition(condition::WARNING, true, reason, text),
        None => condition(
            condition::WARNING,
            false,
            condition::NO_WARNING,
            String::new(),
        ),
    });
    conditions
}

fn done(status: &DataRestoreStatus) -> usize {
    status
        .volumes
        .iter()
        .filter(|v| v.phase == VolumePhase::Completed)
        .count()
}

/// Adds `line` to a status's `errors` or `warnings` unless there already: past
/// [`bounds::STATUS_LINES`] lines, the last says how many more there were instead.
pub(super) fn add_line(lines: &mut Vec<String>, line: String) {
    let max = bounds::STATUS_LINES as usize;
    if lines.contains(&line) {
        return;
    }
    if lines.len() < max - 1 {
        lines.push(line);
        return;
    }
    let more = match lines.get(max - 1).and_then(|last| more_of(last)) {
        Some(more) => more + 1,
        None => 1,
    };
    lines.truncate(max - 1);
    lines.push(format!(
        "{MORE_PREFIX}{more} more (each volume's VolumePluginRestore has its own message)"
    ));
}

/// `lines` cut as [`add_line`] would have kept them.
pub(super) fn bounded(lines: Vec<String>) -> Vec<String> {
    let mut kept = Vec::new();
    for line in lines {
        add_line(&mut kept, line);
    }
    kept
}

const MORE_PREFIX: &str = "... and ";

fn more_of(line: &str) -> Option<usize> {
    line.strip_prefix(MORE_PREFIX)?
        .split_once(' ')?
        .0
        .parse()
        .ok()
}

/// Whether two statuses differ only in bytes done (and the conditions that follow from
/// them), which is written at most once a second per restore.
///
/// Asked after every pass; with a thousand volumes a copy of either status would be
/// megabytes, so only a volume whose bytes moved is copied. The fields beside the
/// records are compared by [`only_tally_differs`], which names every one.
pub(super) fn only_progress_differs(a: &DataRestoreStatus, b: &DataRestoreStatus) -> bool {
    let DataRestoreStatus {
        summary,
        volume_counts,
        consumer_counts,
        git_ops_counts,
        needs_attention,
        volumes,
        consumers,
        git_ops,
        ..
    } = a;
    only_tally_differs(a, b)
        && *summary == b.summary
        && *consumer_counts == b.consumer_counts
        && *git_ops_counts == b.git_ops_counts
        && *needs_attention == b.needs_attention
        && volume_counts
            .as_ref()
            .map(|c| (c.total, &c.phases, c.partly_written, c.warnings))
            == b.volume_counts
                .as_ref()
                .map(|c| (c.total, &c.phases, c.partly_written, c.warnings))
        && *consumers == b.consumers
        && *git_ops == b.git_ops
        && volumes.len() == b.volumes.len()
        && volumes.iter().zip(&b.volumes).all(|(x, y)| {
            if x.bytes_done == y.bytes_done {
                x == y
            } else {
                let mut x = x.clone();
                x.bytes_done = y.bytes_done;
                x == *y
            }
        })
}

/// Whether what the DataRestore object itself holds differs only in what follows from
/// its volumes' records (the counts, the summary, the volumes that need a person, and
/// the conditions): written at most once a second per restore, as progress is. The
/// records themselves go out at once; at the default parallelism a restore makes a
/// pass for each step of each volume, and one write of the DataRestore each would
/// cost as much again.
///
/// The fields are named one by one: a field added to the status must be placed here,
/// on one side or the other.
pub(super) fn only_tally_differs(a: &DataRestoreStatus, b: &DataRestoreStatus) -> bool {
    let DataRestoreStatus {
        phase,
        observed_generation,
        backup_name,
        summary: _,
        volume_counts: _,
        consumer_counts: _,
        git_ops_counts: _,
        needs_attention: _,
        volumes: _,
        consumers: _,
        git_ops: _,
        start_time,
        completion_time,
        errors,
        warnings,
        conditions: _,
    } = a;
    *phase == b.phase
        && *observed_generation == b.observed_generation
        && *backup_name == b.backup_name
        && *start_time == b.start_time
        && *completion_time == b.completion_time
        && *errors == b.errors
        && *warnings == b.warnings
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_past_the_bound_are_counted_in_one_last_line() {
        let max = bounds::STATUS_LINES as usize;
        let lines: Vec<String> = (0..max + 30).map(|i| format!("pvc-{i} failed")).collect();
        let mut kept = bounded(lines.clone());
        assert_eq!(kept.len(), max);
        assert_eq!(kept[..max - 1], lines[..max - 1]);
        assert!(
            kept[max - 1].starts_with("... and 31 more"),
            "{}",
            kept[max - 1]
        );
        // One more, and one already there: the count moves by one only.
        add_line(&mut kept, "pvc-x failed".into());
        add_line(&mut kept, lines[0].clone());
        assert_eq!(kept.len(), max);
        assert!(
            kept[max - 1].starts_with("... and 32 more"),
            "{}",
            kept[max - 1]
        );
        assert_eq!(bounded(lines[..3].to_vec()), lines[..3]);
    }

    #[test]
    fn the_tally_counts_every_volume_and_notes_the_few_that_need_a_person() {
        let mut status = DataRestoreStatus::default();
        for i in 0..100 {
            let mut v = volume(VolumePhase::Completed);
            v.pvc = format!("shop/c{i}");
            v.total_bytes = 10;
            v.bytes_done = 10;
            status.volumes.push(v);
        }
        status.volumes[3].phase = VolumePhase::Failed;
        status.volumes[5].partly_written = true;
        status.volumes[5].phase = VolumePhase::Canceled;
        status.volumes[7].phase = VolumePhase::Restoring;
        status.volumes[7].warning = Some("no node agent".into());
        for v in &mut status.volumes[20..60] {
            v.phase = VolumePhase::Failed;
        }
        status.tally(|v| format!("vpr-{}", v.pvc));
        let counts = status.volume_counts.clone().unwrap();
        assert_eq!(counts.total, 100);
        assert_eq!(counts.phases[&VolumePhase::Failed], 41);
        assert_eq!(counts.phases[&VolumePhase::Completed], 57);
        assert_eq!((counts.partly_written, counts.warnings), (1, 1));
        assert_eq!((counts.bytes_done, counts.total_bytes), (1000, 1000));
        let noted = &status.needs_attention;
        assert_eq!(noted.len(), bounds::NOTED_VOLUMES as usize);
        // What waits on a person now comes first, then failures.
        assert_eq!(noted[0].pvc, "shop/c7");
        assert_eq!(noted[0].message.as_deref(), Some("no node agent"));
        assert_eq!(
            noted[0].volume_plugin_restore.as_deref(),
            Some("vpr-shop/c7")
        );
        assert_eq!(noted[1].pvc, "shop/c3");
        assert!(
            noted.iter().all(|n| n.pvc != "shop/c5"),
            "failures fill the list first"
        );
    }

    #[test]
    fn status_times_are_kept_to_the_second_as_the_api_server_keeps_them() {
        let at: Timestamp = "2026-12-01T07:17:15.483959427Z".parse().unwrap();
        let kept = stored(at);
        assert_eq!(kept.0.to_string(), "2026-12-01T07:17:15Z");
        let json = serde_json::to_value(&kept).unwrap();
        let back: Time = serde_json::from_value(json).unwrap();
        assert_eq!(back, kept, "what is written is what is read back");
    }

    fn volume(phase: VolumePhase) -> VolumeStatus {
        VolumeStatus {
            pvc: "ns/p".into(),
            phase,
            ..Default::default()
        }
    }

    #[test]
    fn outcomes() {
        use VolumePhase::*;
        assert_eq!(
            outcome(&[volume(Completed), volume(Completed)], false),
            Phase::Completed
        );
        assert_eq!(
            outcome(&[volume(Completed), volume(Failed)], false),
            Phase::PartiallyFailed
        );
        assert_eq!(outcome(&[volume(Failed)], false), Phase::Failed);
        assert_eq!(
            outcome(&[volume(Completed), volume(Canceled)], true),
            Phase::Canceled
        );
        assert_eq!(summary(&[volume(Completed), volume(Restoring)]), "1/2");
    }

    #[test]
    fn conditions_follow_kstatus() {
        let mut status = DataRestoreStatus {
            phase: Phase::Restoring,
            volumes: vec![volume(VolumePhase::Restoring)],
            ..Default::default()
        };
        let c = conditions(&status, Some(1), false);
        let get =
            |c: &[Condition], t: &str| c.iter().find(|x| x.type_ == t).unwrap().status.clone();
        assert_eq!(
            (get(&c, "Ready"), get(&c, "Reconciling"), get(&c, "Stalled")),
            ("False".into(), "True".into(), "False".into())
        );
        status.conditions = c.clone();
        status.phase = Phase::Completed;
        let done = conditions(&status, Some(1), false);
        assert_eq!(get(&done, "Ready"), "True");
        assert_eq!(get(&done, "Reconciling"), "False");
        let stalled = c.iter().find(|x| x.type_ == "Stalled").unwrap();
        let kept = done.iter().find(|x| x.type_ == "Stalled").unwrap();
        assert_eq!(
            stalled.last_transition_time, kept.last_transition_time,
            "unchanged status keeps its time"
        );
        status.phase = Phase::Failed;
        status.errors = vec!["backup \"x\" not found".into()];
        let failed = conditions(&status, Some(1), false);
        assert_eq!(get(&failed, "Stalled"), "True");
        assert!(failed[0].message.contains("not found"));
        assert_eq!(get(&failed, "Warning"), "False");

        status.phase = Phase::Restoring;
        status.volumes[0].warning = Some("no node agent".into());
        let warned = conditions(&status, Some(1), false);
        let warning = warned.iter().find(|c| c.type_ == "Warning").unwrap();
        assert_eq!(
            (warning.status.as_str(), warning.message.as_str()),
            ("True", "ns/p: no node agent")
        );
    }

    #[test]
    fn a_restore_under_running_consumers_warns_until_it_ends() {
        let warning = |phase: Phase, online: bool| {
            let status = DataRestoreStatus {
                phase,
                volumes: vec![volume(VolumePhase::Restoring)],
                ..Default::default()
            };
            let c = conditions(&status, Some(1), online);
            let w = c.into_iter().find(|c| c.type_ == "Warning").unwrap();
            (w.status, w.reason)
        };
        let on = ("True".to_string(), "RunningConsumers".to_string());
        let off = ("False".to_string(), "NoWarning".to_string());
        assert_eq!(warning(Phase::Restoring, true), on);
        assert_eq!(warning(Phase::Finalizing, true), on);
        assert_eq!(warning(Phase::Restoring, false), off);
        assert_eq!(warning(Phase::Completed, true), off);
    }

    #[test]
    fn progress_only_changes_are_recognised() {
        let a = DataRestoreStatus {
            volumes: vec![volume(VolumePhase::Restoring)],
            ..Default::default()
        };
        let mut b = a.clone();
        b.volumes[0].bytes_done = 10;
        assert!(only_progress_differs(&a, &b));
        b.conditions = conditions(&b, None, false);
        assert!(only_progress_differs(&a, &b), "conditions follow");
        let mut c = b.clone();
        c.volumes[0].phase = VolumePhase::Completed;
        assert!(!only_progress_differs(&a, &c));
        let mut d = b.clone();
        d.volumes[0].message = Some("restoring".into());
        assert!(!only_progress_differs(&a, &d), "a volume's other field");
        let mut e = b.clone();
        e.warnings.push("PVC shop/data is not bound".into());
        assert!(!only_progress_differs(&a, &e), "a field beside the volumes");
        let mut f = b;
        f.volumes.push(volume(VolumePhase::Pending));
        assert!(!only_progress_differs(&a, &f), "one volume more");
    }

    #[test]
    fn counts_that_follow_the_records_are_told_from_what_must_be_written_at_once() {
        let mut a = DataRestoreStatus {
            phase: Phase::Restoring,
            volumes: vec![volume(VolumePhase::Restoring), volume(VolumePhase::Pending)],
            ..Default::default()
        };
        a.tally(|v| v.pvc.clone());
        a.conditions = conditions(&a, None, false);
        let mut b = a.clone();
        b.volumes[0].phase = VolumePhase::Failed;
        b.volumes[0].message = Some("refused".into());
        b.tally(|v| v.pvc.clone());
        b.summary = Some(summary(&b.volumes));
        b.conditions = conditions(&b, None, false);
        assert_ne!(a.volume_counts, b.volume_counts);
        assert!(only_tally_differs(&a, &b));
        let mut errors = b.clone();
        add_line(&mut errors.errors, "shop/data: refused".into());
        assert!(!only_tally_differs(&a, &errors), "an error");
        let mut ended = b.clone();
        ended.phase = Phase::Finalizing;
        assert!(!only_tally_differs(&a, &ended), "the phase");
        let mut warned = b;
        warned.warnings.push("PVC shop/data is not bound".into());
        assert!(!only_tally_differs(&a, &warned), "a warning");
    }
}

//! A whole-volume restore that deletes extra files, carried out by one pod: the
//! stand-in sets the volume's files aside in its first init container (Clearing),
//! Velero's `restore-wait` follows and the node agent writes (StartingStandIn,
//! Restoring), and once `restore-wait` has exited its main container removes what was
//! set aside (Tidying). Each step is read from the pod's own status (its containers'
//! states and termination messages), so a restarted refill goes on where it stands.
//!
//! The PodVolumeRestore is made only once the set-aside is recorded: one exists only
//! when the node agent may have written, which is what lets a put-back delete what was
//! written beside the files set aside. Once `restore-wait` has exited the backup is in
//! and the tidy may run: nothing is put back from there (a stop ends the volume saying
//! where the old files are), and a put-back that still comes after a tidy began refuses
//! (`copy/aside.rs`).

use crate::api::{CopySummary, VolumePhase, VolumeStatus};

use super::{
    Change, ClaimSeen, Effect, InPodSeen, RestoreStop, Rules, StandInSeen, Step, VolumeSeen, doing,
    failed, left_aside, lost_hold, stay,
};

/// The stand-in's name and what its set-aside and tidy did, when it has them.
pub(super) fn of(seen: &VolumeSeen) -> Option<(&str, &InPodSeen)> {
    match &seen.stand_in {
        StandInSeen::Ours {
            name,
            in_pod: Some(in_pod),
            ..
        } => Some((name, in_pod)),
        _ => None,
    }
}

/// `restore-wait` has exited in a stand-in that tidies: the data is in, and the tidy
/// runs (or ran) on its own.
pub(super) fn tidy_may_run(seen: &VolumeSeen) -> bool {
    match &seen.stand_in {
        StandInSeen::Ours {
            restore_wait_done,
            in_pod: Some(in_pod),
            ..
        } => *restore_wait_done || in_pod.tidy.is_some(),
        _ => false,
    }
}

/// The node agent is done and `restore-wait` has exited: on to Tidying, with the
/// stand-in kept, as it tidies.
pub(super) fn data_in() -> Step {
    Step {
        effect: None,
        change: Change::Advance(VolumePhase::Tidying),
    }
}

/// Clearing: the stand-in's first init container moves what the volume holds aside;
/// once its report is recorded, the PodVolumeRestore is made.
pub(super) fn clearing(volume: &VolumeStatus, seen: &VolumeSeen, rules: &Rules) -> Step {
    let pvc = &volume.pvc;
    if seen.claim == ClaimSeen::Deleted {
        return failed(format!("PVC {pvc} was deleted during the restore"));
    }
    if !seen.foreign_pods.is_empty() && !rules.online {
        return failed(seen.restarted.clone().unwrap_or_else(|| {
            format!(
                "pod {} mounts {pvc} while refill sets its files aside; refill stopped",
                seen.foreign_pods.join(", ")
            )
        }));
    }
    // Made as the volume came here; not made yet when that pass's create met a pod of
    // its name (the next pass made sure it was not another's).
    if seen.stand_in == StandInSeen::Absent && volume.stand_in_uid.is_none() {
        return doing(
            Effect::CreateStandIn,
            Change::Stay {
                message: None,
                warning: None,
            },
        );
    }
    let Some((name, in_pod)) = of(seen) else {
        return failed(lost_hold(pvc, seen, rules.online).unwrap_or_else(|| {
            "the stand-in pod does not set the volume's files aside".to_string()
        }));
    };
    match &in_pod.set_aside {
        Some(Err(why)) => failed(format!(
            "setting the files of PVC {pvc} aside failed in stand-in pod {name}: {why}"
        )),
        Some(Ok(summary)) => cleared(summary, seen),
        None => {
            if let Some(problem) = lost_hold(pvc, seen, rules.online) {
                return failed(problem);
            }
            let waiting = match &seen.stand_in {
                StandInSeen::Ours { waiting, .. } => waiting.as_deref(),
                _ => None,
            };
            // Running as it should, the phase and the pod (`pluginSpecific.pod`) say all
            // there is: a message saying it again cost each volume a write of its record.
            stay(waiting.map(|why| format!("stand-in pod {name} is not running yet: {why}")))
        }
    }
}

/// The set-aside is done: recorded, and the node agent's PodVolumeRestore made.
fn cleared(summary: &CopySummary, seen: &VolumeSeen) -> Step {
    let change = Change::Cleared(summary.clone());
    match seen.pvr {
        None => doing(Effect::CreatePodVolumeRestore, change),
        Some(_) => Step {
            effect: None,
            change,
        },
    }
}

/// Tidying: the stand-in's main container removes what was set aside. Its report
/// recorded, the volume completes and the pod, whose containers have all exited, is
/// deleted without being waited for.
pub(super) fn tidying(volume: &VolumeStatus, seen: &VolumeSeen, rules: &Rules) -> Step {
    let pvc = &volume.pvc;
    let Some((name, in_pod)) = of(seen) else {
        return stay(None);
    };
    let (terminating, pod_failed) = match &seen.stand_in {
        StandInSeen::Ours {
            terminating,
            failed,
            ..
        } => (*terminating, failed.clone()),
        _ => (false, None),
    };
    let stop = |why: String| {
        super::tidy_stopped(
            volume,
            seen,
            RestoreStop {
                outcome: VolumePhase::Failed,
                why,
            },
        )
    };
    if seen.claim == ClaimSeen::Deleted {
        return stop(format!("PVC {pvc} was deleted during the restore"));
    }
    // Recorded an earlier pass: what it removed is removed.
    let over = volume.tidied.is_some();
    if !seen.foreign_pods.is_empty() && !rules.online && !over {
        return stop(seen.restarted.clone().unwrap_or_else(|| {
            format!(
                "pod {} mounts {pvc} while refill removes the files set aside; refill stopped",
                seen.foreign_pods.join(", ")
            )
        }));
    }
    let delete = (!terminating).then_some(Effect::DeleteStandIn);
    match &in_pod.tidy {
        Some(Ok(summary)) if !over => Step {
            effect: delete,
            change: Change::Tidied(summary.clone()),
        },
        Some(Ok(_)) => Step {
            effect: delete,
            change: Change::Completed,
        },
        Some(Err(why)) => Step {
            effect: None,
            change: Change::End {
                outcome: VolumePhase::Failed,
                message: format!(
                    "removing the files set aside failed in stand-in pod {name}: {why}; {}",
                    left_aside(volume, true)
                ),
            },
        },
        None => match pod_failed {
            Some(why) => Step {
                effect: None,
                change: Change::End {
                    outcome: VolumePhase::Failed,
                    message: format!(
                        "stand-in pod {name} failed: {why}; {}",
                        left_aside(volume, true)
                    ),
                },
            },
            // Deleted before its tidy ended: once it is gone a copier tidies.
            None if terminating => stay(format!(
                "stand-in pod {name} is going before it removed the files set aside; a copier pod removes them next"
            )),
            None => stay(format!(
                "removing the files set aside from PVC {pvc} (stand-in pod {name})"
            )),
        },
    }
}

/// A stop while the stand-in tidies: the backup is in, so nothing is put back; the
/// stand-in goes, and the volume ends once it is gone. None when the stand-in does not
/// tidy.
pub(super) fn stopped(seen: &VolumeSeen, stop: &RestoreStop) -> Option<Step> {
    of(seen)?;
    let StandInSeen::Ours { terminating, .. } = &seen.stand_in else {
        return None;
    };
    let message = Some(format!("{}; removing the stand-in pod", stop.why));
    Some(match terminating {
        true => stay(message),
        false => doing(
            Effect::DeleteStandIn,
            Change::Stay {
                message,
                warning: None,
            },
        ),
    })
}

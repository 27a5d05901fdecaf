//! The life of one volume as a pure function: from what the pass saw, what happens next.
//!
//! ```text
//! Direct:  Pending ─▶ Quiescing ─▶ StartingStandIn ─▶ Restoring ─▶ RemovingStandIn ─┬─▶ Completed
//!                                                                 (switchWorkloads) └─▶ Switching ─▶ Completed
//! Direct, extra files deleted (one pod, [`in_pod`]):
//!          Pending ─▶ Quiescing ─▶ Clearing ─▶ StartingStandIn ─▶ Restoring ─▶ Tidying ─▶ Completed
//! Staged, paths:
//!          Pending ─▶ StartingStandIn ─▶ Restoring ─▶ RemovingStandIn ─▶ Quiescing ─▶ Copying ─▶ Completed
//!
//! Any phase where a writer may exist ──▶ Aborting ─▶ Failed | Canceled
//! Any phase where none can (or Switching) ──────────▶ Failed | Canceled
//! ```
//!
//! Once the node agent is done (RemovingStandIn), `restore-wait` cleans up and the
//! stand-in goes; the volume's slot of spec.parallel is free by then, but its
//! consumers wait until the stand-in is gone.
//!
//! Direct with extra files deleted (the default) empties the PVC first (Clearing, the
//! stand-in's first init container, once the consumers are stopped), so that the node
//! agent, which only writes what the snapshot holds, leaves the volume exactly as the
//! backup; the stand-in's main container removes what was set aside (Tidying). A
//! volume that a refill before this began with a copier pod goes on with copier pods.
//!
//! A staged or path restore's node agent fills a scratch claim, not the PVC, while the
//! consumers still run: nothing writes the PVC until they are stopped (Quiescing, after
//! the fill). refill's copier pod then makes the PVC equal to the scratch claim, or
//! copies the chosen paths (Copying), and is the writer to wait for.
//!
//! A restore into new claims that switches workloads onto them stops those workloads
//! only once the new claim holds the backup (Switching), waits until none of their
//! pods mounts the PVC, and completes; they come back on the new claim after.
//!
//! A volume ends Failed or Canceled at once only while nothing can write to it (no
//! stand-in pod, no PodVolumeRestore). Otherwise it goes through Aborting, whose order is
//! the safety of the whole restore: cancel the PodVolumeRestore, wait until the node
//! agent has ended it (or provably never started it), remove the stand-in pod, and only
//! then end, which is what lets the volume's consumers come back.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::api::{CopySummary, PodVolumePhase, VolumePhase, VolumeStatus};

use super::{NO_NODE_AGENT, WAITING_FOR_NODE_AGENT};

mod in_pod;
pub(crate) mod node;
pub(crate) use node::{NodeDown, OnNode};

/// What one pass saw of a volume's world. Built by [`super::sight`].
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct VolumeSeen {
    pub claim: ClaimSeen,
    pub consumers: ConsumersSeen,
    /// Pods other than this restore's stand-in that mount the claim (and still run).
    pub foreign_pods: Vec<String>,
    /// Who started a stopped consumer again, when one of them was (read only when
    /// foreign pods exist).
    pub restarted: Option<String>,
    pub stand_in: StandInSeen,
    pub pvr: Option<PvrSeen>,
    /// A path restore's copier pod (looked for from Copying on).
    pub copier: CopierSeen,
    /// A path restore's scratch claim exists and is not being deleted (looked for from
    /// Copying on).
    pub scratch: bool,
    /// The nodes this volume's waits depend on that are not Ready, or are gone.
    pub nodes_down: Vec<NodeDown>,
}

impl VolumeSeen {
    fn stand_in_terminating(&self) -> bool {
        matches!(
            self.stand_in,
            StandInSeen::Ours {
                terminating: true,
                ..
            }
        )
    }
    fn copier_terminating(&self) -> bool {
        matches!(
            self.copier,
            CopierSeen::Present {
                terminating: true,
                ..
            }
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum CopierSeen {
    #[default]
    Absent,
    /// This restore's copier pod.
    Present {
        name: String,
        terminating: bool,
        /// None while it runs; its summary, or why it failed.
        ended: Option<Result<CopySummary, String>>,
        /// Why it is not running yet, when the pod says.
        waiting: Option<String>,
        /// It puts set-aside files back (a direct restore that did not complete).
        puts_back: bool,
        /// The kubelet refused it before its container started: it wrote nothing.
        rejected: bool,
    },
    /// Another restore's copier (its name derives from the claim).
    Other { name: String, restore: String },
    /// A pod with this restore's copier name and labels that refill has no record of
    /// making: a team's, or refill's own from a pass whose status write was lost.
    Unrecorded { name: String, terminating: bool },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum ClaimSeen {
    #[default]
    Exists,
    /// Deleted, or being deleted (held only by the pods that mount it).
    Deleted,
}

/// The state of the consumers that mount this claim, from the restore's records.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum ConsumersSeen {
    /// Every one of them is stopped (or there are none).
    #[default]
    Stopped,
    /// Some are still being stopped.
    Stopping,
    /// Another restore holds one of them; this restore may not touch it.
    HeldBy(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum StandInSeen {
    #[default]
    Absent,
    /// This restore's stand-in pod.
    Ours {
        name: String,
        terminating: bool,
        /// Why it cannot serve: it failed, or a container ended.
        failed: Option<String>,
        /// Since when `restore-wait` runs, if it does.
        restore_wait_since: Option<Timestamp>,
        /// `restore-wait` saw the done file, cleaned up and ended.
        restore_wait_done: bool,
        /// Why it is not running yet (unschedulable, image pull), when the pod says.
        waiting: Option<String>,
        /// Its set-aside and tidy, when it has them (a whole-volume restore that
        /// deletes extra files).
        in_pod: Option<InPodSeen>,
    },
    /// Another restore's stand-in holds the claim (stand-in names derive from the claim).
    Other {
        name: String,
        restore: String,
        terminating: bool,
    },
    /// A pod with this restore's stand-in name and labels that refill has no record of
    /// making (no recorded UID, and no PodVolumeRestore names it): a team's, or refill's
    /// own from a pass whose status write was lost.
    Unrecorded { name: String, terminating: bool },
}

/// How the set-aside init container and the tidy container of a stand-in ended: None
/// while one has not.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct InPodSeen {
    pub set_aside: Option<Result<CopySummary, String>>,
    pub tidy: Option<Result<CopySummary, String>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PvrSeen {
    pub name: String,
    pub phase: PodVolumePhase,
    pub cancel_requested: bool,
    pub node: Option<String>,
    pub message: Option<String>,
    /// A node agent accepted or started it: from then on it may have written, whatever
    /// its phase says later. One canceled or failed before that wrote nothing.
    pub taken: bool,
}

impl PvrSeen {
    /// A node agent took it up: from then on it may write until it ends.
    fn started(&self) -> bool {
        !matches!(self.phase, PodVolumePhase::New)
    }
    fn ended(&self) -> bool {
        self.phase.is_terminal()
    }
}

/// Why the whole restore stops (cancel, deletion, overall timeout).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RestoreStop {
    pub outcome: VolumePhase,
    pub why: String,
}

/// The spec's rules and the controller's limits, as they apply to a volume.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Rules {
    pub stop: Option<RestoreStop>,
    pub volume_timeout: Duration,
    /// As written by the user (`4h`), for messages.
    pub volume_timeout_text: String,
    /// consumers: Refuse — a volume in use fails instead of waiting.
    pub refuse_in_use: bool,
    /// consumers: None — the restore runs beside the pods that mount the claim.
    pub online: bool,
    /// switchWorkloads: a new claim that holds the backup is switched to (Switching).
    pub switch: bool,
    /// How long `restore-wait` may run with no node agent taking the PodVolumeRestore
    /// before the volume warns.
    pub agent_grace: Duration,
    /// How long a canceled PodVolumeRestore may go on before the volume warns.
    pub cancel_grace: Duration,
    /// How long a node may be down before refill gives up what waits on it
    /// ([`node`]).
    pub node_grace: Duration,
}

/// What the executor does against the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Effect {
    /// Create the stand-in pod and, with it, its PodVolumeRestore.
    CreateStandIn,
    CreatePodVolumeRestore,
    CancelPodVolumeRestore,
    DeleteStandIn,
    /// Create the copier pod of a path restore.
    CreateCopier,
    DeleteCopier,
    /// Delete a path restore's scratch claim.
    DeleteScratchClaim,
    /// Remove the stand-in (the copier) from the API without its kubelet's word: its
    /// node is given up and nothing there may write ([`node`]).
    ForceDeleteStandIn,
    ForceDeleteCopier,
}

/// How the volume's record changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Change {
    /// Stays where it is; `message` says what it waits for, `warning` what needs a person.
    Stay {
        message: Option<String>,
        warning: Option<String>,
    },
    /// On to the next phase of the way that works.
    Advance(VolumePhase),
    /// The node agent is done: on to RemovingStandIn, with what it waits for.
    DataIn {
        message: Option<String>,
    },
    /// The copier reported what it did; its pod is removed next.
    Copied(CopySummary),
    /// The stand-in's set-aside reported what it moved: on to StartingStandIn.
    Cleared(CopySummary),
    /// The stand-in's tidy reported what it removed: recorded, and the volume
    /// completes on the next pass.
    Tidied(CopySummary),
    Completed,
    /// Something went wrong, or a stop was asked, while a writer may exist.
    Abort {
        outcome: VolumePhase,
        message: String,
    },
    /// Ends at once: nothing was started that could write.
    End {
        outcome: VolumePhase,
        message: String,
    },
    /// Aborting is over: nothing writes any more and the stand-in is gone.
    Finish {
        partly_written: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Step {
    pub effect: Option<Effect>,
    pub change: Change,
}

fn stay(message: impl Into<Option<String>>) -> Step {
    Step {
        effect: None,
        change: Change::Stay {
            message: message.into(),
            warning: None,
        },
    }
}

fn doing(effect: Effect, change: Change) -> Step {
    Step {
        effect: Some(effect),
        change,
    }
}

fn abort(outcome: VolumePhase, message: String) -> Step {
    Step {
        effect: None,
        change: Change::Abort { outcome, message },
    }
}

fn failed(message: String) -> Step {
    abort(VolumePhase::Failed, message)
}

/// Ends a volume that has not started a writer yet at once, and rolls back one that may.
fn end_or_abort(seen: &VolumeSeen, outcome: VolumePhase, message: String) -> Step {
    let writer_possible = matches!(seen.stand_in, StandInSeen::Ours { .. }) || seen.pvr.is_some();
    let change = if writer_possible {
        Change::Abort { outcome, message }
    } else {
        Change::End { outcome, message }
    };
    Step {
        effect: None,
        change,
    }
}

/// Whether `since` plus `limit` lies before `now`.
pub(crate) fn expired(since: Option<Timestamp>, limit: Duration, now: Timestamp) -> bool {
    since.is_some_and(|start| {
        let elapsed = now.duration_since(start);
        elapsed.is_positive() && elapsed.unsigned_abs() > limit
    })
}

/// What happens next to `volume`: what its phase calls for, and, while it waits on a
/// node that stopped answering, the words and the bound of that wait ([`node`]).
pub(crate) fn decide(
    volume: &VolumeStatus,
    seen: &VolumeSeen,
    rules: &Rules,
    now: Timestamp,
) -> Step {
    let mut step = by_phase(volume, seen, rules, now);
    if let Change::Stay { message, warning } = &mut step.change {
        let down = node::waited_on(seen, !volume.phase.is_terminal());
        *message = node::noted(message.take(), down);
        if let Some(down) = down {
            *warning = Some(down.words(&volume.pvc, rules, now));
        }
        if step.effect.is_none() {
            step.effect = node::force(seen, rules, now);
        }
    }
    step
}

fn by_phase(volume: &VolumeStatus, seen: &VolumeSeen, rules: &Rules, now: Timestamp) -> Step {
    let pvc = &volume.pvc;
    // The whole restore stopping, or this volume's own time running out.
    let stop = rules.stop.clone().or_else(|| {
        let started = volume.start_time.as_ref().map(|t| t.0);
        (volume.phase.is_active()
            && volume.phase != VolumePhase::Aborting
            && expired(started, rules.volume_timeout, now))
        .then(|| RestoreStop {
            outcome: VolumePhase::Failed,
            why: format!(
                "did not finish within {} (spec.volumeTimeout)",
                rules.volume_timeout_text
            ),
        })
    });
    if volume.phase.is_active()
        && let Some(step) = unrecorded(seen)
    {
        return step;
    }
    match volume.phase {
        VolumePhase::Pending => match stop {
            Some(stop) => end_or_abort(seen, stop.outcome, stop.why),
            // Whether it may start is decided with the other volumes (spec.parallel).
            None => stay(None),
        },
        VolumePhase::Quiescing => {
            if let Some(stop) = stop {
                return end_or_abort(seen, stop.outcome, stop.why);
            }
            quiescing(volume, seen, rules)
        }
        VolumePhase::StartingStandIn | VolumePhase::Restoring | VolumePhase::RemovingStandIn
            if in_pod::tidy_may_run(seen) =>
        {
            in_pod::data_in()
        }
        VolumePhase::StartingStandIn | VolumePhase::Restoring => {
            if let Some(stop) = stop {
                return abort(stop.outcome, stop.why);
            }
            if volume.phase == VolumePhase::Restoring
                && seen
                    .pvr
                    .as_ref()
                    .is_some_and(|p| p.phase == PodVolumePhase::Completed)
            {
                return data_in(volume, seen, rules, now);
            }
            // Filled before anything is stopped: the stand-in holds the scratch claim,
            // and the consumers' pods mount the PVC meanwhile.
            if volume.phase == VolumePhase::StartingStandIn
                && volume.fills_scratch_first()
                && volume.stand_in_pod.is_none()
                && seen.stand_in == StandInSeen::Absent
            {
                return doing(
                    Effect::CreateStandIn,
                    Change::Stay {
                        message: None,
                        warning: None,
                    },
                );
            }
            if let Some(why) = node::cannot_start(seen, rules, now) {
                return failed(why);
            }
            let beside_consumers = rules.online || volume.fills_scratch_first();
            if let Some(problem) = lost_hold(pvc, seen, beside_consumers) {
                return failed(problem);
            }
            if volume.phase == VolumePhase::StartingStandIn {
                starting(seen)
            } else {
                restoring(volume, seen, rules, now)
            }
        }
        VolumePhase::RemovingStandIn => match stop {
            Some(stop) => abort(stop.outcome, stop.why),
            None => removing_stand_in(volume, seen, rules, now),
        },
        VolumePhase::Switching => match stop {
            Some(stop) => unswitched(volume, stop.outcome, &stop.why),
            None => switching(volume, seen),
        },
        VolumePhase::Copying | VolumePhase::Clearing => {
            if let Some(stop) = stop {
                return abort(stop.outcome, stop.why);
            }
            if let Some(why) = node::cannot_start(seen, rules, now) {
                return failed(why);
            }
            match volume.phase == VolumePhase::Clearing && clears_in_stand_in(volume, seen) {
                true => in_pod::clearing(volume, seen, rules),
                false => copying(volume, seen, rules),
            }
        }
        VolumePhase::Tidying => {
            let stop = stop.or_else(|| {
                node::cannot_start(seen, rules, now).map(|why| RestoreStop {
                    outcome: VolumePhase::Failed,
                    why,
                })
            });
            match (stop, in_pod::of(seen).is_some()) {
                (Some(stop), _) => tidy_stopped(volume, seen, stop),
                (None, true) => in_pod::tidying(volume, seen, rules),
                (None, false) => copying(volume, seen, rules),
            }
        }
        VolumePhase::Aborting => aborting(volume, seen, rules, now),
        // Ended: only its stand-in, copier and scratch claim may be left to remove.
        VolumePhase::Completed | VolumePhase::Failed | VolumePhase::Canceled => {
            let stay = Change::Stay {
                message: volume.message.clone(),
                warning: None,
            };
            let helpers_gone = !matches!(seen.stand_in, StandInSeen::Ours { .. })
                && !matches!(seen.copier, CopierSeen::Present { .. });
            if seen.scratch && helpers_gone {
                return doing(Effect::DeleteScratchClaim, stay);
            }
            without_stand_in(seen, volume.message.clone(), stay)
        }
    }
}

/// A pod under a name refill derives for its own stand-in or copier, with their labels,
/// that refill has no record of making, goes before anything else happens: it may be a
/// team's pod with any container in it, and refill never writes beside it or takes it
/// for its own. Refill's own, made by a pass whose status write was lost, was never
/// given a PodVolumeRestore (that would vouch for it) and holds nothing yet; it is made
/// again, and recorded, once this one is gone.
fn unrecorded(seen: &VolumeSeen) -> Option<Step> {
    let (effect, name, terminating) = match (&seen.stand_in, &seen.copier) {
        (StandInSeen::Unrecorded { name, terminating }, _) => {
            (Effect::DeleteStandIn, name, *terminating)
        }
        (_, CopierSeen::Unrecorded { name, terminating }) => {
            (Effect::DeleteCopier, name, *terminating)
        }
        _ => return None,
    };
    let message = format!(
        "pod {name} has refill's name and labels but refill has no record of making it; waiting for it to go"
    );
    Some(match terminating {
        true => stay(message),
        false => doing(
            effect,
            Change::Stay {
                message: Some(message),
                warning: None,
            },
        ),
    })
}

fn quiescing(volume: &VolumeStatus, seen: &VolumeSeen, rules: &Rules) -> Step {
    let pvc = &volume.pvc;
    if seen.claim == ClaimSeen::Deleted {
        return end_or_abort(
            seen,
            VolumePhase::Failed,
            format!("PVC {pvc} was deleted during the restore"),
        );
    }
    match &seen.consumers {
        ConsumersSeen::HeldBy(message) => {
            return end_or_abort(seen, VolumePhase::Failed, message.clone());
        }
        ConsumersSeen::Stopping => return stay("stopping the consumers of the volume".to_string()),
        ConsumersSeen::Stopped => {}
    }
    if !seen.foreign_pods.is_empty() && !rules.online {
        if let Some(problem) = &seen.restarted {
            return end_or_abort(seen, VolumePhase::Failed, problem.clone());
        }
        let users = seen.foreign_pods.join(", ");
        if rules.refuse_in_use {
            return end_or_abort(
                seen,
                VolumePhase::Failed,
                format!("PVC {pvc} is in use by pod {users} and spec.consumers is Refuse"),
            );
        }
        return stay(format!("waiting for pods to release the volume: {users}"));
    }
    // Nothing else mounts the PVC now. The next writer is a copier pod (Copying) when
    // there is one, else the stand-in, which sets the files aside first (Clearing) in a
    // whole-volume restore that deletes extra files.
    if volume.clears_first() {
        return start_stand_in(pvc, seen, VolumePhase::Clearing);
    }
    let next = volume.fills_scratch_first().then_some(VolumePhase::Copying);
    if let Some(next) = next {
        return match &seen.stand_in {
            StandInSeen::Absent => Step {
                effect: None,
                change: Change::Advance(next),
            },
            // (An unrecorded pod went before this: [`unrecorded`].)
            StandInSeen::Other { .. } | StandInSeen::Unrecorded { .. } => other_stand_in(pvc, seen),
            // A stand-in of this restore before the copier: left from a fill, or from
            // a pass that did not get to write its status. It goes first.
            StandInSeen::Ours { name, .. } => without_stand_in(
                seen,
                Some(format!("waiting for the old stand-in pod {name} to go")),
                Change::Advance(next),
            ),
        };
    }
    start_stand_in(pvc, seen, VolumePhase::StartingStandIn)
}

/// Nothing else writes the PVC: the stand-in is made (with its PodVolumeRestore, unless
/// it sets the files aside first), or one a pass made before its status write was lost
/// is followed; the volume goes on to `next`.
fn start_stand_in(pvc: &str, seen: &VolumeSeen, next: VolumePhase) -> Step {
    match &seen.stand_in {
        StandInSeen::Absent => doing(Effect::CreateStandIn, Change::Advance(next)),
        StandInSeen::Ours {
            terminating: false, ..
        } => Step {
            effect: None,
            change: Change::Advance(next),
        },
        StandInSeen::Ours { name, .. } => {
            stay(format!("waiting for the old stand-in pod {name} to go"))
        }
        StandInSeen::Other { .. } | StandInSeen::Unrecorded { .. } => other_stand_in(pvc, seen),
    }
}

/// Another restore's stand-in holds the claim: waited for while it goes, else the
/// volume fails.
fn other_stand_in(pvc: &str, seen: &VolumeSeen) -> Step {
    match &seen.stand_in {
        StandInSeen::Other {
            name,
            restore,
            terminating: true,
        } => stay(format!(
            "waiting for stand-in pod {name} of DataRestore {restore} to go"
        )),
        StandInSeen::Other { name, restore, .. } => end_or_abort(
            seen,
            VolumePhase::Failed,
            format!(
                "PVC {pvc} is being restored by DataRestore {restore} (stand-in pod {name}); restore it again after that one ends"
            ),
        ),
        _ => stay(None),
    }
}

/// Reasons the stand-in no longer holds the volume alone (or, `online`, at all).
fn lost_hold(pvc: &str, seen: &VolumeSeen, online: bool) -> Option<String> {
    if seen.claim == ClaimSeen::Deleted {
        return Some(format!("PVC {pvc} was deleted during the restore"));
    }
    match &seen.stand_in {
        StandInSeen::Absent | StandInSeen::Other { .. } | StandInSeen::Unrecorded { .. } => {
            return Some(format!(
                "the stand-in pod of {pvc} disappeared (deleted or evicted); the volume is not restored"
            ));
        }
        StandInSeen::Ours {
            name,
            terminating: true,
            ..
        } => {
            return Some(format!(
                "stand-in pod {name} was deleted or evicted (a drain) during the restore; the volume is not restored"
            ));
        }
        StandInSeen::Ours {
            name,
            failed: Some(why),
            ..
        } => return Some(format!("stand-in pod {name} failed: {why}")),
        StandInSeen::Ours { .. } => {}
    }
    if !seen.foreign_pods.is_empty() && !online {
        return Some(seen.restarted.clone().unwrap_or_else(|| {
            format!(
                "pod {} mounts {pvc} while it is being restored; refill stopped writing to it",
                seen.foreign_pods.join(", ")
            )
        }));
    }
    None
}

fn starting(seen: &VolumeSeen) -> Step {
    let StandInSeen::Ours {
        name,
        restore_wait_since,
        waiting,
        ..
    } = &seen.stand_in
    else {
        unreachable!("lost_hold() handles every other stand-in");
    };
    let Some(pvr) = &seen.pvr else {
        return doing(
            Effect::CreatePodVolumeRestore,
            Change::Stay {
                message: None,
                warning: None,
            },
        );
    };
    // The node agent may have taken it up already (after a restart, a lost status write),
    // and restore-wait may be gone with it: it is followed from here on.
    if restore_wait_since.is_some() || pvr.started() {
        return Step {
            effect: None,
            change: Change::Advance(VolumePhase::Restoring),
        };
    }
    stay(match waiting {
        Some(why) => format!("stand-in pod {name} is not running yet: {why}"),
        None => format!("waiting for restore-wait to run in stand-in pod {name}"),
    })
}

fn restoring(volume: &VolumeStatus, seen: &VolumeSeen, rules: &Rules, now: Timestamp) -> Step {
    let Some(pvr) = &seen.pvr else {
        return failed("its PodVolumeRestore was deleted by someone else".to_string());
    };
    let name = &pvr.name;
    let detail = pvr.message.as_deref().unwrap_or("no message");
    match pvr.phase {
        PodVolumePhase::Completed => data_in(volume, seen, rules, now),
        PodVolumePhase::Failed => failed(format!("PodVolumeRestore {name} failed: {detail}")),
        PodVolumePhase::Canceled => failed(format!(
            "PodVolumeRestore {name} was canceled, not by refill: {detail}"
        )),
        PodVolumePhase::New => {
            let since = match &seen.stand_in {
                StandInSeen::Ours {
                    restore_wait_since, ..
                } => *restore_wait_since,
                _ => None,
            };
            let warning = expired(since, rules.agent_grace, now).then(|| {
                format!(
                    "{NO_NODE_AGENT} {name} for {}s; is Velero's node agent running on node {}?",
                    rules.agent_grace.as_secs(),
                    pvr.node
                        .as_deref()
                        .or(volume.node.as_deref())
                        .unwrap_or("of the stand-in pod")
                )
            });
            Step {
                effect: None,
                change: Change::Stay {
                    message: Some(format!("{WAITING_FOR_NODE_AGENT} {name}")),
                    warning,
                },
            }
        }
        _ => stay(None),
    }
}

/// The node agent is done. The volume moves to RemovingStandIn, and with that frees its
/// slot of spec.parallel: what is left (restore-wait's cleanup, the pod's deletion)
/// moves no data. When the stand-in is already gone it goes straight on.
fn data_in(volume: &VolumeStatus, seen: &VolumeSeen, rules: &Rules, now: Timestamp) -> Step {
    let step = removing_stand_in(volume, seen, rules, now);
    match step.change {
        Change::Stay { message, .. } => Step {
            effect: step.effect,
            change: Change::DataIn { message },
        },
        _ => step,
    }
}

/// The data is in. The volume goes on once restore-wait has cleaned up (it removes the
/// `.velero` folders it waited for) and the stand-in is gone: only then may consumers
/// come back, so nothing of the restore touches the volume under them. A path
/// restore's data is in the scratch claim: its paths are copied next. A new claim's
/// workloads are switched onto it next, when asked.
fn removing_stand_in(
    volume: &VolumeStatus,
    seen: &VolumeSeen,
    rules: &Rules,
    now: Timestamp,
) -> Step {
    // On a node given up, restore-wait's end will not be heard of: the stand-in goes
    // without it (its cleanup of `.velero` unconfirmed), as nothing there writes.
    if let StandInSeen::Ours {
        name,
        restore_wait_done: false,
        terminating: false,
        ..
    } = &seen.stand_in
        && !node::stand_in_given_up(seen, rules, now)
    {
        return stay(format!(
            "restored; waiting for restore-wait in stand-in pod {name} to finish"
        ));
    }
    let then = if volume.fills_scratch_first() {
        // The scratch claim holds the backup: only now are the consumers stopped.
        Change::Advance(VolumePhase::Quiescing)
    } else if volume.target_pvc.is_some() && rules.switch {
        Change::Advance(VolumePhase::Switching)
    } else if volume.clears_first() {
        // What the volume held before is set aside in its root: it goes before the
        // consumers come back.
        Change::Advance(VolumePhase::Tidying)
    } else {
        Change::Completed
    };
    without_stand_in(
        seen,
        Some("restored; removing the stand-in pod".into()),
        then,
    )
}

/// The copier writes the PVC (Copying: the scratch claim's files, or the chosen paths;
/// Clearing: it sets its files aside; Tidying: it removes them): like the node
/// agent's, its writes must not meet a running consumer, and the volume goes on only
/// after its pod is gone.
fn copying(volume: &VolumeStatus, seen: &VolumeSeen, rules: &Rules) -> Step {
    let pvc = &volume.pvc;
    let clearing = volume.phase == VolumePhase::Clearing;
    let tidying = volume.phase == VolumePhase::Tidying;
    let doing_what = if clearing {
        "setting aside what the volume holds before the backup is written into"
    } else if tidying {
        "removing the files set aside from"
    } else if volume.paths.is_some() {
        "copying the chosen paths into"
    } else {
        "making the backup's files from the scratch claim into"
    };
    if seen.claim == ClaimSeen::Deleted {
        return failed(format!("PVC {pvc} was deleted during the restore"));
    }
    let done = match volume.phase {
        VolumePhase::Clearing => volume.cleared.is_some(),
        VolumePhase::Tidying => volume.tidied.is_some(),
        _ => volume.copied.is_some(),
    };
    // A copy or tidy whose copier exited and was recorded is over: a consumer that
    // runs now (brought back by a pass whose status write was lost) meets no writer.
    let over = done && !clearing;
    if !seen.foreign_pods.is_empty() && !rules.online && !over {
        let why = seen.restarted.clone().unwrap_or_else(|| {
            format!(
                "pod {} mounts {pvc} while refill's copier writes it; refill stopped copying",
                seen.foreign_pods.join(", ")
            )
        });
        // The backup is in already: nothing to put back, only the copier to stop.
        if tidying {
            let outcome = VolumePhase::Failed;
            return tidy_stopped(volume, seen, RestoreStop { outcome, why });
        }
        return failed(why);
    }
    match &seen.copier {
        // Emptied: the stand-in comes next, and with it the node agent.
        CopierSeen::Absent if done && clearing => {
            start_stand_in(pvc, seen, VolumePhase::StartingStandIn)
        }
        CopierSeen::Absent if done => Step {
            effect: None,
            change: Change::Completed,
        },
        // Also when someone deleted it midway: copying (or clearing) again gives the
        // same files.
        CopierSeen::Absent => doing(
            Effect::CreateCopier,
            Change::Stay {
                message: Some(format!("{doing_what} PVC {pvc}")),
                warning: None,
            },
        ),
        CopierSeen::Present {
            ended: None,
            name,
            waiting,
            ..
        } => stay(match waiting {
            Some(why) => format!("copier pod {name} is not running yet: {why}"),
            None => format!("{doing_what} PVC {pvc} (pod {name})"),
        }),
        // Its container has exited and its summary is recorded: it writes nothing any
        // more, so a copy or tidy is done without waiting for the pod object to go
        // (a second or two of each app's downtime on a real node); an ended volume
        // removes what is left of it.
        CopierSeen::Present {
            ended: Some(Ok(_)),
            terminating,
            ..
        } if done && !clearing => Step {
            effect: (!terminating).then_some(Effect::DeleteCopier),
            change: Change::Completed,
        },
        CopierSeen::Present {
            ended: Some(Ok(summary)),
            terminating,
            ..
        } => Step {
            effect: (!terminating).then_some(Effect::DeleteCopier),
            change: Change::Copied(summary.clone()),
        },
        // Never started, it wrote nothing: the volume ends at once, as it was.
        CopierSeen::Present {
            ended: Some(Err(why)),
            rejected: true,
            name,
            ..
        } if !tidying => Step {
            effect: None,
            change: Change::End {
                outcome: VolumePhase::Failed,
                message: format!(
                    "copier pod {name} was refused by its node before it started, so nothing was written: {why}"
                ),
            },
        },
        // The backup is in: nothing to put back, and the set-aside files stay.
        CopierSeen::Present {
            ended: Some(Err(why)),
            name,
            ..
        } if tidying => Step {
            effect: None,
            change: Change::End {
                outcome: VolumePhase::Failed,
                message: format!(
                    "copier pod {name} failed: {why}; {}",
                    left_aside(volume, true)
                ),
            },
        },
        CopierSeen::Present {
            ended: Some(Err(why)),
            name,
            ..
        } => failed(format!("copier pod {name} failed: {why}")),
        CopierSeen::Other { name, restore } => failed(format!(
            "PVC {pvc} is being restored by DataRestore {restore} (copier pod {name}); restore it again after that one ends"
        )),
        // Gone before this is reached: [`unrecorded`].
        CopierSeen::Unrecorded { .. } => stay(None),
    }
}

/// Whether a Clearing volume sets its files aside in its stand-in. A copier seen, or a
/// set-aside recorded with no stand-in that sets aside, is one a refill before that
/// shape began: it is followed to its end, and the stand-in made after it.
fn clears_in_stand_in(volume: &VolumeStatus, seen: &VolumeSeen) -> bool {
    let copier_began = !matches!(seen.copier, CopierSeen::Absent)
        || (volume.cleared.is_some() && in_pod::of(seen).is_none());
    !copier_began
}

/// What a volume whose set-aside files were not removed or put back holds.
pub(super) fn left_aside(volume: &VolumeStatus, backup_in: bool) -> String {
    let now = if backup_in {
        "the backup's files are in"
    } else {
        "the backup's files may be partly in"
    };
    format!(
        "{now} PVC {}, and the files it held before are in the directory .refill-aside-<this DataRestore's UID> of its root",
        volume.pvc
    )
}

/// The restore stops while the files set aside are removed: the backup is in, so
/// nothing is put back; the copier goes, and the volume ends saying what it holds.
fn tidy_stopped(volume: &VolumeStatus, seen: &VolumeSeen, stop: RestoreStop) -> Step {
    if let Some(step) = in_pod::stopped(seen, &stop) {
        return step;
    }
    match &seen.copier {
        CopierSeen::Present {
            terminating: false, ..
        } => doing(
            Effect::DeleteCopier,
            Change::Stay {
                message: Some(format!("{}; removing the copier pod", stop.why)),
                warning: None,
            },
        ),
        CopierSeen::Present { .. } => stay(format!("{}; removing the copier pod", stop.why)),
        _ => Step {
            effect: None,
            change: Change::End {
                outcome: stop.outcome,
                message: format!("{}; {}", stop.why, left_aside(volume, true)),
            },
        },
    }
}

/// A switch given up: the new claim holds the backup and nothing writes to it any more,
/// so the volume ends at once; its workloads come back on the PVC, unswitched.
fn unswitched(volume: &VolumeStatus, outcome: VolumePhase, why: &str) -> Step {
    Step {
        effect: None,
        change: Change::End {
            outcome,
            message: format!(
                "{why}; PVC {} holds the backup, and no workload was switched onto it",
                volume.written_claim()
            ),
        },
    }
}

/// The new claim holds the backup; the workloads to switch onto it are stopped and
/// waited for (`seen` tells of them alone: the PVC's other consumers keep it).
fn switching(volume: &VolumeStatus, seen: &VolumeSeen) -> Step {
    let pvc = &volume.pvc;
    let into = volume.written_claim();
    let end = |message: String| unswitched(volume, VolumePhase::Failed, &message);
    match &seen.consumers {
        ConsumersSeen::HeldBy(message) => return end(message.clone()),
        ConsumersSeen::Stopping => {
            return stay(format!(
                "restored into PVC {into}; stopping the workloads to switch onto it"
            ));
        }
        ConsumersSeen::Stopped => {}
    }
    if !seen.foreign_pods.is_empty() {
        if let Some(problem) = &seen.restarted {
            return end(problem.clone());
        }
        return stay(format!(
            "restored into PVC {into}; waiting for pods of the workloads to switch to release PVC {pvc}: {}",
            seen.foreign_pods.join(", ")
        ));
    }
    Step {
        effect: None,
        change: Change::Completed,
    }
}

/// Removes this restore's stand-in and copier, waits until they are gone, then makes
/// `then`.
fn without_stand_in(seen: &VolumeSeen, message: Option<String>, then: Change) -> Step {
    match &seen.copier {
        CopierSeen::Present {
            terminating: false, ..
        } => {
            return doing(
                Effect::DeleteCopier,
                Change::Stay {
                    message,
                    warning: None,
                },
            );
        }
        CopierSeen::Present { .. } => return stay(message),
        // Not refill's to remove once the volume ended.
        CopierSeen::Absent | CopierSeen::Other { .. } | CopierSeen::Unrecorded { .. } => {}
    }
    match &seen.stand_in {
        StandInSeen::Ours {
            terminating: false, ..
        } => doing(
            Effect::DeleteStandIn,
            Change::Stay {
                message,
                warning: None,
            },
        ),
        StandInSeen::Ours { .. } => stay(message),
        StandInSeen::Absent | StandInSeen::Other { .. } | StandInSeen::Unrecorded { .. } => Step {
            effect: None,
            change: then,
        },
    }
}

fn aborting(volume: &VolumeStatus, seen: &VolumeSeen, rules: &Rules, now: Timestamp) -> Step {
    let message = volume.message.clone();
    // A node agent whose node is deleted ends nothing any more, and writes nothing.
    if let Some(pvr) = &seen.pvr
        && !pvr.ended()
        && !node::agent_gone(seen)
    {
        if !pvr.cancel_requested {
            return doing(
                Effect::CancelPodVolumeRestore,
                Change::Stay {
                    message,
                    warning: None,
                },
            );
        }
        if pvr.started() {
            let since = volume.abort_time.as_ref().map(|t| t.0);
            let warning = expired(since, rules.cancel_grace, now).then(|| {
                format!(
                    "the node agent has not stopped PodVolumeRestore {} {}s after it was canceled; the volume's consumers stay stopped until it does (deleting the PodVolumeRestore forces it)",
                    pvr.name,
                    rules.cancel_grace.as_secs()
                )
            });
            return Step {
                effect: None,
                change: Change::Stay { message, warning },
            };
        }
        // Canceled before any node agent took it: once the stand-in is gone, none can
        // (a node agent starts only while the pod's restore-wait runs).
    }
    if volume.clears_first() {
        return put_back(volume, seen, message);
    }
    // A staged or path restore's node agent writes only its scratch claim; its copier's
    // writes were marked when it aborted.
    let agent_wrote_pvc =
        volume.scratch_pvc.is_none() && seen.pvr.as_ref().is_some_and(|p| p.taken);
    let partly_written = volume.partly_written || agent_wrote_pvc;
    without_stand_in(seen, message, Change::Finish { partly_written })
}

/// A direct restore that set the volume's files aside and did not complete puts them
/// back once nothing else writes (the stand-in gone, and a set-aside cut short
/// stopped), deleting what the node agent may have written: the volume ends as it
/// was. A copier that finds nothing set aside puts nothing back.
fn put_back(volume: &VolumeStatus, seen: &VolumeSeen, message: Option<String>) -> Step {
    let reason = message.clone().unwrap_or_default();
    match &seen.stand_in {
        StandInSeen::Ours {
            terminating: false, ..
        } => {
            return doing(
                Effect::DeleteStandIn,
                Change::Stay {
                    message,
                    warning: None,
                },
            );
        }
        StandInSeen::Ours { .. } => return stay(message),
        _ => {}
    }
    let step = |effect, change| Step { effect, change };
    // The claim went (its stand-in held it until now): there is nothing left to put
    // back into, and a copier for it would wait for the claim for ever. Or someone
    // started a consumer (or another pod) on it: nothing is written under it, not
    // even the put-back. Either way the copier goes, and the volume ends saying
    // where the files are.
    let given_up = if seen.claim == ClaimSeen::Deleted {
        Some(format!(
            "{reason}; PVC {} is deleted, so nothing was put back",
            volume.pvc
        ))
    } else if !seen.foreign_pods.is_empty() {
        Some(format!(
            "{reason}; its files were not put back, as pod {} mounts it now; {}",
            seen.foreign_pods.join(", "),
            left_aside(volume, false)
        ))
    } else {
        None
    };
    if let Some(end) = given_up {
        return match &seen.copier {
            CopierSeen::Present {
                terminating: false, ..
            } => doing(
                Effect::DeleteCopier,
                Change::Stay {
                    message,
                    warning: None,
                },
            ),
            CopierSeen::Present { .. } => stay(message),
            _ => step(
                None,
                Change::End {
                    outcome: volume.outcome.unwrap_or(VolumePhase::Failed),
                    message: end,
                },
            ),
        };
    }
    let volume_gone = node::volume_gone(seen);
    match &seen.copier {
        CopierSeen::Present {
            puts_back: false,
            terminating,
            ..
        } => step(
            (!terminating).then_some(Effect::DeleteCopier),
            Change::Stay {
                message,
                warning: None,
            },
        ),
        // Not running, and its volume's node is deleted: it never will. It goes as the
        // volume ends (not placed on any node, it goes at once): an ended restore
        // leaves no pod behind.
        CopierSeen::Present {
            ended: None,
            name,
            waiting: Some(_),
            terminating,
            ..
        } if volume_gone.is_some() => step(
            (!terminating).then_some(Effect::DeleteCopier),
            Change::End {
                outcome: volume.outcome.unwrap_or(VolumePhase::Failed),
                message: format!(
                    "{reason}; nothing was put back: copier pod {name} cannot reach the volume, which was on node {}, now deleted",
                    volume_gone.unwrap_or_default()
                ),
            },
        ),
        CopierSeen::Present {
            ended: None,
            name,
            waiting,
            ..
        } => step(
            None,
            // The reason stays the message: each pass would otherwise wrap the last
            // one's words in its own. What the copier waits for is a warning.
            Change::Stay {
                message,
                warning: waiting.as_ref().map(|why| {
                    format!("copier pod {name} putting the files back is not running yet: {why}")
                }),
            },
        ),
        CopierSeen::Present {
            ended: Some(Ok(summary)),
            terminating,
            ..
        } => step(
            (!terminating).then_some(Effect::DeleteCopier),
            Change::Copied(summary.clone()),
        ),
        CopierSeen::Present {
            ended: Some(Err(why)),
            name,
            ..
        } => step(
            None,
            Change::End {
                outcome: volume.outcome.unwrap_or(VolumePhase::Failed),
                message: format!(
                    "{reason}; putting its files back failed (copier pod {name}: {why}); {}",
                    left_aside(volume, false)
                ),
            },
        ),
        CopierSeen::Absent if volume.put_back.is_some() => step(
            None,
            Change::Finish {
                partly_written: false,
            },
        ),
        CopierSeen::Absent => doing(
            Effect::CreateCopier,
            Change::Stay {
                message,
                warning: None,
            },
        ),
        // Another restore's copier has the name: nothing can be put back now.
        CopierSeen::Other { name, restore } => step(
            None,
            Change::End {
                outcome: volume.outcome.unwrap_or(VolumePhase::Failed),
                message: format!(
                    "{reason}; its files could not be put back while copier pod {name} of DataRestore {restore} runs; {}",
                    left_aside(volume, false)
                ),
            },
        ),
        CopierSeen::Unrecorded { .. } => stay(message),
    }
}

#[cfg(test)]
mod tests;

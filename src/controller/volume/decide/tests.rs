//! One row per transition of [`decide`]: the volume's phase, what the pass saw, what the
//! restore asks, and the step expected.

use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

const NOW: i64 = 10_000;

fn at(second: i64) -> Timestamp {
    Timestamp::from_second(second).unwrap()
}

fn rules() -> Rules {
    Rules {
        stop: None,
        volume_timeout: Duration::from_secs(3600),
        volume_timeout_text: "1h".into(),
        refuse_in_use: false,
        online: false,
        switch: false,
        agent_grace: Duration::from_secs(60),
        cancel_grace: Duration::from_secs(300),
        node_grace: Duration::from_secs(120),
    }
}

fn canceled() -> Rules {
    Rules {
        stop: Some(RestoreStop {
            outcome: VolumePhase::Canceled,
            why: "the restore was canceled".into(),
        }),
        ..rules()
    }
}

fn refuse() -> Rules {
    Rules {
        refuse_in_use: true,
        ..rules()
    }
}

fn online() -> Rules {
    Rules {
        online: true,
        ..rules()
    }
}

/// A direct restore's volume that keeps extra files: the node agent writes the PVC
/// as it is.
fn volume(phase: VolumePhase) -> VolumeStatus {
    VolumeStatus {
        pvc: "shop/data".into(),
        phase,
        start_time: Some(Time(at(NOW - 10))),
        keep_extra_files: true,
        ..Default::default()
    }
}

/// A direct restore's volume that ends exactly as the backup: emptied first.
fn exact(v: VolumeStatus) -> VolumeStatus {
    VolumeStatus {
        keep_extra_files: false,
        ..v
    }
}

/// A staged restore's volume: the node agent fills a scratch claim first.
fn staged(v: VolumeStatus) -> VolumeStatus {
    VolumeStatus {
        scratch_pvc: Some("refill-scratch-data-1".into()),
        keep_extra_files: false,
        ..v
    }
}

fn aborting(outcome: VolumePhase) -> VolumeStatus {
    VolumeStatus {
        outcome: Some(outcome),
        message: Some("why".into()),
        abort_time: Some(Time(at(NOW - 10))),
        ..volume(VolumePhase::Aborting)
    }
}

/// A direct exact restore's volume whose files were set aside.
fn cleared(v: VolumeStatus) -> VolumeStatus {
    VolumeStatus {
        cleared: Some(3),
        ..v
    }
}

fn old(phase: VolumePhase) -> VolumeStatus {
    VolumeStatus {
        start_time: Some(Time(at(NOW - 7200))),
        ..volume(phase)
    }
}

fn ours() -> StandInSeen {
    StandInSeen::Ours {
        name: "refill-data-1".into(),
        terminating: false,
        failed: None,
        restore_wait_since: None,
        restore_wait_done: false,
        waiting: None,
        in_pod: None,
    }
}

fn waiting_for(why: &str) -> StandInSeen {
    StandInSeen::Ours {
        name: "refill-data-1".into(),
        terminating: false,
        failed: None,
        restore_wait_since: None,
        restore_wait_done: false,
        waiting: Some(why.into()),
        in_pod: None,
    }
}

fn running_since(second: i64) -> StandInSeen {
    StandInSeen::Ours {
        name: "refill-data-1".into(),
        terminating: false,
        failed: None,
        restore_wait_since: Some(at(second)),
        restore_wait_done: false,
        waiting: None,
        in_pod: None,
    }
}

fn terminating() -> StandInSeen {
    StandInSeen::Ours {
        name: "refill-data-1".into(),
        terminating: true,
        failed: None,
        restore_wait_since: None,
        restore_wait_done: false,
        waiting: None,
        in_pod: None,
    }
}

fn broken() -> StandInSeen {
    StandInSeen::Ours {
        name: "refill-data-1".into(),
        terminating: false,
        failed: Some("container idle exited".into()),
        restore_wait_since: None,
        restore_wait_done: false,
        waiting: None,
        in_pod: None,
    }
}

fn cleaned_up() -> StandInSeen {
    StandInSeen::Ours {
        name: "refill-data-1".into(),
        terminating: false,
        failed: None,
        restore_wait_since: None,
        restore_wait_done: true,
        waiting: None,
        in_pod: None,
    }
}

/// The stand-in that sets aside and tidies, as its containers stand.
fn one_pod(
    set_aside: Option<Result<CopySummary, String>>,
    restore_wait_done: bool,
    tidy: Option<Result<CopySummary, String>>,
) -> StandInSeen {
    StandInSeen::Ours {
        name: "refill-data-1".into(),
        terminating: false,
        failed: None,
        restore_wait_since: None,
        restore_wait_done,
        waiting: None,
        in_pod: Some(InPodSeen { set_aside, tidy }),
    }
}

fn others(terminating: bool) -> StandInSeen {
    StandInSeen::Other {
        name: "refill-data-1".into(),
        restore: "velero/first".into(),
        terminating,
    }
}

fn pvr(phase: PodVolumePhase) -> Option<PvrSeen> {
    Some(PvrSeen {
        name: "fix-1".into(),
        phase,
        cancel_requested: false,
        node: Some("node-a".into()),
        message: Some("agent says".into()),
        taken: phase != PodVolumePhase::New,
    })
}

/// A PodVolumeRestore no node agent ever took, in `phase` (canceled or failed by the
/// node agent's own checks, or New).
fn untaken_pvr(phase: PodVolumePhase) -> Option<PvrSeen> {
    pvr(phase).map(|p| PvrSeen {
        taken: false,
        node: None,
        ..p
    })
}

fn canceled_pvr(phase: PodVolumePhase) -> Option<PvrSeen> {
    pvr(phase).map(|p| PvrSeen {
        cancel_requested: true,
        ..p
    })
}

fn seen(stand_in: StandInSeen, pvr: Option<PvrSeen>) -> VolumeSeen {
    VolumeSeen {
        stand_in,
        pvr,
        ..Default::default()
    }
}

fn with_users(mut s: VolumeSeen, users: &[&str], restarted: Option<&str>) -> VolumeSeen {
    s.foreign_pods = users.iter().map(|u| u.to_string()).collect();
    s.restarted = restarted.map(String::from);
    s
}

fn with_consumers(mut s: VolumeSeen, consumers: ConsumersSeen) -> VolumeSeen {
    s.consumers = consumers;
    s
}

fn claim_deleted(mut s: VolumeSeen) -> VolumeSeen {
    s.claim = ClaimSeen::Deleted;
    s
}

/// A path restore's volume.
fn paths(v: VolumeStatus) -> VolumeStatus {
    VolumeStatus {
        paths: Some(crate::api::PathRestore {
            include: vec!["db".into()],
            ..Default::default()
        }),
        scratch_pvc: Some("refill-scratch-data-1".into()),
        ..v
    }
}

fn copier(ended: Option<Result<CopySummary, String>>, terminating: bool) -> CopierSeen {
    CopierSeen::Present {
        name: "refill-copy-data-1".into(),
        terminating,
        ended,
        waiting: None,
        puts_back: false,
        rejected: false,
    }
}

/// The copier that puts a direct restore's set-aside files back.
fn putting_back(ended: Option<Result<CopySummary, String>>) -> CopierSeen {
    CopierSeen::Present {
        name: "refill-copy-data-1".into(),
        terminating: false,
        ended,
        waiting: None,
        puts_back: true,
        rejected: false,
    }
}

fn copied() -> Option<Result<CopySummary, String>> {
    Some(Ok(CopySummary {
        files_written: 2,
        ..Default::default()
    }))
}

fn with_copier(mut s: VolumeSeen, copier: CopierSeen) -> VolumeSeen {
    s.copier = copier;
    s
}

fn with_scratch(mut s: VolumeSeen) -> VolumeSeen {
    s.scratch = true;
    s
}

// What a step must be; messages are checked by a fragment.
#[derive(Debug)]
enum Want {
    /// The copier's summary recorded, with this effect.
    Copied(Option<Effect>),
    /// The stand-in's set-aside recorded, with this effect.
    Cleared(Option<Effect>),
    /// The stand-in's tidy recorded, with this effect: the volume completes next.
    Tidied(Option<Effect>),
    Stay(Option<Effect>, Option<&'static str>),
    StayWarning(&'static str),
    /// Stays, doing this, with a warning holding the words.
    StayDoingWarning(Effect, &'static str),
    Advance(Option<Effect>, VolumePhase),
    /// On to RemovingStandIn, with this effect and message.
    DataIn(Option<Effect>, &'static str),
    Completed,
    /// Completed, with this effect (what is left of a helper goes).
    CompletedDoing(Effect),
    Abort(VolumePhase, &'static str),
    End(VolumePhase, &'static str),
    /// Ends, doing this (what is left of a helper goes).
    EndDoing(Effect, VolumePhase, &'static str),
    Finish(bool),
}

fn check(name: &str, step: &Step, want: &Want) {
    let ok = match (want, &step.change) {
        (Want::Stay(effect, fragment), Change::Stay { message, warning }) => {
            step.effect == *effect
                && warning.is_none()
                && match fragment {
                    Some(f) => message.as_deref().is_some_and(|m| m.contains(f)),
                    None => true,
                }
        }
        (Want::StayWarning(fragment), Change::Stay { warning, .. }) => {
            step.effect.is_none() && warning.as_deref().is_some_and(|w| w.contains(fragment))
        }
        (Want::StayDoingWarning(effect, fragment), Change::Stay { warning, .. }) => {
            step.effect == Some(*effect) && warning.as_deref().is_some_and(|w| w.contains(fragment))
        }
        (Want::Advance(effect, phase), Change::Advance(p)) => step.effect == *effect && p == phase,
        (Want::DataIn(effect, fragment), Change::DataIn { message }) => {
            step.effect == *effect && message.as_deref().is_some_and(|m| m.contains(fragment))
        }
        (Want::Completed, Change::Completed) => step.effect.is_none(),
        (Want::Cleared(effect), Change::Cleared(summary)) => {
            step.effect == *effect && summary.deleted == 3
        }
        (Want::Tidied(effect), Change::Tidied(summary)) => {
            step.effect == *effect && summary.deleted == 3
        }
        (Want::CompletedDoing(effect), Change::Completed) => step.effect == Some(*effect),
        (Want::Copied(effect), Change::Copied(summary)) => {
            // The copier's summary as it reported it: a copy's, or a clearing's.
            step.effect == *effect && (summary.files_written == 2 || summary.deleted == 3)
        }
        (
            Want::Abort(outcome, fragment),
            Change::Abort {
                outcome: o,
                message,
            },
        ) => step.effect.is_none() && o == outcome && message.contains(fragment),
        (
            Want::End(outcome, fragment),
            Change::End {
                outcome: o,
                message,
            },
        ) => step.effect.is_none() && o == outcome && message.contains(fragment),
        (
            Want::EndDoing(effect, outcome, fragment),
            Change::End {
                outcome: o,
                message,
            },
        ) => step.effect == Some(*effect) && o == outcome && message.contains(fragment),
        (Want::Finish(partly), Change::Finish { partly_written }) => {
            step.effect.is_none() && partly == partly_written
        }
        _ => false,
    };
    assert!(ok, "{name}: want {want:?}, got {step:?}");
}

#[test]
fn every_transition() {
    use PodVolumePhase as P;
    use VolumePhase::*;
    let now = at(NOW);
    let rows: Vec<(&str, VolumeStatus, VolumeSeen, Rules, Want)> = vec![
        // Pending
        (
            "pending waits for a slot",
            volume(Pending),
            VolumeSeen::default(),
            rules(),
            Want::Stay(None, None),
        ),
        (
            "pending canceled ends at once",
            volume(Pending),
            VolumeSeen::default(),
            canceled(),
            Want::End(Canceled, "canceled"),
        ),
        // Quiescing
        (
            "quiescing while consumers stop",
            volume(Quiescing),
            with_consumers(VolumeSeen::default(), ConsumersSeen::Stopping),
            rules(),
            Want::Stay(None, Some("stopping the consumers")),
        ),
        (
            "quiescing refused: consumer held by another restore",
            volume(Quiescing),
            with_consumers(
                VolumeSeen::default(),
                ConsumersSeen::HeldBy(
                    "Deployment shop/web is stopped by DataRestore velero/first".into(),
                ),
            ),
            rules(),
            Want::End(Failed, "velero/first"),
        ),
        (
            "quiescing waits for pods to go",
            volume(Quiescing),
            with_users(VolumeSeen::default(), &["web-1"], None),
            rules(),
            Want::Stay(None, Some("release the volume: web-1")),
        ),
        (
            "quiescing notices a rescale",
            volume(Quiescing),
            with_users(
                VolumeSeen::default(),
                &["web-2"],
                Some("Deployment shop/web was scaled to 2 by argocd"),
            ),
            rules(),
            Want::End(Failed, "scaled to 2 by argocd"),
        ),
        (
            "quiescing under Refuse fails a volume in use",
            volume(Quiescing),
            with_users(VolumeSeen::default(), &["web-1"], None),
            refuse(),
            Want::End(Failed, "spec.consumers is Refuse"),
        ),
        (
            "quiescing online starts beside running pods",
            volume(Quiescing),
            with_users(VolumeSeen::default(), &["web-1"], None),
            online(),
            Want::Advance(Some(Effect::CreateStandIn), StartingStandIn),
        ),
        (
            "quiescing online still waits for another restore's stand-in",
            volume(Quiescing),
            with_users(seen(others(true), None), &["web-1"], None),
            online(),
            Want::Stay(None, Some("DataRestore velero/first to go")),
        ),
        (
            "quiescing done creates the stand-in",
            volume(Quiescing),
            VolumeSeen::default(),
            rules(),
            Want::Advance(Some(Effect::CreateStandIn), StartingStandIn),
        ),
        (
            "quiescing finds its stand-in (restart)",
            volume(Quiescing),
            seen(ours(), None),
            rules(),
            Want::Advance(None, StartingStandIn),
        ),
        (
            "quiescing waits for its old stand-in",
            volume(Quiescing),
            seen(terminating(), None),
            rules(),
            Want::Stay(None, Some("old stand-in")),
        ),
        (
            "quiescing waits for another restore's stand-in to go",
            volume(Quiescing),
            seen(others(true), None),
            rules(),
            Want::Stay(None, Some("DataRestore velero/first to go")),
        ),
        (
            "quiescing refused: claim restored by another",
            volume(Quiescing),
            seen(others(false), None),
            rules(),
            Want::End(Failed, "being restored by DataRestore velero/first"),
        ),
        (
            "quiescing: claim deleted",
            volume(Quiescing),
            claim_deleted(VolumeSeen::default()),
            rules(),
            Want::End(Failed, "was deleted"),
        ),
        (
            "quiescing canceled with nothing started",
            volume(Quiescing),
            VolumeSeen::default(),
            canceled(),
            Want::End(Canceled, "canceled"),
        ),
        (
            "quiescing canceled after a stand-in was made (restart)",
            volume(Quiescing),
            seen(ours(), pvr(P::New)),
            canceled(),
            Want::Abort(Canceled, "canceled"),
        ),
        (
            "quiescing too long",
            old(Quiescing),
            with_users(VolumeSeen::default(), &["web-1"], None),
            rules(),
            Want::End(Failed, "did not finish within 1h (spec.volumeTimeout)"),
        ),
        // StartingStandIn
        (
            "starting creates a missing PodVolumeRestore",
            volume(StartingStandIn),
            seen(ours(), None),
            rules(),
            Want::Stay(Some(Effect::CreatePodVolumeRestore), None),
        ),
        (
            "starting waits for restore-wait",
            volume(StartingStandIn),
            seen(ours(), pvr(P::New)),
            rules(),
            Want::Stay(None, Some("waiting for restore-wait")),
        ),
        (
            "starting says why the pod waits",
            volume(StartingStandIn),
            seen(waiting_for("0/3 nodes are available"), pvr(P::New)),
            rules(),
            Want::Stay(None, Some("0/3 nodes are available")),
        ),
        (
            "starting: restore-wait runs",
            volume(StartingStandIn),
            seen(running_since(NOW - 1), pvr(P::New)),
            rules(),
            Want::Advance(None, Restoring),
        ),
        (
            "starting: the agent took it already (restart)",
            volume(StartingStandIn),
            seen(ours(), pvr(P::Completed)),
            rules(),
            Want::Advance(None, Restoring),
        ),
        (
            "starting: stand-in deleted",
            volume(StartingStandIn),
            seen(StandInSeen::Absent, pvr(P::New)),
            rules(),
            Want::Abort(Failed, "disappeared"),
        ),
        (
            "starting: stand-in being deleted",
            volume(StartingStandIn),
            seen(terminating(), pvr(P::New)),
            rules(),
            Want::Abort(
                Failed,
                "was deleted or evicted (a drain) during the restore",
            ),
        ),
        (
            "starting: stand-in failed",
            volume(StartingStandIn),
            seen(broken(), pvr(P::New)),
            rules(),
            Want::Abort(Failed, "container idle exited"),
        ),
        (
            "starting: a consumer came back",
            volume(StartingStandIn),
            with_users(seen(ours(), pvr(P::New)), &["web-3"], None),
            rules(),
            Want::Abort(Failed, "pod web-3 mounts shop/data"),
        ),
        (
            "starting online: running pods are expected",
            volume(StartingStandIn),
            with_users(seen(running_since(NOW - 1), pvr(P::New)), &["web-1"], None),
            online(),
            Want::Advance(None, Restoring),
        ),
        (
            "starting online: the stand-in still has to hold",
            volume(StartingStandIn),
            with_users(seen(terminating(), pvr(P::New)), &["web-1"], None),
            online(),
            Want::Abort(
                Failed,
                "was deleted or evicted (a drain) during the restore",
            ),
        ),
        (
            "starting: claim deleted",
            volume(StartingStandIn),
            claim_deleted(seen(ours(), pvr(P::New))),
            rules(),
            Want::Abort(Failed, "was deleted"),
        ),
        (
            "starting canceled",
            volume(StartingStandIn),
            seen(ours(), pvr(P::New)),
            canceled(),
            Want::Abort(Canceled, "canceled"),
        ),
        (
            "starting too long",
            old(StartingStandIn),
            seen(waiting_for("Unschedulable"), pvr(P::New)),
            rules(),
            Want::Abort(Failed, "did not finish within 1h"),
        ),
        // Restoring
        (
            "restoring follows progress",
            volume(Restoring),
            seen(running_since(NOW - 5), pvr(P::InProgress)),
            rules(),
            Want::Stay(None, None),
        ),
        (
            "restoring: accepted by Velero 1.18",
            volume(Restoring),
            seen(running_since(NOW - 5), pvr(P::Accepted)),
            rules(),
            Want::Stay(None, None),
        ),
        (
            "restoring: prepared by Velero 1.18",
            volume(Restoring),
            seen(running_since(NOW - 5), pvr(P::Prepared)),
            rules(),
            Want::Stay(None, None),
        ),
        (
            "restoring: waits for a node agent",
            volume(Restoring),
            seen(running_since(NOW - 5), pvr(P::New)),
            rules(),
            Want::Stay(None, Some("waiting for a node agent")),
        ),
        (
            "restoring: no node agent for a minute warns",
            volume(Restoring),
            seen(running_since(NOW - 61), pvr(P::New)),
            rules(),
            Want::StayWarning("node agent running on node node-a"),
        ),
        (
            "restoring: done, restore-wait still cleaning up",
            volume(Restoring),
            seen(ours(), pvr(P::Completed)),
            rules(),
            Want::DataIn(None, "waiting for restore-wait"),
        ),
        (
            "restoring: done, restore-wait finished: the stand-in goes at once",
            volume(Restoring),
            seen(cleaned_up(), pvr(P::Completed)),
            rules(),
            Want::DataIn(Some(Effect::DeleteStandIn), "removing the stand-in"),
        ),
        (
            "restoring: completed (the stand-in went already)",
            volume(Restoring),
            seen(StandInSeen::Absent, pvr(P::Completed)),
            rules(),
            Want::Completed,
        ),
        // RemovingStandIn: the data is in; consumers wait for the stand-in to go.
        (
            "removing: restore-wait still cleaning up",
            volume(RemovingStandIn),
            seen(ours(), pvr(P::Completed)),
            rules(),
            Want::Stay(None, Some("waiting for restore-wait")),
        ),
        (
            "removing: the stand-in goes",
            volume(RemovingStandIn),
            seen(cleaned_up(), pvr(P::Completed)),
            rules(),
            Want::Stay(Some(Effect::DeleteStandIn), Some("removing the stand-in")),
        ),
        (
            "removing: waiting for the stand-in to go",
            volume(RemovingStandIn),
            seen(terminating(), pvr(P::Completed)),
            rules(),
            Want::Stay(None, Some("restored")),
        ),
        (
            "removing: completed once the stand-in is gone",
            volume(RemovingStandIn),
            seen(StandInSeen::Absent, pvr(P::Completed)),
            rules(),
            Want::Completed,
        ),
        (
            "removing: a cancel removes the stand-in through Aborting",
            volume(RemovingStandIn),
            seen(ours(), pvr(P::Completed)),
            canceled(),
            Want::Abort(Canceled, "canceled"),
        ),
        (
            "removing too long: restore-wait never finished",
            old(RemovingStandIn),
            seen(ours(), pvr(P::Completed)),
            rules(),
            Want::Abort(Failed, "did not finish within 1h"),
        ),
        (
            "restoring: done even if a consumer came back meanwhile",
            volume(Restoring),
            with_users(
                seen(StandInSeen::Absent, pvr(P::Completed)),
                &["web-9"],
                None,
            ),
            rules(),
            Want::Completed,
        ),
        (
            "restoring: failed by the agent",
            volume(Restoring),
            seen(ours(), pvr(P::Failed)),
            rules(),
            Want::Abort(Failed, "PodVolumeRestore fix-1 failed: agent says"),
        ),
        (
            "restoring: canceled by someone (Velero 1.18)",
            volume(Restoring),
            seen(ours(), pvr(P::Canceled)),
            rules(),
            Want::Abort(Failed, "canceled, not by refill"),
        ),
        (
            "restoring: PodVolumeRestore deleted",
            volume(Restoring),
            seen(ours(), None),
            rules(),
            Want::Abort(Failed, "deleted by someone"),
        ),
        (
            "restoring: stand-in deleted",
            volume(Restoring),
            seen(StandInSeen::Absent, pvr(P::InProgress)),
            rules(),
            Want::Abort(Failed, "disappeared"),
        ),
        (
            "restoring: consumer rescaled",
            volume(Restoring),
            with_users(
                seen(ours(), pvr(P::InProgress)),
                &["web-4"],
                Some("Deployment shop/web was scaled to 1 by kubectl"),
            ),
            rules(),
            Want::Abort(Failed, "scaled to 1 by kubectl"),
        ),
        (
            "restoring canceled",
            volume(Restoring),
            seen(ours(), pvr(P::InProgress)),
            canceled(),
            Want::Abort(Canceled, "canceled"),
        ),
        (
            "restoring too long",
            old(Restoring),
            seen(ours(), pvr(P::InProgress)),
            rules(),
            Want::Abort(Failed, "did not finish within 1h"),
        ),
        // Copying: a path restore's copier writes the PVC from the scratch claim (its
        // consumers stopped after the fill: see tests/staged.rs).
        (
            "a path restore's data in: its consumers stop once the stand-in is gone",
            paths(volume(Restoring)),
            seen(StandInSeen::Absent, pvr(P::Completed)),
            rules(),
            Want::Advance(None, Quiescing),
        ),
        (
            "a path restore's data in: the stand-in goes first",
            paths(volume(Restoring)),
            seen(cleaned_up(), pvr(P::Completed)),
            rules(),
            Want::DataIn(Some(Effect::DeleteStandIn), "removing the stand-in"),
        ),
        (
            "a path restore's stand-in gone: its consumers stop",
            paths(volume(RemovingStandIn)),
            seen(StandInSeen::Absent, pvr(P::Completed)),
            rules(),
            Want::Advance(None, Quiescing),
        ),
        (
            "copying starts the copier",
            paths(volume(Copying)),
            seen(StandInSeen::Absent, pvr(P::Completed)),
            rules(),
            Want::Stay(Some(Effect::CreateCopier), Some("copying the chosen paths")),
        ),
        (
            "copying waits for the copier",
            paths(volume(Copying)),
            with_copier(
                seen(StandInSeen::Absent, pvr(P::Completed)),
                copier(None, false),
            ),
            rules(),
            Want::Stay(None, Some("(pod refill-copy-data-1)")),
        ),
        (
            "copying says why the copier does not run",
            paths(volume(Copying)),
            with_copier(
                seen(StandInSeen::Absent, pvr(P::Completed)),
                CopierSeen::Present {
                    name: "refill-copy-data-1".into(),
                    terminating: false,
                    ended: None,
                    waiting: Some("ErrImagePull".into()),
                    puts_back: false,
                    rejected: false,
                },
            ),
            rules(),
            Want::Stay(None, Some("not running yet: ErrImagePull")),
        ),
        (
            "a copier done: its summary is kept and its pod removed",
            paths(volume(Copying)),
            with_copier(
                seen(StandInSeen::Absent, pvr(P::Completed)),
                copier(copied(), false),
            ),
            rules(),
            Want::Copied(Some(Effect::DeleteCopier)),
        ),
        (
            "a copier done and going: nothing more to do to it",
            paths(volume(Copying)),
            with_copier(
                seen(StandInSeen::Absent, pvr(P::Completed)),
                copier(copied(), true),
            ),
            rules(),
            Want::Copied(None),
        ),
        (
            "the copier gone after its summary: completed",
            VolumeStatus {
                copied: Some(CopySummary::default()),
                ..paths(volume(Copying))
            },
            seen(StandInSeen::Absent, pvr(P::Completed)),
            rules(),
            Want::Completed,
        ),
        (
            "a copier that failed aborts",
            paths(volume(Copying)),
            with_copier(
                seen(StandInSeen::Absent, pvr(P::Completed)),
                copier(Some(Err("chown /target/x: denied".into())), false),
            ),
            rules(),
            Want::Abort(Failed, "copier pod refill-copy-data-1 failed: chown"),
        ),
        (
            "a consumer back while copying aborts",
            paths(volume(Copying)),
            with_users(
                with_copier(
                    seen(StandInSeen::Absent, pvr(P::Completed)),
                    copier(None, false),
                ),
                &["web-1"],
                None,
            ),
            rules(),
            Want::Abort(Failed, "refill stopped copying"),
        ),
        (
            "copying online: running pods are expected",
            paths(volume(Copying)),
            with_users(
                with_copier(
                    seen(StandInSeen::Absent, pvr(P::Completed)),
                    copier(None, false),
                ),
                &["web-1"],
                None,
            ),
            online(),
            Want::Stay(None, Some("(pod refill-copy-data-1)")),
        ),
        (
            "copying canceled aborts",
            paths(volume(Copying)),
            with_copier(
                seen(StandInSeen::Absent, pvr(P::Completed)),
                copier(None, false),
            ),
            canceled(),
            Want::Abort(Canceled, "canceled"),
        ),
        (
            "copying: the claim's copier is another restore's",
            paths(volume(Copying)),
            with_copier(
                seen(StandInSeen::Absent, pvr(P::Completed)),
                CopierSeen::Other {
                    name: "refill-copy-data-1".into(),
                    restore: "velero/first".into(),
                },
            ),
            rules(),
            Want::Abort(Failed, "DataRestore velero/first"),
        ),
        (
            "copying: the claim deleted",
            paths(volume(Copying)),
            claim_deleted(seen(StandInSeen::Absent, pvr(P::Completed))),
            rules(),
            Want::Abort(Failed, "was deleted"),
        ),
        // Aborting: cancel, wait for the agent, remove the stand-in, end.
        (
            "aborting a copy removes the copier first",
            paths(aborting(Failed)),
            with_copier(
                seen(StandInSeen::Absent, pvr(P::Completed)),
                copier(None, false),
            ),
            rules(),
            Want::Stay(Some(Effect::DeleteCopier), None),
        ),
        (
            "aborting a copy waits for the copier to go",
            paths(aborting(Failed)),
            with_copier(
                seen(StandInSeen::Absent, pvr(P::Completed)),
                copier(None, true),
            ),
            rules(),
            Want::Stay(None, None),
        ),
        (
            "aborting a copy ends partly written once the copier is gone",
            VolumeStatus {
                partly_written: true,
                ..paths(aborting(Failed))
            },
            seen(StandInSeen::Absent, pvr(P::Completed)),
            rules(),
            Want::Finish(true),
        ),
        (
            "a path restore stopped while its node agent wrote: the PVC was not written",
            paths(aborting(Canceled)),
            seen(StandInSeen::Absent, canceled_pvr(P::Canceled)),
            rules(),
            Want::Finish(false),
        ),
        (
            "aborting cancels the PodVolumeRestore first",
            aborting(Canceled),
            seen(ours(), pvr(P::InProgress)),
            rules(),
            Want::Stay(Some(Effect::CancelPodVolumeRestore), Some("why")),
        ),
        (
            "aborting waits for the agent to stop (1.18)",
            aborting(Canceled),
            seen(ours(), canceled_pvr(P::Canceling)),
            rules(),
            Want::Stay(None, Some("why")),
        ),
        (
            "aborting waits for the agent to stop (1.14)",
            aborting(Failed),
            seen(ours(), canceled_pvr(P::InProgress)),
            rules(),
            Want::Stay(None, Some("why")),
        ),
        (
            "aborting warns when the cancel is ignored",
            VolumeStatus {
                abort_time: Some(Time(at(NOW - 301))),
                ..aborting(Failed)
            },
            seen(ours(), canceled_pvr(P::InProgress)),
            rules(),
            Want::StayWarning("has not stopped PodVolumeRestore fix-1"),
        ),
        (
            "aborting ignores the volume's own timeout",
            VolumeStatus {
                start_time: Some(Time(at(NOW - 7200))),
                ..aborting(Failed)
            },
            seen(ours(), canceled_pvr(P::InProgress)),
            rules(),
            Want::Stay(None, Some("why")),
        ),
        (
            "aborting: the agent ended it, the stand-in goes",
            aborting(Canceled),
            seen(ours(), canceled_pvr(P::Canceled)),
            rules(),
            Want::Stay(Some(Effect::DeleteStandIn), Some("why")),
        ),
        (
            "aborting: never taken up, the stand-in goes",
            aborting(Failed),
            seen(ours(), canceled_pvr(P::New)),
            rules(),
            Want::Stay(Some(Effect::DeleteStandIn), Some("why")),
        ),
        (
            "aborting waits for the stand-in to go",
            aborting(Failed),
            seen(terminating(), canceled_pvr(P::Failed)),
            rules(),
            Want::Stay(None, Some("why")),
        ),
        (
            "aborting ends, partly written",
            aborting(Canceled),
            seen(StandInSeen::Absent, canceled_pvr(P::Canceled)),
            rules(),
            Want::Finish(true),
        ),
        (
            "aborting ends, nothing written",
            aborting(Failed),
            seen(StandInSeen::Absent, canceled_pvr(P::New)),
            rules(),
            Want::Finish(false),
        ),
        (
            "canceled before any node agent took it (its node was lost): nothing written",
            aborting(Failed),
            seen(StandInSeen::Absent, untaken_pvr(P::Canceled)),
            rules(),
            Want::Finish(false),
        ),
        (
            "failed by a node agent's checks before it took it: nothing written",
            aborting(Failed),
            seen(StandInSeen::Absent, untaken_pvr(P::Failed)),
            rules(),
            Want::Finish(false),
        ),
        (
            "aborting ends without a PodVolumeRestore",
            aborting(Failed),
            seen(StandInSeen::Absent, None),
            rules(),
            Want::Finish(false),
        ),
        (
            "aborting keeps going when canceled again",
            aborting(Failed),
            seen(ours(), canceled_pvr(P::InProgress)),
            canceled(),
            Want::Stay(None, Some("why")),
        ),
        // Ended
        (
            "an ended path restore deletes its scratch claim",
            paths(volume(Completed)),
            with_scratch(seen(StandInSeen::Absent, None)),
            rules(),
            Want::Stay(Some(Effect::DeleteScratchClaim), None),
        ),
        (
            "an ended path restore removes its copier before the scratch claim",
            paths(volume(Failed)),
            with_copier(
                with_scratch(seen(StandInSeen::Absent, None)),
                copier(None, false),
            ),
            rules(),
            Want::Stay(Some(Effect::DeleteCopier), None),
        ),
        (
            "completed removes its stand-in",
            volume(Completed),
            seen(ours(), pvr(P::Completed)),
            rules(),
            Want::Stay(Some(Effect::DeleteStandIn), None),
        ),
        (
            "completed and clean stays",
            volume(Completed),
            seen(StandInSeen::Absent, pvr(P::Completed)),
            rules(),
            Want::Stay(None, None),
        ),
        (
            "failed leaves another restore's stand-in alone",
            volume(Failed),
            seen(others(false), None),
            canceled(),
            Want::Stay(None, None),
        ),
    ];
    for (name, volume, seen, rules, want) in &rows {
        check(name, &decide(volume, seen, rules, now), want);
    }
}

#[test]
fn a_started_copy_is_never_ended_before_the_agent_stops() {
    // Whatever else is seen, an Aborting volume whose PodVolumeRestore a node agent took
    // up and has not ended does not finish, so its consumers cannot come back.
    use PodVolumePhase as P;
    for phase in [P::Accepted, P::Prepared, P::InProgress, P::Canceling] {
        for stand_in in [ours(), terminating(), StandInSeen::Absent] {
            for rules in [rules(), canceled()] {
                let step = decide(
                    &aborting(VolumePhase::Failed),
                    &seen(stand_in.clone(), canceled_pvr(phase)),
                    &rules,
                    at(NOW),
                );
                assert!(
                    matches!(step.change, Change::Stay { .. }) && step.effect.is_none(),
                    "{phase:?} {stand_in:?}: {step:?}"
                );
            }
        }
    }
}

/// A `target: NewClaim` volume.
fn new_claim(v: VolumeStatus) -> VolumeStatus {
    VolumeStatus {
        target_pvc: Some("data-r1-0123456789".into()),
        ..v
    }
}

fn switch() -> Rules {
    Rules {
        switch: true,
        ..rules()
    }
}

#[test]
fn every_switching_transition() {
    use PodVolumePhase as P;
    use VolumePhase::*;
    let stopped = || VolumeSeen::default();
    let rows: Vec<(&str, VolumeStatus, VolumeSeen, Rules, Want)> = vec![
        (
            "a filled new claim completes when nothing is switched",
            new_claim(volume(Restoring)),
            seen(StandInSeen::Absent, pvr(P::Completed)),
            rules(),
            Want::Completed,
        ),
        (
            "a filled new claim goes on to the switch",
            new_claim(volume(Restoring)),
            seen(StandInSeen::Absent, pvr(P::Completed)),
            switch(),
            Want::Advance(None, Switching),
        ),
        (
            "the switch waits for its stand-in to go first",
            new_claim(volume(Restoring)),
            seen(cleaned_up(), pvr(P::Completed)),
            switch(),
            Want::DataIn(Some(Effect::DeleteStandIn), "removing the stand-in"),
        ),
        (
            "the switch follows the stand-in's removal",
            new_claim(volume(RemovingStandIn)),
            seen(StandInSeen::Absent, pvr(P::Completed)),
            switch(),
            Want::Advance(None, Switching),
        ),
        (
            "switching waits for the workloads to stop",
            new_claim(volume(Switching)),
            with_consumers(stopped(), ConsumersSeen::Stopping),
            switch(),
            Want::Stay(None, Some("stopping the workloads to switch")),
        ),
        (
            "switching waits for their pods to release the PVC",
            new_claim(volume(Switching)),
            with_users(stopped(), &["web-5d8f-x2"], None),
            switch(),
            Want::Stay(None, Some("to release PVC shop/data: web-5d8f-x2")),
        ),
        (
            "a workload started again during the switch fails it",
            new_claim(volume(Switching)),
            with_users(
                stopped(),
                &["web-5d8f-x2"],
                Some("Deployment shop/web was scaled to 2"),
            ),
            switch(),
            Want::End(Failed, "was scaled to 2"),
        ),
        (
            "a workload another restore holds fails the switch",
            new_claim(volume(Switching)),
            with_consumers(stopped(), ConsumersSeen::HeldBy("held by velero/r0".into())),
            switch(),
            Want::End(Failed, "no workload was switched"),
        ),
        (
            "stopped and released: completed, the workloads come back switched",
            new_claim(volume(Switching)),
            stopped(),
            switch(),
            Want::Completed,
        ),
        (
            "canceled while switching ends at once, nothing switched",
            new_claim(volume(Switching)),
            with_consumers(stopped(), ConsumersSeen::Stopping),
            Rules {
                switch: true,
                ..canceled()
            },
            Want::End(Canceled, "PVC shop/data-r1-0123456789 holds the backup"),
        ),
        (
            "a switch out of time fails",
            new_claim(old(Switching)),
            with_users(stopped(), &["web-5d8f-x2"], None),
            switch(),
            Want::End(Failed, "spec.volumeTimeout"),
        ),
    ];
    for (name, volume, seen, rules, want) in &rows {
        check(name, &decide(volume, seen, rules, at(NOW)), want);
    }
}

mod in_pod;
mod node;
mod staged;

#[test]
fn a_pod_under_refill_s_names_that_refill_did_not_record_goes_before_anything_else() {
    use VolumePhase::*;
    let unrecorded = |terminating| StandInSeen::Unrecorded {
        name: "refill-data-1".into(),
        terminating,
    };
    let copier_unrecorded = CopierSeen::Unrecorded {
        name: "refill-copy-data-1".into(),
        terminating: false,
    };
    let rows: Vec<(&str, VolumeStatus, VolumeSeen, Rules, Want)> = vec![
        (
            "put there before the stand-in: deleted, not adopted",
            volume(Quiescing),
            seen(unrecorded(false), None),
            rules(),
            Want::Stay(Some(Effect::DeleteStandIn), Some("no record of making it")),
        ),
        (
            "while it goes, nothing else happens",
            staged(volume(StartingStandIn)),
            seen(unrecorded(true), None),
            rules(),
            Want::Stay(None, Some("no record of making it")),
        ),
        (
            "put in place of refill's stand-in during the restore",
            volume(Restoring),
            seen(unrecorded(false), pvr(PodVolumePhase::InProgress)),
            rules(),
            Want::Stay(Some(Effect::DeleteStandIn), Some("no record of making it")),
        ),
        (
            "even when the restore is being canceled",
            volume(Quiescing),
            seen(unrecorded(false), None),
            canceled(),
            Want::Stay(Some(Effect::DeleteStandIn), Some("no record of making it")),
        ),
        (
            "a copier refill did not record",
            exact(volume(Clearing)),
            with_copier(seen(StandInSeen::Absent, None), copier_unrecorded),
            rules(),
            Want::Stay(Some(Effect::DeleteCopier), Some("no record of making it")),
        ),
        (
            "once the volume ended it is not refill's to remove",
            volume(Completed),
            seen(unrecorded(false), None),
            rules(),
            Want::Stay(None, None),
        ),
    ];
    let now = at(NOW);
    for (name, volume, seen, rules, want) in &rows {
        check(name, &decide(volume, seen, rules, now), want);
    }
}

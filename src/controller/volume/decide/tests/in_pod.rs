//! Rows for a whole-volume restore that deletes extra files carried out by one pod:
//! the stand-in sets the files aside, waits in `restore-wait`, then tidies. Each row's
//! stand-in is what a pass, or a refill restarted midway, reads from the pod's status.

use super::*;

fn summary() -> Option<Result<CopySummary, String>> {
    Some(Ok(CopySummary {
        deleted: 3,
        ..Default::default()
    }))
}

fn going(stand_in: StandInSeen) -> StandInSeen {
    match stand_in {
        StandInSeen::Ours {
            name,
            failed,
            restore_wait_since,
            restore_wait_done,
            waiting,
            in_pod,
            ..
        } => StandInSeen::Ours {
            name,
            terminating: true,
            failed,
            restore_wait_since,
            restore_wait_done,
            waiting,
            in_pod,
        },
        other => other,
    }
}

fn made(v: VolumeStatus) -> VolumeStatus {
    VolumeStatus {
        stand_in_pod: Some("refill-data-1".into()),
        stand_in_uid: Some("pod-uid-1".into()),
        ..v
    }
}

fn tidied(v: VolumeStatus) -> VolumeStatus {
    VolumeStatus {
        tidied: Some(3),
        ..v
    }
}

#[test]
fn a_set_aside_that_runs_as_it_should_changes_nothing_but_a_waiting_pod_is_told() {
    let volume = made(exact(volume(VolumePhase::Clearing)));
    let running = seen(one_pod(None, false, None), None);
    let quiet = Change::Stay {
        message: None,
        warning: None,
    };
    assert_eq!(decide(&volume, &running, &rules(), at(NOW)).change, quiet);
    let mut waiting = running;
    if let StandInSeen::Ours { waiting: why, .. } = &mut waiting.stand_in {
        *why = Some("ContainerCreating".into());
    }
    check(
        "the stand-in waits",
        &decide(&volume, &waiting, &rules(), at(NOW)),
        &Want::Stay(None, Some("is not running yet: ContainerCreating")),
    );
}

#[test]
fn one_pod_sets_aside_waits_for_the_node_agent_and_tidies() {
    use PodVolumePhase as P;
    use VolumePhase::*;
    let denied = || Some(Err("rename x: Permission denied".to_string()));
    let rows: Vec<(&str, VolumeStatus, VolumeSeen, Rules, Want)> = vec![
        (
            "the set-aside runs in the stand-in",
            made(exact(volume(Clearing))),
            seen(one_pod(None, false, None), None),
            rules(),
            Want::Stay(None, None),
        ),
        (
            "set aside: recorded, and only now the PodVolumeRestore",
            made(exact(volume(Clearing))),
            seen(one_pod(summary(), false, None), None),
            rules(),
            Want::Cleared(Some(Effect::CreatePodVolumeRestore)),
        ),
        (
            "restarted after the PodVolumeRestore was made, before the record: not made again",
            made(exact(volume(Clearing))),
            seen(one_pod(summary(), false, None), pvr(P::New)),
            rules(),
            Want::Cleared(None),
        ),
        (
            "the set-aside failed: the files it moved are put back",
            made(exact(volume(Clearing))),
            seen(one_pod(denied(), false, None), None),
            rules(),
            Want::Abort(Failed, "Permission denied"),
        ),
        (
            "the stand-in went while setting aside",
            made(exact(volume(Clearing))),
            seen(StandInSeen::Absent, None),
            rules(),
            Want::Abort(Failed, "disappeared"),
        ),
        (
            "the stand-in evicted while setting aside",
            made(exact(volume(Clearing))),
            seen(going(one_pod(None, false, None)), None),
            rules(),
            Want::Abort(Failed, "deleted or evicted"),
        ),
        (
            "a consumer came back while setting aside",
            made(exact(volume(Clearing))),
            with_users(seen(one_pod(None, false, None), None), &["web-1"], None),
            rules(),
            Want::Abort(Failed, "web-1"),
        ),
        (
            "canceled while setting aside",
            made(exact(volume(Clearing))),
            seen(one_pod(None, false, None), None),
            canceled(),
            Want::Abort(Canceled, "canceled"),
        ),
        (
            "restarted while the node agent writes: followed",
            cleared(made(exact(volume(StartingStandIn)))),
            seen(one_pod(summary(), false, None), pvr(P::InProgress)),
            rules(),
            Want::Advance(None, Restoring),
        ),
        (
            "the data is in and restore-wait exited: the stand-in tidies, it is kept",
            cleared(made(exact(volume(Restoring)))),
            seen(one_pod(summary(), true, None), pvr(P::Completed)),
            rules(),
            Want::Advance(None, Tidying),
        ),
        (
            "restore-wait still cleaning up",
            cleared(made(exact(volume(RemovingStandIn)))),
            seen(one_pod(summary(), false, None), pvr(P::Completed)),
            rules(),
            Want::Stay(None, Some("waiting for restore-wait")),
        ),
        (
            "canceled once restore-wait exited: nothing is put back, the tidy may run",
            cleared(made(exact(volume(Restoring)))),
            seen(one_pod(summary(), true, None), pvr(P::InProgress)),
            canceled(),
            Want::Advance(None, Tidying),
        ),
        (
            "tidying",
            cleared(made(exact(volume(Tidying)))),
            seen(one_pod(summary(), true, None), pvr(P::Completed)),
            rules(),
            Want::Stay(None, Some("removing the files set aside")),
        ),
        (
            "tidied: recorded, and the pod, all of whose containers exited, deleted",
            cleared(made(exact(volume(Tidying)))),
            seen(one_pod(summary(), true, summary()), pvr(P::Completed)),
            rules(),
            Want::Tidied(Some(Effect::DeleteStandIn)),
        ),
        (
            "tidied and recorded before a restart: completed",
            tidied(cleared(made(exact(volume(Tidying))))),
            seen(
                going(one_pod(summary(), true, summary())),
                pvr(P::Completed),
            ),
            rules(),
            Want::Completed,
        ),
        (
            "tidied and recorded, the stand-in gone and the consumers back (the completing pass's write lost): completed",
            tidied(cleared(made(exact(volume(Tidying))))),
            with_users(
                seen(StandInSeen::Absent, pvr(P::Completed)),
                &["web-1"],
                Some("Deployment web was scaled to 2 by refill-controller"),
            ),
            rules(),
            Want::Completed,
        ),
        (
            "the tidy failed: the backup is in, the old files stay aside",
            cleared(made(exact(volume(Tidying)))),
            seen(one_pod(summary(), true, denied()), pvr(P::Completed)),
            rules(),
            Want::End(Failed, ".refill-aside-"),
        ),
        (
            "canceled while tidying: the stand-in goes, nothing is put back",
            cleared(made(exact(volume(Tidying)))),
            seen(one_pod(summary(), true, None), pvr(P::Completed)),
            canceled(),
            Want::Stay(Some(Effect::DeleteStandIn), Some("canceled")),
        ),
        (
            "canceled while tidying, the stand-in gone: ended, saying where the files are",
            cleared(made(exact(volume(Tidying)))),
            seen(StandInSeen::Absent, pvr(P::Completed)),
            canceled(),
            Want::End(Canceled, ".refill-aside-"),
        ),
        (
            "the stand-in deleted before its tidy ended: a copier tidies",
            cleared(made(exact(volume(Tidying)))),
            seen(StandInSeen::Absent, pvr(P::Completed)),
            rules(),
            Want::Stay(
                Some(Effect::CreateCopier),
                Some("removing the files set aside"),
            ),
        ),
        (
            "a consumer came back while tidying: the stand-in goes",
            cleared(made(exact(volume(Tidying)))),
            with_users(
                seen(one_pod(summary(), true, None), pvr(P::Completed)),
                &["web-1"],
                None,
            ),
            rules(),
            Want::Stay(Some(Effect::DeleteStandIn), Some("web-1")),
        ),
        (
            "aborted before restore-wait exited: the stand-in goes, then the put-back",
            cleared(made(exact(aborting(Failed)))),
            seen(one_pod(summary(), false, None), canceled_pvr(P::Canceled)),
            rules(),
            Want::Stay(Some(Effect::DeleteStandIn), None),
        ),
    ];
    let now = at(NOW);
    for (name, volume, seen, rules, want) in &rows {
        check(name, &decide(volume, seen, rules, now), want);
    }
}

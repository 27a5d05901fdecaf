//! Rows for the ways that keep a restore exact or its downtime short: a direct
//! restore's clearing before the node agent writes, and a staged restore whose scratch
//! claim is filled while the consumers run, which stops them only for the copy.

use super::*;

fn stand_in_made(v: VolumeStatus) -> VolumeStatus {
    VolumeStatus {
        stand_in_pod: Some("refill-data-1".into()),
        ..v
    }
}

fn emptied() -> Option<Result<CopySummary, String>> {
    Some(Ok(CopySummary {
        deleted: 3,
        ..Default::default()
    }))
}

#[test]
fn a_direct_exact_restore_empties_the_volume_between_the_stop_and_the_stand_in() {
    use PodVolumePhase as P;
    use VolumePhase::*;
    let rows: Vec<(&str, VolumeStatus, VolumeSeen, Rules, Want)> = vec![
        (
            "quiesced: the stand-in that sets the files aside first",
            exact(volume(Quiescing)),
            seen(StandInSeen::Absent, None),
            rules(),
            Want::Advance(Some(Effect::CreateStandIn), Clearing),
        ),
        (
            "quiescing still waits for the consumers' pods",
            exact(volume(Quiescing)),
            with_users(seen(StandInSeen::Absent, None), &["web-1"], None),
            rules(),
            Want::Stay(None, Some("waiting for pods to release")),
        ),
        (
            "clearing with no stand-in made yet makes it (never a copier)",
            exact(volume(Clearing)),
            seen(StandInSeen::Absent, None),
            rules(),
            Want::Stay(Some(Effect::CreateStandIn), None),
        ),
        // A copier that a refill before the stand-in set files aside began is followed.
        (
            "clearing waits for the copier",
            exact(volume(Clearing)),
            with_copier(seen(StandInSeen::Absent, None), copier(None, false)),
            rules(),
            Want::Stay(None, Some("refill-copy-data-1")),
        ),
        (
            "cleared: recorded, the copier removed",
            exact(volume(Clearing)),
            with_copier(seen(StandInSeen::Absent, None), copier(emptied(), false)),
            rules(),
            Want::Copied(Some(Effect::DeleteCopier)),
        ),
        (
            "cleared, copier gone: the stand-in and its PodVolumeRestore",
            cleared(exact(volume(Clearing))),
            seen(StandInSeen::Absent, None),
            rules(),
            Want::Advance(Some(Effect::CreateStandIn), StartingStandIn),
        ),
        (
            "cleared, the copier still going",
            cleared(exact(volume(Clearing))),
            with_copier(seen(StandInSeen::Absent, None), copier(emptied(), true)),
            rules(),
            Want::Copied(None),
        ),
        (
            "cleared, stand-in made before a lost status write: followed",
            cleared(exact(volume(Clearing))),
            seen(ours(), None),
            rules(),
            Want::Advance(None, StartingStandIn),
        ),
        (
            "cleared, another restore's stand-in holds the claim",
            cleared(exact(volume(Clearing))),
            seen(others(false), None),
            rules(),
            Want::End(Failed, "being restored by DataRestore velero/first"),
        ),
        (
            "the clearing failed",
            exact(volume(Clearing)),
            with_copier(
                seen(StandInSeen::Absent, None),
                copier(Some(Err("unlinkat x: Permission denied".into())), false),
            ),
            rules(),
            Want::Abort(Failed, "Permission denied"),
        ),
        (
            "a consumer came back while clearing: stop",
            exact(volume(Clearing)),
            with_users(
                with_copier(seen(StandInSeen::Absent, None), copier(None, false)),
                &["web-1"],
                None,
            ),
            rules(),
            Want::Abort(Failed, "web-1"),
        ),
        (
            "canceled while clearing",
            exact(volume(Clearing)),
            with_copier(seen(StandInSeen::Absent, None), copier(None, false)),
            canceled(),
            Want::Abort(Canceled, "canceled"),
        ),
        (
            "aborted after the clearing: the set-aside files are put back",
            cleared(exact(aborting(Failed))),
            seen(StandInSeen::Absent, canceled_pvr(P::New)),
            rules(),
            Want::Stay(Some(Effect::CreateCopier), None),
        ),
        (
            "keeping extra files: no clearing",
            volume(Quiescing),
            seen(StandInSeen::Absent, None),
            rules(),
            Want::Advance(Some(Effect::CreateStandIn), StartingStandIn),
        ),
    ];
    let now = at(NOW);
    for (name, volume, seen, rules, want) in &rows {
        check(name, &decide(volume, seen, rules, now), want);
    }
}

#[test]
fn a_direct_exact_restore_removes_what_it_set_aside_or_puts_it_back() {
    use PodVolumePhase as P;
    use VolumePhase::*;
    let tidied = |v: VolumeStatus| VolumeStatus {
        tidied: Some(3),
        ..v
    };
    let put = |v: VolumeStatus| VolumeStatus {
        put_back: Some(3),
        ..v
    };
    let aborted = || cleared(exact(aborting(Failed)));
    let rows: Vec<(&str, VolumeStatus, VolumeSeen, Rules, Want)> = vec![
        (
            "the data in and the stand-in gone: tidy before the consumers come back",
            cleared(exact(volume(RemovingStandIn))),
            seen(StandInSeen::Absent, pvr(P::Completed)),
            rules(),
            Want::Advance(None, Tidying),
        ),
        (
            "tidying starts the copier",
            cleared(exact(volume(Tidying))),
            seen(StandInSeen::Absent, pvr(P::Completed)),
            rules(),
            Want::Stay(
                Some(Effect::CreateCopier),
                Some("removing the files set aside"),
            ),
        ),
        (
            "tidied: recorded, the copier removed",
            cleared(exact(volume(Tidying))),
            with_copier(
                seen(StandInSeen::Absent, pvr(P::Completed)),
                copier(emptied(), false),
            ),
            rules(),
            Want::Copied(Some(Effect::DeleteCopier)),
        ),
        (
            "tidied and the copier exited: completed while its pod goes",
            tidied(cleared(exact(volume(Tidying)))),
            with_copier(
                seen(StandInSeen::Absent, pvr(P::Completed)),
                copier(emptied(), false),
            ),
            rules(),
            Want::CompletedDoing(Effect::DeleteCopier),
        ),
        (
            "tidied, then the app brought back by a pass whose status was lost: completed",
            tidied(cleared(exact(volume(Tidying)))),
            with_users(
                seen(StandInSeen::Absent, pvr(P::Completed)),
                &["web-1"],
                None,
            ),
            rules(),
            Want::Completed,
        ),
        (
            "not tidied yet and the app runs: the copier stops, nothing is put back",
            cleared(exact(volume(Tidying))),
            with_users(
                with_copier(
                    seen(StandInSeen::Absent, pvr(P::Completed)),
                    copier(None, false),
                ),
                &["web-1"],
                None,
            ),
            rules(),
            Want::Stay(Some(Effect::DeleteCopier), Some("web-1")),
        ),
        (
            "and once it is gone the volume ends saying the backup is in",
            cleared(exact(volume(Tidying))),
            with_users(
                seen(StandInSeen::Absent, pvr(P::Completed)),
                &["web-1"],
                None,
            ),
            rules(),
            Want::End(Failed, "the backup's files are in"),
        ),
        (
            "tidied and the copier gone: completed",
            tidied(cleared(exact(volume(Tidying)))),
            seen(StandInSeen::Absent, pvr(P::Completed)),
            rules(),
            Want::Completed,
        ),
        (
            "the tidy failed: the backup is in, nothing is put back",
            cleared(exact(volume(Tidying))),
            with_copier(
                seen(StandInSeen::Absent, pvr(P::Completed)),
                copier(Some(Err("EIO".into())), false),
            ),
            rules(),
            Want::End(Failed, "the files it held before are in the directory"),
        ),
        (
            "canceled while tidying: the copier goes, nothing is put back",
            cleared(exact(volume(Tidying))),
            with_copier(
                seen(StandInSeen::Absent, pvr(P::Completed)),
                copier(None, false),
            ),
            canceled(),
            Want::Stay(Some(Effect::DeleteCopier), Some("canceled")),
        ),
        (
            "canceled while tidying, the copier gone: ends saying what the volume holds",
            cleared(exact(volume(Tidying))),
            seen(StandInSeen::Absent, pvr(P::Completed)),
            canceled(),
            Want::End(Canceled, "the backup's files are in"),
        ),
        (
            "aborted: the stand-in goes before anything is put back",
            aborted(),
            seen(cleaned_up(), canceled_pvr(P::Canceled)),
            rules(),
            Want::Stay(Some(Effect::DeleteStandIn), None),
        ),
        (
            "aborted while setting aside: that copier goes first",
            exact(aborting(Canceled)),
            with_copier(seen(StandInSeen::Absent, None), copier(None, false)),
            rules(),
            Want::Stay(Some(Effect::DeleteCopier), None),
        ),
        (
            "putting back",
            aborted(),
            with_copier(
                seen(StandInSeen::Absent, canceled_pvr(P::Canceled)),
                putting_back(None),
            ),
            rules(),
            Want::Stay(None, Some("why")),
        ),
        (
            "a put-back copier that cannot start: a warning, the reason kept as it was",
            aborted(),
            with_copier(
                seen(StandInSeen::Absent, canceled_pvr(P::Canceled)),
                CopierSeen::Present {
                    name: "refill-copy-data-1".into(),
                    terminating: false,
                    ended: None,
                    waiting: Some("0/5 nodes are available".into()),
                    puts_back: true,
                    rejected: false,
                },
            ),
            rules(),
            Want::StayWarning("0/5 nodes are available"),
        ),
        (
            "the PVC deleted meanwhile: the put-back copier goes",
            aborted(),
            claim_deleted(with_copier(
                seen(StandInSeen::Absent, canceled_pvr(P::Canceled)),
                putting_back(None),
            )),
            rules(),
            Want::Stay(Some(Effect::DeleteCopier), Some("why")),
        ),
        (
            "and the volume ends: nothing to put back into",
            aborted(),
            claim_deleted(seen(StandInSeen::Absent, canceled_pvr(P::Canceled))),
            rules(),
            Want::End(Failed, "is deleted, so nothing was put back"),
        ),
        (
            "put back: recorded, the copier removed",
            aborted(),
            with_copier(
                seen(StandInSeen::Absent, canceled_pvr(P::Canceled)),
                putting_back(emptied()),
            ),
            rules(),
            Want::Copied(Some(Effect::DeleteCopier)),
        ),
        (
            "put back and the copier gone: ends as it was, not partly written",
            put(aborted()),
            seen(StandInSeen::Absent, canceled_pvr(P::Canceled)),
            rules(),
            Want::Finish(false),
        ),
        (
            "the put-back failed: ends saying where the files are",
            aborted(),
            with_copier(
                seen(StandInSeen::Absent, canceled_pvr(P::Canceled)),
                putting_back(Some(Err("EEXIST".into()))),
            ),
            rules(),
            Want::End(Failed, "putting its files back failed"),
        ),
        (
            "someone started the app meanwhile: the put-back copier goes",
            aborted(),
            with_users(
                with_copier(
                    seen(StandInSeen::Absent, canceled_pvr(P::Canceled)),
                    putting_back(None),
                ),
                &["web-1"],
                None,
            ),
            rules(),
            Want::Stay(Some(Effect::DeleteCopier), None),
        ),
        (
            "and nothing is put back under it",
            aborted(),
            with_users(
                seen(StandInSeen::Absent, canceled_pvr(P::Canceled)),
                &["web-1"],
                None,
            ),
            rules(),
            Want::End(Failed, "not put back, as pod web-1 mounts it now"),
        ),
        (
            "the put-back waits for the node agent to stop first",
            aborted(),
            seen(StandInSeen::Absent, canceled_pvr(P::InProgress)),
            rules(),
            Want::Stay(None, None),
        ),
    ];
    let now = at(NOW);
    for (name, volume, seen, rules, want) in &rows {
        check(name, &decide(volume, seen, rules, now), want);
    }
}

#[test]
fn a_staged_restore_fills_its_scratch_claim_before_anything_stops() {
    use PodVolumePhase as P;
    use VolumePhase::*;
    let running_app = |s: VolumeSeen| with_users(s, &["web-1"], None);
    let rows: Vec<(&str, VolumeStatus, VolumeSeen, Rules, Want)> = vec![
        (
            "started: the stand-in on the scratch claim, beside the running app",
            staged(volume(StartingStandIn)),
            running_app(seen(StandInSeen::Absent, None)),
            rules(),
            Want::Stay(Some(Effect::CreateStandIn), None),
        ),
        (
            "the stand-in made: its PodVolumeRestore, the app still running",
            stand_in_made(staged(volume(StartingStandIn))),
            running_app(seen(ours(), None)),
            rules(),
            Want::Stay(Some(Effect::CreatePodVolumeRestore), None),
        ),
        (
            "filling beside the running app",
            stand_in_made(staged(volume(Restoring))),
            running_app(seen(running_since(NOW - 5), pvr(P::InProgress))),
            rules(),
            Want::Stay(None, None),
        ),
        (
            "a made stand-in that vanished still fails the volume",
            stand_in_made(staged(volume(Restoring))),
            seen(StandInSeen::Absent, pvr(P::InProgress)),
            rules(),
            Want::Abort(Failed, "disappeared"),
        ),
        (
            "filled: the stand-in goes",
            stand_in_made(staged(volume(Restoring))),
            running_app(seen(cleaned_up(), pvr(P::Completed))),
            rules(),
            Want::DataIn(Some(Effect::DeleteStandIn), "removing the stand-in"),
        ),
        (
            "filled and the stand-in gone: only now the consumers stop",
            stand_in_made(staged(volume(RemovingStandIn))),
            running_app(seen(StandInSeen::Absent, pvr(P::Completed))),
            rules(),
            Want::Advance(None, Quiescing),
        ),
        (
            "stopping: waits for the app's pods",
            staged(volume(Quiescing)),
            running_app(seen(StandInSeen::Absent, pvr(P::Completed))),
            rules(),
            Want::Stay(None, Some("waiting for pods to release")),
        ),
        (
            "stopped: the copy, never a second stand-in",
            staged(volume(Quiescing)),
            seen(StandInSeen::Absent, pvr(P::Completed)),
            rules(),
            Want::Advance(None, Copying),
        ),
        (
            "stopped with a stand-in of ours left: it goes first",
            staged(volume(Quiescing)),
            seen(cleaned_up(), pvr(P::Completed)),
            rules(),
            Want::Stay(Some(Effect::DeleteStandIn), Some("old stand-in")),
        ),
        (
            "copying makes the PVC equal to the scratch claim",
            staged(volume(Copying)),
            seen(StandInSeen::Absent, pvr(P::Completed)),
            rules(),
            Want::Stay(
                Some(Effect::CreateCopier),
                Some("backup's files from the scratch claim"),
            ),
        ),
        (
            "canceled during the fill: rolled back, nothing was stopped",
            stand_in_made(staged(volume(Restoring))),
            running_app(seen(running_since(NOW - 5), pvr(P::InProgress))),
            canceled(),
            Want::Abort(Canceled, "canceled"),
        ),
        (
            "canceled after the fill, before the stop: ends at once",
            staged(volume(Quiescing)),
            running_app(seen(StandInSeen::Absent, None)),
            canceled(),
            Want::End(Canceled, "canceled"),
        ),
        (
            "a fill's abort leaves the PVC as it was",
            staged(aborting(Canceled)),
            seen(StandInSeen::Absent, canceled_pvr(P::Canceled)),
            rules(),
            Want::Finish(false),
        ),
        (
            "the fill's PodVolumeRestore failed",
            stand_in_made(staged(volume(Restoring))),
            running_app(seen(running_since(NOW - 5), pvr(P::Failed))),
            rules(),
            Want::Abort(Failed, "agent says"),
        ),
        (
            "the copier refused by its node (disk pressure): nothing written, ended at once",
            staged(volume(Copying)),
            with_copier(
                seen(StandInSeen::Absent, pvr(P::Completed)),
                CopierSeen::Present {
                    name: "refill-copy-data-1".into(),
                    terminating: false,
                    ended: Some(Err("Pod was rejected: DiskPressure".into())),
                    waiting: None,
                    puts_back: false,
                    rejected: true,
                },
            ),
            rules(),
            Want::End(
                Failed,
                "refused by its node before it started, so nothing was written",
            ),
        ),
        (
            "copied and the copier exited: the app may come back while its pod goes",
            VolumeStatus {
                copied: Some(CopySummary::default()),
                ..staged(volume(Copying))
            },
            with_copier(
                seen(StandInSeen::Absent, pvr(P::Completed)),
                copier(copied(), false),
            ),
            rules(),
            Want::CompletedDoing(Effect::DeleteCopier),
        ),
        (
            "ended: the scratch claim goes",
            staged(volume(Canceled)),
            with_scratch(seen(StandInSeen::Absent, None)),
            rules(),
            Want::Stay(Some(Effect::DeleteScratchClaim), None),
        ),
    ];
    let now = at(NOW);
    for (name, volume, seen, rules, want) in &rows {
        check(name, &decide(volume, seen, rules, now), want);
    }
}

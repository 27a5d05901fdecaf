use super::*;

fn filling() -> Seen {
    Seen {
        claim: ClaimSeen {
            uid: "u-1".into(),
            has_finalizer: true,
            selected_node: Some("real-a".into()),
            ..Default::default()
        },
        waits_for_first_consumer: true,
        now: Timestamp::from_second(1_000_000).unwrap(),
        ..Default::default()
    }
}

fn restore(phase: PodVolumePhase) -> Option<RestoreSeen> {
    Some(RestoreSeen {
        phase,
        ..Default::default()
    })
}

fn prime(volume: Option<&str>) -> Option<PrimeSeen> {
    Some(PrimeSeen {
        volume: volume.map(String::from),
        ..Default::default()
    })
}

fn hand_over(volume: &str) -> Step {
    Step::HandOver {
        volume: volume.into(),
    }
}

fn pod(done: bool) -> Option<PodSeen> {
    Some(PodSeen {
        restore_wait_done: done,
        ..Default::default()
    })
}

#[test]
fn a_fill_goes_step_by_step() {
    let mut seen = filling();
    seen.claim.has_finalizer = false;
    assert_eq!(decide(&seen), Step::AddFinalizer);
    seen.claim.has_finalizer = true;
    assert_eq!(decide(&seen), Step::CreatePrime);
    seen.prime = prime(None);
    assert_eq!(decide(&seen), Step::CreatePod);
    seen.pod = pod(false);
    assert_eq!(decide(&seen), Step::CreateRestore);
    seen.restore = restore(PodVolumePhase::InProgress);
    assert!(matches!(decide(&seen), Step::Wait(..)));
    seen.restore = restore(PodVolumePhase::Completed);
    assert!(matches!(decide(&seen), Step::Wait(w, _) if w.contains("restore-wait")));
    seen.pod = pod(true);
    assert_eq!(decide(&seen), Step::DeletePod);
    seen.pod = None;
    seen.prime = prime(Some("pv-1"));
    assert_eq!(decide(&seen), hand_over("pv-1"));
    seen.handed = Some(HandedSeen {
        volume: "pv-1".into(),
        claim_ref_uid: Some("u-1".into()),
    });
    assert_eq!(decide(&seen), Step::DeletePrime);
    seen.prime = None;
    seen.restore = None;
    assert!(matches!(decide(&seen), Step::Wait(w, _) if w.contains("bind")));
    seen.claim.bound = true;
    assert_eq!(decide(&seen), Step::Done);
    seen.claim.has_finalizer = false;
    assert_eq!(decide(&seen), Step::Idle);
}

#[test]
fn a_wait_for_first_consumer_claim_waits_for_the_schedulers_node() {
    let mut seen = filling();
    seen.claim.selected_node = None;
    assert!(matches!(decide(&seen), Step::Wait(w, _) if w.contains("WaitForFirstConsumer")));
    seen.waits_for_first_consumer = false;
    assert_eq!(decide(&seen), Step::CreatePrime);
}

#[test]
fn a_missing_source_is_said_and_nothing_is_made() {
    let mut seen = filling();
    // Said at once, before the scheduler picked a node.
    seen.claim.selected_node = None;
    seen.source_problem = Some("no backup of shop/db".into());
    assert_eq!(
        decide(&seen),
        Step::SourceMissing("no backup of shop/db".into())
    );
}

#[test]
fn a_claim_going_mid_fill_takes_everything_with_it() {
    let mut seen = filling();
    seen.claim.deleting = true;
    seen.prime = prime(Some("pv-1"));
    seen.pod = pod(false);
    seen.restore = restore(PodVolumePhase::InProgress);
    assert_eq!(decide(&seen), Step::CleanUp);
    seen.prime = None;
    seen.pod = None;
    seen.restore = None;
    assert_eq!(decide(&seen), Step::Done);
}

#[test]
fn a_failed_fill_is_counted_once_then_tried_again_later_then_given_up() {
    let mut seen = filling();
    seen.prime = prime(Some("pv-1"));
    seen.pod = pod(false);
    seen.restore = restore(PodVolumePhase::Failed);
    assert!(matches!(decide(&seen), Step::Failed(m) if m.contains("Failed")));
    // Counted: its objects still going are only cleaned up.
    seen.claim.failures = 1;
    seen.claim.last_failure = Some(seen.now);
    assert_eq!(decide(&seen), Step::CleanUp);
    seen.prime = None;
    seen.pod = None;
    seen.restore = None;
    assert!(
        matches!(decide(&seen), Step::Wait(w, d) if w.contains("fill 2") && d == retry_after(1))
    );
    seen.now += retry_after(1);
    assert_eq!(decide(&seen), Step::CreatePrime);
    seen.claim.failures = MAX_ATTEMPTS;
    assert!(matches!(decide(&seen), Step::GiveUp(m) if m.contains("Delete and re-create")));
    assert_eq!(retry_after(2), 2 * retry_after(1));
    assert!(retry_after(u32::MAX) >= retry_after(5));
}

#[test]
fn a_lost_claim_ref_patch_is_written_again() {
    let mut seen = filling();
    seen.prime = prime(Some("pv-1"));
    seen.restore = restore(PodVolumePhase::Completed);
    seen.handed = Some(HandedSeen {
        volume: "pv-1".into(),
        claim_ref_uid: Some("prime-uid".into()),
    });
    assert_eq!(decide(&seen), hand_over("pv-1"));
    seen.handed = Some(HandedSeen {
        volume: "pv-1".into(),
        claim_ref_uid: None,
    });
    assert!(matches!(decide(&seen), Step::Failed(_)));
}

#[test]
fn a_pod_that_does_not_run_fails_the_fill_after_the_stall_limit() {
    let mut seen = filling();
    seen.prime = prime(Some("pv-1"));
    seen.pod = Some(PodSeen {
        waiting: Some("0/3 nodes are available".into()),
        created: Some(seen.now),
        ..Default::default()
    });
    seen.restore = restore(PodVolumePhase::New);
    assert!(matches!(decide(&seen), Step::Wait(w, _) if w.contains("0/3 nodes")));
    seen.now += STALL_LIMIT + Duration::from_secs(1);
    assert!(
        matches!(decide(&seen), Step::Failed(m) if m.contains("did not run within 600s: 0/3 nodes"))
    );
    // Counted once: then its objects are only cleaned up.
    seen.claim.failures = 1;
    seen.claim.last_failure = Some(seen.now);
    assert_eq!(decide(&seen), Step::CleanUp);
}

#[test]
fn a_restore_no_node_agent_takes_fails_the_fill_naming_the_node() {
    let mut seen = filling();
    seen.prime = prime(Some("pv-1"));
    seen.pod = Some(PodSeen {
        node: Some("real-b".into()),
        ..Default::default()
    });
    seen.restore = Some(RestoreSeen {
        created: Some(seen.now),
        ..Default::default()
    });
    assert!(matches!(decide(&seen), Step::Wait(w, _) if w.contains("node agent")));
    seen.now += STALL_LIMIT;
    assert!(matches!(decide(&seen), Step::Wait(..)));
    seen.now += Duration::from_secs(1);
    assert!(matches!(decide(&seen), Step::Failed(m) if m.contains("running on node real-b?")));
    // Once taken, the node agent's own pace is bounded by the whole fill's limit only.
    seen.restore.as_mut().unwrap().phase = PodVolumePhase::InProgress;
    assert!(matches!(decide(&seen), Step::Wait(..)));
}

#[test]
fn a_pod_that_cannot_serve_fails_the_fill_at_once() {
    let mut seen = filling();
    seen.prime = prime(Some("pv-1"));
    seen.pod = Some(PodSeen {
        failed: Some("restore-wait exited with code 1".into()),
        ..Default::default()
    });
    seen.restore = restore(PodVolumePhase::InProgress);
    assert!(matches!(decide(&seen), Step::Failed(m) if m.contains("exited with code 1")));
    // After the node agent is done, restore-wait's end is what is waited for.
    seen.restore = restore(PodVolumePhase::Completed);
    assert!(matches!(decide(&seen), Step::Wait(..)));
}

#[test]
fn a_fill_that_takes_too_long_fails() {
    let mut seen = filling();
    seen.prime = Some(PrimeSeen {
        volume: Some("pv-1".into()),
        created: Some(seen.now),
        ..Default::default()
    });
    seen.pod = pod(false);
    seen.restore = restore(PodVolumePhase::InProgress);
    seen.now += FILL_LIMIT;
    assert!(matches!(decide(&seen), Step::Wait(..)));
    seen.now += Duration::from_secs(1);
    assert!(matches!(decide(&seen), Step::Failed(m) if m.contains("within 4h")));
}

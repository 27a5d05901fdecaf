use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolumeClaimStatus;

use super::*;

fn at(second: i64) -> Timestamp {
    Timestamp::from_second(second).unwrap()
}

fn holding(condition: PersistentVolumeClaimCondition) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        status: Some(PersistentVolumeClaimStatus {
            conditions: Some(vec![condition]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn a_wait_is_said_with_its_words_and_moving_steps_leave_the_condition() {
    let wait = Step::Wait(
        "the fill's pod to run: 0/3 nodes".into(),
        Duration::from_secs(3),
    );
    let wanted = after(&wait, 0).unwrap();
    assert!(!wanted.populated);
    assert_eq!(wanted.reason, "Waiting");
    assert_eq!(
        wanted.message,
        "waiting for the fill's pod to run: 0/3 nodes"
    );
    assert_eq!(after(&Step::CreatePod, 0), None);
    assert_eq!(after(&Step::CleanUp, 0), None);
    assert!(after(&Step::Done, 0).unwrap().populated);
    let failed = after(&Step::Failed("no node agent".into()), 1).unwrap();
    assert_eq!(failed.reason, "FillFailed");
    assert!(
        failed
            .message
            .starts_with("fill 2 of 5 failed: no node agent")
    );
}

#[test]
fn a_long_message_is_cut() {
    let wanted = after(&Step::GiveUp("x".repeat(5000)), 0).unwrap();
    assert_eq!(wanted.message.chars().count(), MESSAGE_MAX + 1);
}

#[test]
fn the_condition_is_written_only_when_it_changes_and_keeps_its_transition_time() {
    let wanted = after(&Step::SourceMissing("no backup".into()), 0).unwrap();
    let first = change(&PersistentVolumeClaim::default(), &wanted, at(100)).unwrap();
    assert_eq!(first.type_, TYPE);
    assert_eq!(first.status, "False");
    assert_eq!(first.last_transition_time, Some(Time(at(100))));
    let claim = holding(first);
    assert_eq!(change(&claim, &wanted, at(200)), None);
    let waiting = after(&Step::Wait("a node".into(), Duration::ZERO), 0).unwrap();
    let second = change(&claim, &waiting, at(300)).unwrap();
    assert_eq!(second.last_transition_time, Some(Time(at(100))));
    assert_eq!(second.last_probe_time, Some(Time(at(300))));
    let done = change(&holding(second), &after(&Step::Done, 0).unwrap(), at(400)).unwrap();
    assert_eq!(done.status, "True");
    assert_eq!(done.last_transition_time, Some(Time(at(400))));
}

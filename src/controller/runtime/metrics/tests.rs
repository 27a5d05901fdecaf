use super::*;
use crate::api::{ConsumerKind, ConsumerRecord, Phase, VolumeStatus};

fn at(text: &str) -> Time {
    Time(text.parse().unwrap())
}

fn volume(pvc: &str, phase: VolumePhase, bytes: i64) -> VolumeStatus {
    VolumeStatus {
        pvc: pvc.into(),
        phase,
        bytes_done: bytes,
        ..Default::default()
    }
}

fn consumer(state: ConsumerState, stopped: Option<&str>, resumed: Option<&str>) -> ConsumerRecord {
    ConsumerRecord {
        kind: ConsumerKind::Deployment,
        namespace: "shop".into(),
        name: "web".into(),
        pvcs: vec!["shop/data".into()],
        state,
        replicas: Some(2),
        original: None,
        held_by: None,
        switch_to: None,
        stopped_at: stopped.map(at),
        resumed_at: resumed.map(at),
        uid: None,
    }
}

fn restoring() -> DataRestoreStatus {
    DataRestoreStatus {
        phase: Phase::Finalizing,
        start_time: Some(at("2026-01-01T00:00:00Z")),
        volumes: vec![
            volume("shop/data", VolumePhase::Completed, 4096),
            volume("shop/logs", VolumePhase::Restoring, 10),
        ],
        consumers: vec![consumer(
            ConsumerState::Stopped,
            Some("2026-01-01T00:00:05Z"),
            None,
        )],
        ..Default::default()
    }
}

fn ended() -> DataRestoreStatus {
    let mut status = restoring();
    status.phase = Phase::PartiallyFailed;
    status.completion_time = Some(at("2026-01-01T00:01:05Z"));
    status.volumes[1].phase = VolumePhase::Failed;
    status.consumers[0].state = ConsumerState::Resumed;
    status.consumers[0].resumed_at = Some(at("2026-01-01T00:00:45Z"));
    status
}

#[test]
fn a_pass_that_ends_the_restore_shows_its_result_duration_volumes_and_downtime() {
    assert_eq!(
        observations(&restoring(), &ended()),
        vec![
            Observation::RestoreEnded {
                result: "PartiallyFailed".into(),
                took: Some(Duration::from_secs(65)),
            },
            // The failed volume restored nothing that counts.
            Observation::VolumeEnded {
                result: "Failed".into(),
                bytes: 0,
            },
            Observation::ConsumerResumed {
                downtime: Duration::from_secs(40),
            },
        ]
    );
}

#[test]
fn a_workload_back_on_a_new_claim_ends_its_downtime_too() {
    let mut switched = ended();
    switched.consumers[0].state = ConsumerState::Switched;
    let downtimes: Vec<Observation> = observations(&restoring(), &switched)
        .into_iter()
        .filter(|o| matches!(o, Observation::ConsumerResumed { .. }))
        .collect();
    assert_eq!(
        downtimes,
        [Observation::ConsumerResumed {
            downtime: Duration::from_secs(40)
        }]
    );
    assert!(observations(&switched, &switched).is_empty());
}

#[test]
fn a_transition_counts_once_however_often_the_status_is_written_again() {
    assert!(observations(&ended(), &ended()).is_empty());
    assert!(observations(&restoring(), &restoring()).is_empty());
}

#[test]
fn a_volume_that_completes_counts_the_bytes_the_node_agent_reported() {
    let mut before = restoring();
    before.volumes[0].phase = VolumePhase::Restoring;
    assert_eq!(
        observations(&before, &restoring()),
        vec![Observation::VolumeEnded {
            result: "Completed".into(),
            bytes: 4096,
        }]
    );
}

#[test]
fn a_consumer_resumed_without_a_recorded_stop_gives_no_downtime() {
    // Records written before refill kept these times.
    let mut before = restoring();
    before.consumers[0].stopped_at = None;
    let mut after = ended();
    after.consumers[0].stopped_at = None;
    assert!(
        !observations(&before, &after)
            .iter()
            .any(|o| matches!(o, Observation::ConsumerResumed { .. }))
    );
}

#[test]
fn pod_volume_restores_waiting_for_a_node_agent_are_counted_from_the_volumes() {
    let mut status = restoring();
    status.volumes[1].message = Some(format!("{WAITING_FOR_NODE_AGENT} shop-logs-1"));
    assert_eq!(waiting_for_node_agent(&status), (1, 0));
    status.volumes[1].warning = Some(format!("{NO_NODE_AGENT} shop-logs-1 for 60s"));
    assert_eq!(waiting_for_node_agent(&status), (1, 1));
    // Only a restoring volume waits: an old message on an ended one does not count.
    status.volumes[1].phase = VolumePhase::Failed;
    assert_eq!(waiting_for_node_agent(&status), (0, 0));
}

#[test]
fn the_text_shows_every_metric_and_the_gauges_add_up_across_restores() {
    let metrics = Metrics::new();
    metrics.written("a", &restoring(), &ended());
    let mut waiting = restoring();
    waiting.volumes[1].message = Some(format!("{WAITING_FOR_NODE_AGENT} x"));
    metrics.written("b", &waiting, &waiting);
    metrics.written("c", &waiting, &waiting);
    metrics.reconcile_failed(Category::Transient);
    metrics.set_leader(true);
    let text = metrics.encode();
    for line in [
        "refill_restores_total{result=\"PartiallyFailed\"} 1",
        "refill_volumes_total{result=\"Failed\"} 1",
        "refill_restored_bytes_total 0",
        "refill_restore_duration_seconds_count 1",
        "refill_restore_duration_seconds_sum 65.0",
        "refill_app_downtime_seconds_sum 40.0",
        "refill_reconcile_errors_total{category=\"Transient\"} 1",
        "refill_pod_volume_restores_waiting 2",
        "refill_pod_volume_restores_overdue 0",
        "refill_leader 1",
    ] {
        assert!(text.contains(line), "no {line:?} in:\n{text}");
    }
    metrics.forget("b");
    assert!(
        metrics
            .encode()
            .contains("refill_pod_volume_restores_waiting 1")
    );
}

mod dashboard;
mod promql;

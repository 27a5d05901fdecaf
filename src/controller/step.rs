//! Pure decisions of the Restoring phase: which volumes may start, which consumers may
//! come back, which deadlines passed.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::api::{ConsumerState, DataRestoreStatus, FailurePolicy, VolumePhase, VolumeStatus};

pub const DEFAULT_PARALLEL: u32 = 8;

/// How many Pending volumes may start now.
pub fn free_slots(volumes: &[VolumeStatus], parallel: Option<u32>) -> usize {
    let parallel = parallel.unwrap_or(DEFAULT_PARALLEL).max(1) as usize;
    let active = volumes.iter().filter(|v| v.phase.is_active()).count();
    parallel.saturating_sub(active)
}

/// What to do with a consumer now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumerStep {
    Nothing,
    /// One of its volumes is being quiesced.
    Stop,
    /// All its volumes ended.
    Resume,
    KeepStopped,
}

pub fn consumer_step(
    status: &DataRestoreStatus,
    index: usize,
    on_failure: FailurePolicy,
) -> ConsumerStep {
    let record = &status.consumers[index];
    let volumes: Vec<&VolumeStatus> = status
        .volumes
        .iter()
        .filter(|v| record.pvcs.contains(&v.pvc))
        .collect();
    let all_ended = volumes.iter().all(|v| v.phase.is_terminal());
    let any_failed = volumes.iter().any(|v| v.phase != VolumePhase::Completed);
    match record.state {
        ConsumerState::Running if !all_ended && volumes.iter().any(|v| v.phase.is_active()) => {
            ConsumerStep::Stop
        }
        ConsumerState::Stopping | ConsumerState::Stopped if all_ended => {
            if any_failed && on_failure == FailurePolicy::KeepStopped {
                ConsumerStep::KeepStopped
            } else {
                ConsumerStep::Resume
            }
        }
        ConsumerState::Stopping => ConsumerStep::Stop,
        _ => ConsumerStep::Nothing,
    }
}

/// Every consumer of the volume is stopped, so the stand-in may take the volume.
pub fn consumers_stopped(status: &DataRestoreStatus, pvc: &str) -> bool {
    status
        .consumers
        .iter()
        .filter(|c| c.pvcs.iter().any(|p| p == pvc))
        .all(|c| c.state == ConsumerState::Stopped)
}

/// Parses a duration such as `30m` or `2h`.
pub fn parse_duration(value: &str) -> Result<Duration, String> {
    humantime::parse_duration(value)
        .map_err(|e| format!("\"{value}\" is not a duration ({e}); write it like 30m or 2h"))
}

/// Whether `started` plus `limit` lies before `now`.
pub fn expired(started: Option<&Timestamp>, limit: Option<Duration>, now: Timestamp) -> bool {
    match (started, limit) {
        (Some(start), Some(limit)) => {
            let elapsed = now.duration_since(*start);
            elapsed.is_positive() && elapsed.unsigned_abs() > limit
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ConsumerKind, ConsumerRecord};

    fn volume(pvc: &str, phase: VolumePhase) -> VolumeStatus {
        VolumeStatus {
            pvc: pvc.into(),
            phase,
            ..Default::default()
        }
    }

    fn consumer(pvcs: &[&str], state: ConsumerState) -> ConsumerRecord {
        ConsumerRecord {
            kind: ConsumerKind::StatefulSet,
            namespace: "ns".into(),
            name: "db".into(),
            pvcs: pvcs.iter().map(|p| p.to_string()).collect(),
            state,
            replicas: Some(3),
            original: None,
        }
    }

    #[test]
    fn slots_respect_parallelism() {
        let volumes = [
            volume("a", VolumePhase::Restoring),
            volume("b", VolumePhase::Pending),
            volume("c", VolumePhase::Completed),
        ];
        assert_eq!(free_slots(&volumes, Some(1)), 0);
        assert_eq!(free_slots(&volumes, Some(3)), 2);
        assert_eq!(free_slots(&volumes, Some(0)), 0);
    }

    #[test]
    fn a_shared_workload_comes_back_only_when_all_its_volumes_ended() {
        let mut status = DataRestoreStatus {
            volumes: vec![
                volume("a", VolumePhase::Completed),
                volume("b", VolumePhase::Restoring),
            ],
            consumers: vec![consumer(&["a", "b"], ConsumerState::Stopped)],
            ..Default::default()
        };
        assert_eq!(
            consumer_step(&status, 0, FailurePolicy::Resume),
            ConsumerStep::Nothing
        );
        status.volumes[1].phase = VolumePhase::Failed;
        assert_eq!(
            consumer_step(&status, 0, FailurePolicy::Resume),
            ConsumerStep::Resume
        );
        assert_eq!(
            consumer_step(&status, 0, FailurePolicy::KeepStopped),
            ConsumerStep::KeepStopped
        );
        status.volumes[1].phase = VolumePhase::Completed;
        assert_eq!(
            consumer_step(&status, 0, FailurePolicy::KeepStopped),
            ConsumerStep::Resume
        );
    }

    #[test]
    fn a_consumer_stops_when_its_first_volume_starts() {
        let mut status = DataRestoreStatus {
            volumes: vec![
                volume("a", VolumePhase::Pending),
                volume("b", VolumePhase::Pending),
            ],
            consumers: vec![consumer(&["a", "b"], ConsumerState::Running)],
            ..Default::default()
        };
        assert_eq!(
            consumer_step(&status, 0, FailurePolicy::Resume),
            ConsumerStep::Nothing
        );
        assert!(!consumers_stopped(&status, "a"));
        status.volumes[0].phase = VolumePhase::Quiescing;
        assert_eq!(
            consumer_step(&status, 0, FailurePolicy::Resume),
            ConsumerStep::Stop
        );
        status.consumers[0].state = ConsumerState::Stopped;
        assert!(consumers_stopped(&status, "a"));
        assert!(consumers_stopped(&status, "unrelated"));
    }

    #[test]
    fn deadlines() {
        let start = Timestamp::from_second(1_000).unwrap();
        let later = Timestamp::from_second(1_100).unwrap();
        assert!(expired(Some(&start), Some(Duration::from_secs(60)), later));
        assert!(!expired(
            Some(&start),
            Some(Duration::from_secs(600)),
            later
        ));
        assert!(!expired(None, Some(Duration::from_secs(1)), later));
        assert_eq!(parse_duration("30m").unwrap(), Duration::from_secs(1800));
        assert!(parse_duration("soon").is_err());
    }
}

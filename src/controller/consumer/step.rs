//! What to do with each consumer now, from the restore's records alone. Pure.

use crate::api::{
    ConsumerRecord, ConsumerState, DataRestoreStatus, FailurePolicy, VolumePhase, VolumeStatus,
};
use crate::controller::by_claim::ByClaim;
use crate::plan::gitops::waits_for_pause;

/// What to do with a consumer now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConsumerStep {
    Nothing,
    /// Record that it is about to be stopped (state Stopping), before anything is done:
    /// from then on the finish step looks at it whatever happens.
    Mark,
    /// Apply the stop recorded.
    Stop,
    /// All its volumes ended, and nothing writes to them any more.
    Resume,
    /// All its volumes completed (spec.switchWorkloads): it comes back on the new claim.
    Switch,
    KeepStopped,
}

/// What to do with each consumer now, by index.
pub(crate) fn consumer_steps(
    status: &DataRestoreStatus,
    on_failure: FailurePolicy,
) -> Vec<ConsumerStep> {
    let by_claim = ByClaim::volumes(&status.volumes);
    status
        .consumers
        .iter()
        .map(|record| {
            let volumes: Vec<&VolumeStatus> = record
                .pvcs
                .iter()
                .flat_map(|pvc| by_claim.of(pvc))
                .copied()
                .collect();
            step(status, record, &volumes, on_failure)
        })
        .collect()
}

/// What to do with `record`, whose volumes are `volumes`.
fn step(
    status: &DataRestoreStatus,
    record: &ConsumerRecord,
    volumes: &[&VolumeStatus],
    on_failure: FailurePolicy,
) -> ConsumerStep {
    // Terminal means the writer stopped: an aborting volume is not over yet.
    let all_ended = volumes.iter().all(|v| v.phase.is_terminal());
    let any_failed = volumes.iter().any(|v| v.phase != VolumePhase::Completed);
    let switching = record.switch_to.is_some();
    let come_back = || {
        if any_failed && on_failure == FailurePolicy::KeepStopped {
            ConsumerStep::KeepStopped
        } else if switching && !any_failed {
            ConsumerStep::Switch
        } else {
            ConsumerStep::Resume
        }
    };
    // A workload to switch runs on while its new claim is filled: it is stopped only
    // once the data is there, which keeps its downtime to the switch itself.
    // Likewise a staged or path restore fills its scratch claim first, and stops its
    // consumers only for the copy.
    let needs_stop = volumes.iter().any(|v| {
        if switching {
            v.phase == VolumePhase::Switching
        } else {
            v.holds_consumers_stopped()
        }
    });
    match record.state {
        ConsumerState::Running if !all_ended && needs_stop => ConsumerStep::Mark,
        ConsumerState::Stopping | ConsumerState::Stopped if all_ended => come_back(),
        // Stopped under a GitOps object not paused yet, it would be scaled back up.
        ConsumerState::Stopping if waits_for_pause(&status.git_ops, &super::describe(record)) => {
            ConsumerStep::Nothing
        }
        ConsumerState::Stopping => ConsumerStep::Stop,
        _ => ConsumerStep::Nothing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ConsumerKind;

    fn volume(pvc: &str, phase: VolumePhase) -> VolumeStatus {
        VolumeStatus {
            pvc: pvc.into(),
            phase,
            ..Default::default()
        }
    }

    fn switched(pvcs: &[&str], state: ConsumerState) -> ConsumerRecord {
        ConsumerRecord {
            switch_to: Some("a-r1-0123456789".into()),
            ..consumer(pvcs, state)
        }
    }

    #[test]
    fn a_workload_to_switch_stops_only_for_the_switch() {
        use ConsumerState as S;
        use ConsumerStep as Step;
        use VolumePhase as V;
        let rows = [
            (
                "new claim being filled",
                V::Restoring,
                S::Running,
                Step::Nothing,
            ),
            ("switching: mark", V::Switching, S::Running, Step::Mark),
            ("marked: stop", V::Switching, S::Stopping, Step::Stop),
            ("stopped, waiting", V::Switching, S::Stopped, Step::Nothing),
            ("completed: switch", V::Completed, S::Stopped, Step::Switch),
            (
                "canceled while switching: back on the PVC",
                V::Canceled,
                S::Stopped,
                Step::Resume,
            ),
            (
                "failed before the switch: never stopped",
                V::Failed,
                S::Running,
                Step::Nothing,
            ),
            ("switched already", V::Completed, S::Switched, Step::Nothing),
        ];
        for (name, phase, state, want) in rows {
            let s = DataRestoreStatus {
                volumes: vec![volume("a", phase)],
                consumers: vec![switched(&["a"], state)],
                ..Default::default()
            };
            assert_eq!(consumer_steps(&s, FailurePolicy::Resume)[0], want, "{name}");
        }
        let failed = DataRestoreStatus {
            volumes: vec![volume("a", V::Failed)],
            consumers: vec![switched(&["a"], S::Stopped)],
            ..Default::default()
        };
        assert_eq!(
            consumer_steps(&failed, FailurePolicy::KeepStopped)[0],
            Step::KeepStopped
        );
    }

    #[test]
    fn a_staged_restore_stops_its_consumers_only_after_the_fill() {
        use ConsumerState as S;
        use ConsumerStep as Step;
        use VolumePhase as V;
        let rows = [
            (
                "stand-in on the scratch claim",
                V::StartingStandIn,
                S::Running,
                Step::Nothing,
            ),
            ("filling", V::Restoring, S::Running, Step::Nothing),
            (
                "filled, stand-in going",
                V::RemovingStandIn,
                S::Running,
                Step::Nothing,
            ),
            ("filled: mark", V::Quiescing, S::Running, Step::Mark),
            ("marked: stop", V::Quiescing, S::Stopping, Step::Stop),
            ("copying", V::Copying, S::Stopped, Step::Nothing),
            (
                "a fill rolled back: never stopped",
                V::Aborting,
                S::Running,
                Step::Nothing,
            ),
            (
                "a copy rolled back: still stopped",
                V::Aborting,
                S::Stopped,
                Step::Nothing,
            ),
            (
                "canceled during the fill",
                V::Canceled,
                S::Running,
                Step::Nothing,
            ),
            ("copied: back", V::Completed, S::Stopped, Step::Resume),
        ];
        for (name, phase, state, want) in rows {
            let mut filled = volume("a", phase);
            filled.scratch_pvc = Some("refill-scratch-a-1".into());
            let s = DataRestoreStatus {
                volumes: vec![filled],
                consumers: vec![consumer(&["a"], state)],
                ..Default::default()
            };
            assert_eq!(consumer_steps(&s, FailurePolicy::Resume)[0], want, "{name}");
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
            held_by: None,
            switch_to: None,
            stopped_at: None,
            resumed_at: None,
            uid: None,
        }
    }

    #[test]
    fn a_consumer_is_stopped_only_once_its_gitops_object_is_paused() {
        use crate::api::{GitOpsKind, GitOpsRecord, GitOpsState};
        let mut s = status(&[("a", VolumePhase::Quiescing)], ConsumerState::Stopping);
        s.git_ops = vec![GitOpsRecord {
            kind: GitOpsKind::Kustomization,
            namespace: "flux-system".into(),
            name: "apps".into(),
            workloads: vec!["StatefulSet ns/db".into()],
            state: GitOpsState::Pausing,
            original: None,
            message: None,
            paused_at: None,
            resumed_at: None,
        }];
        assert_eq!(
            consumer_steps(&s, FailurePolicy::Resume)[0],
            ConsumerStep::Nothing,
            "scaled down now, the Kustomization would scale it back up"
        );
        s.git_ops[0].workloads = vec!["StatefulSet ns/other".into()];
        assert_eq!(
            consumer_steps(&s, FailurePolicy::Resume)[0],
            ConsumerStep::Stop
        );
        s.git_ops[0].workloads = vec!["StatefulSet ns/db".into()];
        s.git_ops[0].state = GitOpsState::Paused;
        assert_eq!(
            consumer_steps(&s, FailurePolicy::Resume)[0],
            ConsumerStep::Stop
        );
    }

    fn status(volumes: &[(&str, VolumePhase)], state: ConsumerState) -> DataRestoreStatus {
        DataRestoreStatus {
            volumes: volumes.iter().map(|(p, ph)| volume(p, *ph)).collect(),
            consumers: vec![consumer(&["a", "b"], state)],
            ..Default::default()
        }
    }

    #[test]
    fn each_consumer_s_step_follows_its_own_volumes_only() {
        use ConsumerState as S;
        use VolumePhase as V;
        let s = DataRestoreStatus {
            volumes: vec![
                volume("a", V::Completed),
                volume("b", V::Restoring),
                volume("c", V::Quiescing),
            ],
            consumers: vec![
                consumer(&["a"], S::Stopped),
                consumer(&["a", "b"], S::Stopped),
                consumer(&["c"], S::Running),
                consumer(&["elsewhere"], S::Running),
            ],
            ..Default::default()
        };
        assert_eq!(
            consumer_steps(&s, FailurePolicy::Resume),
            [
                ConsumerStep::Resume,
                ConsumerStep::Nothing,
                ConsumerStep::Mark,
                ConsumerStep::Nothing
            ]
        );
    }

    #[test]
    fn every_consumer_step() {
        use ConsumerState as S;
        use ConsumerStep as Step;
        use VolumePhase as V;
        let resume = FailurePolicy::Resume;
        let keep = FailurePolicy::KeepStopped;
        let rows = [
            (
                "nothing started",
                [V::Pending, V::Pending],
                S::Running,
                resume,
                Step::Nothing,
            ),
            (
                "first volume starts: mark",
                [V::Quiescing, V::Pending],
                S::Running,
                resume,
                Step::Mark,
            ),
            (
                "marked: stop",
                [V::Quiescing, V::Pending],
                S::Stopping,
                resume,
                Step::Stop,
            ),
            (
                "stopped, one left",
                [V::Completed, V::Restoring],
                S::Stopped,
                resume,
                Step::Nothing,
            ),
            (
                "aborting is not over",
                [V::Completed, V::Aborting],
                S::Stopped,
                resume,
                Step::Nothing,
            ),
            (
                "all done: resume",
                [V::Completed, V::Completed],
                S::Stopped,
                resume,
                Step::Resume,
            ),
            (
                "a failure, Resume",
                [V::Completed, V::Failed],
                S::Stopped,
                resume,
                Step::Resume,
            ),
            (
                "a failure, KeepStopped",
                [V::Completed, V::Failed],
                S::Stopped,
                keep,
                Step::KeepStopped,
            ),
            (
                "all done, KeepStopped",
                [V::Completed, V::Completed],
                S::Stopped,
                keep,
                Step::Resume,
            ),
            (
                "marked, then all failed: look at it",
                [V::Failed, V::Canceled],
                S::Stopping,
                resume,
                Step::Resume,
            ),
            (
                "held by another restore",
                [V::Failed, V::Failed],
                S::HeldByOther,
                resume,
                Step::Nothing,
            ),
            (
                "back already",
                [V::Completed, V::Completed],
                S::Resumed,
                resume,
                Step::Nothing,
            ),
            (
                "never stopped, all ended",
                [V::Failed, V::Failed],
                S::Running,
                resume,
                Step::Nothing,
            ),
        ];
        for (name, phases, state, policy, want) in rows {
            let s = status(&[("a", phases[0]), ("b", phases[1])], state);
            assert_eq!(consumer_steps(&s, policy)[0], want, "{name}");
        }
    }
}

//! Which changes of a volume's record only say what refill saw, so that its
//! VolumePluginRestore may show them a little late (see [`crate::controller::ledger`]).
//!
//! While the node agent writes, a volume's bytes grow, and it moves from Restoring to
//! RemovingStandIn once the node agent is done, on what it sees of the node agent and
//! `restore-wait` alone. Each was a write of the record. (That the node agent took the
//! volume up, Restoring, is written at once: it is the phase a person restoring one
//! large volume watches for.) A record that lags by them changes nothing a restarted
//! refill does, as long as nothing acts on the volume until its newest record is
//! written: a volume whose record lags takes no step that acts (`volume::advance`
//! holds it until the record is written), and any other change of its record goes out
//! with the pass that makes it.

use k8s_openapi::jiff::Timestamp;

use super::apply;
use super::decide::Step;
use crate::api::{VolumePhase, VolumeStatus};

/// Phases a volume moves through on its own (the node agent, `restore-wait`), in the
/// order it moves. Tidying is not one of them: the stand-in is deleted from there, and
/// a volume whose record lagged would wait a pass to have it written first.
const SEEN_ONLY: [VolumePhase; 2] = [VolumePhase::Restoring, VolumePhase::RemovingStandIn];

/// Whether `after` differs from `before` only by what was seen: a phase further along
/// [`SEEN_ONLY`], the message, the bytes written and the node they are written on.
/// Everything else a record holds is what a later pass (or a restarted refill) acts on,
/// or a warning for a person, and goes out at once.
pub(crate) fn only_seen(before: &VolumeStatus, after: &VolumeStatus) -> bool {
    let rank = |phase: VolumePhase| SEEN_ONLY.iter().position(|p| *p == phase);
    let (Some(from), Some(to)) = (rank(before.phase), rank(after.phase)) else {
        return false;
    };
    let as_before = VolumeStatus {
        phase: before.phase,
        message: before.message.clone(),
        bytes_done: before.bytes_done,
        total_bytes: before.total_bytes,
        node: before.node.clone(),
        ..after.clone()
    };
    from <= to && as_before == *before
}

/// Whether a volume whose record lags may take `step` before that record is written:
/// only if the step acts on nothing, now or later in the same pass. An effect would
/// follow a record the cluster does not hold; a volume that ends frees its consumers
/// within the pass. Any other change is written at the end of the pass, before the
/// next one acts on it.
pub(crate) fn may_take(volume: &VolumeStatus, step: &Step, now: Timestamp) -> bool {
    if step.effect.is_some() {
        return false;
    }
    let mut moved = volume.clone();
    apply::apply(&mut moved, step.change.clone(), now);
    !moved.phase.is_terminal()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::CopySummary;

    fn at(phase: VolumePhase) -> VolumeStatus {
        VolumeStatus {
            pvc: "shop/data".into(),
            phase,
            pod_volume_restore: Some("r1-data".into()),
            stand_in_uid: Some("u1".into()),
            total_bytes: 100,
            ..Default::default()
        }
    }

    #[test]
    fn the_phases_a_volume_moves_through_on_its_own_and_their_progress_are_only_seen() {
        use VolumePhase::*;
        let moved = |from, to| only_seen(&at(from), &at(to));
        assert!(moved(Restoring, RemovingStandIn));
        assert!(moved(Restoring, Restoring));
        assert!(!moved(RemovingStandIn, Restoring), "never back");
        // Into or out of a phase where refill acts, or ends, and the node agent's start.
        for (from, to) in [
            (StartingStandIn, Restoring),
            (StartingStandIn, RemovingStandIn),
            (Restoring, Tidying),
            (Quiescing, StartingStandIn),
            (Clearing, StartingStandIn),
            (RemovingStandIn, Quiescing),
            (RemovingStandIn, Switching),
            (Restoring, Aborting),
            (RemovingStandIn, Completed),
            (Restoring, Failed),
        ] {
            assert!(!moved(from, to), "{from:?} -> {to:?}");
        }
        let mut progress = at(Restoring);
        progress.bytes_done = 60;
        progress.message = Some("waiting".into());
        progress.node = Some("node-1".into());
        assert!(only_seen(&at(Restoring), &progress));
    }

    #[test]
    fn a_lagging_volume_takes_no_step_that_acts_now_or_later_in_its_pass() {
        use super::super::decide::{Change, Effect};
        let now = Timestamp::from_second(1_000).unwrap();
        let step = |effect, change| Step { effect, change };
        let restoring = at(VolumePhase::Restoring);
        let tidying = at(VolumePhase::Tidying);
        let stay = Change::Stay {
            message: Some("waiting".into()),
            warning: None,
        };
        // Steps that act on nothing this pass: their records go out with it.
        let taken = [
            step(None, stay.clone()),
            step(None, Change::DataIn { message: None }),
            step(None, Change::Advance(VolumePhase::Tidying)),
            step(
                None,
                Change::Abort {
                    outcome: VolumePhase::Canceled,
                    message: "canceled".into(),
                },
            ),
            step(
                None,
                Change::Stay {
                    message: None,
                    warning: Some("no node agent".into()),
                },
            ),
        ];
        for step in taken {
            assert!(may_take(&restoring, &step, now), "{step:?}");
        }
        // An effect, or an end that frees the consumers in the same pass.
        let held = [
            (&restoring, step(Some(Effect::ForceDeleteStandIn), stay)),
            (
                &tidying,
                step(
                    Some(Effect::DeleteStandIn),
                    Change::Tidied(Default::default()),
                ),
            ),
            (&tidying, step(None, Change::Completed)),
            (
                &restoring,
                step(
                    None,
                    Change::End {
                        outcome: VolumePhase::Failed,
                        message: "gone".into(),
                    },
                ),
            ),
        ];
        for (volume, step) in held {
            assert!(!may_take(volume, &step, now), "{step:?}");
        }
    }

    #[test]
    fn what_a_pass_acts_on_or_a_person_reads_goes_out_at_once() {
        let before = at(VolumePhase::Restoring);
        type Change = fn(&mut VolumeStatus);
        let changes: [(&str, Change); 5] = [
            ("warning", |v| v.warning = Some("no node agent".into())),
            ("tidy report", |v| v.tidied = Some(3)),
            ("stand-in vouched for", |v| v.stand_in_uid = None),
            ("its PodVolumeRestore", |v| v.pod_volume_restore = None),
            ("copy report", |v| v.copied = Some(CopySummary::default())),
        ];
        for (what, change) in changes {
            let mut after = before.clone();
            after.phase = VolumePhase::RemovingStandIn;
            change(&mut after);
            assert!(!only_seen(&before, &after), "{what}");
        }
    }
}

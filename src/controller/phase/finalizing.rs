//! Finalizing: no volume starts any more; the ones under way roll back (their node
//! agent stopped, their stand-in removed), consumers come back, and the restore ends
//! once nothing of it is left running.

use std::time::Duration;

use kube::ResourceExt;

use crate::api::{ConsumerState, DataRestore, DataRestoreStatus, Phase, VolumePhase};
use crate::controller::gitops;
use crate::controller::status::{self, now};
use crate::controller::{Context, Result};

use super::{Next, restoring, stopping};

pub(super) async fn finalize(
    dr: &DataRestore,
    ctx: &Context,
    status: &mut DataRestoreStatus,
    deleting: bool,
) -> Result<Next> {
    let worked = restoring::work(dr, ctx, status, deleting).await?;
    if worked.held {
        return Ok(Next::Again);
    }
    let no_stand_ins = worked.done;
    let all_ended = status.volumes.iter().all(|v| v.phase.is_terminal());
    let consumers_settled = !status
        .consumers
        .iter()
        .any(|c| matches!(c.state, ConsumerState::Stopping | ConsumerState::Stopped));
    if !(all_ended && consumers_settled && no_stand_ins) {
        return Ok(Next::After(Duration::from_millis(500)));
    }
    // Only now that every consumer is back: a GitOps object let go earlier would
    // reconcile a workload refill still holds stopped.
    let uid = dr.uid().unwrap_or_default();
    gitops::release_all(dr, ctx, status, &uid).await?;
    status.phase = status::outcome(&status.volumes, stopping(dr, deleting));
    status.completion_time = Some(now());
    let restored = status
        .volumes
        .iter()
        .filter(|v| v.phase == VolumePhase::Completed)
        .count();
    let note = format!(
        "{:?}: restored {restored} of {} volumes",
        status.phase,
        status.volumes.len()
    );
    ctx.event(
        dr,
        status.phase != Phase::Completed,
        status::reason(status.phase),
        note,
    );
    Ok(Next::Done)
}

//! New and Validating: check the request against the cluster, touching nothing, and
//! record the plan (volumes, their consumers) in the status.

use kube::ResourceExt;
use tracing::info;

use crate::api::{
    ConsumerRecord, ConsumerState, DataRestore, DataRestoreStatus, Phase, RestoreTarget,
    VolumePhase, VolumeStatus,
};
use crate::controller::runtime::error::Category;
use crate::controller::status::now;
use crate::controller::volume::sight::split;
use crate::controller::{Context, Error, Result, reasons};
use crate::labels;
use crate::validate::{self, ValidateError};

use super::{Next, restoring, stopping};

/// New: the request is taken; validation comes next.
pub(super) fn accept(status: &mut DataRestoreStatus) -> Next {
    status.phase = Phase::Validating;
    status.start_time = Some(now());
    Next::Again
}

pub(super) async fn validate(
    dr: &DataRestore,
    ctx: &Context,
    status: &mut DataRestoreStatus,
    deleting: bool,
) -> Result<Next> {
    if stopping(dr, deleting) {
        status.phase = Phase::Canceled;
        status.completion_time = Some(now());
        return Ok(Next::Done);
    }
    let invalid = |status: &mut DataRestoreStatus, errors: Vec<String>| {
        status.phase = Phase::Failed;
        status.errors = crate::controller::status::bounded(errors);
        status.completion_time = Some(now());
        ctx.event(
            dr,
            true,
            reasons::FAILED_VALIDATION,
            status.errors.join("; "),
        );
        Next::Done
    };
    let errors = crate::plan::spec_errors(&dr.spec);
    if !errors.is_empty() {
        return Ok(invalid(status, errors));
    }
    let (plan, consumers) = match validate::plan_and_consumers(ctx.reads(), dr).await {
        Ok(found) => found,
        Err(ValidateError::Invalid(e)) => {
            info!(restore = %dr.name_any(), "invalid: {e}");
            return Ok(invalid(status, e.errors));
        }
        // Refused for good (RBAC, say): nothing was touched, so the restore ends here
        // with the server's words instead of retrying forever.
        Err(ValidateError::Kube(e))
            if crate::controller::runtime::error::category_of(&e) == Category::Permanent =>
        {
            let why = Error::Kube(e).reason();
            return Ok(invalid(
                status,
                vec![format!(
                    "refill could not read what validation needs: {why}"
                )],
            ));
        }
        Err(ValidateError::Kube(e)) => return Err(Error::Kube(e)),
    };
    // The plan moves into the status piece by piece, so that it is gone before the
    // first volumes start: at 10,000 claims it is tens of megabytes.
    let crate::plan::Plan {
        backup_name,
        volumes,
        consumers: planned,
        git_ops,
        warnings,
    } = plan;
    status.warnings = crate::controller::status::bounded(warnings);
    status.volumes = volumes
        .into_iter()
        .map(|v| VolumeStatus {
            candidate_nodes: v.placement.pinned_nodes().to_vec(),
            node: v.placement.volume_node().map(str::to_string),
            target_pvc: (dr.spec.target == RestoreTarget::NewClaim)
                .then(|| labels::new_claim_name(split(&v.pvc).1, &dr.name_any())),
            paths: dr.spec.paths_for(&v.pvc).cloned(),
            scratch_pvc: dr
                .spec
                .fills_scratch_first(&v.pvc)
                .then(|| labels::scratch_claim_name(split(&v.pvc).1, &dr.name_any())),
            keep_extra_files: dr.spec.keeps_extra_files(),
            pvc: v.pvc,
            phase: VolumePhase::Pending,
            pod_volume_backup: Some(v.pod_volume_backup),
            uploader_type: v.uploader_type,
            volume: v.volume,
            snapshot_id: Some(v.snapshot_id),
            total_bytes: v.total_bytes,
            pvc_uid: v.pvc_uid,
            ..Default::default()
        })
        .collect();
    status.consumers = planned
        .into_iter()
        .map(|c| ConsumerRecord {
            kind: c.kind,
            namespace: c.namespace,
            name: c.name,
            pvcs: c.pvcs,
            state: ConsumerState::Running,
            replicas: c.replicas,
            original: None,
            held_by: None,
            switch_to: c.switch_to,
            stopped_at: None,
            resumed_at: None,
            uid: None,
        })
        .collect();
    status.git_ops = git_ops;
    status.phase = Phase::Restoring;
    let note = format!(
        "restoring {} volumes from backup {}. {}",
        status.volumes.len(),
        backup_name,
        dr.spec.way()
    );
    status.backup_name = Some(backup_name);
    ctx.event(dr, false, reasons::VALIDATED, note);
    if dr.spec.writes_under_running_consumers() {
        let note = crate::plan::ONLINE_WARNING.to_string();
        ctx.event(dr, true, reasons::RUNNING_CONSUMERS, note);
    }
    // Deciding the first volumes touches nothing, so it goes out in the same write as the
    // validation's result; acting on it waits for that write. The consumers were found
    // a moment ago: reading every workload of their namespaces again would find the same.
    restoring::record(dr, ctx, status, deleting, Some(&consumers)).await?;
    Ok(Next::Again)
}

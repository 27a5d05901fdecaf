//! One pass of the state machine: observe, decide, act, record.

use std::sync::Arc;
use std::time::Duration;

use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use serde_json::json;
use tracing::{debug, info, warn};

use crate::api::{
    ConsumerRecord, ConsumerState, DataRestore, DataRestoreStatus, Phase, VolumePhase, VolumeStatus,
};
use crate::labels::{FIELD_MANAGER, FINALIZER};
use crate::validate::{self, ValidateError};

use super::status::{self, now};
use super::{Context, Error, Next, Result, restoring};

pub async fn reconcile(dr: Arc<DataRestore>, ctx: Arc<Context>) -> Result<Action> {
    let api: Api<DataRestore> =
        Api::namespaced(ctx.client.clone(), &dr.namespace().unwrap_or_default());
    let uid = dr.uid().unwrap_or_default();
    // The watch cache may not hold refill's own last status write yet; acting on the
    // older copy would redo steps and write old phases back. One read avoids that.
    let mut dr = match ctx.last_written(&uid) {
        Some(rv) if dr.resource_version().as_deref() != Some(rv.as_str()) => {
            match api.get_opt(&dr.name_any()).await? {
                Some(fresh) => fresh,
                None => return Ok(Action::await_change()),
            }
        }
        _ => (*dr).clone(),
    };
    let deleting = dr.metadata.deletion_timestamp.is_some();
    let has_finalizer = dr.finalizers().iter().any(|f| f == FINALIZER);

    if !has_finalizer {
        if deleting || dr.status.as_ref().is_some_and(|s| s.phase.is_terminal()) {
            ctx.forget(&dr);
            return Ok(Action::await_change());
        }
        // The finalizer comes first, so a deletion can never skip bringing consumers back.
        let mut finalizers = dr.finalizers().to_vec();
        finalizers.push(FINALIZER.to_string());
        let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": dr.resource_version()}});
        api.patch(
            &dr.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await?;
        return Ok(Action::await_change());
    }

    // A few passes in a row at most: each one that only recorded decisions is followed
    // at once by one that acts on them.
    for _ in 0..4 {
        let started = std::time::Instant::now();
        let before = dr.status.clone().unwrap_or_default();
        let mut status = before.clone();
        let next = step(&dr, &ctx, &mut status, deleting).await?;
        status.summary = (!status.volumes.is_empty()).then(|| status::summary(&status.volumes));
        status.observed_generation = dr.metadata.generation;
        status.conditions = status::conditions(&status, dr.metadata.generation);

        let again = matches!(next, Next::Again);
        let mut action = match next {
            Next::Again => Action::requeue(Duration::ZERO),
            Next::Then(action) => action,
        };
        let changed = status != before;
        if changed {
            let progress_only = status::only_progress_differs(&before, &status);
            match ctx.progress_wait(&uid).filter(|_| progress_only) {
                Some(wait) => action = Action::requeue(wait),
                None => {
                    dr = write_status(&api, &dr, &status).await?;
                    ctx.wrote(&uid, dr.resource_version());
                }
            }
        }

        debug!(
            restore = %dr.name_any(),
            phase = ?status.phase,
            volumes = status::phase_counts(&status.volumes),
            changed,
            "pass took {} ms",
            started.elapsed().as_millis()
        );
        if status.phase.is_terminal() {
            // Everything is rolled back by now; a finished restore needs no finalizer.
            ctx.forget(&dr);
            remove_finalizer(&api, &dr).await?;
            return Ok(Action::await_change());
        }
        if !again {
            return Ok(action);
        }
    }
    Ok(Action::requeue(Duration::ZERO))
}

async fn write_status(
    api: &Api<DataRestore>,
    dr: &DataRestore,
    status: &DataRestoreStatus,
) -> Result<DataRestore> {
    // Server-side apply: fields refill stops setting (a cleared message) really go away.
    // The resourceVersion makes a pass that started from a stale copy (its own last
    // write not yet seen) fail with a conflict instead of writing old phases back.
    let body = json!({
        "apiVersion": crate::api::API_VERSION,
        "kind": "DataRestore",
        "metadata": {"resourceVersion": dr.resource_version()},
        "status": status,
    });
    api.patch_status(
        &dr.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(body),
    )
    .await
    .map_err(Error::from)
}

async fn remove_finalizer(api: &Api<DataRestore>, dr: &DataRestore) -> Result<()> {
    match patch_out_finalizer(api, dr).await {
        // The copy was stale. Most often the pass that finished the restore removed the
        // finalizer already and this is a reconcile of the older copy: a fresh read
        // tells, instead of a failed reconcile and a warning after every restore.
        Err(kube::Error::Api(e)) if e.code == 409 => match api.get_opt(&dr.name_any()).await? {
            Some(fresh) if fresh.finalizers().iter().any(|f| f == FINALIZER) => {
                Ok(patch_out_finalizer(api, &fresh).await?)
            }
            _ => Ok(()),
        },
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        other => Ok(other?),
    }
}

async fn patch_out_finalizer(api: &Api<DataRestore>, dr: &DataRestore) -> kube::Result<()> {
    let finalizers: Vec<&String> = dr.finalizers().iter().filter(|f| *f != FINALIZER).collect();
    let patch =
        json!({"metadata": {"finalizers": finalizers, "resourceVersion": dr.resource_version()}});
    api.patch(
        &dr.name_any(),
        &PatchParams::default(),
        &Patch::Merge(patch),
    )
    .await
    .map(drop)
}

async fn step(
    dr: &DataRestore,
    ctx: &Context,
    status: &mut DataRestoreStatus,
    deleting: bool,
) -> Result<Next> {
    loop {
        match status.phase {
            Phase::New => {
                status.phase = Phase::Validating;
                status.start_time = Some(now());
            }
            Phase::Validating => {
                if deleting || dr.spec.cancel {
                    status.phase = Phase::Canceled;
                    status.completion_time = Some(now());
                    return Ok(Next::Then(Action::await_change()));
                }
                let next = validating(dr, ctx, status).await?;
                if status.phase == Phase::Restoring {
                    // Deciding the first volumes touches nothing, so it goes out in the
                    // same write as the validation's result; acting waits for that write.
                    restoring::record(dr, ctx, status, deleting).await?;
                }
                return Ok(next);
            }
            Phase::Restoring | Phase::Finalizing => {
                return restoring::step(dr, ctx, status, deleting).await;
            }
            _ => return Ok(Next::Then(Action::await_change())),
        }
    }
}

async fn validating(
    dr: &DataRestore,
    ctx: &Context,
    status: &mut DataRestoreStatus,
) -> Result<Next> {
    let invalid = |status: &mut DataRestoreStatus, errors: Vec<String>| {
        status.phase = Phase::Failed;
        status.errors = errors;
        status.completion_time = Some(now());
    };
    let errors = crate::plan::spec_errors(&dr.spec);
    if !errors.is_empty() {
        invalid(status, errors);
        ctx.event(dr, true, "FailedValidation", status.errors.join("; "));
        return Ok(Next::Then(Action::await_change()));
    }
    match validate::plan(&ctx.client, Some(&ctx.known), dr).await {
        Err(ValidateError::Invalid(e)) => {
            info!(restore = %dr.name_any(), "invalid: {e}");
            invalid(status, e.errors);
            ctx.event(dr, true, "FailedValidation", status.errors.join("; "));
            Ok(Next::Then(Action::await_change()))
        }
        Err(ValidateError::Kube(e)) => Err(Error::Kube(e)),
        Ok(plan) => {
            status.backup_name = Some(plan.backup_name.clone());
            status.warnings = plan.warnings.clone();
            status.volumes = plan
                .volumes
                .iter()
                .map(|v| VolumeStatus {
                    pvc: v.pvc.clone(),
                    phase: VolumePhase::Pending,
                    pod_volume_backup: Some(v.pod_volume_backup.clone()),
                    volume: v.volume.clone(),
                    snapshot_id: Some(v.snapshot_id.clone()),
                    total_bytes: v.total_bytes,
                    candidate_nodes: match &v.placement {
                        validate::Placement::Candidates(nodes) => nodes.clone(),
                        _ => Vec::new(),
                    },
                    pvc_uid: v.pvc_uid.clone(),
                    ..Default::default()
                })
                .collect();
            status.consumers = plan
                .consumers
                .iter()
                .map(|c| ConsumerRecord {
                    kind: c.kind,
                    namespace: c.namespace.clone(),
                    name: c.name.clone(),
                    pvcs: c.pvcs.clone(),
                    state: ConsumerState::Running,
                    replicas: c.replicas,
                    original: None,
                })
                .collect();
            status.phase = Phase::Restoring;
            let note = format!(
                "restoring {} volumes from backup {}",
                status.volumes.len(),
                plan.backup_name
            );
            ctx.event(dr, false, "Validated", note);
            // Straight on to the first volumes, from the status just written.
            Ok(Next::Again)
        }
    }
}

pub fn error_policy(dr: Arc<DataRestore>, error: &Error, _ctx: Arc<Context>) -> Action {
    warn!(restore = %dr.name_any(), "will retry: {error}");
    // A conflict only means the object moved on: look again at once.
    match error {
        Error::Kube(kube::Error::Api(e)) if e.code == 409 => {
            Action::requeue(Duration::from_millis(100))
        }
        _ => Action::requeue(Duration::from_secs(5)),
    }
}

//! The entry point of every reconcile: take a fresh copy, hold the finalizer, run the
//! current phase (see [`super::phase`]), write the status, and say when to come back.

use std::sync::Arc;
use std::time::Duration;

use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use serde_json::json;
use tracing::{debug, warn};

use crate::api::{DataRestore, DataRestoreStatus};
use crate::labels::{FIELD_MANAGER, FINALIZER};

use super::ledger;
use super::phase::{self, Next};
use super::status;
use super::{Context, Error, Result};
use crate::controller::runtime::error::Category;

/// Passes in a row within one reconcile at most: each that only recorded decisions is
/// followed at once by one that acts on them.
const MAX_PASSES: usize = 4;

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

    for _ in 0..MAX_PASSES {
        let started = std::time::Instant::now();
        let mut before = dr.status.clone().unwrap_or_default();
        ctx.ledger.load(&ctx.client, &dr, &mut before).await?;
        let mut status = before.clone();
        // What a pass did is in `status` even when it failed part-way: it is written
        // before the error is reported, so no effect goes unrecorded.
        let result = phase::pass(&dr, &ctx, &mut status, deleting).await;
        ledger::in_read_order(&mut status);
        status.summary = (!status.volumes.is_empty()).then(|| status::summary(&status.volumes));
        status.tally(|v| ledger::record_name(&dr, v));
        status.observed_generation = dr.metadata.generation;
        let online = dr.spec.writes_under_running_consumers();
        status.conditions = status::conditions(&status, dr.metadata.generation, online);

        let mut wait = None;
        let changed = status != before;
        if changed {
            let progress_only = status::only_progress_differs(&before, &status);
            match ctx
                .progress_wait(&uid)
                .filter(|_| progress_only && result.is_ok())
            {
                Some(throttled) => wait = Some(throttled),
                None => {
                    // The volumes' records first: the DataRestore's counts follow them.
                    ctx.ledger.save(&ctx.client, &dr, &before, &status).await?;
                    if head_differs(&before, &status) {
                        dr = write_status(&api, &dr, &status).await?;
                    }
                    ctx.wrote(&uid, dr.resource_version());
                    // `before` is the status last written: `dr` is what a write returned.
                    ctx.config.metrics.written(&uid, &before, &status);
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
        let next = result?;
        ctx.backoffs.reset(&uid);
        match next {
            Next::Again => continue,
            Next::Done => {
                // Everything is rolled back by now; a finished restore needs no finalizer.
                ctx.forget(&dr);
                remove_finalizer(&api, &dr).await?;
                return Ok(Action::await_change());
            }
            Next::After(after) => return Ok(Action::requeue(wait.map_or(after, |w| w.min(after)))),
        }
    }
    Ok(Action::requeue(Duration::ZERO))
}

/// Whether what the DataRestore object itself holds of the status differs: its
/// volumes and consumers are kept elsewhere (see [`ledger`]).
fn head_differs(a: &DataRestoreStatus, b: &DataRestoreStatus) -> bool {
    serde_json::to_vec(a).ok() != serde_json::to_vec(b).ok()
}

/// The body of a status write, serialized straight from the status.
#[derive(serde::Serialize, Debug)]
#[serde(rename_all = "camelCase")]
struct StatusApply<'a> {
    api_version: &'static str,
    kind: &'static str,
    metadata: ResourceVersionOnly,
    status: &'a DataRestoreStatus,
}

#[derive(serde::Serialize, Debug)]
#[serde(rename_all = "camelCase")]
struct ResourceVersionOnly {
    resource_version: Option<String>,
}

async fn write_status(
    api: &Api<DataRestore>,
    dr: &DataRestore,
    status: &DataRestoreStatus,
) -> Result<DataRestore> {
    // Server-side apply: fields refill stops setting (a cleared message) really go away.
    // The resourceVersion makes a pass that started from a stale copy (its own last
    // write not yet seen) fail with a conflict instead of writing old phases back.
    let body = StatusApply {
        api_version: crate::api::API_VERSION,
        kind: "DataRestore",
        metadata: ResourceVersionOnly {
            resource_version: dr.resource_version(),
        },
        status,
    };
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

/// How soon a restore whose pass failed is looked at again: at once after a conflict
/// (the object only moved on), else after a backoff that grows per restore.
pub fn error_policy(dr: Arc<DataRestore>, error: &Error, ctx: Arc<Context>) -> Action {
    let uid = dr.uid().unwrap_or_default();
    ctx.config.metrics.reconcile_failed(error.category());
    match error.category() {
        Category::Conflict => Action::requeue(Duration::from_millis(100)),
        category => {
            let delay = ctx.backoffs.next(&uid);
            warn!(restore = %dr.name_any(), ?category, "will retry in {delay:?}: {error}");
            Action::requeue(delay)
        }
    }
}

#[cfg(test)]
mod requests;

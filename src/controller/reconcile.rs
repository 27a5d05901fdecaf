//! The entry point of every reconcile: take a fresh copy, hold the finalizer, run the
//! current phase (see [`super::phase`]), write the status, and say when to come back.

use std::sync::Arc;
use std::time::Duration;

use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use tracing::{debug, warn};

use crate::api::{DataRestore, DataRestoreStatus};

use super::ledger;
use super::phase::{self, Next};
use super::runtime::error::Category;
use super::runtime::object_writes::{self, Precondition, holds_finalizer, remove_finalizer};
use super::status;
use super::{Context, Error, Result};

/// Passes in a row within one reconcile at most: each that only recorded decisions is
/// followed at once by one that acts on them.
const MAX_PASSES: usize = 4;

pub(super) async fn reconcile(dr: Arc<DataRestore>, ctx: Arc<Context>) -> Result<Action> {
    let api: Api<DataRestore> =
        Api::namespaced(ctx.client.clone(), &dr.namespace().unwrap_or_default());
    let uid = dr.uid().unwrap_or_default();
    // The watch cache may not hold refill's own last status write yet; acting on the
    // older copy would redo steps and write old phases back. One read avoids that.
    let mut dr = match ctx.newest_known(&uid) {
        Some(rv) if dr.resource_version().as_deref() != Some(rv.as_str()) => {
            match api.get_opt(&dr.name_any()).await? {
                Some(fresh) => {
                    ctx.read_again(&uid, fresh.resource_version());
                    fresh
                }
                None => return Ok(Action::await_change()),
            }
        }
        _ => (*dr).clone(),
    };
    let deleting = dr.metadata.deletion_timestamp.is_some();
    if !holds_finalizer(&dr) {
        if deleting || dr.status.as_ref().is_some_and(|s| s.phase.is_terminal()) {
            ctx.forget(&dr);
            return Ok(Action::await_change());
        }
        // The finalizer comes first, so a deletion can never skip bringing consumers back.
        object_writes::set_finalizer(&api, &dr, true).await?;
        return Ok(Action::await_change());
    }

    for _ in 0..MAX_PASSES {
        let started = std::time::Instant::now();
        let mut before = dr.status.clone().unwrap_or_default();
        ctx.ledger.load(&ctx.client, &dr, &mut before).await?;
        let mut status = before.clone();
        // What a pass did is in `status` even when it failed part-way: it is written
        // before the error is reported, so no effect goes unrecorded.
        let result = phase::pass(&dr, &ctx, &before, &mut status, deleting).await;
        ledger::in_read_order(&mut status);
        status.summary = (!status.volumes.is_empty()).then(|| status::summary(&status.volumes));
        status.tally(|v| ledger::record_name(&dr, v));
        status.observed_generation = dr.metadata.generation;
        let online = dr.spec.writes_under_running_consumers();
        status.conditions = status::conditions(&status, dr.metadata.generation, online);

        // A record that lags goes out once a step waits for it or it lagged too long,
        // even from a pass that changed nothing.
        let owes = ctx.ledger.owes(&uid);
        let changed = status != before || owes;
        let written = if changed {
            let clean = result.is_ok();
            write(&ctx, &api, &mut dr, &before, &status, (clean, owes)).await
        } else {
            Ok(None)
        };
        debug!(
            restore = %dr.name_any(),
            phase = ?status.phase,
            volumes = status::phase_counts(&status.volumes),
            changed,
            "pass took {} ms",
            started.elapsed().as_millis()
        );
        // Whatever the write did, the ledger takes back the records the cluster holds
        // now: a DataRestore write that failed (a conflict) leaves no re-read of every
        // record behind. A record write that failed made it forget them (see save).
        ctx.ledger.give_back(&uid, &mut before, &mut status);
        let wait = written?;
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

/// Writes a pass's changed status: the volumes' records first, the DataRestore's counts
/// after them. Answers how soon to come back when a write was put off: progress alone
/// (`clean`: the pass did not fail) goes out at most once a second, unless the ledger
/// `owes` a lagging record.
async fn write(
    ctx: &Context,
    api: &Api<DataRestore>,
    dr: &mut DataRestore,
    before: &DataRestoreStatus,
    status: &DataRestoreStatus,
    (clean, owes): (bool, bool),
) -> Result<Option<Duration>> {
    let uid = dr.uid().unwrap_or_default();
    let progress_only = status::only_progress_differs(before, status) && !owes;
    if let Some(throttled) = ctx.progress_wait(&uid).filter(|_| progress_only && clean) {
        return Ok(Some(throttled));
    }
    // The volumes' records first: the DataRestore's counts follow them.
    ctx.ledger.save(&ctx.client, dr, before, status).await?;
    let mut wait = None;
    if head_differs(before, status) {
        let tally_only = clean && status::only_tally_differs(before, status);
        match ctx.progress_wait(&uid).filter(|_| tally_only) {
            // The counts catch up with the records within a second.
            Some(throttled) => wait = Some(throttled),
            None => {
                // The resourceVersion makes a pass that started from a stale copy (its
                // own last write not yet seen) fail with a conflict instead of writing
                // old phases back.
                let read = Precondition::At(dr.resource_version());
                *dr = object_writes::apply_status(api, &dr.name_any(), read, status).await?;
                ctx.wrote(&uid, dr.resource_version());
            }
        }
    }
    // `before` is the status last written: `dr` is what a write returned.
    ctx.config.metrics.written(&uid, before, status);
    Ok(wait)
}

/// Whether what the DataRestore object itself holds of the status differs: its
/// volumes and consumers are kept elsewhere (see [`ledger`]).
fn head_differs(a: &DataRestoreStatus, b: &DataRestoreStatus) -> bool {
    serde_json::to_vec(a).ok() != serde_json::to_vec(b).ok()
}

/// How soon a restore whose pass failed is looked at again: at once after a conflict
/// (the object only moved on), else after a backoff that grows per restore.
pub(super) fn error_policy(dr: Arc<DataRestore>, error: &Error, ctx: Arc<Context>) -> Action {
    let uid = dr.uid().unwrap_or_default();
    ctx.config.metrics.reconcile_failed(error.category());
    match error.category() {
        Category::Conflict => {
            // The copy this pass started from was old: the next one reads a fresh one.
            ctx.read_again(&uid, None);
            Action::requeue(Duration::from_millis(100))
        }
        category => {
            let delay = ctx.backoffs.next(&uid);
            warn!(restore = %dr.name_any(), ?category, "will retry in {delay:?}: {error}");
            Action::requeue(delay)
        }
    }
}

#[cfg(test)]
mod requests;

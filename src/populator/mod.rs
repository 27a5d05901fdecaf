//! refill as a volume populator: a PersistentVolumeClaim whose `spec.dataSourceRef`
//! names a [`crate::api::BackupVolume`] is bound to a volume that already holds what a
//! Velero file-system backup holds of a claim of the same namespace.
//!
//! Kubernetes' populator pattern: a prime claim of the same class and size in Velero's
//! namespace (on the node the scheduler chose for the claim's consumer), a pod there
//! that mounts it with Velero's `restore-wait`, a PodVolumeRestore that Velero's node
//! agent carries out, and then the prime's PV handed to the claim through its
//! `claimRef`. Each pass reads (`observe.rs`), decides one step (`decide.rs`, pure)
//! and does it (`act.rs`); the claim carries refill's finalizer while a fill is under
//! way, so that deleting it takes everything the fill made with it.

mod act;
mod build;
mod condition;
mod decide;
mod observe;
mod source;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use tracing::{info, warn};

use crate::api::PodVolumeRestore;
use crate::controller::forget_managed_fields;
use crate::controller::runtime::error::retry_later;
use crate::controller::runtime::panics;
use crate::controller::{Context, Error, Result};
use crate::labels;
use decide::Step;

pub(crate) use source::{GROUP, KIND};

/// How soon a claim no backup can fill yet is looked at again: a later backup may
/// hold it.
const SOURCE_RECHECK: Duration = Duration::from_secs(300);

/// Event reasons on the claims refill fills.
mod reasons {
    pub(super) const SOURCE_MISSING: &str = "BackupVolumeMissing";
    pub(super) const STARTED: &str = "FillStarted";
    pub(super) const RESTORING: &str = "FillRestoring";
    pub(super) const HANDED_OVER: &str = "FillHandedOver";
    pub(super) const POPULATED: &str = "Populated";
    pub(super) const FAILED: &str = "FillFailed";
    pub(super) const GAVE_UP: &str = "FillGaveUp";
}

/// Fills the claims of every namespace that name a BackupVolume, until the process is
/// asked to stop.
pub(crate) async fn run(ctx: Arc<Context>) {
    let claims: Api<PersistentVolumeClaim> = Api::all(ctx.client.clone());
    let restores: Api<PodVolumeRestore> =
        Api::namespaced(ctx.client.clone(), &ctx.config.namespace);
    let made = watcher::Config::default().labels(labels::POPULATES_UID);
    info!("volume populator started for {GROUP}/{KIND}");
    // Only claims naming a BackupVolume are held (their `dataSourceRef` never changes),
    // and without their managed fields: a cluster's other claims cost nothing here.
    let (reader, writer) = reflector::store();
    let claims = watcher(claims, watcher::Config::default())
        .default_backoff()
        .filter(|event| std::future::ready(names_backup_volume(event)))
        .modify(forget_managed_fields)
        .reflect(writer)
        .applied_objects();
    Controller::for_stream(claims, reader)
        .with_config(ctx.config.runtime())
        // The node agent's progress wakes the claim it fills.
        .watches(restores, made, |pvr: PodVolumeRestore| filled_claim(&pvr))
        .shutdown_on_signal()
        .run(
            |claim, ctx| async move { panics::caught(reconcile(claim, ctx)).await },
            error_policy,
            ctx,
        )
        .for_each(|result| async move {
            if let Err(e) = result {
                warn!("populator reconcile failed: {e}");
            }
        })
        .await;
}

/// Whether a watch event is about a claim the populator fills (errors and the list's
/// bounds pass, so that the watch still restarts and its store still resets).
fn names_backup_volume(
    event: &Result<watcher::Event<PersistentVolumeClaim>, watcher::Error>,
) -> bool {
    match event {
        Ok(
            watcher::Event::Apply(claim)
            | watcher::Event::InitApply(claim)
            | watcher::Event::Delete(claim),
        ) => source::data_source(claim).is_some(),
        _ => true,
    }
}

/// The claim an object made by a fill fills, from its annotation.
fn filled_claim(object: &impl Resource) -> Option<ObjectRef<PersistentVolumeClaim>> {
    let key = object.annotations().get(labels::POPULATES)?;
    let (namespace, name) = key.split_once('/')?;
    Some(ObjectRef::new(name).within(namespace))
}

async fn reconcile(claim: Arc<PersistentVolumeClaim>, ctx: Arc<Context>) -> Result<Action> {
    let Some(source_name) = source::data_source(&claim) else {
        return Ok(Action::await_change());
    };
    let namespace = claim.namespace().unwrap_or_default();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &namespace);
    let read = observe::observe(&ctx, &claim, &source_name).await?;
    let step = decide::decide(&read.seen);
    let event = |warning: bool, reason: &str, note: String| {
        ctx.event_on(claim.object_ref(&()), warning, reason, note);
    };
    if !read.seen.claim.deleting
        && let Some(wanted) = condition::after(&step, read.seen.claim.failures)
        && let Some(change) = condition::change(&claim, &wanted, read.seen.now)
    {
        act::write_condition(&claims, &claim, change).await?;
    }
    let prime = labels::prime_name(&read.seen.claim.uid);
    let velero = &ctx.config.namespace;
    let next = match &step {
        Step::Idle => return Ok(Action::await_change()),
        Step::AddFinalizer => {
            act::finalizer(&claims, &claim, true).await?;
            decide::POLL
        }
        Step::Wait(_, after) => *after,
        Step::SourceMissing(why) => {
            event(
                true,
                reasons::SOURCE_MISSING,
                format!(
                    "{why}; the claim stays Pending, and refill looks again every {}s",
                    SOURCE_RECHECK.as_secs()
                ),
            );
            SOURCE_RECHECK
        }
        Step::CreatePrime => {
            act::create_prime(&ctx, &claim).await?;
            event(
                false,
                reasons::STARTED,
                format!("filling from the backup: prime claim {velero}/{prime}"),
            );
            decide::POLL
        }
        Step::CreatePod => {
            act::create_pod(&ctx, &claim, &read).await?;
            decide::POLL
        }
        Step::CreateRestore => {
            act::create_restore(&ctx, &claim, &read).await?;
            let restore = labels::prime_restore_name(&read.seen.claim.uid);
            event(
                false,
                reasons::RESTORING,
                format!(
                    "Velero's node agent writes the backup's files: PodVolumeRestore {velero}/{restore}"
                ),
            );
            decide::POLL
        }
        Step::DeletePod => {
            act::delete_pod(&ctx, &read).await?;
            decide::POLL
        }
        Step::HandOver { volume } => {
            act::hand_over(&ctx, &claims, &claim, volume).await?;
            event(
                false,
                reasons::HANDED_OVER,
                format!("volume {volume} holds the backup's files and is handed to the claim"),
            );
            decide::POLL
        }
        Step::DeletePrime => {
            act::delete_prime(&ctx, &read).await?;
            decide::POLL
        }
        Step::Failed(why) => {
            act::clean_up(&ctx, &read).await?;
            let failures = read.seen.claim.failures;
            act::count_failure(&claims, &claim, failures + 1, read.seen.now).await?;
            let note = condition::failure_note(failures, why);
            event(true, reasons::FAILED, note);
            decide::retry_after(failures + 1)
        }
        Step::GiveUp(why) => {
            event(true, reasons::GAVE_UP, why.clone());
            return Ok(Action::await_change());
        }
        Step::CleanUp => {
            act::clean_up(&ctx, &read).await?;
            decide::POLL
        }
        Step::Done => {
            act::finalizer(&claims, &claim, false).await?;
            if read.seen.claim.bound && !read.seen.claim.deleting {
                event(
                    false,
                    reasons::POPULATED,
                    "the claim is bound to a volume holding the backup's files".into(),
                );
            }
            return Ok(Action::await_change());
        }
    };
    if !matches!(step, Step::Wait(..)) {
        info!(claim = %format!("{namespace}/{}", claim.name_any()), ?step, "populator step");
    }
    Ok(Action::requeue(next))
}

fn error_policy(claim: Arc<PersistentVolumeClaim>, error: &Error, ctx: Arc<Context>) -> Action {
    retry_later(&*claim, "populated claim", error, &ctx)
}

//! DataRestoreSchedules in Velero's namespace: each pass reads the restores a schedule
//! made and the newest Completed backup of the Velero Schedule it follows, lets the
//! pure [`decide`] say what to do, and does it. The DataRestores it makes are the
//! record of what it did: named from the schedule and the backup (or cron time) they
//! are for, so a pass repeated after a restart makes none twice.

pub(super) mod decide;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, ObjectMeta, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use tracing::{info, warn};

use crate::api::{Backup, DataRestore, DataRestoreSchedule};
use crate::labels;

use super::runtime::error::{is_conflict, is_not_found, retry_later};
use super::runtime::object_writes::{self, Precondition};
use super::status::now;
use super::{Context, Error, Result};
use crate::controller::runtime::panics::{self, Audience};
use decide::{Made, ScheduleSeen, Start};

/// The longest a schedule waits before it looks again, whatever its cron says: a
/// missed watch event costs at most this.
const RECHECK: Duration = Duration::from_secs(300);

/// Watches the schedules of Velero's namespace, the restores they made and Velero's
/// backups, until the process is asked to stop.
pub(super) async fn run(ctx: Arc<Context>) {
    let client = ctx.client.clone();
    let namespace = ctx.config.namespace.clone();
    let schedules: Api<DataRestoreSchedule> = Api::namespaced(client.clone(), &namespace);
    let restores: Api<DataRestore> = Api::namespaced(client.clone(), &namespace);
    let backups: Api<Backup> = Api::namespaced(client, &namespace);
    let controller =
        Controller::new(schedules, watcher::Config::default()).with_config(ctx.config.runtime());
    let store = controller.store();
    let made = watcher::Config::default().labels(labels::SCHEDULE_UID);
    controller
        .owns(restores, made)
        // A backup concerns the schedules that follow its Velero Schedule.
        .watches(
            backups,
            watcher::Config::default(),
            move |backup: Backup| {
                let followed = backup.labels().get(labels::SCHEDULE_NAME).cloned();
                store
                    .state()
                    .into_iter()
                    .filter(|s| followed.is_some() && s.spec.velero_schedule == followed)
                    .map(|s| ObjectRef::from_obj(&*s))
                    .collect::<Vec<_>>()
            },
        )
        .shutdown_on_signal()
        .run(
            |schedule, ctx| {
                panics::guarded(
                    schedule,
                    ctx,
                    "DataRestoreSchedule",
                    Audience::Admin,
                    reconcile,
                )
            },
            error_policy,
            ctx,
        )
        .for_each(|result| async move {
            if let Err(e) = result {
                warn!("schedule reconcile failed: {e}");
            }
        })
        .await;
}

async fn reconcile(schedule: Arc<DataRestoreSchedule>, ctx: Arc<Context>) -> Result<Action> {
    if schedule.metadata.deletion_timestamp.is_some() {
        // Its restores go with it (owner references); a running one rolls back
        // through its own finalizer.
        return Ok(Action::await_change());
    }
    let namespace = ctx.config.namespace.clone();
    let name = schedule.name_any();
    let uid = schedule.uid().unwrap_or_default();
    let schedules: Api<DataRestoreSchedule> = Api::namespaced(ctx.client.clone(), &namespace);
    let restores: Api<DataRestore> = Api::namespaced(ctx.client.clone(), &namespace);

    let mine = ListParams::default().labels(&format!("{}={uid}", labels::SCHEDULE_UID));
    let made: Vec<Made> = restores
        .list(&mine)
        .await?
        .items
        .iter()
        .map(made_of)
        .collect();
    let newest_backup = match &schedule.spec.velero_schedule {
        Some(followed) => newest_completed(&ctx, &namespace, followed).await?,
        None => None,
    };
    let seen = ScheduleSeen {
        created: schedule
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or_else(Timestamp::now, |t| t.0),
        made,
        newest_backup,
        now: Timestamp::now(),
    };
    let previous = schedule.status.clone().unwrap_or_default();
    let generation = schedule.metadata.generation;
    let decision = decide::decide(&schedule.spec, &previous, generation, &seen);
    let mut status = decision.status;

    for old in &decision.delete {
        match restores.delete(old, &Default::default()).await {
            Ok(_) => info!(schedule = %name, restore = %old, "deleted beyond the history limit"),
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    if let Some(start) = &decision.start {
        let made = start_restore(&restores, &schedule, &uid, start).await?;
        info!(schedule = %name, restore = %made, why = %start.why, "started a restore");
        status.active = Some(made.clone());
        status.last_restore = Some(made);
        status.last_run_time = Some(now());
    }
    status.conditions = decide::conditions(&schedule.spec, &status, generation, now());
    if status != previous {
        object_writes::apply_status(&schedules, &name, Precondition::None, &status).await?;
    }
    Ok(Action::requeue(
        decision.requeue.map_or(RECHECK, |wait| wait.min(RECHECK)),
    ))
}

fn made_of(dr: &DataRestore) -> Made {
    let status = dr.status.clone().unwrap_or_default();
    Made {
        name: dr.name_any(),
        phase: status.phase,
        backup: dr.spec.backup_name.clone().or(status.backup_name),
        created: dr
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or_else(Timestamp::now, |t| t.0),
        deleting: dr.metadata.deletion_timestamp.is_some(),
    }
}

/// The newest Completed backup of the Velero Schedule `followed`.
async fn newest_completed(
    ctx: &Context,
    namespace: &str,
    followed: &str,
) -> Result<Option<String>> {
    let backups: Api<Backup> = Api::namespaced(ctx.client.clone(), namespace);
    let of = format!(
        "{}={}",
        labels::SCHEDULE_NAME,
        labels::label_value(followed)
    );
    let list = backups.list(&ListParams::default().labels(&of)).await?;
    Ok(list
        .items
        .into_iter()
        .filter(|b| b.is_completed())
        .max_by_key(|b| (b.completed_at(), b.name_any()))
        .map(|b| b.name_any()))
}

/// The DataRestore of one run: named from the schedule and what the run is for, so
/// that a second attempt finds the first one's.
async fn start_restore(
    restores: &Api<DataRestore>,
    schedule: &DataRestoreSchedule,
    uid: &str,
    start: &Start,
) -> Result<String> {
    let name = labels::schedule_run_name(&schedule.name_any(), uid, &start.why);
    let mut spec = schedule.spec.template.clone();
    if let Some(backup) = &start.backup {
        spec.backup_name = Some(backup.clone());
        spec.schedule_name = None;
    }
    let owner = OwnerReference {
        api_version: DataRestoreSchedule::api_version(&()).into(),
        kind: DataRestoreSchedule::kind(&()).into(),
        name: schedule.name_any(),
        uid: uid.to_string(),
        controller: Some(true),
        block_owner_deletion: None,
    };
    let dr = DataRestore {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: schedule.namespace(),
            labels: Some([(labels::SCHEDULE_UID.to_string(), uid.to_string())].into()),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec,
        status: None,
    };
    match restores.create(&PostParams::default(), &dr).await {
        Ok(_) => Ok(name),
        Err(e) if is_conflict(&e) => Ok(name),
        Err(e) => Err(e.into()),
    }
}

fn error_policy(schedule: Arc<DataRestoreSchedule>, error: &Error, ctx: Arc<Context>) -> Action {
    retry_later(&*schedule, "DataRestoreSchedule", error, &ctx)
}

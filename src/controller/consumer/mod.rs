//! Stopping consumers and bringing them back: thin API calls around the pure
//! [`strategy`] of each kind and the pure [`step`] decision.

#[cfg(test)]
mod requests;
mod settle;
mod step;
mod strategy;
mod switch;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, Client};

use crate::api::{ConsumerKind, ConsumerRecord, ConsumerState};
use crate::controller::status::now;
use crate::labels;

use crate::controller::runtime::error::{
    Category, category_of, has_status, is_conflict, is_not_found,
};

pub(super) use settle::settle_consumers;
pub(super) use step::{ConsumerStep, consumer_steps};
pub(super) use strategy::{Resumed, Strategy, recreatable_pod, restarted};

fn api(client: &Client, record: &ConsumerRecord) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        &record.namespace,
        &record.kind.api_resource(),
    )
}

/// The result of a stop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Stopped {
    /// Stopped by this restore (now or before); `record` holds what brings it back.
    Done,
    /// Another restore holds it: `namespace/name` of that restore. Nothing was changed.
    HeldBy(String),
}

/// Stops one consumer; safe to repeat. Updates the record. For a bare pod,
/// `record.original` must already be recorded in the status.
pub(super) async fn stop(
    client: &Client,
    uid: &str,
    restore: &str,
    record: &mut ConsumerRecord,
) -> kube::Result<Stopped> {
    let api = api(client, record);
    let name = record.name.clone();
    let strategy = Strategy::of(record.kind);
    match strategy {
        Strategy::Delete => {
            // Only the pod that was found: one made since under its name (by its team)
            // is not this restore's to delete, and shows up as a writer of its own.
            let params = DeleteParams {
                preconditions: record.uid.clone().map(|uid| Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..Default::default()
            };
            match api.delete(&name, &params).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) || is_conflict(&e) => {}
                Err(e) => return Err(e),
            }
        }
        Strategy::Wait => {}
        _ => {
            let Some(obj) = api.get_opt(&name).await? else {
                record.state = ConsumerState::Stopped;
                record.stopped_at.get_or_insert_with(now);
                return Ok(Stopped::Done);
            };
            match strategy::holder(&obj) {
                Some((holder, _)) if holder == uid => {
                    record.replicas = strategy::annotation(&obj, labels::ORIGINAL_REPLICAS)
                        .and_then(|v| v.parse().ok())
                        .or(record.replicas);
                }
                // The mark of another restore is a lock: its record of the count is the
                // only true one, and writing ours over it would lose the workload.
                Some((_, restore)) => {
                    record.state = ConsumerState::HeldByOther;
                    record.held_by = Some(restore.to_string());
                    return Ok(Stopped::HeldBy(restore.to_string()));
                }
                None => {
                    let stop = strategy
                        .stop_patch(uid, restore, &obj)
                        .expect("patching strategies have a stop patch");
                    // Conditional on the resourceVersion read: another restore's mark
                    // written in between makes this fail, and the next pass reads again.
                    api.patch(&name, &PatchParams::default(), &Patch::Merge(stop.patch))
                        .await?;
                    record.replicas = stop.replicas.or(record.replicas);
                    record.original = stop.original.or(record.original.take());
                }
            }
        }
    }
    record.state = ConsumerState::Stopped;
    record.stopped_at.get_or_insert_with(now);
    Ok(Stopped::Done)
}

/// Tries the one-request scale back: true when it applied, false when the workload is
/// not as refill left it (or gone) and must be read to decide.
async fn scale_back(
    api: &Api<DynamicObject>,
    name: &str,
    uid: &str,
    original: i32,
) -> kube::Result<bool> {
    let patch: json_patch::Patch =
        serde_json::from_value(strategy::scale_back_patch(uid, original))
            .map_err(kube::Error::SerdeError)?;
    match api
        .patch(name, &PatchParams::default(), &Patch::Json::<()>(patch))
        .await
    {
        Ok(_) => Ok(true),
        // Gone: the read that follows says so, and the record says Gone, not back.
        Err(e) if is_not_found(&e) => Ok(false),
        // A failed test op: someone changed it since, or it was never stopped by us.
        Err(e) if is_conflict(&e) || has_status(&e, 422) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Brings one consumer back, if this restore's mark is on it; safe to repeat.
pub(super) async fn resume(
    client: &Client,
    uid: &str,
    record: &mut ConsumerRecord,
) -> kube::Result<Resumed> {
    let api = api(client, record);
    let resumed = match Strategy::of(record.kind) {
        Strategy::Delete => match &record.original {
            Some(manifest) => recreate(client, uid, record, manifest).await?,
            None => Resumed::Untouched,
        },
        Strategy::Wait => Resumed::Untouched,
        strategy => {
            if strategy == Strategy::Scale
                && let Some(original) = record.replicas
                && record.state == ConsumerState::Stopped
                && scale_back(&api, &record.name, uid, original).await?
            {
                Resumed::ScaledBack(original)
            } else {
                let Some(obj) = api.get_opt(&record.name).await? else {
                    return Ok(finish(record, Resumed::Gone));
                };
                match strategy::holder(&obj) {
                    Some((holder, _)) if holder == uid => {
                        let (patch, resumed) = strategy::resume_patch(record.kind, record, &obj);
                        api.patch(&record.name, &PatchParams::default(), &Patch::Merge(patch))
                            .await?;
                        resumed
                    }
                    // Another restore marked it after refill's mark went: that restore's
                    // record brings it back, and this status must not say it is back.
                    Some((_, other)) if record.state == ConsumerState::Stopped => {
                        Resumed::HeldElsewhere(other.to_string())
                    }
                    // refill's mark went while it was stopped (a `kubectl replace`, a forced
                    // Helm upgrade, an Argo CD Replace sync). The restore's own record says
                    // what to bring back; the write is conditional on what was read.
                    None if record.state == ConsumerState::Stopped => {
                        let (mut patch, resumed) =
                            strategy::resume_patch(record.kind, record, &obj);
                        patch["metadata"]["resourceVersion"] =
                            serde_json::json!(obj.metadata.resource_version);
                        tracing::warn!(
                            workload = %describe(record),
                            "refill's mark is gone from it; bringing it back from the restore's record"
                        );
                        api.patch(&record.name, &PatchParams::default(), &Patch::Merge(patch))
                            .await?;
                        resumed
                    }
                    _ => Resumed::Untouched,
                }
            }
        }
    };
    Ok(finish(record, resumed))
}

/// Creates a deleted bare pod again from its record. A pod already under its name is
/// refill's own from an earlier pass only when it carries this restore's mark; any other
/// was made by someone else while it was stopped, and is neither deleted nor replaced.
async fn recreate(
    client: &Client,
    uid: &str,
    record: &ConsumerRecord,
    manifest: &str,
) -> kube::Result<Resumed> {
    let pod = strategy::pod_to_recreate(manifest, uid).map_err(kube::Error::SerdeError)?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &record.namespace);
    match pods.create(&PostParams::default(), &pod).await {
        Ok(_) => Ok(Resumed::Started),
        Err(e) if is_conflict(&e) => match pods.get_opt(&record.name).await? {
            Some(found) => Ok(strategy::found_under_name(&found, uid)),
            // Gone again since the refusal: the next pass creates it.
            None => Err(e),
        },
        Err(e) => Err(e),
    }
}

/// Records where a resume left the consumer: back only when it is.
fn finish(record: &mut ConsumerRecord, resumed: Resumed) -> Resumed {
    record.state = strategy::state_after(record.state, &resumed);
    if let Resumed::HeldElsewhere(other) = &resumed {
        record.held_by = Some(other.clone());
    }
    if record.state == ConsumerState::Resumed && record.stopped_at.is_some() {
        record.resumed_at.get_or_insert_with(now);
    }
    resumed
}

/// Brings a stopped workload back on its new claim (spec.switchWorkloads) in one
/// conditional write; safe to repeat. A workload no longer as refill left it is brought
/// back as [`resume`] would. None: it changed between the read and the write, and the
/// next pass reads it again.
pub(super) async fn switch(
    client: &Client,
    uid: &str,
    restore: &str,
    record: &mut ConsumerRecord,
) -> kube::Result<Option<Resumed>> {
    let api = api(client, record);
    let Some(obj) = api.get_opt(&record.name).await? else {
        return resume(client, uid, record).await.map(Some);
    };
    let from = record
        .pvcs
        .first()
        .and_then(|pvc| pvc.split_once('/'))
        .map(|(_, claim)| claim.to_string())
        .unwrap_or_default();
    let to = record.switch_to.clone().unwrap_or_default();
    let switched = |record: &mut ConsumerRecord, scaled_to| {
        record.state = ConsumerState::Switched;
        record.resumed_at.get_or_insert_with(now);
        Some(Resumed::Switched {
            from: from.clone(),
            to: to.clone(),
            scaled_to,
        })
    };
    if switch::switched_already(record, &obj, restore) {
        return Ok(switched(record, None));
    }
    let held = strategy::holder(&obj).is_some_and(|(h, _)| h == uid);
    let Some(change) = held
        .then(|| switch::switch_patch(record, &obj, &from, uid, restore))
        .flatten()
    else {
        return resume(client, uid, record).await.map(Some);
    };
    let patch: json_patch::Patch =
        serde_json::from_value(change.patch).map_err(kube::Error::SerdeError)?;
    match api
        .patch(
            &record.name,
            &PatchParams::default(),
            &Patch::Json::<()>(patch),
        )
        .await
    {
        Ok(_) => Ok(switched(record, change.scaled_to)),
        Err(e) if is_not_found(&e) => resume(client, uid, record).await.map(Some),
        Err(e) if category_of(&e) != Category::Transient => {
            // Someone changed it since it was read (a failed test): read it again next
            // pass. Unchanged, the switch itself is refused (an admission policy on its
            // template, say): it comes back on the PVC rather than stay stopped.
            let now = api.get_opt(&record.name).await?;
            let version = |o: &DynamicObject| o.metadata.resource_version.clone();
            if now.is_some_and(|now| version(&now) != version(&obj)) {
                return Ok(None);
            }
            tracing::warn!(
                workload = %describe(record),
                "the switch was refused, bringing it back on its claim: {e}"
            );
            resume(client, uid, record).await.map(Some)
        }
        Err(e) => Err(e),
    }
}

/// Whether this restore's mark is on the consumer (for a record whose stop may or may
/// not have applied).
pub(super) async fn marked(
    client: &Client,
    uid: &str,
    record: &ConsumerRecord,
) -> kube::Result<bool> {
    if !Strategy::of(record.kind).patches() {
        return Ok(record.state == ConsumerState::Stopped);
    }
    Ok(api(client, record)
        .get_opt(&record.name)
        .await?
        .is_some_and(|obj| strategy::holder(&obj).is_some_and(|(h, _)| h == uid)))
}

/// When a stopped consumer was started again by someone else, says so, naming who when
/// the object's managed fields tell.
pub(super) async fn interference(
    client: &Client,
    uid: &str,
    record: &ConsumerRecord,
) -> kube::Result<Option<String>> {
    if record.state != ConsumerState::Stopped || !Strategy::of(record.kind).patches() {
        return Ok(None);
    }
    let Some(obj) = api(client, record).get_opt(&record.name).await? else {
        return Ok(None);
    };
    Ok(restarted(record, &obj, uid))
}

/// `Deployment shop/web`, for messages.
pub(super) fn describe(record: &ConsumerRecord) -> String {
    record.kind.describe(&record.namespace, &record.name)
}

/// The words for a stop that was applied.
pub(super) fn stop_note(record: &ConsumerRecord) -> String {
    let what = describe(record);
    match (Strategy::of(record.kind), record.replicas) {
        (Strategy::Scale, Some(n)) => format!("scaled {what} from {n} to 0"),
        (Strategy::Suspend, _) => format!("suspended {what}"),
        (Strategy::Park, _) => format!("parked {what} on no node"),
        (Strategy::Delete, _) => format!("deleted {what}; it is created again afterwards"),
        _ => format!("waiting for {what} to end"),
    }
}

/// The words for a resume, saying what was really done.
pub(super) fn resume_note(record: &ConsumerRecord, resumed: &Resumed) -> Option<String> {
    let what = describe(record);
    Some(match resumed {
        Resumed::ScaledBack(n) => format!("scaled {what} back to {n}"),
        Resumed::KeptTheirs(n) => {
            format!("{what} was already at {n} replicas, set by someone else; left it there")
        }
        Resumed::Started if record.kind == ConsumerKind::Pod => format!("created {what} again"),
        Resumed::Started => format!("started {what} again"),
        Resumed::Switched {
            from,
            to,
            scaled_to,
        } => {
            let count = match scaled_to {
                Some(n) => format!(" and scaled it back to {n}"),
                None => String::new(),
            };
            format!("switched {what} from PVC {from} to PVC {to}{count}")
        }
        Resumed::Gone => format!("{what} was deleted while it was stopped; nothing to bring back"),
        Resumed::Replaced => format!(
            "another pod took the name of {what} while it was stopped; refill left that pod as it is and did not create the recorded one again"
        ),
        Resumed::HeldElsewhere(other) => format!(
            "{what} lost refill's mark while stopped and was stopped again by DataRestore {other}; that restore brings it back"
        ),
        Resumed::Untouched => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: ConsumerKind, replicas: Option<i32>) -> ConsumerRecord {
        ConsumerRecord {
            kind,
            namespace: "shop".into(),
            name: "web".into(),
            pvcs: vec![],
            state: ConsumerState::Stopped,
            replicas,
            original: None,
            held_by: None,
            switch_to: None,
            stopped_at: None,
            resumed_at: None,
            uid: None,
        }
    }

    #[test]
    fn notes_say_exactly_what_was_done() {
        let deploy = record(ConsumerKind::Deployment, Some(2));
        assert_eq!(stop_note(&deploy), "scaled Deployment shop/web from 2 to 0");
        assert_eq!(
            resume_note(&deploy, &Resumed::ScaledBack(2)).unwrap(),
            "scaled Deployment shop/web back to 2"
        );
        assert_eq!(
            resume_note(&deploy, &Resumed::KeptTheirs(3)).unwrap(),
            "Deployment shop/web was already at 3 replicas, set by someone else; left it there"
        );
        assert!(resume_note(&deploy, &Resumed::Untouched).is_none());
        let cron = record(ConsumerKind::CronJob, None);
        assert_eq!(stop_note(&cron), "suspended CronJob shop/web");
    }
}

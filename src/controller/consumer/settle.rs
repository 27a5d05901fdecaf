//! Applies the consumer steps of a pass: stop, bring back, or keep stopped.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::ResourceExt;

use crate::api::{ConsumerRecord, ConsumerState, DataRestore, DataRestoreStatus};
use crate::controller::runtime::concurrent::for_each_concurrently;
use crate::controller::runtime::events::digest;
use crate::controller::{Context, Result, reasons};

use super::{ConsumerStep, Stopped, consumer_steps};

/// Stops, brings back or keeps stopped the consumers whose turn it is.
pub(crate) async fn settle_consumers(
    dr: &DataRestore,
    ctx: &Context,
    status: &mut DataRestoreStatus,
    uid: &str,
) -> Result<()> {
    let steps: BTreeMap<usize, ConsumerStep> = consumer_steps(status, dr.spec.on_failure)
        .into_iter()
        .enumerate()
        .filter(|(_, step)| {
            matches!(
                step,
                ConsumerStep::Stop
                    | ConsumerStep::Resume
                    | ConsumerStep::Switch
                    | ConsumerStep::KeepStopped
            )
        })
        .collect();
    // Only the consumers whose turn it is: the others may be thousands.
    let records: BTreeMap<usize, ConsumerRecord> = steps
        .keys()
        .map(|&i| (i, status.consumers[i].clone()))
        .collect();
    let restore = format!("{}/{}", dr.namespace().unwrap_or_default(), dr.name_any());
    let mut news: BTreeMap<&'static str, Vec<(String, Option<ObjectReference>)>> = BTreeMap::new();
    let settled = for_each_concurrently(
        steps.keys().copied(),
        |i| {
            let mut record = records[&i].clone();
            let step = steps[&i];
            let restore = restore.clone();
            async move {
                let news = settle_consumer(dr, ctx, uid, &restore, &mut record, step).await?;
                Ok((record, news))
            }
        },
        |i, (record, news_of_one)| {
            status.consumers[i] = record;
            if let Some((reason, note, about)) = news_of_one {
                news.entry(reason).or_default().push((note, about));
            }
        },
    )
    .await;
    // One Event per kind of news and pass, not one per consumer: a restore of many
    // claims would otherwise write hundreds of Events, each a request and an etcd key.
    for (reason, news) in news {
        let (note, about) = digest(news);
        // Another pod under a consumer's name needs a person, who may read only the
        // status (a team's request mirrors it, not the Events of Velero's namespace).
        let warning = reason == reasons::CONSUMER_REPLACED;
        if warning && !status.warnings.contains(&note) {
            status.warnings.push(note.clone());
        }
        ctx.event_about(dr, warning, reason, note, about);
    }
    settled
}

async fn settle_consumer(
    dr: &DataRestore,
    ctx: &Context,
    uid: &str,
    restore: &str,
    record: &mut ConsumerRecord,
    step: ConsumerStep,
) -> Result<Option<(&'static str, String, Option<ObjectReference>)>> {
    let related = crate::controller::Context::consumer_ref(record);
    match step {
        ConsumerStep::Stop => match super::stop(&ctx.client, uid, restore, record).await? {
            Stopped::Done => {
                let note = super::stop_note(record);
                return Ok(Some((reasons::QUIESCED_CONSUMER, note, related)));
            }
            Stopped::HeldBy(holder) => {
                let note = format!(
                    "{} is stopped by DataRestore {holder}; its volumes are not restored by this one",
                    super::describe(record)
                );
                ctx.event_about(dr, true, reasons::CONSUMER_HELD, note, related);
            }
        },
        ConsumerStep::Resume => {
            let resumed = super::resume(&ctx.client, uid, record).await?;
            let note = super::resume_note(record, &resumed);
            let reason = match resumed {
                super::Resumed::Replaced => reasons::CONSUMER_REPLACED,
                _ => reasons::RESUMED_CONSUMER,
            };
            return Ok(note.map(|note| (reason, note, related)));
        }
        ConsumerStep::Switch => {
            let switched = super::switch(&ctx.client, uid, restore, record).await?;
            let note = switched.and_then(|s| super::resume_note(record, &s));
            return Ok(note.map(|note| (reasons::SWITCHED_CONSUMER, note, related)));
        }
        ConsumerStep::KeepStopped => {
            if super::marked(&ctx.client, uid, record).await? {
                record.state = ConsumerState::KeptStopped;
                let note = format!(
                    "left {} stopped after a failure (spec.onFailure: KeepStopped); remove the refill.dev annotations and scale it yourself, or restore again",
                    super::describe(record)
                );
                ctx.event_about(dr, true, reasons::KEPT_CONSUMER_STOPPED, note, related);
            } else {
                record.state = ConsumerState::Running;
            }
        }
        ConsumerStep::Nothing | ConsumerStep::Mark => {}
    }
    Ok(None)
}

//! Applies the consumer steps of a pass: stop, bring back, or keep stopped.

use std::collections::BTreeMap;

use kube::ResourceExt;

use crate::api::{ConsumerRecord, ConsumerState, DataRestore, DataRestoreStatus};
use crate::controller::concurrent::for_each_concurrently;
use crate::controller::{Context, Result, reasons};

use super::{ConsumerStep, Stopped, consumer_step};

/// Stops, brings back or keeps stopped the consumers whose turn it is.
pub async fn settle_consumers(
    dr: &DataRestore,
    ctx: &Context,
    status: &mut DataRestoreStatus,
    uid: &str,
) -> Result<()> {
    let steps: BTreeMap<usize, ConsumerStep> = (0..status.consumers.len())
        .map(|i| (i, consumer_step(status, i, dr.spec.on_failure)))
        .filter(|(_, step)| {
            matches!(
                step,
                ConsumerStep::Stop | ConsumerStep::Resume | ConsumerStep::KeepStopped
            )
        })
        .collect();
    let records = status.consumers.clone();
    let restore = format!("{}/{}", dr.namespace().unwrap_or_default(), dr.name_any());
    for_each_concurrently(
        steps.keys().copied(),
        |i| {
            let mut record = records[i].clone();
            let step = steps[&i];
            let restore = restore.clone();
            async move {
                settle_consumer(dr, ctx, uid, &restore, &mut record, step).await?;
                Ok(record)
            }
        },
        |i, record| status.consumers[i] = record,
    )
    .await
}

async fn settle_consumer(
    dr: &DataRestore,
    ctx: &Context,
    uid: &str,
    restore: &str,
    record: &mut ConsumerRecord,
    step: ConsumerStep,
) -> Result<()> {
    let related = crate::controller::Context::consumer_ref(record);
    match step {
        ConsumerStep::Stop => match super::stop(&ctx.client, uid, restore, record).await? {
            Stopped::Done => {
                let note = super::stop_note(record);
                ctx.event_about(dr, false, reasons::QUIESCED_CONSUMER, note, related);
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
            if let Some(note) = super::resume_note(record, &resumed) {
                ctx.event_about(dr, false, reasons::RESUMED_CONSUMER, note, related);
            }
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
    Ok(())
}

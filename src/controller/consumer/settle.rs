//! Applies the consumer steps of a pass: stop, bring back, or keep stopped.

use std::collections::BTreeMap;

use kube::ResourceExt;

use crate::api::{ConsumerRecord, ConsumerState, DataRestore, DataRestoreStatus};
use crate::controller::runtime::concurrent::for_each_concurrently;
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
    let mut news: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
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
            if let Some((reason, note)) = news_of_one {
                news.entry(reason).or_default().push(note);
            }
        },
    )
    .await;
    // One Event per kind of news and pass, not one per consumer: a restore of many
    // claims would otherwise write hundreds of Events, each a request and an etcd key.
    for (reason, notes) in news {
        let note = summary(&notes);
        // Another pod under a consumer's name needs a person, who may read only the
        // status (a team's request mirrors it, not the Events of Velero's namespace).
        let warning = reason == reasons::CONSUMER_REPLACED;
        if warning && !status.warnings.contains(&note) {
            status.warnings.push(note.clone());
        }
        ctx.event(dr, warning, reason, note);
    }
    settled
}

/// The longest note an Event may carry (events.k8s.io/v1).
const NOTE_LIMIT: usize = 1024;

/// The notes of one pass as one Event note: all of them while they fit, else as many
/// as fit and how many more there were.
fn summary(notes: &[String]) -> String {
    let mut sorted: Vec<&String> = notes.iter().collect();
    sorted.sort();
    let mut out = String::new();
    for (i, note) in sorted.iter().enumerate() {
        let more = sorted.len() - i;
        let tail = format!("; and {more} more");
        let sep = if out.is_empty() { "" } else { "; " };
        let last = i + 1 == sorted.len();
        let room = if last { 0 } else { tail.len() + 16 };
        if out.len() + sep.len() + note.len() + room > NOTE_LIMIT {
            out.push_str(&tail);
            return out;
        }
        out.push_str(sep);
        out.push_str(note);
    }
    out
}

async fn settle_consumer(
    dr: &DataRestore,
    ctx: &Context,
    uid: &str,
    restore: &str,
    record: &mut ConsumerRecord,
    step: ConsumerStep,
) -> Result<Option<(&'static str, String)>> {
    let related = crate::controller::Context::consumer_ref(record);
    match step {
        ConsumerStep::Stop => match super::stop(&ctx.client, uid, restore, record).await? {
            Stopped::Done => {
                return Ok(Some((reasons::QUIESCED_CONSUMER, super::stop_note(record))));
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
            return Ok(note.map(|note| (reason, note)));
        }
        ConsumerStep::Switch => {
            let switched = super::switch(&ctx.client, uid, restore, record).await?;
            let note = switched.and_then(|s| super::resume_note(record, &s));
            return Ok(note.map(|note| (reasons::SWITCHED_CONSUMER, note)));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_news_of_a_pass_fit_one_event() {
        let one = vec!["scaled Deployment shop/web from 2 to 0".to_string()];
        assert_eq!(summary(&one), one[0], "a single note as it is");
        let two = vec!["scaled b".to_string(), "scaled a".to_string()];
        assert_eq!(
            summary(&two),
            "scaled a; scaled b",
            "sorted, whatever order they came in"
        );
        let many: Vec<String> = (0..100)
            .map(|i| format!("scaled Deployment bench-r{i:03}/app from 1 to 0"))
            .collect();
        let note = summary(&many);
        assert!(note.len() <= NOTE_LIMIT, "{}", note.len());
        assert!(
            note.starts_with("scaled Deployment bench-r000/app from 1 to 0; "),
            "{note}"
        );
        let shown = note.matches("scaled Deployment").count();
        assert!(
            note.ends_with(&format!("; and {} more", 100 - shown)),
            "{note}"
        );
    }
}

//! Following a DataRestore with a watch until it ends, and what its end means.

use std::time::Duration;

use futures::StreamExt;
use kube::ResourceExt;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};

use crate::api::{DataRestore, Phase, VolumePhase};

use super::client::Ctx;
use super::errors::{
    CliError, EXIT_INTERRUPTED, EXIT_NO_CONTROLLER, EXIT_RESTORE_FAILED, Kind, Result, Target,
};
use super::format::{between, bytes};
use super::progress::Reporter;

/// How many watch failures in a row end the wait.
const WATCH_FAILURES: u32 = 6;

/// Watches the DataRestore until it reaches a terminal phase and returns that
/// version. Fails with exit code 4 if it gets no status within `pickup_timeout`
/// (no controller), 130 on Ctrl-C, 1 if it disappears or the watch keeps failing.
pub(super) async fn follow(
    ctx: &Ctx,
    name: &str,
    pickup_timeout: Duration,
    reporter: &mut dyn Reporter,
) -> Result<DataRestore> {
    let api = ctx.api::<DataRestore>();
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = watcher::watcher(api, config).default_backoff().boxed();
    let pickup = tokio::time::sleep(pickup_timeout);
    tokio::pin!(pickup);
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);

    let mut records = Records::default();
    let mut picked_up = false;
    let mut failures = 0;
    let mut seen_in_listing = false;
    let result = loop {
        tokio::select! {
            event = events.next() => match event {
                Some(Ok(Event::Apply(dr) | Event::InitApply(dr))) => {
                    failures = 0;
                    seen_in_listing = true;
                    picked_up |= dr.status.is_some();
                    let dr = records.attach(ctx, dr).await;
                    reporter.update(&dr);
                    if dr.status.as_ref().is_some_and(|s| s.phase.is_terminal()) {
                        break Ok(dr);
                    }
                }
                Some(Ok(Event::Init)) => seen_in_listing = false,
                Some(Ok(Event::InitDone)) => {
                    failures = 0;
                    if !seen_in_listing {
                        break Err(super::errors::not_found(Target::one(
                            Kind::DataRestore, name, &ctx.namespace,
                        )));
                    }
                }
                Some(Ok(Event::Delete(_))) => {
                    break Err(CliError::new(format!(
                        "restore \"{name}\" was deleted while waiting for it"
                    )));
                }
                Some(Err(e)) => {
                    failures += 1;
                    let error = watch_error(ctx, name, &e);
                    if failures >= WATCH_FAILURES || !retryable(&e) {
                        break Err(error);
                    }
                    reporter.note(&format!("watch interrupted ({error}); retrying"));
                }
                None => break Err(CliError::new("the watch ended unexpectedly")),
            },
            _ = &mut pickup, if !picked_up => {
                break Err(no_controller(name, &ctx.namespace, pickup_timeout));
            }
            _ = &mut interrupted => {
                break Err(CliError::with_code(EXIT_INTERRUPTED, format!(
                    "stopped waiting; the restore goes on. Follow it again with: refill restore wait {name} -n {}",
                    ctx.namespace
                )));
            }
        }
    };
    reporter.finish();
    result
}

/// Restores of at most this many volumes are shown a volume at a time; larger ones by
/// their counts (a bar or a line a volume would not be read, and reading every volume's
/// record again and again would load the API server).
pub(super) const VOLUMES_SHOWN: u32 = 100;
/// A small restore's volumes are read again no sooner than this.
const RECORDS_EVERY: Duration = Duration::from_secs(2);

/// The volumes of the restore being followed, read from their VolumePluginRestores.
#[derive(Default)]
struct Records {
    read_at: Option<tokio::time::Instant>,
    /// How many volumes were in each phase when they were last read.
    phases: Option<std::collections::BTreeMap<VolumePhase, u32>>,
    volumes: Vec<crate::api::VolumeStatus>,
}

impl Records {
    /// `dr` with its volumes, when it has few enough to show: read again when a volume
    /// changed phase, the last read is old or the restore ended, else as last read.
    async fn attach(&mut self, ctx: &Ctx, mut dr: DataRestore) -> DataRestore {
        let Some(status) = dr.status.as_ref() else {
            return dr;
        };
        let Some(counts) = status.volume_counts.clone() else {
            return dr;
        };
        if counts.total == 0 || counts.total > VOLUMES_SHOWN {
            return dr;
        }
        let stale = self.read_at.is_none_or(|at| at.elapsed() >= RECORDS_EVERY);
        let moved = self.phases.as_ref() != Some(&counts.phases);
        if stale || moved || status.phase.is_terminal() {
            // Without them the counts are still shown.
            if let Ok(read) = crate::controller::ledger::read(&ctx.client, &dr).await {
                self.volumes = read.volumes;
                self.read_at = Some(tokio::time::Instant::now());
                self.phases = Some(counts.phases);
            }
        }
        if let Some(status) = dr.status.as_mut() {
            status.volumes = self.volumes.clone();
        }
        dr
    }
}

/// The message for a restore nobody picked up.
pub(super) fn no_controller(name: &str, namespace: &str, after: Duration) -> CliError {
    CliError::with_code(
        EXIT_NO_CONTROLLER,
        format!(
            "No refill controller has picked up restore \"{name}\" after {}. Is one running \
             for namespace \"{namespace}\"? Start one with `refill controller -n {namespace}`, \
             or deploy it with `kubectl apply -f manifests/` from refill's repository. The \
             restore stays and starts once a controller runs; remove it with: \
             refill restore delete {name} -n {namespace}",
            humantime::format_duration(after)
        ),
    )
}

fn watch_error(ctx: &Ctx, name: &str, e: &watcher::Error) -> CliError {
    let target = Target::one(Kind::DataRestore, name, &ctx.namespace);
    match e {
        watcher::Error::InitialListFailed(k)
        | watcher::Error::WatchStartFailed(k)
        | watcher::Error::WatchFailed(k) => ctx.error(k, target),
        watcher::Error::WatchError(status) => ctx.error(&kube::Error::Api(status.clone()), target),
        other => CliError::new(format!("watching restore \"{name}\": {other}")),
    }
}

/// Failures that a retry cannot mend end the wait at once.
fn retryable(e: &watcher::Error) -> bool {
    let status = match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.code,
        watcher::Error::WatchError(s) => s.code,
        _ => return true,
    };
    !matches!(status, 401 | 403 | 404)
}

/// What an ended restore means for the exit code, with a summary for the person. A
/// restore with its volumes attached names each that did not complete; a larger one
/// names those that need attention and says how many others there are.
pub(super) fn outcome(dr: &DataRestore) -> Result<String> {
    let name = dr.name_any();
    let namespace = dr.namespace().unwrap_or_default();
    let status = dr.status.clone().unwrap_or_default();
    let counts = status.volume_counts.clone().unwrap_or_default();
    let total = counts.total;
    let completed = *counts.phases.get(&VolumePhase::Completed).unwrap_or(&0);
    let took = between(status.start_time.as_ref(), status.completion_time.as_ref())
        .map(|d| format!(" in {d}"))
        .unwrap_or_default();
    if status.phase == Phase::Completed {
        let restored = counts.bytes_done.max(counts.total_bytes);
        let mut text = format!(
            "restore \"{name}\" Completed: {total} volume(s), {}{took}",
            bytes(restored)
        );
        for warning in &status.warnings {
            text += &format!("\nwarning: {warning}");
        }
        return Ok(text);
    }
    let mut text = format!(
        "restore \"{name}\" ended {:?}: {completed} of {total} volume(s) restored{took}",
        status.phase,
    );
    let mut named = 0;
    if status.volumes.is_empty() {
        for note in &status.needs_attention {
            text += &format!("\n  {}: {:?}", note.pvc, note.phase);
            if let Some(message) = note.message.as_deref().filter(|m| !m.is_empty()) {
                text += &format!(": {message}");
            }
            named += 1;
        }
    } else {
        for v in status
            .volumes
            .iter()
            .filter(|v| v.phase != VolumePhase::Completed)
        {
            text += &format!("\n  {}: {}", v.pvc, super::progress::volume_state(v));
            if v.phase != VolumePhase::Failed
                && let Some(message) = v.message.as_deref().filter(|m| !m.is_empty())
            {
                text += &format!(" ({message})");
            }
            named += 1;
        }
    }
    let unnamed = total.saturating_sub(completed).saturating_sub(named);
    if unnamed > 0 {
        text += &format!("\n  ... and {unnamed} more not restored");
    }
    for error in &status.errors {
        text += &format!("\n  {error}");
    }
    text += &format!("\nsee: refill restore describe {name} -n {namespace}");
    Err(CliError::with_code(EXIT_RESTORE_FAILED, text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{DataRestoreSpec, DataRestoreStatus, VolumeStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn ended(phase: Phase, volumes: Vec<(VolumePhase, Option<&str>)>) -> DataRestore {
        let mut dr = DataRestore::new("r1", DataRestoreSpec::default());
        dr.metadata.namespace = Some("velero".into());
        dr.status = Some(DataRestoreStatus {
            phase,
            start_time: Some(Time("2026-01-01T00:00:00Z".parse().unwrap())),
            completion_time: Some(Time("2026-01-01T00:01:05Z".parse().unwrap())),
            volumes: volumes
                .into_iter()
                .enumerate()
                .map(|(i, (phase, message))| VolumeStatus {
                    pvc: format!("shop/data-{i}"),
                    phase,
                    bytes_done: 1024 * 1024,
                    total_bytes: 1024 * 1024,
                    message: message.map(String::from),
                    ..VolumeStatus::default()
                })
                .collect(),
            ..DataRestoreStatus::default()
        });
        if let Some(status) = dr.status.as_mut() {
            status.tally(|v| v.pvc.clone());
        }
        dr
    }

    #[test]
    fn completed_is_success_with_a_summary() {
        let dr = ended(Phase::Completed, vec![(VolumePhase::Completed, None); 2]);
        assert_eq!(
            outcome(&dr).unwrap(),
            "restore \"r1\" Completed: 2 volume(s), 2.0 MiB in 65s"
        );
    }

    #[test]
    fn other_ends_exit_3_and_name_what_failed() {
        let dr = ended(
            Phase::PartiallyFailed,
            vec![
                (VolumePhase::Completed, None),
                (VolumePhase::Failed, Some("node agent: snapshot not found")),
                (VolumePhase::Canceled, Some("restore timed out")),
            ],
        );
        let err = outcome(&dr).unwrap_err();
        assert_eq!(err.code, EXIT_RESTORE_FAILED);
        assert_eq!(
            err.message,
            "restore \"r1\" ended PartiallyFailed: 1 of 3 volume(s) restored in 65s\n  \
             shop/data-1: Failed: node agent: snapshot not found\n  \
             shop/data-2: Canceled (restore timed out)\n\
             see: refill restore describe r1 -n velero"
        );
    }

    #[test]
    fn a_large_restore_names_the_volumes_that_need_attention_and_counts_the_rest() {
        let mut volumes = vec![(VolumePhase::Completed, None); 3];
        volumes.extend(vec![(VolumePhase::Canceled, None); 200]);
        volumes.push((VolumePhase::Failed, Some("node agent: snapshot not found")));
        let mut dr = ended(Phase::PartiallyFailed, volumes);
        // As a follower sees a restore past VOLUMES_SHOWN: counts and notes only.
        dr.status.as_mut().unwrap().volumes.clear();
        let err = outcome(&dr).unwrap_err();
        assert_eq!(
            err.message,
            "restore \"r1\" ended PartiallyFailed: 3 of 204 volume(s) restored in 65s\n  \
             shop/data-203: Failed: node agent: snapshot not found\n  \
             ... and 200 more not restored\n\
             see: refill restore describe r1 -n velero"
        );
    }

    #[test]
    fn no_controller_says_how_to_start_one() {
        let err = no_controller("r1", "velero", Duration::from_secs(10));
        assert_eq!(err.code, EXIT_NO_CONTROLLER);
        assert!(
            err.message.starts_with(
                "No refill controller has picked up restore \"r1\" after 10s. Is one running for namespace \"velero\"?"
            ),
            "{}",
            err.message
        );
        assert!(
            err.message.contains("`refill controller -n velero`"),
            "{}",
            err.message
        );
    }
}

//! The Restoring and Finalizing phases: every volume moves through its own phases,
//! consumers stop before their first volume and come back after their last.
//!
//! A pass has two halves. The first only decides and records (which volumes start, who
//! their consumers are, what brings each back); when it recorded anything, the status is
//! written before any object is touched. The second half acts on what is recorded, so
//! a controller killed at any point finds every record it needs after a restart.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use serde_json::json;
use tracing::info;

use crate::api::{
    ConsumerKind, ConsumerPolicy, ConsumerRecord, ConsumerSecurity, ConsumerState, DataRestore,
    DataRestoreStatus, Phase, PodVolumeBackup, PodVolumePhase, PodVolumeRestore, VolumePhase,
    VolumePluginRestore, VolumeStatus,
};
use crate::labels::{self, FIELD_MANAGER};
use crate::observe::{self, Replicas};
use crate::plan;

use super::consumers;
use super::pod_volume_restore as pvr;
use super::restore_helper::{self, HelperSource};
use super::stand_in::{self, StandIn};
use super::status::{self, now};
use super::step::{
    ConsumerStep, consumer_step, consumers_stopped, expired, free_slots, parse_duration,
};
use super::{Context, Error, Next, Result};

fn split(key: &str) -> (&str, &str) {
    key.split_once('/').expect("volume keys are namespace/name")
}

fn is_conflict(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(ae) if ae.code == code)
}

pub async fn step(
    dr: &DataRestore,
    ctx: &Context,
    status: &mut DataRestoreStatus,
    deleting: bool,
) -> Result<Next> {
    let before = status.clone();
    record(dr, ctx, status, deleting).await?;
    if *status != before {
        // Records first: the caller writes them, then passes again to act on them.
        return Ok(Next::Again);
    }
    act(dr, ctx, status, deleting).await.map(Next::Then)
}

/// First half: decisions and records only. No object but the DataRestore changes.
pub async fn record(
    dr: &DataRestore,
    ctx: &Context,
    status: &mut DataRestoreStatus,
    deleting: bool,
) -> Result<()> {
    let now_ts = Timestamp::now();
    let stop_all = if deleting || dr.spec.cancel {
        Some((
            VolumePhase::Canceled,
            "the restore was canceled".to_string(),
        ))
    } else {
        let limit = dr
            .spec
            .timeout
            .as_deref()
            .and_then(|t| parse_duration(t).ok());
        expired(status.start_time.as_ref().map(|t| &t.0), limit, now_ts).then(|| {
            (
                VolumePhase::Failed,
                format!(
                    "the restore did not finish within {}",
                    dr.spec.timeout.clone().unwrap_or_default()
                ),
            )
        })
    };
    if let Some((phase, message)) = stop_all {
        for volume in status.volumes.iter_mut().filter(|v| !v.phase.is_terminal()) {
            end(volume, phase, message.clone());
        }
        if phase == VolumePhase::Failed && !status.errors.contains(&message) {
            status.errors.push(message);
        }
    }

    let volume_limit = dr
        .spec
        .volume_timeout
        .as_deref()
        .and_then(|t| parse_duration(t).ok());
    for volume in status.volumes.iter_mut().filter(|v| v.phase.is_active()) {
        if expired(
            volume.start_time.as_ref().map(|t| &t.0),
            volume_limit,
            now_ts,
        ) {
            let message = format!(
                "did not finish within {}",
                dr.spec.volume_timeout.clone().unwrap_or_default()
            );
            end(volume, VolumePhase::Failed, message);
        }
    }

    let slots = free_slots(&status.volumes, dr.spec.parallel);
    let starting: Vec<usize> = status
        .volumes
        .iter()
        .enumerate()
        .filter(|(_, v)| v.phase == VolumePhase::Pending)
        .map(|(i, _)| i)
        .take(slots)
        .collect();
    if !starting.is_empty() {
        start_volumes(dr, ctx, status, &starting).await?;
    }
    Ok(())
}

fn end(volume: &mut VolumeStatus, phase: VolumePhase, message: String) {
    volume.phase = phase;
    volume.message = Some(message);
    volume.completion_time = Some(now());
}

/// Moves volumes from Pending to Quiescing, recording their consumers as found now
/// (new ones may have appeared since validation) and what brings each back.
async fn start_volumes(
    dr: &DataRestore,
    ctx: &Context,
    status: &mut DataRestoreStatus,
    starting: &[usize],
) -> Result<()> {
    let uid = dr.uid().unwrap_or_default();
    let mut by_ns: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for &i in starting {
        by_ns
            .entry(split(&status.volumes[i].pvc).0.to_string())
            .or_default()
            .push(i);
    }
    // Namespaces are looked at side by side: each may need a few reads.
    let namespaces: Vec<(String, Vec<usize>)> = by_ns.into_iter().collect();
    let mut looked = Vec::new();
    {
        let (volumes, uid) = (&status.volumes, &uid);
        for_each_concurrently(
            0..namespaces.len(),
            |n| {
                let (ns, indices) = &namespaces[n];
                async move {
                    let claims: Vec<&str> =
                        indices.iter().map(|&i| split(&volumes[i].pvc).1).collect();
                    let pods =
                        observe::pods_mounting(&ctx.client, Some(&ctx.known), ns, &claims).await?;
                    let found = observe::consumers_in(
                        &ctx.client,
                        Some(&ctx.known),
                        ns,
                        &pods,
                        &claims,
                        uid,
                        Replicas::Skip,
                    )
                    .await?;
                    Ok((pods, found))
                }
            },
            |n, found| looked.push((n, found)),
        )
        .await?;
    }
    // Recorded in a fixed order, whatever order the reads finished in.
    looked.sort_by_key(|(n, _)| *n);
    for (n, (pods, found)) in looked {
        let indices = &namespaces[n].1;
        for &i in indices {
            let key = status.volumes[i].pvc.clone();
            let refs = found.get(&key).cloned().unwrap_or_default();
            let single = BTreeMap::from([(key.clone(), refs.clone())]);
            match plan::consumer_actions(dr.spec.consumers, &single) {
                Err(invalid) => {
                    let message = invalid.to_string();
                    end(&mut status.volumes[i], VolumePhase::Failed, message.clone());
                    status.errors.push(message);
                }
                Ok(planned) => {
                    for consumer in planned {
                        merge_consumer(status, consumer, &pods);
                    }
                    let first_pod = refs
                        .first()
                        .and_then(|r| pods.iter().find(|p| p.name_any() == r.pod));
                    let volume = &mut status.volumes[i];
                    if let Some(pod) = first_pod {
                        volume.consumer_security = Some(security_of(pod));
                    }
                    volume.phase = VolumePhase::Quiescing;
                    volume.start_time = Some(now());
                    volume.message = None;
                }
            }
        }
    }
    Ok(())
}

fn security_of(pod: &Pod) -> ConsumerSecurity {
    let spec = pod.spec.clone().unwrap_or_default();
    ConsumerSecurity {
        pod: spec.security_context,
        container: spec
            .containers
            .first()
            .and_then(|c| c.security_context.clone()),
    }
}

/// A bare pod is deleted to stop it, so its manifest is recorded before.
fn pod_manifest(planned: &plan::PlannedConsumer, pods: &[Arc<Pod>]) -> Option<String> {
    (planned.kind == ConsumerKind::Pod)
        .then(|| pods.iter().find(|p| p.name_any() == planned.name))
        .flatten()
        .and_then(|p| serde_json::to_string(&consumers::recreatable_pod(p)).ok())
}

fn merge_consumer(
    status: &mut DataRestoreStatus,
    planned: plan::PlannedConsumer,
    pods: &[Arc<Pod>],
) {
    let existing = status.consumers.iter_mut().find(|c| {
        c.kind == planned.kind && c.namespace == planned.namespace && c.name == planned.name
    });
    match existing {
        Some(record) => {
            if record.original.is_none() {
                record.original = pod_manifest(&planned, pods);
            }
            for pvc in planned.pvcs {
                if !record.pvcs.contains(&pvc) {
                    record.pvcs.push(pvc);
                }
            }
            // A consumer that came back since (someone re-created it) is stopped again.
            if matches!(record.state, ConsumerState::Resumed) {
                record.state = ConsumerState::Running;
            }
        }
        None => {
            let original = pod_manifest(&planned, pods);
            status.consumers.push(ConsumerRecord {
                kind: planned.kind,
                namespace: planned.namespace,
                name: planned.name,
                pvcs: planned.pvcs,
                state: ConsumerState::Running,
                replicas: planned.replicas,
                original,
            })
        }
    }
}

/// What one pass observes once and shares among volumes.
struct Observed {
    stand_ins: BTreeMap<(String, String), Pod>,
    pvrs: BTreeMap<String, PodVolumeRestore>,
    vprs: BTreeMap<String, VolumePluginRestore>,
}

/// Pods other than this restore's stand-in that mount the claim.
async fn foreign_mounts(ctx: &Context, pvc: &str, uid: &str) -> Result<Vec<String>> {
    let (ns, claim) = split(pvc);
    Ok(
        observe::pods_mounting(&ctx.client, Some(&ctx.known), ns, &[claim])
            .await?
            .iter()
            .filter(|p| !observe::is_own_stand_in(p, uid))
            .map(|p| p.name_any())
            .collect(),
    )
}

/// How many volumes or consumers one pass works on at once. Their steps are independent
/// API calls, so running them side by side is what makes many volumes fast.
const CONCURRENCY: usize = 16;

/// Runs `work` for every index at once (bounded), applies each result with `apply`,
/// and reports the first error after all have been applied: the effects of the others
/// happened, so their records must not be lost.
async fn for_each_concurrently<T, F, Fut>(
    indices: impl IntoIterator<Item = usize>,
    work: F,
    mut apply: impl FnMut(usize, T),
) -> Result<()>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let results: Vec<(usize, Result<T>)> = futures::stream::iter(indices)
        .map(|i| {
            let fut = work(i);
            async move { (i, fut.await) }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    let mut first_error = None;
    for (i, result) in results {
        match result {
            Ok(value) => apply(i, value),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Second half: act on the recorded state.
async fn act(
    dr: &DataRestore,
    ctx: &Context,
    status: &mut DataRestoreStatus,
    deleting: bool,
) -> Result<Action> {
    let uid = dr.uid().unwrap_or_default();
    let ns = dr.namespace().unwrap_or_default();
    let owned = ListParams::default().labels(&format!("{}={uid}", labels::DATA_RESTORE_UID));
    let by_restore = ListParams::default().labels(&format!("{}={uid}", labels::RESTORE_UID));
    let pods = Api::<Pod>::all(ctx.client.clone());
    let pvrs = Api::<PodVolumeRestore>::namespaced(ctx.client.clone(), &ns);
    let vprs = Api::<VolumePluginRestore>::namespaced(ctx.client.clone(), &ns);
    let (stand_ins, pvrs, vprs) =
        futures::try_join!(pods.list(&owned), pvrs.list(&by_restore), vprs.list(&owned),)?;
    let seen = Observed {
        stand_ins: stand_ins
            .items
            .into_iter()
            .map(|p| ((p.namespace().unwrap_or_default(), p.name_any()), p))
            .collect(),
        pvrs: pvrs.items.into_iter().map(|p| (p.name_any(), p)).collect(),
        vprs: vprs.items.into_iter().map(|p| (p.name_any(), p)).collect(),
    };

    settle_consumers(dr, ctx, status, &uid).await?;
    let helper = if status
        .volumes
        .iter()
        .any(|v| v.phase == VolumePhase::Quiescing)
    {
        Some(restore_helper::read_source(&ctx.client, &ns).await?)
    } else {
        None
    };
    let snapshot = status.clone();
    let mut errors = Vec::new();
    let outcome = for_each_concurrently(
        0..snapshot.volumes.len(),
        |i| {
            let mut volume = snapshot.volumes[i].clone();
            let (snapshot, seen, helper) = (&snapshot, &seen, helper.as_ref());
            async move {
                let errors = advance_volume(dr, ctx, snapshot, &mut volume, seen, helper).await?;
                Ok((volume, errors))
            }
        },
        |i, (volume, new_errors)| {
            status.volumes[i] = volume;
            errors.extend(new_errors);
        },
    )
    .await;
    status.errors.extend(errors);
    outcome?;
    // Volumes that ended in this pass may free their consumers at once; their
    // VolumePluginRestores are brought up to date meanwhile (neither waits on the other).
    let volumes = status.volumes.clone();
    let synced = for_each_concurrently(
        0..volumes.len(),
        |i| sync_plugin_restore(dr, ctx, &volumes[i], &seen),
        |_, ()| {},
    );
    let (settled, synced) = futures::join!(settle_consumers(dr, ctx, status, &uid), synced);
    settled?;
    synced?;

    ctx.track_claims(
        dr,
        status
            .volumes
            .iter()
            .filter(|v| v.phase.is_active())
            .map(|v| {
                let (ns, claim) = split(&v.pvc);
                (ns.to_string(), claim.to_string())
            }),
    );

    let all_ended = status.volumes.iter().all(|v| v.phase.is_terminal());
    if !all_ended {
        return Ok(Action::requeue(ctx.config.recheck_interval));
    }
    let settled = !status
        .consumers
        .iter()
        .any(|c| matches!(c.state, ConsumerState::Stopping | ConsumerState::Stopped));
    let stand_ins_left = status.volumes.iter().any(|v| {
        v.stand_in_pod.as_ref().is_some_and(|name| {
            seen.stand_ins
                .contains_key(&(split(&v.pvc).0.to_string(), name.clone()))
        })
    });
    if settled && !stand_ins_left {
        let canceled = deleting || dr.spec.cancel;
        status.phase = status::outcome(&status.volumes, canceled);
        status.completion_time = Some(now());
        let failed = status.phase != Phase::Completed;
        let note = format!(
            "{:?}: {} volumes restored",
            status.phase,
            status::summary(&status.volumes)
        );
        ctx.event(dr, failed, &format!("{:?}", status.phase), note);
        Ok(Action::await_change())
    } else {
        status.phase = Phase::Finalizing;
        Ok(Action::requeue(Duration::from_millis(500)))
    }
}

async fn settle_consumers(
    dr: &DataRestore,
    ctx: &Context,
    status: &mut DataRestoreStatus,
    uid: &str,
) -> Result<()> {
    let steps: BTreeMap<usize, ConsumerStep> = (0..status.consumers.len())
        .map(|i| (i, consumer_step(status, i, dr.spec.on_failure)))
        .filter(|(_, step)| *step != ConsumerStep::Nothing)
        .collect();
    let records = status.consumers.clone();
    for_each_concurrently(
        steps.keys().copied(),
        |i| {
            let mut record = records[i].clone();
            let step = steps[&i];
            async move {
                settle_consumer(dr, ctx, uid, &mut record, step).await?;
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
    record: &mut ConsumerRecord,
    step: ConsumerStep,
) -> Result<()> {
    let what = format!("{:?} {}/{}", record.kind, record.namespace, record.name);
    let (warning, reason, note) = match step {
        ConsumerStep::Nothing => return Ok(()),
        ConsumerStep::Stop => {
            consumers::stop(&ctx.client, uid, record).await?;
            let note = match record.replicas {
                Some(n) if record.kind.is_scalable() => format!("scaled {what} from {n} to 0"),
                _ => format!("stopped {what}"),
            };
            (false, "QuiescedConsumer", note)
        }
        ConsumerStep::Resume => {
            consumers::resume(&ctx.client, uid, record).await?;
            let note = match record.replicas {
                Some(n) if record.kind.is_scalable() => format!("scaled {what} back to {n}"),
                _ => format!("started {what} again"),
            };
            (false, "ResumedConsumer", note)
        }
        ConsumerStep::KeepStopped => {
            record.state = ConsumerState::KeptStopped;
            let note = format!("left {what} stopped after a failure (onFailure: KeepStopped)");
            (true, "KeptConsumerStopped", note)
        }
    };
    ctx.event_about(dr, warning, reason, note, Context::consumer_ref(record));
    Ok(())
}

/// Moves one volume on as far as it can go now. `status` is the pass's starting view
/// (for consumers); the volume's own changes go into `volume`, and the errors to record
/// are returned.
async fn advance_volume(
    dr: &DataRestore,
    ctx: &Context,
    status: &DataRestoreStatus,
    volume: &mut VolumeStatus,
    seen: &Observed,
    helper: Option<&HelperSource>,
) -> Result<Vec<String>> {
    let mut errors = Vec::new();
    let uid = dr.uid().unwrap_or_default();
    let pvc = volume.pvc.clone();
    let (ns, claim) = split(&pvc);
    let stand_in_name = labels::stand_in_pod_name(&uid, &pvc);
    let pvr_name = labels::pod_volume_restore_name(&dr.name_any(), &uid, &pvc);
    let stand_in = seen
        .stand_ins
        .get(&(ns.to_string(), stand_in_name.clone()))
        .cloned();

    match volume.phase {
        VolumePhase::Quiescing => {
            if !consumers_stopped(status, &pvc) {
                return Ok(errors);
            }
            let users = foreign_mounts(ctx, &pvc, &uid).await?;
            if !users.is_empty() {
                volume.message = Some(format!(
                    "waiting for pods to release the volume: {}",
                    users.join(", ")
                ));
                if dr.spec.consumers == ConsumerPolicy::Refuse {
                    let message = format!(
                        "PVC {pvc} is in use by {} and consumers: Refuse",
                        users.join(", ")
                    );
                    end(volume, VolumePhase::Failed, message);
                }
                return Ok(errors);
            }
            if stand_in.is_none() {
                let source = helper.expect("read at the start of a pass with volumes quiescing");
                let security = volume.consumer_security.clone();
                let container = match restore_helper::container(
                    &uid,
                    &volume.volume,
                    dr.spec.restore_helper.as_ref(),
                    source,
                    security.as_ref().and_then(|s| s.container.as_ref()),
                ) {
                    Ok(c) => c,
                    Err(message) => {
                        end(volume, VolumePhase::Failed, message);
                        return Ok(errors);
                    }
                };
                let pod = stand_in::pod(StandIn {
                    name: stand_in_name.clone(),
                    namespace: ns,
                    claim,
                    volume: &volume.volume,
                    restore_key: format!(
                        "{}/{}",
                        dr.namespace().unwrap_or_default(),
                        dr.name_any()
                    ),
                    restore_uid: &uid,
                    candidate_nodes: &volume.candidate_nodes,
                    security: security.as_ref(),
                    image: dr
                        .spec
                        .stand_in_image
                        .as_deref()
                        .unwrap_or(stand_in::DEFAULT_IMAGE),
                    restore_wait: container,
                });
                let created = match Api::<Pod>::namespaced(ctx.client.clone(), ns)
                    .create(&PostParams::default(), &pod)
                    .await
                {
                    Ok(created) => Some(created),
                    Err(e) if is_conflict(&e, 409) => None,
                    Err(e) => return Err(e.into()),
                };
                // The node agent itself waits for restore-wait to run before it starts,
                // as it does for Velero's own restores, so the PodVolumeRestore goes out
                // with the stand-in instead of a pass later. (A stand-in that already
                // existed gets its PodVolumeRestore in the next phase.)
                if let Some(pod) = created {
                    create_pod_volume_restore(dr, ctx, status, volume, &pvr_name, &pod).await?;
                    volume.pod_volume_restore = Some(pvr_name.clone());
                }
            }
            volume.stand_in_pod = Some(stand_in_name.clone());
            volume.phase = VolumePhase::StartingStandIn;
            volume.message = None;
        }
        VolumePhase::StartingStandIn => {
            let Some(pod) = stand_in else {
                // Deleted by someone: go back one step, which creates it again.
                volume.phase = VolumePhase::Quiescing;
                return Ok(errors);
            };
            volume.node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
            if pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed") {
                end(
                    volume,
                    VolumePhase::Failed,
                    format!("stand-in pod {stand_in_name} failed"),
                );
                return Ok(errors);
            }
            if let Some(problem) = interference(ctx, status, &pvc, &uid).await? {
                end(volume, VolumePhase::Failed, problem.clone());
                errors.push(problem);
                return Ok(errors);
            }
            volume.pod_volume_restore = Some(pvr_name.clone());
            let Some(found) = seen.pvrs.get(&pvr_name) else {
                create_pod_volume_restore(dr, ctx, status, volume, &pvr_name, &pod).await?;
                return Ok(errors);
            };
            // Restoring from when the node agent can start. A PodVolumeRestore the node
            // agent took up already (after a crash, a lost status write) may be finished,
            // restore-wait gone with it: it is followed from here on, never waited for.
            if stand_in::restore_wait_running(&pod) || found.phase() != PodVolumePhase::New {
                volume.phase = VolumePhase::Restoring;
            }
        }
        VolumePhase::Restoring => {
            let Some(found) = seen.pvrs.get(&pvr_name).cloned() else {
                let message = format!("PodVolumeRestore {pvr_name} disappeared");
                end(volume, VolumePhase::Failed, message);
                return Ok(errors);
            };
            let pvr_status = found.status.clone().unwrap_or_default();
            if let Some(progress) = &pvr_status.progress {
                volume.bytes_done = progress.bytes_done;
                if progress.total_bytes > 0 {
                    volume.total_bytes = progress.total_bytes;
                }
            }
            if let Some(node) = pvr_status.node.clone() {
                volume.node = Some(node);
            }
            match found.phase() {
                PodVolumePhase::Completed => {
                    volume.bytes_done = volume.total_bytes.max(volume.bytes_done);
                    end(volume, VolumePhase::Completed, "restored".into());
                    let note = format!("{pvc} restored");
                    ctx.event_about(dr, false, "VolumeRestored", note, Context::pvc_ref(&pvc));
                }
                PodVolumePhase::Failed | PodVolumePhase::Canceled => {
                    let phase = if found.phase() == PodVolumePhase::Failed {
                        VolumePhase::Failed
                    } else {
                        VolumePhase::Canceled
                    };
                    let message = format!(
                        "PodVolumeRestore {pvr_name} {:?}: {}",
                        found.phase(),
                        pvr_status.message.unwrap_or_default()
                    );
                    end(volume, phase, message.clone());
                    errors.push(format!("{pvc}: {message}"));
                    let note = format!("{pvc}: {message}");
                    ctx.event_about(dr, true, "VolumeFailed", note, Context::pvc_ref(&pvc));
                }
                // Looked at on every pass: the pods mounting the claim are known without
                // a request, so a restarted consumer is noticed as soon as its pod
                // exists, before it can write anything.
                _ => {
                    if let Some(problem) = interference(ctx, status, &pvc, &uid).await? {
                        cancel_pvr(ctx, &found).await?;
                        end(volume, VolumePhase::Failed, problem.clone());
                        errors.push(problem.clone());
                        let related = Context::pvc_ref(&pvc);
                        ctx.event_about(dr, true, "ConsumerRestarted", problem, related);
                    }
                }
            }
        }
        _ => {}
    }

    if volume.phase.is_terminal() {
        if let Some(found) = seen.pvrs.get(&pvr_name)
            && !found.phase().is_terminal()
            && found.spec.cancel != Some(true)
        {
            cancel_pvr(ctx, found).await?;
        }
        if let Some(pod) = seen.stand_ins.get(&(ns.to_string(), stand_in_name.clone()))
            && pod.metadata.deletion_timestamp.is_none()
        {
            match Api::<Pod>::namespaced(ctx.client.clone(), ns)
                .delete(&stand_in_name, &DeleteParams::default())
                .await
            {
                Ok(_) => {}
                Err(e) if is_conflict(&e, 404) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(errors)
}

/// Someone started a stopped consumer, or another pod mounts the claim: refill must not
/// write under it. Whatever writes to a volume does so from a pod that mounts its claim,
/// and those are known from the pod watch at no cost; the consumers' objects are read
/// only when there is such a pod, to name who started it.
async fn interference(
    ctx: &Context,
    status: &DataRestoreStatus,
    pvc: &str,
    uid: &str,
) -> Result<Option<String>> {
    let users = foreign_mounts(ctx, pvc, uid).await?;
    if users.is_empty() {
        return Ok(None);
    }
    let records = status
        .consumers
        .iter()
        .filter(|c| c.pvcs.iter().any(|p| p == pvc));
    for record in records {
        if let Some(problem) = consumers::interference(&ctx.client, uid, record).await? {
            return Ok(Some(problem));
        }
    }
    Ok(Some(format!(
        "pod {} mounts {pvc} while it is being restored; refill stopped writing to it",
        users.join(", ")
    )))
}

async fn cancel_pvr(ctx: &Context, found: &PodVolumeRestore) -> Result<()> {
    let api: Api<PodVolumeRestore> =
        Api::namespaced(ctx.client.clone(), &found.namespace().unwrap_or_default());
    let patch = json!({"spec": {"cancel": true}});
    match api
        .patch(
            &found.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if is_conflict(&e, 404) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

async fn create_pod_volume_restore(
    dr: &DataRestore,
    ctx: &Context,
    status: &DataRestoreStatus,
    volume: &VolumeStatus,
    name: &str,
    pod: &Pod,
) -> Result<()> {
    let ns = dr.namespace().unwrap_or_default();
    let pvb_name = volume.pod_volume_backup.clone().unwrap_or_default();
    let pvb = Api::<PodVolumeBackup>::namespaced(ctx.client.clone(), &ns)
        .get_opt(&pvb_name)
        .await?
        .ok_or_else(|| Error::Other(format!("PodVolumeBackup {pvb_name} is gone")))?;
    let object = pvr::pod_volume_restore(dr, name, volume, &pvb, pod);
    let backup = status.backup_name.clone().unwrap_or_default();
    let plugin =
        pvr::volume_plugin_restore(dr, name, &backup, volume, pvb.spec.uploader_type.as_deref());
    let pvrs = Api::<PodVolumeRestore>::namespaced(ctx.client.clone(), &ns);
    let plugins = Api::<VolumePluginRestore>::namespaced(ctx.client.clone(), &ns);
    let params = PostParams::default();
    let (created, mirrored) = futures::join!(
        pvrs.create(&params, &object),
        plugins.create(&params, &plugin)
    );
    for result in [created.map(drop), mirrored.map(drop)] {
        match result {
            Ok(()) => {}
            Err(e) if is_conflict(&e, 409) => {}
            Err(e) => return Err(e.into()),
        }
    }
    // Which node and stand-in serve the volume is in its status and VolumePluginRestore;
    // an Event per volume for it would only add a write to every volume.
    info!(
        restore = %dr.name_any(),
        pvc = %volume.pvc,
        stand_in = %pod.name_any(),
        node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or_default(),
        "created PodVolumeRestore {name} for snapshot {}",
        volume.snapshot_id.as_deref().unwrap_or_default()
    );
    Ok(())
}

/// Mirrors a volume into its VolumePluginRestore when anything but throttled progress changed.
async fn sync_plugin_restore(
    dr: &DataRestore,
    ctx: &Context,
    volume: &VolumeStatus,
    seen: &Observed,
) -> Result<()> {
    let Some(name) = &volume.pod_volume_restore else {
        return Ok(());
    };
    let Some(existing) = seen.vprs.get(name) else {
        return Ok(());
    };
    let wanted = pvr::plugin_status(volume);
    let current = existing.status.clone().unwrap_or_default();
    if current == wanted {
        return Ok(());
    }
    let progress_only = {
        let mut a = current.clone();
        let mut b = wanted.clone();
        a.progress = None;
        b.progress = None;
        a == b
    };
    if progress_only
        && ctx
            .progress_wait(&format!("{}/{name}", dr.uid().unwrap_or_default()))
            .is_some()
    {
        return Ok(());
    }
    let body = json!({
        "apiVersion": crate::api::API_VERSION,
        "kind": "VolumePluginRestore",
        "status": wanted,
    });
    Api::<VolumePluginRestore>::namespaced(ctx.client.clone(), &dr.namespace().unwrap_or_default())
        .patch_status(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(body),
        )
        .await?;
    ctx.wrote(&format!("{}/{name}", dr.uid().unwrap_or_default()), None);
    Ok(())
}

//! Restoring: volumes start as slots free up (spec.parallel), consumers stop before a
//! volume's stand-in is made and come back after the last of their volumes ended.
//!
//! A pass has two halves. [`record`] only decides and records (which volumes start,
//! their consumers, what brings each back, which consumers are about to be stopped);
//! when it recorded anything, the status is written before any object is touched.
//! [`work`] then acts on what is recorded, so a controller killed at any point finds
//! every record it needs after a restart. Finalizing runs the same [`work`].

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ObjectReference, Pod, PodSpec, Toleration};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::api::{
    ConsumerKind, ConsumerRecord, ConsumerSecurity, ConsumerState, DataRestore, DataRestoreStatus,
    Phase, VolumePhase, VolumeStatus,
};
use crate::controller::by_claim::ByClaim;
use crate::controller::consumer::{self, ConsumerStep, consumer_steps, settle_consumers};
use crate::controller::gitops;
use crate::controller::reasons;
use crate::controller::runtime::concurrent::for_each_concurrently;
use crate::controller::runtime::events::digest;
use crate::controller::status;
use crate::controller::volume;
use crate::controller::volume::apply::{Applied, Note};
use crate::controller::volume::decide::{RestoreStop, Rules, expired};
use crate::controller::volume::execute::Act;
use crate::controller::volume::sight::split;
use crate::controller::{Context, Result};
use crate::observe::{self, consumers::Replicas};
use crate::{plan, validate};

use super::{Next, stopping};

/// How many volumes are restored at once when spec.parallel is not set.
pub const DEFAULT_PARALLEL: u32 = 8;
/// How long one volume may take when spec.volumeTimeout is not set: as long as Velero
/// gives its own pod volume operations.
pub(super) const DEFAULT_VOLUME_TIMEOUT: &str = "4h";
/// How long the whole restore may take when spec.timeout is not set.
pub(super) const DEFAULT_TIMEOUT: &str = "24h";

fn duration_or(value: Option<&str>, default: &str) -> (Duration, String) {
    let text = value.unwrap_or(default);
    // Validation refused a malformed value already; the default stands in for safety.
    let parsed = plan::duration(text)
        .or_else(|_| plan::duration(default))
        .expect("the defaults parse");
    (parsed, text.to_string())
}

/// Whether a volume holds one of the spec.parallel slots: from its start until no data
/// moves for it any more (its node agent, or its copier). Removing a stand-in and
/// switching workloads move none, and wait for others' pods, so they do not hold back
/// the next volumes; a staged or path restore's stand-in is followed by its copier.
fn holds_slot(volume: &VolumeStatus) -> bool {
    match volume.phase {
        VolumePhase::RemovingStandIn => volume.fills_scratch_first(),
        VolumePhase::Switching => false,
        phase => phase.is_active(),
    }
}

/// How many Pending volumes may start now.
pub(super) fn free_slots(status: &DataRestoreStatus, parallel: Option<u32>) -> usize {
    let parallel = parallel.unwrap_or(DEFAULT_PARALLEL).max(1) as usize;
    let busy = status.volumes.iter().filter(|v| holds_slot(v)).count();
    parallel.saturating_sub(busy)
}

/// Why the whole restore stops now, if it does.
fn stop_of(
    dr: &DataRestore,
    status: &DataRestoreStatus,
    deleting: bool,
    now: Timestamp,
) -> Option<RestoreStop> {
    if stopping(dr, deleting) {
        let why = if deleting {
            "the DataRestore was deleted"
        } else {
            "the restore was canceled (spec.cancel)"
        };
        return Some(RestoreStop {
            outcome: VolumePhase::Canceled,
            why: why.into(),
        });
    }
    let (limit, text) = duration_or(dr.spec.timeout.as_deref(), DEFAULT_TIMEOUT);
    expired(status.start_time.as_ref().map(|t| t.0), limit, now).then(|| RestoreStop {
        outcome: VolumePhase::Failed,
        why: format!("the restore did not finish within {text} (spec.timeout)"),
    })
}

/// The spec's rules as they apply to each volume now.
pub(super) fn rules(
    dr: &DataRestore,
    config: &crate::controller::Config,
    status: &DataRestoreStatus,
    deleting: bool,
    now: Timestamp,
) -> Rules {
    let (volume_timeout, volume_timeout_text) =
        duration_or(dr.spec.volume_timeout.as_deref(), DEFAULT_VOLUME_TIMEOUT);
    Rules {
        stop: stop_of(dr, status, deleting, now),
        volume_timeout,
        volume_timeout_text,
        refuse_in_use: dr.spec.consumer_policy() == crate::api::ConsumerPolicy::Refuse,
        online: dr.spec.writes_under_running_consumers(),
        switch: dr.spec.switch_workloads,
        agent_grace: config.agent_grace,
        cancel_grace: config.cancel_grace,
        node_grace: config.node_grace,
    }
}

pub(super) async fn restore(
    dr: &DataRestore,
    ctx: &Context,
    loaded: &DataRestoreStatus,
    status: &mut DataRestoreStatus,
    deleting: bool,
) -> Result<Next> {
    record(dr, ctx, status, deleting, None).await?;
    if status != loaded {
        return Ok(Next::Again);
    }
    let worked = work(dr, ctx, status, deleting).await?;
    if status.volumes.iter().all(|v| v.phase.is_terminal()) {
        status.phase = Phase::Finalizing;
        return Ok(Next::Again);
    }
    if worked.held {
        return Ok(Next::Again);
    }
    Ok(Next::After(ctx.config.recheck_interval))
}

/// First half: decisions and records only. No object but the DataRestore changes.
/// `seen`: consumers by claim found in this same pass (by validation), used for the
/// volumes that start instead of reading their namespaces' workloads again.
pub(super) async fn record(
    dr: &DataRestore,
    ctx: &Context,
    status: &mut DataRestoreStatus,
    deleting: bool,
    seen: Option<&validate::Consumers>,
) -> Result<()> {
    if let Some(stop) = stop_of(dr, status, deleting, Timestamp::now()) {
        // No volume starts any more; the ones under way roll back (see volume::decide).
        status.phase = Phase::Finalizing;
        if stop.outcome == VolumePhase::Failed {
            status::add_line(&mut status.errors, stop.why);
        }
        return Ok(());
    }
    let slots = free_slots(status, dr.spec.parallel);
    let pending = status
        .volumes
        .iter()
        .enumerate()
        .filter(|(_, v)| v.phase == VolumePhase::Pending)
        .map(|(i, _)| i)
        .take(slots);
    // A volume whose scratch claim is filled stops its consumers only now: they are
    // looked for again on each pass until stopped, as some may have come up during
    // the fill.
    let stopping_after_fill = status
        .volumes
        .iter()
        .enumerate()
        .filter(|(_, v)| v.fills_scratch_first() && v.phase == VolumePhase::Quiescing)
        .map(|(i, _)| i);
    let starting: Vec<usize> = pending.chain(stopping_after_fill).collect();
    if !starting.is_empty() {
        start_volumes(dr, ctx, status, &starting, seen).await?;
    }
    // Likewise a GitOps object is marked Pausing before it is paused.
    gitops::mark(status);
    // A consumer is marked Stopping before the stop is applied: whatever fails after,
    // the finish step looks at the object and brings it back if refill's mark is on it.
    let steps = consumer_steps(status, dr.spec.on_failure);
    for (record, step) in status.consumers.iter_mut().zip(steps) {
        if step == ConsumerStep::Mark {
            record.state = ConsumerState::Stopping;
        }
    }
    Ok(())
}

/// Namespaces whose pods are looked at, and whose volumes are recorded, before the next
/// ones: each holds its pods (whole, as read) until its volumes are recorded, and a first
/// pass that starts 10,000 volumes at once would hold every pod of the restore.
const NAMESPACES_PER_LOOK: usize = 256;

/// Moves volumes on from Pending (to Quiescing, or for a volume whose scratch claim is
/// filled first to StartingStandIn), recording their consumers as found now (new ones
/// may have appeared since validation) and what brings each back; and records again
/// the consumers of volumes about to stop them after their fill.
async fn start_volumes(
    dr: &DataRestore,
    ctx: &Context,
    status: &mut DataRestoreStatus,
    starting: &[usize],
    seen: Option<&validate::Consumers>,
) -> Result<()> {
    let mut by_ns: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for &i in starting {
        by_ns
            .entry(split(&status.volumes[i].pvc).0.to_string())
            .or_default()
            .push(i);
    }
    let mut index = record_index(&status.consumers, |ns| by_ns.contains_key(ns));
    let namespaces: Vec<(String, Vec<usize>)> = by_ns.into_iter().collect();
    for some in namespaces.chunks(NAMESPACES_PER_LOOK) {
        let looked = look(dr, ctx, &status.volumes, some, seen).await?;
        record_found(dr, ctx, status, &mut index, some, looked).await?;
    }
    Ok(())
}

/// What [`look`] found in one namespace: the pods mounting its starting volumes'
/// claims, and the consumers of each claim.
type Looked = (Vec<Arc<Pod>>, BTreeMap<String, Vec<plan::ConsumerRef>>);

/// The pods and consumers of the starting volumes of `namespaces`, in their order.
async fn look(
    dr: &DataRestore,
    ctx: &Context,
    volumes: &[VolumeStatus],
    namespaces: &[(String, Vec<usize>)],
    seen: Option<&validate::Consumers>,
) -> Result<Vec<Looked>> {
    let uid = &dr.uid().unwrap_or_default();
    let git_ops = &dr.spec.git_ops();
    let mut looked = Vec::new();
    // Namespaces are looked at side by side: each may need a few reads.
    for_each_concurrently(
        0..namespaces.len(),
        |n| {
            let (ns, indices) = &namespaces[n];
            async move {
                let keys: Vec<&str> = indices.iter().map(|&i| volumes[i].pvc.as_str()).collect();
                let claims: Vec<&str> = keys.iter().map(|k| split(k).1).collect();
                let pods = observe::consumers::pods_mounting(ctx.reads(), ns, &claims).await?;
                let found = match seen_for(seen, &keys) {
                    Some(found) => found,
                    None => {
                        let found = observe::consumers::Search {
                            pods: &pods,
                            claims: &claims,
                            own_uid: uid,
                            git_ops: git_ops.as_ref(),
                        };
                        let reads = ctx.reads();
                        observe::consumers::consumers_in(reads, ns, found, Replicas::Skip).await?
                    }
                };
                Ok((pods, found))
            }
        },
        |n, found| looked.push((n, found)),
    )
    .await?;
    // Recorded in a fixed order, whatever order the reads finished in.
    looked.sort_by_key(|(n, _)| *n);
    Ok(looked.into_iter().map(|(_, found)| found).collect())
}

/// Records what [`look`] found for the starting volumes of `namespaces`.
async fn record_found(
    dr: &DataRestore,
    ctx: &Context,
    status: &mut DataRestoreStatus,
    index: &mut RecordIndex,
    namespaces: &[(String, Vec<usize>)],
    looked: Vec<Looked>,
) -> Result<()> {
    // The GitOps objects their marks name, read for the consumers no record holds yet.
    let git_ops = dr.spec.git_ops();
    let named = observe::managers::named(looked.iter().flat_map(|(_, f)| f.values().flatten()));
    let to_read = plan::gitops::to_read(&git_ops, named, &status.git_ops);
    let seen = observe::managers::seen(&ctx.client, to_read).await?;
    let now = crate::controller::status::now();
    for ((_, indices), (pods, found)) in namespaces.iter().zip(looked) {
        for &i in indices {
            let key = status.volumes[i].pvc.clone();
            let refs = found.get(&key).cloned().unwrap_or_default();
            let single = BTreeMap::from([(key.clone(), refs.clone())]);
            let planned =
                plan::consumer_actions(dr.spec.consumer_policy(), &single).and_then(|planned| {
                    for consumer in &planned {
                        manifest_fits(found_pod(consumer, &pods)).map_err(plan::Invalid::one)?;
                    }
                    let warnings =
                        plan::gitops::merge(&git_ops, &mut status.git_ops, &planned, &seen)
                            .map_err(plan::Invalid::one)?;
                    for warning in warnings {
                        ctx.event(dr, true, reasons::GITOPS_PAUSED, warning.clone());
                        if !status.warnings.contains(&warning) {
                            status.warnings.push(warning);
                        }
                    }
                    Ok(planned)
                });
            match planned {
                Err(invalid) => {
                    // Nothing was started for it: it ends at once.
                    let message = invalid.to_string();
                    let volume = &mut status.volumes[i];
                    volume.phase = VolumePhase::Failed;
                    volume.message = Some(message.clone());
                    volume.completion_time = Some(now.clone());
                    push_error(status, format!("{key}: {message}"));
                }
                Ok(planned) => {
                    for consumer in planned {
                        merge_consumer(status, index, consumer, &pods);
                    }
                    let first_pod = refs.iter().find_map(|r| {
                        let name = r.pod.as_deref()?;
                        pods.iter().find(|p| p.name_any() == name)
                    });
                    // A running pod's spec, else (nothing runs: a workload at 0, a
                    // CronJob between runs) its workload's pod template.
                    let spec = first_pod
                        .and_then(|p| p.spec.as_ref())
                        .or_else(|| refs.iter().find_map(|r| r.template.as_deref()));
                    let volume = &mut status.volumes[i];
                    if volume.phase != VolumePhase::Pending {
                        continue;
                    }
                    if let Some(spec) = spec {
                        volume.consumer_security = Some(Box::new(security_of(spec)));
                        volume.consumer_tolerations = tolerations_to_keep(spec);
                    }
                    volume.phase = if volume.fills_scratch_first() {
                        VolumePhase::StartingStandIn
                    } else {
                        VolumePhase::Quiescing
                    };
                    volume.start_time = Some(now.clone());
                    volume.message = None;
                }
            }
        }
    }
    Ok(())
}

/// The consumers of `claims` from `seen`, when it covers every one of them.
fn seen_for(
    seen: Option<&validate::Consumers>,
    claims: &[&str],
) -> Option<BTreeMap<String, Vec<plan::ConsumerRef>>> {
    let seen = seen?;
    claims
        .iter()
        .map(|&c| Some((c.to_string(), seen.get(c)?.clone())))
        .collect()
}

fn push_error(status: &mut DataRestoreStatus, error: String) {
    status::add_line(&mut status.errors, error);
}

/// Most entries a list copied from a team's pod template keeps in the status: what a
/// stand-in needs fits many times over, while a template holding thousands would make
/// the DataRestore, which every restored volume shares, too large to write.
const COPIED_LIST_MAX: usize = 64;

/// The security the stand-in and restore-wait take from the consumer, without what they
/// never use (sysctls, Windows options) and with lists cut to [`COPIED_LIST_MAX`].
fn security_of(spec: &PodSpec) -> ConsumerSecurity {
    let pod = spec.security_context.clone().map(|mut pod| {
        pod.sysctls = None;
        pod.windows_options = None;
        if let Some(groups) = pod.supplemental_groups.as_mut() {
            groups.truncate(COPIED_LIST_MAX);
        }
        pod
    });
    let container = spec
        .containers
        .first()
        .and_then(|c| c.security_context.clone())
        .map(|mut container| {
            container.windows_options = None;
            if let Some(caps) = container.capabilities.as_mut() {
                for list in [caps.add.as_mut(), caps.drop.as_mut()]
                    .into_iter()
                    .flatten()
                {
                    list.truncate(COPIED_LIST_MAX);
                }
            }
            container
        });
    ConsumerSecurity { pod, container }
}

/// The consumer's tolerations the stand-in needs, without the two every pod gets from
/// the API server's DefaultTolerationSeconds admission (not-ready and unreachable, 300
/// s): the stand-in gets those too, and kept in the status they would take a quarter of
/// each volume's record, in an object that must stay under etcd's size limit.
fn tolerations_to_keep(spec: &PodSpec) -> Vec<Toleration> {
    let by_admission = |t: &Toleration| {
        matches!(
            t.key.as_deref(),
            Some("node.kubernetes.io/not-ready" | "node.kubernetes.io/unreachable")
        ) && t.operator.as_deref() == Some("Exists")
            && t.effect.as_deref() == Some("NoExecute")
            && t.toleration_seconds == Some(300)
            && t.value.is_none()
    };
    spec.tolerations
        .iter()
        .flatten()
        .filter(|t| !by_admission(t))
        .take(COPIED_LIST_MAX)
        .cloned()
        .collect()
}

/// A bare pod consumer as found: what creates it again, and its UID.
fn found_pod<'a>(planned: &plan::PlannedConsumer, pods: &'a [Arc<Pod>]) -> Option<&'a Pod> {
    (planned.kind == ConsumerKind::Pod)
        .then(|| pods.iter().find(|p| p.name_any() == planned.name))
        .flatten()
        .map(|p| &**p)
}

/// The largest bare pod manifest a volume's record keeps: a pod's own limit is etcd's
/// 1.5 MiB, and a team's pod that large, copied into the DataRestore every restored
/// volume shares, would leave it too large to write.
const MANIFEST_MAX: usize = 64 * 1024;

/// Whether a bare pod about to be deleted can be recorded to be made again; else why
/// not, before anything is stopped.
fn manifest_fits(pod: Option<&Pod>) -> Result<(), String> {
    match (pod, pod_manifest(pod)) {
        (Some(pod), Some(manifest)) if manifest.len() > MANIFEST_MAX => Err(format!(
            "bare pod {} is {} KiB as a manifest, more than the {} KiB refill records to create it again; stop it yourself, or run it from a workload",
            pod.name_any(),
            manifest.len() / 1024,
            MANIFEST_MAX / 1024
        )),
        _ => Ok(()),
    }
}

/// A bare pod is deleted to stop it, so its manifest is recorded before.
fn pod_manifest(pod: Option<&Pod>) -> Option<String> {
    pod.and_then(|p| serde_json::to_string(&consumer::recreatable_pod(p)).ok())
}

/// Where each consumer's record is in the status, by kind, namespace and name: a search
/// of every record for each consumer of each starting volume would make a restore's cost
/// grow with the square of its volumes.
type RecordIndex = HashMap<(ConsumerKind, String, String), usize>;

/// The index of the records in the namespaces `starting` answers true for: a volume's
/// consumers are in its own namespace (a pod mounts only claims of its namespace), so
/// at `parallel: 8` a pass indexes the few records it may add to, not all of them.
fn record_index(consumers: &[ConsumerRecord], starting: impl Fn(&str) -> bool) -> RecordIndex {
    let mut index = RecordIndex::new();
    for (i, c) in consumers.iter().enumerate() {
        if starting(&c.namespace) {
            // The first record of a key, as a search would find (the plan never makes two).
            index
                .entry((c.kind, c.namespace.clone(), c.name.clone()))
                .or_insert(i);
        }
    }
    index
}

/// Records `planned` (a consumer of a starting volume), or adds to its record: `index`
/// says where the records of `status` are, and learns where a new one goes.
fn merge_consumer(
    status: &mut DataRestoreStatus,
    index: &mut RecordIndex,
    planned: plan::PlannedConsumer,
    pods: &[Arc<Pod>],
) {
    let key = (
        planned.kind,
        planned.namespace.clone(),
        planned.name.clone(),
    );
    let existing = index.get(&key).and_then(|&i| status.consumers.get_mut(i));
    let pod = found_pod(&planned, pods);
    match existing {
        Some(record) => {
            let came_back = matches!(
                record.state,
                ConsumerState::Resumed | ConsumerState::Gone | ConsumerState::Replaced
            );
            // Until it is stopped, the pod to delete is the one running now, and what
            // brings it back is that pod's manifest: one made under the name since
            // (another pod that took it) is recorded as it is.
            if came_back || record.state == ConsumerState::Running {
                record.uid = pod.and_then(|p| p.metadata.uid.clone());
                if let Some(manifest) = pod_manifest(pod) {
                    record.original = Some(manifest);
                }
            }
            if record.original.is_none() {
                record.original = pod_manifest(pod);
            }
            for pvc in planned.pvcs {
                if !record.pvcs.contains(&pvc) {
                    record.pvcs.push(pvc);
                }
            }
            // A consumer that came back since (someone re-created it) is stopped again.
            if came_back {
                record.state = ConsumerState::Running;
            }
        }
        None => {
            let original = pod_manifest(pod);
            let uid = pod.and_then(|p| p.metadata.uid.clone());
            index.insert(key, status.consumers.len());
            status.consumers.push(ConsumerRecord {
                kind: planned.kind,
                namespace: planned.namespace,
                name: planned.name,
                pvcs: planned.pvcs,
                state: ConsumerState::Running,
                replicas: planned.replicas,
                original,
                held_by: None,
                switch_to: None,
                stopped_at: None,
                resumed_at: None,
                uid,
            })
        }
    }
}

/// The Events of a pass's volume notes, each with the claim it is about: the volumes
/// restored in the pass make one Event between them (their records say each; see
/// [`digest`]), as one each was a request per claim and, past the Events' queue, a
/// restore of thousands of claims lost them. What went wrong keeps an Event of its own.
fn events_of(notes: Vec<(String, Note)>) -> Vec<(Option<ObjectReference>, Note)> {
    let (restored, own): (Vec<_>, Vec<_>) = notes
        .into_iter()
        .partition(|(_, note)| !note.warning && note.reason == reasons::VOLUME_RESTORED);
    let mut events: Vec<(Option<ObjectReference>, Note)> = own
        .into_iter()
        .map(|(pvc, note)| (Context::pvc_ref(&pvc), note))
        .collect();
    if !restored.is_empty() {
        let (text, about) = digest(
            restored
                .into_iter()
                .map(|(pvc, note)| (note.text, Context::pvc_ref(&pvc)))
                .collect(),
        );
        events.push((
            about,
            Note {
                warning: false,
                reason: reasons::VOLUME_RESTORED,
                text,
            },
        ));
    }
    events
}

/// What [`work`] left.
pub(super) struct Worked {
    /// Nothing of refill's is left in the cluster: no stand-in, copier or scratch claim.
    pub done: bool,
    /// Some volume's step waits for its record to be written (see `volume::advance`):
    /// the next pass should come at once.
    pub held: bool,
}

/// Second half: act on what is recorded. Every volume moves on by a step, consumers are
/// stopped before their volumes go on and brought back after the last of them ended.
/// Whatever succeeded is in `status` even when an error is returned.
pub(super) async fn work(
    dr: &DataRestore,
    ctx: &Context,
    status: &mut DataRestoreStatus,
    deleting: bool,
) -> Result<Worked> {
    let uid = dr.uid().unwrap_or_default();
    let view = ctx
        .stores
        .view(&ctx.client, &ctx.config.namespace, &uid)
        .await?;
    // Only a volume about to get its stand-in needs the helper's settings; they are
    // read while consumers are stopped (or a scratch claim's fill starts).
    let needs_helper = status.volumes.iter().any(|v| match v.phase {
        VolumePhase::Quiescing => !v.fills_scratch_first(),
        // Made as Clearing starts, unless that pass's create met a pod of its name.
        VolumePhase::Clearing => v.stand_in_uid.is_none(),
        VolumePhase::StartingStandIn => v.stand_in_pod.is_none(),
        _ => false,
    });
    let helper = async {
        if needs_helper {
            ctx.helper_source().await.map(Some)
        } else {
            Ok(None)
        }
    };
    // Consumers a GitOps object manages are stopped only once it is paused.
    gitops::pause_marked(dr, ctx, status, &uid).await?;
    let (stopped, helper) = futures::join!(settle_consumers(dr, ctx, status, &uid), helper);
    let helper = helper?;
    let rules = rules(dr, &ctx.config, status, deleting, Timestamp::now());
    // A volume that has not started has nothing of refill's to look at: whether it
    // starts is decided with the others (spec.parallel), unless the restore stops.
    // Looking at the thousands still waiting in a large restore made each pass cost
    // as many volumes as it has.
    let to_advance: Vec<usize> = status
        .volumes
        .iter()
        .enumerate()
        .filter(|(_, v)| v.phase != VolumePhase::Pending || rules.stop.is_some())
        .map(|(i, _)| i)
        .collect();
    let consumers_of = ByClaim::consumers(&status.consumers);
    let act = Act {
        dr,
        ctx,
        uid: &uid,
        consumers_of: &consumers_of,
        pass: &view,
        helper: helper.as_ref(),
    };
    // Each volume is copied only while its own step runs, and kept only if the step
    // changed it: most volumes of a large restore wait on a node agent and come back
    // as they were, and a copy of every one held to the end of the pass was the
    // controller's largest use of memory after its watches.
    let mut changed = Vec::new();
    let mut notes = Vec::new();
    let mut left_behind = false;
    let mut held = Vec::new();
    let lagging = ctx.ledger.lagging(&uid);
    let volumes = &status.volumes;
    let advanced = for_each_concurrently(
        to_advance,
        |i| {
            let act = &act;
            let rules = &rules;
            let lagging = lagging.contains(&i);
            async move {
                let before = &volumes[i];
                let advanced = volume::advance(act, rules, before.clone(), lagging).await?;
                let volume = (advanced.volume != *before).then_some(advanced.volume);
                Ok((
                    volume,
                    advanced.applied,
                    advanced.left_behind,
                    advanced.held,
                ))
            }
        },
        |i, (volume, applied, left, hold): (Option<VolumeStatus>, Applied, bool, bool)| {
            if let Some(volume) = volume {
                changed.push((i, volume));
            }
            if applied.note.is_some() || applied.error.is_some() {
                notes.push((volumes[i].pvc.clone(), applied));
            }
            left_behind |= left;
            if hold {
                held.push(i);
            }
        },
    )
    .await;
    for (i, volume) in changed {
        status.volumes[i] = volume;
    }
    // Their records go out with this pass's; the next pass, at once, takes their steps.
    ctx.ledger.write_next(&uid, &held);
    let mut news = Vec::new();
    for (pvc, applied) in notes {
        if let Some(error) = applied.error {
            push_error(status, error);
        }
        news.extend(applied.note.map(|note| (pvc, note)));
    }
    for (about, note) in events_of(news) {
        ctx.event_about(dr, note.warning, note.reason, note.text, about);
    }
    // Volumes that ended in this pass may free their consumers at once.
    let settled = settle_consumers(dr, ctx, status, &uid).await;
    ctx.track_claims(
        dr,
        status
            .volumes
            .iter()
            .filter(|v| v.phase.is_active())
            .flat_map(|v| {
                let mut claims = vec![v.written_claim()];
                claims.extend(v.scratch_pvc.is_some().then(|| v.agent_claim()));
                claims
            })
            .map(|claim| {
                let (ns, claim) = split(&claim);
                (ns.to_string(), claim.to_string())
            }),
    );
    stopped?;
    advanced?;
    settled?;
    // Only the stand-ins refill made (by derived name and recorded UID) hold the restore
    // open: a pod of the team's wearing their labels would keep it waiting for good.
    // Each stand-in is looked up by its derived name, once per pass: matching every
    // stand-in against every volume would hash names S×V times in a large restore.
    let by_stand_in: BTreeMap<String, &crate::api::VolumeStatus> = status
        .volumes
        .iter()
        .map(|v| (crate::labels::stand_in_pod_name(&v.written_claim()), v))
        .collect();
    let stand_ins_left = view.stand_ins.iter().any(|((_, name), pod)| {
        by_stand_in
            .get(name)
            .is_some_and(|v| volume::sight::is_own_writer(pod, &uid, v))
    });
    Ok(Worked {
        done: !stand_ins_left && !left_behind,
        held: !held.is_empty(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_volumes_restored_in_a_pass_make_one_event_and_a_failure_its_own() {
        let note = |reason, warning, text: &str| Note {
            warning,
            reason,
            text: text.into(),
        };
        let restored = |pvc: &str| {
            (
                pvc.to_string(),
                note(reasons::VOLUME_RESTORED, false, &format!("{pvc} restored")),
            )
        };
        let aborting = (
            "shop/logs".to_string(),
            note(reasons::VOLUME_ABORTING, true, "shop/logs: gone"),
        );
        let events = events_of(vec![
            restored("shop/web"),
            aborting.clone(),
            restored("blog/data"),
            restored("shop/db"),
        ]);
        assert_eq!(
            events,
            [
                (Context::pvc_ref(&aborting.0), aborting.1),
                (
                    Context::pvc_ref("blog/data"),
                    note(
                        reasons::VOLUME_RESTORED,
                        false,
                        "blog/data restored; shop/db restored; shop/web restored"
                    )
                ),
            ]
        );
        assert!(events_of(Vec::new()).is_empty(), "no news, no Event");
        let one = events_of(vec![restored("shop/web")]);
        assert_eq!(one[0].1.text, "shop/web restored");
    }

    #[test]
    fn a_bare_pod_too_large_to_record_is_refused_before_it_is_deleted() {
        let mut pod = Pod::default();
        pod.metadata.name = Some("big".into());
        assert!(manifest_fits(Some(&pod)).is_ok());
        pod.metadata.annotations = Some([("a".to_string(), "x".repeat(70 * 1024))].into());
        let why = manifest_fits(Some(&pod)).unwrap_err();
        assert!(why.starts_with("bare pod big is 70 KiB"), "{why}");
        assert!(manifest_fits(None).is_ok());
    }

    #[test]
    fn only_the_records_of_starting_namespaces_are_indexed_each_at_its_first_place() {
        let record = |namespace: &str, name: &str| ConsumerRecord {
            namespace: namespace.into(),
            name: name.into(),
            ..crate::controller::testing::fixtures::consumer()
        };
        let consumers = [
            record("shop", "web"),
            record("blog", "web"),
            record("shop", "db"),
            record("shop", "web"),
        ];
        let index = record_index(&consumers, |ns| ns == "shop");
        let key =
            |ns: &str, name: &str| (ConsumerKind::Deployment, ns.to_string(), name.to_string());
        assert_eq!(index.len(), 2, "{index:?}");
        assert_eq!(index.get(&key("shop", "web")), Some(&0));
        assert_eq!(index.get(&key("shop", "db")), Some(&2));
        assert_eq!(index.get(&key("blog", "web")), None);
    }

    #[test]
    fn a_bare_pod_whose_name_another_took_is_recorded_anew_before_it_is_stopped_again() {
        let pod = |uid: &str, image: &str| {
            let mut pod = Pod::default();
            pod.metadata.name = Some("solo".into());
            pod.metadata.uid = Some(uid.into());
            pod.spec = Some(k8s_openapi::api::core::v1::PodSpec {
                containers: vec![k8s_openapi::api::core::v1::Container {
                    name: "app".into(),
                    image: Some(image.into()),
                    ..Default::default()
                }],
                ..Default::default()
            });
            Arc::new(pod)
        };
        let planned = || plan::PlannedConsumer {
            kind: ConsumerKind::Pod,
            namespace: "shop".into(),
            name: "solo".into(),
            replicas: None,
            pvcs: vec!["shop/data".into()],
            action: plan::ConsumerAction::DeletePod,
            switch_to: None,
            managed_by: vec![],
        };
        let mut status = DataRestoreStatus::default();
        // Learns where the record it adds is, so the next volume finds it there.
        let mut index = RecordIndex::default();
        merge_consumer(
            &mut status,
            &mut index,
            planned(),
            &[pod("u-first", "app:1")],
        );
        status.consumers[0].state = ConsumerState::Replaced;
        // A second volume of the restore starts once another pod took the name.
        merge_consumer(
            &mut status,
            &mut index,
            planned(),
            &[pod("u-theirs", "theirs:1")],
        );
        assert_eq!(status.consumers.len(), 1);
        let record = &status.consumers[0];
        assert_eq!(record.state, ConsumerState::Running);
        assert_eq!(record.uid.as_deref(), Some("u-theirs"));
        assert!(
            record.original.as_deref().unwrap().contains("theirs:1"),
            "brought back as the pod it deletes"
        );
        // Once stopped, the record is what brings it back: kept as it is.
        status.consumers[0].state = ConsumerState::Stopped;
        merge_consumer(
            &mut status,
            &mut index,
            planned(),
            &[pod("u-later", "later:1")],
        );
        let record = &status.consumers[0];
        assert_eq!(record.uid.as_deref(), Some("u-theirs"));
        assert!(record.original.as_deref().unwrap().contains("theirs:1"));
    }

    #[test]
    fn what_a_team_s_template_holds_is_copied_bounded() {
        use k8s_openapi::api::core::v1::{
            Capabilities, Container, PodSecurityContext, SecurityContext, Sysctl,
        };
        let many = |n: usize| (0..n).map(|i| format!("X{i}")).collect::<Vec<_>>();
        let spec = PodSpec {
            security_context: Some(PodSecurityContext {
                run_as_user: Some(1000),
                fs_group: Some(2000),
                supplemental_groups: Some((0..10_000).collect()),
                sysctls: Some(vec![Sysctl {
                    name: "a".into(),
                    value: "b".repeat(10_000),
                }]),
                ..Default::default()
            }),
            containers: vec![Container {
                name: "app".into(),
                security_context: Some(SecurityContext {
                    capabilities: Some(Capabilities {
                        add: Some(many(10_000)),
                        drop: Some(vec!["ALL".into()]),
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            tolerations: Some(
                (0..10_000)
                    .map(|i| Toleration {
                        key: Some(format!("k{i}")),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        };
        let security = security_of(&spec);
        let pod = security.pod.unwrap();
        assert_eq!((pod.run_as_user, pod.fs_group), (Some(1000), Some(2000)));
        assert_eq!(pod.supplemental_groups.unwrap().len(), COPIED_LIST_MAX);
        assert!(pod.sysctls.is_none());
        let caps = security.container.unwrap().capabilities.unwrap();
        assert_eq!(caps.add.unwrap().len(), COPIED_LIST_MAX);
        assert_eq!(caps.drop.unwrap(), ["ALL"]);
        assert_eq!(tolerations_to_keep(&spec).len(), COPIED_LIST_MAX);
    }

    #[test]
    fn tolerations_every_pod_gets_are_not_kept() {
        let toleration = |key: &str, seconds: Option<i64>| Toleration {
            key: Some(key.into()),
            operator: Some("Exists".into()),
            effect: Some("NoExecute".into()),
            toleration_seconds: seconds,
            ..Default::default()
        };
        let dedicated = Toleration {
            key: Some("dedicated".into()),
            operator: Some("Equal".into()),
            value: Some("db".into()),
            effect: Some("NoSchedule".into()),
            ..Default::default()
        };
        let spec = PodSpec {
            tolerations: Some(vec![
                toleration("node.kubernetes.io/not-ready", Some(300)),
                toleration("node.kubernetes.io/unreachable", Some(300)),
                // Set by the application itself: kept.
                toleration("node.kubernetes.io/unreachable", Some(30)),
                dedicated.clone(),
            ]),
            ..Default::default()
        };
        assert_eq!(
            tolerations_to_keep(&spec),
            vec![
                toleration("node.kubernetes.io/unreachable", Some(30)),
                dedicated
            ]
        );
        assert!(tolerations_to_keep(&PodSpec::default()).is_empty());
    }

    #[test]
    fn slots_respect_parallelism() {
        let volume = |phase| VolumeStatus {
            phase,
            ..Default::default()
        };
        let status = DataRestoreStatus {
            volumes: vec![
                volume(VolumePhase::Restoring),
                volume(VolumePhase::Aborting),
                volume(VolumePhase::Pending),
                volume(VolumePhase::Completed),
            ],
            ..Default::default()
        };
        assert_eq!(free_slots(&status, Some(1)), 0);
        assert_eq!(
            free_slots(&status, Some(3)),
            1,
            "an aborting volume holds its slot"
        );
        assert_eq!(free_slots(&status, Some(0)), 0);
    }

    #[test]
    fn a_volume_whose_data_is_in_frees_its_slot_unless_a_copy_follows() {
        // A copy follows for a staged or path restore, whose scratch claim is filled.
        let volume = |phase, scratch: bool| VolumeStatus {
            phase,
            scratch_pvc: scratch.then(|| "refill-scratch-data-1".to_string()),
            ..Default::default()
        };
        let status = |volumes| DataRestoreStatus {
            volumes,
            ..Default::default()
        };
        let removing = status(vec![
            volume(VolumePhase::RemovingStandIn, false),
            volume(VolumePhase::Switching, false),
            volume(VolumePhase::Pending, false),
        ]);
        assert_eq!(free_slots(&removing, Some(1)), 1);
        let copy_next = status(vec![volume(VolumePhase::RemovingStandIn, true)]);
        assert_eq!(free_slots(&copy_next, Some(1)), 0);
        let copying = status(vec![volume(VolumePhase::Copying, true)]);
        assert_eq!(free_slots(&copying, Some(1)), 0);
    }

    #[test]
    fn durations_and_their_defaults() {
        assert_eq!(duration_or(None, DEFAULT_VOLUME_TIMEOUT).1, "4h");
        assert_eq!(
            duration_or(Some("2h"), DEFAULT_TIMEOUT).0,
            Duration::from_secs(7200)
        );
    }

    #[test]
    fn a_restore_stops_when_canceled_deleted_or_out_of_time() {
        let mut dr = DataRestore::new("fix", Default::default());
        let start = Timestamp::from_second(1_000).unwrap();
        let status = DataRestoreStatus {
            start_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(start)),
            ..Default::default()
        };
        let soon = Timestamp::from_second(1_060).unwrap();
        assert!(stop_of(&dr, &status, false, soon).is_none());
        assert_eq!(
            stop_of(&dr, &status, true, soon).unwrap().outcome,
            VolumePhase::Canceled
        );
        let day_later = Timestamp::from_second(1_000 + 86_401).unwrap();
        let stop = stop_of(&dr, &status, false, day_later).expect("the default timeout");
        assert_eq!(stop.outcome, VolumePhase::Failed);
        assert!(
            stop.why.contains("within 24h (spec.timeout)"),
            "{}",
            stop.why
        );
        dr.spec.cancel = true;
        assert!(
            stop_of(&dr, &status, false, soon)
                .unwrap()
                .why
                .contains("spec.cancel")
        );
    }
}

//! What one pass sees of a volume's world, for [`super::decide`]. Reads only: from the
//! controller's watch-fed stores and indexes, and from the API only where a store that
//! lags behind could mislead a decision.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ContainerStatus, PersistentVolumeClaim, Pod, PodStatus};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::{Api, ResourceExt};

use crate::api::{
    ConsumerRecord, ConsumerState, PodVolumePhase, PodVolumeRestore, VolumePhase, VolumeStatus,
};
use crate::controller::build::copier;
use crate::controller::build::restore_helper;
use crate::controller::by_claim::ByClaim;
use crate::controller::consumer;
use crate::controller::runtime::stores::PassView;
use crate::controller::{Context, Result};
use crate::labels;
use crate::observe::{consumers, own_pods};

use super::decide::{
    ClaimSeen, ConsumersSeen, CopierSeen, InPodSeen, OnNode, PvrSeen, StandInSeen, VolumeSeen,
};

mod nodes;
mod switching;

/// The objects refill made for one volume, as the pass found them.
#[derive(Default)]
pub(crate) struct MadeSeen {
    pub stand_in: Option<Arc<Pod>>,
    pub pod_volume_restore: Option<Arc<PodVolumeRestore>>,
    /// A path restore's copier pod, once it may exist.
    pub copier: Option<Pod>,
    /// A path restore's scratch claim, once it may be left to delete.
    pub scratch: Option<PersistentVolumeClaim>,
}

impl MadeSeen {
    /// Whether nothing refill made for the volume is left to remove: its stand-in,
    /// copier and scratch claim are gone (its PodVolumeRestore is Velero's record).
    pub(crate) fn nothing_left(&self) -> bool {
        self.stand_in.is_none() && self.copier.is_none() && self.scratch.is_none()
    }
}

/// Which absences the stores report must be read again from the API before they are
/// believed: those that would end a volume, or let its consumers come back. A store
/// lags behind the API by a watch event; an object refill created a moment ago may not
/// be in it yet.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Confirm {
    pub stand_in: bool,
    pub pod_volume_restore: bool,
}

/// What to read again, from the volume's phase and what the stores hold. Pure.
pub(crate) fn confirm(
    phase: VolumePhase,
    stand_in: bool,
    pvr: Option<&PodVolumeRestore>,
) -> Confirm {
    // From StartingStandIn on, the stand-in was made: its absence fails the volume
    // (Restoring), lets its consumers come back (RemovingStandIn) or ends it (Aborting).
    // A whole-volume restore that deletes extra files makes it as it starts Clearing,
    // and it tidies in it.
    let stand_in_expected = matches!(
        phase,
        VolumePhase::Clearing
            | VolumePhase::Tidying
            | VolumePhase::StartingStandIn
            | VolumePhase::Restoring
            | VolumePhase::RemovingStandIn
            | VolumePhase::Aborting
    );
    let pvr_ended = pvr.is_some_and(|p| p.phase().is_terminal());
    Confirm {
        stand_in: stand_in_expected && !stand_in,
        pod_volume_restore: match phase {
            // Its absence fails the volume.
            VolumePhase::Restoring => pvr.is_none(),
            // The volume ends on a PodVolumeRestore no agent took only once the stand-in
            // is gone: that must hold after the stand-in was seen gone.
            VolumePhase::Aborting => !stand_in && !pvr_ended,
            _ => false,
        },
    }
}

/// Finds `volume`'s stand-in and PodVolumeRestore: in the pass's view, and read again
/// where [`confirm`] says so. `restore` and `uid` are the DataRestore's name and UID.
pub(crate) async fn found(
    ctx: &Context,
    restore: &str,
    uid: &str,
    volume: &VolumeStatus,
    pass: &PassView,
) -> Result<MadeSeen> {
    let (ns, _) = split(&volume.pvc);
    let stand_in_name = labels::stand_in_pod_name(&volume.written_claim());
    let pvr_name = labels::pod_volume_restore_name(restore, uid, &volume.pvc);
    let mut stand_in = pass
        .stand_ins
        .get(&(ns.to_string(), stand_in_name.clone()))
        .cloned();
    let mut pod_volume_restore = pass.pod_volume_restores.get(&pvr_name).cloned();
    let again = confirm(
        volume.phase,
        stand_in.is_some(),
        pod_volume_restore.as_deref(),
    );
    if again.stand_in {
        let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
        stand_in = pods
            .get_opt(&stand_in_name)
            .await?
            .filter(|p| own_pods::is_own_stand_in(p, uid))
            .map(Arc::new);
    }
    if again.pod_volume_restore || (again.stand_in && stand_in.is_none()) {
        let pvrs: Api<PodVolumeRestore> =
            Api::namespaced(ctx.client.clone(), &ctx.config.namespace);
        pod_volume_restore = pvrs.get_opt(&pvr_name).await?.map(Arc::new);
    }
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), ns);
    let copier_name = labels::copier_pod_name(&volume.pvc);
    let stored = pass
        .copiers
        .as_ref()
        .map(|copiers| copiers.get(&(ns.to_string(), copier_name.clone())));
    let copier = async {
        if !copier_may_exist(volume, stand_in.is_some()) {
            return Ok(None);
        }
        match stored {
            Some(Some(pod)) => Ok(Some(Pod::clone(pod))),
            Some(None) if !confirm_copier_absence(volume) => Ok(None),
            _ => pods.get_opt(&copier_name).await,
        }
    };
    // Made with the stand-in, before the fill; read once it may be left to delete.
    let scratch = async {
        match &volume.scratch_pvc {
            Some(scratch) if scratch_may_be_left(volume) => claims.get_opt(scratch).await,
            _ => Ok(None),
        }
    };
    let (copier, scratch) = futures::try_join!(copier, scratch)?;
    Ok(MadeSeen {
        stand_in,
        pod_volume_restore,
        copier,
        scratch,
    })
}

/// In Clearing, Copying, Tidying and Aborting a volume's copier may exist; before, it
/// is not read. An ended volume saw its copier gone, or exited and deleted by the pass
/// that ended it, so it is not read either: a large restore's ended volumes would cost
/// a read each on every pass.
///
/// A whole-volume restore sets aside and tidies in its stand-in: in Clearing and
/// Tidying a copier exists only when one was made (by a refill before this shape, or
/// for a tidy whose stand-in went before it began), and its absence is cheap to see.
fn copier_may_exist(volume: &VolumeStatus, stand_in: bool) -> bool {
    let in_stand_in = volume.clears_first()
        && matches!(volume.phase, VolumePhase::Clearing | VolumePhase::Tidying)
        && stand_in
        && volume.copier_uid.is_none();
    let has_copier = (volume.fills_scratch_first() || volume.clears_first()) && !in_stand_in;
    has_copier
        && matches!(
            volume.phase,
            VolumePhase::Clearing
                | VolumePhase::Copying
                | VolumePhase::Tidying
                | VolumePhase::Aborting
        )
}

/// Whether the copier's absence from the pod store must be read again from the API
/// before it is believed. Pure. A store lags behind the API only for an object made a
/// moment ago: one refill made and recorded whose work is not recorded done yet, whose
/// absence would be taken for a deletion (the record forgotten, and a copier made
/// again). Before one is made, an absence makes refill create it, and a pod already
/// under the name (an earlier pass's whose record was lost) refuses that; once its
/// work is recorded done, the copier writes nothing any more and the store saw it go.
/// A put-back copier (Aborting) is always read: it is the last thing between a
/// failed volume and its old files.
pub(crate) fn confirm_copier_absence(volume: &VolumeStatus) -> bool {
    let done = match volume.phase {
        VolumePhase::Clearing => volume.cleared.is_some(),
        VolumePhase::Tidying => volume.tidied.is_some(),
        VolumePhase::Copying => volume.copied.is_some(),
        _ => return true,
    };
    volume.copier_uid.is_some() && !done
}

/// A staged or path restore's scratch claim may be left to delete from Copying on
/// (it is made with the stand-in, and deleted once the volume ended).
fn scratch_may_be_left(volume: &VolumeStatus) -> bool {
    volume.fills_scratch_first()
        && (matches!(volume.phase, VolumePhase::Copying | VolumePhase::Aborting)
            || volume.phase.is_terminal())
}

/// The copier pod as [`decide`](super::decide) needs to know it.
pub(crate) fn copier_of(pod: &Pod, uid: &str, volume: &VolumeStatus) -> CopierSeen {
    if !own_pods::is_own_copier(pod, uid) {
        return CopierSeen::Other {
            name: pod.name_any(),
            restore: own_pods::stand_in_restore(pod).unwrap_or_else(|| "another restore".into()),
        };
    }
    if !is_own_writer(pod, uid, volume) {
        return CopierSeen::Unrecorded {
            name: pod.name_any(),
            terminating: pod.metadata.deletion_timestamp.is_some(),
        };
    }
    CopierSeen::Present {
        name: pod.name_any(),
        terminating: pod.metadata.deletion_timestamp.is_some(),
        ended: copier::outcome(pod),
        waiting: copier::waiting(pod),
        puts_back: copier::puts_back(pod),
        rejected: copier::rejected(pod),
    }
}

pub(crate) fn split(key: &str) -> (&str, &str) {
    key.split_once('/').expect("volume keys are namespace/name")
}

/// The consumers of `pvc` as the restore's records tell: with `switching`, the
/// workloads to switch onto its new claim; else those stopped while it is written.
pub(crate) fn consumers(of_claim: &[&ConsumerRecord], switching: bool) -> ConsumersSeen {
    let mine = of_claim
        .iter()
        .filter(|c| c.switch_to.is_some() == switching);
    let mut state = ConsumersSeen::Stopped;
    for record in mine {
        match record.state {
            ConsumerState::HeldByOther => {
                let holder = record.held_by.as_deref().unwrap_or("another DataRestore");
                return ConsumersSeen::HeldBy(format!(
                    "{:?} {}/{} is stopped by DataRestore {holder}, which is restoring it; restore this PVC again after that one ends",
                    record.kind, record.namespace, record.name
                ));
            }
            ConsumerState::Stopped | ConsumerState::KeptStopped => {}
            _ => state = ConsumersSeen::Stopping,
        }
    }
    state
}

fn restore_wait_status(pod: &Pod) -> Option<&k8s_openapi::api::core::v1::ContainerStatus> {
    pod.status
        .as_ref()?
        .init_container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == restore_helper::CONTAINER_NAME)
}

/// Our stand-in pod as [`decide`](super::decide) needs to know it.
pub(crate) fn stand_in_of(pod: &Pod) -> StandInSeen {
    let status = pod.status.clone().unwrap_or_default();
    let wait = restore_wait_status(pod);
    let wait_state = wait.and_then(|c| c.state.as_ref());
    let restore_wait_since = wait_state
        .and_then(|s| s.running.as_ref())
        .map(|r| r.started_at.as_ref().map_or(Timestamp::now(), |t| t.0));
    let failed = if status.phase.as_deref() == Some("Failed") {
        Some(
            status
                .message
                .clone()
                .or(status.reason.clone())
                .unwrap_or_else(|| "the pod failed".into()),
        )
    } else {
        wait_state
            .and_then(|s| s.terminated.as_ref())
            .filter(|t| t.exit_code != 0)
            .map(|t| {
                format!(
                    "restore-wait exited with code {}{}",
                    t.exit_code,
                    t.reason
                        .as_ref()
                        .map(|r| format!(" ({r})"))
                        .unwrap_or_default()
                )
            })
    };
    let unscheduled = crate::controller::build::stand_in::unscheduled(&status);
    let container_waiting = wait_state
        .and_then(|s| s.waiting.as_ref())
        .and_then(|w| w.reason.clone().map(|r| (r, w.message.clone())))
        .filter(|(reason, _)| reason != "PodInitializing" && reason != "ContainerCreating")
        .map(|(reason, message)| match message {
            Some(m) => format!("restore-wait: {reason}: {m}"),
            None => format!("restore-wait: {reason}"),
        });
    let restore_wait_done = wait_state
        .and_then(|s| s.terminated.as_ref())
        .is_some_and(|t| t.exit_code == 0);
    let in_pod = in_pod_of(pod, &status);
    StandInSeen::Ours {
        name: pod.name_any(),
        terminating: pod.metadata.deletion_timestamp.is_some(),
        failed,
        restore_wait_since,
        restore_wait_done,
        waiting: unscheduled.or(container_waiting),
        in_pod,
    }
}

/// What the set-aside and tidy containers of a stand-in that has them did, from their
/// termination messages: what a restarted controller reads to go on.
fn in_pod_of(pod: &Pod, status: &PodStatus) -> Option<InPodSeen> {
    let spec = pod.spec.as_ref()?;
    if !spec
        .init_containers
        .iter()
        .flatten()
        .any(|c| c.name == copier::SET_ASIDE_CONTAINER)
    {
        return None;
    }
    let end = |statuses: &Option<Vec<ContainerStatus>>, name: &str| {
        let terminated = statuses
            .iter()
            .flatten()
            .find(|c| c.name == name)?
            .state
            .as_ref()?
            .terminated
            .as_ref()?;
        // Its report is what the volume records; a status that says it ended before
        // carrying one is looked at again.
        (terminated.exit_code != 0 || terminated.message.is_some())
            .then(|| copier::ended(terminated))
    };
    Some(InPodSeen {
        set_aside: end(&status.init_container_statuses, copier::SET_ASIDE_CONTAINER),
        tidy: end(&status.container_statuses, copier::TIDY_CONTAINER),
    })
}

fn pvr_of(found: &PodVolumeRestore) -> PvrSeen {
    let status = found.status.clone().unwrap_or_default();
    // Velero 1.14 has no acceptance: it sets startTimestamp when it starts. Later ones
    // accept first, and set startTimestamp also when they cancel a restore they never
    // took, so a Canceled one counts only with its acceptance.
    let started = status.start_timestamp.is_some() && found.phase() != PodVolumePhase::Canceled;
    let taken = status.accepted_timestamp.is_some()
        || started
        || matches!(
            found.phase(),
            PodVolumePhase::Accepted
                | PodVolumePhase::Prepared
                | PodVolumePhase::InProgress
                | PodVolumePhase::Canceling
                | PodVolumePhase::Completed
        );
    PvrSeen {
        taken,
        name: found.name_any(),
        phase: found.phase(),
        cancel_requested: found.spec.cancel == Some(true),
        node: status.node,
        message: status.message,
    }
}

/// Sees `volume`'s world. `uid` is the DataRestore's UID.
pub(crate) async fn seen(
    ctx: &Context,
    uid: &str,
    consumers_of: &ByClaim<'_, ConsumerRecord>,
    volume: &VolumeStatus,
    found: &MadeSeen,
) -> Result<VolumeSeen> {
    if volume.phase == VolumePhase::Switching {
        return switching::seen(ctx, uid, consumers_of.of(&volume.pvc), volume).await;
    }
    // The claim written: the PVC itself, or the new claim made for it.
    let written = volume.written_claim();
    let pvc = written.as_str();
    let (ns, claim) = split(pvc);
    let stand_in_name = labels::stand_in_pod_name(pvc);
    let mounting = consumers::pods_mounting(ctx.reads(), ns, &[claim]).await?;

    let mut stand_in = match &found.stand_in {
        Some(pod) if is_own_writer(pod, uid, volume) => stand_in_of(pod),
        Some(pod) => StandInSeen::Unrecorded {
            name: pod.name_any(),
            terminating: pod.metadata.deletion_timestamp.is_some(),
        },
        None => StandInSeen::Absent,
    };
    let mut foreign_pods = Vec::new();
    // What waits on which node.
    let mut on_nodes = Vec::new();
    // When each foreign pod that is not being deleted was made.
    let mut live_since = Vec::new();
    for pod in &mounting {
        if is_own_writer(pod, uid, volume) {
            continue;
        }
        if own_pods::is_stand_in(pod) {
            // Stand-in names derive from the claim: another restore's holds it.
            if pod.name_any() == stand_in_name && stand_in == StandInSeen::Absent {
                stand_in = StandInSeen::Other {
                    name: pod.name_any(),
                    restore: own_pods::stand_in_restore(pod)
                        .unwrap_or_else(|| "another restore".into()),
                    terminating: pod.metadata.deletion_timestamp.is_some(),
                };
                continue;
            }
        }
        if pod.metadata.deletion_timestamp.is_none() {
            live_since.push(pod.metadata.creation_timestamp.as_ref().map(|t| t.0));
        }
        on_nodes.push((node_of(pod), OnNode::Pod(pod.name_any())));
        foreign_pods.push(pod.name_any());
    }

    // While a scratch claim is filled, the consumers run on by design.
    let watching = match volume.phase {
        VolumePhase::Quiescing
        | VolumePhase::Clearing
        | VolumePhase::Copying
        | VolumePhase::Tidying => true,
        VolumePhase::StartingStandIn | VolumePhase::Restoring => !volume.fills_scratch_first(),
        _ => false,
    };
    let restarted = if watching {
        let records = consumers_of.of(pvc).iter().copied();
        restarted(ctx, uid, records, &live_since).await?
    } else {
        None
    };

    // The PVC itself: a claim made beside it does not exist before its stand-in, and
    // the index would call it deleted.
    let (pvc_ns, pvc_name) = split(&volume.pvc);
    let claim_state = match ctx.known.claims.deleted(pvc_ns, pvc_name) {
        Some(true) => ClaimSeen::Deleted,
        _ => ClaimSeen::Exists,
    };
    let pvr = found.pod_volume_restore.as_deref().map(pvr_of);
    let copier = found
        .copier
        .as_ref()
        .map_or(CopierSeen::Absent, |pod| copier_of(pod, uid, volume));
    let stand_in_node = match (&stand_in, &found.stand_in) {
        (
            StandInSeen::Ours {
                name,
                in_pod,
                restore_wait_done,
                ..
            },
            Some(pod),
        ) => {
            on_nodes.push((node_of(pod), OnNode::StandIn(name.clone())));
            // Its set-aside, or its tidy once restore-wait exited, may run there unheard
            // of until it is known to have ended. (Between the two, the node agent is
            // the writer, and only once it took the PodVolumeRestore.)
            let steps_may_run = in_pod.as_ref().is_some_and(|steps| {
                steps.set_aside.is_none() || (*restore_wait_done && steps.tidy.is_none())
            });
            if steps_may_run {
                on_nodes.push((node_of(pod), OnNode::StandInSteps(name.clone())));
            }
            Some(node_of(pod))
        }
        _ => None,
    };
    // The node agent that serves the stand-in's node takes the PodVolumeRestore.
    if let Some(pvr) = pvr.as_ref().filter(|p| !p.phase.is_terminal())
        && let Some(node) = pvr.node.clone().or(stand_in_node)
    {
        let on = OnNode::Agent {
            pvr: pvr.name.clone(),
            taken: pvr.taken,
        };
        on_nodes.push((node, on));
    }
    if let (CopierSeen::Present { name, ended, .. }, Some(pod)) = (&copier, &found.copier) {
        let ended = ended.is_some();
        let on = OnNode::Copier {
            name: name.clone(),
            ended,
        };
        on_nodes.push((node_of(pod), on));
    }
    if let Some(node) = &volume.node {
        on_nodes.push((node.clone(), OnNode::Volume));
    }
    let nodes_down = nodes::nodes_down(on_nodes, |n| ctx.known.nodes.down(n));
    Ok(VolumeSeen {
        claim: claim_state,
        consumers: consumers(consumers_of.of(&volume.pvc), false),
        foreign_pods,
        restarted,
        stand_in,
        pvr,
        copier,
        scratch: found
            .scratch
            .as_ref()
            .is_some_and(|c| c.metadata.deletion_timestamp.is_none()),
        nodes_down,
    })
}

/// The node a pod is bound to; empty while it is not.
fn node_of(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default()
}

/// Who started one of the stopped `records` again, if one of them was: read only for
/// those [`worth_reading`] says may have been, given when the live pods on their claim
/// (`live_since`) were made.
async fn restarted<'a>(
    ctx: &Context,
    uid: &str,
    records: impl Iterator<Item = &'a ConsumerRecord>,
    live_since: &[Option<Timestamp>],
) -> Result<Option<String>> {
    if live_since.is_empty() {
        return Ok(None);
    }
    let now = Timestamp::now();
    for record in records {
        let read = match worth_reading(record.stopped_at.as_ref().map(|t| t.0), live_since, now) {
            Reading::Skip => false,
            Reading::Now => true,
            // The workload watch shows it as the stop left it: nothing a read could add.
            Reading::Paced(_)
                if ctx.known.templates.still_stopped_by(
                    record.kind,
                    &record.namespace,
                    &record.name,
                    uid,
                ) =>
            {
                false
            }
            Reading::Paced(pace) => {
                ctx.paced_read(&format!("{uid}/{}", consumer::describe(record)), pace)
            }
        };
        if read && let Some(problem) = consumer::interference(&ctx.client, uid, record).await? {
            return Ok(Some(problem));
        }
    }
    Ok(None)
}

/// How far the API server's clock (pods' creation times) may be behind refill's
/// (`stoppedAt`) for a pod made after a stop still to count as made after it.
const CLOCK_SKEW: SignedDuration = SignedDuration::from_secs(2);
/// How long a stopped workload's pods may take to start going before the workload is
/// read again each pass. Generous: with a thousand workloads stopped at once, the
/// control plane here took 25 s to delete their pods.
const STOP_SETTLES: SignedDuration = SignedDuration::from_secs(30);

/// Whether a stopped consumer is read for a restart, given when it was stopped and when
/// each pod mounting its claim that is not being deleted was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reading {
    /// Nothing a read could tell.
    Skip,
    /// Read now: a pod made after the stop (or nothing known of the stop).
    Now,
    /// Read, but at most once per the time given ([`Context::paced_read`]): pods made
    /// before the stop still live after it had time to settle.
    Paced(Duration),
}

/// Whether a stopped consumer must be read for a restart, from when it was stopped and
/// when each pod mounting its claim that is not being deleted was made. Pure.
///
/// Reading it is what tells a restart (someone scaled it back) from a stop still
/// under way, and costs a request per consumer per pass. Right after a stop its own
/// pods linger, not yet deleted by its controller: they were made before the stop and
/// mean nothing yet. A pod made after the stop does, at once. Live pods made before it
/// mean something once the stop has had time to settle, but a slow control plane
/// (a thousand workloads stopped at once) keeps them for a while, and reading the
/// workload on every pass meanwhile costs a request each time: those reads are paced,
/// as far apart as the stop is old (within the pacer's bounds), so that the longer a
/// larger restore's control plane takes, the fewer times each workload is read
/// meanwhile; and not at all while the workload watch shows it as the stop left it
/// ([`crate::template_mounts::TemplateMounts::still_stopped_by`]). Skipping a read
/// never lets anything write: the volume waits while any pod mounts its claim; a read
/// only tells sooner why it waits.
pub(crate) fn worth_reading(
    stopped_at: Option<Timestamp>,
    live_since: &[Option<Timestamp>],
    now: Timestamp,
) -> Reading {
    if live_since.is_empty() {
        return Reading::Skip;
    }
    let Some(stopped) = stopped_at else {
        return Reading::Now;
    };
    if live_since
        .iter()
        .any(|made| made.is_none_or(|m| m >= stopped - CLOCK_SKEW))
    {
        Reading::Now
    } else if now.duration_since(stopped) >= STOP_SETTLES {
        let since = now.duration_since(stopped).unsigned_abs();
        Reading::Paced(since)
    } else {
        Reading::Skip
    }
}

/// Whether `pod` is the restore's own stand-in or copier for `volume`: by its labels,
/// its derived name, and the UID refill recorded when it made it. Labels and names are
/// the team's to copy; a pod of theirs that copies them, before refill makes its own or
/// in its place, is a writer like any other.
pub(crate) fn is_own_writer(pod: &Pod, uid: &str, volume: &VolumeStatus) -> bool {
    let name = pod.name_any();
    let recorded =
        |uid: &Option<String>| uid.is_some() && pod.metadata.uid.as_deref() == uid.as_deref();
    let stand_in = own_pods::is_own_stand_in(pod, uid)
        && name == labels::stand_in_pod_name(&volume.written_claim())
        && recorded(&volume.stand_in_uid);
    let copier = own_pods::is_own_copier(pod, uid)
        && name == labels::copier_pod_name(&volume.pvc)
        && recorded(&volume.copier_uid);
    stand_in || copier
}

/// Whether this restore's PodVolumeRestore names `pod` as the one it writes through.
/// Only refill makes PodVolumeRestores (in Velero's namespace, where teams cannot), and
/// it makes one right after its stand-in: a stand-in whose UID a lost status write did
/// not record is known by it.
fn vouched_for(pod: &Pod, pvr: Option<&PodVolumeRestore>) -> bool {
    let named = pvr.and_then(|p| p.spec.pod.uid.as_deref());
    named.is_some() && named == pod.metadata.uid.as_deref()
}

/// Copies what the stand-in and the node agent report (node, bytes) into the record.
pub(crate) fn follow(volume: &mut VolumeStatus, found: &MadeSeen, uid: &str) {
    // An ended volume's record is final: a PodVolumeRestore whose last progress report
    // says less than all (an instant copy reports none) would otherwise undo what its
    // end recorded, pass after pass, and each time its mirror and the status be written.
    if volume.phase.is_terminal() {
        return;
    }
    // The record is of the copier there is: once none is, the next one refill makes
    // (a copy or clearing done again, after a restart lost what the last one did) is
    // recorded anew when it is made.
    if found.copier.is_none() && copier_may_exist(volume, found.stand_in.is_some()) {
        volume.copier_uid = None;
    }
    if let Some(pod) = &found.stand_in {
        if volume.stand_in_uid.is_none()
            && own_pods::is_own_stand_in(pod, uid)
            && vouched_for(pod, found.pod_volume_restore.as_deref())
        {
            volume.stand_in_uid = pod.metadata.uid.clone();
        }
        if is_own_writer(pod, uid, volume) {
            volume.stand_in_pod = Some(pod.name_any());
            if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
                volume.node = Some(node);
            }
        }
    }
    let Some(found) = &found.pod_volume_restore else {
        return;
    };
    let status = found.status.clone().unwrap_or_default();
    if let Some(progress) = &status.progress {
        volume.bytes_done = progress.bytes_done;
        if progress.total_bytes > 0 {
            volume.total_bytes = progress.total_bytes;
        }
    }
    if let Some(node) = status.node {
        volume.node = Some(node);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ConsumerKind, ConsumerRecord};
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateWaiting, ContainerStatus,
        PodCondition, PodStatus,
    };

    #[test]
    fn a_stopped_consumer_is_read_for_a_restart_only_when_a_live_pod_can_mean_one() {
        let at = |second: i64| Timestamp::from_second(second).unwrap();
        let stop = Some(at(100));
        // (stopped at, live pods made at, now, read?)
        type Row<'a> = (Option<Timestamp>, &'a [Option<Timestamp>], i64, Reading);
        let rows: [Row; 10] = [
            (stop, &[], 101, Reading::Skip),
            (stop, &[], 900, Reading::Skip),
            (None, &[], 101, Reading::Skip),
            // Its own pods, made before the stop, not yet deleted by its controller.
            (stop, &[Some(at(40))], 101, Reading::Skip),
            (stop, &[Some(at(40)), Some(at(60))], 129, Reading::Skip),
            // A pod made after the stop (or within the clock skew before it).
            (stop, &[Some(at(40)), Some(at(101))], 101, Reading::Now),
            (stop, &[Some(at(99))], 900, Reading::Now),
            // The stop had time to settle and a pod made before it still lives.
            // Paced as far apart as the stop is old.
            (
                stop,
                &[Some(at(40))],
                130,
                Reading::Paced(Duration::from_secs(30)),
            ),
            (
                stop,
                &[Some(at(40))],
                190,
                Reading::Paced(Duration::from_secs(90)),
            ),
            // Nothing known: read.
            (None, &[Some(at(40))], 101, Reading::Now),
        ];
        for (stopped, live, now, want) in rows {
            assert_eq!(
                worth_reading(stopped, live, at(now)),
                want,
                "stopped {stopped:?}, live pods made {live:?}, now {now}"
            );
        }
    }

    fn record(state: ConsumerState) -> ConsumerRecord {
        ConsumerRecord {
            kind: ConsumerKind::Deployment,
            namespace: "shop".into(),
            name: "web".into(),
            pvcs: vec!["shop/data".into()],
            state,
            replicas: Some(2),
            original: None,
            held_by: Some("velero/first".into()),
            switch_to: None,
            stopped_at: None,
            resumed_at: None,
            uid: None,
        }
    }

    #[test]
    fn consumers_are_stopped_only_when_every_record_says_so() {
        let mut records = vec![
            record(ConsumerState::Stopped),
            record(ConsumerState::Stopping),
        ];
        let of = |records: &[ConsumerRecord], claim: &str, switching: bool| {
            consumers(ByClaim::consumers(records).of(claim), switching)
        };
        assert_eq!(of(&records, "shop/data", false), ConsumersSeen::Stopping);
        assert_eq!(of(&records, "shop/other", false), ConsumersSeen::Stopped);
        assert_eq!(
            of(&records, "shop/data", true),
            ConsumersSeen::Stopped,
            "no workload to switch"
        );
        records[1].state = ConsumerState::Stopped;
        assert_eq!(of(&records, "shop/data", false), ConsumersSeen::Stopped);
        records[1].state = ConsumerState::HeldByOther;
        let ConsumersSeen::HeldBy(message) = of(&records, "shop/data", false) else {
            panic!("held")
        };
        assert!(
            message.contains("stopped by DataRestore velero/first"),
            "{message}"
        );
    }

    fn pvr(phase: crate::api::PodVolumePhase) -> PodVolumeRestore {
        let mut pvr = PodVolumeRestore::new("r", Default::default());
        pvr.status = Some(crate::api::PodVolumeRestoreStatus {
            phase: Some(phase),
            ..Default::default()
        });
        pvr
    }

    #[test]
    fn a_copier_missing_from_the_store_is_read_again_only_while_made_and_not_done() {
        let volume = |phase, made: bool, done: bool| VolumeStatus {
            pvc: "shop/data".into(),
            phase,
            copier_uid: made.then(|| "u-copier".into()),
            cleared: (done && phase == VolumePhase::Clearing).then_some(3),
            tidied: (done && phase == VolumePhase::Tidying).then_some(3),
            copied: (done && phase == VolumePhase::Copying).then(Default::default),
            put_back: (done && phase == VolumePhase::Aborting).then_some(3),
            ..Default::default()
        };
        // (phase, made and recorded, its work recorded done, read again?)
        let rows = [
            (VolumePhase::Clearing, false, false, false),
            (VolumePhase::Clearing, true, false, true),
            (VolumePhase::Clearing, true, true, false),
            (VolumePhase::Tidying, false, false, false),
            (VolumePhase::Tidying, true, false, true),
            (VolumePhase::Tidying, true, true, false),
            (VolumePhase::Copying, true, false, true),
            (VolumePhase::Copying, true, true, false),
            (VolumePhase::Aborting, false, false, true),
            (VolumePhase::Aborting, true, true, true),
        ];
        for (phase, made, done, want) in rows {
            assert_eq!(
                confirm_copier_absence(&volume(phase, made, done)),
                want,
                "{phase:?}, made {made}, done {done}"
            );
        }
    }

    #[test]
    fn a_copier_s_record_goes_with_it_and_a_copier_found_later_is_not_taken_for_refill_s() {
        let clearing = VolumeStatus {
            pvc: "shop/data".into(),
            phase: VolumePhase::Clearing,
            copier_uid: Some("u-first".into()),
            ..Default::default()
        };
        let mut gone = clearing.clone();
        follow(&mut gone, &MadeSeen::default(), "r");
        assert_eq!(gone.copier_uid, None, "looked for, and none is there");
        let mut copier = Pod::default();
        copier.metadata.name = Some(labels::copier_pod_name("shop/data"));
        copier.metadata.uid = Some("u-second".into());
        copier.metadata.labels = Some(
            [
                (labels::ROLE.to_string(), labels::ROLE_COPIER.to_string()),
                (labels::DATA_RESTORE_UID.to_string(), "r".to_string()),
            ]
            .into(),
        );
        let found = MadeSeen {
            copier: Some(copier),
            ..MadeSeen::default()
        };
        // Refill records the copier it makes from the API's answer; one found under the
        // name is anyone's.
        follow(&mut gone, &found, "r");
        assert_eq!(gone.copier_uid, None);
        // Where the copier is not looked for, its absence says nothing.
        let mut restoring = VolumeStatus {
            phase: VolumePhase::Restoring,
            ..clearing
        };
        follow(&mut restoring, &MadeSeen::default(), "r");
        assert_eq!(restoring.copier_uid.as_deref(), Some("u-first"));
    }

    #[test]
    fn only_a_stand_in_copier_or_scratch_claim_is_left_to_remove() {
        assert!(MadeSeen::default().nothing_left());
        let pvr = MadeSeen {
            pod_volume_restore: Some(Arc::new(pvr(PodVolumePhase::Completed))),
            ..MadeSeen::default()
        };
        assert!(pvr.nothing_left(), "Velero's record of the restore stays");
        let left = [
            MadeSeen {
                stand_in: Some(Arc::new(Pod::default())),
                ..MadeSeen::default()
            },
            MadeSeen {
                copier: Some(Pod::default()),
                ..MadeSeen::default()
            },
            MadeSeen {
                scratch: Some(PersistentVolumeClaim::default()),
                ..MadeSeen::default()
            },
        ];
        assert!(left.iter().all(|found| !found.nothing_left()));
    }

    #[test]
    fn only_the_recorded_stand_in_and_copier_are_refill_s_writers() {
        let volume = VolumeStatus {
            pvc: "shop/data".into(),
            stand_in_uid: Some("u-stand-in".into()),
            ..Default::default()
        };
        let pod = |name: String, role: &str, restore: &str, pod_uid: &str| {
            let mut pod = Pod::default();
            pod.metadata.name = Some(name);
            pod.metadata.uid = Some(pod_uid.into());
            pod.metadata.labels = Some(
                [
                    (labels::ROLE.to_string(), role.to_string()),
                    (labels::DATA_RESTORE_UID.to_string(), restore.to_string()),
                ]
                .into(),
            );
            pod
        };
        let stand_in = labels::stand_in_pod_name("shop/data");
        let copier = labels::copier_pod_name("shop/data");
        let ours = pod(stand_in.clone(), labels::ROLE_STAND_IN, "r", "u-stand-in");
        assert!(is_own_writer(&ours, "r", &volume));
        // A team's pods wearing the labels: another name, or the name but not the UID.
        let copy = pod("mine".into(), labels::ROLE_STAND_IN, "r", "u-stand-in");
        assert!(!is_own_writer(&copy, "r", &volume));
        let replaced = pod(stand_in, labels::ROLE_STAND_IN, "r", "u-other");
        assert!(!is_own_writer(&replaced, "r", &volume));
        // A copier is refill's by its recorded UID only: not before one is recorded
        // (a team's pod put under the name first), nor with another recorded.
        let copier_pod = pod(copier, labels::ROLE_COPIER, "r", "u-copier");
        assert!(!is_own_writer(&copier_pod, "r", &volume));
        let recorded = VolumeStatus {
            copier_uid: Some("u-copier".into()),
            ..volume.clone()
        };
        assert!(is_own_writer(&copier_pod, "r", &recorded));
        let other = VolumeStatus {
            copier_uid: Some("u-first-copier".into()),
            ..volume.clone()
        };
        assert!(!is_own_writer(&copier_pod, "r", &other));
        assert!(!is_own_writer(&ours, "another-restore", &volume));
    }

    #[test]
    fn an_unrecorded_stand_in_is_taken_for_refill_s_only_when_its_pod_volume_restore_names_it() {
        let pod = |pod_uid: &str| {
            let mut pod = Pod::default();
            pod.metadata.name = Some(labels::stand_in_pod_name("shop/data"));
            pod.metadata.uid = Some(pod_uid.into());
            pod.metadata.labels = Some(
                [
                    (labels::ROLE.to_string(), labels::ROLE_STAND_IN.to_string()),
                    (labels::DATA_RESTORE_UID.to_string(), "r".to_string()),
                ]
                .into(),
            );
            Arc::new(pod)
        };
        let pvr_for = |pod_uid: &str| {
            let mut pvr = PodVolumeRestore::new("p", Default::default());
            pvr.spec.pod.uid = Some(pod_uid.into());
            Arc::new(pvr)
        };
        let lost = VolumeStatus {
            pvc: "shop/data".into(),
            phase: VolumePhase::StartingStandIn,
            ..Default::default()
        };
        // Made by a pass whose status write was lost, after which its PodVolumeRestore
        // went out: that names it.
        let mut volume = lost.clone();
        let found = MadeSeen {
            stand_in: Some(pod("u-1")),
            pod_volume_restore: Some(pvr_for("u-1")),
            ..MadeSeen::default()
        };
        follow(&mut volume, &found, "r");
        assert_eq!(volume.stand_in_uid.as_deref(), Some("u-1"));
        assert_eq!(
            volume.stand_in_pod,
            Some(labels::stand_in_pod_name("shop/data"))
        );
        // A team's pod under the name and labels: no PodVolumeRestore names it.
        for pvr in [None, Some(pvr_for("u-1"))] {
            let mut volume = lost.clone();
            let found = MadeSeen {
                stand_in: Some(pod("u-team")),
                pod_volume_restore: pvr,
                ..MadeSeen::default()
            };
            follow(&mut volume, &found, "r");
            assert_eq!((volume.stand_in_uid, volume.stand_in_pod), (None, None));
        }
    }

    #[test]
    fn a_pod_volume_restore_may_have_written_only_once_a_node_agent_took_it() {
        use crate::api::PodVolumePhase as P;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let accepted = || Some(Time("2026-01-01T10:00:00Z".parse().unwrap()));
        let with = |phase: P, accepted_timestamp: Option<Time>| {
            let mut p = pvr(phase);
            p.status.as_mut().unwrap().accepted_timestamp = accepted_timestamp;
            pvr_of(&p).taken
        };
        // (phase, accepted, taken?)
        let rows = [
            (P::New, None, false),
            (P::Canceled, None, false),
            (P::Failed, None, false),
            (P::Canceled, accepted(), true),
            (P::Failed, accepted(), true),
            (P::Accepted, None, true),
            (P::InProgress, None, true),
            (P::Completed, None, true),
        ];
        for (phase, at, want) in rows {
            assert_eq!(with(phase, at.clone()), want, "{phase:?}, accepted {at:?}");
        }
        let mut started = pvr(P::Failed);
        started.status.as_mut().unwrap().start_timestamp = accepted();
        assert!(
            pvr_of(&started).taken,
            "Velero 1.14 sets only startTimestamp"
        );
        let mut canceled_untaken = pvr(P::Canceled);
        canceled_untaken.status.as_mut().unwrap().start_timestamp = accepted();
        assert!(
            !pvr_of(&canceled_untaken).taken,
            "a node agent canceling a New restore sets startTimestamp too"
        );
    }

    #[test]
    fn an_ended_volume_keeps_what_it_recorded() {
        let pvr = PodVolumeRestore {
            status: Some(crate::api::PodVolumeRestoreStatus {
                progress: Some(crate::api::Progress {
                    total_bytes: 0,
                    bytes_done: 0,
                }),
                node: Some("node-b".into()),
                ..Default::default()
            }),
            ..PodVolumeRestore::new("r", Default::default())
        };
        let found = MadeSeen {
            copier: None,
            scratch: None,
            stand_in: None,
            pod_volume_restore: Some(Arc::new(pvr)),
        };
        let ended = VolumeStatus {
            phase: VolumePhase::Completed,
            total_bytes: 100,
            bytes_done: 100,
            node: Some("node-a".into()),
            ..Default::default()
        };
        let mut volume = ended.clone();
        follow(&mut volume, &found, "uid");
        assert_eq!(volume, ended);
        let mut running = VolumeStatus {
            phase: VolumePhase::Restoring,
            ..ended
        };
        follow(&mut running, &found, "uid");
        assert_eq!(
            (running.bytes_done, running.node.as_deref()),
            (0, Some("node-b"))
        );
    }

    #[test]
    fn absences_that_end_a_volume_are_read_again() {
        use crate::api::PodVolumePhase::{Completed, InProgress};
        let c = |stand_in, pod_volume_restore| Confirm {
            stand_in,
            pod_volume_restore,
        };
        let (done, running) = (pvr(Completed), pvr(InProgress));
        // (phase, stand-in in the store, PodVolumeRestore in the store) → what to read again
        let rows = [
            (VolumePhase::Pending, false, None, c(false, false)),
            // Absent here means "make one": a stale store only costs a 409.
            (VolumePhase::Quiescing, false, None, c(false, false)),
            (VolumePhase::StartingStandIn, false, None, c(true, false)),
            (VolumePhase::StartingStandIn, true, None, c(false, false)),
            (
                VolumePhase::Restoring,
                false,
                Some(&running),
                c(true, false),
            ),
            (VolumePhase::Restoring, true, None, c(false, true)),
            (VolumePhase::Restoring, true, Some(&done), c(false, false)),
            // The stand-in's absence lets the consumers come back: confirmed.
            (
                VolumePhase::RemovingStandIn,
                false,
                Some(&done),
                c(true, false),
            ),
            (VolumePhase::RemovingStandIn, true, None, c(false, false)),
            (VolumePhase::Aborting, true, Some(&running), c(false, false)),
            (VolumePhase::Aborting, false, Some(&running), c(true, true)),
            (VolumePhase::Aborting, false, None, c(true, true)),
            (VolumePhase::Aborting, false, Some(&done), c(true, false)),
            (VolumePhase::Completed, false, None, c(false, false)),
            (VolumePhase::Failed, false, None, c(false, false)),
            // The stand-in sets aside and tidies: a store behind it must not fail the
            // volume.
            (VolumePhase::Clearing, false, None, c(true, false)),
            (VolumePhase::Tidying, false, Some(&done), c(true, false)),
            (VolumePhase::Clearing, true, None, c(false, false)),
        ];
        for (phase, stand_in, pvr, want) in rows {
            assert_eq!(
                confirm(phase, stand_in, pvr),
                want,
                "{phase:?}, stand-in {stand_in}, {:?}",
                pvr.map(|p| p.phase())
            );
        }
    }

    fn pod(status: PodStatus) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some("refill-data-1".into());
        pod.status = Some(status);
        pod
    }

    fn restore_wait(state: ContainerState) -> Option<Vec<ContainerStatus>> {
        Some(vec![ContainerStatus {
            name: restore_helper::CONTAINER_NAME.into(),
            state: Some(state),
            ..Default::default()
        }])
    }

    #[test]
    fn a_stand_in_says_why_it_waits_and_when_restore_wait_began() {
        let unscheduled = pod(PodStatus {
            phase: Some("Pending".into()),
            conditions: Some(vec![PodCondition {
                type_: "PodScheduled".into(),
                status: "False".into(),
                message: Some("0/3 nodes are available".into()),
                ..Default::default()
            }]),
            ..Default::default()
        });
        let StandInSeen::Ours { waiting, .. } = stand_in_of(&unscheduled) else {
            panic!("ours")
        };
        assert_eq!(waiting.as_deref(), Some("0/3 nodes are available"));

        let pulling = pod(PodStatus {
            init_container_statuses: restore_wait(ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some("ImagePullBackOff".into()),
                    message: Some("no such image".into()),
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        let StandInSeen::Ours { waiting, .. } = stand_in_of(&pulling) else {
            panic!("ours")
        };
        assert_eq!(
            waiting.as_deref(),
            Some("restore-wait: ImagePullBackOff: no such image")
        );

        let started = Timestamp::from_second(500).unwrap();
        let running = pod(PodStatus {
            init_container_statuses: restore_wait(ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        started,
                    )),
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        let StandInSeen::Ours {
            restore_wait_since,
            failed,
            ..
        } = stand_in_of(&running)
        else {
            panic!("ours")
        };
        assert_eq!((restore_wait_since, failed), (Some(started), None));

        let failed_pod = pod(PodStatus {
            phase: Some("Failed".into()),
            reason: Some("Evicted".into()),
            ..Default::default()
        });
        let StandInSeen::Ours { failed, .. } = stand_in_of(&failed_pod) else {
            panic!("ours")
        };
        assert_eq!(failed.as_deref(), Some("Evicted"));
    }

    /// A refill restarted midway reads where a stand-in that sets aside and tidies
    /// stands from its status alone.
    #[test]
    fn a_stand_in_that_sets_aside_and_tidies_is_read_from_its_containers() {
        let shape = |status: serde_json::Value| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "refill-data-1"},
                "spec": {
                    "initContainers": [{"name": "set-aside"}, {"name": "restore-wait"}],
                    "containers": [{"name": "tidy"}],
                },
                "status": status,
            }))
            .unwrap()
        };
        let in_pod = |pod: &Pod| match stand_in_of(pod) {
            StandInSeen::Ours {
                in_pod,
                restore_wait_done,
                ..
            } => (in_pod, restore_wait_done),
            other => panic!("ours, not {other:?}"),
        };
        let ended = |code: i32, message: Option<&str>| serde_json::json!({"terminated": {"exitCode": code, "message": message}});
        let report = r#"{"deleted":3}"#;

        let setting_aside = shape(serde_json::json!({"initContainerStatuses": [
            {"name": "set-aside", "state": {"running": {}}},
        ]}));
        assert_eq!(in_pod(&setting_aside), (Some(InPodSeen::default()), false));

        // A status that shows it ended with no report yet (as a simulated kubelet
        // may write it before the report) is looked at again.
        let no_report = shape(serde_json::json!({"initContainerStatuses": [
            {"name": "set-aside", "state": ended(0, None)},
        ]}));
        assert_eq!(in_pod(&no_report).0.unwrap().set_aside, None);

        let waiting = shape(serde_json::json!({"initContainerStatuses": [
            {"name": "set-aside", "state": ended(0, Some(report))},
            {"name": "restore-wait", "state": {"running": {}}},
        ]}));
        let (seen, done) = in_pod(&waiting);
        let seen = seen.unwrap();
        assert_eq!(seen.set_aside.unwrap().unwrap().deleted, 3);
        assert_eq!((seen.tidy, done), (None, false));

        let tidied = shape(serde_json::json!({
            "phase": "Succeeded",
            "initContainerStatuses": [
                {"name": "set-aside", "state": ended(0, Some(report))},
                {"name": "restore-wait", "state": ended(0, None)},
            ],
            "containerStatuses": [{"name": "tidy", "state": ended(0, Some(r#"{"deleted":5}"#))}],
        }));
        let (seen, done) = in_pod(&tidied);
        assert!(done);
        assert_eq!(seen.unwrap().tidy.unwrap().unwrap().deleted, 5);

        let refused = shape(serde_json::json!({
            "phase": "Failed",
            "initContainerStatuses": [
                {"name": "set-aside", "state": ended(1, Some(r#"{"error":"rename x: Permission denied"}"#))},
            ],
        }));
        let seen = in_pod(&refused).0.unwrap();
        assert_eq!(
            seen.set_aside,
            Some(Err("rename x: Permission denied".to_string()))
        );

        // A stand-in that only holds the volume has none of this.
        assert_eq!(in_pod(&pod(PodStatus::default())).0, None);
    }
}

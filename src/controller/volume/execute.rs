//! Performs the [`Effect`] that [`super::decide`] chose. Thin: each effect is one or two
//! idempotent API calls on objects with names derived from the request, so a pass that
//! dies half-way is simply done again.
//!
//! A refusal that no retry can change (quota, admission, an invalid object: 403, 422)
//! ends the volume at once with the server's words, instead of being retried until the
//! restore times out; other errors are returned, and the pass is tried again with backoff.

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, ResourceExt};
use serde_json::json;
use tracing::info;

use crate::api::{
    ConsumerRecord, DataRestore, PodVolumeBackup, PodVolumeRestore, VolumePhase, VolumeStatus,
};
use crate::controller::build::pod_volume_restore as pvr;
use crate::controller::build::restore_helper::{self, HelperSource};
use crate::controller::build::stand_in::{self, StandIn};
use crate::controller::build::{copier, new_claim};
use crate::controller::by_claim::ByClaim;
use crate::controller::runtime::error::{Category, Error, is_conflict, is_not_found};
use crate::controller::{Context, Result};
use crate::labels;

use super::decide::{Change, Effect};
use super::sight::{MadeSeen, split};
use crate::controller::runtime::stores::PassView;

/// What the executor needs of the pass.
pub(crate) struct Act<'a> {
    pub dr: &'a DataRestore,
    pub ctx: &'a Context,
    pub uid: &'a str,
    /// The restore's consumers by claim, as the pass started.
    pub consumers_of: &'a ByClaim<'a, ConsumerRecord>,
    pub pass: &'a PassView,
    /// Velero's restore-helper settings, read when a volume may create its stand-in.
    pub helper: Option<&'a HelperSource>,
}

/// Performs `effect` for `volume`. Returns a change that replaces the decided one when
/// the API's answer changes the outcome (a refusal, a conflict).
pub(crate) async fn perform(
    act: &Act<'_>,
    found: &MadeSeen,
    volume: &mut VolumeStatus,
    effect: Effect,
) -> Result<Option<Change>> {
    match effect {
        Effect::CreateStandIn => create_stand_in(act, volume).await,
        Effect::CreatePodVolumeRestore => {
            let Some(pod) = &found.stand_in else {
                return Ok(None);
            };
            let made = match pod_volume_backup(act, volume).await {
                Ok(pvb) => create_pod_volume_restore(act, volume, &pvb, pod).await,
                Err(e) => Err(e),
            };
            refused_as(made, |why| Change::Abort {
                outcome: VolumePhase::Failed,
                message: why,
            })
        }
        Effect::CancelPodVolumeRestore => {
            let name = labels::pod_volume_restore_name(&act.dr.name_any(), act.uid, &volume.pvc);
            let api: Api<PodVolumeRestore> =
                Api::namespaced(act.ctx.client.clone(), &act.ctx.config.namespace);
            let patch = json!({"spec": {"cancel": true}});
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                .await
            {
                Ok(_) => Ok(None),
                Err(e) if is_not_found(&e) => Ok(None),
                Err(e) => Err(e.into()),
            }
        }
        Effect::CreateCopier => super::paths::create_copier(act, found, volume).await,
        Effect::DeleteCopier => match &found.copier {
            Some(pod) => delete_exactly(act, pod).await,
            None => Ok(None),
        },
        Effect::DeleteScratchClaim => super::paths::delete_scratch(act, found, volume).await,
        Effect::DeleteStandIn => match &found.stand_in {
            Some(pod) => delete_exactly(act, pod).await,
            None => Ok(None),
        },
        Effect::ForceDeleteStandIn => match &found.stand_in {
            Some(pod) => delete_without_kubelet(act, pod).await,
            None => Ok(None),
        },
        Effect::ForceDeleteCopier => match &found.copier {
            Some(pod) => delete_without_kubelet(act, pod).await,
            None => Ok(None),
        },
    }
}

/// Removes this very pod from the API at once, on a node that no longer answers (see
/// [`super::decide::node`] for when nothing there may write).
async fn delete_without_kubelet(act: &Act<'_>, pod: &Pod) -> Result<Option<Change>> {
    delete_pod(act, pod, Some(0)).await
}

/// Deletes this very pod, not another of its name: names derive from the claim, and
/// another restore's pod may take the name as soon as this one is gone.
pub(super) async fn delete_exactly(act: &Act<'_>, pod: &Pod) -> Result<Option<Change>> {
    delete_pod(act, pod, None).await
}

async fn delete_pod(act: &Act<'_>, pod: &Pod, grace: Option<u32>) -> Result<Option<Change>> {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: pod.uid(),
            resource_version: None,
        }),
        grace_period_seconds: grace,
        ..DeleteParams::default()
    };
    let ns = pod.namespace().unwrap_or_default();
    match Api::<Pod>::namespaced(act.ctx.client.clone(), &ns)
        .delete(&pod.name_any(), &params)
        .await
    {
        Ok(_) => Ok(None),
        Err(e) if is_not_found(&e) || is_conflict(&e) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Turns a permanent refusal into the change `to` makes of the server's words; other
/// errors stay errors.
pub(super) fn refused_as(
    result: Result<()>,
    to: impl FnOnce(String) -> Change,
) -> Result<Option<Change>> {
    match result {
        Ok(()) => Ok(None),
        Err(e) if e.category() == Category::Permanent => Ok(Some(to(e.reason()))),
        Err(e) => Err(e),
    }
}

/// Makes the claim the node agent writes when it is not the PVC (a `target: NewClaim`
/// volume's, a path restore's scratch claim), or finds the one made before a restart.
/// Another claim of that name is never taken over.
async fn ensure_claim_beside(act: &Act<'_>, volume: &VolumeStatus) -> Result<Option<Change>> {
    let (name, role, what) = match (&volume.target_pvc, &volume.scratch_pvc) {
        (Some(name), _) => (name, labels::ROLE_NEW_CLAIM, "new"),
        (None, Some(name)) => (name, labels::ROLE_SCRATCH, "scratch"),
        (None, None) => return Ok(None),
    };
    let (ns, original) = split(&volume.pvc);
    let claims = Api::<PersistentVolumeClaim>::namespaced(act.ctx.client.clone(), ns);
    let restore_key = format!(
        "{}/{}",
        act.dr.namespace().unwrap_or_default(),
        act.dr.name_any()
    );
    let failed = |message: String| {
        Ok(Some(Change::End {
            outcome: VolumePhase::Failed,
            message,
        }))
    };
    if let Some(existing) = claims.get_opt(name).await? {
        if new_claim::is_made_by(&existing, &restore_key) {
            return Ok(None);
        }
        return failed(format!(
            "PVC {ns}/{name} exists already and was not made by this restore; delete or rename it, or restore under another name"
        ));
    }
    let Some(source) = claims.get_opt(original).await? else {
        return failed(format!("PVC {} was deleted during the restore", volume.pvc));
    };
    let made = new_claim::claim(&source, name, &restore_key, role);
    match claims.create(&PostParams::default(), &made).await {
        Ok(_) => {
            info!(pvc = %volume.pvc, claim = %name, "created the {what} claim");
            Ok(None)
        }
        // Made a moment ago by this restore's previous pass: the next pass looks.
        Err(e) if is_conflict(&e) => Ok(Some(Change::Stay {
            message: Some(format!(
                "PVC {ns}/{name} exists already; looking at it again"
            )),
            warning: None,
        })),
        Err(e) => refused_as(Err(e.into()), |why| Change::End {
            outcome: VolumePhase::Failed,
            message: format!("the API server refused the {what} PVC {ns}/{name}: {why}"),
        }),
    }
}

async fn create_stand_in(act: &Act<'_>, volume: &mut VolumeStatus) -> Result<Option<Change>> {
    if let Some(change) = ensure_claim_beside(act, volume).await? {
        return Ok(Some(change));
    }
    let dr = act.dr;
    // Named after the claim whose files change, which makes it that claim's lock, and
    // mounting the claim the node agent fills (a path restore's scratch claim).
    let name = labels::stand_in_pod_name(&volume.written_claim());
    let mounted = volume.agent_claim();
    let (ns, claim) = split(&mounted);
    let source = act
        .helper
        .expect("read at the start of a pass with volumes quiescing");
    let security = volume.consumer_security.clone();
    let container = match restore_helper::container(
        act.uid,
        &volume.volume,
        dr.spec.restore_helper.as_ref(),
        source,
        security.as_deref(),
    ) {
        Ok(c) => c,
        Err(message) => {
            return Ok(Some(Change::End {
                outcome: VolumePhase::Failed,
                message,
            }));
        }
    };
    let pod = stand_in::pod(StandIn {
        name: name.clone(),
        namespace: ns,
        claim,
        volume: &volume.volume,
        restore_key: format!("{}/{}", dr.namespace().unwrap_or_default(), dr.name_any()),
        restore_uid: act.uid,
        candidate_nodes: &volume.candidate_nodes,
        security: security.as_deref(),
        tolerations: &volume.consumer_tolerations,
        image: dr
            .spec
            .stand_in_image
            .as_deref()
            .unwrap_or(stand_in::DEFAULT_IMAGE),
        restore_wait: container,
        // The set-aside and the tidy run in the stand-in itself: one pod for the volume.
        set_aside_and_tidy: volume.clears_first().then(|| {
            copier::in_stand_in(
                &act.ctx.config.copier_image,
                &volume.volume,
                &copier::aside_dir(act.uid),
            )
        }),
    });
    // The PodVolumeBackup is read while the pod is made: the PodVolumeRestore that
    // follows needs both, and neither waits on the other.
    let pods = Api::<Pod>::namespaced(act.ctx.client.clone(), ns);
    let params = PostParams::default();
    // A stand-in that sets the files aside first gets its PodVolumeRestore once that
    // is recorded (Clearing), so that one exists only when the node agent may have
    // written, as the put-back's deletion of what was written relies on.
    let sets_aside = volume.clears_first();
    let pvb = async {
        match sets_aside {
            true => None,
            false => Some(pod_volume_backup(act, volume).await),
        }
    };
    let (created, pvb) = futures::join!(pods.create(&params, &pod), pvb);
    let created = match created {
        Ok(created) => created,
        // Ours from before a restart (the next pass looks), or another restore's.
        Err(e) if is_conflict(&e) => {
            return Ok(Some(match pods.get_opt(&name).await? {
                Some(pod) if !crate::observe::own_pods::is_own_stand_in(&pod, act.uid) => {
                    Change::End {
                        outcome: VolumePhase::Failed,
                        message: format!(
                            "PVC {} is being restored by {} (stand-in pod {name}); restore it again after that one ends",
                            volume.written_claim(),
                            crate::observe::own_pods::stand_in_restore(&pod)
                                .map_or("another restore".to_string(), |r| format!(
                                    "DataRestore {r}"
                                ))
                        ),
                    }
                }
                _ => Change::Stay {
                    message: Some(format!(
                        "stand-in pod {name} exists already; looking at it again"
                    )),
                    warning: None,
                },
            }));
        }
        Err(e) => {
            return refused_as(Err(e.into()), |why| Change::End {
                outcome: VolumePhase::Failed,
                message: format!("the API server refused stand-in pod {name}: {why}"),
            });
        }
    };
    volume.stand_in_pod = Some(name);
    // Recorded from the API's answer, not from what is found later under the name: a
    // pod of that name refill did not make is never taken for its own.
    volume.stand_in_uid = created.uid();
    let Some(pvb) = pvb else {
        return Ok(None);
    };
    // The node agent itself waits for restore-wait to run before it starts, as it does
    // for Velero's own restores, so the PodVolumeRestore goes out with the stand-in.
    refused_as(
        match pvb {
            Ok(pvb) => create_pod_volume_restore(act, volume, &pvb, &created).await,
            Err(e) => Err(e),
        },
        |why| Change::Abort {
            outcome: VolumePhase::Failed,
            message: why,
        },
    )
}

/// The PodVolumeBackup `volume`'s data comes from; its absence is permanent.
async fn pod_volume_backup(act: &Act<'_>, volume: &VolumeStatus) -> Result<PodVolumeBackup> {
    let pvb_name = volume.pod_volume_backup.clone().unwrap_or_default();
    Api::<PodVolumeBackup>::namespaced(act.ctx.client.clone(), &act.ctx.config.namespace)
        .get_opt(&pvb_name)
        .await?
        .ok_or_else(|| {
            Error::Permanent(format!(
                "PodVolumeBackup {pvb_name} is gone (the backup was deleted?)"
            ))
        })
}

async fn create_pod_volume_restore(
    act: &Act<'_>,
    volume: &mut VolumeStatus,
    pvb: &PodVolumeBackup,
    pod: &Pod,
) -> Result<()> {
    let (dr, ctx) = (act.dr, act.ctx);
    let ns = &ctx.config.namespace;
    let name = labels::pod_volume_restore_name(&dr.name_any(), act.uid, &volume.pvc);
    let object = pvr::pod_volume_restore(dr, &name, volume, pvb, pod);
    let pvrs = Api::<PodVolumeRestore>::namespaced(ctx.client.clone(), ns);
    match pvrs.create(&PostParams::default(), &object).await {
        Ok(_) => {}
        Err(e) if is_conflict(&e) => {}
        Err(e) => return Err(e.into()),
    }
    volume.pod_volume_restore = Some(name.clone());
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

#[cfg(test)]
mod requests;

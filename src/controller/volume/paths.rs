//! The effects of a volume's copier besides the stand-in's: its pod (a path or staged
//! restore's copy, a direct restore's set-aside, tidy and put-back), and the scratch claim deleted once the
//! volume ended.

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{DeleteParams, PostParams, Preconditions};
use kube::{Api, ResourceExt};
use tracing::info;

use crate::api::{VolumePhase, VolumeStatus};
use crate::controller::Result;
use crate::controller::build::copier::{self, Copier, Job};
use crate::controller::runtime::error::{is_conflict, is_not_found};
use crate::labels;

use super::decide::Change;
use super::execute::{Act, refused_as};
use super::sight::{MadeSeen, split};

pub(crate) async fn create_copier(
    act: &Act<'_>,
    found: &MadeSeen,
    volume: &mut VolumeStatus,
) -> Result<Option<Change>> {
    let (ns, claim) = split(&volume.pvc);
    let aside = copier::aside_dir(act.uid);
    // The node agent may have written beside the set-aside files once a
    // PodVolumeRestore was made.
    let delete_written = volume.pod_volume_restore.is_some() || found.pod_volume_restore.is_some();
    let moves = match volume.phase {
        VolumePhase::Clearing => Job::SetAside(&aside),
        VolumePhase::Tidying => Job::Tidy(&aside),
        _ => Job::PutBack {
            dir: &aside,
            delete_written,
        },
    };
    // Setting aside runs where the PVC's volume is, or for an unbound claim on the
    // stand-in's candidates; a copy where the stand-in filled the scratch claim.
    let (job, source_claim, nodes) = match (&volume.paths, &volume.scratch_pvc) {
        (Some(paths), Some(scratch)) => {
            (Job::Paths(paths), Some(scratch.as_str()), node_of(volume))
        }
        (None, Some(scratch)) => (
            Job::Whole {
                mirror: !volume.keep_extra_files,
            },
            Some(scratch.as_str()),
            node_of(volume),
        ),
        (_, None) if volume.clears_first() => (moves, None, volume.candidate_nodes.clone()),
        _ => return Ok(None),
    };
    let name = labels::copier_pod_name(&volume.pvc);
    let dr = act.dr;
    let pod = copier::pod(Copier {
        name: name.clone(),
        namespace: ns,
        source_claim,
        target_claim: claim,
        restore_key: format!("{}/{}", dr.namespace().unwrap_or_default(), dr.name_any()),
        restore_uid: act.uid,
        nodes: &nodes,
        tolerations: &volume.consumer_tolerations,
        image: &act.ctx.config.copier_image,
        job,
    });
    let made = Api::<Pod>::namespaced(act.ctx.client.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await;
    match made {
        Ok(made) => {
            // Its UID is what makes it refill's, not its name or labels.
            volume.copier_uid = made.uid();
            info!(pvc = %volume.pvc, copier = %name, job = ?job, "started the copier");
            Ok(None)
        }
        // Made by the pass before a restart, or by someone else: the next pass looks at
        // it, and deletes it unless its UID is the one recorded.
        Err(e) if is_conflict(&e) => Ok(None),
        // Never made, it wrote nothing: the volume ends at once (put back or not, as
        // the end says).
        Err(e) => refused_as(Err(e.into()), |why| Change::End {
            outcome: VolumePhase::Failed,
            message: format!("the API server refused copier pod {name}: {why}"),
        }),
    }
}

/// The node the stand-in filled the scratch claim on.
fn node_of(volume: &VolumeStatus) -> Vec<String> {
    volume.node.iter().cloned().collect()
}

/// The scratch claim goes once nothing mounts it; its volume goes with it (the
/// StorageClass's reclaim policy, Delete for provisioned volumes).
pub(crate) async fn delete_scratch(
    act: &Act<'_>,
    found: &MadeSeen,
    volume: &VolumeStatus,
) -> Result<Option<Change>> {
    let Some(claim) = &found.scratch else {
        return Ok(None);
    };
    let (ns, _) = split(&volume.pvc);
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: claim.uid(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match Api::<PersistentVolumeClaim>::namespaced(act.ctx.client.clone(), ns)
        .delete(&claim.name_any(), &params)
        .await
    {
        Ok(_) => {
            info!(pvc = %volume.pvc, scratch = %claim.name_any(), "deleted the scratch claim");
            Ok(None)
        }
        Err(e) if is_not_found(&e) || is_conflict(&e) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

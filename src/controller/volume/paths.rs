//! The effects of a path restore besides the stand-in's: its copier pod, and the
//! scratch claim deleted once the volume ended.

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{DeleteParams, PostParams, Preconditions};
use kube::{Api, ResourceExt};
use tracing::info;

use crate::api::{VolumePhase, VolumeStatus};
use crate::controller::Result;
use crate::controller::copier::{self, Copier};
use crate::controller::error::has_status;
use crate::labels;

use super::decide::Change;
use super::execute::{Act, refused_as};
use super::observe::{Found, split};

pub async fn create_copier(act: &Act<'_>, volume: &VolumeStatus) -> Result<Option<Change>> {
    let (Some(paths), Some(scratch)) = (&volume.paths, &volume.scratch_pvc) else {
        return Ok(None);
    };
    let (ns, claim) = split(&volume.pvc);
    let name = labels::copier_pod_name(&volume.pvc);
    let dr = act.dr;
    let pod = copier::pod(Copier {
        name: name.clone(),
        namespace: ns,
        source_claim: scratch,
        target_claim: claim,
        restore_key: format!("{}/{}", dr.namespace().unwrap_or_default(), dr.name_any()),
        restore_uid: act.uid,
        node: volume.node.as_deref(),
        tolerations: &volume.consumer_tolerations,
        image: &act.ctx.config.copier_image,
        paths,
    });
    let made = Api::<Pod>::namespaced(act.ctx.client.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await;
    match made {
        Ok(_) => {
            info!(pvc = %volume.pvc, copier = %name, "copying the chosen paths");
            Ok(None)
        }
        // Made by the pass before a restart; the next pass looks at it.
        Err(e) if has_status(&e, 409) => Ok(None),
        Err(e) => refused_as(Err(e.into()), |why| Change::Abort {
            outcome: VolumePhase::Failed,
            message: format!("the API server refused copier pod {name}: {why}"),
        }),
    }
}

/// The scratch claim goes once nothing mounts it; its volume goes with it (the
/// StorageClass's reclaim policy, Delete for provisioned volumes).
pub async fn delete_scratch(
    act: &Act<'_>,
    found: &Found,
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
        Err(e) if has_status(&e, 404) || has_status(&e, 409) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

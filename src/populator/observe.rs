//! What a pass sees of a claim being filled: reads only. The objects a fill made are
//! read from the API by their names (derived from the claim's UID); the backup and its
//! PodVolumeBackup only while no PodVolumeRestore exists yet.

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::{Api, ResourceExt};

use crate::api::{Backup, BackupVolume, PodVolumeBackup, PodVolumeRestore};
use crate::controller::volume::decide::StandInSeen;
use crate::controller::volume::sight::stand_in_of;
use crate::controller::{Context, Result};
use crate::labels;
use crate::observe::paging;

use super::decide::{ClaimSeen, HandedSeen, PodSeen, PrimeSeen, RestoreSeen, Seen};
use super::source;

/// What a pass read, beside what it decides from: the objects the next step needs.
#[derive(Default)]
pub(super) struct Read {
    pub seen: Seen,
    pub prime: Option<PersistentVolumeClaim>,
    pub pod: Option<Pod>,
    pub pvb: Option<PodVolumeBackup>,
}

/// Whether `object` was made by the fill of the claim with `uid`.
fn fills(object: &impl kube::Resource, uid: &str) -> bool {
    object
        .labels()
        .get(labels::POPULATES_UID)
        .map(String::as_str)
        == Some(uid)
}

pub(super) async fn observe(
    ctx: &Context,
    claim: &PersistentVolumeClaim,
    source_name: &Result<String, String>,
) -> Result<Read> {
    let velero = &ctx.config.namespace;
    let uid = claim.uid().unwrap_or_default();
    let name = labels::prime_name(&uid);
    let prime = Api::<PersistentVolumeClaim>::namespaced(ctx.client.clone(), velero)
        .get_opt(&name)
        .await?
        .filter(|p| fills(p, &uid));
    let pod = Api::<Pod>::namespaced(ctx.client.clone(), velero)
        .get_opt(&name)
        .await?
        .filter(|p| fills(p, &uid));
    let restore = Api::<PodVolumeRestore>::namespaced(ctx.client.clone(), velero)
        .get_opt(&labels::prime_restore_name(&uid))
        .await?
        .filter(|p| fills(p, &uid) && p.metadata.deletion_timestamp.is_none());
    let spec = claim.spec.clone().unwrap_or_default();
    let annotations = claim.annotations();
    let handed = match annotations.get(labels::HANDED_VOLUME) {
        Some(volume) => Some(HandedSeen {
            volume: volume.clone(),
            claim_ref_uid: Api::<PersistentVolume>::all(ctx.client.clone())
                .get_opt(volume)
                .await?
                .and_then(|pv| pv.spec?.claim_ref?.uid),
        }),
        None => None,
    };
    let waits_for_first_consumer = match spec.storage_class_name.as_deref() {
        Some(class) if !class.is_empty() => Api::<StorageClass>::all(ctx.client.clone())
            .get_opt(class)
            .await?
            .and_then(|c| c.volume_binding_mode)
            .is_some_and(|m| m == "WaitForFirstConsumer"),
        _ => false,
    };
    let claim_seen = ClaimSeen {
        uid,
        deleting: claim.metadata.deletion_timestamp.is_some(),
        bound: spec.volume_name.as_deref().is_some_and(|v| !v.is_empty()),
        has_finalizer: claim
            .finalizers()
            .iter()
            .any(|f| f == labels::POPULATOR_FINALIZER),
        selected_node: annotations.get(labels::SELECTED_NODE).cloned(),
        failures: annotations
            .get(labels::FILL_FAILURES)
            .and_then(|n| n.parse().ok())
            .unwrap_or(0),
        last_failure: annotations
            .get(labels::LAST_FILL_FAILURE)
            .and_then(|t| t.parse().ok()),
    };
    let settled = claim_seen.deleting || claim_seen.bound;
    let mut pvb = None;
    let mut source_problem = None;
    if restore.is_none() && handed.is_none() && !settled {
        match find_backup(ctx, claim, source_name).await? {
            Ok(found) => pvb = Some(found),
            Err(problem) => source_problem = Some(problem),
        }
    }
    let seen = Seen {
        claim: claim_seen,
        waits_for_first_consumer,
        source_problem,
        prime: prime.as_ref().map(|p| PrimeSeen {
            volume: p
                .spec
                .as_ref()
                .and_then(|s| s.volume_name.clone())
                .filter(|v| !v.is_empty()),
            deleting: p.metadata.deletion_timestamp.is_some(),
            created: created(p),
        }),
        pod: pod.as_ref().map(pod_seen),
        restore: restore.as_ref().map(|r| {
            let status = r.status.clone().unwrap_or_default();
            let progress = status.progress.unwrap_or_default();
            RestoreSeen {
                phase: r.phase(),
                message: status.message,
                bytes_done: progress.bytes_done,
                total_bytes: progress.total_bytes,
                created: created(r),
            }
        }),
        handed,
        now: Timestamp::now(),
    };
    Ok(Read {
        seen,
        prime,
        pod,
        pvb,
    })
}

fn pod_seen(pod: &Pod) -> PodSeen {
    // The fill's pod is a stand-in as the restores' are: read the same way.
    let StandInSeen::Ours {
        terminating,
        failed,
        restore_wait_done,
        waiting,
        ..
    } = stand_in_of(pod)
    else {
        unreachable!("a pod read as a stand-in is always our own");
    };
    PodSeen {
        restore_wait_done,
        deleting: terminating,
        waiting,
        failed,
        node: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
        created: created(pod),
    }
}

fn created(object: &impl kube::Resource) -> Option<Timestamp> {
    object.meta().creation_timestamp.as_ref().map(|t| t.0)
}

/// The PodVolumeBackup the claim's BackupVolume names, or why there is none.
async fn find_backup(
    ctx: &Context,
    claim: &PersistentVolumeClaim,
    source_name: &Result<String, String>,
) -> Result<Result<PodVolumeBackup, String>> {
    let name = match source_name {
        Ok(name) => name,
        Err(problem) => return Ok(Err(problem.clone())),
    };
    let namespace = claim.namespace().unwrap_or_default();
    let Some(object) = Api::<BackupVolume>::namespaced(ctx.client.clone(), &namespace)
        .get_opt(name)
        .await?
    else {
        return Ok(Err(format!(
            "spec.dataSourceRef.name: BackupVolume \"{name}\" not found in namespace \"{namespace}\""
        )));
    };
    let wanted = match source::wanted(&object) {
        Ok(wanted) => wanted,
        Err(problem) => return Ok(Err(problem)),
    };
    let velero = &ctx.config.namespace;
    let backups = Api::<Backup>::namespaced(ctx.client.clone(), velero);
    let (named, of_schedule) = match &wanted.from {
        source::Origin::Backup(name) => (backups.get_opt(name).await?, Vec::new()),
        source::Origin::Schedule(schedule) => {
            let of = format!(
                "{}={}",
                labels::SCHEDULE_NAME,
                labels::label_value(schedule)
            );
            (
                None,
                backups
                    .list(&ListParams::default().labels(&of))
                    .await?
                    .items,
            )
        }
    };
    let backup = match source::backup(&wanted.from, named.as_ref(), &of_schedule) {
        Ok(backup) => backup,
        Err(problem) => return Ok(Err(problem)),
    };
    let backup_name = backup.name_any();
    let backup_uid = backup.uid();
    let mut pvbs = Vec::new();
    let api = Api::<PodVolumeBackup>::namespaced(ctx.client.clone(), velero);
    paging::for_each_pod_volume_backup(&api, Some(&backup_name), |pvb| {
        // Only this namespace's volumes are kept: nothing of another is ever read on.
        let same_backup = match (pvb.labels().get(labels::BACKUP_UID), &backup_uid) {
            (Some(label), Some(uid)) => label == uid,
            _ => true,
        };
        if same_backup && pvb.spec.pod.namespace.as_deref() == Some(namespace.as_str()) {
            pvbs.push(pvb);
        }
    })
    .await?;
    Ok(source::pod_volume_backup(&backup_name, &wanted.claim_key, &pvbs).cloned())
}

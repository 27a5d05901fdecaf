//! The effects of each [`Step`], thin: one or a few API calls each, built by
//! [`super::build`]. What was already done (a 409 on create, a 404 on delete) counts
//! as done, so a step repeated after a lost answer or a restart is harmless.

use k8s_openapi::api::core::v1::{
    PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimCondition, Pod,
};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::api::PodVolumeRestore;
use crate::controller::build::{restore_helper, stand_in};
use crate::controller::runtime::error::{is_conflict, is_not_found};
use crate::controller::runtime::object_writes;
use crate::controller::{Context, Error, Result};
use crate::labels;

use super::build;
use super::observe::Read;

/// Creates `object`; one already there (made by an earlier pass) is fine.
async fn create<K>(api: &Api<K>, object: &K) -> Result<()>
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.create(&PostParams::default(), object).await {
        Ok(_) => Ok(()),
        Err(e) if is_conflict(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Deletes `name`, with its UID as precondition when known; gone already is fine.
async fn delete<K>(api: &Api<K>, name: &str, uid: Option<String>) -> Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = DeleteParams {
        preconditions: uid.map(|uid| Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        grace_period_seconds: Some(1),
        ..Default::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) || is_conflict(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn velero_api<K>(ctx: &Context) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    Api::namespaced(ctx.client.clone(), &ctx.config.namespace)
}

pub(super) async fn finalizer(
    claims: &Api<PersistentVolumeClaim>,
    claim: &PersistentVolumeClaim,
    hold: bool,
) -> Result<()> {
    match object_writes::set_named_finalizer(claims, claim, labels::POPULATOR_FINALIZER, hold).await
    {
        Ok(()) => Ok(()),
        Err(e) if !hold && is_not_found(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Writes refill's condition on the claim's status (merged by its type, so other
/// conditions stay); a claim gone already is fine.
pub(super) async fn write_condition(
    claims: &Api<PersistentVolumeClaim>,
    claim: &PersistentVolumeClaim,
    condition: PersistentVolumeClaimCondition,
) -> Result<()> {
    let patch = json!({ "status": { "conditions": [condition] } });
    match claims
        .patch_status(
            &claim.name_any(),
            &PatchParams::default(),
            &Patch::Strategic(patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

pub(super) async fn create_prime(ctx: &Context, claim: &PersistentVolumeClaim) -> Result<()> {
    let node = claim.annotations().get(labels::SELECTED_NODE).cloned();
    let prime = build::prime_claim(claim, &ctx.config.namespace, node.as_deref());
    create(&velero_api(ctx), &prime).await
}

pub(super) async fn create_pod(
    ctx: &Context,
    claim: &PersistentVolumeClaim,
    read: &Read,
) -> Result<()> {
    let (Some(prime), Some(pvb)) = (&read.prime, &read.pvb) else {
        return Err(Error::Transient(
            "the prime claim or the backup is not read yet".into(),
        ));
    };
    let helper = restore_helper::read_source(&ctx.client, &ctx.config.namespace).await?;
    let volume = &pvb.spec.volume;
    let security = build::root();
    let restore_wait = restore_helper::container(
        &prime.uid().unwrap_or_default(),
        volume,
        None,
        &helper,
        Some(&security),
    )
    .map_err(Error::Permanent)?;
    let node = claim.annotations().get(labels::SELECTED_NODE).cloned();
    let pod = build::pod(
        claim,
        prime,
        volume,
        node.as_deref(),
        stand_in::DEFAULT_IMAGE,
        restore_wait,
    );
    create(&velero_api(ctx), &pod).await
}

pub(super) async fn create_restore(
    ctx: &Context,
    claim: &PersistentVolumeClaim,
    read: &Read,
) -> Result<()> {
    let (Some(prime), Some(pod), Some(pvb)) = (&read.prime, &read.pod, &read.pvb) else {
        return Err(Error::Transient(
            "the prime claim, pod or backup is not read yet".into(),
        ));
    };
    create(
        &velero_api::<PodVolumeRestore>(ctx),
        &build::restore(claim, prime, pvb, pod),
    )
    .await
}

pub(super) async fn delete_pod(ctx: &Context, read: &Read) -> Result<()> {
    match &read.pod {
        Some(pod) => delete(&velero_api::<Pod>(ctx), &pod.name_any(), pod.uid()).await,
        None => Ok(()),
    }
}

pub(super) async fn delete_prime(ctx: &Context, read: &Read) -> Result<()> {
    match &read.prime {
        Some(prime) => {
            delete(
                &velero_api::<PersistentVolumeClaim>(ctx),
                &prime.name_any(),
                prime.uid(),
            )
            .await
        }
        None => Ok(()),
    }
}

/// Hands the prime's PV to `claim`: the claim records the PV first (so a pass after a
/// lost patch knows to write it again), then the PV's `claimRef` names the claim. The
/// prime claim deleted after that releases nothing: its volume is no longer its own.
pub(super) async fn hand_over(
    ctx: &Context,
    claims: &Api<PersistentVolumeClaim>,
    claim: &PersistentVolumeClaim,
    volume: &str,
) -> Result<()> {
    claims
        .patch(
            &claim.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {labels::HANDED_VOLUME: volume}}})),
        )
        .await?;
    let claim_ref = json!({"spec": {"claimRef": {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "namespace": claim.namespace(),
        "name": claim.name_any(),
        "uid": claim.uid(),
        "resourceVersion": null,
    }}});
    Api::<PersistentVolume>::all(ctx.client.clone())
        .patch(volume, &PatchParams::default(), &Patch::Merge(&claim_ref))
        .await?;
    Ok(())
}

/// Removes everything the fill made: the pod, the PodVolumeRestore and the prime
/// claim (whose PV goes with it by its reclaim policy, unless it was handed over).
pub(super) async fn clean_up(ctx: &Context, read: &Read) -> Result<()> {
    delete_pod(ctx, read).await?;
    let name = labels::prime_restore_name(&read.seen.claim.uid);
    delete(&velero_api::<PodVolumeRestore>(ctx), &name, None).await?;
    delete_prime(ctx, read).await
}

/// Counts a failed fill on the claim, with its time, and forgets a volume handed over
/// by it.
pub(super) async fn count_failure(
    claims: &Api<PersistentVolumeClaim>,
    claim: &PersistentVolumeClaim,
    failures: u32,
    now: k8s_openapi::jiff::Timestamp,
) -> Result<()> {
    let patch = json!({"metadata": {"annotations": {
        labels::FILL_FAILURES: failures.to_string(),
        labels::LAST_FILL_FAILURE: now.to_string(),
        labels::HANDED_VOLUME: null,
    }}});
    claims
        .patch(
            &claim.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    Ok(())
}

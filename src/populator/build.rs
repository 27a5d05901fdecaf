//! What a fill makes in Velero's namespace, pure: the prime claim (the user's claim's
//! class, size, access modes and volume mode, on the scheduler's node), the pod that
//! holds it for the node agent (the stand-in's shape, with Velero's `restore-wait`),
//! and the PodVolumeRestore (owned by the prime claim, whose UID names the done file).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, PersistentVolumeClaim, Pod, SecurityContext, Toleration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};

use crate::api::{ConsumerSecurity, PodVolumeBackup, PodVolumeRestore};
use crate::controller::build::{new_claim, pod_volume_restore, stand_in};
use crate::labels;

/// The metadata of everything a fill makes: its role, and the claim it fills.
fn metadata(name: &str, namespace: &str, role: &str, claim: &PersistentVolumeClaim) -> ObjectMeta {
    let key = format!(
        "{}/{}",
        claim.namespace().unwrap_or_default(),
        claim.name_any()
    );
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(namespace.to_string()),
        labels: Some(BTreeMap::from([
            (labels::ROLE.to_string(), role.to_string()),
            (
                labels::POPULATES_UID.to_string(),
                claim.uid().unwrap_or_default(),
            ),
        ])),
        annotations: Some(BTreeMap::from([(labels::POPULATES.to_string(), key)])),
        ..Default::default()
    }
}

/// The prime claim for `claim` in `namespace`, provisioned on `node` when the claim's
/// class waits for a consumer.
pub(crate) fn prime_claim(
    claim: &PersistentVolumeClaim,
    namespace: &str,
    node: Option<&str>,
) -> PersistentVolumeClaim {
    let name = labels::prime_name(&claim.uid().unwrap_or_default());
    let mut prime = new_claim::claim(claim, &name, "", labels::ROLE_PRIME);
    prime.metadata = metadata(&name, namespace, labels::ROLE_PRIME, claim);
    if let Some(node) = node {
        prime
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(labels::SELECTED_NODE.to_string(), node.to_string());
    }
    prime
}

/// The identity of the pod's containers: root, so that `restore-wait` can remove the
/// node agent's done files from the volume's root, which the node agent wrote as root.
pub(crate) fn root() -> ConsumerSecurity {
    ConsumerSecurity {
        pod: None,
        container: Some(SecurityContext {
            run_as_user: Some(0),
            run_as_group: Some(0),
            run_as_non_root: Some(false),
            ..Default::default()
        }),
    }
}

/// The pod that mounts the prime claim `prime` under the backup's volume name
/// `volume`, on `node` when one was chosen, with `restore_wait` first.
pub(crate) fn pod(
    claim: &PersistentVolumeClaim,
    prime: &PersistentVolumeClaim,
    volume: &str,
    node: Option<&str>,
    image: &str,
    restore_wait: Container,
) -> Pod {
    let namespace = prime.namespace().unwrap_or_default();
    let nodes: Vec<String> = node.map(String::from).into_iter().collect();
    // Pinned to the node the scheduler chose for the claim's consumer, whatever taints
    // it has: the consumer tolerates them, and the volume must be made there.
    let tolerations: Vec<Toleration> = node
        .map(|_| Toleration {
            operator: Some("Exists".into()),
            ..Default::default()
        })
        .into_iter()
        .collect();
    let security = root();
    let mut pod = stand_in::pod(stand_in::StandIn {
        name: prime.name_any(),
        namespace: &namespace,
        claim: &prime.name_any(),
        volume,
        restore_key: String::new(),
        restore_uid: "",
        candidate_nodes: &nodes,
        security: Some(&security),
        tolerations: &tolerations,
        image,
        restore_wait,
        set_aside_and_tidy: None,
    });
    pod.metadata = metadata(&prime.name_any(), &namespace, labels::ROLE_PRIME, claim);
    pod
}

/// The PodVolumeRestore writing `pvb`'s snapshot into the volume of `pod`, owned by
/// the prime claim: deleting the prime claim deletes it too.
pub(crate) fn restore(
    claim: &PersistentVolumeClaim,
    prime: &PersistentVolumeClaim,
    pvb: &PodVolumeBackup,
    pod: &Pod,
) -> PodVolumeRestore {
    let mut owner: OwnerReference = prime.controller_owner_ref(&()).unwrap_or_default();
    owner.block_owner_deletion = None;
    let mut meta = metadata(
        &labels::prime_restore_name(&claim.uid().unwrap_or_default()),
        &prime.namespace().unwrap_or_default(),
        labels::ROLE_PRIME,
        claim,
    );
    let by = meta.labels.get_or_insert_with(Default::default);
    by.insert(
        labels::RESTORE_NAME.to_string(),
        labels::label_value(&prime.name_any()),
    );
    by.insert(labels::RESTORE_UID.to_string(), owner.uid.clone());
    pod_volume_restore::owned_by(owner, meta, &pvb.spec.volume, pvb, pod)
}

#[cfg(test)]
mod tests;

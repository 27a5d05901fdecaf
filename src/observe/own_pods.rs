//! Which of refill's own pods a pod is, from the labels refill gives them.

use k8s_openapi::api::core::v1::Pod;

use crate::labels;

/// Whether the pod is a stand-in of any restore.
pub(crate) fn is_stand_in(pod: &Pod) -> bool {
    label(pod, labels::ROLE) == Some(labels::ROLE_STAND_IN)
}

/// A stand-in of the restore `own_uid`.
pub(crate) fn is_own_stand_in(pod: &Pod, own_uid: &str) -> bool {
    is_stand_in(pod) && is_own(pod, own_uid)
}

/// Whether the pod is a copier of any restore, or has a copier's name: what a read of
/// a copier by its name could find.
pub(crate) fn may_be_copier(pod: &Pod) -> bool {
    label(pod, labels::ROLE) == Some(labels::ROLE_COPIER)
        || pod
            .metadata
            .name
            .as_deref()
            .is_some_and(|n| n.starts_with(labels::COPIER_POD_PREFIX))
}

/// A path restore's copier pod of the restore `own_uid`.
pub(crate) fn is_own_copier(pod: &Pod, own_uid: &str) -> bool {
    label(pod, labels::ROLE) == Some(labels::ROLE_COPIER) && is_own(pod, own_uid)
}

fn is_own(pod: &Pod, own_uid: &str) -> bool {
    label(pod, labels::DATA_RESTORE_UID) == Some(own_uid)
}

fn label<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

/// `namespace/name` of the DataRestore a stand-in pod serves, as it is annotated.
pub(crate) fn stand_in_restore(pod: &Pod) -> Option<String> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(labels::DATA_RESTORE_ANNOTATION)
        .cloned()
}

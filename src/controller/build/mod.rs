//! The objects refill creates for a restore, built as plain values from what was
//! decided: the stand-in pod and its `restore-wait` init container, the copier pod,
//! the PodVolumeRestore handed to the node agent, and the claims made beside a PVC.
//! Pure: the calls that create them live with the steps that decide to.

pub mod copier;
pub(crate) mod new_claim;
pub mod pod_volume_restore;
pub mod restore_helper;
pub mod stand_in;

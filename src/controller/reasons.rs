//! Reasons of the Events refill publishes on a DataRestore, so that people and alerts can
//! match on them. Condition types and reasons live in [`super::status::condition`].

pub(super) const VALIDATED: &str = "Validated";
pub(super) const FAILED_VALIDATION: &str = "FailedValidation";
/// A Warning: the restore leaves the volumes' consumers running (consumers: None).
pub(super) const RUNNING_CONSUMERS: &str = "RunningConsumers";
pub(super) const QUIESCED_CONSUMER: &str = "QuiescedConsumer";
pub(super) const RESUMED_CONSUMER: &str = "ResumedConsumer";
/// A stopped workload came back on the new claim (switchWorkloads).
pub(super) const SWITCHED_CONSUMER: &str = "SwitchedConsumer";
pub(super) const KEPT_CONSUMER_STOPPED: &str = "KeptConsumerStopped";
/// A Warning: another pod took a stopped bare pod's name; it was left as it is.
pub(super) const CONSUMER_REPLACED: &str = "ConsumerReplaced";
pub(super) const CONSUMER_HELD: &str = "ConsumerHeldByOtherRestore";
pub(super) const VOLUME_RESTORED: &str = "VolumeRestored";
pub(super) const VOLUME_FAILED: &str = "VolumeFailed";
pub(super) const VOLUME_CANCELED: &str = "VolumeCanceled";
pub(super) const VOLUME_ABORTING: &str = "VolumeAborting";
pub(super) const VOLUME_WAITING: &str = "VolumeWaiting";
/// A GitOps object managing consumers was paused for the restore (a Warning when it
/// could not be).
pub(super) const GITOPS_PAUSED: &str = "GitOpsPaused";
/// A GitOps object was let go: put back as it was, or left for another restore.
pub(super) const GITOPS_RESUMED: &str = "GitOpsResumed";
/// A Warning: a pass over the object panicked; it is marked Stalled and tried again
/// later, while every other object is served on.
pub(super) const INTERNAL_ERROR: &str = "InternalError";
/// A pass failed for a reason no retry is expected to change (the records of its
/// volumes missing, a refusal by the API server): the object is marked Stalled.
pub(super) const CANNOT_PROCEED: &str = "CannotProceed";

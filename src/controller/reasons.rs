//! Reasons of the Events refill publishes on a DataRestore, so that people and alerts can
//! match on them. Condition types and reasons live in [`super::status::condition`].

pub const VALIDATED: &str = "Validated";
pub const FAILED_VALIDATION: &str = "FailedValidation";
/// A Warning: the restore leaves the volumes' consumers running (consumers: None).
pub const RUNNING_CONSUMERS: &str = "RunningConsumers";
pub const QUIESCED_CONSUMER: &str = "QuiescedConsumer";
pub const RESUMED_CONSUMER: &str = "ResumedConsumer";
/// A stopped workload came back on the new claim (switchWorkloads).
pub const SWITCHED_CONSUMER: &str = "SwitchedConsumer";
pub const KEPT_CONSUMER_STOPPED: &str = "KeptConsumerStopped";
/// A Warning: another pod took a stopped bare pod's name; it was left as it is.
pub const CONSUMER_REPLACED: &str = "ConsumerReplaced";
pub const CONSUMER_HELD: &str = "ConsumerHeldByOtherRestore";
pub const VOLUME_RESTORED: &str = "VolumeRestored";
pub const VOLUME_FAILED: &str = "VolumeFailed";
pub const VOLUME_CANCELED: &str = "VolumeCanceled";
pub const VOLUME_ABORTING: &str = "VolumeAborting";
pub const VOLUME_WAITING: &str = "VolumeWaiting";
/// A GitOps object managing consumers was paused for the restore (a Warning when it
/// could not be).
pub const GITOPS_PAUSED: &str = "GitOpsPaused";
/// A GitOps object was let go: put back as it was, or left for another restore.
pub const GITOPS_RESUMED: &str = "GitOpsResumed";
/// A Warning: a pass over the object panicked; it is marked Stalled and tried again
/// later, while every other object is served on.
pub const INTERNAL_ERROR: &str = "InternalError";
/// A pass failed for a reason no retry is expected to change (the records of its
/// volumes missing, a refusal by the API server): the object is marked Stalled.
pub const CANNOT_PROCEED: &str = "CannotProceed";

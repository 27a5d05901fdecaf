//! The populator's one decision, pure: from what a pass saw of a claim and of what
//! refill made for it, the next step. One step per pass; the pass after it sees the
//! step's effect.
//!
//! A fill goes: finalizer on the claim → (a WaitForFirstConsumer claim waits for the
//! scheduler's node) → the prime claim in Velero's namespace → a pod mounting it with
//! `restore-wait` → the PodVolumeRestore → (the node agent writes) → the pod goes →
//! the prime's PV is handed to the claim (`claimRef`) → the prime claim goes → the
//! claim binds → the finalizer goes.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::api::PodVolumePhase;

/// Fills tried for one claim before refill stops trying; each failure waits longer
/// before the next.
pub(crate) const MAX_ATTEMPTS: u32 = 5;
/// The wait after the first failed fill; doubled after each next one.
const FIRST_RETRY: Duration = Duration::from_secs(30);
/// How long the fill's pod may stay unscheduled or not running, and its
/// PodVolumeRestore untaken by any node agent, before the fill counts as failed.
/// Neither moves data, and past this both mean something a person must fix (no node
/// agent on the node, an image that cannot be pulled, a node gone).
pub(crate) const STALL_LIMIT: Duration = Duration::from_secs(600);
/// How long a whole fill may take, from its prime claim's creation: Velero's own
/// default for one pod volume operation.
pub(crate) const FILL_LIMIT: Duration = Duration::from_secs(4 * 3600);

/// What a pass saw.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Seen {
    /// The user's claim.
    pub claim: ClaimSeen,
    /// Whether the claim's StorageClass binds only once a pod is scheduled.
    pub waits_for_first_consumer: bool,
    /// Why no backup can fill the claim now, when none can (read only while no
    /// PodVolumeRestore exists).
    pub source_problem: Option<String>,
    /// The prime claim, when it exists.
    pub prime: Option<PrimeSeen>,
    /// The pod that holds the prime claim for the node agent, when it exists.
    pub pod: Option<PodSeen>,
    /// The PodVolumeRestore, when it exists.
    pub restore: Option<RestoreSeen>,
    /// The PV handed to the claim, once refill handed one (the claim's annotation),
    /// and whom its `claimRef` names now.
    pub handed: Option<HandedSeen>,
    /// The time of the pass.
    pub now: Timestamp,
}

/// The user's claim.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ClaimSeen {
    pub uid: String,
    pub deleting: bool,
    /// Bound to a volume (`spec.volumeName` set).
    pub bound: bool,
    pub has_finalizer: bool,
    /// The scheduler's `volume.kubernetes.io/selected-node`.
    pub selected_node: Option<String>,
    /// Fills that failed so far, and when the last one did.
    pub failures: u32,
    pub last_failure: Option<Timestamp>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct PrimeSeen {
    /// The PV it is bound to.
    pub volume: Option<String>,
    pub deleting: bool,
    /// When it was made: when this fill began.
    pub created: Option<Timestamp>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct PodSeen {
    /// `restore-wait` ended well: the node agent's done file was seen and removed.
    pub restore_wait_done: bool,
    pub deleting: bool,
    /// Why it is not running yet (not scheduled, an image not pulled), when it says.
    pub waiting: Option<String>,
    /// Why it cannot serve: it failed, or `restore-wait` ended badly.
    pub failed: Option<String>,
    /// Its node, once scheduled.
    pub node: Option<String>,
    pub created: Option<Timestamp>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RestoreSeen {
    pub phase: PodVolumePhase,
    pub message: Option<String>,
    pub bytes_done: i64,
    pub total_bytes: i64,
    pub created: Option<Timestamp>,
}

impl Default for RestoreSeen {
    fn default() -> Self {
        RestoreSeen {
            phase: PodVolumePhase::New,
            message: None,
            bytes_done: 0,
            total_bytes: 0,
            created: None,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct HandedSeen {
    pub volume: String,
    /// The UID the PV's `claimRef` names (None: the PV is gone or names none).
    pub claim_ref_uid: Option<String>,
}

/// The next step.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Step {
    /// Nothing to do until something changes.
    Idle,
    AddFinalizer,
    /// Waiting, with what for; looked at again after `Duration`.
    Wait(String, Duration),
    /// No backup can fill the claim now: said in a Warning, looked at again later.
    SourceMissing(String),
    CreatePrime,
    CreatePod,
    CreateRestore,
    /// The node agent is done: the pod goes, so that the volume is free.
    DeletePod,
    /// Hand the prime's PV to the claim.
    HandOver {
        volume: String,
    },
    DeletePrime,
    /// The fill failed: remove what was made, count the failure, try again later.
    Failed(String),
    /// Too many failures: say so, and stop.
    GiveUp(String),
    /// Remove what was made (the claim is going, or bound).
    CleanUp,
    /// The claim is bound: the finalizer goes.
    Done,
}

/// How long after the `failures`-th failure the next fill starts.
pub(crate) fn retry_after(failures: u32) -> Duration {
    FIRST_RETRY.saturating_mul(1 << failures.saturating_sub(1).min(10))
}

/// The next step for what was seen.
pub(crate) fn decide(seen: &Seen) -> Step {
    let claim = &seen.claim;
    let made_any = seen.prime.is_some() || seen.pod.is_some() || seen.restore.is_some();
    if claim.deleting || claim.bound {
        if made_any {
            return Step::CleanUp;
        }
        return if claim.has_finalizer {
            Step::Done
        } else {
            Step::Idle
        };
    }
    if !claim.has_finalizer {
        return Step::AddFinalizer;
    }
    if let Some(handed) = &seen.handed {
        return after_hand_over(seen, handed);
    }
    if let Some(why) = overdue(seen) {
        // Counted once: the objects of a fill that failed are then only cleaned up.
        return if recently_failed(seen) {
            Step::CleanUp
        } else {
            Step::Failed(why)
        };
    }
    if let Some(restore) = &seen.restore {
        return with_restore(seen, restore);
    }
    if claim.failures >= MAX_ATTEMPTS {
        if made_any {
            return Step::CleanUp;
        }
        return Step::GiveUp(format!(
            "{} fills failed; refill tries no more. Delete and re-create the claim to try again",
            claim.failures
        ));
    }
    if let Some(last) = claim.last_failure {
        let wait = retry_after(claim.failures);
        let next = last + wait;
        if seen.now < next && !made_any {
            let left = next.duration_since(seen.now).unsigned_abs();
            return Step::Wait(
                format!(
                    "fill {} of {MAX_ATTEMPTS} starts after a pause",
                    claim.failures + 1
                ),
                left,
            );
        }
    }
    // Said before any wait for a node: a claim no backup can fill is told at once.
    if let Some(problem) = &seen.source_problem {
        return Step::SourceMissing(problem.clone());
    }
    if seen.waits_for_first_consumer && claim.selected_node.is_none() {
        return Step::Wait(
            "a pod using the claim to be scheduled (WaitForFirstConsumer)".into(),
            Duration::from_secs(300),
        );
    }
    match (&seen.prime, &seen.pod) {
        (None, _) => Step::CreatePrime,
        (Some(prime), _) if prime.deleting => {
            Step::Wait("the previous prime claim to go".into(), POLL)
        }
        (Some(_), None) => Step::CreatePod,
        (Some(_), Some(pod)) if pod.deleting => Step::Wait("the previous pod to go".into(), POLL),
        (Some(_), Some(_)) => Step::CreateRestore,
    }
}

/// How soon a fill under way is looked at again without an event.
pub(crate) const POLL: Duration = Duration::from_secs(3);

fn with_restore(seen: &Seen, restore: &RestoreSeen) -> Step {
    match restore.phase {
        PodVolumePhase::Completed => match (&seen.pod, &seen.prime) {
            (Some(pod), _) if pod.deleting => Step::Wait("the pod to go".into(), POLL),
            (Some(pod), _) if !pod.restore_wait_done => Step::Wait(
                "restore-wait to see the node agent's done file".into(),
                POLL,
            ),
            (Some(_), _) => Step::DeletePod,
            (
                None,
                Some(PrimeSeen {
                    volume: Some(volume),
                    ..
                }),
            ) => Step::HandOver {
                volume: volume.clone(),
            },
            (None, _) => Step::Failed(
                "the prime claim or its volume went before the volume was handed over".into(),
            ),
        },
        // A failure already counted whose objects are still going.
        PodVolumePhase::Failed | PodVolumePhase::Canceled if recently_failed(seen) => Step::CleanUp,
        PodVolumePhase::Failed | PodVolumePhase::Canceled => Step::Failed(format!(
            "the node agent's PodVolumeRestore ended {:?}: {}",
            restore.phase,
            restore.message.as_deref().unwrap_or("no message")
        )),
        _ => {
            if let Some(why) = seen.pod.as_ref().and_then(|p| p.waiting.clone()) {
                return Step::Wait(format!("the fill's pod to run: {why}"), POLL);
            }
            Step::Wait(
                format!(
                    "the node agent to write the backup's files ({:?}, {} of {} bytes)",
                    restore.phase, restore.bytes_done, restore.total_bytes
                ),
                POLL,
            )
        }
    }
}

/// Why the fill under way has waited too long, when it has: a stage that moves no
/// data past [`STALL_LIMIT`], a pod that cannot serve, or the whole fill past
/// [`FILL_LIMIT`].
fn overdue(seen: &Seen) -> Option<String> {
    let now = seen.now;
    let past = |since: Option<Timestamp>, limit: Duration| since.is_some_and(|t| now > t + limit);
    let done = seen
        .restore
        .as_ref()
        .is_some_and(|r| r.phase == PodVolumePhase::Completed);
    if let Some(pod) = seen.pod.as_ref().filter(|p| !p.deleting) {
        if let Some(why) = pod.failed.as_ref().filter(|_| !done) {
            return Some(format!("the fill's pod cannot serve: {why}"));
        }
        if let Some(why) = pod
            .waiting
            .as_ref()
            .filter(|_| past(pod.created, STALL_LIMIT))
        {
            return Some(format!(
                "the fill's pod did not run within {}s: {why}",
                STALL_LIMIT.as_secs()
            ));
        }
    }
    if let Some(restore) = &seen.restore
        && restore.phase == PodVolumePhase::New
        && past(restore.created, STALL_LIMIT)
    {
        let node = seen.pod.as_ref().and_then(|p| p.node.as_deref());
        return Some(format!(
            "no node agent took the fill's PodVolumeRestore within {}s; is Velero's node agent running on node {}?",
            STALL_LIMIT.as_secs(),
            node.unwrap_or("of the fill's pod")
        ));
    }
    let began = seen.prime.as_ref().and_then(|p| p.created);
    past(began, FILL_LIMIT).then(|| {
        format!(
            "the fill did not end within {}h of its start",
            FILL_LIMIT.as_secs() / 3600
        )
    })
}

fn recently_failed(seen: &Seen) -> bool {
    let claim = &seen.claim;
    claim
        .last_failure
        .is_some_and(|t| seen.now < t + retry_after(claim.failures))
}

fn after_hand_over(seen: &Seen, handed: &HandedSeen) -> Step {
    if handed.claim_ref_uid.as_deref() != Some(seen.claim.uid.as_str()) {
        let prime_volume = seen.prime.as_ref().and_then(|p| p.volume.as_ref());
        if prime_volume == Some(&handed.volume) && handed.claim_ref_uid.is_some() {
            // The claimRef patch was not written: write it again.
            return Step::HandOver {
                volume: handed.volume.clone(),
            };
        }
        return Step::Failed(format!(
            "volume {} handed to the claim no longer names it",
            handed.volume
        ));
    }
    if seen.pod.is_some() {
        return Step::CleanUp;
    }
    match &seen.prime {
        Some(prime) if !prime.deleting => Step::DeletePrime,
        _ => Step::Wait(
            format!("the claim to bind to volume {}", handed.volume),
            POLL,
        ),
    }
}

#[cfg(test)]
mod tests;

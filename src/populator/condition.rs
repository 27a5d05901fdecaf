//! The condition refill keeps on a claim it fills, pure: what `kubectl describe pvc`
//! shows while the claim is Pending, beside the Events. Events say what happened and
//! age out; the condition says where the fill stands now, waits included.

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PersistentVolumeClaimCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::decide::{MAX_ATTEMPTS, Step, retry_after};

/// The condition's type on the claim.
pub(crate) const TYPE: &str = "Populated";

/// Messages longer than this are cut: some carry words from other components.
const MESSAGE_MAX: usize = 1024;

/// What the condition should say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Wanted {
    pub populated: bool,
    pub reason: &'static str,
    pub message: String,
}

/// What the condition says after `step`; None leaves it as it is (steps that only
/// move the fill on: the wait after them says where it stands).
pub(crate) fn after(step: &Step, failures: u32) -> Option<Wanted> {
    let (populated, reason, message) = match step {
        Step::Wait(what, _) => (false, "Waiting", format!("waiting for {what}")),
        Step::SourceMissing(why) => (false, "BackupVolumeMissing", why.clone()),
        Step::Failed(why) => (false, "FillFailed", failure_note(failures, why)),
        Step::GiveUp(why) => (false, "FillGaveUp", why.clone()),
        Step::Done => (
            true,
            "Populated",
            "the claim is bound to a volume holding the backup's files".to_string(),
        ),
        _ => return None,
    };
    Some(Wanted {
        populated,
        reason,
        message: cut(message),
    })
}

/// What is said of a fill that failed, after `failures` earlier ones.
pub(crate) fn failure_note(failures: u32, why: &str) -> String {
    let failures = failures.saturating_add(1);
    format!(
        "fill {failures} of {MAX_ATTEMPTS} failed: {why}; the next starts in {}s",
        retry_after(failures).as_secs()
    )
}

fn cut(mut message: String) -> String {
    if let Some((at, _)) = message.char_indices().nth(MESSAGE_MAX) {
        message.truncate(at);
        message.push('…');
    }
    message
}

/// The condition to write on `claim`, when it differs from what the claim holds. Its
/// transition time moves only when its status does.
pub(crate) fn change(
    claim: &PersistentVolumeClaim,
    wanted: &Wanted,
    now: Timestamp,
) -> Option<PersistentVolumeClaimCondition> {
    let status = if wanted.populated { "True" } else { "False" };
    let current = claim
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == TYPE));
    let same = current.is_some_and(|c| {
        c.status == status
            && c.reason.as_deref() == Some(wanted.reason)
            && c.message.as_deref() == Some(wanted.message.as_str())
    });
    if same {
        return None;
    }
    let transition = current
        .filter(|c| c.status == status)
        .and_then(|c| c.last_transition_time.clone())
        .unwrap_or(Time(now));
    Some(PersistentVolumeClaimCondition {
        type_: TYPE.into(),
        status: status.into(),
        reason: Some(wanted.reason.into()),
        message: Some(wanted.message.clone()),
        last_transition_time: Some(transition),
        last_probe_time: Some(Time(now)),
    })
}

#[cfg(test)]
mod tests;

//! The controller's errors, each with a category that decides what happens next:
//! transient ones are retried with a per-restore exponential backoff, conflicts at once,
//! and permanent ones end the volume or restore they belong to instead of being retried.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use tracing::warn;

use super::context::Context;

/// Why a reconcile pass failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// The API refused or did not answer; [`Error::category`] tells which.
    #[error(transparent)]
    Kube(#[from] kube::Error),
    /// A condition no retry changes (an object refill needs is gone, a refusal).
    #[error("{0}")]
    Permanent(String),
    /// A condition that passes by itself (a watch not listed yet).
    #[error("{0}")]
    Transient(String),
    /// The pass panicked: a bug in refill, met on this object only.
    #[error("internal error: {0}")]
    Panicked(String),
}

/// A result whose error is the controller's [`Error`].
pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Category {
    /// The API server or the network hiccuped: retry with backoff.
    Transient,
    /// The object moved on since it was read: look again at once.
    Conflict,
    /// Refused for what it is (quota, admission, RBAC, validation): retrying cannot help.
    Permanent,
    /// refill itself failed on the object (a panic): retried with backoff, in case what
    /// caused it changes.
    Internal,
}

/// Whether the API answered with this HTTP status.
pub(crate) fn has_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(ae) if ae.code == code)
}

/// Whether the API answered that the object is not there (404).
pub(crate) fn is_not_found(e: &kube::Error) -> bool {
    has_status(e, 404)
}

/// Whether the API refused for a conflict (409): the object moved on since it was
/// read, or one of that name exists already.
pub(crate) fn is_conflict(e: &kube::Error) -> bool {
    has_status(e, 409)
}

pub(crate) fn category_of(e: &kube::Error) -> Category {
    match e {
        kube::Error::Api(ae) => match ae.code {
            409 => Category::Conflict,
            // 403: quota, admission or RBAC; 422 and 400: the object is invalid;
            // 405/413/415: the request itself.
            400 | 403 | 405 | 413 | 415 | 422 => Category::Permanent,
            _ => Category::Transient,
        },
        _ => Category::Transient,
    }
}

impl Error {
    /// Whether retrying can help, and how soon.
    pub(crate) fn category(&self) -> Category {
        match self {
            Error::Kube(e) => category_of(e),
            Error::Permanent(_) => Category::Permanent,
            Error::Transient(_) => Category::Transient,
            Error::Panicked(_) => Category::Internal,
        }
    }

    /// The server's own words when it refused, else the error as text.
    pub(crate) fn reason(&self) -> String {
        match self {
            Error::Kube(kube::Error::Api(ae)) => ae.message.clone(),
            other => other.to_string(),
        }
    }
}

/// The delays of one restore's retries, before their spread.
type Schedule = <ExponentialBuilder as BackoffBuilder>::Backoff;

/// Per-restore backoff for transient errors, reset by a pass that succeeds.
#[derive(Default)]
pub(crate) struct Backoffs {
    by_restore: Mutex<HashMap<String, Schedule>>,
}

/// From half a second, half as long again after each failed pass, up to a minute,
/// and never giving up: a restore waits out an API outage however long it lasts.
fn schedule() -> Schedule {
    ExponentialBuilder::new()
        .with_min_delay(Duration::from_millis(500))
        .with_factor(1.5)
        .with_max_delay(Duration::from_secs(60))
        .without_max_times()
        .build()
}

/// Anywhere from half to one and a half times `delay`, so that restores which failed
/// together (the API server went away under all of them) do not retry in step.
/// backon's own jitter only ever lengthens a delay, up to twice it.
fn spread(delay: Duration) -> Duration {
    delay.mul_f64(0.5 + fastrand::f64())
}

impl Backoffs {
    /// The delay before the next try of this restore.
    pub(crate) fn next(&self, uid: &str) -> Duration {
        let mut all = self
            .by_restore
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let delay = all
            .entry(uid.to_string())
            .or_insert_with(schedule)
            .next()
            .unwrap_or(Duration::from_secs(60));
        spread(delay)
    }

    pub(crate) fn reset(&self, uid: &str) {
        self.by_restore
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(uid);
    }
}

/// After a failed pass over `object` (a `what`): counted, and retried with the
/// object's own backoff.
pub(crate) fn retry_later<K: Resource>(
    object: &K,
    what: &str,
    error: &Error,
    ctx: &Context,
) -> Action {
    let uid = object.uid().unwrap_or_default();
    ctx.config.metrics.reconcile_failed(error.category());
    let delay = ctx.backoffs.next(&uid);
    warn!(name = %object.name_any(), "{what}: will retry in {delay:?}: {error}");
    Action::requeue(delay)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("refused", "Forbidden")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn refusals_are_permanent_and_hiccups_transient() {
        assert_eq!(category_of(&api(403)), Category::Permanent);
        assert_eq!(category_of(&api(422)), Category::Permanent);
        assert_eq!(category_of(&api(409)), Category::Conflict);
        assert_eq!(category_of(&api(500)), Category::Transient);
        assert_eq!(category_of(&api(429)), Category::Transient);
        assert_eq!(
            Error::Permanent("gone".into()).category(),
            Category::Permanent
        );
        assert!(has_status(&api(404), 404));
    }

    #[test]
    fn not_found_and_conflict_are_told_by_the_answer_code_alone() {
        assert!(is_not_found(&api(404)) && !is_not_found(&api(409)));
        assert!(is_conflict(&api(409)) && !is_conflict(&api(404)));
        let no_answer = kube::Error::LinesCodecMaxLineLengthExceeded;
        assert!(!is_not_found(&no_answer) && !is_conflict(&no_answer));
    }

    #[test]
    fn backoff_grows_per_restore_and_resets() {
        let backoffs = Backoffs::default();
        let first = backoffs.next("a");
        let mut later = first;
        for _ in 0..6 {
            later = backoffs.next("a");
        }
        assert!(later > first, "{later:?} > {first:?}");
        assert!(later <= Duration::from_secs(60));
        assert!(backoffs.next("b") < later, "another restore starts afresh");
        backoffs.reset("a");
        assert!(backoffs.next("a") < later);
    }

    #[test]
    fn the_schedule_grows_by_half_up_to_a_minute_and_never_ends() {
        let delays: Vec<Duration> = schedule().take(1000).collect();
        assert_eq!(delays.len(), 1000);
        assert_eq!(delays[0], Duration::from_millis(500));
        assert_eq!(delays[1], Duration::from_millis(750));
        assert!(delays.windows(2).all(|w| w[0] <= w[1]), "{delays:?}");
        assert_eq!(delays[20], Duration::from_secs(60));
        assert_eq!(delays[999], Duration::from_secs(60));
    }

    #[test]
    fn the_spread_is_half_to_one_and_a_half_times_the_delay() {
        let delay = Duration::from_secs(10);
        let delays: Vec<Duration> = (0..1000).map(|_| spread(delay)).collect();
        assert!(
            delays
                .iter()
                .all(|d| *d >= delay / 2 && *d <= delay * 3 / 2)
        );
        assert!(delays.iter().any(|d| *d < delay) && delays.iter().any(|d| *d > delay));
    }
}

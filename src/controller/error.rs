//! The controller's errors, each with a category that decides what happens next:
//! transient ones are retried with a per-restore exponential backoff, conflicts at once,
//! and permanent ones end the volume or restore they belong to instead of being retried.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use backoff::ExponentialBackoff;
use backoff::backoff::Backoff;

/// Why a reconcile pass failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
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
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Category {
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
pub fn has_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(ae) if ae.code == code)
}

pub fn category_of(e: &kube::Error) -> Category {
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
    pub fn category(&self) -> Category {
        match self {
            Error::Kube(e) => category_of(e),
            Error::Permanent(_) => Category::Permanent,
            Error::Transient(_) => Category::Transient,
            Error::Panicked(_) => Category::Internal,
        }
    }

    /// The server's own words when it refused, else the error as text.
    pub fn reason(&self) -> String {
        match self {
            Error::Kube(kube::Error::Api(ae)) => ae.message.clone(),
            other => other.to_string(),
        }
    }
}

/// Per-restore backoff for transient errors, reset by a pass that succeeds.
#[derive(Default)]
pub struct Backoffs {
    by_restore: Mutex<HashMap<String, ExponentialBackoff>>,
}

impl Backoffs {
    /// The delay before the next try of this restore.
    pub fn next(&self, uid: &str) -> Duration {
        let mut all = self
            .by_restore
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let backoff = all
            .entry(uid.to_string())
            .or_insert_with(|| ExponentialBackoff {
                initial_interval: Duration::from_millis(500),
                max_interval: Duration::from_secs(60),
                max_elapsed_time: None,
                ..ExponentialBackoff::default()
            });
        backoff.next_backoff().unwrap_or(Duration::from_secs(60))
    }

    pub fn reset(&self, uid: &str) {
        self.by_restore
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(uid);
    }
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
}

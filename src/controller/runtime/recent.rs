//! A value read lately, used again for a while instead of being read on every pass.
//! Pure.

use std::time::{Duration, Instant};

/// A value and when it was read; it serves for [`Recent::AGE`] after.
#[derive(Debug)]
pub(crate) struct Recent<T> {
    kept: Option<(Instant, T)>,
}

impl<T> Default for Recent<T> {
    fn default() -> Self {
        Recent { kept: None }
    }
}

impl<T: Clone> Recent<T> {
    /// How long a value read serves.
    pub(crate) const AGE: Duration = Duration::from_secs(30);

    /// The value, while it is young enough at `now`.
    pub(crate) fn get(&self, now: Instant) -> Option<T> {
        self.kept
            .as_ref()
            .filter(|(at, _)| now.saturating_duration_since(*at) < Self::AGE)
            .map(|(_, value)| value.clone())
    }

    /// Keeps `value`, read at `at`.
    pub(crate) fn put(&mut self, value: T, at: Instant) {
        self.kept = Some((at, value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_serves_until_it_is_too_old() {
        let mut recent = Recent::default();
        let start = Instant::now();
        assert_eq!(recent.get(start), None, "nothing read yet");
        recent.put(1, start);
        assert_eq!(recent.get(start + Recent::<i32>::AGE / 2), Some(1));
        assert_eq!(recent.get(start + Recent::<i32>::AGE), None, "read again");
        recent.put(2, start + Recent::<i32>::AGE);
        assert_eq!(recent.get(start + Recent::<i32>::AGE), Some(2));
    }
}

//! Pacing reads that need not happen on every pass. Pure.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The least time between two paced reads of one object.
pub(crate) const PACE: Duration = Duration::from_secs(5);
/// The most: a caller's longer pace is cut to it, and a key not read for this long is
/// one the pacer may forget.
pub(crate) const LONGEST_PACE: Duration = Duration::from_secs(60);
/// How many keys are remembered before the stale ones are dropped.
const PRUNE_FROM: usize = 1024;

/// When each paced read was last let through, by key. Holds at most what was read
/// within the last [`LONGEST_PACE`] once it has grown past [`PRUNE_FROM`] keys.
#[derive(Debug, Default)]
pub(crate) struct Pacer {
    last: HashMap<String, Instant>,
}

impl Pacer {
    /// Whether the read named `key` may happen at `now`: at most once per `pace`, held
    /// between [`PACE`] and [`LONGEST_PACE`].
    pub(crate) fn allow(&mut self, key: &str, now: Instant, pace: Duration) -> bool {
        let pace = pace.clamp(PACE, LONGEST_PACE);
        if self
            .last
            .get(key)
            .is_some_and(|at| now.saturating_duration_since(*at) < pace)
        {
            return false;
        }
        if self.last.len() >= PRUNE_FROM {
            self.last
                .retain(|_, at| now.saturating_duration_since(*at) < LONGEST_PACE);
        }
        self.last.insert(key.to_string(), now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_let_through_once_per_pace_and_others_on_their_own() {
        let mut pacer = Pacer::default();
        let start = Instant::now();
        let after = |secs| start + Duration::from_secs(secs);
        assert!(pacer.allow("a", start, PACE));
        assert!(!pacer.allow("a", after(4), PACE));
        assert!(
            pacer.allow("b", after(4), PACE),
            "another key has its own pace"
        );
        assert!(pacer.allow("a", after(5), PACE));
        assert!(!pacer.allow("a", after(9), PACE));
    }

    #[test]
    fn a_pace_is_held_within_its_bounds() {
        let mut pacer = Pacer::default();
        let start = Instant::now();
        let after = |secs| start + Duration::from_secs(secs);
        let secs = Duration::from_secs;
        assert!(pacer.allow("a", start, secs(30)));
        assert!(!pacer.allow("a", after(29), secs(30)));
        assert!(pacer.allow("a", after(30), secs(30)));
        assert!(
            !pacer.allow("a", after(34), secs(1)),
            "never more often than PACE"
        );
        assert!(
            pacer.allow("a", after(90), secs(3600)),
            "never less often than LONGEST_PACE"
        );
    }

    #[test]
    fn stale_keys_go_as_the_map_grows() {
        let mut pacer = Pacer::default();
        let start = Instant::now();
        for i in 0..PRUNE_FROM {
            assert!(pacer.allow(&i.to_string(), start, PACE));
        }
        assert!(pacer.allow("late", start + LONGEST_PACE, PACE));
        assert_eq!(
            pacer.last.len(),
            1,
            "only what was read within the pace stays"
        );
    }
}

//! Pacing reads that need not happen on every pass. Pure.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The least time between two paced reads of one object.
const PACE: Duration = Duration::from_secs(5);
/// How many keys are remembered before the stale ones are dropped.
const PRUNE_FROM: usize = 1024;

/// When each paced read was last let through, by key. Holds at most what was read
/// within the last [`PACE`] once it has grown past [`PRUNE_FROM`] keys.
#[derive(Debug, Default)]
pub(crate) struct Pacer {
    last: HashMap<String, Instant>,
}

impl Pacer {
    /// Whether the read named `key` may happen at `now`: at most once per [`PACE`].
    pub(crate) fn allow(&mut self, key: &str, now: Instant) -> bool {
        if self
            .last
            .get(key)
            .is_some_and(|at| now.saturating_duration_since(*at) < PACE)
        {
            return false;
        }
        if self.last.len() >= PRUNE_FROM {
            self.last
                .retain(|_, at| now.saturating_duration_since(*at) < PACE);
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
        assert!(pacer.allow("a", start));
        assert!(!pacer.allow("a", after(4)));
        assert!(pacer.allow("b", after(4)), "another key has its own pace");
        assert!(pacer.allow("a", after(5)));
        assert!(!pacer.allow("a", after(9)));
    }

    #[test]
    fn stale_keys_go_as_the_map_grows() {
        let mut pacer = Pacer::default();
        let start = Instant::now();
        for i in 0..PRUNE_FROM {
            assert!(pacer.allow(&i.to_string(), start));
        }
        assert!(pacer.allow("late", start + PACE));
        assert_eq!(
            pacer.last.len(),
            1,
            "only what was read within the pace stays"
        );
    }
}

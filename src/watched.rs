//! A small fact per object, kept from a watch: the shape of refill's indexes of
//! claims ([`crate::claims`]) and nodes ([`crate::nodes`]).
//!
//! A relist builds a fresh map beside the live one and swaps it in when done, so an
//! object deleted while the watch was down does not linger; nothing is said before
//! the first list is complete.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::RwLock;

use kube::runtime::watcher::Event;

struct State<K, V> {
    live: HashMap<K, V>,
    relisting: Option<HashMap<K, V>>,
    ready: bool,
}

pub(crate) struct Watched<K, V> {
    state: RwLock<State<K, V>>,
}

impl<K, V> Default for Watched<K, V> {
    fn default() -> Self {
        Watched {
            state: RwLock::new(State {
                live: HashMap::new(),
                relisting: None,
                ready: false,
            }),
        }
    }
}

impl<K: Hash + Eq, V: Clone> Watched<K, V> {
    /// Takes one event of the watch; `fact` reads an object's key and what is kept.
    pub(crate) fn apply<O>(&self, event: &Event<O>, fact: impl Fn(&O) -> (K, V)) {
        let mut state = self
            .state
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match event {
            Event::Init => state.relisting = Some(HashMap::new()),
            Event::InitApply(object) => {
                let (key, value) = fact(object);
                state
                    .relisting
                    .get_or_insert_with(HashMap::new)
                    .insert(key, value);
            }
            Event::InitDone => {
                state.live = state.relisting.take().unwrap_or_default();
                state.ready = true;
            }
            Event::Apply(object) => {
                let (key, value) = fact(object);
                state.live.insert(key, value);
            }
            Event::Delete(object) => {
                state.live.remove(&fact(object).0);
            }
        }
    }

    /// What is kept of `key` (None inside: no such object); None before the first
    /// list is done.
    pub(crate) fn get(&self, key: &K) -> Option<Option<V>> {
        let state = self
            .state
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        state.ready.then(|| state.live.get(key).cloned())
    }
}

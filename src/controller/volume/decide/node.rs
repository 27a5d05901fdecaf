//! Waits on a node that stopped answering.
//!
//! Every wait of a volume runs on some node: a consumer's pod going away, a stand-in or
//! copier starting or being removed, a node agent ending its PodVolumeRestore. When the
//! node is NotReady, unreachable or deleted, the wait says so (the volume's message, its
//! warning, an Event), and it ends within a bound unless something there may still
//! write to the volume:
//! - a stand-in or copier that cannot start there fails the volume once the node has
//!   been down for `Rules::node_grace`;
//! - a stand-in or copier refill is removing is removed without the kubelet's word
//!   (grace period 0) after the same grace, when nothing on that node may write: no
//!   node agent took the PodVolumeRestore (a node agent records that in the API
//!   before it writes; the stand-in itself writes nothing but its set-aside and tidy,
//!   counted like a copier until known ended), no copier is bound there
//!   (a frozen kubelet's containers run on, unreported), no consumer pod is left there.
//!   The kubelet, if it comes back, stops what is left of a pod the API no longer has;
//! - a node agent or copier that may be writing is waited for: the words say so, and
//!   that deleting the Node object (once the node is really gone) ends the wait;
//! - a deleted node runs nothing any more.

use k8s_openapi::jiff::Timestamp;

use super::{CopierSeen, Effect, Rules, StandInSeen, VolumeSeen, expired};

/// What a wait depends on, on one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OnNode {
    /// This restore's stand-in pod.
    StandIn(String),
    /// The set-aside or the tidy of this stand-in, which write to the volume, bound
    /// there and not known to have ended.
    StandInSteps(String),
    /// This restore's copier pod, bound there: unless it is known to have ended, its
    /// container may have started without the API hearing of it (a kubelet that stops
    /// reporting does not stop its containers), so it may be writing.
    Copier { name: String, ended: bool },
    /// The node agent there, for the PodVolumeRestore; `taken`: it accepted it.
    Agent { pvr: String, taken: bool },
    /// Another pod that mounts the claim (a consumer being stopped): it may write.
    Pod(String),
    /// The claim's volume, last seen on this node.
    Volume,
}

/// A node a wait of this volume depends on that is not Ready, or is gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeDown {
    pub node: String,
    /// `unreachable (NodeStatusUnknown: …)`, `NotReady (…)`, `deleted`.
    pub why: String,
    pub since: Option<Timestamp>,
    pub gone: bool,
    pub on: Vec<OnNode>,
}

impl OnNode {
    /// What may still write to the volume from a node that comes back.
    fn writer(&self) -> Option<String> {
        match self {
            OnNode::Agent { pvr, taken: true } => Some(format!(
                "the node agent there took PodVolumeRestore {pvr} and may still be writing"
            )),
            OnNode::Copier { name, ended: false } => Some(format!(
                "copier pod {name} may have started there and may still be writing"
            )),
            OnNode::StandInSteps(name) => Some(format!(
                "stand-in pod {name} may still be setting the volume's files aside or removing them, and writing"
            )),
            OnNode::Pod(name) => Some(format!(
                "pod {name}, which mounts the claim, may still be running there and writing"
            )),
            _ => None,
        }
    }

    /// refill's own pod: the stand-in or the copier.
    fn is_refills_pod(&self) -> bool {
        matches!(self, OnNode::StandIn(_) | OnNode::Copier { .. })
    }

    fn what(&self) -> Option<String> {
        match self {
            OnNode::StandIn(name) => Some(format!("stand-in pod {name}")),
            OnNode::Copier { name, .. } => Some(format!("copier pod {name}")),
            OnNode::Agent { pvr, .. } => Some(format!("the node agent's PodVolumeRestore {pvr}")),
            OnNode::Pod(name) => Some(format!("pod {name}")),
            // Named by its stand-in's entry.
            OnNode::StandInSteps(_) | OnNode::Volume => None,
        }
    }
}

impl NodeDown {
    fn writers(&self) -> Vec<String> {
        self.on.iter().filter_map(OnNode::writer).collect()
    }

    /// Down long enough for its pods to be given up, or gone.
    fn given_up(&self, rules: &Rules, now: Timestamp) -> bool {
        self.gone || expired(self.since, rules.node_grace, now)
    }

    /// Given up, and nothing there writes any more, or may: its pods may be removed
    /// without it.
    fn abandoned(&self, rules: &Rules, now: Timestamp) -> bool {
        self.given_up(rules, now) && (self.gone || self.writers().is_empty())
    }

    fn state(&self) -> String {
        match (self.gone, self.since) {
            (true, _) => format!("node {} is deleted", self.node),
            (false, Some(since)) => format!("node {} is {} since {since}", self.node, self.why),
            (false, None) => format!("node {} is {}", self.node, self.why),
        }
    }

    /// What the volume waits for there, and why waiting is safe, or what ends it.
    pub(crate) fn words(&self, pvc: &str, rules: &Rules, now: Timestamp) -> String {
        let waits: Vec<String> = self.on.iter().filter_map(OnNode::what).collect();
        let waits = match waits.is_empty() {
            true => format!("PVC {pvc}'s volume is there"),
            false => format!("refill waits for {}", waits.join(", ")),
        };
        let writers = self.writers();
        let only_the_volume = self.on.iter().all(|o| *o == OnNode::Volume);
        let then = if self.gone {
            "nothing on it runs any more".to_string()
        } else if only_the_volume {
            format!(
                "a pod that needs PVC {pvc}'s volume there cannot start until the node is back; nothing of this restore runs there yet, so waiting is safe (the volume's bound is its volumeTimeout)"
            )
        } else if !writers.is_empty() {
            format!(
                "{} to PVC {pvc} if the node answers again, so refill waits and the consumers stay stopped; if {} is gone for good, delete its Node object (kubectl delete node {}) and the restore goes on",
                writers.join("; "),
                self.node,
                self.node
            )
        } else if self.given_up(rules, now) {
            format!(
                "nothing there writes to PVC {pvc}, so refill removes its pods without the node's word"
            )
        } else {
            format!(
                "nothing there writes to PVC {pvc}; unless the node answers first, refill removes its pods without the node's word {}s after it went down",
                rules.node_grace.as_secs()
            )
        };
        format!("{}: {waits}; {then}", self.state())
    }
}

/// The down node `what` waits on, among those seen.
fn holding(seen: &VolumeSeen, what: impl Fn(&OnNode) -> bool) -> Option<&NodeDown> {
    seen.nodes_down.iter().find(|d| d.on.iter().any(&what))
}

/// A stand-in or copier that has to start on a node down for the grace, with nothing
/// there that may write, or that waits to be placed while the node its volume is on
/// is deleted: the volume cannot go on there. Why, if so.
pub(crate) fn cannot_start(seen: &VolumeSeen, rules: &Rules, now: Timestamp) -> Option<String> {
    if let Some(down) = holding(seen, OnNode::is_refills_pod) {
        return down.abandoned(rules, now).then(|| {
            let pods: Vec<String> = down
                .on
                .iter()
                .filter(|o| o.is_refills_pod())
                .filter_map(OnNode::what)
                .collect();
            let how_long = match down.gone {
                true => String::new(),
                false => format!(" (more than {}s)", rules.node_grace.as_secs()),
            };
            // Given up with writers only when the node is deleted: what ran there
            // before may have written.
            let wrote = match down.writers().is_empty() {
                true => "nothing wrote to the volume there",
                false => "what ran there may have written part of the volume",
            };
            format!(
                "{}{how_long}: {} cannot run there; {wrote}; {}",
                down.state(),
                pods.join(", "),
                pending(&down.node)
            )
        });
    }
    // Not placed on any node yet, and the only node that holds the volume is gone: a
    // scheduler never places it (a node-local volume), and nothing of it ever ran.
    let node = volume_gone(seen)?;
    let pod = unplaced(seen)?;
    Some(format!(
        "node {node}, where the volume is, is deleted: {pod} cannot run anywhere else; nothing wrote to the volume; {}",
        pending(node)
    ))
}

/// refill's own pod that waits to be placed (not on a node that is down), if any.
fn unplaced(seen: &VolumeSeen) -> Option<String> {
    let on_down_node = |what: &dyn Fn(&OnNode) -> bool| holding(seen, what).is_some();
    match (&seen.stand_in, &seen.copier) {
        (
            StandInSeen::Ours {
                name,
                waiting: Some(_),
                ..
            },
            _,
        ) if !on_down_node(&|o| matches!(o, OnNode::StandIn(_))) => {
            Some(format!("stand-in pod {name}"))
        }
        (
            _,
            CopierSeen::Present {
                name,
                waiting: Some(_),
                ..
            },
        ) if !on_down_node(&|o| matches!(o, OnNode::Copier { .. })) => {
            Some(format!("copier pod {name}"))
        }
        _ => None,
    }
}

/// What becomes of the consumers of a volume that stays on a node that is down.
fn pending(node: &str) -> String {
    format!(
        "the consumers are brought back, and a pod of theirs that needs a volume local to node {node} stays Pending until that node is back"
    )
}

/// The stand-in's node is given up, and nothing there may write.
pub(crate) fn stand_in_given_up(seen: &VolumeSeen, rules: &Rules, now: Timestamp) -> bool {
    holding(seen, |o| matches!(o, OnNode::StandIn(_))).is_some_and(|d| d.abandoned(rules, now))
}

/// The pod to remove without the kubelet's word: refill's own stand-in or copier,
/// already being deleted, on a node given up with nothing there that may write.
pub(crate) fn force(seen: &VolumeSeen, rules: &Rules, now: Timestamp) -> Option<Effect> {
    seen.nodes_down
        .iter()
        .filter(|d| d.abandoned(rules, now))
        .find_map(|d| {
            d.on.iter().find_map(|o| match o {
                OnNode::StandIn(_) if seen.stand_in_terminating() => {
                    Some(Effect::ForceDeleteStandIn)
                }
                OnNode::Copier { .. } if seen.copier_terminating() => {
                    Some(Effect::ForceDeleteCopier)
                }
                _ => None,
            })
        })
}

/// The node agent that took the PodVolumeRestore went with its node: it ends nothing
/// any more, and writes nothing either.
pub(crate) fn agent_gone(seen: &VolumeSeen) -> bool {
    holding(seen, |o| matches!(o, OnNode::Agent { .. })).is_some_and(|d| d.gone)
}

/// The node the claim's volume was last seen on is deleted: no copier can reach it.
pub(crate) fn volume_gone(seen: &VolumeSeen) -> Option<&str> {
    holding(seen, |o| *o == OnNode::Volume)
        .filter(|d| d.gone)
        .map(|d| d.node.as_str())
}

/// The first down node something of the volume waits on: the one its message and
/// warning name. Failing that, while the volume is under way, the down node it is on,
/// which a stand-in or copier that is not placed yet waits for.
pub(crate) fn waited_on(seen: &VolumeSeen, under_way: bool) -> Option<&NodeDown> {
    holding(seen, |o| *o != OnNode::Volume).or_else(|| {
        under_way
            .then(|| holding(seen, |o| *o == OnNode::Volume))
            .flatten()
    })
}

/// Where a message's note of a down node starts; it is replaced, not added to, pass
/// after pass.
const NOTE: &str = "waiting on node ";

/// `message` with the note of `down` in place of any earlier one.
pub(crate) fn noted(message: Option<String>, down: Option<&NodeDown>) -> Option<String> {
    let base = message.and_then(|m| match m.find(NOTE) {
        Some(0) => None,
        Some(i) => Some(m[..i].trim_end_matches("; ").to_string()),
        None => Some(m),
    });
    let note = down.map(|d| format!("{NOTE}{} ({})", d.node, d.why));
    match (base, note) {
        (Some(base), Some(note)) => Some(format!("{base}; {note}")),
        (base, note) => base.or(note),
    }
}

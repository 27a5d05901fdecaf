//! Which nodes are Ready, kept from a watch of Nodes.
//!
//! A restore waits on nodes: for a consumer's pod to go, for a stand-in or copier to
//! start or to be removed, for a node agent to end a PodVolumeRestore. When the node
//! stops answering, those waits would go on without a word. Each pass asks this index
//! about the nodes its waits depend on, at no request; only a node's readiness is kept
//! (its images and addresses are most of a Node object).

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::watcher::Event;

use crate::watched::Watched;

/// The taint the node lifecycle controller puts on a node whose kubelet stopped
/// posting its status.
const UNREACHABLE: &str = "node.kubernetes.io/unreachable";

/// How a node is, as far as a restore's waits go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NodeHealth {
    Ready,
    /// Its Ready condition is False or Unknown, or it is tainted unreachable.
    Down {
        since: Option<Timestamp>,
        /// `NotReady (reason: message)`, `unreachable (…)`.
        why: String,
    },
}

/// A node that is not Ready, or no longer exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Down {
    pub since: Option<Timestamp>,
    pub why: String,
    /// The Node object is gone: nothing on it runs any more, as far as the cluster
    /// knows (its pods are removed by the pod garbage collector).
    pub gone: bool,
}

/// A node's health from its conditions and taints. Pure.
pub(crate) fn health(node: &Node) -> NodeHealth {
    let status = node.status.as_ref();
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
    let unreachable = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .and_then(|t| t.iter().find(|t| t.key == UNREACHABLE));
    let said = |reason: Option<&String>, message: Option<&String>| match (
        reason.map(String::as_str),
        message.map(String::as_str),
    ) {
        (Some(r), Some(m)) => format!(" ({r}: {m})"),
        (Some(s), None) | (None, Some(s)) => format!(" ({s})"),
        (None, None) => String::new(),
    };
    match ready {
        Some(c) if c.status == "True" && unreachable.is_none() => NodeHealth::Ready,
        Some(c) => NodeHealth::Down {
            since: c.last_transition_time.as_ref().map(|t| t.0),
            why: match c.status.as_str() {
                "Unknown" => format!("unreachable{}", said(c.reason.as_ref(), c.message.as_ref())),
                _ => format!("NotReady{}", said(c.reason.as_ref(), c.message.as_ref())),
            },
        },
        // A node without a Ready condition has not reported yet: no wait on it can be
        // said to be stuck because of it, unless it is tainted unreachable.
        None => match unreachable {
            Some(t) => NodeHealth::Down {
                since: t.time_added.as_ref().map(|t| t.0),
                why: "unreachable".into(),
            },
            None => NodeHealth::Ready,
        },
    }
}

/// The index, fed by the controller's watch of Nodes.
#[derive(Default)]
pub(crate) struct Nodes(Watched<String, NodeHealth>);

impl Nodes {
    pub(crate) fn apply(&self, event: &Event<Node>) {
        self.0.apply(event, |node| (node.name_any(), health(node)));
    }

    /// How `name` is when it is not Ready or gone; None when it is Ready, and before
    /// the first list is done (nothing is said of a node not known yet).
    pub(crate) fn down(&self, name: &str) -> Option<Down> {
        match self.0.get(&name.to_string())? {
            None => Some(Down {
                since: None,
                why: "deleted".into(),
                gone: true,
            }),
            Some(NodeHealth::Ready) => None,
            Some(NodeHealth::Down { since, why }) => Some(Down {
                since,
                why,
                gone: false,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, ready: &str, taint: bool) -> Node {
        let taints = if taint {
            json!([{"key": UNREACHABLE, "effect": "NoExecute", "timeAdded": "2026-12-04T02:00:40Z"}])
        } else {
            json!([])
        };
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"taints": taints},
            "status": {"conditions": [{
                "type": "Ready",
                "status": ready,
                "reason": "NodeStatusUnknown",
                "message": "Kubelet stopped posting node status.",
                "lastTransitionTime": "2026-12-04T02:00:40Z",
            }]},
        }))
        .unwrap()
    }

    #[test]
    fn a_node_is_down_when_not_ready_or_tainted_unreachable() {
        assert_eq!(health(&node("a", "True", false)), NodeHealth::Ready);
        let NodeHealth::Down { since, why } = health(&node("a", "Unknown", true)) else {
            panic!("an unknown node is down");
        };
        assert_eq!(
            why,
            "unreachable (NodeStatusUnknown: Kubelet stopped posting node status.)"
        );
        assert_eq!(since.unwrap().to_string(), "2026-12-04T02:00:40Z");
        assert!(
            matches!(health(&node("a", "False", false)), NodeHealth::Down { why, .. } if why.starts_with("NotReady"))
        );
        // Ready, yet the lifecycle controller cut it off: down.
        assert!(matches!(
            health(&node("a", "True", true)),
            NodeHealth::Down { .. }
        ));
    }

    #[test]
    fn nothing_is_said_before_the_first_list_and_a_deleted_node_is_gone() {
        let nodes = Nodes::default();
        assert_eq!(nodes.down("a"), None);
        nodes.apply(&Event::Init);
        nodes.apply(&Event::InitApply(node("a", "True", false)));
        nodes.apply(&Event::InitApply(node("b", "Unknown", true)));
        nodes.apply(&Event::InitDone);
        assert_eq!(nodes.down("a"), None);
        assert!(nodes.down("b").is_some_and(|d| !d.gone));
        assert!(nodes.down("c").is_some_and(|d| d.gone));
        nodes.apply(&Event::Apply(node("b", "True", false)));
        assert_eq!(nodes.down("b"), None);
        nodes.apply(&Event::Delete(node("a", "True", false)));
        assert!(
            nodes
                .down("a")
                .is_some_and(|d| d.gone && d.why == "deleted")
        );
    }
}

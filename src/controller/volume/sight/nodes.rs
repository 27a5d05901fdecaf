//! Which of the nodes a volume's waits depend on are down, from the controller's
//! node index ([`crate::nodes`]).

use std::collections::BTreeMap;

use crate::nodes::Down;

use super::super::decide::{NodeDown, OnNode};

/// Groups what waits on which node, and keeps the nodes `down` reports as not Ready or
/// gone, in the order they were first named. Pure.
pub(super) fn nodes_down(
    waits: impl IntoIterator<Item = (String, OnNode)>,
    down: impl Fn(&str) -> Option<Down>,
) -> Vec<NodeDown> {
    let mut order = Vec::new();
    let mut by_node: BTreeMap<String, Vec<OnNode>> = BTreeMap::new();
    for (node, on) in waits {
        if node.is_empty() {
            continue;
        }
        let list = by_node.entry(node.clone()).or_insert_with(|| {
            order.push(node.clone());
            Vec::new()
        });
        if !list.contains(&on) {
            list.push(on);
        }
    }
    order
        .into_iter()
        .filter_map(|node| {
            let Down { since, why, gone } = down(&node)?;
            let on = by_node.remove(&node).unwrap_or_default();
            Some(NodeDown {
                node,
                why,
                since,
                gone,
                on,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_down_nodes_are_kept_with_all_that_waits_on_each() {
        let waits = vec![
            ("a".to_string(), OnNode::StandIn("s".into())),
            ("b".to_string(), OnNode::Pod("web-1".into())),
            (
                "a".to_string(),
                OnNode::Agent {
                    pvr: "p".into(),
                    taken: false,
                },
            ),
            ("a".to_string(), OnNode::StandIn("s".into())),
            (String::new(), OnNode::Volume),
        ];
        let down = |n: &str| {
            (n == "a").then(|| Down {
                since: None,
                why: "unreachable".into(),
                gone: false,
            })
        };
        let found = nodes_down(waits, down);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].node, "a");
        assert_eq!(
            found[0].on,
            vec![
                OnNode::StandIn("s".into()),
                OnNode::Agent {
                    pvr: "p".into(),
                    taken: false
                }
            ]
        );
    }
}

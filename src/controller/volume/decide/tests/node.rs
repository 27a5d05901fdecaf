//! Waits on a node that stopped answering: the words, and the bound.

use super::*;

/// Node `node-a`, down since `NOW - ago` seconds (`gone`: its Node object deleted),
/// with what waits on it.
fn down(ago: i64, gone: bool, on: Vec<OnNode>) -> Vec<NodeDown> {
    vec![NodeDown {
        node: "node-a".into(),
        why: "unreachable (NodeStatusUnknown: Kubelet stopped posting node status.)".into(),
        since: (!gone).then(|| at(NOW - ago)),
        gone,
        on,
    }]
}

fn with_down(mut s: VolumeSeen, nodes: Vec<NodeDown>) -> VolumeSeen {
    s.nodes_down = nodes;
    s
}

fn stand_in_there() -> OnNode {
    OnNode::StandIn("refill-data-1".into())
}

fn agent_there(taken: bool) -> OnNode {
    OnNode::Agent {
        pvr: "fix-1".into(),
        taken,
    }
}

#[test]
fn a_wait_on_a_node_that_stopped_answering_is_said_and_bounded() {
    use PodVolumePhase as P;
    use VolumePhase::*;
    let untaken = || canceled_pvr(P::New).map(|p| PvrSeen { taken: false, ..p });
    let rows: Vec<(&str, VolumeStatus, VolumeSeen, Rules, Want)> = vec![
        (
            "the stand-in's node went down a moment ago: said, and waited for",
            volume(StartingStandIn),
            with_down(
                seen(ours(), untaken_pvr(P::New)),
                down(30, false, vec![stand_in_there(), agent_there(false)]),
            ),
            rules(),
            Want::StayWarning(
                "unless the node answers first, refill removes its pods without the node's word 120s after",
            ),
        ),
        (
            "down past the grace with nothing written there: the volume fails",
            volume(StartingStandIn),
            with_down(
                seen(ours(), untaken_pvr(P::New)),
                down(200, false, vec![stand_in_there(), agent_there(false)]),
            ),
            rules(),
            Want::Abort(
                Failed,
                "stand-in pod refill-data-1 cannot run there; nothing wrote to the volume there; the consumers are brought back, and a pod of theirs that needs a volume local to node node-a stays Pending",
            ),
        ),
        (
            "a node agent there took the restore: waited for, saying how it ends",
            volume(Restoring),
            with_down(
                seen(running_since(NOW - 300), pvr(P::InProgress)),
                down(200, false, vec![stand_in_there(), agent_there(true)]),
            ),
            rules(),
            Want::StayWarning("delete its Node object (kubectl delete node node-a)"),
        ),
        (
            "aborting: a stand-in being removed on a node given up, nothing written: removed without its word",
            aborting(Failed),
            with_down(
                seen(terminating(), untaken()),
                down(200, false, vec![stand_in_there(), agent_there(false)]),
            ),
            rules(),
            Want::StayDoingWarning(Effect::ForceDeleteStandIn, "without the node's word"),
        ),
        (
            "within the grace it is waited for",
            aborting(Failed),
            with_down(
                seen(terminating(), untaken()),
                down(30, false, vec![stand_in_there(), agent_there(false)]),
            ),
            rules(),
            Want::StayWarning("120s after it went down"),
        ),
        (
            "a node agent that took the restore may write when its node answers: waited for",
            aborting(Failed),
            with_down(
                seen(terminating(), canceled_pvr(P::InProgress)),
                down(900, false, vec![stand_in_there(), agent_there(true)]),
            ),
            rules(),
            Want::StayWarning("may still be writing to PVC shop/data"),
        ),
        (
            "its node deleted: the agent went with it, the stand-in is removed",
            aborting(Failed),
            with_down(
                seen(terminating(), canceled_pvr(P::InProgress)),
                down(0, true, vec![stand_in_there(), agent_there(true)]),
            ),
            rules(),
            Want::StayDoingWarning(Effect::ForceDeleteStandIn, "node node-a is deleted"),
        ),
        (
            "and the volume ends, partly written as the agent had taken it",
            aborting(Failed),
            with_down(
                seen(StandInSeen::Absent, canceled_pvr(P::InProgress)),
                down(0, true, vec![agent_there(true)]),
            ),
            rules(),
            Want::Finish(true),
        ),
        (
            "the data in, the stand-in stuck being removed on a node given up: removed",
            volume(RemovingStandIn),
            with_down(
                seen(terminating(), pvr(P::Completed)),
                down(200, false, vec![stand_in_there()]),
            ),
            rules(),
            Want::StayDoingWarning(Effect::ForceDeleteStandIn, "refill-data-1"),
        ),
        (
            "the data in, restore-wait's end unheard on a node given up: the stand-in goes",
            volume(RemovingStandIn),
            with_down(
                seen(running_since(NOW - 300), pvr(P::Completed)),
                down(200, false, vec![stand_in_there()]),
            ),
            rules(),
            Want::StayDoingWarning(Effect::DeleteStandIn, "without the node's word"),
        ),
        (
            "within the grace restore-wait is waited for",
            volume(RemovingStandIn),
            with_down(
                seen(running_since(NOW - 300), pvr(P::Completed)),
                down(30, false, vec![stand_in_there()]),
            ),
            rules(),
            Want::StayWarning("120s after it went down"),
        ),
        (
            "a consumer's pod on a node that stopped answering may write: waited for",
            volume(Quiescing),
            with_down(
                with_users(seen(StandInSeen::Absent, None), &["web-1"], None),
                down(900, false, vec![OnNode::Pod("web-1".into())]),
            ),
            rules(),
            Want::StayWarning("pod web-1, which mounts the claim, may still be running there"),
        ),
        (
            "a copier bound there may write unreported: never removed without its word",
            cleared(exact(aborting(Failed))),
            with_down(
                with_copier(
                    seen(StandInSeen::Absent, untaken()),
                    CopierSeen::Present {
                        name: "refill-copy-data-1".into(),
                        terminating: true,
                        ended: None,
                        waiting: None,
                        puts_back: true,
                        rejected: false,
                    },
                ),
                down(
                    900,
                    false,
                    vec![OnNode::Copier {
                        name: "refill-copy-data-1".into(),
                        ended: false,
                    }],
                ),
            ),
            rules(),
            Want::StayWarning("copier pod refill-copy-data-1 may have started there"),
        ),
        (
            "a put-back copier that cannot reach a volume whose node is deleted: ends",
            cleared(exact(aborting(Failed))),
            with_down(
                with_copier(
                    seen(StandInSeen::Absent, untaken()),
                    CopierSeen::Present {
                        name: "refill-copy-data-1".into(),
                        terminating: false,
                        ended: None,
                        waiting: Some("0/3 nodes are available".into()),
                        puts_back: true,
                        rejected: false,
                    },
                ),
                down(0, true, vec![OnNode::Volume]),
            ),
            rules(),
            Want::EndDoing(
                Effect::DeleteCopier,
                Failed,
                "which was on node node-a, now deleted",
            ),
        ),
        (
            "a stand-in not placed yet, the node its volume is on down a moment: named",
            volume(StartingStandIn),
            with_down(
                seen(waiting_for("0/3 nodes are available"), untaken_pvr(P::New)),
                down(30, false, vec![OnNode::Volume]),
            ),
            rules(),
            Want::StayWarning(
                "cannot start until the node is back; nothing of this restore runs there yet",
            ),
        ),
        (
            "a stand-in not placed yet, the node its volume is on deleted: the volume fails, and says the app waits for that node",
            volume(StartingStandIn),
            with_down(
                seen(waiting_for("0/3 nodes are available"), untaken_pvr(P::New)),
                down(0, true, vec![OnNode::Volume]),
            ),
            rules(),
            Want::Abort(
                Failed,
                "cannot run anywhere else; nothing wrote to the volume; the consumers are brought back, and a pod of theirs that needs a volume local to node node-a stays Pending",
            ),
        ),
        (
            "its node deleted while the node agent there had taken the restore: it may have written part",
            volume(Restoring),
            with_down(
                seen(running_since(NOW - 300), pvr(P::InProgress)),
                down(0, true, vec![stand_in_there(), agent_there(true)]),
            ),
            rules(),
            Want::Abort(
                Failed,
                "node node-a is deleted: stand-in pod refill-data-1 cannot run there; what ran there may have written part of the volume",
            ),
        ),
        (
            "an ended volume whose node went down says nothing of it",
            volume(Completed),
            with_down(
                seen(StandInSeen::Absent, None),
                down(30, false, vec![OnNode::Volume]),
            ),
            rules(),
            Want::Stay(None, None),
        ),
    ];
    let now = at(NOW);
    for (name, volume, seen, rules, want) in &rows {
        check(name, &decide(volume, seen, rules, now), want);
    }
}

#[test]
fn the_note_of_a_down_node_is_replaced_each_pass_and_goes_when_it_is_back() {
    use PodVolumePhase as P;
    let mut v = aborting(VolumePhase::Failed);
    let s = with_down(
        seen(terminating(), canceled_pvr(P::InProgress)),
        down(900, false, vec![stand_in_there(), agent_there(true)]),
    );
    for _ in 0..3 {
        let Change::Stay { message, .. } = decide(&v, &s, &rules(), at(NOW)).change else {
            panic!("an aborting volume waits for its node agent");
        };
        v.message = message;
    }
    let message = v.message.clone().unwrap();
    assert_eq!(message.matches("waiting on node").count(), 1, "{message}");
    assert!(
        message.starts_with("why; waiting on node node-a"),
        "{message}"
    );
    let back = seen(terminating(), canceled_pvr(P::InProgress));
    let Change::Stay { message, warning } = decide(&v, &back, &rules(), at(NOW)).change else {
        panic!("still waiting");
    };
    assert_eq!(message.as_deref(), Some("why"));
    assert_eq!(warning, None);
}

/// A stand-in whose set-aside may run on a node that stopped answering is a writer, as
/// a copier is: waited for until the node answers or its Node object is deleted.
#[test]
fn a_stand_in_setting_aside_on_a_node_that_stopped_answering_is_waited_for() {
    use VolumePhase::*;
    let setting_aside = || one_pod(None, false, None);
    let steps = || OnNode::StandInSteps("refill-data-1".into());
    let exact_clearing = || VolumeStatus {
        keep_extra_files: false,
        stand_in_uid: Some("pod-uid-1".into()),
        ..volume(Clearing)
    };
    let rows: Vec<(&str, VolumeStatus, VolumeSeen, Rules, Want)> = vec![
        (
            "down past the grace: not given up, the set-aside may still be moving files",
            exact_clearing(),
            with_down(
                seen(setting_aside(), None),
                down(200, false, vec![stand_in_there(), steps()]),
            ),
            rules(),
            Want::StayWarning(
                "may still be setting the volume's files aside or removing them, and writing to PVC",
            ),
        ),
        (
            "its Node object deleted: nothing there runs any more, the files are put back",
            exact_clearing(),
            with_down(
                seen(setting_aside(), None),
                down(0, true, vec![stand_in_there(), steps()]),
            ),
            rules(),
            Want::Abort(Failed, "what ran there may have written part of the volume"),
        ),
    ];
    let now = at(NOW);
    for (name, volume, seen, rules, want) in &rows {
        check(name, &decide(volume, seen, rules, now), want);
    }
}

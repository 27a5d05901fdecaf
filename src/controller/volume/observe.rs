//! What one pass sees of a volume's world, for [`super::decide`]. Reads only: from the
//! pass's lists and the controller's watch-fed indexes, and from the API only where a
//! decision needs it fresh.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::{Api, ResourceExt};

use crate::api::{ConsumerState, DataRestoreStatus, PodVolumeRestore, VolumePhase, VolumeStatus};
use crate::controller::consumer;
use crate::controller::restore_helper;
use crate::controller::{Context, Result};
use crate::labels;
use crate::observe;

use super::decide::{Claim, Consumers, Pvr, Seen, StandIn};

/// What a pass lists once for all its volumes.
pub struct PassView {
    /// This restore's stand-in pods, by `(namespace, name)`.
    pub stand_ins: BTreeMap<(String, String), Pod>,
    /// This restore's PodVolumeRestores, by name.
    pub pvrs: BTreeMap<String, PodVolumeRestore>,
}

pub fn split(key: &str) -> (&str, &str) {
    key.split_once('/').expect("volume keys are namespace/name")
}

/// The consumers of `pvc` as the restore's records tell.
pub fn consumers(status: &DataRestoreStatus, pvc: &str) -> Consumers {
    let mine = status
        .consumers
        .iter()
        .filter(|c| c.pvcs.iter().any(|p| p == pvc));
    let mut state = Consumers::Stopped;
    for record in mine {
        match record.state {
            ConsumerState::HeldByOther => {
                let holder = record.held_by.as_deref().unwrap_or("another DataRestore");
                return Consumers::HeldBy(format!(
                    "{:?} {}/{} is stopped by DataRestore {holder}, which is restoring it; restore this PVC again after that one ends",
                    record.kind, record.namespace, record.name
                ));
            }
            ConsumerState::Stopped | ConsumerState::KeptStopped => {}
            _ => state = Consumers::Stopping,
        }
    }
    state
}

fn restore_wait_status(pod: &Pod) -> Option<&k8s_openapi::api::core::v1::ContainerStatus> {
    pod.status
        .as_ref()?
        .init_container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == restore_helper::CONTAINER_NAME)
}

/// Our stand-in pod as [`decide`](super::decide) needs to know it.
pub fn stand_in_of(pod: &Pod) -> StandIn {
    let status = pod.status.clone().unwrap_or_default();
    let wait = restore_wait_status(pod);
    let wait_state = wait.and_then(|c| c.state.as_ref());
    let restore_wait_since = wait_state
        .and_then(|s| s.running.as_ref())
        .map(|r| r.started_at.as_ref().map_or(Timestamp::now(), |t| t.0));
    let failed = if status.phase.as_deref() == Some("Failed") {
        Some(
            status
                .message
                .clone()
                .or(status.reason.clone())
                .unwrap_or_else(|| "the pod failed".into()),
        )
    } else {
        wait_state
            .and_then(|s| s.terminated.as_ref())
            .filter(|t| t.exit_code != 0)
            .map(|t| {
                format!(
                    "restore-wait exited with code {}{}",
                    t.exit_code,
                    t.reason
                        .as_ref()
                        .map(|r| format!(" ({r})"))
                        .unwrap_or_default()
                )
            })
    };
    let unscheduled = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        .map(|c| c.message.clone().unwrap_or_else(|| "not scheduled".into()));
    let container_waiting = wait_state
        .and_then(|s| s.waiting.as_ref())
        .and_then(|w| w.reason.clone().map(|r| (r, w.message.clone())))
        .filter(|(reason, _)| reason != "PodInitializing" && reason != "ContainerCreating")
        .map(|(reason, message)| match message {
            Some(m) => format!("restore-wait: {reason}: {m}"),
            None => format!("restore-wait: {reason}"),
        });
    let restore_wait_done = wait_state
        .and_then(|s| s.terminated.as_ref())
        .is_some_and(|t| t.exit_code == 0);
    StandIn::Ours {
        name: pod.name_any(),
        terminating: pod.metadata.deletion_timestamp.is_some(),
        failed,
        restore_wait_since,
        restore_wait_done,
        waiting: unscheduled.or(container_waiting),
    }
}

fn pvr_of(found: &PodVolumeRestore) -> Pvr {
    let status = found.status.clone().unwrap_or_default();
    Pvr {
        name: found.name_any(),
        phase: found.phase(),
        cancel_requested: found.spec.cancel == Some(true),
        node: status.node,
        message: status.message,
    }
}

/// Sees `volume`'s world. `restore` and `uid` are the DataRestore's name and UID.
pub async fn seen(
    ctx: &Context,
    restore: &str,
    uid: &str,
    status: &DataRestoreStatus,
    volume: &VolumeStatus,
    pass: &PassView,
) -> Result<Seen> {
    let pvc = volume.pvc.as_str();
    let (ns, claim) = split(pvc);
    let stand_in_name = labels::stand_in_pod_name(pvc);
    let mounting = observe::pods_mounting(&ctx.client, Some(&ctx.known), ns, &[claim]).await?;

    let mut stand_in = match pass.stand_ins.get(&(ns.to_string(), stand_in_name.clone())) {
        Some(pod) => stand_in_of(pod),
        None => StandIn::Absent,
    };
    let mut foreign_pods = Vec::new();
    for pod in &mounting {
        if observe::is_own_stand_in(pod, uid) {
            continue;
        }
        if observe::is_stand_in(pod) {
            // Stand-in names derive from the claim: another restore's holds it.
            if pod.name_any() == stand_in_name && stand_in == StandIn::Absent {
                stand_in = StandIn::Other {
                    name: pod.name_any(),
                    restore: observe::stand_in_restore(pod)
                        .unwrap_or_else(|| "another restore".into()),
                    terminating: pod.metadata.deletion_timestamp.is_some(),
                };
                continue;
            }
        }
        foreign_pods.push(pod.name_any());
    }

    let watching = matches!(
        volume.phase,
        VolumePhase::Quiescing | VolumePhase::StartingStandIn | VolumePhase::Restoring
    );
    let mut restarted = None;
    if watching && !foreign_pods.is_empty() {
        let records = status
            .consumers
            .iter()
            .filter(|c| c.pvcs.iter().any(|p| p == pvc));
        for record in records {
            if let Some(problem) = consumer::interference(&ctx.client, uid, record).await? {
                restarted = Some(problem);
                break;
            }
        }
    }

    let pvr_name = labels::pod_volume_restore_name(restore, uid, pvc);
    let mut pvr = pass.pvrs.get(&pvr_name).map(pvr_of);
    // Before an aborting volume ends on a PodVolumeRestore no agent took, that must be
    // true after the stand-in was seen gone, not only when the pass began.
    if volume.phase == VolumePhase::Aborting
        && stand_in == StandIn::Absent
        && pvr.as_ref().is_some_and(|p| !p.phase.is_terminal())
    {
        let api: Api<PodVolumeRestore> = Api::namespaced(ctx.client.clone(), &ctx.config.namespace);
        pvr = api.get_opt(&pvr_name).await?.as_ref().map(pvr_of);
    }

    let claim_state = match ctx.known.claims.deleted(ns, claim) {
        Some(true) => Claim::Deleted,
        _ => Claim::Exists,
    };
    Ok(Seen {
        claim: claim_state,
        consumers: consumers(status, pvc),
        foreign_pods,
        restarted,
        stand_in,
        pvr,
    })
}

/// Copies what the stand-in and the node agent report (node, bytes) into the record.
pub fn follow(volume: &mut VolumeStatus, pass: &PassView) {
    let (ns, _) = split(&volume.pvc);
    let name = labels::stand_in_pod_name(&volume.pvc);
    if let Some(pod) = pass.stand_ins.get(&(ns.to_string(), name.clone())) {
        volume.stand_in_pod = Some(name);
        if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
            volume.node = Some(node);
        }
    }
    let Some(found) = volume
        .pod_volume_restore
        .as_ref()
        .and_then(|name| pass.pvrs.get(name))
    else {
        return;
    };
    let status = found.status.clone().unwrap_or_default();
    if let Some(progress) = &status.progress {
        volume.bytes_done = progress.bytes_done;
        if progress.total_bytes > 0 {
            volume.total_bytes = progress.total_bytes;
        }
    }
    if let Some(node) = status.node {
        volume.node = Some(node);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ConsumerKind, ConsumerRecord};
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateWaiting, ContainerStatus,
        PodCondition, PodStatus,
    };

    fn record(state: ConsumerState) -> ConsumerRecord {
        ConsumerRecord {
            kind: ConsumerKind::Deployment,
            namespace: "shop".into(),
            name: "web".into(),
            pvcs: vec!["shop/data".into()],
            state,
            replicas: Some(2),
            original: None,
            held_by: Some("velero/first".into()),
            stopped_at: None,
            resumed_at: None,
        }
    }

    #[test]
    fn consumers_are_stopped_only_when_every_record_says_so() {
        let mut status = DataRestoreStatus {
            consumers: vec![
                record(ConsumerState::Stopped),
                record(ConsumerState::Stopping),
            ],
            ..Default::default()
        };
        assert_eq!(consumers(&status, "shop/data"), Consumers::Stopping);
        assert_eq!(consumers(&status, "shop/other"), Consumers::Stopped);
        status.consumers[1].state = ConsumerState::Stopped;
        assert_eq!(consumers(&status, "shop/data"), Consumers::Stopped);
        status.consumers[1].state = ConsumerState::HeldByOther;
        let Consumers::HeldBy(message) = consumers(&status, "shop/data") else {
            panic!("held")
        };
        assert!(
            message.contains("stopped by DataRestore velero/first"),
            "{message}"
        );
    }

    fn pod(status: PodStatus) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some("refill-data-1".into());
        pod.status = Some(status);
        pod
    }

    fn restore_wait(state: ContainerState) -> Option<Vec<ContainerStatus>> {
        Some(vec![ContainerStatus {
            name: restore_helper::CONTAINER_NAME.into(),
            state: Some(state),
            ..Default::default()
        }])
    }

    #[test]
    fn a_stand_in_says_why_it_waits_and_when_restore_wait_began() {
        let unscheduled = pod(PodStatus {
            phase: Some("Pending".into()),
            conditions: Some(vec![PodCondition {
                type_: "PodScheduled".into(),
                status: "False".into(),
                message: Some("0/3 nodes are available".into()),
                ..Default::default()
            }]),
            ..Default::default()
        });
        let StandIn::Ours { waiting, .. } = stand_in_of(&unscheduled) else {
            panic!("ours")
        };
        assert_eq!(waiting.as_deref(), Some("0/3 nodes are available"));

        let pulling = pod(PodStatus {
            init_container_statuses: restore_wait(ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some("ImagePullBackOff".into()),
                    message: Some("no such image".into()),
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        let StandIn::Ours { waiting, .. } = stand_in_of(&pulling) else {
            panic!("ours")
        };
        assert_eq!(
            waiting.as_deref(),
            Some("restore-wait: ImagePullBackOff: no such image")
        );

        let started = Timestamp::from_second(500).unwrap();
        let running = pod(PodStatus {
            init_container_statuses: restore_wait(ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        started,
                    )),
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        let StandIn::Ours {
            restore_wait_since,
            failed,
            ..
        } = stand_in_of(&running)
        else {
            panic!("ours")
        };
        assert_eq!((restore_wait_since, failed), (Some(started), None));

        let failed_pod = pod(PodStatus {
            phase: Some("Failed".into()),
            reason: Some("Evicted".into()),
            ..Default::default()
        });
        let StandIn::Ours { failed, .. } = stand_in_of(&failed_pod) else {
            panic!("ours")
        };
        assert_eq!(failed.as_deref(), Some("Evicted"));
    }
}

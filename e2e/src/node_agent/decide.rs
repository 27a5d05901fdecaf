//! What the simulated node agent decides, without touching the API or the disk:
//! which PodVolumeRestores to pick up, which pods the restore helper may release,
//! where a volume lives, what to do with leftovers after a restart, and how fast
//! to report. Every rule here mirrors Velero's node agent and restore helper.

use std::collections::BTreeSet;
use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, ContainerState, PersistentVolume, Pod};
use kube::ResourceExt;
use refill::api::{PodVolumePhase, PodVolumeRestore};

pub use crate::cluster::RESTORE_WAIT_DONE;

/// Name of the init container Velero adds to restored pods.
pub const RESTORE_WAIT: &str = crate::cluster::RESTORE_WAIT_CONTAINER;
/// Its name before Velero 1.10; pods backed up by old releases still carry it.
pub const RESTORE_WAIT_LEGACY: &str = "restic-wait";
/// Label Velero puts on a PodVolumeRestore: UID of the pod it restores into. The
/// node agent finds the PodVolumeRestores of a changed pod through it, and only so.
pub const POD_UID_LABEL: &str = "velero.io/pod-uid";
/// Where the restore-wait container mounts each volume being restored.
pub const RESTORES_DIR: &str = "/restores";

/// Uploader types a node agent restores: `kopia`, and `restic` which Velero kept a
/// legacy restore path for. Velero ignores a PodVolumeRestore with any other value,
/// an empty one included.
pub const UPLOADER_TYPES: [&str; 2] = ["kopia", "restic"];

/// The nodes an agent serves: each real node agent serves its own node; one
/// simulated agent may stand in for several, or for all.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Nodes(Option<BTreeSet<String>>);

impl Nodes {
    pub fn all() -> Self {
        Nodes(None)
    }

    pub fn only<I, S>(names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Nodes(Some(names.into_iter().map(Into::into).collect()))
    }

    pub fn from_config(nodes: Option<&[String]>) -> Self {
        match nodes {
            None => Nodes::all(),
            Some(names) => Nodes::only(names.iter().cloned()),
        }
    }

    pub fn contains(&self, node: &str) -> bool {
        !node.is_empty() && self.0.as_ref().is_none_or(|set| set.contains(node))
    }

    /// The single node served, if exactly one: lets the pod watch use a field selector.
    pub fn single(&self) -> Option<&str> {
        match &self.0 {
            Some(set) if set.len() == 1 => set.iter().next().map(String::as_str),
            _ => None,
        }
    }

    /// The pod's node, if the pod is scheduled on one of these nodes.
    pub fn node_of<'p>(&self, pod: &'p Pod) -> Option<&'p str> {
        let node = pod.spec.as_ref()?.node_name.as_deref()?;
        self.contains(node).then_some(node)
    }
}

impl fmt::Display for Nodes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            None => f.write_str("all nodes"),
            Some(set) => {
                let names: Vec<&str> = set.iter().map(String::as_str).collect();
                write!(f, "nodes {}", names.join(", "))
            }
        }
    }
}

fn is_restore_wait(name: &str) -> bool {
    name == RESTORE_WAIT || name == RESTORE_WAIT_LEGACY
}

/// The pod's restore-wait init container (or its legacy namesake), from the spec.
pub fn restore_wait_container(pod: &Pod) -> Option<&Container> {
    pod.spec
        .as_ref()?
        .init_containers
        .as_ref()?
        .iter()
        .find(|c| is_restore_wait(&c.name))
}

/// Whether the kubelet reports the restore-wait init container as running: the
/// node agent's condition for starting a restore into the pod.
pub fn restore_wait_running(pod: &Pod) -> bool {
    restore_wait_state(pod).is_some_and(|state| state.running.is_some())
}

/// Whether the kubelet reports the restore-wait init container as ended: its helper
/// saw the done file and removed the marker from the volume.
pub fn restore_wait_ended(pod: &Pod) -> bool {
    restore_wait_state(pod).is_some_and(|state| state.terminated.is_some())
}

/// The state the kubelet reports of the pod's restore-wait init container.
fn restore_wait_state(pod: &Pod) -> Option<&ContainerState> {
    let container = restore_wait_container(pod)?;
    pod.status
        .as_ref()?
        .init_container_statuses
        .as_ref()?
        .iter()
        .find(|s| s.name == container.name)?
        .state
        .as_ref()
}

/// Whether the uploader type is one a node agent restores with.
pub fn uploader_supported(uploader_type: Option<&str>) -> bool {
    uploader_type.is_some_and(|t| UPLOADER_TYPES.contains(&t.trim()))
}

/// UID the done file is named after: that of the PodVolumeRestore's first owner
/// (the Velero Restore, or whatever created the PodVolumeRestore).
pub fn restore_uid(pvr: &PodVolumeRestore) -> Option<&str> {
    pvr.metadata
        .owner_references
        .as_ref()?
        .first()
        .map(|o| o.uid.as_str())
        .filter(|uid| !uid.is_empty())
}

/// Whether a write the API server refused or never answered may pass if sent again:
/// no answer at all, too many requests (429), or a server error (5xx), such as the
/// 503 a restarted API server gives before it has installed the paths of its custom
/// resources. Velero's node agent requeues its reconcile on any of these.
pub fn worth_retrying(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(status) => status.code == 429 || status.code >= 500,
        _ => true,
    }
}

/// `namespace/name` of the target pod, from `spec.pod`.
pub fn target_pod(pvr: &PodVolumeRestore) -> Option<(&str, &str)> {
    let pod = &pvr.spec.pod;
    let namespace = pod.namespace.as_deref().filter(|n| !n.is_empty())?;
    let name = pod.name.as_deref().filter(|n| !n.is_empty())?;
    Some((namespace, name))
}

/// Whether the PodVolumeRestore carries the pod-uid label for this pod UID.
pub fn labelled_for_pod(pvr: &PodVolumeRestore, pod_uid: &str) -> bool {
    !pod_uid.is_empty() && pvr.labels().get(POD_UID_LABEL).map(String::as_str) == Some(pod_uid)
}

fn cancel_requested(pvr: &PodVolumeRestore) -> bool {
    pvr.spec.cancel == Some(true)
}

fn processed_here(pvr: &PodVolumeRestore, nodes: &Nodes) -> bool {
    pvr.status
        .as_ref()
        .and_then(|s| s.node.as_deref())
        .is_some_and(|node| nodes.contains(node))
}

/// What to do about a PodVolumeRestore seen in an event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PvrAction {
    /// Accept it and restore its data; the target pod runs on `node`.
    Start {
        node: String,
    },
    /// This agent's restore of it is under way and a cancel was requested.
    StopRunning,
    /// Cancel was requested and no restore of it runs here: mark it Canceled.
    MarkCanceled,
    Ignore(Skip),
}

/// Why a PodVolumeRestore is left alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Skip {
    Finished(PodVolumePhase),
    Running,
    UnsupportedUploader(Option<String>),
    NotNew(PodVolumePhase),
    CancelElsewhere,
    PodNotFound,
    PodNotOnOurNodes(Option<String>),
    RestoreWaitNotRunning,
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Skip::Finished(phase) => write!(f, "already {phase:?}"),
            Skip::Running => f.write_str("its restore is under way here"),
            Skip::UnsupportedUploader(t) => write!(
                f,
                "uploader type {:?} is not one a node agent restores with ({})",
                t.as_deref().unwrap_or(""),
                UPLOADER_TYPES.join(", ")
            ),
            Skip::NotNew(phase) => write!(f, "phase is {phase:?}, not New"),
            Skip::CancelElsewhere => f.write_str("cancel requested, but it is processed elsewhere"),
            Skip::PodNotFound => f.write_str("target pod not found"),
            Skip::PodNotOnOurNodes(node) => match node {
                Some(node) => write!(f, "target pod runs on {node}, not served here"),
                None => f.write_str("target pod is not scheduled yet"),
            },
            Skip::RestoreWaitNotRunning => f.write_str("restore-wait init container not running"),
        }
    }
}

/// The node agent's reconcile decision. `pod` is the target pod (`spec.pod`'s
/// namespace and name) if this agent sees it; `running` whether this agent has a
/// restore of the PodVolumeRestore under way.
///
/// A restore starts only for a PodVolumeRestore in phase New (or none) whose target
/// pod is scheduled on a served node with its restore-wait container running.
/// Velero does not compare the pod's UID with `spec.pod.uid`, so neither does this.
pub fn decide(
    pvr: &PodVolumeRestore,
    pod: Option<&Pod>,
    nodes: &Nodes,
    running: bool,
) -> PvrAction {
    let phase = pvr.phase();
    if phase.is_terminal() {
        return PvrAction::Ignore(Skip::Finished(phase));
    }
    if running {
        return if cancel_requested(pvr) {
            PvrAction::StopRunning
        } else {
            PvrAction::Ignore(Skip::Running)
        };
    }
    if !uploader_supported(pvr.spec.uploader_type.as_deref()) {
        return PvrAction::Ignore(Skip::UnsupportedUploader(pvr.spec.uploader_type.clone()));
    }
    if cancel_requested(pvr) {
        // Any agent cancels a New one; one that got further belongs to its node's agent.
        return match phase {
            PodVolumePhase::New => PvrAction::MarkCanceled,
            _ if processed_here(pvr, nodes) => PvrAction::MarkCanceled,
            _ => PvrAction::Ignore(Skip::CancelElsewhere),
        };
    }
    if phase != PodVolumePhase::New {
        return PvrAction::Ignore(Skip::NotNew(phase));
    }
    let Some(pod) = pod else {
        return PvrAction::Ignore(Skip::PodNotFound);
    };
    let Some(node) = nodes.node_of(pod) else {
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
        return PvrAction::Ignore(Skip::PodNotOnOurNodes(node));
    };
    if !restore_wait_running(pod) {
        return PvrAction::Ignore(Skip::RestoreWaitNotRunning);
    }
    PvrAction::Start {
        node: node.to_string(),
    }
}

/// Why a PodVolumeRestore left half done cannot go on after a restart.
pub const RESTART_CAUSE: &str =
    "the simulated node agent restarted and the data path it ran is gone";

/// What a starting agent does about a PodVolumeRestore that an earlier run of an
/// agent for the same node left unfinished. Velero's node agent tries to resume an
/// InProgress one, and when its data mover pod is gone (always, here) requests a
/// cancel, which ends in Canceled; an Accepted one is canceled because its exposed
/// volume is gone; a Prepared one fails because it is not ready.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StartupAction {
    /// Set `spec.cancel` and this status message; canceling then runs as usual.
    RequestCancel { message: String },
    /// Mark Canceled at once with this message.
    Cancel { message: String },
    /// Mark Failed with this message.
    Fail { message: String },
}

pub fn startup_action(pvr: &PodVolumeRestore, nodes: &Nodes) -> Option<StartupAction> {
    if !uploader_supported(pvr.spec.uploader_type.as_deref()) || !processed_here(pvr, nodes) {
        return None;
    }
    let cancel = cancel_requested(pvr);
    match pvr.phase() {
        PodVolumePhase::InProgress if !cancel => Some(StartupAction::RequestCancel {
            message: format!(
                "Resume InProgress PVR failed with error {RESTART_CAUSE}, mark it as cancel"
            ),
        }),
        PodVolumePhase::Accepted => Some(StartupAction::Cancel {
            message: format!(
                "found a PVR {}/{} with expose error: {RESTART_CAUSE}. mark it as cancel",
                pvr.namespace().unwrap_or_default(),
                pvr.name_any()
            ),
        }),
        PodVolumePhase::Prepared if !cancel => Some(StartupAction::Fail {
            message: format!("exposed PVR is not ready: {RESTART_CAUSE}"),
        }),
        _ => None,
    }
}

/// What the restore helper in a held pod waits for: a done file named `uid` in
/// each of `volumes` (pod volume names, mounted under `/restores`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HelperWait {
    pub uid: String,
    pub volumes: Vec<String>,
}

/// The restore helper's wait, if the pod runs on a served node, is not being
/// deleted, has not been released yet, and its restore-wait container runs
/// `velero-restore-helper <UID>` with at least one volume under `/restores`.
/// The UID is the container's last argument (its last command word if it has no
/// arguments); the volumes are the mounts directly under `/restores`.
pub fn helper_wait(pod: &Pod, nodes: &Nodes) -> Option<HelperWait> {
    nodes.node_of(pod)?;
    if pod.metadata.deletion_timestamp.is_some() || released(pod) || !restore_wait_running(pod) {
        return None;
    }
    let container = restore_wait_container(pod)?;
    let uid = match container.args.as_deref() {
        Some([.., last]) => last.clone(),
        _ => match container.command.as_deref() {
            Some([_, .., last]) => last.clone(),
            _ => return None,
        },
    };
    if uid.is_empty() {
        return None;
    }
    let volumes: Vec<String> = container
        .volume_mounts
        .iter()
        .flatten()
        .filter(|m| {
            m.mount_path
                .trim_end_matches('/')
                .strip_prefix(RESTORES_DIR)
                .and_then(|rest| rest.strip_prefix('/'))
                .is_some_and(|rest| !rest.is_empty() && !rest.contains('/'))
        })
        .map(|m| m.name.clone())
        .collect();
    if volumes.is_empty() {
        return None;
    }
    Some(HelperWait { uid, volumes })
}

/// Whether the pod already carries the release annotation.
pub fn released(pod: &Pod) -> bool {
    pod.annotations().get(RESTORE_WAIT_DONE).map(String::as_str) == Some("true")
}

/// The claim behind a volume of the pod.
pub fn claim_of(pod: &Pod, volume: &str) -> Result<String, String> {
    let pod_name = pod.name_any();
    let found = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
        .find(|v| v.name == volume)
        .ok_or_else(|| format!("pod {pod_name} has no volume {volume}"))?;
    let claim = found.persistent_volume_claim.as_ref().ok_or_else(|| {
        format!(
            "volume {volume} of pod {pod_name} is not a PersistentVolumeClaim; \
             the simulated node agent restores only into local and hostPath PersistentVolumes"
        )
    })?;
    Ok(claim.claim_name.clone())
}

/// The directory on this machine that holds a PersistentVolume's files.
pub fn volume_path(pv: &PersistentVolume) -> Result<PathBuf, String> {
    let spec = pv.spec.as_ref();
    spec.and_then(|s| s.local.as_ref().map(|l| l.path.clone()))
        .or_else(|| spec.and_then(|s| s.host_path.as_ref().map(|h| h.path.clone())))
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .ok_or_else(|| {
            format!(
                "persistentvolume {} is neither a local nor a hostPath volume; \
                 the simulated node agent cannot reach its files",
                pv.name_any()
            )
        })
}

/// Allows one progress report per interval.
#[derive(Clone, Debug)]
pub struct Throttle {
    interval: Duration,
    last: Option<Instant>,
}

impl Throttle {
    pub fn new(interval: Duration) -> Self {
        Throttle {
            interval,
            last: None,
        }
    }

    /// Whether a report may go out at `now`; if so, counts it as sent.
    pub fn try_acquire(&mut self, now: Instant) -> bool {
        match self.last {
            Some(last) if now < last + self.interval => false,
            _ => {
                self.last = Some(now);
                true
            }
        }
    }

    /// When the next report may go out (now, if none went out yet).
    pub fn next_allowed(&self, now: Instant) -> Instant {
        self.last
            .map_or(now, |last| (last + self.interval).max(now))
    }
}

/// How long to pause so that `bytes_done` after `elapsed` does not exceed
/// `bytes_per_second`.
pub fn pace(bytes_done: u64, elapsed: Duration, bytes_per_second: u64) -> Duration {
    if bytes_per_second == 0 {
        return Duration::ZERO;
    }
    let due = Duration::from_secs_f64(bytes_done as f64 / bytes_per_second as f64);
    due.saturating_sub(elapsed)
}

/// Size of the pieces files are copied in: small enough under a rate limit that
/// progress moves about twenty times a second.
pub fn chunk_size(bytes_per_second: Option<u64>) -> usize {
    const MAX: u64 = 1 << 20;
    const MIN: u64 = 1 << 10;
    match bytes_per_second {
        Some(bps) => (bps / 20).clamp(MIN, MAX) as usize,
        None => MAX as usize,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use refill::api::{PodVolumeRestoreSpec, PodVolumeRestoreStatus};
    use serde_json::json;

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn a_write_is_sent_again_only_when_the_server_could_not_take_it() {
        let api = |code| {
            kube::Error::Api(
                kube::core::Status::failure("refused", "Refused")
                    .with_code(code)
                    .boxed(),
            )
        };
        for code in [429, 500, 503, 504] {
            assert!(worth_retrying(&api(code)), "{code}");
        }
        for code in [400, 403, 404, 409, 422] {
            assert!(!worth_retrying(&api(code)), "{code}");
        }
        assert!(worth_retrying(
            &kube::Error::LinesCodecMaxLineLengthExceeded
        ));
    }

    /// A pod on `node` whose restore-wait runs `velero-restore-helper restore-uid`
    /// with volume `data` under /restores; `running` sets its status.
    fn held_pod(node: &str, running: bool) -> Pod {
        let state = if running {
            json!({ "running": { "startedAt": "2026-01-01T00:00:00Z" } })
        } else {
            json!({ "waiting": { "reason": "PodInitializing" } })
        };
        pod(json!({
            "metadata": { "name": "app", "namespace": "ns", "uid": "pod-uid" },
            "spec": {
                "nodeName": node,
                "initContainers": [{
                    "name": "restore-wait",
                    "image": "velero/velero-restore-helper",
                    "command": ["/velero-restore-helper"],
                    "args": ["restore-uid"],
                    "volumeMounts": [
                        { "name": "data", "mountPath": "/restores/data" },
                        { "name": "token", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount" }
                    ]
                }],
                "containers": [{ "name": "app", "image": "app" }],
                "volumes": [
                    { "name": "data", "persistentVolumeClaim": { "claimName": "data-claim" } },
                    { "name": "scratch", "emptyDir": {} }
                ]
            },
            "status": {
                "phase": "Pending",
                "initContainerStatuses": [{
                    "name": "restore-wait", "image": "velero/velero-restore-helper",
                    "imageID": "", "ready": false, "restartCount": 0, "state": state
                }]
            }
        }))
    }

    fn pvr(phase: Option<PodVolumePhase>) -> PodVolumeRestore {
        let mut pvr = PodVolumeRestore::new(
            "app-data",
            PodVolumeRestoreSpec {
                pod: serde_json::from_value(json!({
                    "kind": "Pod", "namespace": "ns", "name": "app", "uid": "pod-uid"
                }))
                .unwrap(),
                volume: "data".into(),
                backup_storage_location: "default".into(),
                repo_identifier: "repo".into(),
                uploader_type: Some("kopia".into()),
                snapshot_id: "snap".into(),
                source_namespace: "ns".into(),
                ..PodVolumeRestoreSpec::default()
            },
        );
        pvr.metadata.namespace = Some("velero".into());
        pvr.status = phase.map(|phase| PodVolumeRestoreStatus {
            phase: Some(phase),
            ..Default::default()
        });
        pvr
    }

    fn with_node(mut pvr: PodVolumeRestore, node: &str) -> PodVolumeRestore {
        pvr.status.get_or_insert_with(Default::default).node = Some(node.into());
        pvr
    }

    fn cancelled(mut pvr: PodVolumeRestore) -> PodVolumeRestore {
        pvr.spec.cancel = Some(true);
        pvr
    }

    #[test]
    fn nodes_all_serves_every_scheduled_pod_and_only_those() {
        let all = Nodes::all();
        assert_eq!(all.node_of(&held_pod("node-x", true)), Some("node-x"));
        let mut unscheduled = held_pod("node-x", true);
        unscheduled.spec.as_mut().unwrap().node_name = None;
        assert_eq!(all.node_of(&unscheduled), None);
        assert!(!all.contains(""));
        assert_eq!(all.single(), None);

        let some = Nodes::only(["node-a", "node-b"]);
        assert!(some.contains("node-b"));
        assert!(!some.contains("node-c"));
        assert_eq!(some.single(), None);
        assert_eq!(Nodes::only(["node-a"]).single(), Some("node-a"));
        assert_eq!(some.to_string(), "nodes node-a, node-b");
    }

    #[test]
    fn new_restore_starts_when_restore_wait_runs_on_a_served_node() {
        let nodes = Nodes::only(["node-a"]);
        let pod = held_pod("node-a", true);
        let expected = PvrAction::Start {
            node: "node-a".into(),
        };
        assert_eq!(decide(&pvr(None), Some(&pod), &nodes, false), expected);
        let new = pvr(Some(PodVolumePhase::New));
        assert_eq!(decide(&new, Some(&pod), &nodes, false), expected);
    }

    #[test]
    fn legacy_restic_wait_counts_as_restore_wait() {
        let mut pod = held_pod("node-a", true);
        pod.spec.as_mut().unwrap().init_containers.as_mut().unwrap()[0].name =
            RESTORE_WAIT_LEGACY.into();
        pod.status
            .as_mut()
            .unwrap()
            .init_container_statuses
            .as_mut()
            .unwrap()[0]
            .name = RESTORE_WAIT_LEGACY.into();
        assert!(restore_wait_running(&pod));
        assert!(helper_wait(&pod, &Nodes::all()).is_some());
    }

    #[test]
    fn restore_is_not_picked_up_otherwise() {
        let nodes = Nodes::only(["node-a"]);
        let new = pvr(None);
        assert_eq!(
            decide(&new, None, &nodes, false),
            PvrAction::Ignore(Skip::PodNotFound)
        );
        assert_eq!(
            decide(&new, Some(&held_pod("node-b", true)), &nodes, false),
            PvrAction::Ignore(Skip::PodNotOnOurNodes(Some("node-b".into())))
        );
        assert_eq!(
            decide(&new, Some(&held_pod("node-a", false)), &nodes, false),
            PvrAction::Ignore(Skip::RestoreWaitNotRunning)
        );
        let mut no_wait = held_pod("node-a", true);
        no_wait.spec.as_mut().unwrap().init_containers = None;
        assert_eq!(
            decide(&new, Some(&no_wait), &nodes, false),
            PvrAction::Ignore(Skip::RestoreWaitNotRunning)
        );
        let pod = held_pod("node-a", true);
        for phase in [
            PodVolumePhase::Accepted,
            PodVolumePhase::Prepared,
            PodVolumePhase::InProgress,
        ] {
            assert_eq!(
                decide(&pvr(Some(phase)), Some(&pod), &nodes, false),
                PvrAction::Ignore(Skip::NotNew(phase))
            );
        }
        for phase in [
            PodVolumePhase::Completed,
            PodVolumePhase::Failed,
            PodVolumePhase::Canceled,
        ] {
            assert_eq!(
                decide(&pvr(Some(phase)), Some(&pod), &nodes, true),
                PvrAction::Ignore(Skip::Finished(phase))
            );
        }
        for uploader in [None, Some(""), Some("velero")] {
            let mut other = pvr(None);
            other.spec.uploader_type = uploader.map(String::from);
            assert!(matches!(
                decide(&other, Some(&pod), &nodes, false),
                PvrAction::Ignore(Skip::UnsupportedUploader(_))
            ));
        }
        let mut restic = pvr(None);
        restic.spec.uploader_type = Some("restic".into());
        assert!(matches!(
            decide(&restic, Some(&pod), &nodes, false),
            PvrAction::Start { .. }
        ));
    }

    #[test]
    fn cancel_stops_our_restore_or_marks_the_restore_canceled() {
        let nodes = Nodes::only(["node-a"]);
        let pod = held_pod("node-a", true);
        let running = cancelled(with_node(pvr(Some(PodVolumePhase::InProgress)), "node-a"));
        assert_eq!(
            decide(&running, Some(&pod), &nodes, true),
            PvrAction::StopRunning
        );
        assert_eq!(
            decide(
                &pvr(Some(PodVolumePhase::InProgress)),
                Some(&pod),
                &nodes,
                true
            ),
            PvrAction::Ignore(Skip::Running)
        );
        // Nothing runs here any more (the agent restarted): canceled straight away.
        assert_eq!(
            decide(&running, Some(&pod), &nodes, false),
            PvrAction::MarkCanceled
        );
        // A New one is canceled by whichever agent sees it, pod or no pod.
        assert_eq!(
            decide(&cancelled(pvr(None)), None, &nodes, false),
            PvrAction::MarkCanceled
        );
        let elsewhere = cancelled(with_node(pvr(Some(PodVolumePhase::Prepared)), "node-b"));
        assert_eq!(
            decide(&elsewhere, Some(&pod), &nodes, false),
            PvrAction::Ignore(Skip::CancelElsewhere)
        );
    }

    #[test]
    fn restore_uid_is_the_first_owners() {
        let mut pvr = pvr(None);
        assert_eq!(restore_uid(&pvr), None);
        pvr.metadata.owner_references = Some(
            serde_json::from_value(json!([
                { "apiVersion": "velero.io/v1", "kind": "Restore", "name": "r", "uid": "first" },
                { "apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "second", "controller": true }
            ]))
            .unwrap(),
        );
        assert_eq!(restore_uid(&pvr), Some("first"));
    }

    #[test]
    fn pods_restores_are_found_by_the_pod_uid_label() {
        let mut pvr = pvr(None);
        assert!(!labelled_for_pod(&pvr, "pod-uid"));
        pvr.labels_mut()
            .insert(POD_UID_LABEL.into(), "pod-uid".into());
        assert!(labelled_for_pod(&pvr, "pod-uid"));
        assert!(!labelled_for_pod(&pvr, "other"));
        assert!(!labelled_for_pod(&pvr, ""));
        assert_eq!(target_pod(&pvr), Some(("ns", "app")));
    }

    #[test]
    fn helper_waits_for_its_uid_in_volumes_under_restores() {
        let nodes = Nodes::only(["node-a"]);
        let pod = held_pod("node-a", true);
        assert_eq!(
            helper_wait(&pod, &nodes),
            Some(HelperWait {
                uid: "restore-uid".into(),
                volumes: vec!["data".into()],
            })
        );
        assert_eq!(helper_wait(&held_pod("node-b", true), &nodes), None);
        assert_eq!(helper_wait(&held_pod("node-a", false), &nodes), None);

        let mut done = pod.clone();
        done.annotations_mut()
            .insert(RESTORE_WAIT_DONE.into(), "true".into());
        assert!(released(&done));
        assert_eq!(helper_wait(&done, &nodes), None);

        // Without arguments the UID is the command's last word.
        let mut in_command = pod.clone();
        let wait = &mut in_command
            .spec
            .as_mut()
            .unwrap()
            .init_containers
            .as_mut()
            .unwrap()[0];
        wait.args = None;
        wait.command = Some(vec!["/velero-restore-helper".into(), "from-command".into()]);
        assert_eq!(
            helper_wait(&in_command, &nodes).map(|w| w.uid),
            Some("from-command".into())
        );

        // No UID, or nothing under /restores: the helper would never finish.
        let mut no_uid = pod.clone();
        let wait = &mut no_uid
            .spec
            .as_mut()
            .unwrap()
            .init_containers
            .as_mut()
            .unwrap()[0];
        wait.args = None;
        assert_eq!(helper_wait(&no_uid, &nodes), None);
        let mut no_mounts = pod;
        no_mounts
            .spec
            .as_mut()
            .unwrap()
            .init_containers
            .as_mut()
            .unwrap()[0]
            .volume_mounts = Some(
            serde_json::from_value(json!([{ "name": "data", "mountPath": "/restores" }])).unwrap(),
        );
        assert_eq!(helper_wait(&no_mounts, &nodes), None);
    }

    #[test]
    fn volume_root_comes_from_the_claims_local_or_host_path_volume() {
        let pod = held_pod("node-a", true);
        assert_eq!(claim_of(&pod, "data"), Ok("data-claim".into()));
        assert!(
            claim_of(&pod, "scratch")
                .unwrap_err()
                .contains("not a PersistentVolumeClaim")
        );
        assert!(
            claim_of(&pod, "missing")
                .unwrap_err()
                .contains("has no volume")
        );

        let pv = |spec: serde_json::Value| -> PersistentVolume {
            serde_json::from_value(json!({ "metadata": { "name": "pv" }, "spec": spec })).unwrap()
        };
        assert_eq!(
            volume_path(&pv(json!({ "local": { "path": "/srv/a" } }))),
            Ok(PathBuf::from("/srv/a"))
        );
        assert_eq!(
            volume_path(&pv(json!({ "hostPath": { "path": "/srv/b" } }))),
            Ok(PathBuf::from("/srv/b"))
        );
        assert!(volume_path(&pv(json!({ "nfs": { "server": "s", "path": "/x" } }))).is_err());
    }

    #[test]
    fn restart_ends_what_an_earlier_run_left_on_served_nodes() {
        let nodes = Nodes::only(["node-a"]);
        let in_progress = with_node(pvr(Some(PodVolumePhase::InProgress)), "node-a");
        assert!(matches!(
            startup_action(&in_progress, &nodes),
            Some(StartupAction::RequestCancel { message }) if message.starts_with("Resume InProgress PVR failed")
        ));
        // Cancel already requested: the normal cancel handling finishes it.
        assert_eq!(startup_action(&cancelled(in_progress), &nodes), None);
        assert!(matches!(
            startup_action(&with_node(pvr(Some(PodVolumePhase::Accepted)), "node-a"), &nodes),
            Some(StartupAction::Cancel { message }) if message.contains("velero/app-data with expose error")
        ));
        assert!(matches!(
            startup_action(
                &with_node(pvr(Some(PodVolumePhase::Prepared)), "node-a"),
                &nodes
            ),
            Some(StartupAction::Fail { .. })
        ));
        // Other nodes' restores, new and finished ones are left alone.
        let elsewhere = with_node(pvr(Some(PodVolumePhase::InProgress)), "node-b");
        assert_eq!(startup_action(&elsewhere, &nodes), None);
        assert_eq!(startup_action(&pvr(None), &nodes), None);
        let done = with_node(pvr(Some(PodVolumePhase::Completed)), "node-a");
        assert_eq!(startup_action(&done, &nodes), None);
    }

    #[test]
    fn throttle_lets_one_report_through_per_interval() {
        let start = Instant::now();
        let ms = Duration::from_millis;
        let mut throttle = Throttle::new(ms(250));
        assert_eq!(throttle.next_allowed(start), start);
        assert!(throttle.try_acquire(start));
        assert!(!throttle.try_acquire(start + ms(100)));
        assert_eq!(throttle.next_allowed(start + ms(100)), start + ms(250));
        assert!(!throttle.try_acquire(start + ms(249)));
        assert!(throttle.try_acquire(start + ms(250)));
        assert!(!throttle.try_acquire(start + ms(400)));
        assert!(throttle.try_acquire(start + ms(900)));
        assert_eq!(throttle.next_allowed(start + ms(2000)), start + ms(2000));
    }

    #[test]
    fn pace_holds_the_copy_to_the_rate() {
        let s = Duration::from_secs;
        assert_eq!(pace(1000, s(0), 1000), s(1));
        assert_eq!(pace(1000, s(1), 1000), Duration::ZERO);
        assert_eq!(pace(500, s(2), 1000), Duration::ZERO);
        assert_eq!(pace(3000, s(1), 1000), s(2));
        assert_eq!(pace(3000, s(1), 0), Duration::ZERO);
        assert_eq!(chunk_size(None), 1 << 20);
        assert_eq!(chunk_size(Some(100)), 1 << 10);
        assert_eq!(chunk_size(Some(200_000)), 10_000);
        assert_eq!(chunk_size(Some(u64::MAX)), 1 << 20);
    }
}

//! A simulated Velero node agent, for the local cluster where kwok stands in for
//! the kubelets and volumes are local directories.
//!
//! It follows the contract of Velero's node agent for file-system restores:
//!
//! * It watches PodVolumeRestores in Velero's namespace and picks up one whose
//!   phase is empty or New, whose uploader type is `kopia` (or legacy `restic`),
//!   and whose target pod (`spec.pod`) is scheduled on a node it serves with the
//!   `restore-wait` (or legacy `restic-wait`) init container running. A changed
//!   pod leads it back to that pod's PodVolumeRestores through their
//!   `velero.io/pod-uid` label, as in Velero; a PodVolumeRestore without the label
//!   is only looked at when it changes itself.
//! * The restore goes Accepted (`acceptedTimestamp`, `node`) → Prepared →
//!   InProgress (`startTimestamp`) with `progress` reported as it goes →
//!   Completed, or Failed with a `message`, every step a merge patch of the
//!   status subresource. At most [`NodeAgentConfig::concurrency_per_node`] restores
//!   copy data on a node at once; the others wait in Prepared.
//! * The data come from `<snapshots_dir>/<snapshotID>/`, copied over the volume's
//!   directory (the `spec.local.path` or `spec.hostPath.path` of the
//!   PersistentVolume bound to the claim behind pod volume `spec.volume`).
//!   Snapshot fixtures are written with [`write_snapshot`]. A missing snapshot
//!   fails the restore: `data path restore failed: snapshot <id> not found in
//!   repository <repoIdentifier>`.
//! * When the data are in, it replaces `<volume>/.velero/` with a single empty
//!   done file named after the UID of the PodVolumeRestore's first owner.
//! * `spec.cancel: true` ends a restore as Canceled (through Canceling if data were
//!   being copied); a deleted PodVolumeRestore's copy stops.
//! * On start it ends what an earlier run left half done on its nodes: InProgress
//!   gets `spec.cancel` and ends Canceled, Accepted ends Canceled, Prepared Failed.
//!   Velero's finalizer on PodVolumeRestores is not simulated.
//!
//! It also plays the restore helper inside each held pod on its nodes
//! (`/velero-restore-helper <UID>` in `restore-wait`): once every volume the
//! container mounts under `/restores/` has its done file `.velero/<UID>`, it
//! removes the `.velero` folders and annotates the pod
//! `refill.dev/restore-wait-done: "true"`, which lets the simulated kubelet run it.
//! Pod events and finished restores trigger that check; nothing polls.
//!
//! With [`NodeAgentConfig::write_log`] set it logs when each write into a volume began
//! and ended (see [`writes`]), for tests that prove nothing was written while an
//! application pod of the volume ran. With [`NodeAgentConfig::stop_delay`] a copy goes
//! on writing that long after a cancel or deletion, as a real data mover may.

mod agent;
pub mod data;
pub mod decide;
mod job;
pub mod writes;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::runtime::wait::{await_condition, conditions};
use kube::{Api, Client};

pub use agent::volume_root;
pub use data::write_snapshot;
pub use writes::{VolumeWrite, read_write_log};

/// How a simulated node agent runs.
#[derive(Clone, Debug)]
pub struct NodeAgentConfig {
    /// Namespace of the PodVolumeRestores to serve (Velero's namespace).
    pub velero_namespace: String,
    /// Nodes whose pods it restores into; `None` for all nodes.
    pub nodes: Option<Vec<String>>,
    /// Holds one directory per snapshot ID with that snapshot's files.
    pub snapshots_dir: PathBuf,
    /// Least time between two progress reports of one restore.
    pub progress_interval: Duration,
    /// Copy speed limit of each restore, so that progress can be watched; `None`
    /// copies at full speed.
    pub bytes_per_second: Option<u64>,
    /// Restores copying data at once on one node; Velero's node agent runs 1 unless
    /// configured otherwise. Values below 1 count as 1.
    pub concurrency_per_node: usize,
    /// A file to append every write into a volume to (see [`writes`]), so a test can
    /// compare when data were written with when applications ran; `None` logs nothing.
    pub write_log: Option<PathBuf>,
    /// How long a copy goes on writing after it is asked to stop (cancel or deletion
    /// of its PodVolumeRestore), as a real data mover finishes the piece it is on;
    /// zero stops at the next piece.
    pub stop_delay: Duration,
}

impl NodeAgentConfig {
    /// Velero's defaults: namespace `velero`, all nodes, progress every 250ms at
    /// most, no speed limit, one data path per node.
    pub fn new(snapshots_dir: impl Into<PathBuf>) -> Self {
        NodeAgentConfig {
            velero_namespace: "velero".into(),
            nodes: None,
            snapshots_dir: snapshots_dir.into(),
            progress_interval: Duration::from_millis(250),
            bytes_per_second: None,
            concurrency_per_node: 1,
            write_log: None,
            stop_delay: Duration::ZERO,
        }
    }
}

/// Runs the simulated node agent until the future is dropped. Watch errors are
/// retried with backoff; an error comes back only if a watch ends.
pub async fn run(client: Client, cfg: NodeAgentConfig) -> Result<()> {
    agent::run(client, cfg).await
}

/// Runs the simulated node agent in a tokio task that stops when the handle is
/// dropped (restores under way stop with it).
pub fn spawn(client: Client, cfg: NodeAgentConfig) -> NodeAgentHandle {
    NodeAgentHandle {
        task: Some(tokio::spawn(run(client, cfg))),
    }
}

/// A running simulated node agent; dropping it stops the agent.
#[derive(Debug)]
pub struct NodeAgentHandle {
    task: Option<tokio::task::JoinHandle<Result<()>>>,
}

impl NodeAgentHandle {
    /// Whether the agent still runs (it stops only on a fatal error).
    pub fn is_running(&self) -> bool {
        self.task.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Stops the agent and waits until its task is gone, so that a new agent can
    /// take over cleanly (as after a node agent restart).
    pub async fn stop(mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
    }
}

impl Drop for NodeAgentHandle {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// The Velero kinds refill and the tests use.
const VELERO_CRDS: [&str; 5] = [
    "backups.velero.io",
    "schedules.velero.io",
    "backupstoragelocations.velero.io",
    "podvolumebackups.velero.io",
    "podvolumerestores.velero.io",
];

/// Waits until the API server serves Velero's own CRDs, which `e2e/cluster/up.sh`
/// installs from Velero's module into every local cluster, as a cluster with
/// Velero has them. The tests never install a copy of their own: the objects they
/// create are checked against Velero's schemas.
pub async fn require_velero_crds(client: &Client) -> Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in VELERO_CRDS {
        crds.get_opt(name).await?.with_context(|| {
            format!("CRD {name} is missing: e2e/cluster/up.sh installs Velero's CRDs")
        })?;
        let established = await_condition(crds.clone(), name, conditions::is_crd_established());
        tokio::time::timeout(Duration::from_secs(30), established)
            .await
            .with_context(|| format!("CRD {name} not established within 30s"))??;
    }
    Ok(())
}

//! The simulated node agent keeps Velero's node-agent contract in the local
//! cluster: it restores snapshot files into local volumes, reports progress,
//! writes the done file the restore helper waits for and lets the pod start;
//! it fails restores of missing snapshots, leaves pods on other nodes alone,
//! honours cancel, and ends what a previous run left half done.
//!
//! Each test serves PodVolumeRestores in its own namespace (standing in for
//! Velero's), so that agents of tests running side by side never meet.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Api, ResourceExt};
use refill::api::{PodVolumePhase, PodVolumeRestore, PodVolumeRestoreStatus};
use refill_e2e::node_agent::decide::restore_wait_running;
use refill_e2e::node_agent::{
    self, NodeAgentConfig, NodeAgentHandle, require_velero_crds, write_snapshot,
};
use refill_e2e::{
    RESTORE_WAIT_CONTAINER, RESTORE_WAIT_DONE, TestEnv, is_pod_ready, run_test, wait_for,
};
use serde_json::json;
use tokio::sync::OnceCell;

const TIMEOUT: Duration = Duration::from_secs(60);

static CRDS: OnceCell<()> = OnceCell::const_new();

/// What one test works with: its snapshot directory and a way to make volumes,
/// pods and restores in its namespace.
struct Fixture {
    env: TestEnv,
    snapshots: PathBuf,
}

impl Fixture {
    async fn new(env: &TestEnv) -> Result<Self> {
        // The agent's log, shown with a failing test's output.
        let _ = tracing_subscriber::fmt()
            .with_test_writer()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "refill_e2e=debug".into()),
            )
            .try_init();
        CRDS.get_or_try_init(|| async { require_velero_crds(&env.client).await })
            .await?;
        let snapshots = env
            .cluster
            .scratch_dir(&format!("{}/snapshots", env.namespace()))?;
        Ok(Fixture {
            env: env.clone(),
            snapshots,
        })
    }

    fn ns(&self) -> &str {
        self.env.namespace()
    }

    fn agent(&self, nodes: Option<&[&str]>) -> NodeAgentConfig {
        NodeAgentConfig {
            velero_namespace: self.ns().to_string(),
            nodes: nodes.map(|n| n.iter().map(|s| s.to_string()).collect()),
            progress_interval: Duration::from_millis(100),
            ..NodeAgentConfig::new(&self.snapshots)
        }
    }

    fn start(&self, cfg: NodeAgentConfig) -> NodeAgentHandle {
        node_agent::spawn(self.env.client.clone(), cfg)
    }

    /// A local PersistentVolume on `node` (a scratch directory) and the claim
    /// `name` bound to it; returns the directory.
    async fn local_volume(&self, name: &str, node: &str) -> Result<PathBuf> {
        let dir = self
            .env
            .cluster
            .scratch_dir(&format!("{}/volumes/{name}", self.ns()))?;
        let pv_name = format!("{}-{name}", self.ns());
        let pv: PersistentVolume = serde_json::from_value(json!({
            "metadata": { "name": pv_name, "labels": self.env.ns.labels() },
            "spec": {
                "capacity": { "storage": "1Gi" },
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "local": { "path": dir },
                "nodeAffinity": { "required": { "nodeSelectorTerms": [{ "matchExpressions": [{
                    "key": "kubernetes.io/hostname", "operator": "In", "values": [node]
                }] }] } }
            }
        }))?;
        self.env
            .api_all::<PersistentVolume>()
            .create(&PostParams::default(), &pv)
            .await
            .with_context(|| format!("creating persistentvolume {pv_name}"))?;
        self.env
            .create::<PersistentVolumeClaim>(json!({
                "metadata": { "name": name },
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": "",
                    "volumeName": pv_name,
                    "resources": { "requests": { "storage": "1Gi" } }
                }
            }))
            .await?;
        Ok(dir)
    }

    /// A ConfigMap standing in for the Velero Restore that owns PodVolumeRestores;
    /// returns its UID, which names the done files.
    async fn owner(&self, name: &str) -> Result<(String, String)> {
        let owner = self
            .env
            .create::<ConfigMap>(json!({ "metadata": { "name": name } }))
            .await?;
        Ok((name.to_string(), owner.uid().context("owner has no uid")?))
    }

    /// A pod as Velero restores it: `restore-wait` first, waiting for `restore_uid`
    /// with the claim `claim` mounted as volume `volume` under /restores. With
    /// `gated`, it waits at a scheduling gate first.
    async fn restore_pod(
        &self,
        name: &str,
        volume: &str,
        claim: &str,
        restore_uid: &str,
        gated: bool,
    ) -> Result<Pod> {
        let gates = gated.then(|| json!([{ "name": "refill.dev/e2e-hold" }]));
        self.env
            .create::<Pod>(json!({
                "metadata": { "name": name, "labels": { "app": name } },
                "spec": {
                    "schedulingGates": gates,
                    "initContainers": [{
                        "name": RESTORE_WAIT_CONTAINER,
                        "image": "velero/velero-restore-helper:v1.17.0",
                        "command": ["/velero-restore-helper"],
                        "args": [restore_uid],
                        "env": [
                            { "name": "POD_NAMESPACE", "valueFrom": { "fieldRef": { "fieldPath": "metadata.namespace" } } },
                            { "name": "POD_NAME", "valueFrom": { "fieldRef": { "fieldPath": "metadata.name" } } }
                        ],
                        "volumeMounts": [{ "name": volume, "mountPath": format!("/restores/{volume}") }]
                    }],
                    "containers": [{
                        "name": "app",
                        "image": "registry.invalid/app:1",
                        "volumeMounts": [{ "name": volume, "mountPath": "/data" }]
                    }],
                    "volumes": [{ "name": volume, "persistentVolumeClaim": { "claimName": claim } }]
                }
            }))
            .await
    }

    /// A PodVolumeRestore as Velero creates it, owned by `owner`.
    async fn pvr(
        &self,
        name: &str,
        pod: &Pod,
        volume: &str,
        snapshot: &str,
        owner: &(String, String),
    ) -> Result<PodVolumeRestore> {
        let object = self.pvr_object(name, pod, volume, snapshot, owner)?;
        self.env.create::<PodVolumeRestore>(object).await
    }

    fn pvr_object(
        &self,
        name: &str,
        pod: &Pod,
        volume: &str,
        snapshot: &str,
        owner: &(String, String),
    ) -> Result<serde_json::Value> {
        let pod_uid = pod.uid().context("pod has no uid")?;
        Ok(json!({
            "apiVersion": "velero.io/v1",
            "kind": "PodVolumeRestore",
            "metadata": {
                "name": name,
                "labels": { "velero.io/pod-uid": pod_uid },
                "ownerReferences": [{
                    "apiVersion": "v1", "kind": "ConfigMap", "name": owner.0, "uid": owner.1
                }]
            },
            "spec": {
                "pod": { "kind": "Pod", "namespace": self.ns(), "name": pod.name_any(), "uid": pod_uid },
                "volume": volume,
                "backupStorageLocation": "default",
                "repoIdentifier": format!("kopia://refill-e2e/{}", self.ns()),
                "uploaderType": "kopia",
                "snapshotID": snapshot,
                "sourceNamespace": self.ns()
            }
        }))
    }

    async fn wait_phase(&self, name: &str, phase: PodVolumePhase) -> Result<PodVolumeRestore> {
        let pvrs = self.env.api::<PodVolumeRestore>();
        wait_for(
            format!("podvolumerestore {name} {phase:?}"),
            TIMEOUT,
            || async {
                let pvr = pvrs.get(name).await?;
                let now = pvr.status.as_ref().and_then(|s| s.phase);
                ensure!(
                    now == Some(phase) || !now.is_some_and(PodVolumePhase::is_terminal),
                    "podvolumerestore {name} ended {now:?}: {:?}",
                    pvr.status
                );
                Ok((now == Some(phase)).then_some(pvr))
            },
        )
        .await
    }

    async fn wait_held(&self, name: &str) -> Result<Pod> {
        let pods = self.env.api::<Pod>();
        wait_for(
            format!("pod {name} held in restore-wait"),
            TIMEOUT,
            || async {
                let pod = pods.get(name).await?;
                Ok(restore_wait_running(&pod).then_some(pod))
            },
        )
        .await
    }

    async fn wait_released(&self, name: &str) -> Result<Pod> {
        let pods = self.env.api::<Pod>();
        wait_for(
            format!("pod {name} released and ready"),
            TIMEOUT,
            || async {
                let pod = pods.get(name).await?;
                Ok((is_pod_ready(&pod) && released(&pod)).then_some(pod))
            },
        )
        .await
    }
}

fn released(pod: &Pod) -> bool {
    pod.annotations().get(RESTORE_WAIT_DONE).map(String::as_str) == Some("true")
}

fn phase(pvr: &PodVolumeRestore) -> Option<PodVolumePhase> {
    pvr.status.as_ref().and_then(|s| s.phase)
}

/// Every status a PodVolumeRestore goes through, as seen by a watch.
struct Recorder {
    seen: Arc<Mutex<Vec<Option<PodVolumeRestoreStatus>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Recorder {
    /// Starts watching `name` and returns once the watch is established, so that
    /// no later change is missed.
    async fn start(api: Api<PodVolumeRestore>, name: &str) -> Result<Recorder> {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (ready_tx, ready) = tokio::sync::oneshot::channel();
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let task = {
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut ready_tx = Some(ready_tx);
                let mut events = std::pin::pin!(watcher(api, config));
                while let Some(event) = events.next().await {
                    match event {
                        Ok(Event::InitDone) => {
                            if let Some(tx) = ready_tx.take() {
                                let _ = tx.send(());
                            }
                        }
                        Ok(Event::Apply(pvr) | Event::InitApply(pvr)) => {
                            seen.lock().unwrap().push(pvr.status);
                        }
                        _ => {}
                    }
                }
            })
        };
        tokio::time::timeout(TIMEOUT, ready)
            .await
            .context("watch not established")??;
        Ok(Recorder { seen, task })
    }

    fn statuses(&self) -> Vec<PodVolumeRestoreStatus> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .flatten()
            .cloned()
            .collect()
    }

    /// The phases seen, each once, in order.
    fn phases(&self) -> Vec<PodVolumePhase> {
        let mut phases: Vec<PodVolumePhase> =
            self.statuses().iter().filter_map(|s| s.phase).collect();
        phases.dedup();
        phases
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| ((i * 31 + seed as usize) % 251) as u8)
        .collect()
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading {}", path.display()))
}

#[tokio::test]
async fn restores_the_snapshot_into_the_volume_and_lets_the_pod_start() -> Result<()> {
    run_test("agent-restore", |env| async move {
        let fx = Fixture::new(&env).await?;
        let root = fx.local_volume("data", "node-a").await?;
        // The volume as the restore finds it: a file the snapshot also has, one it
        // does not, and a done file of an earlier restore.
        std::fs::create_dir_all(root.join("data"))?;
        std::fs::write(
            root.join("data/a.txt"),
            b"stale content, longer than the new",
        )?;
        std::fs::write(root.join("keep.txt"), b"not in the snapshot")?;
        std::fs::create_dir_all(root.join(".velero"))?;
        std::fs::write(root.join(".velero/earlier-restore"), b"")?;

        let big = pattern(192 * 1024, 7);
        let files: [(&str, &[u8]); 4] = [
            ("data/a.txt", b"fresh a"),
            ("data/sub/big.bin", &big),
            ("top.txt", b"top level"),
            ("empty", b""),
        ];
        write_snapshot(&fx.snapshots, "snap-1", &files)?;
        let total: u64 = files.iter().map(|(_, c)| c.len() as u64).sum();

        let owner = fx.owner("restore-1").await?;
        // The pod waits at a scheduling gate, so the restore exists before the pod
        // is on a node: the agent has to come back to it when the pod changes.
        let pod = fx
            .restore_pod("app", "data", "data", &owner.1, true)
            .await?;
        let _agent = fx.start(NodeAgentConfig {
            bytes_per_second: Some(total / 2),
            ..fx.agent(Some(&["node-a"]))
        });
        let recorder = Recorder::start(env.api(), "app-data").await?;
        fx.pvr("app-data", &pod, "data", "snap-1", &owner).await?;

        env.api::<Pod>()
            .patch(
                "app",
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": { "schedulingGates": [] } })),
            )
            .await?;
        let done = fx.wait_phase("app-data", PodVolumePhase::Completed).await?;
        let pod = fx.wait_released("app").await?;
        ensure!(
            pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some("node-a"),
            "pod not on node-a"
        );

        // The files, byte for byte; what the snapshot lacks stays; no done files.
        for (path, content) in files {
            ensure!(
                read(&root.join(path))? == content,
                "{path} differs from the snapshot"
            );
        }
        ensure!(read(&root.join("keep.txt"))? == b"not in the snapshot");
        ensure!(!root.join(".velero").exists(), ".velero is still there");

        let status = done.status.context("no status")?;
        ensure!(
            status.node.as_deref() == Some("node-a"),
            "node {:?}",
            status.node
        );
        ensure!(
            status.accepted_timestamp.is_some()
                && status.start_timestamp.is_some()
                && status.completion_timestamp.is_some(),
            "timestamps missing: {status:?}"
        );
        let progress = status.progress.context("no progress")?;
        ensure!(
            progress.total_bytes == total as i64 && progress.bytes_done == total as i64,
            "final progress {progress:?}, expected {total} of {total}"
        );

        ensure!(
            recorder.phases()
                == [
                    PodVolumePhase::Accepted,
                    PodVolumePhase::Prepared,
                    PodVolumePhase::InProgress,
                    PodVolumePhase::Completed
                ],
            "phases {:?}",
            recorder.phases()
        );
        let reported: BTreeSet<i64> = recorder
            .statuses()
            .iter()
            .filter_map(|s| s.progress.as_ref())
            .inspect(|p| assert_eq!(p.total_bytes, total as i64))
            .map(|p| p.bytes_done)
            .collect();
        let partial = reported
            .iter()
            .filter(|d| **d > 0 && **d < total as i64)
            .count();
        ensure!(
            partial >= 3,
            "too few progress reports on the way: {reported:?}"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn missing_snapshot_fails_the_restore_and_the_pod_keeps_waiting() -> Result<()> {
    run_test("agent-missing", |env| async move {
        let fx = Fixture::new(&env).await?;
        let root = fx.local_volume("data", "node-b").await?;
        let owner = fx.owner("restore-1").await?;
        fx.restore_pod("app", "data", "data", &owner.1, false)
            .await?;
        let pod = fx.wait_held("app").await?;
        let _agent = fx.start(fx.agent(Some(&refill_e2e::cluster::NODES[..])));
        fx.pvr("app-data", &pod, "data", "no-such-snapshot", &owner)
            .await?;

        let failed = fx.wait_phase("app-data", PodVolumePhase::Failed).await?;
        let status = failed.status.context("no status")?;
        let expected = format!(
            "snapshot no-such-snapshot not found in repository kopia://refill-e2e/{}",
            fx.ns()
        );
        let message = status.message.unwrap_or_default();
        ensure!(message.contains(&expected), "message {message:?}");
        ensure!(status.completion_timestamp.is_some(), "no completion time");
        ensure!(!root.join(".velero").exists(), "a done file was written");

        let pod = env.api::<Pod>().get("app").await?;
        ensure!(
            restore_wait_running(&pod) && !released(&pod),
            "pod went on without its data"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn restore_into_a_pod_on_another_node_is_not_picked_up() -> Result<()> {
    run_test("agent-other-node", |env| async move {
        let fx = Fixture::new(&env).await?;
        write_snapshot(&fx.snapshots, "snap", &[("file", b"content")])?;
        let owner = fx.owner("restore-1").await?;
        let _agent = fx.start(fx.agent(Some(&["node-a", "node-b"])));

        let far_root = fx.local_volume("far", "node-c").await?;
        fx.restore_pod("far", "data", "far", &owner.1, false)
            .await?;
        let far = fx.wait_held("far").await?;
        fx.pvr("far-data", &far, "data", "snap", &owner).await?;

        // A restore the agent does serve, created later, goes all the way: by then
        // the agent has seen the other one too.
        let near_root = fx.local_volume("near", "node-a").await?;
        fx.restore_pod("near", "data", "near", &owner.1, false)
            .await?;
        let near = fx.wait_held("near").await?;
        fx.pvr("near-data", &near, "data", "snap", &owner).await?;
        fx.wait_phase("near-data", PodVolumePhase::Completed)
            .await?;
        fx.wait_released("near").await?;
        ensure!(read(&near_root.join("file"))? == b"content");

        let untouched = env.api::<PodVolumeRestore>().get("far-data").await?;
        ensure!(
            matches!(phase(&untouched), None | Some(PodVolumePhase::New)),
            "restore for node-c was touched: {:?}",
            untouched.status
        );
        ensure!(
            std::fs::read_dir(&far_root)?.next().is_none(),
            "files written into the node-c volume"
        );
        let far = env.api::<Pod>().get("far").await?;
        ensure!(
            restore_wait_running(&far) && !released(&far),
            "pod on node-c released"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn cancel_stops_a_restore() -> Result<()> {
    run_test("agent-cancel", |env| async move {
        let fx = Fixture::new(&env).await?;
        let root = fx.local_volume("data", "node-b").await?;
        let content = pattern(400 * 1024, 3);
        write_snapshot(&fx.snapshots, "slow", &[("big.bin", &content)])?;
        let owner = fx.owner("restore-1").await?;
        fx.restore_pod("app", "data", "data", &owner.1, false)
            .await?;
        let pod = fx.wait_held("app").await?;
        let _agent = fx.start(NodeAgentConfig {
            bytes_per_second: Some(40 * 1024),
            ..fx.agent(Some(&["node-b"]))
        });

        // Under way: canceled through Canceling, with the copy stopped.
        let recorder = Recorder::start(env.api(), "app-data").await?;
        fx.pvr("app-data", &pod, "data", "slow", &owner).await?;
        let pvrs = env.api::<PodVolumeRestore>();
        wait_for("some data copied", TIMEOUT, || async {
            let pvr = pvrs.get("app-data").await?;
            let done = pvr
                .status
                .and_then(|s| s.progress)
                .map_or(0, |p| p.bytes_done);
            Ok((done > 0).then_some(()))
        })
        .await?;
        let cancel = Patch::Merge(json!({ "spec": { "cancel": true } }));
        pvrs.patch("app-data", &PatchParams::default(), &cancel)
            .await?;
        let canceled = fx.wait_phase("app-data", PodVolumePhase::Canceled).await?;
        let status = canceled.status.context("no status")?;
        ensure!(status.completion_timestamp.is_some(), "no completion time");
        let progress = status.progress.context("no progress")?;
        ensure!(
            progress.bytes_done < progress.total_bytes,
            "copy finished anyway: {progress:?}"
        );
        ensure!(
            recorder.phases().ends_with(&[
                PodVolumePhase::InProgress,
                PodVolumePhase::Canceling,
                PodVolumePhase::Canceled
            ]),
            "phases {:?}",
            recorder.phases()
        );
        ensure!(!root.join(".velero").exists(), "a done file was written");
        let pod = env.api::<Pod>().get("app").await?;
        ensure!(!released(&pod), "pod released after cancel");

        // Canceled before it was picked up: Canceled without being accepted.
        let owner2 = fx.owner("restore-2").await?;
        let mut early = fx.pvr_object("early", &pod, "data", "slow", &owner2)?;
        early["spec"]["cancel"] = json!(true);
        env.create::<PodVolumeRestore>(early).await?;
        let early = fx.wait_phase("early", PodVolumePhase::Canceled).await?;
        let status = early.status.context("no status")?;
        ensure!(
            status.node.is_none() && status.accepted_timestamp.is_none(),
            "accepted before it was canceled: {status:?}"
        );
        ensure!(
            status.start_timestamp.is_some() && status.completion_timestamp.is_some(),
            "timestamps missing: {status:?}"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn restart_ends_what_an_earlier_run_left_half_done() -> Result<()> {
    run_test("agent-restart", |env| async move {
        let fx = Fixture::new(&env).await?;
        let owner = fx.owner("restore-1").await?;
        let pvrs = env.api::<PodVolumeRestore>();
        let gone: Pod = serde_json::from_value(json!({
            "metadata": { "name": "gone", "namespace": fx.ns(), "uid": "0c1d2e3f-0000-4000-8000-000000000000" }
        }))?;
        // As an earlier agent run left them.
        for (name, phase, node) in [
            ("in-progress", "InProgress", "node-c"),
            ("accepted", "Accepted", "node-c"),
            ("prepared", "Prepared", "node-c"),
            ("elsewhere", "InProgress", "node-a"),
        ] {
            fx.pvr(name, &gone, "data", "snap", &owner).await?;
            pvrs.patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": {
                    "phase": phase, "node": node,
                    "acceptedTimestamp": "2026-01-01T00:00:00Z",
                    "startTimestamp": "2026-01-01T00:00:01Z"
                } })),
            )
            .await?;
        }
        let _agent = fx.start(fx.agent(Some(&["node-c"])));

        let in_progress = fx.wait_phase("in-progress", PodVolumePhase::Canceled).await?;
        ensure!(in_progress.spec.cancel == Some(true), "cancel not requested");
        let message = in_progress.status.and_then(|s| s.message).unwrap_or_default();
        ensure!(
            message.starts_with("Resume InProgress PVR failed"),
            "message {message:?}"
        );
        let accepted = fx.wait_phase("accepted", PodVolumePhase::Canceled).await?;
        let message = accepted.status.and_then(|s| s.message).unwrap_or_default();
        ensure!(message.contains("expose error"), "message {message:?}");
        let prepared = fx.wait_phase("prepared", PodVolumePhase::Failed).await?;
        let message = prepared.status.and_then(|s| s.message).unwrap_or_default();
        ensure!(message.starts_with("exposed PVR is not ready"), "message {message:?}");

        let elsewhere = pvrs.get("elsewhere").await?;
        ensure!(
            phase(&elsewhere) == Some(PodVolumePhase::InProgress) && elsewhere.spec.cancel.is_none(),
            "another node's restore was touched: {:?}",
            elsewhere.status
        );
        Ok(())
    })
    .await
}

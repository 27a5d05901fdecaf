//! One restore of the simulated node agent, from Accepted to an end: the data path in
//! a task, stopped by a cancel or the PodVolumeRestore's deletion.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use refill::api::{PodVolumePhase, PodVolumeRestore};
use serde_json::{Value, json};
use tokio::sync::{OwnedSemaphorePermit, watch};

use super::data::{self, CopyError, Snapshot};
use super::decide::{self, Throttle};
use super::writes::{self, WriteSpan};

use super::agent::{Shared, Stop, mark_canceled, now, volume_root};

/// How long a write the API server could not take is sent again.
const STATUS_RETRY_BOUND: std::time::Duration = std::time::Duration::from_secs(60);

/// How a data path ended without restoring.
enum DataPathEnd {
    Cancelled,
    Failed(String),
}

/// Sets the flag when dropped: stops a copy whose task went away.
pub(super) struct StopOnDrop(pub(super) Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// One restore: Accepted → Prepared → InProgress → Completed, or Failed, or Canceled.
pub(super) struct Job {
    shared: Arc<Shared>,
    name: String,
    pvr: PodVolumeRestore,
    node: String,
    stop: watch::Receiver<Stop>,
    /// Whether the phase InProgress (with its start time) was written.
    started: bool,
    /// `namespace/name` of the claim restored into, once known: for the write log.
    claim: String,
}

impl Job {
    pub(super) fn new(
        shared: Arc<Shared>,
        name: String,
        pvr: PodVolumeRestore,
        node: String,
        stop: watch::Receiver<Stop>,
    ) -> Self {
        Job {
            shared,
            name,
            pvr,
            node,
            stop,
            started: false,
            claim: String::new(),
        }
    }

    /// Runs the restore; returns the target pod if its done file was written.
    pub(super) async fn run(mut self) -> Option<ObjectRef<Pod>> {
        match self.steps().await {
            Ok(release) => release,
            Err(e) => {
                tracing::warn!(pvr = %self.name, "restore abandoned: {e:#}");
                None
            }
        }
    }

    async fn steps(&mut self) -> Result<Option<ObjectRef<Pod>>> {
        if !self.accept().await? {
            return Ok(None);
        }
        let root = match self.volume_root().await {
            Ok((root, claim)) => {
                self.claim = claim;
                root
            }
            Err(e) => return self.fail(format!("error to expose PVR: {e:#}")).await,
        };
        if self.stop_requested() {
            return self.canceled().await;
        }
        self.set_status(json!({ "phase": "Prepared" })).await?;
        // Waits here while the node's data paths are all in use, as Velero does.
        let _slot: OwnedSemaphorePermit = tokio::select! {
            permit = self.shared.slots_of(&self.node).acquire_owned() => permit?,
            () = stop_wanted(self.stop.clone()) => return self.canceled().await,
        };
        self.set_status(json!({ "phase": "InProgress", "startTimestamp": now() }))
            .await?;
        self.started = true;
        tracing::info!(pvr = %self.name, "restoring snapshot {} into {}", self.pvr.spec.snapshot_id, root.display());

        match self.data_path(&root).await {
            Ok(bytes) => tracing::info!(pvr = %self.name, "copied {bytes} bytes"),
            Err(DataPathEnd::Cancelled) => return self.canceled().await,
            Err(DataPathEnd::Failed(e)) => {
                return self.fail(format!("data path restore failed: {e}")).await;
            }
        }
        // Velero writes the done file when the data path completes; failing to is
        // only a warning there too (the pod then never starts).
        match decide::restore_uid(&self.pvr) {
            Some(uid) => {
                let span = WriteSpan::begin(
                    self.shared.cfg.write_log.as_deref(),
                    format!(
                        "{}/{}",
                        self.pvr.uid().unwrap_or_default(),
                        writes::DONE_FILE
                    ),
                    &self.name,
                    &self.claim,
                    writes::DONE_FILE,
                );
                if let Err(e) = data::write_done_file(&root, uid) {
                    tracing::warn!(pvr = %self.name, "failed to write completion mark, restored pod may fail to start: {e}");
                }
                span.end();
            }
            None => tracing::warn!(
                pvr = %self.name,
                "failed to write completion mark, restored pod may fail to start: error finding restore UID (no ownerReferences)"
            ),
        }
        self.set_status(json!({ "phase": "Completed", "completionTimestamp": now() }))
            .await?;
        tracing::info!(pvr = %self.name, "restore completed");
        Ok(decide::target_pod(&self.pvr).map(|(ns, pod)| ObjectRef::new(pod).within(ns)))
    }

    /// Writes a phase, sent again while the API server cannot take it.
    async fn set_status(&self, status: Value) -> Result<()> {
        self.again_while_unavailable("writing its phase", || {
            self.shared.set_status(&self.name, status.clone())
        })
        .await
        .with_context(|| format!("updating the status of podvolumerestore {}", self.name))?;
        Ok(())
    }

    /// Sends a write again for a while when the API server did not answer it (it went
    /// away mid-request, maybe after applying it) or could not take it yet (a restarted
    /// one answers 503 until it serves custom resources again), as Velero's node agent
    /// requeues its reconcile: each write here is a merge patch, the same again is the
    /// same write. Giving up at once left a PodVolumeRestore InProgress with nothing to
    /// end it.
    async fn again_while_unavailable<T, F, Fut>(&self, what: &str, mut write: F) -> kube::Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = kube::Result<T>>,
    {
        let started = Instant::now();
        loop {
            match write().await {
                Err(e) if decide::worth_retrying(&e) && started.elapsed() < STATUS_RETRY_BOUND => {
                    tracing::warn!(pvr = %self.name, "{what}, again shortly: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                }
                outcome => return outcome,
            }
        }
    }

    /// Moves the PodVolumeRestore from New to Accepted, unless something else
    /// changed it first (the patch carries the resourceVersion it was decided on).
    async fn accept(&mut self) -> Result<bool> {
        let mut current = self.pvr.clone();
        for _ in 0..5 {
            let patch = json!({
                "metadata": { "resourceVersion": current.resource_version() },
                "status": { "phase": "Accepted", "acceptedTimestamp": now(), "node": self.node },
            });
            let (params, patch) = (PatchParams::default(), Patch::Merge(&patch));
            let accepting = self.again_while_unavailable("accepting", || {
                self.shared.pvrs.patch(&self.name, &params, &patch)
            });
            match accepting.await {
                Ok(accepted) => {
                    self.pvr = accepted;
                    tracing::info!(pvr = %self.name, node = %self.node, "accepted");
                    return Ok(true);
                }
                Err(kube::Error::Api(e)) if e.code == 404 => return Ok(false),
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    let fresh = self
                        .again_while_unavailable("reading it again", || {
                            self.shared.pvrs.get_opt(&self.name)
                        })
                        .await?;
                    let Some(fresh) = fresh else {
                        return Ok(false);
                    };
                    if fresh.phase() != PodVolumePhase::New || fresh.spec.cancel == Some(true) {
                        return Ok(false);
                    }
                    current = fresh;
                }
                Err(e) => return Err(e).context("accepting"),
            }
        }
        Ok(false)
    }

    /// The volume's directory and `namespace/name` of its claim.
    async fn volume_root(&self) -> Result<(PathBuf, String)> {
        let (namespace, pod_name) =
            decide::target_pod(&self.pvr).context("spec.pod names no pod")?;
        let pod = Api::<Pod>::namespaced(self.shared.client.clone(), namespace)
            .get(pod_name)
            .await
            .with_context(|| format!("getting pod {namespace}/{pod_name}"))?;
        let root = volume_root(&self.shared.client, &pod, &self.pvr.spec.volume).await?;
        let claim = decide::claim_of(&pod, &self.pvr.spec.volume).map_err(anyhow::Error::msg)?;
        Ok((root, format!("{namespace}/{claim}")))
    }

    fn stop_requested(&self) -> bool {
        *self.stop.borrow() != Stop::No
    }

    async fn fail(&self, message: String) -> Result<Option<ObjectRef<Pod>>> {
        tracing::warn!(pvr = %self.name, "restore failed: {message}");
        self.set_status(json!({
            "phase": "Failed",
            "message": message,
            "completionTimestamp": now(),
        }))
        .await?;
        Ok(None)
    }

    async fn canceled(&self) -> Result<Option<ObjectRef<Pod>>> {
        if *self.stop.borrow() == Stop::Deleted {
            tracing::info!(pvr = %self.name, "deleted; restore stopped");
            return Ok(None);
        }
        mark_canceled(&self.shared, &self.name, self.started, None)
            .await
            .context("marking it Canceled")?;
        tracing::info!(pvr = %self.name, "restore canceled");
        Ok(None)
    }

    async fn report(&self, total: u64, done: u64) {
        let progress = json!({ "progress": { "totalBytes": total, "bytesDone": done } });
        if let Err(e) = self.shared.set_status(&self.name, progress).await {
            tracing::warn!(pvr = %self.name, "reporting progress: {e}");
        }
    }

    /// Copies the snapshot into the volume, reporting progress at most once per
    /// `progress_interval` (and once at the end), and stopping on cancel.
    async fn data_path(&mut self, root: &Path) -> Result<u64, DataPathEnd> {
        let spec = &self.pvr.spec;
        let not_found = || {
            DataPathEnd::Failed(format!(
                "snapshot {} not found in repository {}",
                spec.snapshot_id, spec.repo_identifier
            ))
        };
        let dir = data::snapshot_dir(&self.shared.cfg.snapshots_dir, &spec.snapshot_id)
            .ok_or_else(not_found)?;
        let snapshot = match tokio::task::spawn_blocking(move || Snapshot::scan(&dir)).await {
            Ok(Ok(snapshot)) => snapshot,
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => return Err(not_found()),
            Ok(Err(e)) => {
                return Err(DataPathEnd::Failed(format!(
                    "reading snapshot {}: {e}",
                    spec.snapshot_id
                )));
            }
            Err(e) => return Err(DataPathEnd::Failed(format!("reading the snapshot: {e}"))),
        };
        let total = snapshot.total_bytes;
        let mut throttle = Throttle::new(self.shared.cfg.progress_interval);
        throttle.try_acquire(Instant::now());
        self.report(total, 0).await;

        let stop_copy = Arc::new(AtomicBool::new(false));
        let _stop_copy_if_dropped = StopOnDrop(stop_copy.clone());
        let (progress_tx, mut progress) = watch::channel(0u64);
        let mut copy = {
            let stop_copy = stop_copy.clone();
            let root = root.to_path_buf();
            let rate = self.shared.cfg.bytes_per_second;
            let (log, id, pvr, claim) = (
                self.shared.cfg.write_log.clone(),
                format!("{}/{}", self.pvr.uid().unwrap_or_default(), writes::COPY),
                self.name.clone(),
                self.claim.clone(),
            );
            tokio::task::spawn_blocking(move || {
                // Begun and ended on the copying thread: it outlives an aborted agent.
                let span = WriteSpan::begin(log.as_deref(), id, &pvr, &claim, writes::COPY);
                let result = data::restore(
                    &snapshot,
                    &root,
                    rate,
                    |done| {
                        progress_tx.send_replace(done);
                    },
                    || stop_copy.load(Ordering::Relaxed),
                );
                span.end();
                result
            })
        };
        let mut pending: Option<u64> = None;
        let mut stopping = false;
        let result = loop {
            let next_report = tokio::time::Instant::from_std(throttle.next_allowed(Instant::now()));
            tokio::select! {
                result = &mut copy => break result,
                Ok(()) = progress.changed() => {
                    let done = *progress.borrow_and_update();
                    if throttle.try_acquire(Instant::now()) {
                        pending = None;
                        self.report(total, done).await;
                    } else {
                        pending = Some(done);
                    }
                }
                () = tokio::time::sleep_until(next_report), if pending.is_some() => {
                    if let Some(done) = pending.take() {
                        throttle.try_acquire(Instant::now());
                        self.report(total, done).await;
                    }
                }
                Ok(()) = self.stop.changed(), if !stopping => {
                    let why = *self.stop.borrow_and_update();
                    if why != Stop::No {
                        stopping = true;
                        let linger = self.shared.cfg.stop_delay;
                        if linger.is_zero() {
                            stop_copy.store(true, Ordering::Relaxed);
                        } else {
                            let stop_copy = stop_copy.clone();
                            tokio::spawn(async move {
                                tokio::time::sleep(linger).await;
                                stop_copy.store(true, Ordering::Relaxed);
                            });
                        }
                        if why == Stop::Cancel
                            && let Err(e) = self.set_status(json!({ "phase": "Canceling" })).await
                        {
                            tracing::warn!(pvr = %self.name, "{e:#}");
                        }
                    }
                }
            }
        };
        match result {
            Ok(Ok(done)) => {
                self.report(total, done).await;
                Ok(done)
            }
            Ok(Err(CopyError::Cancelled)) => Err(DataPathEnd::Cancelled),
            Ok(Err(CopyError::Io(e))) => Err(DataPathEnd::Failed(format!("{e:#}"))),
            Err(e) => Err(DataPathEnd::Failed(format!("copy task: {e}"))),
        }
    }
}

/// Resolves once a stop is requested; never if the agent dropped the sender.
pub(super) async fn stop_wanted(mut stop: watch::Receiver<Stop>) {
    if stop.wait_for(|s| *s != Stop::No).await.is_err() {
        std::future::pending::<()>().await;
    }
}

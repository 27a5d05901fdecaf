//! The API side of the simulated node agent: one watch of PodVolumeRestores, one of
//! pods, and a task per restore or restore-helper check. Decisions come from
//! [`super::decide`], file work from [`super::data`].

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store, reflector};
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Api, Client, ResourceExt};
use refill::api::PodVolumeRestore;
use serde_json::{Value, json};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

use super::NodeAgentConfig;
use super::data::{self};
use super::decide::{self, HelperWait, Nodes, PvrAction, RESTORE_WAIT_DONE, Skip, StartupAction};
use super::job::Job;
use super::writes::{self, WriteSpan};

/// Why a restore under way should stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stop {
    No,
    Cancel,
    Deleted,
}

pub(super) struct Shared {
    pub(super) client: Client,
    pub(super) pvrs: Api<PodVolumeRestore>,
    pub(super) cfg: NodeAgentConfig,
    nodes: Nodes,
    /// Data paths per node, as the node agent's concurrency setting allows.
    slots: std::sync::Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl Shared {
    pub(super) fn slots_of(&self, node: &str) -> Arc<Semaphore> {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots
            .entry(node.to_string())
            .or_insert_with(|| Arc::new(Semaphore::new(self.cfg.concurrency_per_node.max(1))))
            .clone()
    }

    /// Velero's PodVolumeRestore CRD has no status subresource: like Velero's node
    /// agent, this writes the status with the object itself.
    pub(super) async fn set_status(
        &self,
        name: &str,
        status: Value,
    ) -> kube::Result<PodVolumeRestore> {
        self.pvrs
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await
    }
}

/// What a finished task tells the event loop.
enum Outcome {
    /// Work on the PodVolumeRestore with this UID is over; `release` is the target
    /// pod if a done file was written for it.
    Pvr {
        uid: String,
        release: Option<ObjectRef<Pod>>,
    },
    /// A restore-helper check of this pod is over.
    Helper(ObjectRef<Pod>),
    /// Nothing to follow up.
    None,
}

struct Agent {
    shared: Arc<Shared>,
    pvr_store: Store<PodVolumeRestore>,
    pod_store: Store<Pod>,
    /// PodVolumeRestores (by UID) this agent is working on, and how to stop that work.
    busy: HashMap<String, watch::Sender<Stop>>,
    /// Pods with a restore-helper check under way; `true` if another one is due.
    checking: HashMap<ObjectRef<Pod>, bool>,
    tasks: JoinSet<Outcome>,
    started: bool,
}

pub(super) async fn run(client: Client, cfg: NodeAgentConfig) -> Result<()> {
    let nodes = Nodes::from_config(cfg.nodes.as_deref());
    let namespace = cfg.velero_namespace.clone();
    let pvrs: Api<PodVolumeRestore> = Api::namespaced(client.clone(), &namespace);
    let pods: Api<Pod> = Api::all(client.clone());
    // A real node agent watches only its own node's pods.
    let pod_watch = match nodes.single() {
        Some(node) => watcher::Config::default().fields(&format!("spec.nodeName={node}")),
        None => watcher::Config::default(),
    };
    let (pvr_store, pvr_writer) = reflector::store();
    let (pod_store, pod_writer) = reflector::store();
    let pvr_events = reflector(
        pvr_writer,
        watcher(pvrs.clone(), watcher::Config::default()).default_backoff(),
    );
    let pod_events = reflector(pod_writer, watcher(pods, pod_watch).default_backoff());
    let mut pvr_events = std::pin::pin!(pvr_events);
    let mut pod_events = std::pin::pin!(pod_events);

    tracing::info!(
        "simulated node agent for {nodes}: restoring PodVolumeRestores in namespace {namespace} \
         from snapshot directories under {}",
        cfg.snapshots_dir.display()
    );
    let mut agent = Agent {
        shared: Arc::new(Shared {
            client,
            pvrs,
            cfg,
            nodes,
            slots: Default::default(),
        }),
        pvr_store,
        pod_store,
        busy: HashMap::new(),
        checking: HashMap::new(),
        tasks: JoinSet::new(),
        started: false,
    };
    loop {
        tokio::select! {
            event = pvr_events.next() => match event {
                Some(Ok(event)) => agent.on_pvr_event(event),
                Some(Err(e)) => tracing::warn!("watching podvolumerestores in {namespace}: {e}"),
                None => bail!("the podvolumerestore watch ended"),
            },
            event = pod_events.next() => match event {
                Some(Ok(event)) => agent.on_pod_event(event),
                Some(Err(e)) => tracing::warn!("watching pods: {e}"),
                None => bail!("the pod watch ended"),
            },
            Some(finished) = agent.tasks.join_next(), if !agent.tasks.is_empty() => {
                match finished {
                    Ok(outcome) => agent.on_outcome(outcome),
                    Err(e) => tracing::error!("a node agent task ended abnormally: {e}"),
                }
            }
        }
    }
}

impl Agent {
    fn on_pvr_event(&mut self, event: Event<PodVolumeRestore>) {
        match event {
            Event::Apply(pvr) => self.reconcile(&pvr),
            Event::Delete(pvr) => {
                if let Some(stop) = pvr.uid().and_then(|uid| self.busy.get(&uid)) {
                    stop.send_replace(Stop::Deleted);
                }
            }
            Event::InitDone => {
                if !self.started {
                    self.started = true;
                    self.end_leftovers();
                }
                for pvr in self.pvr_store.state() {
                    self.reconcile(&pvr);
                }
            }
            Event::Init | Event::InitApply(_) => {}
        }
    }

    fn on_pod_event(&mut self, event: Event<Pod>) {
        match event {
            Event::Apply(pod) => {
                // Velero finds the restores of a changed pod by their pod-uid label.
                if let Some(uid) = pod.uid() {
                    for pvr in self.pvr_store.state() {
                        if decide::labelled_for_pod(&pvr, &uid) {
                            self.reconcile(&pvr);
                        }
                    }
                }
                self.check_helper(&pod);
            }
            Event::InitDone => {
                for pvr in self.pvr_store.state() {
                    self.reconcile(&pvr);
                }
                for pod in self.pod_store.state() {
                    self.check_helper(&pod);
                }
            }
            Event::Delete(_) | Event::Init | Event::InitApply(_) => {}
        }
    }

    fn on_outcome(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Pvr { uid, release } => {
                self.busy.remove(&uid);
                if let Some(pod) = release.and_then(|key| self.pod_store.get(&key)) {
                    self.check_helper(&pod);
                }
            }
            Outcome::Helper(key) => {
                if self.checking.remove(&key) == Some(true)
                    && let Some(pod) = self.pod_store.get(&key)
                {
                    self.check_helper(&pod);
                }
            }
            Outcome::None => {}
        }
    }

    /// At the first complete list: ends what an earlier run left half done.
    fn end_leftovers(&mut self) {
        for pvr in self.pvr_store.state() {
            let Some(action) = decide::startup_action(&pvr, &self.shared.nodes) else {
                continue;
            };
            let shared = self.shared.clone();
            let name = pvr.name_any();
            let had_start = pvr
                .status
                .as_ref()
                .is_some_and(|s| s.start_timestamp.is_some());
            tracing::warn!(pvr = %name, "left unfinished by an earlier run: {action:?}");
            self.tasks.spawn(async move {
                if let Err(e) = end_leftover(&shared, &name, action, had_start).await {
                    tracing::warn!(pvr = %name, "ending a leftover restore: {e:#}");
                }
                Outcome::None
            });
        }
    }

    fn reconcile(&mut self, pvr: &PodVolumeRestore) {
        let Some(uid) = pvr.uid() else {
            return;
        };
        let name = pvr.name_any();
        let pod = decide::target_pod(pvr)
            .and_then(|(ns, pod)| self.pod_store.get(&ObjectRef::new(pod).within(ns)));
        let running = self.busy.contains_key(&uid);
        match decide::decide(pvr, pod.as_deref(), &self.shared.nodes, running) {
            PvrAction::Start { node } => {
                tracing::info!(pvr = %name, %node, "picking up the restore of volume {}", pvr.spec.volume);
                let (stop, stopped) = watch::channel(Stop::No);
                self.busy.insert(uid.clone(), stop);
                let job = Job::new(self.shared.clone(), name, pvr.clone(), node, stopped);
                self.tasks.spawn(async move {
                    let release = job.run().await;
                    Outcome::Pvr { uid, release }
                });
            }
            PvrAction::StopRunning => {
                if let Some(stop) = self.busy.get(&uid) {
                    stop.send_if_modified(|s| {
                        let first = *s == Stop::No;
                        if first {
                            *s = Stop::Cancel;
                        }
                        first
                    });
                }
            }
            PvrAction::MarkCanceled => {
                let (stop, _) = watch::channel(Stop::Cancel);
                self.busy.insert(uid.clone(), stop);
                let shared = self.shared.clone();
                let had_start = pvr
                    .status
                    .as_ref()
                    .is_some_and(|s| s.start_timestamp.is_some());
                self.tasks.spawn(async move {
                    match mark_canceled(&shared, &name, had_start, None).await {
                        Ok(()) => tracing::info!(pvr = %name, "canceled as requested"),
                        Err(e) => tracing::warn!(pvr = %name, "marking it Canceled: {e}"),
                    }
                    Outcome::Pvr { uid, release: None }
                });
            }
            PvrAction::Ignore(Skip::Finished(_) | Skip::Running) => {}
            PvrAction::Ignore(skip) => tracing::debug!(pvr = %name, "not picked up: {skip}"),
        }
    }

    /// Runs the restore helper's check for a held pod, at most one at a time per pod.
    fn check_helper(&mut self, pod: &Pod) {
        let Some(wait) = decide::helper_wait(pod, &self.shared.nodes) else {
            return;
        };
        let key = ObjectRef::from_obj(pod);
        if let Some(again) = self.checking.get_mut(&key) {
            *again = true;
            return;
        }
        self.checking.insert(key.clone(), false);
        let shared = self.shared.clone();
        let pod = pod.clone();
        self.tasks.spawn(async move {
            if let Err(e) = restore_helper(&shared, &pod, &wait).await {
                tracing::warn!(pod = %key, "restore helper: {e:#}");
            }
            Outcome::Helper(key)
        });
    }
}

pub(super) fn now() -> Value {
    serde_json::to_value(Time(k8s_openapi::jiff::Timestamp::now())).unwrap_or(Value::Null)
}

pub(super) async fn mark_canceled(
    shared: &Shared,
    name: &str,
    had_start: bool,
    message: Option<&str>,
) -> kube::Result<()> {
    let mut status = json!({ "phase": "Canceled", "completionTimestamp": now() });
    if !had_start {
        status["startTimestamp"] = now();
    }
    if let Some(message) = message {
        status["message"] = json!(message);
    }
    shared.set_status(name, status).await.map(drop)
}

async fn end_leftover(
    shared: &Shared,
    name: &str,
    action: StartupAction,
    had_start: bool,
) -> Result<()> {
    match action {
        StartupAction::RequestCancel { message } => {
            shared
                .set_status(name, json!({ "message": message }))
                .await?;
            shared
                .pvrs
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "spec": { "cancel": true } })),
                )
                .await?;
        }
        StartupAction::Cancel { message } => {
            mark_canceled(shared, name, had_start, Some(&message)).await?;
        }
        StartupAction::Fail { message } => {
            let status =
                json!({ "phase": "Failed", "message": message, "completionTimestamp": now() });
            shared.set_status(name, status).await?;
        }
    }
    Ok(())
}

/// The directory holding the files of the pod's volume: pod volume → claim →
/// bound PersistentVolume → its local or hostPath path.
pub async fn volume_root(client: &Client, pod: &Pod, volume: &str) -> Result<PathBuf> {
    let namespace = pod.namespace().unwrap_or_default();
    let claim_name = decide::claim_of(pod, volume).map_err(anyhow::Error::msg)?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &namespace);
    let claim = claims
        .get(&claim_name)
        .await
        .with_context(|| format!("getting persistentvolumeclaim {namespace}/{claim_name}"))?;
    let Some(pv_name) = claim
        .spec
        .and_then(|s| s.volume_name)
        .filter(|n| !n.is_empty())
    else {
        bail!("persistentvolumeclaim {namespace}/{claim_name} is not bound to a volume");
    };
    let pv = Api::<PersistentVolume>::all(client.clone())
        .get(&pv_name)
        .await
        .with_context(|| format!("getting persistentvolume {pv_name}"))?;
    let path = decide::volume_path(&pv).map_err(anyhow::Error::msg)?;
    if !path.is_dir() {
        bail!(
            "directory {} of persistentvolume {pv_name} does not exist on this machine",
            path.display()
        );
    }
    Ok(path)
}

/// One pass of Velero's restore helper for a held pod: once every volume it
/// waits on has its done file, removes the `.velero` folders and lets the pod go
/// on (by the annotation the simulated kubelet waits for).
async fn restore_helper(shared: &Shared, pod: &Pod, wait: &HelperWait) -> Result<()> {
    let key = ObjectRef::from_obj(pod);
    let mut roots = Vec::new();
    for volume in &wait.volumes {
        match volume_root(&shared.client, pod, volume).await {
            Ok(root) => roots.push(root),
            Err(e) => {
                tracing::debug!(pod = %key, "restore helper cannot look into volume {volume}: {e:#}");
                return Ok(());
            }
        }
    }
    let missing: Vec<&str> = wait
        .volumes
        .iter()
        .zip(&roots)
        .filter(|(_, root)| !data::done_file_exists(root, &wait.uid))
        .map(|(volume, _)| volume.as_str())
        .collect();
    if !missing.is_empty() {
        tracing::debug!(pod = %key, "restore helper waits for done files {} in volumes {missing:?}", wait.uid);
        return Ok(());
    }
    let namespace = pod.namespace().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(shared.client.clone(), &namespace);
    // A kubelet kills the init containers of a pod being deleted: the helper of a
    // stand-in removed meanwhile does not go on to touch the volume.
    match pods.get_opt(&pod.name_any()).await {
        Ok(Some(current))
            if current.metadata.deletion_timestamp.is_none() && current.uid() == pod.uid() => {}
        Ok(_) => {
            tracing::debug!(pod = %key, "deleted before its restore helper finished; the .velero folders stay");
            return Ok(());
        }
        Err(e) => return Err(e).context("reading the pod"),
    }
    for (volume, root) in wait.volumes.iter().zip(&roots) {
        let claim = decide::claim_of(pod, volume).unwrap_or_default();
        let span = WriteSpan::begin(
            shared.cfg.write_log.as_deref(),
            format!(
                "{}/{volume}/{}",
                pod.uid().unwrap_or_default(),
                writes::HELPER_CLEANUP
            ),
            "",
            &format!("{namespace}/{claim}"),
            writes::HELPER_CLEANUP,
        );
        data::remove_done_dir(root)
            .with_context(|| format!("removing {}", root.join(data::DONE_DIR).display()))?;
        span.end();
    }
    let patch = json!({ "metadata": { "annotations": { RESTORE_WAIT_DONE: "true" } } });
    let mut delay = Duration::from_millis(100);
    for attempt in 1.. {
        match pods
            .patch(
                &pod.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => break,
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
            Err(e) if attempt < 5 => {
                tracing::warn!(pod = %key, "releasing the pod (attempt {attempt}): {e}");
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
            Err(e) => return Err(e).context("annotating the pod"),
        }
    }
    tracing::info!(
        pod = %key,
        "restore helper found done files {} in all {} volumes, removed the .velero folders and let the pod start",
        wait.uid,
        roots.len()
    );
    Ok(())
}

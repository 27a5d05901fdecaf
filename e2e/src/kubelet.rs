//! The part of a kubelet that kwok does not play: running refill's `refill copy`
//! containers on the simulated nodes: the copier pods, and the set-aside and tidy
//! containers of a stand-in that has them. The container's own `refill copy` command
//! line runs in this process, by refill's library, with each mount path replaced by
//! the directory of the claim mounted there (an emptyDir by a directory of its own);
//! its end is written into the pod's status as a kubelet would (the container's exit
//! code and termination message, and the phase when the pod ends). Independent of the
//! simulated node agent, as a kubelet is of Velero's: a test without a node agent
//! still has its copier pods run.
//!
//! kwok shows a stand-in's init containers before `restore-wait` as exited as soon as
//! it holds the pod in `restore-wait`, without a report; the set-aside's report is
//! written in here once it ran. refill makes the PodVolumeRestore only once it read
//! that report, so the simulated node agent still writes only after the set-aside, as
//! on a real node.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Parser;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::core::v1::{Container, ContainerStatus};
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use refill::controller::build::copier::{CONTAINER, SET_ASIDE_CONTAINER, TIDY_CONTAINER};
use refill::copy::CopyArgs;
use serde_json::json;

use futures::StreamExt;
use kube::Client;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use std::collections::HashSet;

use crate::node_agent::volume_root;

/// Runs refill's copier pods, and its stand-ins' set-aside and tidy, on the simulated
/// nodes while it lives.
pub struct KubeletHandle {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for KubeletHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts running the copier pods of `namespace` (every namespace: None).
pub fn spawn(client: Client, namespace: Option<&str>) -> KubeletHandle {
    let pods: Api<Pod> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let selector = format!(
        "{} in ({}, {})",
        refill::labels::ROLE,
        refill::labels::ROLE_COPIER,
        refill::labels::ROLE_STAND_IN
    );
    let task = tokio::spawn(async move {
        let events = watcher(pods, watcher::Config::default().labels(&selector)).default_backoff();
        let mut events = std::pin::pin!(events);
        let mut started = HashSet::new();
        while let Some(event) = events.next().await {
            let pod = match event {
                Ok(Event::Apply(pod) | Event::InitApply(pod)) => pod,
                Ok(_) => continue,
                Err(e) => {
                    tracing::warn!("watching copier pods: {e}");
                    continue;
                }
            };
            let Some(uid) = pod.uid() else { continue };
            let Some(step) = due(&pod) else { continue };
            if !started.insert((uid, step)) {
                continue;
            }
            let client = client.clone();
            tokio::spawn(async move {
                if let Err(e) = run(&client, &pod, step).await {
                    tracing::warn!(pod = %pod.name_any(), "{step:?}: {e:#}");
                }
            });
        }
    });
    KubeletHandle { task }
}

#[derive(Parser)]
struct Command {
    #[command(flatten)]
    args: CopyArgs,
}

/// A `refill copy` container of refill's pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Step {
    /// The copier pod's only container; the pod ends with it.
    Copier,
    /// A stand-in's first init container; `restore-wait` runs on after it.
    SetAside,
    /// A stand-in's main container, once `restore-wait` exited; the pod ends with it.
    Tidy,
}

impl Step {
    fn container(self) -> &'static str {
        match self {
            Step::Copier => CONTAINER,
            Step::SetAside => SET_ASIDE_CONTAINER,
            Step::Tidy => TIDY_CONTAINER,
        }
    }
}

/// What of `pod` to run now, on a simulated node (the real nodes' kubelets run their
/// own) and not being deleted: a copier once running, a stand-in's set-aside once
/// kwok shows it exited without a report, its tidy once it runs.
fn due(pod: &Pod) -> Option<Step> {
    let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
    let simulated = node.is_some_and(|n| !n.starts_with("real-"));
    if !simulated || pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let status = pod.status.as_ref()?;
    let phase = status.phase.as_deref();
    let state = |statuses: &Option<Vec<ContainerStatus>>, name: &str| {
        statuses
            .iter()
            .flatten()
            .find(|c| c.name == name)
            .and_then(|c| c.state.clone())
    };
    let spec = pod.spec.as_ref()?;
    if spec.containers.iter().any(|c| c.name == CONTAINER) {
        return (phase == Some("Running")).then_some(Step::Copier);
    }
    let set_aside = state(&status.init_container_statuses, SET_ASIDE_CONTAINER);
    if set_aside
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .is_some_and(|t| t.message.is_none())
        && phase == Some("Pending")
    {
        return Some(Step::SetAside);
    }
    let tidy = state(&status.container_statuses, TIDY_CONTAINER);
    (phase == Some("Running") && tidy.is_some_and(|s| s.running.is_some())).then_some(Step::Tidy)
}

/// Runs `step`'s command against the claims' directories, and writes its end.
async fn run(client: &Client, pod: &Pod, step: Step) -> Result<()> {
    let spec = pod.spec.as_ref().context("no spec")?;
    let container: &Container = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == step.container())
        .with_context(|| format!("no {} container", step.container()))?;
    let mut words = container.args.clone().unwrap_or_default();
    for mount in container.volume_mounts.iter().flatten() {
        let empty_dir = spec
            .volumes
            .iter()
            .flatten()
            .any(|v| v.name == mount.name && v.empty_dir.is_some());
        let dir = match empty_dir {
            true => pod_dir(pod, &mount.name)?,
            false => volume_root(client, pod, &mount.name).await?,
        };
        for word in &mut words {
            if let Some(rest) = word.strip_prefix(&mount.mount_path)
                && (rest.is_empty() || rest.starts_with('/'))
            {
                *word = format!("{}{rest}", dir.display());
            }
        }
    }
    let report = tempfile_path(pod);
    if let Some(at) = words.iter().position(|w| w == "--termination-log") {
        words[at + 1] = report.display().to_string();
    }
    let args = Command::try_parse_from(&words)
        .with_context(|| format!("the {step:?} command line {words:?}"))?
        .args;
    let code = tokio::task::spawn_blocking(move || refill::copy::run(&args)).await?;
    let message = std::fs::read_to_string(&report).unwrap_or_default();
    let _ = std::fs::remove_file(&report);
    match step {
        Step::SetAside => set_aside_ended(client, pod, code, &message).await,
        _ => end(client, pod, step.container(), code, &message).await,
    }
}

/// A pod's own directory for its emptyDir `volume`, kept until the test process ends.
fn pod_dir(pod: &Pod, volume: &str) -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "refill-emptydir-{}-{volume}",
        pod.uid().unwrap_or_default()
    ));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// Writes the set-aside's end into the status kwok wrote: `restore-wait` left running
/// as kwok shows it, or the pod failed with it (restartPolicy Never).
async fn set_aside_ended(client: &Client, pod: &Pod, code: i32, message: &str) -> Result<()> {
    let mut statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.init_container_statuses.clone())
        .unwrap_or_default();
    for status in statuses
        .iter_mut()
        .filter(|c| c.name == SET_ASIDE_CONTAINER)
    {
        if let Some(ended) = status.state.as_mut().and_then(|s| s.terminated.as_mut()) {
            ended.message = Some(message.to_string());
            ended.exit_code = code;
        }
    }
    let patch = match code {
        0 => json!({ "status": { "initContainerStatuses": statuses } }),
        _ => json!({ "status": { "phase": "Failed", "initContainerStatuses": statuses } }),
    };
    patch_status(client, pod, patch).await
}

fn tempfile_path(pod: &Pod) -> PathBuf {
    std::env::temp_dir().join(format!(
        "refill-copier-{}.log",
        pod.uid()
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string())
    ))
}

/// Writes the pod's end, with its container `container`'s, as its kubelet would.
async fn end(client: &Client, pod: &Pod, container: &str, code: i32, message: &str) -> Result<()> {
    let (phase, reason) = if code == 0 {
        ("Succeeded", "Completed")
    } else {
        ("Failed", "Error")
    };
    let at = serde_json::to_value(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::now(),
    ))?;
    let status = json!({ "status": {
        "phase": phase,
        "conditions": [
            { "type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": at },
            { "type": "ContainersReady", "status": "False", "reason": "PodCompleted", "lastTransitionTime": at },
        ],
        "containerStatuses": [{
            "name": container,
            "image": pod.spec.as_ref().and_then(|s| s.containers[0].image.clone()),
            "imageID": "",
            "ready": false,
            "restartCount": 0,
            "started": false,
            "state": { "terminated": {
                "exitCode": code, "reason": reason, "message": message,
                "startedAt": at, "finishedAt": at,
            }},
        }],
    }});
    patch_status(client, pod, status).await
}

async fn patch_status(client: &Client, pod: &Pod, patch: serde_json::Value) -> Result<()> {
    Api::<Pod>::namespaced(client.clone(), &pod.namespace().unwrap_or_default())
        .patch_status(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await?;
    Ok(())
}

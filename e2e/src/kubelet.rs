//! The part of a kubelet that kwok does not play: running refill's copier pods on the
//! simulated nodes. The pod's own `refill copy` command line runs in this process,
//! by refill's library, with each mount path replaced by the directory of the claim
//! mounted there; its end is written into the pod's status as a kubelet would (phase,
//! the container's exit code and termination message). Independent of the simulated
//! node agent, as a kubelet is of Velero's: a test without a node agent still has
//! its copier pods run.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Parser;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use refill::controller::build::copier::CONTAINER;
use refill::copy::CopyArgs;
use serde_json::json;

use futures::StreamExt;
use kube::Client;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use std::collections::HashSet;

use crate::node_agent::volume_root;

/// Runs refill's copier pods on the simulated nodes while it lives.
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
    let selector = format!("{}={}", refill::labels::ROLE, refill::labels::ROLE_COPIER);
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
            if !is_due(&pod) || !started.insert(uid) {
                continue;
            }
            let client = client.clone();
            tokio::spawn(async move {
                if let Err(e) = run(&client, &pod).await {
                    tracing::warn!(pod = %pod.name_any(), "copier pod: {e:#}");
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

/// A copier pod to run now: on a simulated node (the real nodes' kubelets run their
/// own), running, and not being deleted.
fn is_due(pod: &Pod) -> bool {
    let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
    let simulated = node.is_some_and(|n| !n.starts_with("real-"));
    let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
    simulated && running && pod.metadata.deletion_timestamp.is_none()
}

/// Runs the copier pod's command against the claims' directories, and ends the pod.
async fn run(client: &Client, pod: &Pod) -> Result<()> {
    let container = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == CONTAINER))
        .context("no copy container")?;
    let mut words = container.args.clone().unwrap_or_default();
    for mount in container.volume_mounts.iter().flatten() {
        let dir = volume_root(client, pod, &mount.name).await?;
        for word in words.iter_mut().filter(|w| **w == mount.mount_path) {
            *word = dir.display().to_string();
        }
    }
    let report = tempfile_path(pod);
    if let Some(at) = words.iter().position(|w| w == "--termination-log") {
        words[at + 1] = report.display().to_string();
    }
    let args = Command::try_parse_from(&words)
        .with_context(|| format!("the copier's command line {words:?}"))?
        .args;
    let code = tokio::task::spawn_blocking(move || refill::copy::run(&args)).await?;
    let message = std::fs::read_to_string(&report).unwrap_or_default();
    let _ = std::fs::remove_file(&report);
    end(client, pod, code, &message).await
}

fn tempfile_path(pod: &Pod) -> PathBuf {
    std::env::temp_dir().join(format!(
        "refill-copier-{}.log",
        pod.uid()
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string())
    ))
}

/// Writes the pod's end as its kubelet would.
async fn end(client: &Client, pod: &Pod, code: i32, message: &str) -> Result<()> {
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
            "name": CONTAINER,
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
    Api::<Pod>::namespaced(client.clone(), &pod.namespace().unwrap_or_default())
        .patch_status(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(status),
        )
        .await?;
    Ok(())
}

//! The simulated kubelet's run of refill's copier pods on kwok nodes: the pod's own
//! `refill copy` command line, run in this process by refill's library with each
//! mount path replaced by the directory of the claim mounted there, and its end
//! written into the pod's status as a kubelet would (phase, the container's exit
//! code and termination message).

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Parser;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use refill::controller::copier::CONTAINER;
use refill::copy::CopyArgs;
use serde_json::json;

use super::agent::{Shared, now, volume_root};
use super::writes::WriteSpan;

/// What a write of the copier is logged as (see [`super::writes`]).
pub const COPIER: &str = "copier";

#[derive(Parser)]
struct Command {
    #[command(flatten)]
    args: CopyArgs,
}

/// A copier pod this agent should run now: refill's, on a node it serves, running,
/// and not yet ended.
pub fn is_due(pod: &Pod, served: impl Fn(&str) -> bool) -> bool {
    let is_copier = pod
        .labels()
        .get(refill::labels::ROLE)
        .is_some_and(|r| r == refill::labels::ROLE_COPIER);
    let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
    let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
    is_copier && node.is_some_and(served) && running && pod.metadata.deletion_timestamp.is_none()
}

/// Runs the copier pod's command against the claims' directories, and ends the pod.
pub async fn run(shared: &Shared, pod: &Pod) -> Result<()> {
    let container = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == CONTAINER))
        .context("no copy container")?;
    let mut words = container.args.clone().unwrap_or_default();
    for mount in container.volume_mounts.iter().flatten() {
        let dir = volume_root(&shared.client, pod, &mount.name).await?;
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
    let claim = target_claim(pod)?;
    let (log, id) = (
        shared.cfg.write_log.clone(),
        format!("{}/{COPIER}", pod.uid().unwrap_or_default()),
    );
    let name = pod.name_any();
    let code = tokio::task::spawn_blocking(move || {
        let span = WriteSpan::begin(log.as_deref(), id, &name, &claim, COPIER);
        let code = refill::copy::run(&args);
        span.end();
        code
    })
    .await?;
    let message = std::fs::read_to_string(&report).unwrap_or_default();
    let _ = std::fs::remove_file(&report);
    end(shared, pod, code, &message).await
}

fn tempfile_path(pod: &Pod) -> PathBuf {
    std::env::temp_dir().join(format!(
        "refill-copier-{}.log",
        pod.uid()
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string())
    ))
}

/// `namespace/name` of the claim the copier writes (mounted at its `--to`).
fn target_claim(pod: &Pod) -> Result<String> {
    let spec = pod.spec.as_ref().context("no spec")?;
    let to = spec.containers[0]
        .args
        .iter()
        .flatten()
        .skip_while(|w| *w != "--to")
        .nth(1);
    let mount = spec.containers[0]
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| Some(&m.mount_path) == to)
        .context("no mount at --to")?;
    let claim = spec
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == mount.name)
        .and_then(|v| v.persistent_volume_claim.as_ref())
        .map(|c| c.claim_name.clone());
    match claim {
        Some(claim) => Ok(format!("{}/{claim}", pod.namespace().unwrap_or_default())),
        None => bail!("--to is not a claim"),
    }
}

/// Writes the pod's end as its kubelet would.
async fn end(shared: &Shared, pod: &Pod, code: i32, message: &str) -> Result<()> {
    let (phase, reason) = if code == 0 {
        ("Succeeded", "Completed")
    } else {
        ("Failed", "Error")
    };
    let at = now();
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
    Api::<Pod>::namespaced(shared.client.clone(), &pod.namespace().unwrap_or_default())
        .patch_status(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(status),
        )
        .await?;
    Ok(())
}

//! The floor: what any in-place restore of these workloads must at least do, done by
//! the bench itself (kube-rs, in process) as fast as the API server allows: scale
//! every Deployment to 0 at once, see its pods gone, scale it back to its replicas,
//! see them Ready. No data moves, nothing is recorded, no stand-in starts; what refill
//! takes beyond this is its bookkeeping, its stand-ins and the node agent's handshake.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use super::scene::{APP, Scene, Side};
use super::watch::{Watched, all_gone, all_ready};

/// How long the pods may take to go, and to come back Ready.
const WAIT: Duration = Duration::from_secs(600);

#[derive(Debug, Clone, serde::Serialize)]
pub struct FloorRun {
    /// Deployments scaled down and back.
    pub deployments: usize,
    /// From the first scale-down to every pod Ready again.
    pub wall: Duration,
    /// Seconds after the start: every scale-down answered, every pod gone, every
    /// scale-up answered.
    pub scaled_down: f64,
    pub pods_gone: f64,
    pub scaled_up: f64,
    /// Scale writes made, one each way per Deployment.
    pub writes: usize,
}

/// The floor over the Deployments of `side`, which must be up with all their pods
/// Ready; it leaves them so.
pub async fn run(admin: &Client, scene: &Scene, side: Side) -> Result<FloorRun> {
    let namespaces = scene.namespaces(side);
    let pods = Watched::<Pod>::start(
        Api::all(admin.clone()),
        watcher::Config::default().labels(&scene.run_selector()),
    );
    // What to scale back to, read before the clock starts, as a controller's cache
    // would hold it.
    let deployments = Api::<Deployment>::all(admin.clone())
        .list(&ListParams::default().fields(&format!("metadata.name={APP}")))
        .await?;
    let mut original: BTreeMap<String, i32> = deployments
        .items
        .iter()
        .filter_map(|d| {
            let replicas = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
            Some((d.namespace()?, replicas))
        })
        .collect();
    original.retain(|ns, _| namespaces.contains(ns));
    ensure!(
        original.len() == namespaces.len(),
        "found {} of the {} Deployments",
        original.len(),
        namespaces.len()
    );
    pods.until("the Deployments to be Ready before the floor", WAIT, |p| {
        all_ready(p, &original)
    })
    .await?;

    let started = Instant::now();
    let since = |t: Instant| t.duration_since(started).as_secs_f64();
    let mut writes = scale_all(admin, original.keys().map(|ns| (ns, 0))).await?;
    let scaled_down = since(Instant::now());
    pods.until("the pods to be gone", WAIT, |p| all_gone(p, &namespaces))
        .await?;
    let pods_gone = since(Instant::now());
    writes += scale_all(admin, original.iter().map(|(ns, &r)| (ns, r))).await?;
    let scaled_up = since(Instant::now());
    pods.until("the pods to be Ready again", WAIT, |p| {
        all_ready(p, &original)
    })
    .await?;
    let wall = started.elapsed();
    eprintln!(
        "[bench] floor: {} Deployments down and up in {:.2}s (pods gone at {pods_gone:.2}s)",
        namespaces.len(),
        wall.as_secs_f64()
    );
    Ok(FloorRun {
        deployments: original.len(),
        wall,
        scaled_down,
        pods_gone,
        scaled_up,
        writes,
    })
}

/// Sets each namespace's Deployment to its replicas through the scale subresource,
/// many at once; returns how many writes were made.
async fn scale_all<'a>(
    admin: &Client,
    targets: impl Iterator<Item = (&'a String, i32)>,
) -> Result<usize> {
    let targets: Vec<(&String, i32)> = targets.collect();
    super::each(targets.iter(), |&(ns, replicas)| async move {
        Api::<Deployment>::namespaced(admin.clone(), ns)
            .patch_scale(
                APP,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": replicas}})),
            )
            .await
            .with_context(|| format!("scaling {ns}/{APP} to {replicas}"))?;
        Ok(())
    })
    .await?;
    Ok(targets.len())
}

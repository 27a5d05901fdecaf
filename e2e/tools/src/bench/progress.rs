//! The progress check: one restore whose data path takes seconds, to count how often
//! refill writes status while the node agent reports progress several times a second.

use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context as _, Result, bail};
use kube::Client;
use refill::api::Phase;

use super::scene::{self, Scene, Side};
use super::{
    Options, RESTORE_TIMEOUT, agent_config, restore_spec, run_done, start_idle_controller,
};
use refill_e2e::Cluster;
use refill_e2e::audit::{self, Requests};
use refill_e2e::fixture;
use refill_e2e::node_agent;

/// What the progress check measured: how often refill wrote status while the node
/// agent reported progress several times a second.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ProgressOutcome {
    pub pvcs: usize,
    /// The node agent's copy speed per restore and its least time between reports.
    pub bytes_per_second: u64,
    pub agent_report_interval: Duration,
    pub wall: Duration,
    pub requests: Requests,
    /// While every volume was copying: from a second after the last PodVolumeRestore
    /// was created to the first one's completion (or the first stand-in's deletion, if
    /// sooner). Only progress changes then.
    pub steady_seconds: f64,
    pub steady: Requests,
}

/// A restore of `progress_pvcs` PVCs whose data path takes several seconds, so that
/// the throttling of progress writes shows.
pub(super) async fn progress_check(
    cluster: &Cluster,
    admin: &Client,
    options: &Options,
) -> Result<ProgressOutcome> {
    let n = options.progress_pvcs;
    let (scene, _) = Scene::create(cluster, admin, n, 0, options.replicas, None).await?;
    let result = async {
        let bytes: u64 = scene::good_files("x")
            .iter()
            .map(|(_, d)| d.len() as u64)
            .sum();
        // About eight seconds of copying per volume.
        let bytes_per_second = bytes / 8;
        let mut agent_cfg = agent_config(&scene);
        agent_cfg.bytes_per_second = Some(bytes_per_second);
        let agent_report_interval = agent_cfg.progress_interval;
        let _agent = node_agent::spawn(admin.clone(), agent_cfg);
        // The kubelets' part kwok does not play: copier pods (a restore empties each
        // volume first).
        let _kubelet = refill_e2e::kubelet::spawn(admin.clone(), None);
        let cursor = audit::Cursor::now(cluster)?;
        let (ctl, credential) = start_idle_controller(cluster, options, &scene, "bench").await?;
        let spec = restore_spec(&scene, Some(n as u32), options.extra_files);
        let from = SystemTime::now();
        let t0 = Instant::now();
        fixture::data_restore(admin, &scene.velero_ns, "bench", spec).await?;
        let dr = fixture::wait_finished(admin, &scene.velero_ns, "bench", RESTORE_TIMEOUT).await?;
        let wall = t0.elapsed();
        run_done(cluster, &credential).await?;
        let to = SystemTime::now();
        ctl.stop().await;
        let phase = dr.status.as_ref().map(|s| s.phase).unwrap_or_default();
        if phase != Phase::Completed {
            bail!("the restore ended {phase:?}");
        }
        scene.verify(admin, Side::Refill).await?;
        let events = cursor.read_since(cluster)?;
        let mine = audit::filter(&events, &credential);
        let requests = audit::count(&mine, from, to);
        let last_created = audit::times(&mine, "create", "podvolumerestores")
            .last()
            .copied()
            .context("no PodVolumeRestore was created")?;
        let steady_from = last_created + Duration::from_secs(1);
        // A volume's data being in is a phase change, written at once; the volume
        // ends (its stand-in deleted) only after restore-wait finished, a moment later.
        let first_deleted = audit::times(&mine, "delete", "pods")
            .into_iter()
            .find(|t| *t > steady_from)
            .unwrap_or(to);
        let steady_to = first_completion(admin, &scene.velero_ns)
            .await?
            .map_or(first_deleted, |t| t.min(first_deleted));
        let steady = audit::count(&mine, steady_from, steady_to);
        let steady_seconds = steady_to
            .duration_since(steady_from)
            .unwrap_or_default()
            .as_secs_f64();
        eprintln!(
            "[bench] progress check: {n} PVCs in {:.1}s, {} status writes",
            wall.as_secs_f64(),
            requests.status_write_count()
        );
        Ok(ProgressOutcome {
            pvcs: n,
            bytes_per_second,
            agent_report_interval,
            wall,
            requests,
            steady_seconds,
            steady,
        })
    }
    .await;
    if options.keep {
        eprintln!("[bench] keeping run {}", scene.run_id);
    } else if let Err(e) = scene.cleanup(admin, false).await {
        eprintln!("[bench] cleanup of run {} failed: {e:#}", scene.run_id);
    }
    result
}

/// When the first PodVolumeRestore of `namespace` completed. The API keeps whole
/// seconds, so this is up to a second early: the window it ends is, if anything, short.
async fn first_completion(admin: &Client, namespace: &str) -> Result<Option<SystemTime>> {
    let restores: kube::Api<refill::api::PodVolumeRestore> =
        kube::Api::namespaced(admin.clone(), namespace);
    let listed = restores.list(&Default::default()).await?;
    Ok(listed
        .items
        .iter()
        .filter_map(|r| r.status.as_ref()?.completion_timestamp.as_ref())
        .map(|t| SystemTime::from(t.0))
        .min())
}

//! The benchmark: for each size N, N namespaces with one Deployment whose claim is in
//! a Velero backup, restored by one DataRestore with `parallel: N` (refill, its
//! controller a separate process); the same Deployments scaled down and back by the
//! bench itself (the floor, see [`floor`]); restored again by a DataRestore with
//! `parallel` left at refill's default; and a second set of N namespaces restored by
//! `e2e/bench/kubectl-restore.sh`, one claim at a time. The simulated node agent
//! finishes every PodVolumeRestore at once, so what is measured is the orchestration
//! around the data path.
//!
//! Every way must leave the same end state, which is checked: every file as the
//! backup holds it, byte for byte; replicas as before and Ready; no helper pod left.

pub mod alone;
pub mod baseline;
pub mod cli;
pub mod cpu;
pub mod floor;
pub mod progress;
pub mod real_data;
pub mod report;
pub mod restore_floor;
pub mod results;
pub mod scene;
pub mod watch;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context as _, Result, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::DeleteParams;
use kube::runtime::wait::{await_condition, conditions};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use refill::api::{DataRestore, DataRestoreSpec, ExtraFiles, Phase};

use self::floor::FloorRun;
use self::progress::progress_check;
use self::scene::{Scene, Side};
use self::watch::{Watched, all_ready};
use refill_e2e::Cluster;
use refill_e2e::audit::{self, Requests};
use refill_e2e::controller_process::{ControllerKind, ControllerProcess};
use refill_e2e::fixture;
use refill_e2e::node_agent::{self, NodeAgentConfig};

/// How long any one restore (either way) may take before the run is given up.
pub const RESTORE_TIMEOUT: Duration = Duration::from_secs(1800);

/// [`RESTORE_TIMEOUT`], or more for restores so large that a second per ten volumes
/// would not do (10,000 claims take most of an hour on two cores).
pub fn restore_timeout(n: usize) -> Duration {
    RESTORE_TIMEOUT.max(Duration::from_millis(600 * n as u64))
}

/// How many requests the bench's own work (setup, the floor, cleanup) has in flight.
pub const IN_FLIGHT: usize = 64;

/// Runs `work` for every item, [`IN_FLIGHT`] at once; fails with the first failure.
pub async fn each<I, F, Fut>(items: I, work: F) -> Result<()>
where
    I: IntoIterator,
    F: FnMut(I::Item) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    futures::stream::iter(items)
        .map(work)
        .buffer_unordered(IN_FLIGHT)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Numbers of PVCs, each its own run.
    pub sizes: Vec<usize>,
    /// The kubectl baseline runs in full up to this N; above it only its first
    /// `baseline_sample` claims run, and the whole is extrapolated from them.
    pub baseline_max: usize,
    /// Claims the baseline restores where N is above `baseline_max`.
    pub baseline_sample: usize,
    /// Replicas of each Deployment.
    pub replicas: i32,
    /// How the controller runs: the `refill` binary, or this binary in its place.
    pub controller: ControllerKind,
    /// Where the markdown report goes (it is also printed).
    pub results: Option<PathBuf>,
    /// Where the measurements go as JSON.
    pub json: Option<PathBuf>,
    /// The command line to show in the report.
    pub command: String,
    /// Leave namespaces, volumes and files in place afterwards.
    pub keep: bool,
    /// PVCs of the progress check (0: none), a restore whose data path is slowed
    /// down so that the node agent reports progress several times a second.
    pub progress_pvcs: usize,
    /// How long each size waits for the machine to be quiet before it starts.
    pub quiet_wait: Duration,
    /// The restores' `spec.extraFiles`.
    pub extra_files: ExtraFiles,
    /// Measure refill alone, `parallel: N` ([`alone`]).
    pub refill_only: bool,
    /// With `refill_only`: the run whose namespaces, PVs and claims were made by a
    /// setup that stopped; its setup goes on from there.
    pub resume_run: Option<String>,
}

/// One restore by refill: one DataRestore over the run's refill namespaces.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RefillRun {
    /// The DataRestore's `spec.parallel`; none: refill's default.
    pub parallel: Option<u32>,
    /// Request (DataRestore created) to phase Completed.
    pub wall: Duration,
    /// Request to phase Completed and every pod Ready again, as the floor ends.
    pub ready_wall: Duration,
    pub phase: String,
    /// The controller's requests from the DataRestore's creation until it was idle again.
    pub requests: Requests,
    /// Requests the controller made from its start until the DataRestore was created.
    pub startup_requests: Requests,
    /// Peak resident set of the controller process (VmHWM), bytes.
    pub controller_peak_rss: Option<u64>,
    /// The largest DataRestore status seen in the run, serialized, bytes.
    pub largest_status_bytes: usize,
    /// CPU seconds the controller spent from the DataRestore's creation until idle.
    pub controller_cpu: Option<f64>,
    /// CPU seconds the whole machine spent over the same time (cluster, node agent,
    /// controller, benchmark).
    pub machine_cpu: f64,
    pub controller_binary: String,
    /// Moments of the run, seconds after the DataRestore was created.
    pub timeline: Vec<(String, f64)>,
    /// The machine's 1-minute load average as the restore began.
    pub load_average: f64,
}

/// Everything measured at one N.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Outcome {
    pub n: usize,
    pub replicas: i32,
    /// The machine's 1-minute load average as this N's run began, before its setup
    /// (other work running beside the benchmark shows here).
    pub load_average: f64,
    /// Setting up the namespaces, volumes, Deployments and the backup.
    pub setup: Duration,
    /// With `parallel: N`.
    pub refill: RefillRun,
    /// With `parallel` left at refill's default.
    pub refill_default: RefillRun,
    pub floor: FloorRun,
    pub restore_floor: restore_floor::RestoreFloorRun,
    pub baseline: Option<baseline::BaselineRun>,
    /// The 1-minute load average as each way began, after its quiet wait, in the order
    /// they ran: refill, floor, restore floor, refill at its default, kubectl script.
    pub loads: Vec<(&'static str, f64)>,
    /// Whose end state was checked and found right.
    pub end_state_checked: Vec<String>,
}

impl Outcome {
    pub fn baseline_wall(&self) -> Option<(Duration, bool)> {
        self.baseline
            .as_ref()
            .map(|b| (b.total(self.n), b.extrapolated(self.n)))
    }

    /// refill (`parallel: N`, until every pod is Ready) over the floor.
    pub fn over_floor(&self) -> f64 {
        self.refill.ready_wall.as_secs_f64() / self.floor.wall.as_secs_f64().max(1e-9)
    }

    /// refill (`parallel: N`, until every pod is Ready) over the restore floor.
    pub fn over_restore_floor(&self) -> f64 {
        self.refill.ready_wall.as_secs_f64() / self.restore_floor.wall.as_secs_f64().max(1e-9)
    }
}

/// Runs every size in turn, writes the report, and returns the measurements. Fails if
/// any way leaves a wrong end state.
pub async fn run(cluster: &Cluster, options: &Options) -> Result<Vec<Outcome>> {
    let admin = cluster.admin_client().await?;
    if options.refill_only {
        let outcomes = alone::run(cluster, &admin, options).await?;
        let rows: Vec<alone::Row> = outcomes
            .iter()
            .map(|o| alone::Row::of(o, &options.command))
            .collect();
        match &options.results {
            Some(path) => {
                let store = alone::store_path(path);
                let rows = alone::merge(alone::load(&store)?, rows);
                std::fs::write(&store, serde_json::to_string_pretty(&rows)? + "\n")
                    .with_context(|| format!("writing {}", store.display()))?;
                let text = alone::markdown(&rows);
                println!("{text}");
                results::write(path, &text, &[alone::HEADING])?;
                eprintln!(
                    "[bench] wrote its section of {} and its rows to {}",
                    path.display(),
                    store.display()
                );
            }
            None => println!("{}", alone::markdown(&rows)),
        }
        if let Some(path) = &options.json {
            let all = serde_json::json!({ "alone": outcomes });
            std::fs::write(path, serde_json::to_string_pretty(&all)?)
                .with_context(|| format!("writing {}", path.display()))?;
        }
        return Ok(Vec::new());
    }
    let mut outcomes = Vec::new();
    for (i, &n) in options.sizes.iter().enumerate() {
        eprintln!("[bench] N = {n}");
        let last = i + 1 == options.sizes.len();
        let outcome = run_size(cluster, &admin, options, n, !last)
            .await
            .with_context(|| format!("benchmark at N = {n}"))?;
        eprintln!("{}", report::one_line(&outcome));
        outcomes.push(outcome);
    }
    let progress = if options.progress_pvcs > 0 {
        eprintln!("[bench] progress check with {} PVCs", options.progress_pvcs);
        Some(
            progress_check(cluster, &admin, options)
                .await
                .context("progress check")?,
        )
    } else {
        None
    };
    let text = report::markdown(options, &outcomes, progress.as_ref());
    println!("{text}");
    if let Some(path) = &options.results {
        results::write(path, &text, report::HEADINGS)?;
        eprintln!("[bench] wrote its sections of {}", path.display());
    }
    if let Some(path) = &options.json {
        let all = serde_json::json!({"runs": outcomes, "progress": progress});
        std::fs::write(path, serde_json::to_string_pretty(&all)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(outcomes)
}

async fn run_size(
    cluster: &Cluster,
    admin: &Client,
    options: &Options,
    n: usize,
    more_to_come: bool,
) -> Result<Outcome> {
    let load = settled_load(options.quiet_wait).await;
    eprintln!("[bench] load average (1 min) {load:.2}");
    let baseline_claims = if n <= options.baseline_max {
        n
    } else {
        options.baseline_sample.min(n)
    };
    let (scene, setup) =
        Scene::create(cluster, admin, n, baseline_claims, options.replicas, None).await?;
    let result = measure(cluster, admin, options, &scene, load, setup).await;
    if options.keep {
        eprintln!(
            "[bench] keeping everything of run {} (velero namespace {})",
            scene.run_id, scene.velero_ns
        );
    } else if let Err(e) = scene.cleanup(admin, more_to_come).await {
        eprintln!("[bench] cleanup of run {} failed: {e:#}", scene.run_id);
    }
    result
}

async fn measure(
    cluster: &Cluster,
    admin: &Client,
    options: &Options,
    scene: &Scene,
    load_average: f64,
    setup: Duration,
) -> Result<Outcome> {
    // The node agent restores at once and in parallel: the data path is not measured.
    let _agent = node_agent::spawn(admin.clone(), agent_config(scene));
    // The kubelets' part kwok does not play: copier pods (a restore empties each
    // volume first).
    let _kubelet = refill_e2e::kubelet::spawn(admin.clone(), None);
    let mut end_state_checked = Vec::new();
    let mut loads = Vec::new();

    // --- refill, every volume at once ---------------------------------------------
    loads.push(quiet_before("refill", options.quiet_wait).await);
    let refill = refill_at_once(cluster, admin, options, scene).await?;
    end_state_checked.push("refill".to_string());

    // --- the floor, on the same Deployments -----------------------------------------
    loads.push(quiet_before("floor", options.quiet_wait).await);
    let floor = floor::run(admin, scene, Side::Refill)
        .await
        .context("the floor")?;
    end_state_checked.push("floor".to_string());
    let exact = options.extra_files == ExtraFiles::Delete;
    loads.push(quiet_before("restore floor", options.quiet_wait).await);
    let restore_floor = restore_floor::run(admin, scene, Side::Refill, exact)
        .await
        .context("the restore floor")?;
    scene
        .verify(admin, Side::Refill)
        .await
        .context("the restore floor's end state")?;
    end_state_checked.push("restore floor".to_string());

    // --- refill again, parallel at its default ----------------------------------------
    forget_restore(admin, scene, "bench").await?;
    scene.damage(Side::Refill)?;
    loads.push(quiet_before("refill, default parallel", options.quiet_wait).await);
    let refill_default = refill_run(cluster, admin, options, scene, "bench-default", None).await?;
    scene
        .verify(admin, Side::Refill)
        .await
        .context("the end state of refill at its default parallelism")?;
    eprintln!("[bench] end state of refill at its default parallelism checked");
    end_state_checked.push("refill, default parallel".to_string());

    // --- the kubectl script -----------------------------------------------------
    let baseline = if scene.baseline_claims > 0 {
        loads.push(quiet_before("kubectl script", options.quiet_wait).await);
        let run = baseline::run(cluster, scene).await?;
        scene
            .verify(admin, Side::Baseline)
            .await
            .context("the kubectl script's end state")?;
        eprintln!(
            "[bench] kubectl script: {} claims in {:.2}s; end state checked",
            run.claims,
            run.wall.as_secs_f64()
        );
        end_state_checked.push("kubectl script".to_string());
        Some(run)
    } else {
        None
    };
    Ok(Outcome {
        n: scene.n,
        replicas: options.replicas,
        load_average,
        setup,
        refill,
        refill_default,
        floor,
        restore_floor,
        baseline,
        loads,
        end_state_checked,
    })
}

/// refill with `parallel: N`, its end state checked.
async fn refill_at_once(
    cluster: &Cluster,
    admin: &Client,
    options: &Options,
    scene: &Scene,
) -> Result<RefillRun> {
    let run = refill_run(
        cluster,
        admin,
        options,
        scene,
        "bench",
        Some(scene.n as u32),
    )
    .await?;
    scene
        .verify(admin, Side::Refill)
        .await
        .context("refill's end state")?;
    eprintln!("[bench] refill's end state checked");
    Ok(run)
}

/// One DataRestore `name` over the refill namespaces with `parallel`, its controller
/// started for it (its log `controller-<name>.log`) and stopped once it is idle again.
async fn refill_run(
    cluster: &Cluster,
    admin: &Client,
    options: &Options,
    scene: &Scene,
    name: &str,
    parallel: Option<u32>,
) -> Result<RefillRun> {
    let started_at = SystemTime::now();
    let audit_start = audit::Cursor::now(cluster)?;
    let (ctl, credential) = start_idle_controller(cluster, options, scene, name).await?;
    let restores: Api<DataRestore> = Api::namespaced(admin.clone(), &scene.velero_ns);
    // The largest status the watch shows: every version the controller wrote, but for
    // those it overwrote before the watch delivered them.
    let largest = Arc::new(AtomicUsize::new(0));
    let finished = tokio::spawn({
        let (restores, name, largest) = (restores.clone(), name.to_string(), largest.clone());
        async move {
            await_condition(restores, &name, move |dr: Option<&DataRestore>| {
                let status = dr.and_then(|d| d.status.as_ref());
                let bytes = serde_json::to_vec(&status).map_or(0, |b| b.len());
                largest.fetch_max(bytes, Ordering::Relaxed);
                status.is_some_and(|s| s.phase.is_terminal())
            })
            .await
        }
    });
    let pods = Watched::<Pod>::start(
        Api::all(admin.clone()),
        watcher::Config::default().labels(&scene.run_selector()),
    );
    pods.until(
        "the pod watch to list",
        restore_timeout(scene.n),
        |_| Ok(()),
    )
    .await?;
    let load_average = load_average();
    let cpu_before = (cpu::process(ctl.pid()), cpu::machine_busy());
    let requested_at = SystemTime::now();
    let t0 = Instant::now();
    fixture::data_restore(
        admin,
        &scene.velero_ns,
        name,
        restore_spec(scene, parallel, options.extra_files),
    )
    .await?;
    let done = tokio::time::timeout(restore_timeout(scene.n), finished)
        .await
        .with_context(|| format!("the DataRestore {name} did not finish in time"))???;
    let wall = t0.elapsed();
    let completed_at = SystemTime::now();
    let dr = done.with_context(|| format!("the DataRestore {name} vanished"))?;
    let status = dr.status.clone().unwrap_or_default();
    eprintln!(
        "[bench] refill ({name}): {:?} in {:.2}s",
        status.phase,
        wall.as_secs_f64()
    );
    // Completed means every Deployment is scaled back; the floor ends when their pods
    // are Ready, and so does this for a comparison.
    let ready_wall = if status.phase == Phase::Completed {
        let want = scene
            .namespaces(Side::Refill)
            .into_iter()
            .map(|ns| (ns, scene.replicas))
            .collect();
        pods.until(
            "the pods to be Ready again",
            restore_timeout(scene.n),
            |p| all_ready(p, &want).map(|_| ()),
        )
        .await?;
        t0.elapsed()
    } else {
        wall
    };
    // Whatever the controller does after Completed (its finalizer) belongs to the run.
    run_done(cluster, &credential).await?;
    let controller_peak_rss = ctl.peak_rss();
    let controller_cpu = cpu::process(ctl.pid())
        .zip(cpu_before.0)
        .map(|(after, before)| after - before);
    let machine_cpu = cpu::machine_busy() - cpu_before.1;
    let idle_at = SystemTime::now();
    let controller_binary = ctl.describe();
    let log = ctl.log_path().to_path_buf();
    ctl.stop().await;
    let events = audit_start.read_since(cluster)?;
    let mine = audit::filter(&events, &credential);
    if status.phase != Phase::Completed {
        bail!(
            "refill's restore {name} ended {:?}: {:?} (controller log: {})",
            status.phase,
            status.errors,
            log.display()
        );
    }
    Ok(RefillRun {
        parallel,
        wall,
        ready_wall,
        phase: format!("{:?}", status.phase),
        requests: audit::count(&mine, requested_at, idle_at),
        startup_requests: audit::count(&mine, started_at, requested_at),
        controller_peak_rss,
        largest_status_bytes: largest.load(Ordering::Relaxed),
        controller_cpu,
        machine_cpu,
        controller_binary,
        timeline: audit::timeline(&mine, requested_at, completed_at),
        load_average,
    })
}

/// Deletes a finished DataRestore, its finalizer dropped (its controller is gone), so
/// that the next restore of the same namespaces starts from none.
async fn forget_restore(admin: &Client, scene: &Scene, name: &str) -> Result<()> {
    let restores: Api<DataRestore> = Api::namespaced(admin.clone(), &scene.velero_ns);
    let uid = restores.get(name).await?.uid().unwrap_or_default();
    refill_e2e::support::release_restores(admin, &scene.velero_ns).await?;
    restores.delete(name, &DeleteParams::default()).await?;
    tokio::time::timeout(
        Duration::from_secs(60),
        await_condition(restores, name, conditions::is_deleted(&uid)),
    )
    .await
    .with_context(|| format!("the DataRestore {name} was not gone within a minute"))??;
    Ok(())
}

/// Waits until the controller (its requests carry `credential`) has been quiet for 2 s
/// (30 s at most): what it does after a restore ended, its finalizer and last writes,
/// belongs to the run.
pub(super) async fn run_done(cluster: &Cluster, credential: &str) -> Result<()> {
    audit::wait_quiet(
        cluster,
        credential,
        Duration::from_secs(2),
        Duration::from_secs(30),
    )
    .await
}

/// A deletion's answer, with "not found" as good as done.
pub fn absent_is_fine<T>(answer: kube::Result<T>) -> Result<()> {
    match answer {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Waits for the machine to be quiet before one way of restoring starts, as before each
/// size: what the last way or the setup left running (pods still going, deletions,
/// the load average's own minute of memory) would otherwise slow the next, and the
/// ways compared would not start alike. Answers the way and the load it starts with.
pub(crate) async fn quiet_before(way: &'static str, wait: Duration) -> (&'static str, f64) {
    let load = settled_load(wait).await;
    eprintln!("[bench] load average (1 min) {load:.2} as {way} begins");
    (way, load)
}

/// The 1-minute load average below which the machine counts as quiet.
pub(crate) const QUIET_LOAD: f64 = 1.0;

/// Waits (at most `wait`) for the load of what ran before (the build, the last size and
/// its namespaces' deletion) to fade below [`QUIET_LOAD`], so that each size starts on
/// an equally quiet machine; returns the load it starts with.
async fn settled_load(wait: Duration) -> f64 {
    load_below(QUIET_LOAD, wait).await
}

/// Waits (at most `wait`) for the 1-minute load average to fall below `below`, and
/// returns it: benchmarks share the machine, and start each part alike.
pub async fn load_below(below: f64, wait: Duration) -> f64 {
    let started = std::time::Instant::now();
    loop {
        let load = load_average();
        if load < below || started.elapsed() >= wait {
            if load >= below && !wait.is_zero() {
                eprintln!(
                    "[bench] load average still {load:.2} after {}s; starting anyway",
                    wait.as_secs()
                );
            }
            return load;
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0.0)
}

/// The simulated node agent for a run's restores, many at once on each node.
fn agent_config(scene: &Scene) -> NodeAgentConfig {
    let mut cfg = NodeAgentConfig::new(&scene.snapshots);
    cfg.velero_namespace = scene.velero_ns.clone();
    cfg.concurrency_per_node = 64;
    cfg
}

/// Starts refill's controller for the DataRestore `name` (its log
/// `controller-<name>.log`) and returns it with the credential its requests carry,
/// once it is idle: its watches open, its first lists read.
async fn start_idle_controller(
    cluster: &Cluster,
    options: &Options,
    scene: &Scene,
    name: &str,
) -> Result<(ControllerProcess, String)> {
    // The Lease of a controller killed before would keep this one waiting for its
    // expiry.
    let leases: Api<Lease> = Api::namespaced(cluster.admin_client().await?, &scene.velero_ns);
    absent_is_fine(
        leases
            .delete(refill_e2e::in_cluster::LEASE, &DeleteParams::default())
            .await,
    )?;
    let ctl = ControllerProcess::start_named(
        cluster,
        &options.controller,
        &scene.velero_ns,
        &scene.dir,
        &format!("controller-{name}"),
        &[],
    )
    .await?;
    let credential = ctl.credential_id().to_string();
    audit::wait_quiet(
        cluster,
        &credential,
        Duration::from_secs(1),
        Duration::from_secs(30),
    )
    .await?;
    Ok((ctl, credential))
}

/// One DataRestore for all of the run's refill namespaces, `parallel` volumes at once
/// (none: refill's default).
fn restore_spec(scene: &Scene, parallel: Option<u32>, extra_files: ExtraFiles) -> DataRestoreSpec {
    // `includedNamespaces` holds at most refill's bound on any list a user writes; a run
    // past it selects its claims by the run's label, as one restoring that many
    // namespaces would. Only refill's side is in such a run (`--refill-only`).
    let (included_namespaces, selector) = if scene.n > refill::api::bounds::CLAIMS as usize {
        let labels = [(scene::RUN_LABEL.to_string(), scene.run_id.clone())];
        let selector = LabelSelector {
            match_labels: Some(labels.into_iter().collect()),
            ..Default::default()
        };
        (Vec::new(), Some(selector))
    } else {
        (scene.namespaces(Side::Refill), None)
    };
    DataRestoreSpec {
        backup_name: Some(scene::BACKUP.into()),
        included_namespaces,
        selector,
        parallel,
        extra_files,
        ..Default::default()
    }
}

//! The benchmark on real data behind `e2e/bench/velero`: one Velero backup of two
//! namespaces on the real nodes, one app with a large volume of mixed files and one
//! of many apps with small volumes, each damaged and restored, one way after the
//! other:
//!
//! - **refill Direct**: one DataRestore of the namespace's claims; the apps stop, the
//!   claims are emptied, Velero's node agent writes the backup into them;
//! - **refill Staged**: the node agent fills a scratch claim beside each while the
//!   apps run; they stop only while refill's copier writes what differs;
//! - **Velero alone**: what users do without refill: delete the namespace, then
//!   `velero restore create --from-backup` (a Restore object).
//!
//! For each it records the wall time, how long each app was unavailable (no Ready
//! pod), the bytes restored per second, what was written into the apps' claims,
//! and the API writes of refill's and Velero's service accounts (from the audit
//! log), and checks every restored volume byte for byte against a copy taken
//! before the backup. The same bytes copied and read on the same disk with no
//! Kubernetes (`cp -a`, and both trees read as the copier compares them) give the
//! physical limit. The refill ways and Velero alone run once more with the node
//! agent's `loadConcurrency` raised. The tables go into a results file, in place
//! of their previous section.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, ensure};
use clap::{Parser, ValueEnum};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, PersistentVolumeClaim, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use refill::api::{CopySummary, DataRestore, DataRestoreSpec, Phase, RestoreMethod};
use refill_e2e::bench::real_data::{self, Damage, Size};
use refill_e2e::bench::{absent_is_fine, load_below, report};
use refill_e2e::velero::{self, VELERO_NAMESPACE};
use refill_e2e::{
    Cluster, LOCAL_PATH_CLASS, TESTBOX_IMAGE, fixture, in_cluster, is_pod_ready,
    real_node_annotations, wait_for,
};
use serde_json::json;

/// Restores refill Direct, refill Staged and Velero alone from one Velero backup;
/// see `e2e/bench/velero`.
#[derive(Parser, Debug)]
#[command(name = "velero-bench")]
struct Args {
    /// The one app's volume, in MiB: a mixed tree of large and small files.
    #[arg(long, default_value_t = 1024)]
    big: u64,
    /// The many apps' large volumes, as COUNTxMIB.
    #[arg(long, default_value = "4x64")]
    large: String,
    /// The many apps' small volumes, as COUNTxMIB.
    #[arg(long, default_value = "20x4")]
    small: String,
    /// The damages each refill way restores from.
    #[arg(long, value_delimiter = ',', default_value = "one-percent,all")]
    damage: Vec<DamageArg>,
    /// The node agent's loadConcurrency (volumes each node moves at once) for the
    /// second run of the ways over the many apps; 0 leaves it out.
    #[arg(long, default_value_t = 4)]
    load_concurrency: u32,
    /// The 1-minute load average to wait for before the first way.
    #[arg(long, default_value_t = 1.5)]
    quiet_load: f64,
    /// How long to wait for it at most, in seconds.
    #[arg(long, default_value_t = 300)]
    quiet_wait: u64,
    /// The results file whose real-data section this run replaces.
    #[arg(long)]
    results: PathBuf,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum DamageArg {
    OnePercent,
    All,
}

impl From<DamageArg> for Damage {
    fn from(d: DamageArg) -> Damage {
        match d {
            DamageArg::OnePercent => Damage::OnePercent,
            DamageArg::All => Damage::All,
        }
    }
}

const BIG_NS: &str = "bench-big";
const MANY_NS: &str = "bench-real";
const TIMEOUT: Duration = Duration::from_secs(1800);
const REFILL_SA: &str = "system:serviceaccount:refill-system:refill";
const VELERO_SA: &str = "system:serviceaccount:velero:velero";
/// The ConfigMap the node agent is pointed at for the run with loadConcurrency.
const NODE_AGENT_CONFIG: &str = "refill-bench-node-agent";
const MIB: f64 = (1u64 << 20) as f64;

fn parse_size(spec: &str) -> Result<(usize, u32)> {
    let (count, mib) = spec
        .split_once('x')
        .context("sizes are COUNTxMIB, e.g. 4x64")?;
    Ok((count.parse()?, mib.parse()?))
}

/// A namespace of apps, each a Deployment mounting its own claim of the same name.
struct Scene {
    ns: &'static str,
    apps: Vec<String>,
    /// What the table calls it.
    label: String,
    size: Size,
}

impl Scene {
    async fn dirs(&self, client: &Client) -> Result<Vec<(String, PathBuf)>> {
        let mut out = Vec::new();
        for app in &self.apps {
            out.push((app.clone(), velero::claim_dir(client, self.ns, app).await?));
        }
        Ok(out)
    }
}

/// A way of restoring.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Way {
    Direct,
    Staged,
    VeleroAlone,
}

impl Way {
    fn label(self) -> &'static str {
        match self {
            Way::Direct => "refill Direct",
            Way::Staged => "refill Staged",
            Way::VeleroAlone => "Velero alone (delete namespace, restore)",
        }
    }
}

/// What a way wrote into the apps' claims.
enum Written {
    /// The whole backup, by the node agent.
    All(u64),
    /// What the copier found different (Staged).
    Copied(CopySummary),
}

/// One way's figures.
struct Run {
    /// The machine's load average (1, 5, 15 minutes) when this way began.
    load: String,
    wall: Duration,
    /// Per app: from the moment it had no Ready pod to the moment it had one again.
    downtime: Vec<Duration>,
    /// Bytes the PodVolumeRestores report.
    restored: u64,
    written: Written,
    writes: BTreeMap<&'static str, usize>,
}

impl Run {
    fn mean(&self) -> Duration {
        self.downtime.iter().sum::<Duration>() / self.downtime.len().max(1) as u32
    }

    fn max(&self) -> Duration {
        self.downtime.iter().max().copied().unwrap_or_default()
    }

    fn rate(&self) -> f64 {
        self.restored as f64 / MIB / self.wall.as_secs_f64()
    }
}

/// A row of the table: a way on a scene after a damage, or why it failed, and
/// whether the volumes ended as the backup holds them.
struct Row {
    scene: String,
    damage: &'static str,
    way: Way,
    run: Result<Run, String>,
    check: Result<(), String>,
}

/// The physical limit of one scene.
struct Floor {
    scene: String,
    size: Size,
    copy: Duration,
    compare: Duration,
}

/// refill's commit when the run began, as [`report::revision`] tells it.
static REVISION: std::sync::OnceLock<String> = std::sync::OnceLock::new();

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let cluster = refill_e2e::cluster().await?;
    let client = cluster.admin_client().await?;
    let command = command_line(&args);
    // The image is built from the checkout as it is now; the report names that commit,
    // not the one checked out when the run ends, a long while later.
    let _ = REVISION.set(report::revision());
    println!("installing refill's controller (a pod from manifests/)");
    in_cluster::install_controller(cluster, &client, VELERO_NAMESPACE, TIMEOUT).await?;

    let refs = cluster.scratch_dir("velero-bench")?;
    let scenes = set_up(&client, &args).await?;
    let mut floors = Vec::new();
    for scene in &scenes {
        let dirs = scene.dirs(&client).await?;
        let copy = real_data::copy_trees(&dirs, &refs.join(scene.ns))?;
        floors.push(Floor {
            scene: scene.label.clone(),
            size: scene.size,
            copy,
            compare: Duration::ZERO,
        });
    }
    let backup = format!(
        "bench-{}",
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)?
            .as_secs()
    );
    let began = Instant::now();
    velero::backup_namespaces(&client, &backup, &[BIG_NS, MANY_NS], TIMEOUT).await?;
    let backup_secs = began.elapsed().as_secs_f64();
    say(&format!("Velero backup {backup} in {backup_secs:.1}s"));
    for (scene, floor) in scenes.iter().zip(&mut floors) {
        let began = Instant::now();
        check(&client, scene, &refs).await?;
        floor.compare = began.elapsed();
    }

    let quiet = load_below(args.quiet_load, Duration::from_secs(args.quiet_wait)).await;
    say(&format!("1-minute load {quiet:.2}: starting the ways"));
    let mut rows = Vec::new();
    for damage in args.damage.iter().map(|&d| Damage::from(d)) {
        for scene in &scenes {
            for way in [Way::Direct, Way::Staged] {
                rows.push(
                    run_way(cluster, &client, scene, &backup, &refs, way, Some(damage)).await,
                );
            }
        }
    }
    for scene in &scenes {
        rows.push(
            run_way(
                cluster,
                &client,
                scene,
                &backup,
                &refs,
                Way::VeleroAlone,
                None,
            )
            .await,
        );
    }
    let mut raised = Vec::new();
    let mut put_back = Ok(());
    if args.load_concurrency > 0 {
        let many = &scenes[1];
        let original = velero::node_agent_args(&client).await?;
        match set_load_concurrency(&client, &original, args.load_concurrency).await {
            Ok(()) => {
                for way in [Way::Direct, Way::Staged, Way::VeleroAlone] {
                    let damage = (way != Way::VeleroAlone).then_some(Damage::OnePercent);
                    raised.push(run_way(cluster, &client, many, &backup, &refs, way, damage).await);
                }
            }
            Err(e) => say(&format!("could not raise loadConcurrency: {e:#}")),
        }
        say("putting the node agent's arguments back");
        put_back = velero::set_node_agent_args(&client, &original, TIMEOUT)
            .await
            .and(absent_is_fine(
                Api::<ConfigMap>::namespaced(client.clone(), VELERO_NAMESPACE)
                    .delete(NODE_AGENT_CONFIG, &DeleteParams::default())
                    .await,
            ));
    }

    let table = render(
        &args,
        &command,
        &scenes,
        &floors,
        &rows,
        &raised,
        backup_secs,
    );
    println!("\n{table}");
    refill_e2e::bench::results::write(&args.results, &table)?;
    put_back?;
    velero::delete_backup(&client, &backup).await?;
    for scene in &scenes {
        remove_namespace(&client, scene.ns).await?;
    }
    std::fs::remove_dir_all(&refs)?;
    Ok(())
}

fn say(what: &str) {
    println!("[{}] {what}", Timestamp::now().strftime("%H:%M:%S"));
}

fn command_line(args: &Args) -> String {
    let damages: Vec<&str> = args
        .damage
        .iter()
        .map(|d| match d {
            DamageArg::OnePercent => "one-percent",
            DamageArg::All => "all",
        })
        .collect();
    format!(
        "e2e/bench/velero --big {} --large {} --small {} --damage {} --load-concurrency {}",
        args.big,
        args.large,
        args.small,
        damages.join(","),
        args.load_concurrency
    )
}

/// Both namespaces with their apps Ready and their files written.
async fn set_up(client: &Client, args: &Args) -> Result<Vec<Scene>> {
    remove_namespace(client, BIG_NS).await?;
    remove_namespace(client, MANY_NS).await?;
    say(&format!("setting up {BIG_NS}: one app of {} MiB", args.big));
    let big = vec!["big".to_string()];
    create_apps(
        client,
        BIG_NS,
        &big.iter().map(|a| (a.clone(), None)).collect::<Vec<_>>(),
    )
    .await?;
    let dir = velero::claim_dir(client, BIG_NS, "big").await?;
    let size = real_data::write_mixed_tree(&dir, args.big)?;
    let (large, small) = (parse_size(&args.large)?, parse_size(&args.small)?);
    let mut many = Vec::new();
    for i in 0..large.0 {
        many.push((format!("large-{i}"), Some(large.1)));
    }
    for i in 0..small.0 {
        many.push((format!("small-{i}"), Some(small.1)));
    }
    say(&format!("setting up {MANY_NS}: {} apps", many.len()));
    create_apps(client, MANY_NS, &many).await?;
    let mut scenes = vec![
        Scene {
            ns: BIG_NS,
            apps: big,
            label: format!("1 app, {} MiB", args.big),
            size,
        },
        Scene {
            ns: MANY_NS,
            apps: many.into_iter().map(|(a, _)| a).collect(),
            label: String::new(),
            size: Size::default(),
        },
    ];
    let dirs: Vec<PathBuf> = scenes[1]
        .dirs(client)
        .await?
        .into_iter()
        .map(|(_, d)| d)
        .collect();
    scenes[1].size = real_data::size_of(&dirs)?;
    scenes[1].label = format!(
        "{} apps, {:.0} MiB",
        scenes[1].apps.len(),
        scenes[1].size.bytes as f64 / MIB
    );
    Ok(scenes)
}

async fn remove_namespace(client: &Client, ns: &str) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if namespaces.get_opt(ns).await?.is_some() {
        namespaces.delete(ns, &DeleteParams::default()).await?;
    }
    wait_for(format!("namespace {ns} gone"), TIMEOUT, || async {
        Ok(namespaces.get_opt(ns).await?.is_none().then_some(()))
    })
    .await
}

/// Each app: a Deployment of one pod (on a real node, by the namespace's
/// annotations) mounting its claim. With a size, its init container writes the
/// volume's files once (`testbox tree`, a no-op when they are there); without, the
/// benchmark writes them into the claim's directory.
async fn create_apps(client: &Client, ns: &str, apps: &[(String, Option<u32>)]) -> Result<()> {
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {
        "name": ns, "annotations": real_node_annotations(),
    }}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await?;
    wait_for(
        "the default ServiceAccount",
        Duration::from_secs(60),
        || async {
            let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
                Api::namespaced(client.clone(), ns);
            Ok(accounts.get_opt("default").await?.map(|_| ()))
        },
    )
    .await?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    for (app, mib) in apps {
        fixture::pvc_of_class(client, ns, app, None, &[], LOCAL_PATH_CLASS).await?;
        let mounts = json!([{"name": "data", "mountPath": "/data"}]);
        let init: Vec<serde_json::Value> = mib
            .iter()
            .map(|mib| {
                json!({"name": "write", "image": TESTBOX_IMAGE, "imagePullPolicy": "Never",
                    "args": ["tree", "/data", mib.to_string()], "volumeMounts": mounts})
            })
            .collect();
        let deployment: Deployment = serde_json::from_value(json!({
            "metadata": {"name": app},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": app}},
                "template": {
                    "metadata": {"labels": {"app": app}},
                    "spec": {
                        "securityContext": {"runAsUser": 0, "runAsGroup": 0},
                        "initContainers": init,
                        "containers": [{"name": "app", "image": TESTBOX_IMAGE,
                            "imagePullPolicy": "Never", "args": ["sleep"], "volumeMounts": mounts}],
                        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": app}}],
                        "terminationGracePeriodSeconds": 1,
                    }
                }
            }
        }))?;
        deployments
            .create(&PostParams::default(), &deployment)
            .await?;
    }
    for (app, _) in apps {
        fixture::wait_ready_pods(client, ns, app, 1, TIMEOUT).await?;
    }
    Ok(())
}

/// Every app's volume against the copy taken before the backup.
async fn check(client: &Client, scene: &Scene, refs: &Path) -> Result<()> {
    for (app, dir) in scene.dirs(client).await? {
        real_data::compare_trees(&refs.join(scene.ns).join(&app), &dir)?;
    }
    Ok(())
}

/// Damages `scene` (unless Velero alone, which deletes it), restores it `way`,
/// checks the result, and waits for the apps to be back whatever happened.
async fn run_way(
    cluster: &Cluster,
    client: &Client,
    scene: &Scene,
    backup: &str,
    refs: &Path,
    way: Way,
    damage: Option<Damage>,
) -> Row {
    // Each way starts alike: what came before (the last restore, the setup) faded.
    load_below(2.0, Duration::from_secs(45)).await;
    let run = async {
        if let Some(damage) = damage {
            let dirs: Vec<PathBuf> = scene
                .dirs(client)
                .await?
                .into_iter()
                .map(|(_, d)| d)
                .collect();
            let changed = real_data::damage(&dirs, damage)?;
            say(&format!(
                "{}: {} files ({:.1} MiB) changed or added",
                scene.ns,
                changed.files,
                changed.bytes as f64 / MIB
            ));
        }
        say(&format!("{}: restoring, {}", scene.ns, way.label()));
        if way != Way::VeleroAlone {
            controller_installed(cluster, client).await?;
        }
        match way {
            Way::VeleroAlone => velero_restore(cluster, client, scene, backup).await,
            Way::Direct | Way::Staged => refill_restore(cluster, client, scene, backup, way).await,
        }
    }
    .await
    .map_err(|e| format!("{e:#}"));
    match &run {
        Ok(r) => say(&format!(
            "{}: {} in {:.1}s, downtime mean {:.1}s max {:.1}s",
            scene.ns,
            way.label(),
            r.wall.as_secs_f64(),
            r.mean().as_secs_f64(),
            r.max().as_secs_f64()
        )),
        Err(e) => say(&format!("{}: {} FAILED: {e}", scene.ns, way.label())),
    }
    let check = async {
        for app in &scene.apps {
            fixture::wait_ready_pods(client, scene.ns, app, 1, TIMEOUT).await?;
        }
        check(client, scene, refs).await
    }
    .await
    .map_err(|e| format!("{e:#}"));
    if let Err(e) = &check {
        say(&format!("{}: after {}: {e}", scene.ns, way.label()));
    }
    Row {
        scene: scene.label.clone(),
        damage: damage.map_or("any (namespace deleted)", Damage::label),
        way,
        run,
        check,
    }
}

/// Installs refill's controller again if it is gone: tests sharing the cluster
/// remove it (`in_cluster::remove_controller`) to run their own.
async fn controller_installed(cluster: &Cluster, client: &Client) -> Result<()> {
    let (namespace, name) = fixture::CONTROLLER_SA;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    if deployments.get_opt(name).await?.is_none() {
        say("refill's controller was removed: installing it again");
        in_cluster::install_controller(cluster, client, VELERO_NAMESPACE, TIMEOUT).await?;
    }
    Ok(())
}

/// Watches the apps' pods until every app is Ready again after having been down,
/// and returns how long each was down. An app still Ready once the restore is done
/// and every other app is back was not down.
async fn downtimes(
    client: &Client,
    ns: &str,
    apps: &[String],
    finished: &AtomicBool,
) -> Result<Vec<Duration>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut down: BTreeMap<String, Instant> = BTreeMap::new();
    let mut out: BTreeMap<String, Duration> = BTreeMap::new();
    let deadline = Instant::now() + TIMEOUT;
    while out.len() < apps.len() {
        ensure!(
            Instant::now() < deadline,
            "apps not back within {TIMEOUT:?}"
        );
        let done = finished.load(Ordering::SeqCst);
        let listed = pods
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        for app in apps {
            let ready = listed.iter().any(|p| {
                p.metadata.labels.as_ref().and_then(|l| l.get("app")) == Some(app)
                    && p.metadata.deletion_timestamp.is_none()
                    && is_pod_ready(p)
            });
            match (ready, down.get(app)) {
                (false, None) => {
                    down.insert(app.clone(), Instant::now());
                }
                (true, Some(since)) if !out.contains_key(app) => {
                    out.insert(app.clone(), since.elapsed());
                }
                _ => {}
            }
        }
        if done && down.keys().all(|app| out.contains_key(app)) {
            for app in apps {
                out.entry(app.clone()).or_default();
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(out.into_values().collect())
}

/// Runs one way's `restore` (which returns the bytes restored and what was
/// written into the claims) while watching the apps' downtime, and counts the
/// service accounts' writes over it.
async fn measure(
    cluster: &Cluster,
    client: &Client,
    scene: &Scene,
    restore: impl Future<Output = Result<(u64, Written)>>,
) -> Result<Run> {
    let load = load_average();
    let audit = AuditCursor::now(cluster)?;
    let began = Instant::now();
    let finished = AtomicBool::new(false);
    let restore = async {
        let out = restore.await;
        finished.store(true, Ordering::SeqCst);
        out
    };
    let (downtime, (restored, written)) =
        tokio::try_join!(downtimes(client, scene.ns, &scene.apps, &finished), restore)?;
    Ok(Run {
        load,
        wall: began.elapsed(),
        downtime,
        restored,
        written,
        writes: audit.writes(cluster)?,
    })
}

async fn refill_restore(
    cluster: &Cluster,
    client: &Client,
    scene: &Scene,
    backup: &str,
    way: Way,
) -> Result<Run> {
    let method = if way == Way::Staged {
        RestoreMethod::Staged
    } else {
        RestoreMethod::Direct
    };
    let name = format!(
        "{}-{}-{}",
        scene.ns,
        if way == Way::Staged {
            "staged"
        } else {
            "direct"
        },
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)?
            .as_secs()
    );
    let restore = async {
        let spec = DataRestoreSpec {
            backup_name: Some(backup.into()),
            included_namespaces: vec![scene.ns.into()],
            method,
            ..Default::default()
        };
        fixture::data_restore(client, VELERO_NAMESPACE, &name, spec).await?;
        let done = fixture::wait_finished(client, VELERO_NAMESPACE, &name, TIMEOUT).await?;
        let status = done.status.unwrap_or_default();
        if status.phase != Phase::Completed {
            println!(
                "DataRestore {name}'s status:\n{}",
                serde_json::to_string_pretty(&status)?
            );
        }
        ensure!(
            status.phase == Phase::Completed,
            "DataRestore {name} ended {:?}: {:?}",
            status.phase,
            status.errors
        );
        let restored = status
            .volumes
            .iter()
            .map(|v| v.bytes_done.max(0) as u64)
            .sum();
        let written = if way == Way::Staged {
            let mut sum = CopySummary::default();
            for copied in status.volumes.iter().filter_map(|v| v.copied.as_ref()) {
                sum.files_written += copied.files_written;
                sum.bytes_written += copied.bytes_written;
                sum.unchanged += copied.unchanged;
                sum.deleted += copied.deleted;
            }
            Written::Copied(sum)
        } else {
            Written::All(restored)
        };
        Ok((restored, written))
    };
    let run = measure(cluster, client, scene, restore).await;
    absent_is_fine(
        Api::<DataRestore>::namespaced(client.clone(), VELERO_NAMESPACE)
            .delete(&name, &DeleteParams::default())
            .await,
    )?;
    run
}

async fn velero_restore(
    cluster: &Cluster,
    client: &Client,
    scene: &Scene,
    backup: &str,
) -> Result<Run> {
    let name = format!(
        "{}-velero-{}",
        scene.ns,
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)?
            .as_secs()
    );
    let restore = async {
        remove_namespace(client, scene.ns).await?;
        let restore = json!({
            "apiVersion": "velero.io/v1", "kind": "Restore",
            "metadata": {"name": name, "namespace": VELERO_NAMESPACE},
            "spec": {"backupName": backup, "includedNamespaces": [scene.ns]},
        });
        velero::run_to_completion(client, restore, TIMEOUT).await?;
        // The bytes Velero wrote back: what its PodVolumeRestores report.
        let pvrs: Api<refill::api::PodVolumeRestore> =
            Api::namespaced(client.clone(), VELERO_NAMESPACE);
        let selector = format!("velero.io/restore-name={name}");
        let restored = pvrs
            .list(&ListParams::default().labels(&selector))
            .await?
            .items
            .iter()
            .filter_map(|p| p.status.as_ref()?.progress.as_ref())
            .map(|p| p.bytes_done.max(0) as u64)
            .sum();
        Ok((restored, Written::All(restored)))
    };
    let run = measure(cluster, client, scene, restore).await?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), scene.ns);
    ensure!(
        claims.list(&ListParams::default()).await?.items.len() == scene.apps.len(),
        "Velero did not bring every claim back"
    );
    Ok(run)
}

/// Points the node agent at a ConfigMap raising its loadConcurrency to `per_node`
/// (`original` is its arguments, without any other ConfigMap of its own).
async fn set_load_concurrency(client: &Client, original: &[String], per_node: u32) -> Result<()> {
    say(&format!("node agent: loadConcurrency {per_node} per node"));
    let configs = Api::<ConfigMap>::namespaced(client.clone(), VELERO_NAMESPACE);
    absent_is_fine(
        configs
            .delete(NODE_AGENT_CONFIG, &DeleteParams::default())
            .await,
    )?;
    configs
        .create(
            &PostParams::default(),
            &velero::load_concurrency_config(NODE_AGENT_CONFIG, per_node)?,
        )
        .await?;
    let mut args: Vec<String> = original
        .iter()
        .filter(|a| !a.starts_with("--node-agent-configmap"))
        .cloned()
        .collect();
    args.push(format!("--node-agent-configmap={NODE_AGENT_CONFIG}"));
    velero::set_node_agent_args(client, &args, TIMEOUT).await
}

/// Writes (create, update, patch, delete) by refill's and Velero's service accounts
/// since a point in the audit log.
struct AuditCursor(u64);

impl AuditCursor {
    fn now(cluster: &Cluster) -> Result<Self> {
        Ok(AuditCursor(
            std::fs::metadata(cluster.audit_log_path())?.len(),
        ))
    }

    fn writes(&self, cluster: &Cluster) -> Result<BTreeMap<&'static str, usize>> {
        let mut file = std::fs::File::open(cluster.audit_log_path())?;
        file.seek(SeekFrom::Start(self.0))?;
        let mut out = BTreeMap::from([("refill", 0), ("velero", 0)]);
        for line in std::io::BufReader::new(file).lines() {
            let Ok(event) = serde_json::from_str::<serde_json::Value>(&line?) else {
                continue;
            };
            if event["stage"] != "ResponseComplete"
                || !matches!(
                    event["verb"].as_str(),
                    Some("create" | "update" | "patch" | "delete" | "deletecollection")
                )
            {
                continue;
            }
            match event["user"]["username"].as_str() {
                Some(REFILL_SA) => *out.entry("refill").or_default() += 1,
                Some(VELERO_SA) => *out.entry("velero").or_default() += 1,
                _ => {}
            }
        }
        Ok(out)
    }
}

fn load_average() -> String {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    load.split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / MIB)
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

const HEADER: &str = "| volumes | damage | way | load when it began | wall | app downtime, mean | app downtime, max | data rate | written into the claims | writes by refill | writes by Velero | volumes as backed up |\n\
    |---|---|---|--|--:|--:|--:|--:|--:|--:|--:|---|\n";

fn table_row(row: &Row) -> String {
    let checked = match &row.check {
        Ok(()) => "yes".to_string(),
        Err(e) => format!("**no**: {}", e.replace('|', "/")),
    };
    match &row.run {
        Ok(run) => {
            let written = match &run.written {
                Written::All(bytes) => mib(*bytes),
                Written::Copied(c) => format!(
                    "{} ({} files; {} unchanged, {} deleted)",
                    mib(c.bytes_written),
                    c.files_written,
                    c.unchanged,
                    c.deleted
                ),
            };
            format!(
                "| {} | {} | {} | {} | {} | {} | {} | {:.1} MiB/s | {written} | {} | {} | {checked} |\n",
                row.scene,
                row.damage,
                row.way.label(),
                run.load,
                secs(run.wall),
                secs(run.mean()),
                secs(run.max()),
                run.rate(),
                run.writes["refill"],
                run.writes["velero"],
            )
        }
        Err(e) => format!(
            "| {} | {} | {} | - | failed: {} | - | - | - | - | - | - | {checked} |\n",
            row.scene,
            row.damage,
            row.way.label(),
            e.replace('|', "/")
        ),
    }
}

fn find<'a>(rows: &'a [Row], scene: &str, damage: &str, way: Way) -> Option<&'a Run> {
    rows.iter()
        .find(|r| {
            r.scene == scene && r.way == way && (way == Way::VeleroAlone || r.damage == damage)
        })
        .and_then(|r| r.run.as_ref().ok())
}

fn render(
    args: &Args,
    command: &str,
    scenes: &[Scene],
    floors: &[Floor],
    rows: &[Row],
    raised: &[Row],
    backup_secs: f64,
) -> String {
    let now = Timestamp::now().strftime("%Y-%m-%d %H:%M UTC").to_string();
    let mut s = String::new();
    let big = &scenes[0];
    let many = &scenes[1];
    let _ = writeln!(
        s,
        "\n## Real data: refill in place vs. Velero alone\n\n\
         Measured {now} on {}, refill at {}, with `{command}`: each volume restored in \
         place by refill Direct and refill Staged after a damage, and by Velero alone \
         (delete the namespace, `velero restore create`), from one Velero v1.18.3 \
         backup (kopia, {backup_secs:.0} s) of two namespaces on the two real nodes of \
         the local cluster: `{BIG_NS}`, one app whose claim holds {} MiB in {} files \
         (half in files of up to 64 MiB, 30% in 1 MiB files, 20% in files of 2-62 KiB), \
         and `{MANY_NS}`, {} apps ({} large, {} small) whose claims hold {} MiB in {} files.\n",
        report::machine(),
        REVISION.get().cloned().unwrap_or_else(report::revision),
        big.size.bytes >> 20,
        big.size.files,
        many.apps.len(),
        args.large,
        args.small,
        many.size.bytes >> 20,
        many.size.files,
    );
    let _ = writeln!(
        s,
        "Damage, before each refill restore: \"1% of files changed\" rewrites every 100th \
         file in path order with new bytes of the same size; \"every file changed\" \
         rewrites them all; both add two files of 256 KiB to each volume, which the \
         restore must remove. Velero alone deletes the namespace, so damage does not \
         matter to it. Downtime is per app, from its last Ready pod going to a Ready \
         pod again (an app whose pod never went down counts 0). Data rate is the bytes \
         the PodVolumeRestores report (the whole backup of those volumes; for Staged, \
         written into the scratch claims) over the wall time. Written into the claims: \
         by the node agent (Direct, Velero alone), or by refill's copier (Staged). \
         Writes are API writes by each service account (audit log). Every volume was \
         then compared byte for byte, with mode and owner, against a copy taken \
         before the backup.\n"
    );
    s.push_str(HEADER);
    for row in rows {
        s.push_str(&table_row(row));
    }
    if !raised.is_empty() {
        let _ = writeln!(
            s,
            "\n### With the node agent's loadConcurrency at {}\n\n\
             The same ways on `{MANY_NS}` (1% of files changed) with the node agent \
             pointed at a ConfigMap (`--node-agent-configmap`) holding \
             `{{\"loadConcurrency\": {{\"globalConfig\": {}}}}}`: each node agent moves \
             up to {} volumes at once instead of 1. Its arguments were put back after.\n",
            args.load_concurrency, args.load_concurrency, args.load_concurrency
        );
        s.push_str(HEADER);
        for row in raised {
            s.push_str(&table_row(row));
        }
        let _ = writeln!(
            s,
            "\n| way | wall, 1 per node | wall, {} per node | change | downtime mean, 1 → {} | downtime max, 1 → {} |\n|---|--:|--:|--:|--:|--:|",
            args.load_concurrency, args.load_concurrency, args.load_concurrency
        );
        for way in [Way::Direct, Way::Staged, Way::VeleroAlone] {
            let damage = Damage::OnePercent.label();
            if let (Some(one), Some(more)) = (
                find(rows, &many.label, damage, way),
                find(raised, &many.label, damage, way),
            ) {
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {:+.0}% | {} → {} | {} → {} |",
                    way.label(),
                    secs(one.wall),
                    secs(more.wall),
                    (more.wall.as_secs_f64() / one.wall.as_secs_f64() - 1.0) * 100.0,
                    secs(one.mean()),
                    secs(more.mean()),
                    secs(one.max()),
                    secs(more.max()),
                );
            }
        }
    }
    let _ = writeln!(
        s,
        "\n### The physical limit\n\n\
         The same bytes on the same disk with no Kubernetes: `cp -a` of each volume's \
         directory (as written before the backup) to an empty directory, then `sync`; \
         and both trees read side by side and compared byte for byte, as the copier \
         compares (the page cache as warm as the benchmark left it).\n\n\
         | volumes | files | data | `cp -a` + `sync` | rate | read and compare both | rate |\n\
         |---|--:|--:|--:|--:|--:|--:|"
    );
    for f in floors {
        let rate = |d: Duration| f.size.bytes as f64 / MIB / d.as_secs_f64();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.1} MiB/s | {} | {:.1} MiB/s |",
            f.scene,
            f.size.files,
            mib(f.size.bytes),
            secs(f.copy),
            rate(f.copy),
            secs(f.compare),
            rate(f.compare),
        );
    }
    s.push_str(&targets(scenes, rows));
    s
}

/// The "against the targets" table.
fn targets(scenes: &[Scene], rows: &[Row]) -> String {
    let mut s = String::from(
        "\n### Against the targets\n\n| target | volumes | measured | met |\n|---|---|---|---|\n",
    );
    let met = |ok: bool| if ok { "yes" } else { "**no**" };
    let one = Damage::OnePercent.label();
    for scene in scenes {
        let label = &scene.label;
        if let (Some(direct), Some(staged)) = (
            find(rows, label, one, Way::Direct),
            find(rows, label, one, Way::Staged),
        ) {
            let ratio = staged.mean().as_secs_f64() / direct.mean().as_secs_f64().max(1e-9);
            let _ = writeln!(
                s,
                "| Staged downtime at 1% changed ≤ 25% of Direct's (mean) | {label} | {} against {} ({:.0}%); max {} against {} | {} |",
                secs(staged.mean()),
                secs(direct.mean()),
                ratio * 100.0,
                secs(staged.max()),
                secs(direct.max()),
                met(ratio <= 0.25)
            );
        }
    }
    for scene in scenes {
        let label = &scene.label;
        let Some(alone) = find(rows, label, one, Way::VeleroAlone) else {
            continue;
        };
        for damage in [Damage::OnePercent, Damage::All].map(Damage::label) {
            if let Some(direct) = find(rows, label, damage, Way::Direct) {
                let ratio = direct.rate() / alone.rate().max(1e-9);
                let _ = writeln!(
                    s,
                    "| Direct data rate ≥ 0.9× Velero alone's | {label}, {damage} | {:.1} against {:.1} MiB/s ({ratio:.2}×) | {} |",
                    direct.rate(),
                    alone.rate(),
                    met(ratio >= 0.9)
                );
            }
        }
    }
    s
}

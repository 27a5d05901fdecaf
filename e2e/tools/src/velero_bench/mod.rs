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

mod setup;
mod table;
mod ways;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result};
use clap::{Parser, ValueEnum};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::jiff::Timestamp;
use kube::api::DeleteParams;
use kube::{Api, Client};
use refill::api::CopySummary;
use refill_e2e::in_cluster;
use refill_e2e::velero::{self, VELERO_NAMESPACE};

use crate::bench::real_data::{self, Damage, Size};
use crate::bench::{absent_is_fine, load_below, report};

use setup::{check, remove_namespace, set_up};
use table::render;
use ways::{run_way, set_load_concurrency};

/// Restores refill Direct, refill Staged and Velero alone from one Velero backup;
/// see `e2e/bench/velero`.
#[derive(Parser, Debug)]
#[command(name = "velero-bench")]
pub struct Args {
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

/// Runs the benchmark: sets the scenes up, backs them up, restores them every way
/// and writes the tables into `args.results`.
pub async fn main(args: Args) -> Result<()> {
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
    crate::bench::results::write(&args.results, &table, &[])?;
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

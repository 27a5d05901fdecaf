//! The benchmark on real data behind `e2e/bench/velero`: the same Velero backup of a
//! namespace (a few large volumes and many small ones, each its own Deployment on the
//! real nodes) restored two ways, one after the other:
//!
//! - **refill**: one DataRestore of every claim of the namespace, in place; the
//!   controller runs as a pod from `manifests/`, Velero's node agent moves the data;
//! - **Velero alone**: what users do today to get the data back: delete the
//!   namespace, then `velero restore create --from-backup` (a Restore object), which
//!   makes the claims, the pods and the data anew.
//!
//! For each it prints the wall time, how long each app was unavailable (no Ready
//! pod), the bytes moved per second, and the API writes of refill's and Velero's
//! service accounts (from the audit log), and puts the table in a results file, in
//! place of its previous one.

use std::collections::BTreeMap;
use std::io::{BufRead, Seek, SeekFrom};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, ensure};
use clap::Parser;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim, Pod};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use refill::api::{DataRestore, DataRestoreSpec, Phase};
use refill_e2e::velero::{self, VELERO_NAMESPACE};
use refill_e2e::{
    Cluster, LOCAL_PATH_CLASS, TESTBOX_IMAGE, fixture, in_cluster, is_pod_ready,
    real_node_annotations, wait_for,
};
use serde_json::json;

/// Restores refill and Velero alone from one Velero backup; see `e2e/bench/velero`.
#[derive(Parser, Debug)]
#[command(name = "velero-bench")]
struct Args {
    /// Large volumes, as COUNTxMIB.
    #[arg(long, default_value = "4x64")]
    large: String,
    /// Small volumes, as COUNTxMIB.
    #[arg(long, default_value = "20x4")]
    small: String,
    /// The results file whose real-data section this run replaces.
    #[arg(long)]
    results: PathBuf,
}

const NS: &str = "bench-real";
const TIMEOUT: Duration = Duration::from_secs(1800);
const REFILL_SA: &str = "system:serviceaccount:refill-system:refill";
const VELERO_SA: &str = "system:serviceaccount:velero:velero";

fn parse_size(spec: &str) -> Result<(usize, u32)> {
    let (count, mib) = spec
        .split_once('x')
        .context("sizes are COUNTxMIB, e.g. 4x64")?;
    Ok((count.parse()?, mib.parse()?))
}

/// One way's figures.
struct Run {
    /// The machine's load average (1, 5, 15 minutes) when this way began.
    load: String,
    wall: Duration,
    /// Per app: from the moment it had no Ready pod to the moment it had one again.
    downtime: Vec<Duration>,
    bytes: u64,
    writes: BTreeMap<&'static str, usize>,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let large = parse_size(&args.large)?;
    let small = parse_size(&args.small)?;
    let cluster = refill_e2e::cluster().await?;
    let client = cluster.admin_client().await?;
    println!("installing refill's controller (a pod from manifests/)");
    in_cluster::install_controller(cluster, &client, VELERO_NAMESPACE, TIMEOUT).await?;

    let apps = app_sizes(large, small);
    println!("setting up {} apps in namespace {NS}", apps.len());
    remove_namespace(&client).await?;
    create_apps(&client, &apps).await?;
    let total_mib: u32 = apps.iter().map(|(_, mib)| mib).sum();
    let backup = format!(
        "{NS}-{}",
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)?
            .as_secs()
    );
    let began = Instant::now();
    velero::backup_namespaces(&client, &backup, &[NS], TIMEOUT).await?;
    println!(
        "Velero backup {backup}: {total_mib} MiB in {:.1}s",
        began.elapsed().as_secs_f64()
    );

    settle().await;
    println!("restoring with refill (in place)");
    let refill = refill_restore(cluster, &client, &apps, &backup).await?;
    settle().await;
    println!("restoring with Velero alone (delete the namespace, velero restore create)");
    let alone = velero_restore(cluster, &client, &apps, &backup).await?;
    let table = report(&args, &apps, &refill, &alone, total_mib);
    println!("\n{table}");
    refill_e2e::bench::results::write(&args.results, &table)?;
    velero::delete_backup(&client, &backup).await?;
    remove_namespace(&client).await
}

fn app_sizes(large: (usize, u32), small: (usize, u32)) -> Vec<(String, u32)> {
    let mut apps = Vec::new();
    for i in 0..large.0 {
        apps.push((format!("large-{i}"), large.1));
    }
    for i in 0..small.0 {
        apps.push((format!("small-{i}"), small.1));
    }
    apps
}

async fn remove_namespace(client: &Client) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if namespaces.get_opt(NS).await?.is_some() {
        namespaces.delete(NS, &DeleteParams::default()).await?;
    }
    wait_for("the bench namespace gone", TIMEOUT, || async {
        Ok(namespaces.get_opt(NS).await?.is_none().then_some(()))
    })
    .await
}

/// Each app: a Deployment of one pod (on a real node, by the namespace's
/// annotations) whose init container writes its volume's files once.
async fn create_apps(client: &Client, apps: &[(String, u32)]) -> Result<()> {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {
        "name": NS, "annotations": real_node_annotations(),
    }}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    wait_for(
        "the default ServiceAccount",
        Duration::from_secs(60),
        || async {
            let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
                Api::namespaced(client.clone(), NS);
            Ok(accounts.get_opt("default").await?.map(|_| ()))
        },
    )
    .await?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    for (app, mib) in apps {
        fixture::pvc_of_class(client, NS, app, None, &[], LOCAL_PATH_CLASS).await?;
        let mounts = json!([{"name": "data", "mountPath": "/data"}]);
        let deployment: Deployment = serde_json::from_value(json!({
            "metadata": {"name": app},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": app}},
                "template": {
                    "metadata": {"labels": {"app": app}},
                    "spec": {
                        "securityContext": {"runAsUser": 0, "runAsGroup": 0},
                        "initContainers": [{"name": "write", "image": TESTBOX_IMAGE,
                            "imagePullPolicy": "Never", "args": ["tree", "/data", mib.to_string()],
                            "volumeMounts": mounts}],
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
        fixture::wait_ready_pods(client, NS, app, 1, TIMEOUT).await?;
    }
    Ok(())
}

/// Watches the apps' pods until every app is Ready again after having been down,
/// and returns how long each was down.
async fn downtimes(client: &Client, apps: &[(String, u32)]) -> Result<Vec<Duration>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let mut down: BTreeMap<String, Instant> = BTreeMap::new();
    let mut out: BTreeMap<String, Duration> = BTreeMap::new();
    let deadline = Instant::now() + TIMEOUT;
    while out.len() < apps.len() {
        ensure!(
            Instant::now() < deadline,
            "apps not back within {TIMEOUT:?}"
        );
        let listed = pods
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        for (app, _) in apps {
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
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(out.into_values().collect())
}

/// Runs one way's `restore` (which returns the bytes it moved) while watching the
/// apps' downtime, and counts the service accounts' writes over it.
async fn measure(
    cluster: &Cluster,
    client: &Client,
    apps: &[(String, u32)],
    restore: impl Future<Output = Result<u64>>,
) -> Result<Run> {
    let load = load_average();
    let audit = AuditCursor::now(cluster)?;
    let began = Instant::now();
    let (downtime, bytes) = tokio::try_join!(downtimes(client, apps), restore)?;
    Ok(Run {
        load,
        wall: began.elapsed(),
        downtime,
        bytes,
        writes: audit.writes(cluster)?,
    })
}

async fn refill_restore(
    cluster: &Cluster,
    client: &Client,
    apps: &[(String, u32)],
    backup: &str,
) -> Result<Run> {
    let name = format!("{backup}-refill");
    let restore = async {
        let spec = DataRestoreSpec {
            backup_name: Some(backup.into()),
            included_namespaces: vec![NS.into()],
            ..Default::default()
        };
        fixture::data_restore(client, VELERO_NAMESPACE, &name, spec).await?;
        let done = fixture::wait_finished(client, VELERO_NAMESPACE, &name, TIMEOUT).await?;
        let status = done.status.unwrap_or_default();
        ensure!(
            status.phase == Phase::Completed,
            "refill's restore ended {:?}: {:?}",
            status.phase,
            status.errors
        );
        Ok(status
            .volumes
            .iter()
            .map(|v| v.bytes_done.max(0) as u64)
            .sum())
    };
    let run = measure(cluster, client, apps, restore).await?;
    Api::<DataRestore>::namespaced(client.clone(), VELERO_NAMESPACE)
        .delete(&name, &DeleteParams::default())
        .await?;
    Ok(run)
}

async fn velero_restore(
    cluster: &Cluster,
    client: &Client,
    apps: &[(String, u32)],
    backup: &str,
) -> Result<Run> {
    let name = format!("{backup}-velero");
    let restore = async {
        remove_namespace(client).await?;
        let restore = json!({
            "apiVersion": "velero.io/v1", "kind": "Restore",
            "metadata": {"name": name, "namespace": VELERO_NAMESPACE},
            "spec": {"backupName": backup, "includedNamespaces": [NS]},
        });
        velero::run_to_completion(client, restore, TIMEOUT).await?;
        // The bytes Velero wrote back: what its PodVolumeRestores report.
        let pvrs: Api<refill::api::PodVolumeRestore> =
            Api::namespaced(client.clone(), VELERO_NAMESPACE);
        let selector = format!("velero.io/restore-name={name}");
        Ok(pvrs
            .list(&ListParams::default().labels(&selector))
            .await?
            .items
            .iter()
            .filter_map(|p| p.status.as_ref()?.progress.as_ref())
            .map(|p| p.bytes_done.max(0) as u64)
            .sum())
    };
    let run = measure(cluster, client, apps, restore).await?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    ensure!(
        claims.list(&ListParams::default()).await?.items.len() == apps.len(),
        "Velero did not bring every claim back"
    );
    Ok(run)
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

/// Waits (up to two minutes) for the machine to calm down after what came before
/// (the setup, the other way's restore), so that each way starts alike.
async fn settle() {
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        let one_minute: f64 = load_average()
            .split_whitespace()
            .next()
            .and_then(|l| l.parse().ok())
            .unwrap_or(0.0);
        if one_minute < 2.5 {
            return;
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

fn load_average() -> String {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    load.split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn report(
    args: &Args,
    apps: &[(String, u32)],
    refill: &Run,
    alone: &Run,
    total_mib: u32,
) -> String {
    let row = |name: &str, run: &Run| {
        let max = run.downtime.iter().max().copied().unwrap_or_default();
        let mean = run.downtime.iter().sum::<Duration>() / run.downtime.len().max(1) as u32;
        format!(
            "| {name} | {} | {:.1} s | {:.1} s | {:.1} s | {:.1} MiB/s | {} | {} |\n",
            run.load,
            run.wall.as_secs_f64(),
            mean.as_secs_f64(),
            max.as_secs_f64(),
            run.bytes as f64 / (1 << 20) as f64 / run.wall.as_secs_f64(),
            run.writes["refill"],
            run.writes["velero"],
        )
    };
    format!(
        "\n## Real data: refill in place vs. Velero alone\n\n\
         `e2e/bench/velero --large {} --small {}`: {} apps (one Deployment and claim each, on \
         the two real nodes), {total_mib} MiB in one Velero v1.18.3 backup (kopia), on 2 \
         cores. Downtime is per app, from its last Ready pod going to a Ready pod again; \
         MiB/s is the bytes the PodVolumeRestores report over the wall time.\n\n\
         | way | load when it began | wall | app downtime, mean | app downtime, max | data rate | writes by refill | writes by Velero |\n\
         |---|--|--:|--:|--:|--:|--:|--:|\n{}{}",
        args.large,
        args.small,
        apps.len(),
        row("refill, in place", refill),
        row("Velero alone (delete namespace, restore)", alone),
    )
}

//! `request-load`: many teams' DataRestoreRequests at once against one backup that
//! holds many PodVolumeBackups, answered by `refill controller` as a process of its own
//! on the local cluster. Every request must be answered (ended, or waiting for its
//! namespace's turn with a message), the controller must never exit, and its peak RSS
//! is printed against its limit in `manifests/deployment.yaml` (256 MiB).
//!
//! ```sh
//! cargo build --release --bin refill
//! cargo run -p refill-e2e-tools --release --bin request-load -- \
//!     --refill "$CARGO_TARGET_DIR/release/refill"   # 200 requests, 20 namespaces, 1000 PVBs
//! ```

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Result, bail, ensure};
use clap::Parser;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::PostParams;
use kube::{Api, Client};
use refill::api::DataRestoreRequest;
use refill_e2e::controller_process::{ControllerKind, ControllerProcess};
use refill_e2e::fixture::{self, PodVolume};
use serde_json::json;

/// The controller's memory limit in `manifests/deployment.yaml`.
const LIMIT_MIB: f64 = 256.0;

#[derive(Parser, Debug)]
struct Args {
    /// DataRestoreRequests created at once, spread evenly over the namespaces.
    #[arg(long, default_value_t = 200)]
    requests: usize,
    /// Team namespaces.
    #[arg(long, default_value_t = 20)]
    namespaces: usize,
    /// PodVolumeBackups in the one backup every request names.
    #[arg(long, default_value_t = 1000)]
    volumes: usize,
    /// The `refill` binary whose controller answers (a release build, as shipped).
    #[arg(long)]
    refill: PathBuf,
    /// How long every request has to be answered.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    timeout: Duration,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    ensure!(
        args.refill.is_file(),
        "{} is not a file",
        args.refill.display()
    );
    ensure!(
        args.namespaces > 0 && args.requests > 0,
        "--requests and --namespaces must be above 0"
    );
    let cluster = refill_e2e::cluster::cluster().await?;
    let admin = cluster.admin_client().await?;
    let run = &uuid::Uuid::new_v4().simple().to_string()[..6];
    let velero = format!("load-velero-{run}");
    let teams: Vec<String> = (0..args.namespaces)
        .map(|i| format!("load-{run}-{i}"))
        .collect();
    for ns in std::iter::once(&velero).chain(&teams) {
        let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}}))?;
        Api::<Namespace>::all(admin.clone())
            .create(&PostParams::default(), &namespace)
            .await?;
    }
    let result = load(&args, cluster, &admin, &velero, &teams).await;
    for ns in std::iter::once(&velero).chain(&teams) {
        let _ = Api::<Namespace>::all(admin.clone())
            .delete(ns, &Default::default())
            .await;
    }
    result
}

async fn load(
    args: &Args,
    cluster: &refill_e2e::Cluster,
    admin: &Client,
    velero: &str,
    teams: &[String],
) -> Result<()> {
    fixture::install_refill(admin, velero).await?;
    // The controller installed from manifests/ would answer these requests too.
    refill_e2e::in_cluster::remove_controller(admin, Duration::from_secs(120)).await?;
    let names: Vec<(String, String)> = (0..args.volumes)
        .map(|i| (format!("pod-{i}"), format!("claim-{i}")))
        .collect();
    let volumes: Vec<PodVolume> = names
        .iter()
        .enumerate()
        .map(|(i, (pod, claim))| PodVolume {
            namespace: &teams[i % teams.len()],
            pod,
            volume: "data",
            pvc: Some(claim),
            snapshot_id: claim,
            bytes: 1 << 20,
        })
        .collect();
    let made = Instant::now();
    fixture::velero_backup(admin, velero, "nightly", &volumes).await?;
    println!(
        "backup with {} PodVolumeBackups made in {:.1?}",
        args.volumes,
        made.elapsed()
    );

    let dir = std::env::temp_dir().join(format!("request-load-{velero}"));
    std::fs::create_dir_all(&dir)?;
    let mut controller = ControllerProcess::start(
        cluster,
        &ControllerKind::Refill(args.refill.clone()),
        velero,
        &dir,
    )
    .await?;
    let started = Instant::now();
    let creates = (0..args.requests).map(|i| {
        let ns = &teams[i % teams.len()];
        let requests: Api<DataRestoreRequest> = Api::namespaced(admin.clone(), ns);
        async move {
            let request: DataRestoreRequest = serde_json::from_value(json!({
                "apiVersion": "refill.dev/v1alpha1", "kind": "DataRestoreRequest",
                "metadata": {"name": format!("load-{i}")},
                "spec": {"backupName": "nightly"},
            }))?;
            requests.create(&PostParams::default(), &request).await?;
            anyhow::Ok(())
        }
    });
    futures::future::try_join_all(creates).await?;
    println!(
        "{} requests created in {:.1?}",
        args.requests,
        started.elapsed()
    );

    let mut peak = 0u64;
    let answered_at = loop {
        peak = peak.max(controller.peak_rss().unwrap_or(0));
        controller.ensure_running()?;
        let (answered, waiting) = answered(admin, teams).await?;
        if answered + waiting >= args.requests && waiting == 0 {
            break started.elapsed();
        }
        if started.elapsed() > args.timeout {
            bail!(
                "after {:?}: {answered} ended, {waiting} waiting, of {}",
                args.timeout,
                args.requests
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    peak = peak.max(controller.peak_rss().unwrap_or(0));
    let mib = peak as f64 / (1024.0 * 1024.0);
    println!(
        "| requests | namespaces | PodVolumeBackups | all answered | controller peak RSS | limit |\n|---:|---:|---:|---:|---:|---:|\n| {} | {} | {} | {:.1} s | {mib:.1} MiB | {LIMIT_MIB} MiB |",
        args.requests,
        teams.len(),
        args.volumes,
        answered_at.as_secs_f64(),
    );
    ensure!(mib < LIMIT_MIB, "peak RSS {mib:.1} MiB is over the limit");
    controller.ensure_running()?;
    Ok(())
}

/// How many of the requests in `teams` have ended, and how many are still going or
/// waiting for their turn.
async fn answered(admin: &Client, teams: &[String]) -> Result<(usize, usize)> {
    let (mut ended, mut going) = (0, 0);
    for ns in teams {
        let list = Api::<DataRestoreRequest>::namespaced(admin.clone(), ns)
            .list(&Default::default())
            .await?;
        for request in list.items {
            match request.status.map(|s| s.restore.phase.is_terminal()) {
                Some(true) => ended += 1,
                _ => going += 1,
            }
        }
    }
    Ok((ended, going))
}

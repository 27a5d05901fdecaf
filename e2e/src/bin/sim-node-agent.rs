//! A simulated Velero node agent for the local cluster: restores PodVolumeRestores
//! by copying snapshot directories into local PersistentVolumes. See
//! `refill_e2e::node_agent`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use refill_e2e::node_agent::{self, NodeAgentConfig};
use tracing_subscriber::EnvFilter;

/// Simulated Velero node agent: restores PodVolumeRestores by copying
/// `<snapshots>/<snapshotID>/` into the local or hostPath PersistentVolume behind
/// the pod volume, then releases the pod's restore-wait init container.
#[derive(Parser, Debug)]
#[command(name = "sim-node-agent", version)]
struct Args {
    /// Kubeconfig to use; without it, the usual inference ($KUBECONFIG,
    /// ~/.kube/config, in-cluster).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Namespace of Velero's PodVolumeRestores.
    #[arg(long, default_value = "velero")]
    velero_namespace: String,
    /// Node to serve (repeat for several); all nodes if none is given.
    #[arg(long = "node", value_name = "NODE")]
    nodes: Vec<String>,
    /// Directory with one subdirectory of files per snapshot ID.
    #[arg(long, value_name = "DIR")]
    snapshots: PathBuf,
    /// Copy at most this many bytes per second per restore (to watch progress).
    #[arg(long, value_name = "BYTES")]
    bytes_per_second: Option<u64>,
    /// Least time between two progress reports of one restore.
    #[arg(long, default_value = "250ms", value_parser = humantime::parse_duration)]
    progress_interval: Duration,
    /// Restores copying data at once on one node (Velero's default is 1).
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
}

async fn client(kubeconfig: Option<&PathBuf>) -> Result<Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("reading {}", path.display()))?;
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .with_context(|| format!("loading {}", path.display()))?
        }
        None => Config::infer()
            .await
            .context("finding a kubeconfig (give one with --kubeconfig)")?,
    };
    Ok(Client::try_from(config)?)
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| EnvFilter::new("info,refill_e2e=info")),
        )
        .with_writer(std::io::stderr)
        .init();

    let nodes = if args.nodes.is_empty() {
        "all nodes".to_string()
    } else {
        format!("node(s) {}", args.nodes.join(", "))
    };
    eprintln!(
        "sim-node-agent: this is a SIMULATED Velero node agent for {nodes}.\n\
         It restores a PodVolumeRestore by copying the files under {}/<snapshotID>/ \
         into the volume's local directory.\n\
         In a real cluster, Velero's node agent moves the data from the backup repository.",
        args.snapshots.display()
    );
    if !args.snapshots.is_dir() {
        tracing::warn!(
            "{} is not a directory (yet); every restore will fail until it is",
            args.snapshots.display()
        );
    }

    let client = client(args.kubeconfig.as_ref()).await?;
    let cfg = NodeAgentConfig {
        velero_namespace: args.velero_namespace,
        nodes: (!args.nodes.is_empty()).then_some(args.nodes),
        snapshots_dir: args.snapshots,
        progress_interval: args.progress_interval,
        bytes_per_second: args.bytes_per_second,
        concurrency_per_node: args.concurrency,
        write_log: None,
        stop_delay: Duration::ZERO,
    };
    tokio::select! {
        result = node_agent::run(client, cfg) => result,
        signal = tokio::signal::ctrl_c() => {
            signal.context("waiting for Ctrl-C")?;
            tracing::info!("interrupted; stopping");
            Ok(())
        }
    }
}

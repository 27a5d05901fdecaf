//! The benchmark's command line, behind `e2e/bench/run` (which builds refill in
//! release mode first); see the module above for what is measured.

use std::path::PathBuf;

use anyhow::{Result, bail};
use refill::api::ExtraFiles;
use refill_e2e::controller_process::ControllerKind;

/// `spec.extraFiles` as the command line names it.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum ExtraFilesArg {
    Delete,
    Keep,
}

/// Restore N PVCs with refill and with a kubectl script; compare time, API requests
/// and the controller's memory.
#[derive(clap::Parser, Debug)]
#[command(name = "bench")]
pub struct Args {
    /// Numbers of PVCs, one run each.
    #[arg(default_values_t = [10, 50, 100])]
    sizes: Vec<usize>,
    /// The `refill` binary whose controller is measured; without it this binary runs
    /// the same controller code in its place (`--controller-only`).
    #[arg(long, value_name = "PATH")]
    refill: Option<PathBuf>,
    /// Largest N the kubectl script restores in full; above it, it restores
    /// --baseline-sample PVCs and its time for N is extrapolated from those.
    #[arg(long, default_value_t = 100)]
    baseline_max: usize,
    /// PVCs the kubectl script restores where N is above --baseline-max (0: none).
    #[arg(long, default_value_t = 10)]
    baseline_sample: usize,
    /// Replicas of each Deployment.
    #[arg(long, default_value_t = 1)]
    replicas: i32,
    /// Write the markdown report here too.
    #[arg(long, value_name = "FILE")]
    results: Option<PathBuf>,
    /// Write the measurements here as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Keep namespaces, volumes and files afterwards.
    #[arg(long)]
    keep: bool,
    /// PVCs of the progress check, run once after the sizes: a restore whose node
    /// agent copies slowly and reports progress four times a second (0: skip it).
    #[arg(long, default_value_t = 5)]
    progress_pvcs: usize,
    /// Before each N, wait up to this many seconds for the machine's 1-minute load
    /// to fall below 1.0, so that sizes start equally quiet (`e2e/bench/run`: 180).
    #[arg(long, value_name = "SECONDS", default_value_t = 0)]
    quiet_wait: u64,
    /// What refill's restores do with files the backup does not hold: `delete` (refill's
    /// default: the volume ends as the backup holds it) or `keep` (the price of that
    /// exactness: the volume is not cleared first nor tidied after).
    #[arg(long, value_enum, default_value_t = ExtraFilesArg::Delete)]
    extra_files: ExtraFilesArg,
    /// Measure refill alone with `parallel: N`: no floors, no default-parallel run, no
    /// kubectl script, no progress check; for sizes the full run would take hours over
    /// (10,000). Writes only its own section of the results.
    #[arg(long)]
    refill_only: bool,
    /// With --refill-only and one N: go on with the setup of run ID, whose namespaces,
    /// PVs and claims a setup that stopped made (at 10,000 claims, a quarter of an
    /// hour of it).
    #[arg(long, value_name = "ID", requires = "refill_only")]
    resume_run: Option<String>,
    /// How the command is shown in the report.
    #[arg(long, hide = true)]
    command: Option<String>,

    /// Run only the controller (what `refill controller` runs), for the benchmark's
    /// own use.
    #[arg(long, hide = true)]
    controller_only: bool,
    #[arg(long, hide = true)]
    kubeconfig: Option<PathBuf>,
    #[arg(long, short = 'n', hide = true, default_value = "velero")]
    namespace: String,
    #[arg(long, hide = true, default_value = "127.0.0.1:8080")]
    probe_addr: std::net::SocketAddr,
}

/// Runs what the command line asks for.
pub async fn main(args: Args) -> Result<()> {
    if args.controller_only {
        return controller_only(args).await;
    }
    if args.sizes.contains(&0) {
        bail!("every N must be at least 1");
    }
    let most = refill::api::bounds::CLAIMS as usize;
    if !args.refill_only && args.sizes.iter().any(|&n| n > most) {
        bail!(
            "above N = {most} only --refill-only runs: its claims are selected by label, where \
             the kubectl script's would be selected too"
        );
    }
    let controller = match &args.refill {
        Some(path) if path.is_file() => ControllerKind::Refill(path.clone()),
        Some(path) => bail!("{} is not a file", path.display()),
        None => ControllerKind::SelfExec,
    };
    let command = args.command.clone().unwrap_or_else(|| {
        let sizes: Vec<String> = args.sizes.iter().map(ToString::to_string).collect();
        format!("bench {}", sizes.join(" "))
    });
    let options = super::Options {
        sizes: args.sizes.clone(),
        baseline_max: args.baseline_max,
        baseline_sample: args.baseline_sample,
        replicas: args.replicas,
        controller,
        results: args.results.clone(),
        json: args.json.clone(),
        command,
        keep: args.keep,
        progress_pvcs: args.progress_pvcs,
        quiet_wait: std::time::Duration::from_secs(args.quiet_wait),
        extra_files: match args.extra_files {
            ExtraFilesArg::Delete => ExtraFiles::Delete,
            ExtraFilesArg::Keep => ExtraFiles::Keep,
        },
        refill_only: args.refill_only,
        resume_run: args.resume_run.clone(),
    };
    let cluster = refill_e2e::cluster().await?;
    super::run(cluster, &options).await?;
    Ok(())
}

/// What `refill controller` does, minus the command line.
async fn controller_only(args: Args) -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,kube=warn".into()),
        )
        .init();
    let client = refill::controller::client(args.kubeconfig.as_deref(), None).await?;
    let config = refill::controller::Config {
        namespace: args.namespace,
        ..Default::default()
    };
    let ready = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let probes = refill::controller::runtime::health::bind(args.probe_addr).await?;
    tokio::spawn(refill::controller::runtime::health::serve(
        probes,
        ready.clone(),
        config.metrics.clone(),
    ));
    refill::controller::run_with_readiness(client, config, ready).await
}

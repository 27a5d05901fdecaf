//! The `refill` binary: the command line (`restore`, `schedule`, `backup`, `crds`, `completion`)
//! and the controller (`controller`), each a thin layer over the `refill` library.

use clap::{Parser, Subcommand};

/// See Cargo.toml: memory a restore has freed goes back to the system.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Put the files of chosen PVCs back as a Velero file-system backup holds them,
/// restoring no other object.
#[derive(Parser)]
#[command(name = "refill", version, about, after_help = refill::cli::AFTER_HELP)]
struct Cli {
    #[command(flatten)]
    global: refill::cli::GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print refill's CustomResourceDefinitions as YAML.
    Crds,
    /// Restore PVC data from a Velero backup, and follow, list and describe restores.
    Restore {
        #[command(subcommand)]
        command: refill::cli::RestoreCommand,
    },
    /// Restore the same PVCs again and again: on each new backup of a Velero Schedule,
    /// and/or at cron times.
    Schedule {
        #[command(subcommand)]
        command: refill::cli::ScheduleCommand,
    },
    /// Look into Velero backups: which volumes refill can restore.
    Backup {
        #[command(subcommand)]
        command: refill::cli::BackupCommand,
    },
    /// Run the controller that carries out DataRestores.
    Controller {
        /// Where /healthz, /readyz and /metrics (Prometheus) answer.
        #[arg(long, default_value = "0.0.0.0:8080", env = "REFILL_PROBE_ADDR")]
        probe_addr: std::net::SocketAddr,
        /// `json`: one JSON object per log line (time, level, target, message and
        /// fields), for log collectors.
        #[arg(long, value_enum, default_value_t = LogFormat::Text, env = "REFILL_LOG_FORMAT")]
        log_format: LogFormat,
        /// Also carry out teams' DataRestoreRequests, in every namespace (one
        /// controller per cluster should).
        #[arg(long, default_value_t = true, action = clap::ArgAction::Set, env = "REFILL_REQUESTS")]
        requests: bool,
        /// Also fill claims whose `spec.dataSourceRef` names a BackupVolume, in every
        /// namespace (refill as a volume populator; one controller per cluster should).
        #[arg(long, default_value_t = true, action = clap::ArgAction::Set, env = "REFILL_POPULATOR")]
        populator: bool,
        /// The image of refill's copier pods (a direct restore's clearing, a staged or
        /// path restore's copy): refill's own, which runs `refill copy`. Give the
        /// controller's image.
        #[arg(long, env = "REFILL_COPIER_IMAGE", default_value = refill::controller::DEFAULT_COPIER_IMAGE)]
        copier_image: String,
        /// Passes each controller (DataRestores, DataRestoreRequests,
        /// DataRestoreSchedules) runs at once; more wait their turn.
        #[arg(long, env = "REFILL_CONCURRENCY", default_value_t = refill::controller::DEFAULT_CONCURRENCY,
              value_parser = clap::value_parser!(u16).range(1..))]
        concurrency: u16,
        /// DataRestoreRequests of one namespace carried out at once; later ones wait
        /// for their turn, oldest first.
        #[arg(long, env = "REFILL_REQUESTS_PER_NAMESPACE",
              default_value_t = refill::controller::DEFAULT_REQUESTS_PER_NAMESPACE,
              value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
        requests_per_namespace: usize,
        /// What teams' DataRestoreRequests may do with the Flux and Argo CD objects
        /// managing their workloads: `pause` (they may ask Pause, their default),
        /// `ignore` (Pause is carried out as Ignore), `refuse` (a request asking Pause
        /// is refused). DataRestores are not limited by it.
        #[arg(long, value_enum, default_value_t = refill::controller::RequestGitOps::Pause, env = "REFILL_REQUEST_GITOPS")]
        request_gitops: refill::controller::RequestGitOps,
        /// How long a node may be NotReady or unreachable before refill gives up the
        /// stand-in or copier pods waiting on it (removing them without the kubelet's
        /// word when nothing there may write, failing a volume that cannot start
        /// there). A node agent or copier that may still be writing is never given up.
        #[arg(long, env = "REFILL_NODE_GRACE", default_value = "2m",
              value_parser = humantime::parse_duration)]
        node_grace: std::time::Duration,
        #[command(flatten)]
        election: ElectionArgs,
    },
    /// Copy chosen paths of a restored snapshot into a volume, or its whole tree,
    /// keeping owners, modes, times, links and extended attributes; or empty a volume
    /// (what refill's copier pods run).
    Copy(refill::copy::CopyArgs),
    /// Print a shell completion script, e.g. `refill completion bash > /etc/bash_completion.d/refill`.
    Completion { shell: clap_complete::Shell },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "info,kube=warn".into());
    let logs = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        LogFormat::Text => logs.init(),
        LogFormat::Json => logs.json().flatten_event(true).init(),
    }
}

/// Leader election among the controller's replicas.
#[derive(clap::Args)]
struct ElectionArgs {
    /// Work only while holding the Lease, so that several replicas can run: one
    /// works, the others stand by. `--leader-elect=false` for a single replica
    /// that needs no Lease.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, env = "REFILL_LEADER_ELECT")]
    leader_elect: bool,
    /// The Lease, in the controller's namespace.
    #[arg(long, default_value = refill::controller::runtime::leader::Election::DEFAULT_LEASE_NAME)]
    lease_name: String,
    /// How long a lease not renewed stays valid: a standby takes over at most this
    /// long after the leader died.
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    lease_duration: std::time::Duration,
    /// This replica's name in the Lease; default: the pod's name, else the host's.
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
}

impl ElectionArgs {
    fn election(&self) -> anyhow::Result<Option<refill::controller::runtime::leader::Election>> {
        if !self.leader_elect {
            return Ok(None);
        }
        let seconds = self.lease_duration.as_secs();
        if seconds < 2 {
            anyhow::bail!("--lease-duration must be at least 2s, not {seconds}s");
        }
        let identity = match &self.identity {
            Some(name) => name.clone(),
            None => hostname()?,
        };
        Ok(Some(refill::controller::runtime::leader::Election {
            lease_name: self.lease_name.clone(),
            identity,
            duration_seconds: seconds,
            // A third of the lease, as client-go's 10 s renew deadline of a 15 s lease
            // leaves 5 s.
            grace_seconds: (seconds / 3).max(1),
        }))
    }
}

fn hostname() -> anyhow::Result<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")?;
    Ok(format!("{}-{}", name.trim(), std::process::id()))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Crds => print!("{}", refill::crds::to_yaml(&refill::crds::refill_crds())?),
        Command::Restore { command } => {
            refill::cli::exit(refill::cli::restore(&cli.global, command).await)
        }
        Command::Schedule { command } => {
            refill::cli::exit(refill::cli::schedule(&cli.global, command).await)
        }
        Command::Backup { command } => {
            refill::cli::exit(refill::cli::backup(&cli.global, command).await)
        }
        Command::Controller {
            probe_addr,
            log_format,
            requests,
            populator,
            copier_image,
            concurrency,
            requests_per_namespace,
            request_gitops,
            node_grace,
            election,
        } => {
            init_logging(log_format);
            let election = election.election()?;
            let client = refill::controller::client(
                cli.global.kubeconfig.as_deref(),
                cli.global.context.clone(),
            )
            .await?;
            let config = refill::controller::Config {
                namespace: cli.global.namespace.clone(),
                requests,
                populator,
                copier_image,
                concurrency,
                requests_per_namespace,
                request_git_ops: request_gitops,
                node_grace,
                ..Default::default()
            };
            let ready = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let metrics = config.metrics.clone();
            let probes = refill::controller::runtime::health::bind(probe_addr)
                .await
                .map_err(|e| anyhow::anyhow!("--probe-addr {probe_addr}: {e}"))?;
            tokio::spawn(refill::controller::runtime::health::serve(
                probes,
                ready.clone(),
                metrics.clone(),
            ));
            let Some(election) = election else {
                metrics.set_leader(true);
                return refill::controller::run_with_readiness(client, config, ready).await;
            };
            let namespace = config.namespace.clone();
            let work = {
                let (client, ready) = (client.clone(), ready.clone());
                move || {
                    metrics.set_leader(true);
                    refill::controller::run_with_readiness(client, config, ready)
                }
            };
            match refill::controller::runtime::leader::run(
                client, &namespace, &election, ready, work,
            )
            .await
            {
                Err(e) if e.is::<refill::controller::runtime::leader::Lost>() => {
                    tracing::error!("{e}");
                    // Now, not after the runtime has wound its tasks down: a replica
                    // that is no longer the leader writes nothing more.
                    std::process::exit(1);
                }
                outcome => outcome?,
            }
        }
        Command::Copy(args) => std::process::exit(refill::copy::run(&args)),
        Command::Completion { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut command, "refill", &mut std::io::stdout());
        }
    }
    Ok(())
}

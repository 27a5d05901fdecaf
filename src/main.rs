use clap::{Parser, Subcommand};

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
    /// Look into Velero backups: which volumes refill can restore.
    Backup {
        #[command(subcommand)]
        command: refill::cli::BackupCommand,
    },
    /// Run the controller that carries out DataRestores.
    Controller {
        /// Where /healthz and /readyz answer.
        #[arg(long, default_value = "0.0.0.0:8080", env = "REFILL_PROBE_ADDR")]
        probe_addr: std::net::SocketAddr,
    },
    /// Print a shell completion script, e.g. `refill completion bash > /etc/bash_completion.d/refill`.
    Completion { shell: clap_complete::Shell },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Crds => print!("{}", refill::crds::to_yaml(&refill::crds::refill_crds())?),
        Command::Restore { command } => {
            refill::cli::exit(refill::cli::restore(&cli.global, command).await)
        }
        Command::Backup { command } => {
            refill::cli::exit(refill::cli::backup(&cli.global, command).await)
        }
        Command::Controller { probe_addr } => {
            tracing_subscriber::fmt()
                .with_env_filter(
                    tracing_subscriber::EnvFilter::try_from_default_env()
                        .unwrap_or_else(|_| "info,kube=warn".into()),
                )
                .init();
            let client = refill::controller::client(
                cli.global.kubeconfig.as_deref(),
                cli.global.context.clone(),
            )
            .await?;
            let config = refill::controller::Config {
                namespace: cli.global.namespace.clone(),
                ..Default::default()
            };
            let ready = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            tokio::spawn(refill::controller::health::serve(probe_addr, ready.clone()));
            refill::controller::run_with_readiness(client, config, ready).await?;
        }
        Command::Completion { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut command, "refill", &mut std::io::stdout());
        }
    }
    Ok(())
}

use clap::{Parser, Subcommand};

/// Put the files of chosen PVCs back as a Velero file-system backup holds them,
/// restoring no other object.
#[derive(Parser)]
#[command(name = "refill", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the CustomResourceDefinitions as YAML.
    Crds {
        /// Print the Velero kinds refill uses instead (for clusters without Velero).
        #[arg(long)]
        velero: bool,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Crds { velero } => {
            let crds = if velero {
                refill::crds::velero_crds()
            } else {
                refill::crds::refill_crds()
            };
            print!("{}", refill::crds::to_yaml(&crds)?);
        }
    }
    Ok(())
}

//! The benchmark: refill against a kubectl runbook, restoring N PVCs on the local
//! cluster. Run it with `e2e/bench/run`; see `refill_e2e_tools::bench` for what is measured.

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    refill_e2e_tools::bench::cli::main(refill_e2e_tools::bench::cli::Args::parse()).await
}

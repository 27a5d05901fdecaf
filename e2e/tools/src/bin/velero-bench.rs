//! The benchmark on real data behind `e2e/bench/velero`; see
//! `refill_e2e_tools::velero_bench`.

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    refill_e2e_tools::velero_bench::main(refill_e2e_tools::velero_bench::Args::parse()).await
}

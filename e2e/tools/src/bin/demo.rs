//! The demo behind `e2e/demo`; see `refill_e2e_tools::demo`.

use clap::Parser;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    refill_e2e_tools::demo::main(refill_e2e_tools::demo::Args::parse()).await
}

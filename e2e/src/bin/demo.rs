//! The demo behind `e2e/demo`; see `refill_e2e::demo`.

use clap::Parser;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    refill_e2e::demo::main(refill_e2e::demo::Args::parse()).await
}

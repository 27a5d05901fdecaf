//! The `refill` command line, apart from `crds` and `controller`: creating, following,
//! listing and describing DataRestores and DataRestoreSchedules, and looking into
//! Velero backups.
//!
//! Exit codes (also in `refill --help`):
//!
//! | code | meaning |
//! |------|---------|
//! | 0    | success; with `--wait`, the restore ended Completed |
//! | 1    | error, or invalid input (including a request validation refuses) |
//! | 2    | usage error: wrong flags or arguments (clap) |
//! | 3    | the restore ended PartiallyFailed, Failed or Canceled |
//! | 4    | no refill controller picked up the restore |
//! | 130  | interrupted while waiting; the restore goes on |
//!
//! Formatting and parsing are pure functions with their tests beside them; the
//! modules that call the API are thin.

mod args;
mod backup;
mod client;
mod create;
mod delete;
mod describe;
mod dry_run;
mod errors;
mod format;
mod get;
mod how;
mod output;
mod progress;
mod schedule;
pub(crate) mod selector;
mod spec;
mod wait;

use std::io::Write;

pub use args::{AFTER_HELP, BackupCommand, GlobalArgs, RestoreCommand, ScheduleCommand};
pub(crate) use errors::{CliError, EXIT_OK};

pub use client::USER_AGENT;

use client::Ctx;

/// Runs `refill restore ...`; returns the exit code.
pub async fn restore(global: &GlobalArgs, command: RestoreCommand) -> u8 {
    connected(global, async |ctx| match &command {
        RestoreCommand::Create(args) => create::create(ctx, args).await,
        RestoreCommand::Get(args) => get::get(ctx, args).await,
        RestoreCommand::Describe(args) => describe::describe(ctx, args).await,
        RestoreCommand::Wait(args) => create::wait(ctx, args).await,
        RestoreCommand::Delete(args) => delete::delete(ctx, args).await,
    })
    .await
}

/// Runs `refill schedule ...`; returns the exit code.
pub async fn schedule(global: &GlobalArgs, command: ScheduleCommand) -> u8 {
    connected(global, async |ctx| schedule::run(ctx, &command).await).await
}

/// Runs `refill backup ...`; returns the exit code.
pub async fn backup(global: &GlobalArgs, command: BackupCommand) -> u8 {
    connected(global, async |ctx| backup::run(ctx, &command).await).await
}

/// Connects to the cluster, runs `command`, and gives its exit code.
async fn connected(
    global: &GlobalArgs,
    command: impl AsyncFnOnce(&Ctx) -> Result<(), CliError>,
) -> u8 {
    report(
        async {
            let ctx = Ctx::connect(global).await?;
            command(&ctx).await
        }
        .await,
    )
}

/// Prints the error, if any, and gives the exit code.
fn report(result: Result<(), CliError>) -> u8 {
    match result {
        Ok(()) => EXIT_OK,
        Err(e) => {
            let _ = std::io::stdout().flush();
            eprintln!("error: {}", e.message);
            e.code
        }
    }
}

/// Ends the process with `code` after flushing stdout.
pub fn exit(code: u8) -> ! {
    let _ = std::io::stdout().flush();
    std::process::exit(i32::from(code))
}

//! `refill restore delete NAME [--wait]`.

use std::time::Duration;

use kube::ResourceExt;
use kube::api::DeleteParams;
use kube::runtime::wait::{await_condition, conditions};

use crate::api::DataRestore;

use super::args::DeleteArgs;
use super::client::Ctx;
use super::errors::{CliError, EXIT_INTERRUPTED, Kind, Result, Target};

/// When to remind that deletion waits for the controller.
const PATIENCE: Duration = Duration::from_secs(20);

pub(super) async fn delete(ctx: &Ctx, args: &DeleteArgs) -> Result<()> {
    let name = &args.name;
    let ns = &ctx.namespace;
    let target = Target::one(Kind::DataRestore, name, ns);
    let api = ctx.api::<DataRestore>();
    let answer = api
        .delete(name, &DeleteParams::default())
        .await
        .map_err(|e| ctx.error(&e, target))?;
    // The object comes back while finalizers hold it; a status once it is gone.
    let Some(dr) = answer.left() else {
        println!("restore \"{name}\" deleted");
        return Ok(());
    };
    if !args.wait {
        println!(
            "restore \"{name}\" is being deleted: the controller first stops the restore and brings stopped consumers back"
        );
        return Ok(());
    }
    eprintln!("restore \"{name}\" is being deleted; waiting until the controller has rolled back");
    let uid = dr.uid().unwrap_or_default();
    let gone = await_condition(api, name, conditions::is_deleted(&uid));
    tokio::pin!(gone);
    let reminder = tokio::time::sleep(PATIENCE);
    tokio::pin!(reminder);
    let mut reminded = false;
    loop {
        tokio::select! {
            result = &mut gone => {
                result.map_err(|e| CliError::new(format!("waiting for restore \"{name}\" to go: {e}")))?;
                println!("restore \"{name}\" deleted");
                return Ok(());
            }
            _ = &mut reminder, if !reminded => {
                reminded = true;
                eprintln!(
                    "still there after {}s: its finalizer stays until a refill controller has rolled back; is `refill controller` running?",
                    PATIENCE.as_secs()
                );
            }
            _ = tokio::signal::ctrl_c() => {
                return Err(CliError::with_code(
                    EXIT_INTERRUPTED,
                    format!("stopped waiting; restore \"{name}\" is still being deleted"),
                ));
            }
        }
    }
}

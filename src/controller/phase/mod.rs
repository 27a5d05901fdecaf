//! The DataRestore's state machine, a file per phase (see [`crate::api::Phase`]):
//!
//! ```text
//! New ─▶ Validating ─▶ Restoring ─▶ Finalizing ─▶ Completed | PartiallyFailed | Failed | Canceled
//!             └──(invalid)──────────────────────▶ Failed
//! ```
//!
//! A pass runs the current phase once. It changes only the status it is handed; the
//! caller writes that status before anything acts on it (records before effects).

mod finalizing;
mod restoring;
mod validating;

pub use restoring::DEFAULT_PARALLEL;

use std::time::Duration;

use crate::api::{DataRestore, DataRestoreStatus, Phase};

use super::{Context, Result};

/// What happens after a pass's status is written: the one answer every phase gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Next {
    /// Pass again at once, from the status just written: it recorded decisions that the
    /// next pass acts on.
    Again,
    /// Look again after a while, for what no watch announces (timeouts, waits).
    After(Duration),
    /// The restore ended: nothing is left to roll back, the finalizer may go.
    Done,
}

/// Whether the restore is asked to stop: canceled or deleted.
pub(super) fn stopping(dr: &DataRestore, deleting: bool) -> bool {
    deleting || dr.spec.cancel
}

/// Runs the current phase once, on `status`, a copy of `loaded`: the status as the
/// cluster holds it, against which a phase tells what it changed without a copy of its
/// own.
pub(super) async fn pass(
    dr: &DataRestore,
    ctx: &Context,
    loaded: &DataRestoreStatus,
    status: &mut DataRestoreStatus,
    deleting: bool,
) -> Result<Next> {
    match status.phase {
        Phase::New => Ok(validating::accept(status)),
        Phase::Validating => validating::validate(dr, ctx, status, deleting).await,
        Phase::Restoring => restoring::restore(dr, ctx, loaded, status, deleting).await,
        Phase::Finalizing => finalizing::finalize(dr, ctx, status, deleting).await,
        Phase::Completed | Phase::PartiallyFailed | Phase::Failed | Phase::Canceled => {
            Ok(Next::Done)
        }
    }
}

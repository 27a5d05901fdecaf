//! What the controllers of refill's other kinds (DataRestoreRequests,
//! DataRestoreSchedules) share: how their status is written and how a failed pass is
//! retried.

use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use tracing::warn;

use crate::labels::FIELD_MANAGER;

use super::context::Context;
use super::error::{Error, Result};

/// Writes the status of the `kind` object `name` with server-side apply, so that
/// fields the status no longer has really go.
pub async fn apply_status<K>(
    api: &Api<K>,
    kind: &str,
    name: &str,
    status: &impl serde::Serialize,
) -> Result<()>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let body = json!({
        "apiVersion": crate::api::API_VERSION,
        "kind": kind,
        "status": status,
    });
    api.patch_status(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(body),
    )
    .await?;
    Ok(())
}

/// After a failed pass over `object`: counted, and retried with the object's own
/// backoff.
pub fn retry_later<K: Resource>(object: &K, what: &str, error: &Error, ctx: &Context) -> Action {
    let uid = object.uid().unwrap_or_default();
    ctx.config.metrics.reconcile_failed(error.category());
    let delay = ctx.backoffs.next(&uid);
    warn!(name = %object.name_any(), "{what}: will retry in {delay:?}: {error}");
    Action::requeue(delay)
}

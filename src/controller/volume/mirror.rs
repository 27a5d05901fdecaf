//! Each volume's VolumePluginRestore mirrors its record, for tools that read Velero's
//! volume-plugin progress.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::api::{DataRestore, VolumePluginRestore, VolumeStatus};
use crate::controller::pod_volume_restore as pvr;
use crate::controller::{Context, Result};
use crate::labels::FIELD_MANAGER;
use kube::Api;

/// Mirrors a volume into its VolumePluginRestore when anything but throttled progress changed.
pub async fn sync_plugin_restore(
    dr: &DataRestore,
    ctx: &Context,
    volume: &VolumeStatus,
    vprs: &BTreeMap<String, Arc<VolumePluginRestore>>,
) -> Result<()> {
    let Some(name) = &volume.pod_volume_restore else {
        return Ok(());
    };
    let Some(existing) = vprs.get(name) else {
        return Ok(());
    };
    let key = format!("{}/{name}", dr.uid().unwrap_or_default());
    let wanted = pvr::plugin_status(volume);
    // refill is the only writer of this status: what it wrote last is what is there,
    // even before the watch shows it.
    let current = ctx
        .last_mirrored(&key)
        .unwrap_or_else(|| existing.status.clone().unwrap_or_default());
    if current == wanted {
        return Ok(());
    }
    let progress_only = {
        let mut a = current.clone();
        let mut b = wanted.clone();
        a.progress = None;
        b.progress = None;
        a == b
    };
    if progress_only && ctx.progress_wait(&key).is_some() {
        return Ok(());
    }
    let body = json!({
        "apiVersion": crate::api::API_VERSION,
        "kind": "VolumePluginRestore",
        "status": &wanted,
    });
    Api::<VolumePluginRestore>::namespaced(ctx.client.clone(), &ctx.config.namespace)
        .patch_status(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(body),
        )
        .await?;
    ctx.wrote(&key, None);
    ctx.mirrored(&key, wanted);
    Ok(())
}

//! What a pass sees of a volume in Switching: the workloads to switch onto its new
//! claim, and their pods that still mount the PVC. The PVC's other consumers keep it
//! and are not looked at.

use kube::ResourceExt;

use crate::api::{ConsumerRecord, VolumeStatus};
use crate::controller::volume::decide::VolumeSeen;
use crate::controller::{Context, Result};
use crate::observe;
use crate::plan::Owner;

use super::{consumers, restarted, split};

pub(super) async fn seen(
    ctx: &Context,
    uid: &str,
    of_claim: &[&ConsumerRecord],
    volume: &VolumeStatus,
) -> Result<VolumeSeen> {
    let (ns, claim) = split(&volume.pvc);
    let records: Vec<&ConsumerRecord> = of_claim
        .iter()
        .copied()
        .filter(|c| c.switch_to.is_some())
        .collect();
    let mounting = observe::consumers::pods_mounting(ctx.reads(), ns, &[claim]).await?;
    let owners = observe::consumers::top_owners(ctx.reads(), ns, &mounting).await?;
    let mut foreign_pods = Vec::new();
    let mut live_since = Vec::new();
    for (pod, owner) in mounting.iter().zip(owners) {
        let Owner::Known(kind, name) = owner else {
            continue;
        };
        if !records.iter().any(|r| r.kind == kind && r.name == name) {
            continue;
        }
        if pod.metadata.deletion_timestamp.is_none() {
            live_since.push(pod.metadata.creation_timestamp.as_ref().map(|t| t.0));
        }
        foreign_pods.push(pod.name_any());
    }
    Ok(VolumeSeen {
        consumers: consumers(of_claim, true),
        foreign_pods,
        restarted: restarted(ctx, uid, records.into_iter(), &live_since).await?,
        ..Default::default()
    })
}

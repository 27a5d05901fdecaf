//! The workloads labelled to be switched onto a new claim (`switchWorkloads`).

use kube::Client;

use crate::labels;
use crate::plan::{Labelled, Listed};

use super::paging::for_each_shaped;
use super::workloads::of_every_kind;

/// Every workload of `namespace` that carries [`labels::SWITCH_CLAIM`], of any kind
/// whose pod template can mount a claim ([`super::workloads::TEMPLATE_KINDS`]): the kinds that cannot be switched are read
/// too, so that a label on one is refused by name rather than ignored.
pub(crate) async fn labelled_workloads(
    client: &Client,
    namespace: &str,
) -> kube::Result<Vec<Labelled>> {
    of_every_kind(|kind| async move {
        let mut found = Vec::new();
        let resource = kind.api_resource();
        let each = |listed: Listed| {
            let claim = listed.label(labels::SWITCH_CLAIM).unwrap_or_default();
            // By name only: a StatefulSet's claims from volumeClaimTemplates cannot be
            // switched.
            let mounts_by_name = listed.claim_names(kind).any(|c| c == claim);
            found.push(Labelled {
                kind,
                namespace: namespace.to_string(),
                name: listed.metadata.name.clone().unwrap_or_default(),
                mounts_by_name,
                owned: !listed.is_top(kind),
                claim: claim.to_string(),
                replicas: listed.replicas(kind),
                switched_from: listed.annotation(labels::SWITCHED_FROM).map(str::to_string),
            });
        };
        for_each_shaped(
            client,
            &resource,
            Some(namespace),
            labels::SWITCH_CLAIM,
            each,
        )
        .await?;
        Ok(found)
    })
    .await
}

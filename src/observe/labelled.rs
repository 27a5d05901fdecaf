//! The workloads labelled to be switched onto a new claim (`switchWorkloads`).

use kube::api::{DynamicObject, ListParams};
use kube::{Api, Client};

use crate::labels;
use crate::plan::{Labelled, is_top_workload, template_claim_names};

use super::{TEMPLATE_KINDS, replicas};

/// Every workload of `namespace` that carries [`labels::SWITCH_CLAIM`], of any kind
/// whose pod template can mount a claim: the kinds that cannot be switched are read
/// too, so that a label on one is refused by name rather than ignored.
pub async fn labelled_workloads(client: &Client, namespace: &str) -> kube::Result<Vec<Labelled>> {
    let lists = TEMPLATE_KINDS.map(|kind| async move {
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), namespace, &kind.api_resource());
        let params = ListParams::default().labels(labels::SWITCH_CLAIM);
        let found = api.list(&params).await?.items.into_iter().map(move |obj| {
            let name = obj.metadata.name.clone().unwrap_or_default();
            let claim = obj
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(labels::SWITCH_CLAIM))
                .cloned()
                .unwrap_or_default();
            let switched_from = obj
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(labels::SWITCHED_FROM))
                .cloned();
            let replicas = kind.is_scalable().then(|| replicas(&obj));
            let mut json = obj.data;
            json["metadata"]["ownerReferences"] =
                serde_json::to_value(&obj.metadata.owner_references).unwrap_or_default();
            // By name only: a StatefulSet's claims from volumeClaimTemplates cannot be
            // switched.
            let mounts_by_name = template_claim_names(kind, &json).contains(&Some(&*claim));
            Labelled {
                kind,
                namespace: namespace.to_string(),
                name,
                mounts_by_name,
                owned: !is_top_workload(kind, &json),
                claim,
                replicas,
                switched_from,
            }
        });
        Ok::<_, kube::Error>(found.collect::<Vec<_>>())
    });
    Ok(futures::future::try_join_all(lists)
        .await?
        .into_iter()
        .flatten()
        .collect())
}

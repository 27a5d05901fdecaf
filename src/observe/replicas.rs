//! The replica counts scalable workloads ask for.

use kube::api::DynamicObject;
use kube::{Api, Client};

use crate::api::ConsumerKind;

/// The replica count a scalable workload asks for now (`spec.replicas`, default 1).
pub(crate) async fn replicas_of(
    client: &Client,
    namespace: &str,
    kind: ConsumerKind,
    name: &str,
) -> kube::Result<Option<i32>> {
    if !kind.is_scalable() {
        return Ok(None);
    }
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &kind.api_resource());
    Ok(api.get_opt(name).await?.map(|obj| replicas(&obj)))
}

/// `spec.replicas` of a scalable workload (Kubernetes' default is 1).
pub(crate) fn replicas(obj: &DynamicObject) -> i32 {
    obj.data["spec"]["replicas"]
        .as_i64()
        .map(|r| r as i32)
        .unwrap_or(1)
}

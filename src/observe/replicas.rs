//! The replica counts scalable workloads ask for.

use kube::api::DynamicObject;
use kube::{Api, Client};

use crate::api::ConsumerKind;
use crate::plan::replicas_asked;

/// The replica count a scalable workload asks for, as a restore records it (see
/// [`replicas_asked`]).
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
    Ok(api
        .get_opt(name)
        .await?
        .map(|obj| replicas_asked(spec_replicas(&obj), obj.metadata.annotations.as_ref())))
}

/// `spec.replicas` of a scalable workload (Kubernetes' default is 1): what it is
/// scaled to now.
pub(crate) fn replicas(obj: &DynamicObject) -> i32 {
    spec_replicas(obj).unwrap_or(1)
}

fn spec_replicas(obj: &DynamicObject) -> Option<i32> {
    obj.data["spec"]["replicas"].as_i64().map(|r| r as i32)
}

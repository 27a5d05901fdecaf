//! CRD manifests, generated from the Rust types so that the YAML under `manifests/`
//! can never drift from the code (CI regenerates and compares).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::api::{DataRestore, DataRestoreRequest, DataRestoreSchedule, VolumePluginRestore};

/// refill's own kinds: what `manifests/crds.yaml` holds.
pub fn refill_crds() -> Vec<CustomResourceDefinition> {
    vec![
        DataRestore::crd(),
        DataRestoreRequest::crd(),
        DataRestoreSchedule::crd(),
        VolumePluginRestore::crd(),
    ]
}

/// Renders CRDs as one multi-document YAML stream.
pub fn to_yaml(crds: &[CustomResourceDefinition]) -> anyhow::Result<String> {
    let mut out = String::new();
    for crd in crds {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(crd)?);
    }
    Ok(out)
}

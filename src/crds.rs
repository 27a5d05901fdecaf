//! CRD manifests, generated from the Rust types so that the YAML under `manifests/`
//! can never drift from the code (CI regenerates and compares).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps,
};
use kube::CustomResourceExt;

use crate::api::{
    Backup, BackupStorageLocation, DataRestore, PodVolumeBackup, PodVolumeRestore, Schedule,
    VolumePluginRestore,
};

/// refill's own kinds: what `manifests/crds.yaml` holds.
pub fn refill_crds() -> Vec<CustomResourceDefinition> {
    vec![DataRestore::crd(), VolumePluginRestore::crd()]
}

/// The Velero kinds refill uses, for clusters without Velero (tests, the demo). Their
/// schema keeps every field, as Velero's own CRDs describe far more than refill reads.
pub fn velero_crds() -> Vec<CustomResourceDefinition> {
    [
        Backup::crd(),
        Schedule::crd(),
        BackupStorageLocation::crd(),
        PodVolumeBackup::crd(),
        PodVolumeRestore::crd(),
    ]
    .into_iter()
    .map(with_open_schema)
    .collect()
}

fn with_open_schema(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    let open = || JSONSchemaProps {
        type_: Some("object".into()),
        x_kubernetes_preserve_unknown_fields: Some(true),
        ..Default::default()
    };
    let schema = JSONSchemaProps {
        type_: Some("object".into()),
        properties: Some(
            [("spec".to_string(), open()), ("status".to_string(), open())]
                .into_iter()
                .collect(),
        ),
        ..Default::default()
    };
    for version in &mut crd.spec.versions {
        version.schema = Some(
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceValidation {
                open_api_v3_schema: Some(schema.clone()),
            },
        );
    }
    crd
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

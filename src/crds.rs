//! CRD manifests, generated from the Rust types so that the YAML under `manifests/`
//! can never drift from the code (CI regenerates and compares).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::api::{
    BackupVolume, DataRestore, DataRestoreRequest, DataRestoreSchedule, VolumePluginRestore,
};

/// refill's own kinds: what `manifests/crds.yaml` holds.
pub fn refill_crds() -> Vec<CustomResourceDefinition> {
    vec![
        DataRestore::crd(),
        DataRestoreRequest::crd(),
        DataRestoreSchedule::crd(),
        VolumePluginRestore::crd(),
        BackupVolume::crd(),
    ]
}

/// Renders CRDs as one multi-document YAML stream.
pub fn to_yaml(crds: &[CustomResourceDefinition]) -> anyhow::Result<String> {
    let mut out = String::new();
    for crd in crds {
        out.push_str("---\n");
        out.push_str(&yaml_serde::to_string(crd)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    /// Every place under `schema` that can grow without a bound: a list without
    /// maxItems or a map without maxProperties, by its path from `at`.
    fn unbounded(schema: &Value, at: &str, out: &mut Vec<String>) {
        if schema["type"] == "array" {
            if schema.get("maxItems").is_none() {
                out.push(format!("{at}: a list without maxItems"));
            }
            unbounded(&schema["items"], &format!("{at}[]"), out);
        }
        if let Some(values) = schema.get("additionalProperties").filter(|v| v.is_object()) {
            if schema.get("maxProperties").is_none() {
                out.push(format!("{at}: a map without maxProperties"));
            }
            unbounded(values, &format!("{at}{{}}"), out);
        }
        if let Some(Value::Object(properties)) = schema.get("properties") {
            for (name, property) in properties {
                unbounded(property, &format!("{at}.{name}"), out);
            }
        }
        for key in ["anyOf", "oneOf", "allOf"] {
            if let Some(Value::Array(choices)) = schema.get(key) {
                for choice in choices {
                    unbounded(choice, at, out);
                }
            }
        }
    }

    /// Each CRD's kind and its schema, as the API server gets it.
    fn schemas() -> Vec<(String, Value)> {
        refill_crds()
            .into_iter()
            .flat_map(|crd| {
                let kind = crd.spec.names.kind.clone();
                crd.spec.versions.into_iter().map(move |version| {
                    let schema = version.schema.unwrap().open_api_v3_schema.unwrap();
                    (kind.clone(), serde_json::to_value(schema).unwrap())
                })
            })
            .collect()
    }

    #[test]
    fn every_list_and_map_of_every_spec_is_bounded() {
        let mut found = Vec::new();
        for (kind, schema) in schemas() {
            let spec = &schema["properties"]["spec"];
            assert!(spec.is_object(), "{kind} has no spec");
            unbounded(spec, &format!("{kind}.spec"), &mut found);
        }
        assert!(found.is_empty(), "unbounded:\n{}", found.join("\n"));
    }

    #[test]
    fn the_walk_finds_an_unbounded_list_and_map() {
        let schema = serde_json::json!({"properties": {
            "names": {"type": "array", "items": {"type": "string"}},
            "nodes": {"type": "object", "additionalProperties":
                {"type": "array", "maxItems": 3, "items": {"type": "string"}}},
        }});
        let mut found = Vec::new();
        unbounded(&schema, "x", &mut found);
        assert_eq!(
            found,
            [
                "x.names: a list without maxItems",
                "x.nodes: a map without maxProperties"
            ]
        );
    }

    /// A team with `edit` writes DataRestoreRequests and BackupVolumes: each of their
    /// strings has a length or a fixed set of values.
    #[test]
    fn every_string_a_team_writes_is_bounded() {
        fn strings(schema: &Value, at: &str, out: &mut Vec<String>) {
            if schema["type"] == "string"
                && schema.get("maxLength").is_none()
                && schema.get("enum").is_none()
            {
                out.push(at.to_string());
            }
            for key in ["items", "additionalProperties"] {
                if schema[key].is_object() {
                    strings(&schema[key], &format!("{at}.{key}"), out);
                }
            }
            if let Some(Value::Object(properties)) = schema.get("properties") {
                for (name, property) in properties {
                    strings(property, &format!("{at}.{name}"), out);
                }
            }
        }
        // Teams write BackupVolumes too, as the data sources of their claims.
        for written in ["DataRestoreRequest", "BackupVolume"] {
            let (_, schema) = schemas()
                .into_iter()
                .find(|(kind, _)| kind == written)
                .unwrap();
            let mut found = Vec::new();
            strings(&schema["properties"]["spec"], "spec", &mut found);
            assert!(found.is_empty(), "{written} without maxLength: {found:?}");
        }
    }

    #[test]
    fn conditions_are_bounded_and_the_controllers_lists_are_not() {
        for (kind, schema) in schemas() {
            let status = &schema["properties"]["status"]["properties"];
            if let Some(conditions) = status.get("conditions") {
                assert_eq!(conditions["maxItems"], 16, "{kind}");
            }
            // As many as a valid spec selects: a bound here could stall a restore.
            if let Some(volumes) = status.get("volumes") {
                assert!(volumes.get("maxItems").is_none(), "{kind}");
            }
        }
    }
}

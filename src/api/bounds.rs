//! The most a spec may hold, written into the CRDs' schemas so that the API server
//! refuses more before refill reads any of it: a DataRestoreRequest is written by any
//! team with `edit` in its namespace, and every pass over a spec costs time in the
//! number of its entries. Each bound is far past what a real restore names; the
//! field's description says it.
//!
//! The status lists the controller writes are cut to a bound before they are written
//! (the last line says how many more there were); what each volume holds lives in its
//! own VolumePluginRestore, not in the DataRestore.

use schemars::Schema;
use serde_json::Value;

/// Lines of a status's `errors` and `warnings`: the first ones, then one that says how
/// many more there are.
pub(crate) const STATUS_LINES: u32 = 50;
/// Volumes named in a status's `needsAttention`.
pub(crate) const NOTED_VOLUMES: u32 = 20;

/// Claims or namespaces one spec names (`pvcs`, `includedNamespaces`, the entries of
/// `candidateNodes` and `pvcPaths`): past the 1,000 namespaces of refill's largest
/// benchmark, and about what etcd's 1.5 MiB object size holds of such names anyway.
pub const CLAIMS: u32 = 5000;
/// Nodes one claim may run on: Kubernetes' largest supported cluster.
pub const NODES: u32 = 5000;
/// An object name (a DNS-1123 subdomain).
pub const NAME: u32 = 253;
/// A namespace name (a DNS-1123 label), and a label value.
pub(crate) const LABEL: u32 = 63;
/// `namespace/name`: a namespace, a slash, an object name.
pub(crate) const NAMESPACED_NAME: u32 = LABEL + 1 + NAME;
/// A label key: a DNS-1123 subdomain prefix, a slash, a name of 63.
pub(crate) const LABEL_KEY: u32 = NAME + 1 + LABEL;
/// Globs in one of `include` and `exclude`.
pub(crate) const GLOBS: u32 = 1000;
/// A path or glob: Linux's PATH_MAX.
pub const PATH: u32 = 4096;
/// A duration (`4h`, `90m`) or a cron expression.
pub(crate) const SHORT_TEXT: u32 = 256;
/// An image reference: a registry, a repository, a tag and a digest.
pub(crate) const IMAGE: u32 = 1024;
/// Words of a command.
pub(crate) const COMMAND: u32 = 256;
/// Lists and maps inside Kubernetes' own types a spec embeds (a label selector's
/// expressions and their values, a container's capabilities, resources and claims).
pub(crate) const KUBERNETES_LIST: u32 = 256;
/// Conditions of a status: refill writes four kinds (Ready, Reconciling, Stalled,
/// Warning).
pub(crate) const CONDITIONS: u32 = 16;

/// `candidateNodes`: at most [`CLAIMS`] claims, each with at most [`NODES`] node
/// names.
pub fn candidate_nodes(schema: &mut Schema) {
    schema.insert("maxProperties".into(), CLAIMS.into());
    if let Some(Value::Object(nodes)) = schema.get_mut("additionalProperties") {
        nodes.insert("maxItems".into(), NODES.into());
        if let Some(Value::Object(node)) = nodes.get_mut("items") {
            node.insert("maxLength".into(), NAME.into());
        }
    }
}

/// `pvcPaths`: at most [`CLAIMS`] claims (each entry bounded by its own type).
pub(crate) fn claim_map(schema: &mut Schema) {
    schema.insert("maxProperties".into(), CLAIMS.into());
}

/// A Kubernetes type embedded in a spec: every list and map in it without a bound of
/// its own gets [`KUBERNETES_LIST`].
pub(crate) fn kubernetes_lists(schema: &mut Schema) {
    if let Some(object) = schema.as_object_mut() {
        bound_lists(object);
    }
}

fn bound_lists(schema: &mut serde_json::Map<String, Value>) {
    let is = |schema: &serde_json::Map<String, Value>, kind: &str| match schema.get("type") {
        Some(Value::String(t)) => t == kind,
        Some(Value::Array(types)) => types.iter().any(|t| t == kind),
        _ => false,
    };
    if is(schema, "array") {
        schema.entry("maxItems").or_insert(KUBERNETES_LIST.into());
    }
    if matches!(schema.get("additionalProperties"), Some(Value::Object(_))) {
        schema
            .entry("maxProperties")
            .or_insert(KUBERNETES_LIST.into());
    }
    for key in ["items", "additionalProperties"] {
        if let Some(Value::Object(inner)) = schema.get_mut(key) {
            bound_lists(inner);
        }
    }
    if let Some(Value::Object(properties)) = schema.get_mut("properties") {
        for property in properties.values_mut() {
            if let Value::Object(property) = property {
                bound_lists(property);
            }
        }
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(Value::Array(choices)) = schema.get_mut(key) {
            for choice in choices {
                if let Value::Object(choice) = choice {
                    bound_lists(choice);
                }
            }
        }
    }
}

//! `-o yaml|json`: objects as the API holds them, lists as kubectl prints them.

use serde::Serialize;
use serde_json::{Value, json};

use super::args::OutputFormat;
use super::errors::{CliError, Result};

/// One object or list, rendered in `format`, ending with a newline.
pub(super) fn render<T: Serialize>(value: &T, format: OutputFormat) -> Result<String> {
    let mut value = serde_json::to_value(value)
        .map_err(|e| CliError::new(format!("cannot render the output: {e}")))?;
    strip_managed_fields(&mut value);
    let text = match format {
        OutputFormat::Yaml => yaml_serde::to_string(&value).map_err(|e| e.to_string()),
        OutputFormat::Json => serde_json::to_string_pretty(&value)
            .map(|s| s + "\n")
            .map_err(|e| e.to_string()),
    };
    text.map_err(|e| CliError::new(format!("cannot render the output: {e}")))
}

/// Objects wrapped as a `v1 List`, as `kubectl get -o yaml` prints several.
pub(super) fn list<T: Serialize>(items: &[T]) -> Value {
    json!({"apiVersion": "v1", "kind": "List", "items": items, "metadata": {}})
}

/// Managed fields are bookkeeping; kubectl leaves them out too.
fn strip_managed_fields(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(Value::Object(meta)) = map.get_mut("metadata") {
                meta.remove("managedFields");
            }
            if let Some(Value::Array(items)) = map.get_mut("items") {
                items.iter_mut().for_each(strip_managed_fields);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(strip_managed_fields),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_objects_render_without_managed_fields() {
        let object =
            json!({"kind": "DataRestore", "metadata": {"name": "r", "managedFields": [{}]}});
        let yaml = render(&list(std::slice::from_ref(&object)), OutputFormat::Yaml).unwrap();
        assert!(yaml.contains("kind: List"), "{yaml}");
        assert!(yaml.contains("name: r"), "{yaml}");
        assert!(!yaml.contains("managedFields"), "{yaml}");
        let json = render(&object, OutputFormat::Json).unwrap();
        assert!(json.ends_with("}\n"), "{json}");
        assert!(!json.contains("managedFields"), "{json}");
    }
}

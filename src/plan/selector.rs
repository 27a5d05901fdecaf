//! Label selectors and `namespace/name` keys.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Splits `namespace/name`, refusing anything else.
pub fn parse_pvc_key(key: &str) -> Result<(&str, &str), String> {
    match key.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns, name))
        }
        _ => Err(format!(
            "\"{key}\" is not a PVC reference: write it as namespace/name"
        )),
    }
}

/// Whether labels match a selector, with Kubernetes' semantics (an empty selector
/// matches everything).
pub fn label_selector_matches(
    selector: &LabelSelector,
    labels: &BTreeMap<String, String>,
) -> Result<bool, String> {
    if let Some(match_labels) = &selector.match_labels
        && match_labels.iter().any(|(k, v)| labels.get(k) != Some(v))
    {
        return Ok(false);
    }
    for expr in selector.match_expressions.iter().flatten() {
        let value = labels.get(&expr.key);
        let values = expr.values.as_deref().unwrap_or_default();
        let ok = match expr.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            other => return Err(format!("unknown label selector operator \"{other}\"")),
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn keys_need_exactly_one_slash() {
        assert_eq!(parse_pvc_key("shop/data").unwrap(), ("shop", "data"));
        assert!(parse_pvc_key("data").is_err());
        assert!(parse_pvc_key("/data").is_err());
        assert!(parse_pvc_key("a/b/c").is_err());
    }

    #[test]
    fn selectors_follow_kubernetes_semantics() {
        let sel = LabelSelector {
            match_labels: Some(labels(&[("app", "db")])),
            match_expressions: Some(vec![
                LabelSelectorRequirement {
                    key: "tier".into(),
                    operator: "In".into(),
                    values: Some(vec!["gold".into(), "silver".into()]),
                },
                LabelSelectorRequirement {
                    key: "skip".into(),
                    operator: "DoesNotExist".into(),
                    values: None,
                },
            ]),
        };
        assert!(label_selector_matches(&sel, &labels(&[("app", "db"), ("tier", "gold")])).unwrap());
        assert!(
            !label_selector_matches(&sel, &labels(&[("app", "db"), ("tier", "bronze")])).unwrap()
        );
        assert!(
            !label_selector_matches(
                &sel,
                &labels(&[("app", "db"), ("tier", "gold"), ("skip", "")])
            )
            .unwrap()
        );
        assert!(!label_selector_matches(&sel, &labels(&[("tier", "gold")])).unwrap());
        assert!(label_selector_matches(&LabelSelector::default(), &labels(&[])).unwrap());
    }
}

//! Label selectors and `namespace/name` keys.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::Selector;

/// Splits `namespace/name`, refusing anything else.
pub(crate) fn parse_pvc_key(key: &str) -> Result<(&str, &str), String> {
    match key.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns, name))
        }
        _ => Err(format!(
            "\"{key}\" is not a PVC reference: write it as namespace/name"
        )),
    }
}

/// A selector to match labels with, with Kubernetes' semantics (an empty selector
/// matches everything); refused when an operator is unknown, or In or NotIn has no
/// values, as [`super::spec_errors`] refuses it first.
pub(crate) fn label_selector(selector: &LabelSelector) -> Result<Selector, String> {
    Selector::try_from(selector.clone())
        .map_err(|e| format!("{e}; use In or NotIn with values, or Exists or DoesNotExist without"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
    use kube::core::SelectorExt;

    fn label_selector_matches(
        selector: &LabelSelector,
        labels: &BTreeMap<String, String>,
    ) -> Result<bool, String> {
        Ok(label_selector(selector)?.matches(labels))
    }

    fn s(values: &[&str]) -> Vec<String> {
        values.iter().map(|v| v.to_string()).collect()
    }

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

    #[test]
    fn not_in_and_exists_and_operators_that_are_none() {
        let one = |operator: &str, values: &[&str]| {
            let requirement = LabelSelectorRequirement {
                key: "tier".into(),
                operator: operator.into(),
                values: (!values.is_empty()).then(|| s(values)),
            };
            LabelSelector {
                match_expressions: Some(vec![requirement]),
                match_labels: None,
            }
        };
        let not_in = one("NotIn", &["gold"]);
        assert!(label_selector_matches(&not_in, &labels(&[])).unwrap());
        assert!(label_selector_matches(&not_in, &labels(&[("tier", "tin")])).unwrap());
        assert!(!label_selector_matches(&not_in, &labels(&[("tier", "gold")])).unwrap());
        let exists = one("Exists", &[]);
        assert!(label_selector_matches(&exists, &labels(&[("tier", "")])).unwrap());
        assert!(!label_selector_matches(&exists, &labels(&[("app", "db")])).unwrap());
        for wrong in [one("Like", &[]), one("In", &[])] {
            let why = label_selector(&wrong).unwrap_err();
            assert!(why.contains("use In or NotIn with values"), "{why}");
        }
    }
}

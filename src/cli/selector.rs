//! Label selectors as `kubectl -l` takes them, turned into a `LabelSelector`:
//! `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`, comma-separated.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

/// Parses a selector; the error is a sentence naming the part that is wrong.
pub(crate) fn parse(text: &str) -> Result<LabelSelector, String> {
    let mut labels = BTreeMap::new();
    let mut expressions = Vec::new();
    let parts = split_requirements(text)?;
    if parts.iter().all(|p| p.trim().is_empty()) {
        return Err("the selector is empty; write it as key=value,key2 in (a,b),!key3".into());
    }
    for part in parts {
        let part = part.trim();
        if part.is_empty() {
            return Err(format!(
                "selector \"{text}\" has an empty requirement (two commas in a row?)"
            ));
        }
        match requirement(part)? {
            Requirement::Equals(key, value) => {
                if let Some(old) = labels.get(&key)
                    && old != &value
                {
                    return Err(format!(
                        "selector \"{text}\" asks for {key}={old} and {key}={value} at once, which no object matches"
                    ));
                }
                labels.insert(key, value);
            }
            Requirement::Expression(expr) => expressions.push(expr),
        }
    }
    Ok(LabelSelector {
        match_labels: (!labels.is_empty()).then_some(labels),
        match_expressions: (!expressions.is_empty()).then_some(expressions),
    })
}

/// A selector written back as `parse` reads it: `app=db,tier in (a,b),!skip`.
pub(crate) fn text(selector: &LabelSelector) -> String {
    let mut parts: Vec<String> = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for e in selector.match_expressions.iter().flatten() {
        let values = e.values.clone().unwrap_or_default().join(",");
        parts.push(match e.operator.as_str() {
            "In" => format!("{} in ({values})", e.key),
            "NotIn" => format!("{} notin ({values})", e.key),
            "Exists" => e.key.clone(),
            "DoesNotExist" => format!("!{}", e.key),
            other => format!("{} {other} ({values})", e.key),
        });
    }
    parts.join(",")
}

enum Requirement {
    Equals(String, String),
    Expression(LabelSelectorRequirement),
}

/// Splits at commas outside parentheses.
fn split_requirements(text: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '(' if depth > 0 => return Err(format!("selector \"{text}\" nests parentheses")),
            '(' => depth += 1,
            ')' if depth == 0 => return Err(format!("selector \"{text}\" has a ')' without '('")),
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth > 0 {
        return Err(format!("selector \"{text}\" has a '(' without ')'"));
    }
    parts.push(&text[start..]);
    Ok(parts)
}

fn requirement(part: &str) -> Result<Requirement, String> {
    if let Some(key) = part.strip_prefix('!') {
        let key = key.trim();
        check_key(key)?;
        return Ok(expression(key, "DoesNotExist", Vec::new()));
    }
    let key_end = part
        .find(|c: char| !(c.is_ascii_alphanumeric() || "._/-".contains(c)))
        .unwrap_or(part.len());
    let key = &part[..key_end];
    let rest = part[key_end..].trim_start();
    if key.is_empty() {
        return Err(format!("\"{part}\" does not start with a label key"));
    }
    check_key(key)?;
    if rest.is_empty() {
        return Ok(expression(key, "Exists", Vec::new()));
    }
    if let Some(value) = rest.strip_prefix("!=") {
        let value = value.trim();
        check_value(value)?;
        return Ok(expression(key, "NotIn", vec![value.to_string()]));
    }
    if let Some(value) = rest.strip_prefix("==").or_else(|| rest.strip_prefix('=')) {
        let value = value.trim();
        check_value(value)?;
        return Ok(Requirement::Equals(key.to_string(), value.to_string()));
    }
    for (word, operator) in [("notin", "NotIn"), ("in", "In")] {
        if let Some(set) = rest.strip_prefix(word)
            && set.trim_start().starts_with('(')
        {
            let values = value_set(part, set.trim())?;
            return Ok(expression(key, operator, values));
        }
    }
    Err(format!(
        "cannot read \"{part}\": expected key=value, key!=value, key in (a,b), key notin (a,b), key or !key"
    ))
}

fn value_set(part: &str, set: &str) -> Result<Vec<String>, String> {
    let inner = set
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| {
            format!("\"{part}\": the values must be in parentheses, as in key in (a,b)")
        })?;
    let values: Vec<String> = inner.split(',').map(|v| v.trim().to_string()).collect();
    if values.iter().all(String::is_empty) {
        return Err(format!("\"{part}\" lists no values"));
    }
    for value in &values {
        check_value(value)?;
    }
    Ok(values)
}

fn expression(key: &str, operator: &str, values: Vec<String>) -> Requirement {
    Requirement::Expression(LabelSelectorRequirement {
        key: key.to_string(),
        operator: operator.to_string(),
        values: (!values.is_empty()).then_some(values),
    })
}

fn check_key(key: &str) -> Result<(), String> {
    crate::k8s_names::label_key(key)
        .map_err(|why| format!("label key \"{key}\" is not valid: {why}"))
}

fn check_value(value: &str) -> Result<(), String> {
    crate::k8s_names::label_value(value)
        .map_err(|why| format!("label value \"{value}\" is not valid: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exprs(sel: &LabelSelector) -> Vec<(String, String, Vec<String>)> {
        sel.match_expressions
            .iter()
            .flatten()
            .map(|e| {
                (
                    e.key.clone(),
                    e.operator.clone(),
                    e.values.clone().unwrap_or_default(),
                )
            })
            .collect()
    }

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn equalities_become_match_labels() {
        let sel = parse("app=web, tier==db").unwrap();
        let labels = sel.match_labels.unwrap();
        assert_eq!(labels["app"], "web");
        assert_eq!(labels["tier"], "db");
        assert!(sel.match_expressions.is_none());
    }

    #[test]
    fn set_and_existence_requirements_become_expressions() {
        let sel =
            parse("env in (prod, staging),tier notin (cache),backup,!legacy,app!=old").unwrap();
        assert!(sel.match_labels.is_none());
        assert_eq!(
            exprs(&sel),
            vec![
                ("env".into(), "In".into(), s(&["prod", "staging"])),
                ("tier".into(), "NotIn".into(), s(&["cache"])),
                ("backup".into(), "Exists".into(), vec![]),
                ("legacy".into(), "DoesNotExist".into(), vec![]),
                ("app".into(), "NotIn".into(), s(&["old"])),
            ]
        );
    }

    #[test]
    fn a_selector_is_written_back_as_it_is_read() {
        let written = "app=db,tier in (a,b),env notin (dev),ready,!skip";
        assert_eq!(text(&parse(written).unwrap()), written);
    }

    #[test]
    fn prefixed_keys_and_empty_values_are_allowed() {
        let sel = parse("app.kubernetes.io/name=db,example.com/flag=").unwrap();
        let labels = sel.match_labels.unwrap();
        assert_eq!(labels["app.kubernetes.io/name"], "db");
        assert_eq!(labels["example.com/flag"], "");
        let sel = parse("app.kubernetes.io/part-of in (shop)").unwrap();
        assert_eq!(exprs(&sel)[0].0, "app.kubernetes.io/part-of");
    }

    #[test]
    fn a_key_starting_with_in_is_still_a_key() {
        let sel = parse("index=1,insecure").unwrap();
        assert_eq!(sel.match_labels.as_ref().unwrap()["index"], "1");
        assert_eq!(
            exprs(&sel),
            vec![("insecure".into(), "Exists".into(), vec![])]
        );
    }

    #[test]
    fn mistakes_are_explained() {
        for (input, expected) in [
            ("", "empty"),
            ("a=b,,c", "empty requirement"),
            ("env in (a,b", "without ')'"),
            ("env in a,b", "expected key=value"),
            ("env in ()", "lists no values"),
            ("a=b,a=c", "a=b and a=c"),
            ("-bad=x", "is not valid"),
            ("=x", "does not start with a label key"),
            ("app=no spaces", "label value \"no spaces\""),
            ("Bad_Prefix/x=y", "DNS subdomain"),
            ("a.-b/x=y", "DNS subdomain"),
            ("a/b/c=y", "more than one '/'"),
            ("example.com/=y", "name part after '/' is empty"),
            ("x>5", "cannot read"),
            (&format!("k={}", "v".repeat(64)), "is not valid"),
        ] {
            let err = parse(input).unwrap_err();
            assert!(err.contains(expected), "{input:?}: {err}");
        }
    }
}

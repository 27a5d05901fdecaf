//! The Grafana dashboard (`charts/refill/dashboards/refill.json`) shows what refill
//! exports, and all of it: a query naming a series refill does not export draws an
//! empty panel without any error, and a metric on no panel is one nobody looks at.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::super::Metrics;
use super::promql::names;
use super::{ended, restoring};
use crate::controller::runtime::error::Category;

const DASHBOARD: &str = include_str!("../../../../../charts/refill/dashboards/refill.json");

/// Labels Prometheus puts on every series it scrapes, whatever the target exports.
const TARGET_LABELS: &[&str] = &["instance", "job"];

/// What the OpenMetrics text adds to a metric's name for its series: a gauge's is
/// bare, a counter's `_total`, a histogram's `_bucket`, `_sum` and `_count`.
const SUFFIXES: &[&str] = &["", "_total", "_created", "_bucket", "_sum", "_count"];

/// What refill's `/metrics` shows once every metric has seen something.
struct Exported {
    /// Metric name (as in `# TYPE`) by each series name it is exported under.
    family_of: BTreeMap<String, String>,
    /// Every metric's name.
    families: BTreeSet<String>,
    /// Labels on any series.
    labels: BTreeSet<String>,
}

fn exported() -> Exported {
    let metrics = Metrics::new();
    // A labelled family shows no series until it counts something.
    metrics.written("a", &restoring(), &ended());
    metrics.reconcile_failed(Category::Transient);
    let text = metrics.encode();
    let families: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(String::from)
        .collect();
    let mut family_of = BTreeMap::new();
    let mut labels = BTreeSet::new();
    for sample in text.lines().filter(|l| !l.starts_with('#')) {
        let selector = match sample.find('}') {
            Some(end) => &sample[..=end],
            None => sample.split_whitespace().next().unwrap_or_default(),
        };
        let found = names(selector);
        labels.extend(found.labels);
        for series in found.series {
            let family = families
                .iter()
                .find(|f| {
                    series
                        .strip_prefix(f.as_str())
                        .is_some_and(|suffix| SUFFIXES.contains(&suffix))
                })
                .unwrap_or_else(|| panic!("{series} is of no metric in:\n{text}"));
            family_of.insert(series, family.clone());
        }
    }
    for family in &families {
        assert!(
            family_of.values().any(|f| f == family),
            "{family} exports no series here: have this test record something in it"
        );
    }
    Exported {
        family_of,
        families,
        labels,
    }
}

/// Every panel that queries, with its title.
fn panels(dashboard: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    let mut todo: Vec<&Value> = dashboard["panels"].as_array().unwrap().iter().collect();
    while let Some(panel) = todo.pop() {
        if let Some(nested) = panel["panels"].as_array() {
            todo.extend(nested);
        }
        if panel["type"] != "row" {
            out.push(panel);
        }
    }
    out
}

/// Each query of the dashboard, with its panel's title.
fn queries(dashboard: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for panel in panels(dashboard) {
        let title = panel["title"].as_str().unwrap_or_default();
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap_or_default();
            out.push((title.to_string(), expr.to_string()));
        }
    }
    out
}

fn dashboard() -> Value {
    serde_json::from_str(DASHBOARD).expect("the dashboard is JSON")
}

#[test]
fn every_query_names_only_series_and_labels_refill_exports() {
    let exported = exported();
    let queries = queries(&dashboard());
    assert!(!queries.is_empty());
    let mut wrong = Vec::new();
    for (title, expr) in &queries {
        let found = names(expr);
        if found.series.is_empty() {
            wrong.push(format!("{title}: {expr:?} reads no series"));
        }
        for series in found.series {
            if !exported.family_of.contains_key(&series) {
                wrong.push(format!("{title}: refill exports no {series}"));
            }
        }
        for label in found.labels {
            if !(exported.labels.contains(&label) || TARGET_LABELS.contains(&label.as_str())) {
                wrong.push(format!(
                    "{title}: no series of refill has the label {label}"
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{}\nrefill exports: {:?}",
        wrong.join("\n"),
        exported.family_of.keys().collect::<Vec<_>>()
    );
}

#[test]
fn every_metric_refill_exports_is_on_a_panel() {
    let exported = exported();
    let shown: BTreeSet<&String> = queries(&dashboard())
        .iter()
        .flat_map(|(_, expr)| names(expr).series)
        .filter_map(|series| exported.family_of.get(&series))
        .collect();
    let missing: Vec<&String> = exported
        .families
        .iter()
        .filter(|f| !shown.contains(f))
        .collect();
    assert!(
        missing.is_empty(),
        "no panel of charts/refill/dashboards/refill.json shows {missing:?}"
    );
}

#[test]
fn every_panel_queries_the_prometheus_chosen_in_the_datasource_variable() {
    let dashboard = dashboard();
    let variables = dashboard["templating"]["list"].as_array().unwrap();
    assert!(variables.iter().any(|v| v["name"] == "datasource"
        && v["type"] == "datasource"
        && v["query"] == "prometheus"));
    let chosen = serde_json::json!({"type": "prometheus", "uid": "${datasource}"});
    for panel in panels(&dashboard) {
        let title = &panel["title"];
        assert_eq!(panel["datasource"], chosen, "{title}");
        let targets = panel["targets"].as_array();
        assert!(
            targets.is_some_and(|t| !t.is_empty()),
            "{title} has no query"
        );
        for target in targets.into_iter().flatten() {
            assert_eq!(target["datasource"], chosen, "{title}");
        }
    }
}

//! The series and label names a PromQL expression reads, so that the dashboard's
//! queries can be checked against what refill exports. Strings, numbers, durations,
//! Grafana's `$variables`, functions and keywords are skipped; what is left is a
//! series name, or a label name inside `{}` or the list of `by`, `without`, `on`,
//! `ignoring`, `group_left` and `group_right`.

use std::collections::BTreeSet;

/// What one expression names.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Names {
    /// Series selected (`refill_restores_total`, `x_bucket`).
    pub series: BTreeSet<String>,
    /// Labels matched in `{}` or listed for grouping and matching.
    pub labels: BTreeSet<String>,
}

/// Words followed by a list of labels in parentheses.
const LABEL_LISTS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// Keywords and literals that are not series, in lower case (PromQL ignores their case).
const KEYWORDS: &[&str] = &[
    "bool", "and", "or", "unless", "offset", "atan2", "inf", "nan",
];

/// Aggregations, which may be followed by `by (...)` or `without (...)` rather than by
/// their own parenthesis (`sum by (le) (...)`).
const AGGREGATIONS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];

fn starts_name(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn in_name(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// The index just past the name starting at `i`.
fn name_end(chars: &[char], i: usize) -> usize {
    (i..chars.len())
        .find(|&j| !in_name(chars[j]))
        .unwrap_or(chars.len())
}

/// The index of the first character at or after `i` that is not white space.
fn next_visible(chars: &[char], i: usize) -> usize {
    (i..chars.len())
        .find(|&j| !chars[j].is_whitespace())
        .unwrap_or(chars.len())
}

/// The index just past the quoted string opened at `i`; backquoted strings have no
/// escapes.
fn string_end(chars: &[char], i: usize) -> usize {
    let quote = chars[i];
    let mut j = i + 1;
    while j < chars.len() && chars[j] != quote {
        j += if quote != '`' && chars[j] == '\\' {
            2
        } else {
            1
        };
    }
    (j + 1).min(chars.len())
}

/// What stands between the bracket opened at `open` and the first `close` after it
/// outside strings, and the index just past that `close`.
fn enclosed(chars: &[char], open: usize, close: char) -> (&[char], usize) {
    let mut i = open + 1;
    while i < chars.len() && chars[i] != close {
        i = match chars[i] {
            '"' | '\'' | '`' => string_end(chars, i),
            _ => i + 1,
        };
    }
    let end = i.min(chars.len());
    (&chars[open + 1..end], end + 1)
}

/// Every name outside strings in `chars`: the label names of a matcher or of a list.
fn label_names(chars: &[char]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '"' | '\'' | '`' => i = string_end(chars, i),
            c if starts_name(c) => {
                let end = name_end(chars, i);
                out.insert(chars[i..end].iter().collect());
                i = end;
            }
            _ => i += 1,
        }
    }
    out
}

/// The series and labels `expr` names.
pub(super) fn names(expr: &str) -> Names {
    let chars: Vec<char> = expr.chars().collect();
    let mut out = Names::default();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if matches!(c, '"' | '\'' | '`') {
            i = string_end(&chars, i);
        } else if c == '[' {
            // A range or subquery: durations and Grafana's interval variables.
            i = enclosed(&chars, i, ']').1;
        } else if c == '{' {
            let (matchers, end) = enclosed(&chars, i, '}');
            out.labels.extend(label_names(matchers));
            i = end;
        } else if c == '$' {
            // A Grafana variable: `${name}` or `$name`.
            i = if chars.get(i + 1) == Some(&'{') {
                enclosed(&chars, i + 1, '}').1
            } else {
                name_end(&chars, i + 1)
            };
        } else if c.is_ascii_digit() || c == '.' {
            // A number (0.5, 1e3, 0x1f) or a duration (5m after offset).
            i = (i..chars.len())
                .find(|&j| !(chars[j].is_ascii_alphanumeric() || chars[j] == '.'))
                .unwrap_or(chars.len());
        } else if starts_name(c) {
            let end = name_end(&chars, i);
            let word: String = chars[i..end].iter().collect();
            let lower = word.to_ascii_lowercase();
            let after = next_visible(&chars, end);
            let opens = chars.get(after) == Some(&'(');
            i = end;
            if LABEL_LISTS.contains(&lower.as_str()) {
                if opens {
                    let (list, end) = enclosed(&chars, after, ')');
                    out.labels.extend(label_names(list));
                    i = end;
                }
            } else if !(opens
                || KEYWORDS.contains(&lower.as_str())
                || AGGREGATIONS.contains(&lower.as_str()))
            {
                out.series.insert(word);
            }
        } else {
            i += 1;
        }
    }
    out
}

mod tests {
    use super::*;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn a_quantile_names_its_bucket_series_and_the_labels_it_groups_and_matches() {
        let found = names(
            "histogram_quantile(0.9, sum by (le) (rate(refill_x_bucket{result=\"Failed\"}[$__rate_interval])))",
        );
        assert_eq!(found.series, set(&["refill_x_bucket"]));
        assert_eq!(found.labels, set(&["le", "result"]));
    }

    #[test]
    fn keywords_numbers_strings_and_variables_are_not_series() {
        let found = names(
            "SUM WITHOUT (instance) (a_total offset 5m) / on(job) group_left (pod) b > bool 1e3 \
             and count_values(\"v\", c{name=~\"x\\\"}y\", other!=`raw}`}) unless d:recorded[1h:5m] @ end() \
             or topk(3, e) * Inf + 0x1F - NaN + ${datasource_x} + $__range_s",
        );
        assert_eq!(found.series, set(&["a_total", "b", "c", "d:recorded", "e"]));
        assert_eq!(
            found.labels,
            set(&["instance", "job", "pod", "name", "other"])
        );
    }

    #[test]
    fn an_aggregation_grouped_after_its_argument_still_gives_its_labels() {
        let found = names("max(refill_leader) by (instance)");
        assert_eq!(found.series, set(&["refill_leader"]));
        assert_eq!(found.labels, set(&["instance"]));
    }

    #[test]
    fn an_unfinished_expression_gives_what_it_names_so_far() {
        for expr in [
            "x{a=\"\\", "sum by (", "x{", "$", "${", "y[5m", "'", "z offset",
        ] {
            let found = names(expr);
            assert!(found.series.len() <= 1, "{expr}: {found:?}");
        }
        assert_eq!(names("x{a=\"b").labels, set(&["a"]));
    }
}

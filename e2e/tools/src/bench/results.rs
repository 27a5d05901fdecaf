//! `e2e/bench/RESULTS.md` keeps the latest table of every benchmark: the kwok
//! benchmark's sections and the real-data one of `velero-bench` side by side. A
//! benchmark writes only the `## ` sections it renders: each replaces the section of
//! the same heading where it stands, and every other section, another benchmark's, is
//! kept as it was, but for the sections a benchmark owns and did not render this time
//! (a run of one size has no medians): those are its older run's, and go.

use std::path::Path;

use anyhow::{Context, Result};

/// Text before the first `## ` heading, and each section from its heading line on.
fn sections(text: &str) -> (&str, Vec<(&str, &str)>) {
    let mut starts: Vec<usize> = Vec::new();
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if line.starts_with("## ") {
            starts.push(offset);
        }
        offset += line.len();
    }
    let preamble = &text[..starts.first().copied().unwrap_or(text.len())];
    let bodies = starts
        .iter()
        .enumerate()
        .map(|(i, &start)| {
            let end = starts.get(i + 1).copied().unwrap_or(text.len());
            let body = &text[start..end];
            (body.lines().next().unwrap_or_default().trim_end(), body)
        })
        .collect();
    (preamble, bodies)
}

/// `existing` with `report`'s preamble (when it has one) and sections put in, and the
/// sections headed by one of `owned` that `report` lacks left out.
pub fn merge(existing: &str, report: &str, owned: &[&str]) -> String {
    let (old_preamble, old) = sections(existing);
    let (new_preamble, new) = sections(report);
    let mut out = String::new();
    let preamble = if new_preamble.trim().is_empty() {
        old_preamble
    } else {
        new_preamble
    };
    out.push_str(preamble);
    let ended = |out: &mut String| {
        if !out.is_empty() && !out.ends_with("\n\n") {
            out.push_str(if out.ends_with('\n') { "\n" } else { "\n\n" });
        }
    };
    for (heading, body) in &old {
        let body = match new.iter().find(|(h, _)| h == heading) {
            Some((_, new_body)) => *new_body,
            None if owned.contains(heading) => continue,
            None => *body,
        };
        ended(&mut out);
        out.push_str(body);
    }
    for (heading, body) in &new {
        if !old.iter().any(|(h, _)| h == heading) {
            ended(&mut out);
            out.push_str(body);
        }
    }
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out
}

/// Writes `report`'s sections into the results file at `path`, keeping the others but
/// those headed by one of `owned` that `report` lacks.
pub fn write(path: &Path, report: &str, owned: &[&str]) -> Result<()> {
    let existing = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    std::fs::write(path, merge(&existing, report, owned))
        .with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KWOK: &str =
        "# Benchmark results\n\nold intro\n\n## Summary\n\nold summary\n\n## Floor\n\nold floor\n";
    const REAL: &str =
        "\n## Real data: refill in place vs. Velero alone\n\n| way | wall |\n| refill | 130 s |\n";

    #[test]
    fn a_benchmark_replaces_its_own_sections_and_keeps_the_others() {
        let both = merge(KWOK, REAL, &[]);
        assert!(
            both.contains("old summary") && both.contains("| refill | 130 s |"),
            "{both}"
        );

        // The kwok benchmark again: its sections are new, the real-data one stays.
        let again = merge(
            &both,
            "# Benchmark results\n\nnew intro\n\n## Summary\n\nnew summary\n\n## Floor\n\nnew floor\n",
            &["## Summary", "## Floor"],
        );
        assert!(
            again.contains("new intro") && !again.contains("old intro"),
            "{again}"
        );
        assert!(
            again.contains("new summary") && !again.contains("old summary"),
            "{again}"
        );
        assert!(
            again.contains("new floor") && !again.contains("old floor"),
            "{again}"
        );
        assert!(
            again.contains("| refill | 130 s |"),
            "the real-data table was lost: {again}"
        );
        assert!(
            again.find("## Floor") < again.find("## Real data"),
            "{again}"
        );

        // The real-data benchmark again: replaced, not appended a second time.
        let real_again = merge(&again, &REAL.replace("130 s", "120 s"), &[]);
        assert_eq!(
            real_again.matches("## Real data").count(),
            1,
            "{real_again}"
        );
        assert!(real_again.contains("120 s") && real_again.contains("new summary"));

        // A kwok run that renders no floor: its older floor goes, the real data stays.
        let no_floor = merge(
            &real_again,
            "# Benchmark results\n\n## Summary\n\nlatest summary\n",
            &["## Summary", "## Floor"],
        );
        assert!(!no_floor.contains("## Floor"), "{no_floor}");
        assert!(no_floor.contains("latest summary") && no_floor.contains("120 s"));
    }
}

//! Pure formatting: sizes, ages, durations and plain-text tables.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// Bytes with binary units and one decimal: `512 B`, `1.2 MiB`, `3.0 GiB`.
pub(super) fn bytes(n: i64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if n.unsigned_abs() < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value.abs() >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// `done/total` in human units, or just `done` while the total is unknown.
pub(super) fn bytes_of(done: i64, total: i64) -> String {
    if total > 0 {
        format!("{}/{}", bytes(done), bytes(total))
    } else if done > 0 {
        bytes(done)
    } else {
        "-".into()
    }
}

/// A duration as kubectl prints ages: `45s`, `5m3s`, `12m`, `2h5m`, `3d`, `2y30d`.
pub(super) fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    let seconds = seconds.max(0);
    let minutes = seconds / 60;
    let hours = minutes / 60;
    let days = hours / 24;
    let years = days / 365;
    if seconds < 60 * 2 {
        format!("{seconds}s")
    } else if minutes < 10 {
        match seconds % 60 {
            0 => format!("{minutes}m"),
            s => format!("{minutes}m{s}s"),
        }
    } else if minutes < 60 * 3 {
        format!("{minutes}m")
    } else if hours < 8 {
        match minutes % 60 {
            0 => format!("{hours}h"),
            m => format!("{hours}h{m}m"),
        }
    } else if hours < 48 {
        format!("{hours}h")
    } else if hours < 24 * 8 {
        match hours % 24 {
            0 => format!("{days}d"),
            h => format!("{days}d{h}h"),
        }
    } else if hours < 24 * 365 * 2 {
        format!("{days}d")
    } else if hours < 24 * 365 * 8 {
        match days % 365 {
            0 => format!("{years}y"),
            d => format!("{years}y{d}d"),
        }
    } else {
        format!("{years}y")
    }
}

/// How long ago `time` was, as kubectl's AGE column; `-` when unset.
pub(super) fn age(time: Option<&Time>, now: Timestamp) -> String {
    match time {
        Some(t) => human_duration(now.as_second() - t.0.as_second()),
        None => "-".into(),
    }
}

/// The time between two instants, e.g. the run time of a restore.
pub(super) fn between(from: Option<&Time>, to: Option<&Time>) -> Option<String> {
    Some(human_duration(to?.0.as_second() - from?.0.as_second()))
}

/// `2m ago (2026-01-02T10:00:00Z)`, or `-` when unset.
pub(super) fn when(time: Option<&Time>, now: Timestamp) -> String {
    match time {
        Some(t) => format!("{} ago ({})", age(Some(t), now), t.0),
        None => "-".into(),
    }
}

/// How long until a time to come: `in 5h`; `due` once it has passed; `-` when unset.
pub(super) fn from_now(time: Option<&Time>, now: Timestamp) -> String {
    match time {
        Some(t) if t.0 > now => format!("in {}", human_duration(t.0.as_second() - now.as_second())),
        Some(_) => "due".into(),
        None => "-".into(),
    }
}

/// `in 5h (2026-01-02T15:00:00Z)`, or `-` when unset.
pub(super) fn when_next(time: Option<&Time>, now: Timestamp) -> String {
    match time {
        Some(t) => format!("{} ({})", from_now(Some(t), now), t.0),
        None => "-".into(),
    }
}

/// `Key:   value` lines, the values aligned, as a describe starts.
pub(super) fn fields(rows: Vec<(&str, String)>) -> String {
    let mut table = Table::new(&["", ""]);
    for (key, value) in rows {
        table.row(vec![format!("{key}:"), value]);
    }
    // Skip the empty header line.
    table
        .render("")
        .lines()
        .skip(1)
        .map(|l| format!("{l}\n"))
        .collect()
}

/// kstatus conditions as an indented table, or `none`.
pub(super) fn conditions_table(conditions: &[Condition], now: Timestamp) -> String {
    if conditions.is_empty() {
        return "  none\n".into();
    }
    let mut table = Table::new(&["TYPE", "STATUS", "REASON", "AGE", "MESSAGE"]);
    for c in conditions {
        table.row(vec![
            c.type_.clone(),
            c.status.clone(),
            or_dash(Some(&c.reason)),
            age(Some(&c.last_transition_time), now),
            or_dash(Some(&c.message)),
        ]);
    }
    table.render("  ")
}

/// `s` unless empty, else `-`, as kubectl fills empty cells.
pub(super) fn or_dash(s: Option<&str>) -> String {
    match s {
        Some(s) if !s.is_empty() => s.to_string(),
        _ => "-".into(),
    }
}

/// A time written as RFC 3339, for tests.
#[cfg(test)]
pub(super) fn at(s: &str) -> Time {
    Time(s.parse().unwrap())
}

/// A plain-text table in kubectl's style: upper-case headers, columns three spaces
/// apart, left-aligned, no trailing spaces.
#[derive(Debug, Clone, Default)]
pub(super) struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub(super) fn new(headers: &[&str]) -> Self {
        Table {
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub(super) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table, each line starting with `indent`.
    pub(super) fn render(&self, indent: &str) -> String {
        let columns = self.headers.len();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate().take(columns) {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let mut out = String::new();
        for cells in std::iter::once(&self.headers).chain(&self.rows) {
            let mut line = String::from(indent);
            for (i, width) in widths.iter().enumerate() {
                let cell = cells.get(i).map(String::as_str).unwrap_or("");
                line += cell;
                if i + 1 < columns {
                    line += &" ".repeat(width - cell.chars().count() + 3);
                }
            }
            out += line.trim_end();
            out.push('\n');
        }
        out
    }
}

/// The GitOps objects of a restore, planned or under way, as a table.
pub(super) fn gitops_table(records: &[crate::api::GitOpsRecord]) -> String {
    let mut table = Table::new(&["KIND", "NAME", "STATE", "MANAGES", "MESSAGE"]);
    for r in records {
        let state = match r.state {
            // Before the restore starts, a found object is one about to be paused.
            crate::api::GitOpsState::Found => "to pause".to_string(),
            state => format!("{state:?}"),
        };
        table.row(vec![
            r.kind.tool().to_string(),
            format!("{}/{}", r.namespace, r.name),
            state,
            r.workloads.join(", "),
            or_dash(r.message.as_deref()),
        ]);
    }
    table.render("  ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_human_sized() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1024), "1.0 KiB");
        assert_eq!(bytes(1_258_291), "1.2 MiB");
        assert_eq!(bytes(3 * 1024 * 1024 * 1024), "3.0 GiB");
        assert_eq!(bytes_of(512, 2048), "512 B/2.0 KiB");
        assert_eq!(bytes_of(0, 0), "-");
    }

    #[test]
    fn durations_read_like_kubectl_ages() {
        assert_eq!(human_duration(0), "0s");
        assert_eq!(human_duration(-1), "0s");
        assert_eq!(human_duration(-5), "<invalid>");
        assert_eq!(human_duration(119), "119s");
        assert_eq!(human_duration(5 * 60), "5m");
        assert_eq!(human_duration(5 * 60 + 3), "5m3s");
        assert_eq!(human_duration(45 * 60), "45m");
        assert_eq!(human_duration(2 * 3600 + 30), "120m");
        assert_eq!(human_duration(4 * 3600 + 5 * 60), "4h5m");
        assert_eq!(human_duration(30 * 3600), "30h");
        assert_eq!(human_duration(3 * 86400 + 2 * 3600), "3d2h");
        assert_eq!(human_duration(40 * 86400), "40d");
        assert_eq!(human_duration(3 * 365 * 86400 + 86400), "3y1d");
        assert_eq!(human_duration(10 * 365 * 86400), "10y");
    }

    #[test]
    fn ages_are_measured_from_now() {
        let now: Timestamp = "2026-01-02T10:00:00Z".parse().unwrap();
        let t = Time("2026-01-02T05:00:00Z".parse().unwrap());
        assert_eq!(age(Some(&t), now), "5h");
        assert_eq!(age(None, now), "-");
        assert_eq!(when(Some(&t), now), "5h ago (2026-01-02T05:00:00Z)");
        let later = Time("2026-01-02T05:01:30Z".parse().unwrap());
        assert_eq!(between(Some(&t), Some(&later)).as_deref(), Some("90s"));
        let next = Time("2026-01-02T15:00:00Z".parse().unwrap());
        assert_eq!(from_now(Some(&next), now), "in 5h");
        assert_eq!(from_now(Some(&t), now), "due");
        assert_eq!(from_now(None, now), "-");
        assert_eq!(when_next(Some(&next), now), "in 5h (2026-01-02T15:00:00Z)");
    }

    #[test]
    fn fields_align_their_values() {
        assert_eq!(
            fields(vec![("Name", "a".into()), ("Last backup", "-".into())]),
            "Name:          a\nLast backup:   -\n"
        );
    }

    #[test]
    fn tables_align_columns_without_trailing_spaces() {
        let mut t = Table::new(&["NAME", "PHASE", "AGE"]);
        t.row(vec!["r1".into(), "Completed".into(), "5m".into()]);
        t.row(vec!["restore-two".into(), "New".into(), "".into()]);
        assert_eq!(
            t.render(""),
            "NAME          PHASE       AGE\nr1            Completed   5m\nrestore-two   New\n"
        );
        assert_eq!(Table::new(&["A"]).render("  "), "  A\n");
    }
}

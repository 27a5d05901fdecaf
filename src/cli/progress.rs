//! Showing a restore as it runs: live bars on a terminal, plain lines elsewhere.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::api::{DataRestore, Phase, VolumePhase, VolumeStatus};

use super::format::bytes;

/// Receives every version of the DataRestore seen while following it.
pub(super) trait Reporter {
    fn update(&mut self, dr: &DataRestore);
    /// A remark outside the progress display.
    fn note(&mut self, line: &str);
    /// Stops drawing; called once, before the outcome is printed.
    fn finish(&mut self);
}

/// Bars when both stdout and stderr are terminals, lines otherwise.
pub(super) fn reporter(name: &str) -> Box<dyn Reporter> {
    use std::io::IsTerminal;
    if std::io::stderr().is_terminal() && std::io::stdout().is_terminal() {
        Box::new(Bars::new(name))
    } else {
        Box::new(Lines::new(name, Duration::from_secs(5)))
    }
}

/// `Restoring on node-a`, `Completed`, `Failed: message`.
pub(super) fn volume_state(v: &VolumeStatus) -> String {
    let mut text = format!("{:?}", v.phase);
    if let Some(node) = v.node.as_deref().filter(|n| !n.is_empty())
        && !v.phase.is_terminal()
    {
        text += &format!(" on {node}");
    }
    if let Some(message) = v.message.as_deref().filter(|m| !m.is_empty())
        && v.phase == VolumePhase::Failed
    {
        text += &format!(": {message}");
    }
    text
}

fn percent(done: i64, total: i64) -> i64 {
    if total > 0 { done * 100 / total } else { 0 }
}

/// Plain lines for logs and pipes: one when the restore or a volume changes phase,
/// and a progress line per volume at most every `interval`.
pub(super) struct Lines {
    name: String,
    interval: Duration,
    phase: Option<Phase>,
    volumes: BTreeMap<String, Printed>,
}

#[derive(Default)]
struct Printed {
    state: String,
    printed_at: Option<Instant>,
    bytes_done: i64,
}

impl Lines {
    pub(super) fn new(name: &str, interval: Duration) -> Self {
        Lines {
            name: name.to_string(),
            interval,
            phase: None,
            volumes: BTreeMap::new(),
        }
    }

    /// The lines this version of the DataRestore calls for, at time `now`.
    pub(super) fn lines(&mut self, dr: &DataRestore, now: Instant) -> Vec<String> {
        let mut out = Vec::new();
        let Some(status) = &dr.status else {
            return out;
        };
        if self.phase != Some(status.phase) {
            self.phase = Some(status.phase);
            let mut line = format!("restore {}: {:?}", self.name, status.phase);
            if let Some(backup) = &status.backup_name
                && status.phase == Phase::Restoring
            {
                let total = status.volume_counts.as_ref().map_or(0, |c| c.total);
                line += &format!(" from backup {backup}, {total} volume(s)");
            }
            out.push(line);
        }
        for v in &status.volumes {
            let seen = self.volumes.entry(v.pvc.clone()).or_default();
            let state = volume_state(v);
            if seen.state != state {
                let mut line = format!("  {}: {state}", v.pvc);
                if v.phase == VolumePhase::Completed {
                    line += &format!(", {}", bytes(v.bytes_done.max(v.total_bytes)));
                }
                out.push(line);
                seen.state = state;
                seen.printed_at = Some(now);
                seen.bytes_done = v.bytes_done;
                continue;
            }
            let due = seen
                .printed_at
                .is_none_or(|t| now.duration_since(t) >= self.interval);
            if v.phase == VolumePhase::Restoring && v.bytes_done != seen.bytes_done && due {
                out.push(format!(
                    "  {}: {} of {} ({}%)",
                    v.pvc,
                    bytes(v.bytes_done),
                    bytes(v.total_bytes),
                    percent(v.bytes_done, v.total_bytes)
                ));
                seen.printed_at = Some(now);
                seen.bytes_done = v.bytes_done;
            }
        }
        out
    }
}

impl Reporter for Lines {
    fn update(&mut self, dr: &DataRestore) {
        let mut err = std::io::stderr().lock();
        for line in self.lines(dr, Instant::now()) {
            let _ = writeln!(err, "{line}");
        }
    }

    fn note(&mut self, line: &str) {
        eprintln!("{line}");
    }

    fn finish(&mut self) {}
}

/// Live bars: one for the whole restore, one per volume.
pub(super) struct Bars {
    multi: MultiProgress,
    overall: ProgressBar,
    volumes: BTreeMap<String, ProgressBar>,
    width: usize,
}

const OVERALL_TEMPLATE: &str =
    "{prefix:.bold} [{bar:24.green/white}] {bytes:>9}/{total_bytes:<9} {elapsed:>4} {wide_msg}";

impl Bars {
    pub(super) fn new(name: &str) -> Self {
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
        let overall = multi.add(ProgressBar::new(0));
        overall.set_style(style(OVERALL_TEMPLATE));
        overall.set_prefix(name.to_string());
        overall.set_message("waiting for the controller");
        overall.enable_steady_tick(Duration::from_millis(500));
        Bars {
            multi,
            overall,
            volumes: BTreeMap::new(),
            width: name.len(),
        }
    }

    fn volume_bar(&mut self, pvc: &str) -> ProgressBar {
        if let Some(bar) = self.volumes.get(pvc) {
            return bar.clone();
        }
        let bar = self.multi.add(ProgressBar::new(0));
        bar.set_style(style(
            "  {prefix} [{bar:20.cyan/blue}] {bytes:>9}/{total_bytes:<9} {wide_msg}",
        ));
        self.volumes.insert(pvc.to_string(), bar.clone());
        self.width = self.width.max(pvc.len());
        // Align every prefix to the longest PVC name seen so far.
        for (name, b) in &self.volumes {
            b.set_prefix(format!("{name:<w$}", w = self.width));
        }
        bar
    }
}

fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ")
}

impl Reporter for Bars {
    fn update(&mut self, dr: &DataRestore) {
        let Some(status) = &dr.status else {
            return;
        };
        // A bar a volume for a restore small enough to have its volumes attached
        // (see wait::VOLUMES_SHOWN); the whole one from the counts.
        for v in &status.volumes {
            let bar = self.volume_bar(&v.pvc);
            bar.set_length(v.total_bytes.max(v.bytes_done).max(0) as u64);
            bar.set_position(v.bytes_done.max(0) as u64);
            bar.set_message(volume_state(v));
        }
        let counts = status.volume_counts.clone().unwrap_or_default();
        let done = counts.bytes_done.max(0);
        self.overall.set_length(counts.total_bytes.max(done) as u64);
        self.overall.set_position(done as u64);
        let mut message = format!("{:?}", status.phase);
        if counts.total > 0 {
            let finished: u32 = counts
                .phases
                .iter()
                .filter(|(phase, _)| phase.is_terminal())
                .map(|(_, n)| n)
                .sum();
            message += &format!(" · {finished}/{} volumes done", counts.total);
        }
        self.overall.set_message(message);
    }

    fn note(&mut self, line: &str) {
        let _ = self.multi.println(line);
    }

    fn finish(&mut self) {
        for bar in self.volumes.values() {
            bar.abandon();
        }
        self.overall.abandon();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{DataRestoreSpec, DataRestoreStatus};

    fn dr(phase: Phase, volumes: Vec<VolumeStatus>) -> DataRestore {
        let mut dr = DataRestore::new("r1", DataRestoreSpec::default());
        dr.status = Some(DataRestoreStatus {
            phase,
            backup_name: Some("nightly".into()),
            volumes,
            ..DataRestoreStatus::default()
        });
        if let Some(status) = dr.status.as_mut() {
            status.tally(|v| v.pvc.clone());
        }
        dr
    }

    fn vol(phase: VolumePhase, done: i64, node: Option<&str>) -> VolumeStatus {
        VolumeStatus {
            pvc: "shop/data-0".into(),
            phase,
            node: node.map(String::from),
            bytes_done: done,
            total_bytes: 100 * 1024 * 1024,
            ..VolumeStatus::default()
        }
    }

    #[test]
    fn lines_follow_phase_changes_and_throttle_progress() {
        let mut lines = Lines::new("r1", Duration::from_secs(5));
        let t0 = Instant::now();
        let mut empty = DataRestore::new("r1", DataRestoreSpec::default());
        assert!(lines.lines(&empty, t0).is_empty());
        empty.status = Some(DataRestoreStatus::default());
        assert_eq!(lines.lines(&empty, t0), vec!["restore r1: New"]);

        let v = vol(VolumePhase::Restoring, 0, Some("node-a"));
        assert_eq!(
            lines.lines(&dr(Phase::Restoring, vec![v]), t0),
            vec![
                "restore r1: Restoring from backup nightly, 1 volume(s)",
                "  shop/data-0: Restoring on node-a"
            ]
        );
        let v = vol(VolumePhase::Restoring, 10 * 1024 * 1024, Some("node-a"));
        let later = t0 + Duration::from_secs(2);
        assert!(
            lines
                .lines(&dr(Phase::Restoring, vec![v.clone()]), later)
                .is_empty()
        );
        let later = t0 + Duration::from_secs(6);
        assert_eq!(
            lines.lines(&dr(Phase::Restoring, vec![v.clone()]), later),
            vec!["  shop/data-0: 10.0 MiB of 100.0 MiB (10%)"]
        );
        // Nothing new: nothing printed, however long it has been.
        let much_later = t0 + Duration::from_secs(60);
        assert!(
            lines
                .lines(&dr(Phase::Restoring, vec![v]), much_later)
                .is_empty()
        );

        let mut v = vol(VolumePhase::Completed, 100 * 1024 * 1024, Some("node-a"));
        v.message = Some("ignored".into());
        assert_eq!(
            lines.lines(&dr(Phase::Completed, vec![v]), much_later),
            vec![
                "restore r1: Completed",
                "  shop/data-0: Completed, 100.0 MiB"
            ]
        );
    }

    #[test]
    fn failed_volumes_show_their_message() {
        let mut v = vol(VolumePhase::Failed, 0, Some("node-a"));
        v.message = Some("PodVolumeRestore failed: repository not found".into());
        assert_eq!(
            volume_state(&v),
            "Failed: PodVolumeRestore failed: repository not found"
        );
        assert_eq!(volume_state(&vol(VolumePhase::Pending, 0, None)), "Pending");
    }
}

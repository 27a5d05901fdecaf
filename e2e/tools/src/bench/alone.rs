//! `--refill-only`: refill alone, every volume at once (`parallel: N`), for sizes where
//! the floors, the default-parallel run and the kubectl script would take hours
//! (10,000 claims). What it measures is what the scale targets are judged on: time per
//! PVC, requests per PVC, the controller's peak memory and the largest status written.
//! Its table has a section of its own in the results, so that such a run and the full
//! benchmark's runs keep each other's tables. Each size's row is kept (in
//! `refill-alone.json` beside the results) until that size is measured again: the
//! 10,000-claim run takes an hour, and the targets compare it with N = 1000.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result};
use k8s_openapi::jiff::Timestamp;
use kube::Client;

use super::report::{machine, per, revision, rss, secs};
use super::scene::Scene;
use super::{Options, RefillRun, settled_load};
use refill_e2e::Cluster;
use serde::{Deserialize, Serialize};

/// The one section this mode writes.
pub const HEADING: &str = "## refill alone at scale";

/// One size measured by refill alone.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AloneOutcome {
    pub n: usize,
    /// The machine's 1-minute load average as this N's run began, before its setup.
    pub load_average: f64,
    pub setup: Duration,
    pub refill: RefillRun,
}

/// Runs every size in turn with refill alone.
pub async fn run(
    cluster: &Cluster,
    admin: &Client,
    options: &Options,
) -> Result<Vec<AloneOutcome>> {
    let mut outcomes = Vec::new();
    for (i, &n) in options.sizes.iter().enumerate() {
        eprintln!("[bench] N = {n}, refill alone");
        let more_to_come = i + 1 < options.sizes.len();
        let load_average = settled_load(options.quiet_wait).await;
        eprintln!("[bench] load average (1 min) {load_average:.2}");
        let resume = options.resume_run.as_deref();
        let (scene, setup) = Scene::create(cluster, admin, n, 0, options.replicas, resume).await?;
        let measured = measure(cluster, admin, options, &scene).await;
        if options.keep {
            eprintln!("[bench] keeping everything of run {}", scene.run_id);
        } else if let Err(e) = scene.cleanup(admin, more_to_come).await {
            eprintln!("[bench] cleanup of run {} failed: {e:#}", scene.run_id);
        }
        let refill = measured.with_context(|| format!("refill alone at N = {n}"))?;
        let outcome = AloneOutcome {
            n,
            load_average,
            setup,
            refill,
        };
        eprintln!("{}", one_line(&outcome));
        outcomes.push(outcome);
    }
    Ok(outcomes)
}

async fn measure(
    cluster: &Cluster,
    admin: &Client,
    options: &Options,
    scene: &Scene,
) -> Result<RefillRun> {
    let _agent = refill_e2e::node_agent::spawn(admin.clone(), super::agent_config(scene));
    let _kubelet = refill_e2e::kubelet::spawn(admin.clone(), None);
    super::quiet_before("refill", options.quiet_wait).await;
    super::refill_at_once(cluster, admin, options, scene).await
}

fn one_line(o: &AloneOutcome) -> String {
    format!(
        "[bench] N = {}: refill {} ({:.3} s per PVC), {} requests per PVC, peak RSS {}, largest status {:.1} KiB",
        o.n,
        secs(o.refill.wall),
        per_pvc(o),
        per(o.refill.requests.total, o.n),
        rss(o.refill.controller_peak_rss),
        o.refill.largest_status_bytes as f64 / 1024.0
    )
}

fn per_pvc(o: &AloneOutcome) -> f64 {
    o.refill.wall.as_secs_f64() / o.n.max(1) as f64
}

/// One size's measurement as kept between runs: what the section shows of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub n: usize,
    /// When, on what machine, at which revision and with which command.
    pub measured: String,
    pub machine: String,
    pub revision: String,
    pub command: String,
    pub load_average: f64,
    pub setup_s: f64,
    pub refill_s: f64,
    pub ready_s: f64,
    pub requests: usize,
    pub writes: usize,
    pub status_writes: usize,
    pub reads: usize,
    pub watches: usize,
    pub peak_rss_bytes: Option<u64>,
    pub largest_status_bytes: usize,
    pub controller_cpu_s: Option<f64>,
    pub machine_cpu_s: f64,
    /// The most frequent requests, `verb resource` and how many per PVC.
    pub top_requests: Vec<(String, f64)>,
    /// What a reader of the row should know that its figures do not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Row {
    pub fn of(o: &AloneOutcome, command: &str) -> Row {
        let r = &o.refill.requests;
        let mut top: Vec<(String, usize)> = r
            .by_verb_resource
            .iter()
            .map(|(k, c)| (k.clone(), *c))
            .collect();
        top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let top = top
            .into_iter()
            .take(8)
            .map(|(k, c)| (k, c as f64 / o.n.max(1) as f64))
            .collect();
        Row {
            n: o.n,
            measured: Timestamp::now().strftime("%Y-%m-%d %H:%M UTC").to_string(),
            machine: machine(),
            revision: revision(),
            command: command.to_string(),
            load_average: o.load_average,
            setup_s: o.setup.as_secs_f64(),
            refill_s: o.refill.wall.as_secs_f64(),
            ready_s: o.refill.ready_wall.as_secs_f64(),
            requests: r.total,
            writes: r.writes(),
            status_writes: r.status_write_count(),
            reads: r.reads(),
            watches: r.watches(),
            peak_rss_bytes: o.refill.controller_peak_rss,
            largest_status_bytes: o.refill.largest_status_bytes,
            controller_cpu_s: o.refill.controller_cpu,
            machine_cpu_s: o.refill.machine_cpu,
            top_requests: top,
            note: None,
        }
    }

    fn per_pvc(&self) -> f64 {
        self.refill_s / self.n.max(1) as f64
    }

    fn requests_per_pvc(&self) -> f64 {
        self.requests as f64 / self.n.max(1) as f64
    }
}

/// Where the rows are kept: beside the results file.
pub fn store_path(results: &Path) -> PathBuf {
    results.with_file_name("refill-alone.json")
}

/// The rows kept from earlier runs; none if there is no store yet.
pub fn load(path: &Path) -> Result<Vec<Row>> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// `kept` with the sizes `new` measured replaced by `new`'s rows, by size.
pub fn merge(kept: Vec<Row>, new: Vec<Row>) -> Vec<Row> {
    let mut rows: Vec<Row> = kept
        .into_iter()
        .filter(|k| !new.iter().any(|r| r.n == k.n))
        .collect();
    rows.extend(new);
    rows.sort_by_key(|r| r.n);
    rows
}

/// The section this mode owns, with no preamble: the full benchmark's stays.
pub fn markdown(rows: &[Row]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{HEADING}\n");
    let _ = writeln!(
        s,
        "The scene of the runs above (one namespace, Deployment and claim per PVC, one \
         backup), restored by refill alone with `parallel: N`; no floors, no \
         default-parallel run, no kubectl script. Each end state checked as above. A size \
         keeps its row until it is measured again (`e2e/bench/run <N...> --refill-only`; \
         the rows are kept in `refill-alone.json` beside this file), so the rows may come \
         from different commits: each says which.\n"
    );
    let _ = writeln!(
        s,
        "| N | measured | load (1 min) | setup | refill | refill, all Ready | per PVC | requests/PVC | writes/PVC | status writes/PVC | reads/PVC | watches opened | controller peak RSS | largest status | controller CPU | machine CPU |"
    );
    let _ = writeln!(
        s,
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for r in rows {
        let d = Duration::from_secs_f64;
        let _ = writeln!(
            s,
            "| {} | {}, {} | {:.1} | {} | {} | {} | {:.3} s | {} | {} | {} | {} | {} | {} | {:.1} KiB | {} | {:.1} s |",
            r.n,
            r.measured,
            r.revision,
            r.load_average,
            secs(d(r.setup_s)),
            secs(d(r.refill_s)),
            secs(d(r.ready_s)),
            r.per_pvc(),
            per(r.requests, r.n),
            per(r.writes, r.n),
            per(r.status_writes, r.n),
            per(r.reads, r.n),
            r.watches,
            rss(r.peak_rss_bytes),
            r.largest_status_bytes as f64 / 1024.0,
            r.controller_cpu_s
                .map_or("-".into(), |c| format!("{c:.1} s")),
            r.machine_cpu_s,
        );
    }
    let _ = writeln!(
        s,
        "\nThe columns mean what they mean in the tables above. Each size's machine and command, \
         and its most frequent requests per PVC:\n"
    );
    for r in rows {
        let top: Vec<String> = r
            .top_requests
            .iter()
            .map(|(k, c)| format!("{k} {c:.1}"))
            .collect();
        let note = r.note.as_deref().map_or(String::new(), |n| format!(" {n}"));
        let _ = writeln!(
            s,
            "- N = {}: {}, `{}`. {}.{note}",
            r.n,
            r.machine,
            r.command,
            top.join(", ")
        );
    }
    let _ = writeln!(s, "\n| target | measured | met |\n|---|---|---|");
    for (target, measured, met) in targets(rows) {
        let met = match met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "-",
        };
        let _ = writeln!(s, "| {target} | {measured} | {met} |");
    }
    s
}

/// The scale targets these rows are judged on: what each measured, and whether it is
/// met (`None`: a size it needs has no row).
pub fn targets(rows: &[Row]) -> Vec<(String, String, Option<bool>)> {
    let at = |n: usize| rows.iter().find(|r| r.n == n);
    let per_pvc = "time per PVC at N = 10000 within 25% of N = 1000's";
    let mut out = Vec::new();
    out.push(match (at(1000), at(10_000)) {
        (Some(k), Some(tk)) => {
            let growth = tk.per_pvc() / k.per_pvc() - 1.0;
            (
                per_pvc.into(),
                format!(
                    "{:.3} s against {:.3} s ({:+.0}%)",
                    tk.per_pvc(),
                    k.per_pvc(),
                    growth * 100.0
                ),
                Some(growth <= 0.25),
            )
        }
        _ => (per_pvc.into(), "needs both sizes".into(), None),
    });
    // Flat means the cost per PVC does not grow with N. A larger size may need fewer:
    // at 10,000 claims more of a volume's progress writes fall within the second a
    // record waits for the next, so it is judged against the smallest size, not both ways.
    let flat = "requests per PVC flat from the smallest size to the largest (none more than 10% above the smallest's)";
    out.push(match (rows.first(), rows.last()) {
        (Some(small), Some(large)) if small.n != large.n => {
            let base = small.requests_per_pvc();
            let grown = rows.iter().any(|r| r.requests_per_pvc() > base * 1.1);
            let listed: Vec<String> = rows
                .iter()
                .map(|r| format!("{:.1} at {}", r.requests_per_pvc(), r.n))
                .collect();
            (flat.into(), listed.join(", "), Some(!grown))
        }
        _ => (flat.into(), "needs two sizes".into(), None),
    });
    for (n, limit_mib) in [(1000, 100.0), (10_000, 250.0)] {
        let target = format!("controller peak RSS ≤ {limit_mib} MiB at N = {n}");
        out.push(match at(n).and_then(|r| r.peak_rss_bytes) {
            Some(b) => (
                target,
                rss(Some(b)),
                Some(b as f64 <= limit_mib * 1024.0 * 1024.0),
            ),
            None => (target, "not measured".into(), None),
        });
    }
    let target = "largest status < 256 KiB at N = 10000".to_string();
    out.push(match at(10_000) {
        Some(r) => (
            target,
            format!("{:.1} KiB", r.largest_status_bytes as f64 / 1024.0),
            Some(r.largest_status_bytes < 256 * 1024),
        ),
        None => (target, "not measured".into(), None),
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(n: usize, refill_s: f64, requests: usize, rss_mib: u64) -> Row {
        Row {
            n,
            measured: "2026-12-06 18:00 UTC".into(),
            machine: "2 cores".into(),
            revision: "commit abc".into(),
            command: format!("e2e/bench/run {n} --refill-only"),
            load_average: 0.9,
            setup_s: 10.0,
            refill_s,
            ready_s: refill_s + 1.0,
            requests,
            writes: requests / 2,
            status_writes: requests / 4,
            reads: requests / 4,
            watches: 0,
            peak_rss_bytes: Some(rss_mib * 1024 * 1024),
            largest_status_bytes: 1024,
            controller_cpu_s: Some(1.0),
            machine_cpu_s: 2.0,
            top_requests: vec![("patch volumepluginrestores/status".into(), 7.4)],
            note: None,
        }
    }

    #[test]
    fn a_size_measured_again_replaces_only_its_own_row() {
        let kept = vec![
            row(1000, 185.0, 21_000, 90),
            row(10_000, 2000.0, 210_000, 200),
        ];
        let merged = merge(
            kept,
            vec![row(1000, 170.0, 20_000, 85), row(100, 20.0, 2100, 34)],
        );
        let sizes: Vec<(usize, f64)> = merged.iter().map(|r| (r.n, r.refill_s)).collect();
        assert_eq!(sizes, [(100, 20.0), (1000, 170.0), (10_000, 2000.0)]);
        let text = markdown(&merged);
        assert!(text.starts_with(HEADING), "{text}");
        assert_eq!(text.matches("| 10000 | 2026-12-06").count(), 1, "{text}");
    }

    #[test]
    fn targets_compare_the_sizes_kept() {
        let met = |rows: &[Row]| -> Vec<Option<bool>> {
            targets(rows).into_iter().map(|(_, _, m)| m).collect()
        };
        let good = [
            row(1000, 180.0, 21_000, 90),
            row(10_000, 2000.0, 215_000, 240),
        ];
        assert_eq!(met(&good), [Some(true); 5]);
        // 10,000 claims 40% slower per PVC, more requests per PVC, over its memory.
        let bad = [
            row(1000, 180.0, 21_000, 90),
            row(10_000, 2520.0, 250_000, 260),
        ];
        assert_eq!(
            met(&bad),
            [
                Some(false),
                Some(false),
                Some(true),
                Some(false),
                Some(true)
            ]
        );
        // Fewer requests per PVC at the larger size is no growth.
        let fewer = [
            row(1000, 180.0, 22_000, 90),
            row(10_000, 2000.0, 190_000, 240),
        ];
        assert_eq!(met(&fewer), [Some(true); 5]);
        // One size alone: what needs the other is not judged.
        assert_eq!(met(&good[..1]), [None, None, Some(true), None, None]);
    }
}

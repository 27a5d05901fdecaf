//! The benchmark's report: a markdown table per run and the request breakdown.

use std::fmt::Write as _;
use std::path::Path;

use k8s_openapi::jiff::Timestamp;

use refill::controller::DEFAULT_PARALLEL;

use super::progress::ProgressOutcome;
use super::{Options, Outcome, QUIET_LOAD, RefillRun};

const MIB: f64 = 1024.0 * 1024.0;

/// Every section this benchmark may render: a run that renders one of them not (a
/// single size has no medians, no growth) drops the older run's from the results.
pub const HEADINGS: &[&str] = &[
    "## Summary",
    "## The controller's work",
    "## The floor",
    "## The restore floor",
    "## How wall time grows",
    "## Against the targets",
    "## Progress check",
    "## The controller's requests by verb and resource",
    "## When the controller did what",
    "## Medians of repeated runs",
];

pub(super) fn secs(d: std::time::Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

pub(super) fn per(count: usize, n: usize) -> String {
    format!("{:.1}", count as f64 / n.max(1) as f64)
}

/// One line for the console after each size.
pub fn one_line(o: &Outcome) -> String {
    let baseline = match o.baseline_wall() {
        Some((d, true)) => format!("~{} (extrapolated)", secs(d)),
        Some((d, false)) => secs(d),
        None => "-".into(),
    };
    let r = &o.refill;
    format!(
        "[bench] N={}: set up in {}, refill {} (all Ready {}), floor {} ({:.1}× it), restore floor \
         {} ({:.1}× it), refill at default parallel {}, kubectl {}, {} requests ({} writes, {} \
         reads), peak RSS {}",
        o.n,
        secs(o.setup),
        secs(r.wall),
        secs(r.ready_wall),
        secs(o.floor.wall),
        o.over_floor(),
        secs(o.restore_floor.wall),
        o.over_restore_floor(),
        secs(o.refill_default.wall),
        baseline,
        r.requests.total,
        r.requests.writes(),
        r.requests.reads(),
        rss(r.controller_peak_rss),
    )
}

/// What the restores of a run do with files the backup does not hold, and so what the
/// restore floor does besides.
fn exactness(extra_files: refill::api::ExtraFiles) -> &'static str {
    match extra_files {
        refill::api::ExtraFiles::Delete => {
            "The restores are exact (`extraFiles: Delete`, refill's default): the volume \
             ends as the backup holds it, so it is cleared before the node agent writes \
             and what it held is removed after. The least that takes is what refill does, \
             in the same stand-in: so the restore floor's stand-in carries refill's \
             set-aside and tidy containers too, its PodVolumeRestore waits for the \
             set-aside's report and its deletion for the tidy's end."
        }
        refill::api::ExtraFiles::Keep => {
            "The restores keep files the backup does not hold (`extraFiles: Keep`): \
             neither refill's stand-ins nor the restore floor's clear or tidy the volume."
        }
    }
}

pub(super) fn rss(bytes: Option<u64>) -> String {
    bytes.map_or("-".into(), |b| format!("{:.1} MiB", b as f64 / MIB))
}

/// How a run's `parallel` is shown.
fn parallel(r: &RefillRun) -> String {
    match r.parallel {
        Some(p) => p.to_string(),
        None => format!("{DEFAULT_PARALLEL} (default)"),
    }
}

/// The machine, as a results file names it: cores, CPU, memory.
pub fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).trim().to_string())
        .unwrap_or_else(|| "unknown CPU".into());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_gib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0 / 1024.0);
    format!("{cores} cores ({model}), {mem_gib:.0} GiB")
}

/// refill's commit, and whether src/ differs from it.
pub fn revision() -> String {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(&repo)
            .args(args)
            .output()
            .ok()
    };
    let Some(head) = git(&["rev-parse", "--short", "HEAD"]).filter(|o| o.status.success()) else {
        return "unknown revision".into();
    };
    let head = String::from_utf8_lossy(&head.stdout).trim().to_string();
    let clean = git(&["diff", "--quiet", "HEAD", "--", "src"]).is_some_and(|o| o.status.success());
    if clean {
        format!("commit {head}")
    } else {
        format!("commit {head} with uncommitted changes in src/")
    }
}

/// The whole report as markdown.
pub fn markdown(
    options: &Options,
    outcomes: &[Outcome],
    progress: Option<&ProgressOutcome>,
) -> String {
    let mut s = String::new();
    let now = Timestamp::now().strftime("%Y-%m-%d %H:%M UTC").to_string();
    let replicas = match options.replicas {
        1 => "1 replica".to_string(),
        n => format!("{n} replicas"),
    };
    let _ = writeln!(s, "# Benchmark results\n");
    let _ = writeln!(
        s,
        "Measured {now} on {}, refill at {}, with `{}`.\n",
        machine(),
        revision(),
        options.command
    );
    let _ = writeln!(
        s,
        "Each run: N namespaces, each with a Deployment of {replicas} mounting one \
         PVC (a local PV holding 3 files, 68 KiB), all in one Velero backup, the files then \
         damaged. refill restores them with one DataRestore (`includedNamespaces`: the N \
         namespaces, `parallel: N`), its controller a separate process running as its \
         ServiceAccount. The floor is what any in-place restore of them must at least do, \
         done by the benchmark itself (kube-rs, in process, {} requests in flight) as fast \
         as the API server allows: scale every Deployment to 0, watch its pods go, scale it \
         back, watch them Ready. The restore floor adds to it what a restore through \
         Velero's node agent cannot do without, done the same way with no record kept: per \
         namespace, once its pods are gone, a stand-in pod (refill's own manifest) and, once \
         restore-wait runs, a PodVolumeRestore; the stand-in deleted once that is Completed, \
         the Deployment scaled back once the stand-in is gone. {} Then the files are damaged again and refill restores them \
         with `parallel` left at its default ({DEFAULT_PARALLEL}). The baseline, \
         `e2e/bench/kubectl-restore.sh`, restores another N such namespaces with kubectl, one \
         PVC at a time. The simulated node agent finishes each PodVolumeRestore at once, so \
         the times are orchestration only. Every end state is checked: files byte for byte, \
         replicas back and Ready, no helper pod left.\n",
        super::IN_FLIGHT,
        exactness(options.extra_files),
    );

    let _ = writeln!(s, "## Summary\n");
    let _ = writeln!(
        s,
        "| N | load (1 min) | setup | refill | refill, all Ready | floor | refill / floor | restore floor | refill / restore floor | refill, parallel {DEFAULT_PARALLEL} (default) | kubectl script | speed-up |"
    );
    let _ = writeln!(
        s,
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for o in outcomes {
        let (baseline, ratio) = match o.baseline_wall() {
            Some((d, extrapolated)) => {
                let mark = if extrapolated { " *" } else { "" };
                let ratio = d.as_secs_f64() / o.refill.wall.as_secs_f64().max(1e-9);
                (format!("{}{mark}", secs(d)), format!("{ratio:.1}×{mark}"))
            }
            None => ("-".into(), "-".into()),
        };
        let _ = writeln!(
            s,
            "| {} | {:.1} | {} | {} | {} | {} | {:.1}× | {} | {:.1}× | {} | {} | {} |",
            o.n,
            o.load_average,
            secs(o.setup),
            secs(o.refill.wall),
            secs(o.refill.ready_wall),
            secs(o.floor.wall),
            o.over_floor(),
            secs(o.restore_floor.wall),
            o.over_restore_floor(),
            secs(o.refill_default.wall),
            baseline,
            ratio,
        );
    }
    let extrapolated: Vec<&Outcome> = outcomes
        .iter()
        .filter(|o| o.baseline_wall().is_some_and(|(_, e)| e))
        .collect();
    if !extrapolated.is_empty() {
        let _ = writeln!(s);
        for o in extrapolated {
            let b = o.baseline.as_ref().expect("filtered");
            let _ = writeln!(
                s,
                "\\* N = {}: extrapolated, not measured: the script restored the first {} PVCs in {} \
                 ({:.2} s per PVC), times {}.",
                o.n,
                b.claims,
                secs(b.wall),
                b.wall.as_secs_f64() / b.claims.max(1) as f64,
                o.n
            );
        }
    }
    let _ = writeln!(
        s,
        "\nrefill's time runs from the DataRestore's creation to its phase Completed (the \
         controller already running), every Deployment scaled back; \"all Ready\" until their \
         pods are Ready too, as the floors' times, from their first scale-down. refill / floor \
         and refill / restore floor are \"all Ready\" over each. The script's time is its whole run. The load is the \
         machine's as each N began, before its setup (`e2e/bench/run` has each N wait up \
         to 3 minutes for it to fall below 1.0, and each way after it likewise); setup is \
         everything before the restores (namespaces, PVs, claims, Deployments Ready, the \
         backup)."
    );

    let _ = writeln!(s, "\n## The controller's work\n");
    let _ = writeln!(
        s,
        "| N | parallel | writes/PVC | writes/PVC besides status | status writes/PVC | reads/PVC | watches opened | controller peak RSS | largest status | controller CPU | machine CPU |"
    );
    let _ = writeln!(
        s,
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for o in outcomes {
        for run in [&o.refill, &o.refill_default] {
            let r = &run.requests;
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {:.1} KiB | {} | {:.1} s |",
                o.n,
                parallel(run),
                per(r.writes(), o.n),
                per(r.writes() - r.status_write_count(), o.n),
                per(r.status_write_count(), o.n),
                per(r.reads(), o.n),
                r.watches(),
                rss(run.controller_peak_rss),
                run.largest_status_bytes as f64 / 1024.0,
                run.controller_cpu
                    .map_or("-".into(), |c| format!("{c:.1} s")),
                run.machine_cpu,
            );
        }
    }
    let _ = writeln!(
        s,
        "\nRequests are the controller's, counted in the apiserver's audit log by its token \
         and user agent from the DataRestore's creation until it was idle again (one per \
         request; a watch counts when it opens). Status writes are patches and PUTs of \
         `datarestores/status` and `volumepluginrestores/status`: phase changes and progress. \
         CPU is seconds spent over the same time (user and system, from `/proc`): the \
         controller process's, and the whole machine's on both cores (cluster, simulated node \
         agent, controller and benchmark), whose sum bounds the wall time from below when the \
         machine is busy."
    );

    let _ = writeln!(s, "\n## The floor\n");
    let _ = writeln!(
        s,
        "Seconds after its first scale-down; one scale write each way per Deployment.\n"
    );
    let _ = writeln!(
        s,
        "| N | scale-downs answered | pods gone | scale-ups answered | all Ready | writes |"
    );
    let _ = writeln!(s, "|---:|---:|---:|---:|---:|---:|");
    for o in outcomes {
        let f = &o.floor;
        let _ = writeln!(
            s,
            "| {} | {:.2} | {:.2} | {:.2} | {:.2} | {} |",
            o.n,
            f.scaled_down,
            f.pods_gone,
            f.scaled_up,
            f.wall.as_secs_f64(),
            f.writes
        );
    }

    let _ = writeln!(s, "\n## The restore floor\n");
    let _ = writeln!(
        s,
        "Seconds after its first scale-down; five writes per Deployment (two scales, a \
         stand-in, a PodVolumeRestore, a delete).\n"
    );
    let _ = writeln!(
        s,
        "| N | last stand-in created | last PodVolumeRestore Completed | last scale-up answered | all Ready | writes | machine CPU |"
    );
    let _ = writeln!(s, "|---:|---:|---:|---:|---:|---:|---:|");
    for o in outcomes {
        let f = &o.restore_floor;
        let _ = writeln!(
            s,
            "| {} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {:.1} s |",
            o.n,
            f.last_stand_in,
            f.last_restored,
            f.last_scaled_up,
            f.wall.as_secs_f64(),
            f.writes,
            f.machine_cpu
        );
    }

    if outcomes.len() > 1 {
        let _ = writeln!(s, "\n## How wall time grows\n");
        let _ = writeln!(s, "| N | refill | per PVC | × time vs previous N | × N |");
        let _ = writeln!(s, "|---:|---:|---:|---:|---:|");
        let mut previous: Option<&Outcome> = None;
        for o in outcomes {
            let growth = previous.map_or(("-".into(), "-".into()), |p| {
                (
                    format!(
                        "{:.2}",
                        o.refill.wall.as_secs_f64() / p.refill.wall.as_secs_f64().max(1e-9)
                    ),
                    format!("{:.2}", o.n as f64 / p.n as f64),
                )
            });
            let _ = writeln!(
                s,
                "| {} | {} | {:.3} s | {} | {} |",
                o.n,
                secs(o.refill.wall),
                o.refill.wall.as_secs_f64() / o.n as f64,
                growth.0,
                growth.1
            );
            previous = Some(o);
        }
    }

    medians(&mut s, outcomes);

    if let Some(o) = outcomes.iter().rev().find(|o| o.baseline.is_some()) {
        let b = o.baseline.as_ref().expect("found");
        if !b.steps.is_empty() {
            let total: f64 = b.steps.iter().map(|(_, ms)| ms).sum();
            let steps: Vec<String> = b
                .steps
                .iter()
                .map(|(step, ms)| format!("{step} {:.0} ms", ms))
                .collect();
            let _ = writeln!(
                s,
                "\nWhere the kubectl script's time goes, mean per PVC at N = {} ({:.2} s in all): {}.",
                o.n,
                total / 1000.0,
                steps.join(", ")
            );
        }
    }

    targets(&mut s, outcomes, progress);

    if let Some(p) = progress {
        let vpr = steady_writes(p, "volumepluginrestores/status");
        let dr = steady_writes(p, "datarestores/status");
        let _ = writeln!(s, "\n## Progress check\n");
        let _ = writeln!(
            s,
            "{} PVCs restored by one DataRestore while the node agent copied at {} bytes/s per \
             volume (about 8 s each) and reported progress every {} ms: done in {:.1} s. While \
             every volume was copying ({:.1} s, when only progress changed), refill wrote each \
             VolumePluginRestore's status {:.1} times (shortest gap {}) and the DataRestore's \
             {:.0} times (shortest gap {}). Over the whole restore, phase changes included: {} \
             VolumePluginRestore and {} DataRestore status writes.",
            p.pvcs,
            p.bytes_per_second,
            p.agent_report_interval.as_millis(),
            p.wall.as_secs_f64(),
            p.steady_seconds,
            vpr.per_object,
            vpr.gap_text(),
            dr.per_object,
            dr.gap_text(),
            total(p, "volumepluginrestores/status"),
            total(p, "datarestores/status"),
        );
    }

    let _ = writeln!(s, "\n## The controller's requests by verb and resource\n");
    let _ = writeln!(
        s,
        "Per run, with `parallel: N` and with the default `parallel`, from the \
         DataRestore's creation until the controller was idle; the figure after the slash \
         is per PVC.\n"
    );
    let runs: Vec<(String, usize, &RefillRun)> = outcomes
        .iter()
        .flat_map(|o| {
            [
                (format!("N = {}, parallel N", o.n), o.n, &o.refill),
                (format!("N = {}, default", o.n), o.n, &o.refill_default),
            ]
        })
        .collect();
    let mut keys: Vec<&String> = runs
        .iter()
        .flat_map(|(_, _, run)| run.requests.by_verb_resource.keys())
        .collect();
    keys.sort();
    keys.dedup();
    let _ = write!(s, "| request |");
    for (label, _, _) in &runs {
        let _ = write!(s, " {label} |");
    }
    let _ = write!(s, "\n|---|");
    for _ in &runs {
        let _ = write!(s, "---:|");
    }
    let _ = writeln!(s);
    for key in keys {
        let _ = write!(s, "| {key} |");
        for (_, n, run) in &runs {
            let c = run.requests.by_verb_resource.get(key).copied().unwrap_or(0);
            let _ = write!(s, " {c} / {} |", per(c, *n));
        }
        let _ = writeln!(s);
    }
    let _ = write!(s, "| **all** |");
    for (_, n, run) in &runs {
        let _ = write!(
            s,
            " {} / {} |",
            run.requests.total,
            per(run.requests.total, *n)
        );
    }
    let _ = writeln!(s);
    let failures: Vec<String> = outcomes
        .iter()
        .filter(|o| !o.refill.requests.failures.is_empty())
        .map(|o| format!("N = {}: {:?}", o.n, o.refill.requests.failures))
        .collect();
    if !failures.is_empty() {
        let _ = writeln!(
            s,
            "\nAnswers other than 2xx (code: count): {}.",
            failures.join("; ")
        );
    }
    let _ = writeln!(
        s,
        "\nAt start-up, before the DataRestore existed, the controller made: {}.",
        outcomes
            .iter()
            .map(|o| format!(
                "N = {}: {} requests, {} watches",
                o.n,
                o.refill.startup_requests.total,
                o.refill.startup_requests.watches()
            ))
            .collect::<Vec<_>>()
            .join("; ")
    );

    let _ = writeln!(s, "\n## When the controller did what\n");
    let _ = writeln!(
        s,
        "Seconds after the DataRestore's creation, from the audit log (first and last request \
         of each kind).\n"
    );
    for o in outcomes {
        for run in [&o.refill, &o.refill_default] {
            let steps: Vec<String> = run
                .timeline
                .iter()
                .map(|(label, t)| format!("{label} {t:.2}"))
                .collect();
            let _ = writeln!(
                s,
                "- N = {}, parallel {}: {}; Completed {:.2}, all Ready {:.2}.",
                o.n,
                parallel(run),
                steps.join(", "),
                run.wall.as_secs_f64(),
                run.ready_wall.as_secs_f64()
            );
        }
    }
    let _ = writeln!(
        s,
        "\nController: {}. Load average (1 min) as each N began: {}; as each way began, after \
         waiting (up to {} s) for it to fall below {QUIET_LOAD:.1}: {}. Other work on the machine \
         slows refill, the floor and the script alike but not equally, so compare runs made under \
         similar load.",
        outcomes
            .first()
            .map_or("-".into(), |o| o.refill.controller_binary.clone()),
        outcomes
            .iter()
            .map(|o| format!("N = {}: {:.1}", o.n, o.load_average))
            .collect::<Vec<_>>()
            .join(", "),
        options.quiet_wait.as_secs(),
        outcomes
            .iter()
            .map(|o| format!("N = {}: {}", o.n, ways_loads(&o.loads)))
            .collect::<Vec<_>>()
            .join("; ")
    );
    s
}

struct Steady {
    per_object: f64,
    gap: Option<f64>,
}

impl Steady {
    fn gap_text(&self) -> String {
        self.gap
            .map_or("- (fewer than two)".into(), |g| format!("{g:.2} s"))
    }
}

/// Status writes of `resource` per object while only progress changed, and the
/// shortest gap between two writes of one object.
/// The median of `values` and their spread (lowest, highest).
pub fn median_spread(mut values: Vec<f64>) -> (f64, f64, f64) {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n == 0 {
        return (0.0, 0.0, 0.0);
    }
    let median = if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    };
    (median, values[0], values[n - 1])
}

/// A measure of one size's runs as a target is judged on it: their median, and the
/// spread when there were several.
struct Judged {
    median: f64,
    text: String,
}

fn judged(runs: &[&Outcome], f: impl Fn(&Outcome) -> f64, unit: &str, digits: usize) -> Judged {
    let (median, lo, hi) = median_spread(runs.iter().map(|o| f(o)).collect());
    let text = if runs.len() > 1 {
        format!(
            "{median:.digits$}{unit} (median of {}; {lo:.digits$}–{hi:.digits$})",
            runs.len()
        )
    } else {
        format!("{median:.digits$}{unit}")
    };
    Judged { median, text }
}

/// One row per target and size, judged on the median of that size's runs.
fn targets(s: &mut String, outcomes: &[Outcome], progress: Option<&ProgressOutcome>) {
    let _ = writeln!(s, "\n## Against the targets\n");
    let _ = writeln!(
        s,
        "Each judged on the median of the size's runs; the lowest and highest beside it.\n"
    );
    let _ = writeln!(s, "| target | measured | met |");
    let _ = writeln!(s, "|---|---|---|");
    let yes = |ok: bool| if ok { "yes" } else { "**no**" };
    let mut sizes: Vec<usize> = outcomes.iter().map(|o| o.n).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let runs_of = |n: usize| -> Vec<&Outcome> { outcomes.iter().filter(|o| o.n == n).collect() };
    let mut row = |target: String, measured: String, ok: bool| {
        let _ = writeln!(s, "| {target} | {measured} | {} |", yes(ok));
    };
    let per_pvc = |r: &RefillRun, n: usize| r.wall.as_secs_f64() / n.max(1) as f64;
    if sizes.contains(&100) {
        let j = judged(&runs_of(100), |o| o.refill.wall.as_secs_f64(), " s", 2);
        row("100 PVCs in ≤ 20 s".into(), j.text, j.median <= 20.0);
    }
    for &n in sizes.iter().filter(|&&n| n == 100 || n == 1000) {
        let j = judged(&runs_of(n), Outcome::over_restore_floor, "×", 2);
        let ok = j.median <= 1.2;
        row(format!("refill / restore floor ≤ 1.2, N = {n}"), j.text, ok);
    }
    if sizes.contains(&100) && sizes.contains(&1000) {
        let small = judged(&runs_of(100), |o| per_pvc(&o.refill, o.n), " s", 3);
        let big = judged(&runs_of(1000), |o| per_pvc(&o.refill, o.n), " s", 3);
        let change = big.median / small.median.max(1e-9) - 1.0;
        row(
            "time per PVC at N = 1000 within 20% of N = 100".into(),
            format!(
                "{:.3} s against {:.3} s ({:+.0}%)",
                big.median,
                small.median,
                change * 100.0
            ),
            change.abs() <= 0.2,
        );
    }
    for &n in &sizes {
        let j = judged(
            &runs_of(n),
            |o| per_pvc(&o.refill_default, o.n) / per_pvc(&o.refill, o.n).max(1e-9),
            "×",
            2,
        );
        let ok = j.median <= 1.5;
        row(
            format!("cost per PVC at the default parallelism ≤ 1.5× parallel N, N = {n}"),
            j.text,
            ok,
        );
    }
    for &n in &sizes {
        let runs: Vec<&Outcome> = runs_of(n)
            .into_iter()
            .filter(|o| o.baseline.is_some())
            .collect();
        if runs.is_empty() {
            continue;
        }
        let extrapolated = runs
            .iter()
            .any(|o| o.baseline_wall().is_some_and(|(_, e)| e));
        let j = judged(
            &runs,
            |o| {
                let (d, _) = o.baseline_wall().unwrap_or_default();
                d.as_secs_f64() / o.refill.wall.as_secs_f64().max(1e-9)
            },
            "×",
            1,
        );
        let mark = if extrapolated { ", extrapolated" } else { "" };
        let ok = j.median >= 10.0;
        row(
            format!("≥ 10× faster than kubectl, N = {n}"),
            format!("{}{mark}", j.text),
            ok,
        );
    }
    for &n in &sizes {
        let j = judged(
            &runs_of(n),
            |o| {
                let r = &o.refill.requests;
                (r.writes() - r.status_write_count()) as f64 / o.n.max(1) as f64
            },
            "",
            1,
        );
        let ok = j.median <= 12.0;
        row(
            format!("≤ 12 writes per PVC besides status, N = {n}"),
            j.text,
            ok,
        );
    }
    if let Some(p) = progress {
        let vpr = steady_writes(p, "volumepluginrestores/status");
        let dr = steady_writes(p, "datarestores/status");
        let ok = vpr.gap.is_none_or(|g| g >= 0.95) && dr.gap.is_none_or(|g| g >= 0.95);
        row(
            "progress written ≤ 1/s per volume (progress check)".into(),
            format!(
                "shortest gap between two writes of one VolumePluginRestore {}, of the DataRestore {}",
                vpr.gap_text(),
                dr.gap_text()
            ),
            ok,
        );
    }
    for &n in &sizes {
        let runs = runs_of(n);
        if runs.iter().all(|o| o.refill.controller_peak_rss.is_none()) {
            continue;
        }
        // What the controller holds grows with the restore; a thousand volumes get
        // twice the room of a hundred. Either parallelism counts.
        let bound = if n >= 1000 { 100.0 } else { 50.0 };
        let j = judged(
            &runs,
            |o| {
                let peak = o.refill.controller_peak_rss.unwrap_or(0);
                peak.max(o.refill_default.controller_peak_rss.unwrap_or(0)) as f64 / MIB
            },
            " MiB",
            1,
        );
        let ok = j.median <= bound;
        row(format!("controller RSS ≤ {bound} MiB, N = {n}"), j.text, ok);
    }
    for &n in &sizes {
        let largest = runs_of(n)
            .iter()
            .map(|o| {
                o.refill
                    .largest_status_bytes
                    .max(o.refill_default.largest_status_bytes)
            })
            .max()
            .unwrap_or(0);
        row(
            format!("largest status < 256 KiB, N = {n} (the largest of its runs)"),
            format!("{:.1} KiB", largest as f64 / 1024.0),
            largest < 256 * 1024,
        );
    }
}

/// For every N run more than once (`bench 100 100 100`): the median and the spread of
/// each run's measures, as the targets are judged on medians.
fn medians(s: &mut String, outcomes: &[Outcome]) {
    let mut sizes: Vec<usize> = outcomes.iter().map(|o| o.n).collect();
    sizes.dedup();
    let repeated: Vec<(usize, Vec<&Outcome>)> = sizes
        .into_iter()
        .map(|n| (n, outcomes.iter().filter(|o| o.n == n).collect::<Vec<_>>()))
        .filter(|(_, runs)| runs.len() > 1)
        .collect();
    if repeated.is_empty() {
        return;
    }
    let _ = writeln!(s, "\n## Medians of repeated runs\n");
    let _ = writeln!(
        s,
        "| N | runs | refill / restore floor | per PVC, parallel N | per PVC, parallel 8 (default) | default / parallel N | requests/PVC, default | peak RSS, default | largest status |"
    );
    let _ = writeln!(s, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let shown = |(m, lo, hi): (f64, f64, f64), unit: &str, digits: usize| {
        format!("{m:.digits$}{unit} ({lo:.digits$}–{hi:.digits$})")
    };
    for (n, runs) in repeated {
        let of = |f: &dyn Fn(&Outcome) -> f64| median_spread(runs.iter().map(|o| f(o)).collect());
        let per_pvc = |r: &RefillRun| r.wall.as_secs_f64() / n as f64;
        let _ = writeln!(
            s,
            "| {n} | {} | {} | {} | {} | {} | {} | {} | {} |",
            runs.len(),
            shown(of(&|o| o.over_restore_floor()), "×", 2),
            shown(of(&|o| per_pvc(&o.refill)), " s", 3),
            shown(of(&|o| per_pvc(&o.refill_default)), " s", 3),
            shown(
                of(&|o| per_pvc(&o.refill_default) / per_pvc(&o.refill).max(1e-9)),
                "×",
                2
            ),
            shown(
                of(&|o| o.refill_default.requests.total as f64 / n as f64),
                "",
                1
            ),
            shown(
                of(&|o| o.refill_default.controller_peak_rss.unwrap_or(0) as f64 / MIB),
                " MiB",
                1
            ),
            shown(
                of(&|o| o
                    .refill
                    .largest_status_bytes
                    .max(o.refill_default.largest_status_bytes) as f64
                    / 1024.0),
                " KiB",
                1
            ),
        );
    }
    let _ = writeln!(
        s,
        "\nEach cell: the median, and in brackets the lowest and highest run. Per PVC is the \
         wall time (request to Completed) over N; \"default / parallel N\" is the cost per PVC \
         at refill's default parallelism over its cost with every volume at once. The largest \
         status is the largest DataRestore status the benchmark's watch saw in either run."
    );
}

fn steady_writes(p: &ProgressOutcome, resource: &str) -> Steady {
    let (objects, writes) = p
        .steady
        .status_writes
        .get(resource)
        .copied()
        .unwrap_or((0, 0));
    Steady {
        per_object: writes as f64 / objects.max(1) as f64,
        gap: p.steady.min_status_gap.get(resource).copied(),
    }
}

fn total(p: &ProgressOutcome, resource: &str) -> usize {
    p.requests
        .status_writes
        .get(resource)
        .map_or(0, |(_, writes)| *writes)
}

/// The loads each way began at, as "refill 0.8, floor 0.9, ...".
fn ways_loads(loads: &[(&str, f64)]) -> String {
    loads
        .iter()
        .map(|(way, load)| format!("{way} {load:.1}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::{HEADINGS, median_spread};

    #[test]
    fn every_section_rendered_is_one_the_benchmark_owns() {
        let source = include_str!("report.rs");
        let rendered: Vec<&str> = source
            .split("writeln!(s, \"")
            .skip(1)
            .filter_map(|rest| rest.trim_start_matches("\\n").strip_prefix("## "))
            .map(|rest| rest.split("\\n").next().unwrap_or_default())
            .collect();
        assert_eq!(rendered.len(), HEADINGS.len(), "{rendered:?}");
        for heading in rendered {
            assert!(
                HEADINGS.contains(&format!("## {heading}").as_str()),
                "{heading}"
            );
        }
    }

    #[test]
    fn medians_and_spreads() {
        assert_eq!(median_spread(vec![3.0, 1.0, 2.0]), (2.0, 1.0, 3.0));
        assert_eq!(median_spread(vec![4.0, 1.0, 2.0, 3.0]), (2.5, 1.0, 4.0));
        assert_eq!(median_spread(vec![]), (0.0, 0.0, 0.0));
    }
}

//! The benchmark's report: a markdown table per run and the request breakdown.

use std::fmt::Write as _;
use std::path::Path;

use k8s_openapi::jiff::Timestamp;

use super::{Options, Outcome, ProgressOutcome};

const MIB: f64 = 1024.0 * 1024.0;

fn secs(d: std::time::Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

fn per(count: usize, n: usize) -> String {
    format!("{:.1}", count as f64 / n.max(1) as f64)
}

/// One line for the console after each size.
pub fn one_line(o: &Outcome) -> String {
    let baseline = match o.baseline_wall() {
        Some((d, true)) => format!("~{} (extrapolated)", secs(d)),
        Some((d, false)) => secs(d),
        None => "-".into(),
    };
    format!(
        "[bench] N={}: refill {}, kubectl {}, {} requests ({} writes, {} reads), peak RSS {}",
        o.n,
        secs(o.refill_wall),
        baseline,
        o.requests.total,
        o.requests.writes(),
        o.requests.reads(),
        o.controller_peak_rss
            .map_or("-".into(), |b| format!("{:.1} MiB", b as f64 / MIB)),
    )
}

fn machine() -> String {
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

fn revision() -> String {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
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
         ServiceAccount. The baseline, `e2e/bench/kubectl-restore.sh`, restores another N \
         such namespaces with kubectl, one PVC at a time. The simulated node agent finishes \
         each PodVolumeRestore at once, so the times are orchestration only. Both end states \
         are checked: files byte for byte, replicas back and Ready, no helper pod left.\n"
    );

    let _ = writeln!(s, "## Summary\n");
    let _ = writeln!(
        s,
        "| N | refill | kubectl script | speed-up | writes/PVC | writes/PVC besides status | status writes/PVC | reads/PVC | watches opened | controller peak RSS |"
    );
    let _ = writeln!(s, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for o in outcomes {
        let r = &o.requests;
        let (baseline, ratio) = match o.baseline_wall() {
            Some((d, extrapolated)) => {
                let mark = if extrapolated { " *" } else { "" };
                let ratio = d.as_secs_f64() / o.refill_wall.as_secs_f64().max(1e-9);
                (format!("{}{mark}", secs(d)), format!("{ratio:.1}×{mark}"))
            }
            None => ("-".into(), "-".into()),
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            o.n,
            secs(o.refill_wall),
            baseline,
            ratio,
            per(r.writes(), o.n),
            per(r.writes() - r.status_patches(), o.n),
            per(r.status_patches(), o.n),
            per(r.reads(), o.n),
            r.watches(),
            o.controller_peak_rss
                .map_or("-".into(), |b| format!("{:.1} MiB", b as f64 / MIB)),
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
         controller already running); the script's is its whole run. Requests are the \
         controller's, counted in the apiserver's audit log by its token and user agent from \
         the DataRestore's creation until it was idle again (one per request; a watch counts \
         when it opens). Status writes are patches of `datarestores/status` and \
         `volumepluginrestores/status`: phase changes and progress."
    );

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
                        o.refill_wall.as_secs_f64() / p.refill_wall.as_secs_f64().max(1e-9)
                    ),
                    format!("{:.2}", o.n as f64 / p.n as f64),
                )
            });
            let _ = writeln!(
                s,
                "| {} | {} | {:.3} s | {} | {} |",
                o.n,
                secs(o.refill_wall),
                o.refill_wall.as_secs_f64() / o.n as f64,
                growth.0,
                growth.1
            );
            previous = Some(o);
        }
    }

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

    let _ = writeln!(s, "\n## Against the targets\n");
    let _ = writeln!(s, "| target | measured | met |");
    let _ = writeln!(s, "|---|---|---|");
    let yes = |ok: bool| if ok { "yes" } else { "**no**" };
    if let Some(o) = outcomes.iter().find(|o| o.n == 100) {
        let ok = o.refill_wall.as_secs_f64() <= 20.0;
        let _ = writeln!(
            s,
            "| 100 PVCs in ≤ 20 s | {} | {} |",
            secs(o.refill_wall),
            yes(ok)
        );
    }
    for o in outcomes {
        if let Some((d, extrapolated)) = o.baseline_wall() {
            let ratio = d.as_secs_f64() / o.refill_wall.as_secs_f64().max(1e-9);
            let mark = if extrapolated { " (extrapolated)" } else { "" };
            let _ = writeln!(
                s,
                "| ≥ 10× faster than kubectl, N = {} | {ratio:.1}×{mark} | {} |",
                o.n,
                yes(ratio >= 10.0)
            );
        }
    }
    for o in outcomes {
        let r = &o.requests;
        let besides = (r.writes() - r.status_patches()) as f64 / o.n.max(1) as f64;
        let _ = writeln!(
            s,
            "| ≤ 12 writes per PVC besides status, N = {} | {besides:.1} | {} |",
            o.n,
            yes(besides <= 12.0)
        );
    }
    if let Some(p) = progress {
        let vpr = steady_writes(p, "volumepluginrestores/status");
        let dr = steady_writes(p, "datarestores/status");
        let ok = vpr.gap.is_none_or(|g| g >= 0.95) && dr.gap.is_none_or(|g| g >= 0.95);
        let _ = writeln!(
            s,
            "| progress written ≤ 1/s per volume (progress check) | shortest gap between two writes of one VolumePluginRestore {}, of the DataRestore {} | {} |",
            vpr.gap_text(),
            dr.gap_text(),
            yes(ok)
        );
    }
    for o in outcomes {
        if let Some(b) = o.controller_peak_rss {
            let mib = b as f64 / MIB;
            let _ = writeln!(
                s,
                "| controller RSS ≤ 50 MiB, N = {} | {mib:.1} MiB | {} |",
                o.n,
                yes(mib <= 50.0)
            );
        }
    }

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
        "Per run, from the DataRestore's creation until the controller was idle; the \
         figure after the slash is per PVC.\n"
    );
    let mut keys: Vec<&String> = outcomes
        .iter()
        .flat_map(|o| o.requests.by_verb_resource.keys())
        .collect();
    keys.sort();
    keys.dedup();
    let _ = write!(s, "| request |");
    for o in outcomes {
        let _ = write!(s, " N = {} |", o.n);
    }
    let _ = write!(s, "\n|---|");
    for _ in outcomes {
        let _ = write!(s, "---:|");
    }
    let _ = writeln!(s);
    for key in keys {
        let _ = write!(s, "| {key} |");
        for o in outcomes {
            let c = o.requests.by_verb_resource.get(key).copied().unwrap_or(0);
            let _ = write!(s, " {c} / {} |", per(c, o.n));
        }
        let _ = writeln!(s);
    }
    let _ = write!(s, "| **all** |");
    for o in outcomes {
        let _ = write!(
            s,
            " {} / {} |",
            o.requests.total,
            per(o.requests.total, o.n)
        );
    }
    let _ = writeln!(s);
    let failures: Vec<String> = outcomes
        .iter()
        .filter(|o| !o.requests.failures.is_empty())
        .map(|o| format!("N = {}: {:?}", o.n, o.requests.failures))
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
                o.startup_requests.total,
                o.startup_requests.watches()
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
        let steps: Vec<String> = o
            .timeline
            .iter()
            .map(|(label, t)| format!("{label} {t:.2}"))
            .collect();
        let _ = writeln!(
            s,
            "- N = {}: {}; Completed {:.2}.",
            o.n,
            steps.join(", "),
            o.refill_wall.as_secs_f64()
        );
    }
    let _ = writeln!(
        s,
        "\nController: {}. Load average (1 min) as each restore began: {}. Other work on \
         the machine slows refill and the script alike but not equally, so compare runs made \
         under similar load.",
        outcomes
            .first()
            .map_or("-".into(), |o| o.controller_binary.clone()),
        outcomes
            .iter()
            .map(|o| format!("N = {}: {:.1}", o.n, o.load_average))
            .collect::<Vec<_>>()
            .join(", ")
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

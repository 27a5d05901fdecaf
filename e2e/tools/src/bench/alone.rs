//! `--refill-only`: refill alone, every volume at once (`parallel: N`), for sizes where
//! the floors, the default-parallel run and the kubectl script would take hours
//! (10,000 claims). What it measures is what the scale targets are judged on: time per
//! PVC, requests per PVC, the controller's peak memory and the largest status written.
//! Its table has a section of its own in the results, so that such a run and the full
//! benchmark's runs keep each other's tables.

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::{Context as _, Result};
use k8s_openapi::jiff::Timestamp;
use kube::Client;

use super::report::{machine, per, revision, rss, secs};
use super::scene::Scene;
use super::{Options, RefillRun, settled_load};
use refill_e2e::Cluster;

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

/// The section this mode owns, with no preamble: the full benchmark's stays.
pub fn markdown(options: &Options, outcomes: &[AloneOutcome]) -> String {
    let mut s = String::new();
    let now = Timestamp::now().strftime("%Y-%m-%d %H:%M UTC").to_string();
    let _ = writeln!(s, "{HEADING}\n");
    let _ = writeln!(
        s,
        "Measured {now} on {}, refill at {}, with `{}`: the scene of the runs above (one \
         namespace, Deployment and claim per PVC, one backup), restored by refill alone with \
         `parallel: N`; no floors, no default-parallel run, no kubectl script. Each end state \
         checked as above.\n",
        machine(),
        revision(),
        options.command
    );
    let _ = writeln!(
        s,
        "| N | load (1 min) | setup | refill | refill, all Ready | per PVC | requests/PVC | writes/PVC | status writes/PVC | reads/PVC | watches opened | controller peak RSS | largest status | controller CPU | machine CPU |"
    );
    let _ = writeln!(
        s,
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for o in outcomes {
        let r = &o.refill.requests;
        let _ = writeln!(
            s,
            "| {} | {:.1} | {} | {} | {} | {:.3} s | {} | {} | {} | {} | {} | {} | {:.1} KiB | {} | {:.1} s |",
            o.n,
            o.load_average,
            secs(o.setup),
            secs(o.refill.wall),
            secs(o.refill.ready_wall),
            per_pvc(o),
            per(r.total, o.n),
            per(r.writes(), o.n),
            per(r.status_patches(), o.n),
            per(r.reads(), o.n),
            r.watches(),
            rss(o.refill.controller_peak_rss),
            o.refill.largest_status_bytes as f64 / 1024.0,
            o.refill
                .controller_cpu
                .map_or("-".into(), |c| format!("{c:.1} s")),
            o.refill.machine_cpu,
        );
    }
    let by_verb: Vec<String> = outcomes
        .iter()
        .map(|o| {
            let mut counts: Vec<(&String, &usize)> =
                o.refill.requests.by_verb_resource.iter().collect();
            counts.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            let top: Vec<String> = counts
                .iter()
                .take(8)
                .map(|(k, c)| format!("{k} {}", per(**c, o.n)))
                .collect();
            format!("N = {}: {}", o.n, top.join(", "))
        })
        .collect();
    let _ = writeln!(
        s,
        "\nThe columns mean what they mean in the tables above. Most frequent requests per \
         PVC: {}.",
        by_verb.join("; ")
    );
    s
}

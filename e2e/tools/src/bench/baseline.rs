//! Runs the kubectl baseline, `e2e/bench/kubectl-restore.sh`, over the baseline's
//! namespaces, with the kubectl built alongside the local cluster.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use refill_e2e::Cluster;
use tokio::io::{AsyncBufReadExt, BufReader};

use super::scene::{APP, BACKUP, CLAIM, Scene, Side};

/// The script, as checked in.
pub fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/kubectl-restore.sh")
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct BaselineRun {
    /// Claims the script restored.
    pub claims: usize,
    /// Its whole run.
    pub wall: Duration,
    /// Seconds per claim, as the script reported them.
    pub per_claim: Vec<f64>,
    /// Mean milliseconds per claim of each step, in the script's order, from its log.
    pub steps: Vec<(String, f64)>,
}

impl BaselineRun {
    /// The time for `n` claims: measured, or scaled up from the claims restored.
    pub fn total(&self, n: usize) -> Duration {
        if self.claims >= n || self.claims == 0 {
            self.wall
        } else {
            self.wall.mul_f64(n as f64 / self.claims as f64)
        }
    }

    pub fn extrapolated(&self, n: usize) -> bool {
        self.claims < n
    }
}

pub async fn run(cluster: &Cluster, scene: &Scene) -> Result<BaselineRun> {
    let targets: Vec<String> = scene
        .namespaces(Side::Baseline)
        .iter()
        .map(|ns| format!("{ns}/{CLAIM}={APP}"))
        .collect();
    let log_path = scene.dir.join("kubectl-restore.log");
    let log = std::fs::File::create(&log_path)?;
    let started = Instant::now();
    let mut child = tokio::process::Command::new("bash")
        .arg(script())
        .args(["-n", &scene.velero_ns, "-b", BACKUP, "-r", &scene.run_id])
        .args(["-t", "300s"])
        .args(&targets)
        .env("KUBECTL", cluster.kubectl())
        .env("KUBECONFIG", &cluster.kubeconfig)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("running {}", script().display()))?;
    let stdout = child.stdout.take().context("no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let mut per_claim = Vec::new();
    while let Some(line) = lines.next_line().await? {
        if let Some(seconds) = line
            .rsplit_once(" in ")
            .and_then(|(_, s)| s.trim().parse::<f64>().ok())
        {
            per_claim.push(seconds);
            if per_claim.len() % 10 == 0 {
                eprintln!(
                    "[bench] kubectl script: {} of {} claims after {:.0}s",
                    per_claim.len(),
                    targets.len(),
                    started.elapsed().as_secs_f64()
                );
            }
        }
    }
    let status = child.wait().await?;
    let wall = started.elapsed();
    if !status.success() {
        let text = std::fs::read_to_string(&log_path).unwrap_or_default();
        bail!(
            "the kubectl script failed ({status}) after {} of {} claims:\n{text}",
            per_claim.len(),
            targets.len()
        );
    }
    if per_claim.len() != targets.len() {
        bail!(
            "the kubectl script reported {} restored claims of {}",
            per_claim.len(),
            targets.len()
        );
    }
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    Ok(BaselineRun {
        claims: targets.len(),
        wall,
        per_claim,
        steps: step_means(&log),
    })
}

/// Mean time of each step from the script's log lines
/// `[kubectl-restore] ns/pvc: <step> [details] (<ms> ms)`; a step is named by its
/// first two words.
fn step_means(log: &str) -> Vec<(String, f64)> {
    let mut order: Vec<String> = Vec::new();
    let mut sums: std::collections::BTreeMap<String, (f64, usize)> = Default::default();
    for line in log.lines() {
        let Some(rest) = line.strip_prefix("[kubectl-restore] ") else {
            continue;
        };
        let Some((_, what)) = rest.split_once(": ") else {
            continue;
        };
        let Some((text, ms)) = what.rsplit_once(" (") else {
            continue;
        };
        let Some(ms) = ms.strip_suffix(" ms)").and_then(|m| m.parse::<f64>().ok()) else {
            continue;
        };
        let step = text
            .split_whitespace()
            .take(2)
            .collect::<Vec<_>>()
            .join(" ");
        if !sums.contains_key(&step) {
            order.push(step.clone());
        }
        let entry = sums.entry(step).or_default();
        entry.0 += ms;
        entry.1 += 1;
    }
    order
        .into_iter()
        .map(|step| {
            let (sum, count) = sums[&step];
            (step, sum / count.max(1) as f64)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_averaged_in_order() {
        let log = "[kubectl-restore] a/data: scaled down from 1 (100 ms)\n\
                   [kubectl-restore] a/data: pods gone (300 ms)\n\
                   [kubectl-restore] b/data: scaled down from 2 (200 ms)\n\
                   other line\n";
        assert_eq!(
            step_means(log),
            vec![("scaled down".into(), 150.0), ("pods gone".into(), 300.0)]
        );
    }
}

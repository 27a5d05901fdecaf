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
    Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/kubectl-restore.sh")
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct BaselineRun {
    /// Claims the script restored.
    pub claims: usize,
    /// Its whole run.
    pub wall: Duration,
    /// Seconds per claim, as the script reported them.
    pub per_claim: Vec<f64>,
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
    Ok(BaselineRun {
        claims: targets.len(),
        wall,
        per_claim,
    })
}

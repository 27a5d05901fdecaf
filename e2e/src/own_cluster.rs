//! Clusters of a test's own, beside the shared one: for a test that kills the
//! control plane's components (which must not disturb other tests), or one that
//! needs another Velero release than the shared cluster runs (a cluster holds one
//! release's CRDs). Each is `e2e/cluster/up.sh` with a state directory of its own,
//! its ports moved by an offset, and settings of its own. Left running after the
//! test, like the shared cluster, unless CI asks for everything to stop.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::cluster::{Cluster, is_ready, scripts_dir};

pub struct OwnCluster {
    /// `REFILL_CLUSTER_DIR`.
    pub dir: PathBuf,
    /// `REFILL_PORT_OFFSET`: clusters on one machine must differ in it (ports and
    /// the real nodes' host-side addresses derive from it).
    pub port_offset: u16,
    /// Further variables of `up.sh` (`REFILL_REAL_NODES`, `REFILL_VELERO_VERSION`,
    /// ...). Every start passes the same, so a restart never reshapes the cluster.
    settings: Vec<(&'static str, String)>,
}

impl OwnCluster {
    /// `~/.cache/refill/<name>`, ports moved by `port_offset`.
    pub fn new(name: &str, port_offset: u16) -> Self {
        let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
        Self::at(
            PathBuf::from(home).join(".cache/refill").join(name),
            port_offset,
        )
    }

    pub fn at(dir: PathBuf, port_offset: u16) -> Self {
        Self {
            dir,
            port_offset,
            settings: Vec::new(),
        }
    }

    /// One more variable for `up.sh` and `down.sh`.
    pub fn with(mut self, variable: &'static str, value: impl Into<String>) -> Self {
        self.settings.push((variable, value.into()));
        self
    }

    fn script(&self, name: &str) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(scripts_dir().join(name));
        command
            .env("REFILL_CLUSTER_DIR", &self.dir)
            .env("REFILL_PORT_OFFSET", self.port_offset.to_string())
            .envs(self.settings.iter().map(|(k, v)| (k, v)))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::inherit());
        command
    }

    async fn up(&self) -> Result<()> {
        let status = self
            .script("up.sh")
            .status()
            .await
            .context("running e2e/cluster/up.sh")?;
        if !status.success() {
            bail!("up.sh failed ({status}) for {}", self.dir.display());
        }
        Ok(())
    }

    /// Starts the cluster, or finds it running, and waits until it answers.
    pub async fn start(&self) -> Result<Cluster> {
        self.up().await?;
        let bin_dir_file = self.dir.join("bin-dir");
        let bin_dir = std::fs::read_to_string(&bin_dir_file)
            .with_context(|| format!("up.sh left no {}", bin_dir_file.display()))?;
        let cluster = Cluster {
            dir: self.dir.clone(),
            kubeconfig: self.dir.join("admin.kubeconfig"),
            bin_dir: PathBuf::from(bin_dir.trim()),
        };
        if !is_ready(&cluster).await {
            bail!(
                "the cluster in {} does not answer after up.sh",
                self.dir.display()
            );
        }
        Ok(cluster)
    }

    /// Stops the cluster when the run is CI's (`CI=true`) or asks for it
    /// (`REFILL_STOP_CLUSTER=1`), as `e2e/test` does with the shared one. A failure
    /// to stop is reported, not returned: it must not hide the test's own outcome.
    pub async fn stop_if_asked(&self) {
        let asked = std::env::var("CI").is_ok_and(|v| v == "true")
            || std::env::var("REFILL_STOP_CLUSTER").is_ok_and(|v| v == "1");
        if !asked {
            return;
        }
        match self.script("down.sh").status().await {
            Ok(status) if status.success() => {}
            outcome => eprintln!("stopping {}: {outcome:?}", self.dir.display()),
        }
    }

    /// Kills one component at once (SIGKILL, by the pid `up.sh` recorded), waits
    /// until the process is gone, and has `up.sh` start it again, which returns
    /// when the cluster is usable. Returns how long the component was down.
    pub async fn restart_component(&self, component: &str) -> Result<Duration> {
        let pid_file = self.dir.join("run").join(format!("{component}.pid"));
        let pid = std::fs::read_to_string(&pid_file)
            .with_context(|| format!("reading {}", pid_file.display()))?
            .trim()
            .to_string();
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
        if !pid.chars().all(|c| c.is_ascii_digit()) || !exe.ends_with(component) {
            bail!(
                "{} names {pid}, which is not a running {component}",
                pid_file.display()
            );
        }
        let stopped = std::time::Instant::now();
        let status = tokio::process::Command::new("kill")
            .args(["-KILL", &pid])
            .status()
            .await?;
        if !status.success() {
            bail!("kill -KILL {pid} ({component}) failed: {status}");
        }
        crate::support::wait_for(
            format!("{component} ({pid}) to exit"),
            Duration::from_secs(30),
            || async {
                let state =
                    std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                let gone = state.split_whitespace().nth(2).is_none_or(|s| s == "Z");
                Ok(gone.then_some(()))
            },
        )
        .await?;
        self.up().await?;
        Ok(stopped.elapsed())
    }
}

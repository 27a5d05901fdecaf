//! The controller under test as a process of its own, so its memory can be read from
//! `/proc`, running as refill's ServiceAccount with a token issued for this run only:
//! the token's ID tells its requests apart in the audit log from those of any other
//! refill controller (other tests) talking to the same cluster.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::Cluster;
use crate::fixture::CONTROLLER_SA;
use crate::service_account_token;
use anyhow::{Context as _, Result, bail};
use kube::config::Kubeconfig;

/// Which program runs the controller.
#[derive(Debug, Clone)]
pub enum ControllerKind {
    /// `refill controller` from this binary: what the benchmark is about.
    Refill(PathBuf),
    /// This benchmark binary with `--controller-only`, which runs the same controller
    /// code; for the smoke test, where no `refill` binary is built alongside.
    SelfExec,
}

pub struct ControllerProcess {
    child: tokio::process::Child,
    pid: u32,
    probe: u16,
    log: PathBuf,
    credential: String,
    kind: ControllerKind,
}

impl ControllerProcess {
    /// Starts the controller for `velero_ns` and waits until it reports ready.
    pub async fn start(
        cluster: &Cluster,
        kind: &ControllerKind,
        velero_ns: &str,
        dir: &Path,
    ) -> Result<Self> {
        Self::start_named(cluster, kind, velero_ns, dir, "controller", &[]).await
    }

    /// [`ControllerProcess::start`] for one of several controllers of a test: `name`
    /// names its log and kubeconfig in `dir` and, as `--identity`, the replica in the
    /// leader Lease (a `refill` binary's); `extra` are further arguments.
    pub async fn start_named(
        cluster: &Cluster,
        kind: &ControllerKind,
        velero_ns: &str,
        dir: &Path,
        name: &str,
        extra: &[&str],
    ) -> Result<Self> {
        let admin = cluster.admin_client().await?;
        let token = service_account_token(&admin, CONTROLLER_SA.0, CONTROLLER_SA.1).await?;
        let credential = format!("JTI={}", token_id(&token)?);
        let kubeconfig = dir.join(format!("{name}.kubeconfig"));
        write_token_kubeconfig(&cluster.kubeconfig, &token, &kubeconfig)?;
        let probe = free_port()?;
        let log = dir.join(format!("{name}.log"));
        let log_file = std::fs::File::create(&log)?;
        let mut command = match kind {
            ControllerKind::Refill(binary) => {
                let mut c = tokio::process::Command::new(binary);
                c.args(["controller", "--identity", name]);
                c
            }
            ControllerKind::SelfExec => {
                let mut c = tokio::process::Command::new(std::env::current_exe()?);
                c.arg("--controller-only");
                c
            }
        };
        command
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--namespace", velero_ns])
            .args(["--probe-addr", &format!("127.0.0.1:{probe}")])
            .args(extra)
            .env(
                "RUST_LOG",
                std::env::var("BENCH_CONTROLLER_LOG").unwrap_or_else(|_| "info,kube=warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(log_file.try_clone()?)
            .stderr(log_file)
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .with_context(|| format!("starting the controller ({kind:?})"))?;
        let pid = child.id().context("the controller exited at once")?;
        let started = Instant::now();
        loop {
            if let Some(status) = child.try_wait()? {
                bail!(
                    "the controller exited ({status}) before it was ready; see {}",
                    log.display()
                );
            }
            if ready(probe).await {
                break;
            }
            if started.elapsed() > Duration::from_secs(60) {
                bail!(
                    "the controller was not ready within a minute; see {}",
                    log.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(ControllerProcess {
            child,
            pid,
            probe,
            log,
            credential,
            kind: kind.clone(),
        })
    }

    /// `JTI=<id>` of the token, as the audit log shows it under
    /// `user.extra["authentication.kubernetes.io/credential-id"]`.
    pub fn credential_id(&self) -> &str {
        &self.credential
    }

    /// The process ID, for reading more from `/proc`.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Peak resident set size so far (VmHWM), in bytes.
    pub fn peak_rss(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb * 1024)
    }

    pub fn describe(&self) -> String {
        match &self.kind {
            ControllerKind::Refill(path) => format!("{} controller", path.display()),
            ControllerKind::SelfExec => "bench --controller-only (same controller code)".into(),
        }
    }

    /// The body of `/metrics`, as Prometheus would scrape it.
    pub async fn scrape(&self) -> Result<String> {
        let answer = get(self.probe, "/metrics").await?;
        let (head, body) = answer
            .split_once("\r\n\r\n")
            .context("/metrics answered without a body")?;
        if !head.starts_with("HTTP/1.1 200") {
            bail!("/metrics answered {head}");
        }
        Ok(body.to_string())
    }

    /// Where the process's output goes.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// Fails when the controller has exited: it must run until it is stopped.
    pub fn ensure_running(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!(
                "the controller exited ({status}); see {}",
                self.log.display()
            );
        }
        Ok(())
    }

    /// Stops the controller (it is killed; it holds no state of its own).
    pub async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}

async fn ready(port: u16) -> bool {
    get(port, "/readyz")
        .await
        .is_ok_and(|answer| answer.starts_with("HTTP/1.1 200"))
}

/// The whole answer (status line, headers, body) to `GET path` on the probe port
/// (127.0.0.1:`port`).
pub async fn get(port: u16, path: &str) -> std::io::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let request = format!("GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await?;
    Ok(answer)
}

fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// Writes a kubeconfig for the cluster of `admin_kubeconfig` with `token` (of
/// refill's ServiceAccount) as its only user, readable by its owner only: a file left
/// from before is replaced, not rewritten, so that it cannot keep wider permissions.
pub fn write_token_kubeconfig(admin_kubeconfig: &Path, token: &str, path: &Path) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let admin = Kubeconfig::read_from(admin_kubeconfig)?;
    let cluster = admin
        .clusters
        .first()
        .context("the admin kubeconfig names no cluster")?;
    let user = format!("{}/{}", CONTROLLER_SA.0, CONTROLLER_SA.1);
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "refill", "context": {
            "cluster": cluster.name, "user": user, "namespace": CONTROLLER_SA.0,
        }}],
        "current-context": "refill",
    });
    let yaml = yaml_serde::to_string(&config)?;
    let _ = std::fs::remove_file(path);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    file.write_all(yaml.as_bytes())?;
    Ok(())
}

/// The `jti` claim of a JWT (no signature check: the token is our own).
fn token_id(token: &str) -> Result<String> {
    let payload = token.split('.').nth(1).context("the token is not a JWT")?;
    let bytes = base64url(payload).context("the token's payload is not base64url")?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes)?;
    claims["jti"]
        .as_str()
        .map(str::to_string)
        .context("the token has no jti claim")
}

fn base64url(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let mut buffer = 0u32;
    let mut bits = 0;
    for c in text.bytes().filter(|&c| c != b'=') {
        let value = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' | b'+' => 62,
            b'_' | b'/' => 63,
            _ => return None,
        };
        buffer = (buffer << 6) | u32::from(value);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((buffer >> bits) as u8);
            buffer &= (1 << bits) - 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64url_decodes_without_padding() {
        assert_eq!(
            base64url("eyJqdGkiOiJhYmMifQ").unwrap(),
            br#"{"jti":"abc"}"#
        );
        assert_eq!(base64url("TWE").unwrap(), b"Ma");
        assert!(base64url("a*b").is_none());
    }

    #[test]
    fn the_token_id_is_the_jti_claim() {
        assert_eq!(token_id("x.eyJqdGkiOiJhYmMifQ.sig").unwrap(), "abc");
    }
}

//! The demo's background processes (the refill controller and the simulated node
//! agent): started in their own process group, so that Ctrl-C in the terminal reaches
//! only the demo, which then stops them itself; output to a log file each; a pid file
//! each, so that a run that was killed outright has its leftovers stopped by the next.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

pub struct Background {
    /// For messages: `refill controller`.
    pub name: &'static str,
    pub log: PathBuf,
    child: Child,
    pid_file: PathBuf,
}

/// Starts `program` with `args`, its output written to `<logs>/<file>.log`.
pub fn spawn(
    name: &'static str,
    file: &str,
    program: &Path,
    args: &[String],
    logs: &Path,
    run: &Path,
) -> Result<Background> {
    std::fs::create_dir_all(logs)?;
    std::fs::create_dir_all(run)?;
    let log = logs.join(format!("{file}.log"));
    let out = std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
    let child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .env_remove("KUBECONFIG")
        .env_remove("REFILL_NAMESPACE")
        // Plain text in the log files.
        .env("NO_COLOR", "1")
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", program.display()))?;
    let pid_file = run.join(format!("{file}.pid"));
    if let Some(pid) = child.id() {
        std::fs::write(&pid_file, format!("{pid}\n{}\n", program.display()))?;
    }
    Ok(Background {
        name,
        log,
        child,
        pid_file,
    })
}

impl Background {
    /// Fails if the process has exited.
    pub fn check_alive(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!("the {} exited ({status})", self.name);
        }
        Ok(())
    }

    /// Asks the process to stop (SIGTERM), and kills it if it is still there after
    /// `grace`.
    pub async fn stop(mut self, grace: Duration) {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .stderr(Stdio::null())
                .status();
            if tokio::time::timeout(grace, self.child.wait())
                .await
                .is_err()
            {
                let _ = self.child.kill().await;
            }
        }
        let _ = std::fs::remove_file(&self.pid_file);
    }
}

/// The last `lines` lines of a log file.
pub fn log_tail(path: &Path, lines: usize) -> String {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("({}: {e})", path.display()),
    }
}

/// Stops processes an earlier run recorded in `<run>/*.pid` and never stopped (it was
/// killed outright), if each still runs the program recorded with it.
pub async fn stop_leftovers(run: &Path) -> Vec<String> {
    let mut stopped = Vec::new();
    let Ok(entries) = std::fs::read_dir(run) else {
        return stopped;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "pid") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let mut lines = text.lines();
        let (Some(pid), Some(program)) = (lines.next(), lines.next()) else {
            let _ = std::fs::remove_file(&path);
            continue;
        };
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).map(|p| {
            p.to_string_lossy()
                .trim_end_matches(" (deleted)")
                .to_string()
        });
        if pid.parse::<u32>().is_ok() && exe.is_ok_and(|exe| exe == program) {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", pid])
                .stderr(Stdio::null())
                .status();
            for _ in 0..50 {
                if !Path::new(&format!("/proc/{pid}")).exists() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            stopped.push(format!("{program} (pid {pid})"));
        }
        let _ = std::fs::remove_file(&path);
    }
    stopped
}

/// A TCP port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// Whether `http://127.0.0.1:<port><path>` answers 200.
pub async fn http_ok(port: u16, path: &str) -> bool {
    let probe = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        stream
            .write_all(format!("GET {path} HTTP/1.0\r\nhost: 127.0.0.1\r\n\r\n").as_bytes())
            .await?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await?;
        std::io::Result::Ok(
            answer.starts_with(b"HTTP/1.1 200") || answer.starts_with(b"HTTP/1.0 200"),
        )
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(2), probe).await,
        Ok(Ok(true))
    )
}

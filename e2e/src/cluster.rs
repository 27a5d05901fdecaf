//! Finding (or starting) the local cluster and making clients for it.
//!
//! The cluster is the one `e2e/cluster/up.sh` runs: a real kube-apiserver,
//! controller-manager and scheduler over etcd, with kwok simulating most nodes
//! and a few real nodes (kubelet, containerd, runc) for pods that must really run.
//! Its state lives in `$REFILL_CLUSTER_DIR` (default `~/.cache/refill/cluster`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::PostParams;
use kube::config::AuthInfo;
use kube::{Api, Client, Config};
use sha2::Digest as _;
use tokio::sync::OnceCell;

/// Names of the simulated nodes with the default `REFILL_NODES=3`.
pub const NODES: [&str; 3] = ["node-a", "node-b", "node-c"];

/// Names of the real nodes (kubelet, containerd, runc) with the default
/// `REFILL_REAL_NODES=2`. See `e2e/cluster/nodes.sh`.
pub const REAL_NODES: [&str; 2] = ["real-a", "real-b"];

/// Label every real node carries, with the value `real`.
pub const REAL_NODE_LABEL: &str = "refill.dev/node-kind";

/// Key of the NoSchedule taint on every real node: only pods that tolerate it run
/// there, so kwok-based tests never land on a real node by chance.
pub const REAL_NODE_TAINT: &str = "refill.dev/real-node";

/// The image whose one program (`/testbox`: write, sleep, api) test pods on real
/// nodes run; imported into every real node, never pulled (`e2e/images`).
pub const TESTBOX_IMAGE: &str = "refill.local/testbox:1";

/// The pause image real nodes use as sandbox, also tagged `registry.k8s.io/pause:3.10`.
pub const PAUSE_IMAGE: &str = "refill.local/pause:1";

/// The namespace annotation of the PodNodeSelector admission plugin: the node
/// selector every pod of the namespace gets.
pub const NODE_SELECTOR_ANNOTATION: &str = "scheduler.alpha.kubernetes.io/node-selector";

/// The namespace annotations that put every pod of a namespace (stand-ins and
/// Velero's data movers included) on the real nodes, as an admin would: a node
/// selector (PodNodeSelector) and a toleration of their taint
/// (PodTolerationRestriction).
pub fn real_node_annotations() -> std::collections::BTreeMap<String, String> {
    let toleration = serde_json::json!([{ "key": REAL_NODE_TAINT, "operator": "Exists", "effect": "NoSchedule" }]);
    [
        (
            NODE_SELECTOR_ANNOTATION.to_string(),
            format!("{REAL_NODE_LABEL}=real"),
        ),
        (
            "scheduler.alpha.kubernetes.io/defaultTolerations".to_string(),
            toleration.to_string(),
        ),
    ]
    .into()
}

/// The StorageClass of local-path-provisioner on the real nodes
/// (WaitForFirstConsumer, reclaim policy Delete).
pub const LOCAL_PATH_CLASS: &str = "refill-local-path";

/// The tag under which refill's own image (`e2e/images/refill-image.sh`) is
/// imported into the real nodes by [`Cluster::load_refill_image`].
pub const REFILL_IMAGE: &str = "refill.local/refill:dev";

/// Annotation that releases a pod held by its `restore-wait` init container; the
/// value must be `"true"`. See `e2e/cluster/kwok/stages.yaml`.
pub const RESTORE_WAIT_DONE: &str = "refill.dev/restore-wait-done";

/// Name of the init container the simulated kubelet keeps running until
/// [`RESTORE_WAIT_DONE`] is set.
pub const RESTORE_WAIT_CONTAINER: &str = "restore-wait";

/// User agent of the admin clients made here (tests' own requests).
pub const TEST_USER_AGENT: &str = "refill-e2e";

/// Control-plane components, as named in `$dir/logs/<name>.log`.
pub const COMPONENTS: [&str; 5] = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
];

/// A running local cluster: where its files are.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// State directory (`$REFILL_CLUSTER_DIR`).
    pub dir: PathBuf,
    /// Admin kubeconfig (client certificate in `system:masters`).
    pub kubeconfig: PathBuf,
    /// Directory holding kubectl, kube-apiserver, etcd, kwok and the rest.
    pub bin_dir: PathBuf,
}

impl Cluster {
    /// Path to the kubectl built with the cluster.
    pub fn kubectl(&self) -> PathBuf {
        self.bin_dir.join("kubectl")
    }

    /// A kubectl command already pointed at the cluster as admin.
    pub fn kubectl_command(&self) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(self.kubectl());
        cmd.arg("--kubeconfig").arg(&self.kubeconfig);
        cmd
    }

    /// Log file of a component (see [`COMPONENTS`]).
    pub fn log_path(&self, component: &str) -> PathBuf {
        self.dir.join("logs").join(format!("{component}.log"))
    }

    /// The apiserver's audit log: one JSON line per request from users and
    /// service accounts outside kube-system (the control plane is left out).
    pub fn audit_log_path(&self) -> PathBuf {
        self.dir.join("logs").join("audit.log")
    }

    /// The last `lines` lines of a component's log, or a note why there are none.
    /// JSON lines (kwok's) are shortened to time, level, message and fields.
    pub fn log_tail(&self, component: &str, lines: usize) -> String {
        let path = self.log_path(component);
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let all: Vec<&str> = text.lines().collect();
                all[all.len().saturating_sub(lines)..]
                    .iter()
                    .map(|line| readable_log_line(line))
                    .collect::<Vec<_>>()
                    .join("\n")
            }
            Err(e) => format!("({}: {e})", path.display()),
        }
    }

    /// State directory of a real node (`nodes/<name>`): its logs, containerd and
    /// kubelet state, and `local-path/`, where the provisioner puts its volumes.
    pub fn real_node_dir(&self, node: &str) -> PathBuf {
        self.dir.join("nodes").join(node)
    }

    /// Builds refill's image from this checkout (a static binary of the
    /// `test-image` profile; cargo makes that quick when nothing changed), imports
    /// it into every real node as
    /// [`REFILL_IMAGE`], and returns the archive's SHA-256: a pod template that
    /// carries it rolls out again whenever the image changed under the same tag.
    pub async fn load_refill_image(&self) -> Result<String> {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo.join("target"));
        let archive = target.join("refill-image.docker.tar");
        let build = tokio::process::Command::new(repo.join("e2e/images/refill-image.sh"))
            .args(["--format", "docker", "--profile", "test-image"])
            .args(["-t", REFILL_IMAGE, "-o"])
            .arg(&archive)
            .env("REFILL_CLUSTER_DIR", &self.dir)
            .stdout(std::process::Stdio::null())
            .status()
            .await
            .context("running e2e/images/refill-image.sh")?;
        if !build.success() {
            bail!("e2e/images/refill-image.sh failed ({build})");
        }
        let load = tokio::process::Command::new(scripts_dir().join("load-image.sh"))
            .arg(&archive)
            .env("REFILL_CLUSTER_DIR", &self.dir)
            .status()
            .await
            .context("running e2e/cluster/load-image.sh")?;
        if !load.success() {
            bail!(
                "e2e/cluster/load-image.sh {} failed ({load})",
                archive.display()
            );
        }
        let bytes =
            std::fs::read(&archive).with_context(|| format!("reading {}", archive.display()))?;
        Ok(hex::encode(sha2::Sha256::digest(&bytes)))
    }

    /// A scratch directory on this machine for the given name, created if
    /// missing: a place for `spec.local.path` of local PersistentVolumes.
    pub fn scratch_dir(&self, name: &str) -> Result<PathBuf> {
        let path = self.dir.join("scratch").join(name);
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(path)
    }

    /// Client configuration for the admin user. Its requests carry the user
    /// agent [`TEST_USER_AGENT`], so that they can be told apart from those of
    /// the code under test in the audit log (kube-rs sends none by default).
    pub async fn admin_config(&self) -> Result<Config> {
        Ok(refill::connect::config(Some(&self.kubeconfig), None, TEST_USER_AGENT).await?)
    }

    /// A client acting as cluster admin. Tests use it to set up and inspect;
    /// code under test should run as its own ServiceAccount
    /// ([`Cluster::service_account_client`]).
    pub async fn admin_client(&self) -> Result<Client> {
        Ok(Client::try_from(self.admin_config().await?)?)
    }

    /// A client that authenticates with a fresh token of the ServiceAccount
    /// `namespace/name` (TokenRequest API, valid one hour), so it gets exactly
    /// the permissions RBAC grants that account. The ServiceAccount must exist.
    pub async fn service_account_client(&self, namespace: &str, name: &str) -> Result<Client> {
        Ok(Client::try_from(
            self.service_account_config(namespace, name).await?,
        )?)
    }

    /// The configuration behind [`Cluster::service_account_client`], for callers
    /// that adjust it first (a user agent, timeouts). It sets no user agent and
    /// defaults to `namespace`.
    pub async fn service_account_config(&self, namespace: &str, name: &str) -> Result<Config> {
        let admin = self.admin_client().await?;
        let token = service_account_token(&admin, namespace, name).await?;
        let mut config = self.admin_config().await?;
        config.headers.clear();
        config.auth_info = AuthInfo {
            token: Some(token.into()),
            ..AuthInfo::default()
        };
        config.default_namespace = namespace.to_string();
        Ok(config)
    }
}

/// A structured (JSON) log line as `time level msg key=value ...`, without the
/// source location and process id that make kwok's lines hard to read; any
/// other line as it is.
fn readable_log_line(line: &str) -> String {
    let Ok(serde_json::Value::Object(mut fields)) = serde_json::from_str(line) else {
        return line.to_string();
    };
    fields.remove("source");
    fields.remove("id");
    let mut out = Vec::new();
    for key in ["time", "level", "msg"] {
        if let Some(value) = fields.remove(key) {
            out.push(
                value
                    .as_str()
                    .map_or_else(|| value.to_string(), str::to_string),
            );
        }
    }
    for (key, value) in fields {
        let value = value
            .as_str()
            .map_or_else(|| value.to_string(), str::to_string);
        out.push(format!("{key}={value}"));
    }
    out.join(" ")
}

/// Issues a token for the ServiceAccount `namespace/name` through its `token`
/// subresource.
pub async fn service_account_token(admin: &Client, namespace: &str, name: &str) -> Result<String> {
    let request = TokenRequest {
        spec: TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), namespace);
    let issued: TokenRequest = accounts
        .create_subresource("token", name, &PostParams::default(), &request)
        .await
        .with_context(|| format!("requesting a token for serviceaccount {namespace}/{name}"))?;
    match issued.status {
        Some(status) if !status.token.is_empty() => Ok(status.token),
        _ => bail!("no token in the TokenRequest answer for {namespace}/{name}"),
    }
}

/// State directory of the local cluster.
pub fn cluster_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("REFILL_CLUSTER_DIR") {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    PathBuf::from(home).join(".cache/refill/cluster")
}

/// Directory of the cluster scripts (`up.sh`, `down.sh`, ...).
pub fn scripts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("cluster")
}

/// The helm CLI, built (once, cached) by `e2e/cluster/build-helm.sh`: for the
/// chart's tests and its install. Blocks while a first build runs.
pub fn helm() -> Result<PathBuf> {
    let script = scripts_dir().join("build-helm.sh");
    let out = std::process::Command::new(&script)
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    if !out.status.success() {
        bail!(
            "{} failed: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8(out.stdout)?;
    let path = text
        .lines()
        .last()
        .context("build-helm.sh printed no path")?;
    Ok(PathBuf::from(path))
}

static CLUSTER: OnceCell<Cluster> = OnceCell::const_new();

/// The local cluster, started by `e2e/cluster/up.sh` if its kubeconfig is
/// missing or its apiserver does not answer. Runs at most once per process;
/// concurrent callers (parallel tests) wait for the first. A cluster that cannot
/// be started is an error, never a reason to skip.
pub async fn cluster() -> Result<&'static Cluster> {
    CLUSTER.get_or_try_init(find_or_start).await
}

/// Shorthand for `cluster().await?.admin_client().await`.
pub async fn admin_client() -> Result<Client> {
    cluster().await?.admin_client().await
}

async fn find_or_start() -> Result<Cluster> {
    let dir = cluster_dir();
    let kubeconfig = dir.join("admin.kubeconfig");
    let bin_dir_file = dir.join("bin-dir");
    let known = || -> Option<Cluster> {
        let bin_dir = std::fs::read_to_string(&bin_dir_file).ok()?;
        Some(Cluster {
            dir: dir.clone(),
            kubeconfig: kubeconfig.clone(),
            bin_dir: PathBuf::from(bin_dir.trim()),
        })
    };
    if let Some(cluster) = known()
        && kubeconfig.exists()
        && is_ready(&cluster).await
    {
        return Ok(cluster);
    }

    let script = scripts_dir().join("up.sh");
    tracing::info!("starting the local cluster with {}", script.display());
    // stderr passes through so that progress (a first build takes many minutes)
    // and failures show in the test output. (`Command::output` would capture it.)
    let child = tokio::process::Command::new(&script)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .with_context(|| format!("running {}", script.display()))?;
    let output = child.wait_with_output().await?;
    if !output.status.success() {
        bail!(
            "{} failed ({}); the cluster is required, see the messages above and {}/logs",
            script.display(),
            output.status,
            dir.display()
        );
    }
    let cluster = known()
        .with_context(|| format!("{} left no {}", script.display(), bin_dir_file.display()))?;
    if !is_ready(&cluster).await {
        bail!(
            "{} succeeded but the apiserver does not answer",
            script.display()
        );
    }
    Ok(cluster)
}

pub(crate) async fn is_ready(cluster: &Cluster) -> bool {
    let probe = async {
        let mut config = cluster.admin_config().await?;
        config.connect_timeout = Some(Duration::from_secs(2));
        config.read_timeout = Some(Duration::from_secs(5));
        let client = Client::try_from(config)?;
        let request = http_get("/readyz")?;
        let body = client.request_text(request).await?;
        anyhow::Ok(body.trim() == "ok")
    };
    matches!(probe.await, Ok(true))
}

fn http_get(path: &str) -> Result<http::Request<Vec<u8>>> {
    Ok(http::Request::get(path).body(Vec::new())?)
}

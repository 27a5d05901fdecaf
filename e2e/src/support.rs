//! Per-test namespaces, polling waits, and a dump of the cluster when a test fails.

use std::fmt::Display;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use futures::FutureExt;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolume, Pod, ServiceAccount};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource, ResourceExt};
use refill::api::{DataRestore, DataRestoreRequest};
use serde_json::json;

use crate::cluster::{Cluster, cluster};

/// Label put on every test namespace, and expected on cluster-scoped objects a
/// test creates (PersistentVolumes, StorageClasses), so that cleanup finds them.
pub const TEST_NAMESPACE_LABEL: &str = "refill-e2e/namespace";

/// How often [`wait_for`] checks its condition.
pub const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Default limit for a whole [`run_test`] body (override with
/// `REFILL_TEST_TIMEOUT`, in seconds).
pub const TEST_TIMEOUT: Duration = Duration::from_secs(600);

/// A namespace of its own for one test, with a random suffix.
///
/// [`TestNamespace::cleanup`] deletes it together with the cluster-scoped
/// objects labelled [`TEST_NAMESPACE_LABEL`]`=<name>`, unless
/// `REFILL_KEEP_NS=1` asks to keep everything for a look afterwards.
#[derive(Clone)]
pub struct TestNamespace {
    name: String,
    client: Client,
}

impl TestNamespace {
    /// Creates `<prefix>-<8 random hex digits>`; the prefix is cut down to a valid
    /// DNS label.
    pub async fn create(client: &Client, prefix: &str) -> Result<Self> {
        let suffix = &uuid::Uuid::new_v4().simple().to_string()[..8];
        let name = format!("{}-{suffix}", dns_label(prefix, 63 - 9));
        let namespace = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some([(TEST_NAMESPACE_LABEL.to_string(), name.clone())].into()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .with_context(|| format!("creating namespace {name}"))?;
        // Pod admission looks up the `default` ServiceAccount and gives up after
        // a second or two; on a busy machine the controller-manager may not have
        // created it by then.
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &name);
        wait_for(
            format!("serviceaccount {name}/default"),
            Duration::from_secs(60),
            || async { Ok(accounts.get_opt("default").await?.map(|_| ())) },
        )
        .await?;
        Ok(Self {
            name,
            client: client.clone(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Labels that tie a cluster-scoped object to this namespace for cleanup.
    pub fn labels(&self) -> std::collections::BTreeMap<String, String> {
        [(TEST_NAMESPACE_LABEL.to_string(), self.name.clone())].into()
    }

    /// A namespaced API for this namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }

    /// Deletes the namespace (without waiting for it to go) and the PVs and
    /// StorageClasses labelled for it, unless `REFILL_KEEP_NS=1`.
    pub async fn cleanup(&self) -> Result<()> {
        if keep_namespaces() {
            eprintln!("REFILL_KEEP_NS=1: keeping namespace {}", self.name);
            return Ok(());
        }
        release_restores(&self.client, &self.name).await?;
        let selector =
            ListParams::default().labels(&format!("{TEST_NAMESPACE_LABEL}={}", self.name));
        let delete = DeleteParams::background();
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        ignore_not_found(namespaces.delete(&self.name, &delete).await.map(|_| ()))?;
        let volumes: Api<PersistentVolume> = Api::all(self.client.clone());
        volumes.delete_collection(&delete, &selector).await?;
        let classes: Api<StorageClass> = Api::all(self.client.clone());
        classes.delete_collection(&delete, &selector).await?;
        Ok(())
    }
}

/// Drops refill's finalizer from every DataRestore and DataRestoreRequest in
/// `namespace`. One left unfinished keeps it, and with it its namespace, forever once
/// its controller is gone: every later run on the cluster would share the machine with
/// the namespace controller's endless retries.
pub async fn release_restores(client: &Client, namespace: &str) -> Result<()> {
    release::<DataRestore>(client, namespace).await?;
    release::<DataRestoreRequest>(client, namespace).await
}

/// Drops the finalizers of every `K` in `namespace`.
async fn release<K>(client: &Client, namespace: &str) -> Result<()>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
{
    let objects: Api<K> = Api::namespaced(client.clone(), namespace);
    let left = match objects.list(&ListParams::default()).await {
        Ok(list) => list.items,
        // No CRDs installed: nothing to hold anything.
        Err(kube::Error::Api(e)) if e.code == 404 => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    for object in left.iter().filter(|o| !o.finalizers().is_empty()) {
        let patch = json!({"metadata": {"finalizers": null}});
        let removed = objects
            .patch(
                &object.name_any(),
                &PatchParams::default(),
                &Patch::Merge(patch),
            )
            .await;
        ignore_not_found(removed.map(|_| ()))?;
    }
    Ok(())
}

fn keep_namespaces() -> bool {
    std::env::var("REFILL_KEEP_NS").is_ok_and(|v| v == "1" || v == "true")
}

fn ignore_not_found(result: kube::Result<()>) -> kube::Result<()> {
    match result {
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        other => other,
    }
}

/// Lower-case, `[a-z0-9-]`, at most `max` characters, starting and ending with an
/// alphanumeric character (`"t"` if nothing is left).
pub fn dns_label(text: &str, max: usize) -> String {
    let mapped: String = text
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(max)
        .collect();
    let trimmed = mapped.trim_matches('-');
    if trimmed.is_empty() {
        "t".to_string()
    } else {
        trimmed.to_string()
    }
}

/// Polls `check` every [`POLL_INTERVAL`] until it returns `Ok(Some(value))`, and
/// returns that value. `Ok(None)` means "not yet"; an error ends the wait at once.
/// After `timeout` the result is an error naming `what`.
///
/// ```ignore
/// let pod = wait_for("pod web-0 running", Duration::from_secs(30), || async {
///     let pod = pods.get("web-0").await?;
///     Ok(is_pod_ready(&pod).then_some(pod))
/// }).await?;
/// ```
pub async fn wait_for<T, F, Fut>(what: impl Display, timeout: Duration, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    let started = Instant::now();
    loop {
        if let Some(value) = check()
            .await
            .with_context(|| format!("while waiting for {what}"))?
        {
            return Ok(value);
        }
        if started.elapsed() >= timeout {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// Whether the pod is Running with condition Ready=True.
pub fn is_pod_ready(pod: &Pod) -> bool {
    let Some(status) = &pod.status else {
        return false;
    };
    status.phase.as_deref() == Some("Running")
        && status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// What a test body gets from [`run_test`].
#[derive(Clone)]
pub struct TestEnv {
    /// The cluster (paths, kubectl, logs, ServiceAccount clients).
    pub cluster: &'static Cluster,
    /// Admin client.
    pub client: Client,
    /// The test's own namespace.
    pub ns: TestNamespace,
}

impl TestEnv {
    /// Name of the test's namespace.
    pub fn namespace(&self) -> &str {
        self.ns.name()
    }

    /// A namespaced API (admin) for the test's namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as Resource>::DynamicType: Default,
    {
        self.ns.api()
    }

    /// A cluster-wide API (admin).
    pub fn api_all<K>(&self) -> Api<K>
    where
        K: Resource,
        <K as Resource>::DynamicType: Default,
    {
        Api::all(self.client.clone())
    }

    /// Creates an object from JSON (namespace filled in for namespaced kinds)
    /// and returns what the apiserver stored.
    pub async fn create<K>(&self, object: serde_json::Value) -> Result<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned
            + serde::Serialize,
        <K as Resource>::DynamicType: Default,
    {
        let mut object = object;
        object["metadata"]["namespace"] = json!(self.namespace());
        let object: K = serde_json::from_value(object).context("object does not match its kind")?;
        Ok(self
            .api::<K>()
            .create(&PostParams::default(), &object)
            .await?)
    }
}

/// Runs one end-to-end test: makes sure the cluster is up, creates a fresh
/// namespace, runs `body`, and deletes the namespace again. If the body fails,
/// panics or exceeds `REFILL_TEST_TIMEOUT` (default [`TEST_TIMEOUT`]), the
/// namespace's objects and the tails of the control-plane logs are printed
/// first, and the failure is passed on (a panic is resumed as a panic).
///
/// ```ignore
/// #[tokio::test]
/// async fn scales() -> anyhow::Result<()> {
///     run_test("scales", |env| async move {
///         let deployments = env.api::<Deployment>();
///         // ...
///         Ok(())
///     })
///     .await
/// }
/// ```
pub async fn run_test<F, Fut>(name: &str, body: F) -> Result<()>
where
    F: FnOnce(TestEnv) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    run_test_on(cluster().await?, name, body).await
}

/// [`run_test`] on a given cluster, such as one a test started for itself with
/// [`crate::cluster::start_cluster`] because it restarts its components.
pub async fn run_test_on<F, Fut>(cluster: &'static Cluster, name: &str, body: F) -> Result<()>
where
    F: FnOnce(TestEnv) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let client = cluster.admin_client().await?;
    let ns = TestNamespace::create(&client, name).await?;
    let env = TestEnv {
        cluster,
        client,
        ns: ns.clone(),
    };
    let limit = test_timeout();
    let outcome =
        tokio::time::timeout(limit, AssertUnwindSafe(body(env.clone())).catch_unwind()).await;
    let failure = match outcome {
        Ok(Ok(Ok(()))) => None,
        Ok(Ok(Err(error))) => Some(Err(error)),
        Ok(Err(panic)) => Some(Ok(panic)),
        Err(_) => Some(Err(anyhow!("test {name} did not finish within {limit:?}"))),
    };
    match failure {
        None => {
            ns.cleanup().await?;
            Ok(())
        }
        Some(failure) => {
            eprintln!("{}", dump(&env).await);
            if let Err(e) = ns.cleanup().await {
                eprintln!("cleanup of {} failed: {e:#}", ns.name());
            }
            match failure {
                Err(error) => Err(error.context(format!("test {name} in namespace {}", ns.name()))),
                Ok(panic) => std::panic::resume_unwind(panic),
            }
        }
    }
}

fn test_timeout() -> Duration {
    std::env::var("REFILL_TEST_TIMEOUT")
        .ok()
        .and_then(|s| s.parse().ok())
        .map(Duration::from_secs)
        .unwrap_or(TEST_TIMEOUT)
}

/// A readable picture of the test namespace and the control plane: workloads,
/// pods with their container states, claims, volumes, refill and Velero objects,
/// events, and the last lines of each component's log.
pub async fn dump(env: &TestEnv) -> String {
    let ns = env.namespace();
    let mut out = format!("\n===== state of namespace {ns} =====\n");
    let kinds = "deployments,statefulsets,replicasets,jobs,pods,persistentvolumeclaims";
    out += &kubectl(env.cluster, &["get", kinds, "-n", ns, "-o", "wide"]).await;
    out += "\n--- pod status ---\n";
    out += &pod_states(env).await;
    out += "\n--- persistentvolumes (all) ---\n";
    out += &kubectl(env.cluster, &["get", "persistentvolumes", "-o", "wide"]).await;
    out += "\n--- nodes ---\n";
    out += &kubectl(env.cluster, &["get", "nodes", "-o", "wide"]).await;
    let custom = kubectl(
        env.cluster,
        &[
            "api-resources",
            "--namespaced",
            "--verbs=list",
            "-o",
            "name",
        ],
    )
    .await;
    let custom: Vec<&str> = custom
        .lines()
        .filter(|r| r.ends_with(".refill.dev") || r.ends_with(".velero.io"))
        .collect();
    if !custom.is_empty() {
        out += "\n--- refill and velero objects ---\n";
        out += &kubectl(
            env.cluster,
            &["get", &custom.join(","), "-n", ns, "-o", "yaml"],
        )
        .await;
    }
    out += "\n--- events ---\n";
    out += &kubectl(
        env.cluster,
        &["get", "events", "-n", ns, "--sort-by=.lastTimestamp"],
    )
    .await;
    for component in [
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kwok",
    ] {
        out += &format!(
            "\n--- last lines of {} ---\n",
            env.cluster.log_path(component).display()
        );
        out += &env.cluster.log_tail(component, 30);
        out += "\n";
    }
    out += &format!("===== end of state of namespace {ns} =====\n");
    out
}

async fn kubectl(cluster: &Cluster, args: &[&str]) -> String {
    let result = cluster
        .kubectl_command()
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .await;
    match result {
        Ok(output) => {
            let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
            text += &String::from_utf8_lossy(&output.stderr);
            text
        }
        Err(e) => format!("(kubectl {}: {e})\n", args.join(" ")),
    }
}

/// One line per pod and one per container: the state kwok put it in.
async fn pod_states(env: &TestEnv) -> String {
    let pods = match env.api::<Pod>().list(&ListParams::default()).await {
        Ok(pods) => pods,
        Err(e) => return format!("(listing pods: {e})\n"),
    };
    let mut out = String::new();
    for pod in pods {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        let status = pod.status.clone().unwrap_or_default();
        let conditions: Vec<String> = status
            .conditions
            .iter()
            .flatten()
            .map(|c| format!("{}={}", c.type_, c.status))
            .collect();
        let deleting = if pod.metadata.deletion_timestamp.is_some() {
            " (deleting)"
        } else {
            ""
        };
        out += &format!(
            "{name}: phase={} node={node} {}{deleting}\n",
            status.phase.as_deref().unwrap_or("?"),
            conditions.join(" ")
        );
        let annotations = pod.metadata.annotations.clone().unwrap_or_default();
        if !annotations.is_empty() {
            out += &format!("  annotations: {annotations:?}\n");
        }
        let containers = [
            ("init", &status.init_container_statuses),
            ("container", &status.container_statuses),
        ];
        for (kind, statuses) in containers {
            for c in statuses.iter().flatten() {
                let state = c
                    .state
                    .as_ref()
                    .map(|s| serde_json::to_string(s).unwrap_or_default())
                    .unwrap_or_else(|| "none".into());
                out += &format!("  {kind} {}: ready={} {state}\n", c.name, c.ready);
            }
        }
        for c in status
            .conditions
            .iter()
            .flatten()
            .filter(|c| c.status != "True")
        {
            if let Some(message) = &c.message {
                out += &format!("  {}: {message}\n", c.type_);
            }
        }
    }
    if out.is_empty() {
        out = "(no pods)\n".into();
    }
    out
}

//! Flux on the local cluster (`e2e/cluster/flux.sh`): its source-controller and
//! kustomize-controller run on the host and reconcile an app from a `Bucket` in the
//! cluster's S3 server, so that a test can show what a GitOps tool does to an app
//! while refill restores its data: it puts the app back as its source has it on
//! every reconcile, unless its Kustomization is suspended.
//!
//! A test writes its manifests into a bucket of its own ([`upload_manifests`]),
//! points a Bucket and a Kustomization at it ([`create_app`]), and waits for them
//! ([`wait_ready`], [`wait_reconciled`] after [`request_reconcile`]).

use std::path::Path;
use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;
use tokio::io::AsyncWriteExt;

use crate::support::wait_for;

/// Where `e2e/cluster/flux.sh` runs Flux's controllers from (their events and
/// nothing else land there; a test's own objects live in its namespace).
pub const FLUX_NAMESPACE: &str = "flux-system";

/// Field manager of the objects these helpers write.
const MANAGER: &str = "refill-e2e";

/// The two Flux kinds the helpers make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `source.toolkit.fluxcd.io/v1` Bucket: fetches the manifests into an artifact.
    Bucket,
    /// `kustomize.toolkit.fluxcd.io/v1` Kustomization: applies a source's artifact.
    Kustomization,
}

impl Kind {
    fn gvk(self) -> GroupVersionKind {
        match self {
            Kind::Bucket => GroupVersionKind::gvk("source.toolkit.fluxcd.io", "v1", "Bucket"),
            Kind::Kustomization => {
                GroupVersionKind::gvk("kustomize.toolkit.fluxcd.io", "v1", "Kustomization")
            }
        }
    }

    /// The kind as the API serves it.
    pub fn resource(self) -> ApiResource {
        ApiResource::from_gvk(&self.gvk())
    }

    /// The kind's name, as in `kind:`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Bucket => "Bucket",
            Kind::Kustomization => "Kustomization",
        }
    }
}

/// The API of one Flux kind in `namespace`, as dynamic objects.
pub fn flux_api(client: &Client, kind: Kind, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), namespace, &kind.resource())
}

/// The local S3 server's address on the host (`host:port`), where Flux's
/// source-controller, also on the host, reaches it.
pub fn s3_address(cluster_dir: &Path) -> Result<String> {
    let endpoint = std::fs::read_to_string(cluster_dir.join("s3-endpoint"))
        .context("no s3-endpoint in the cluster directory: is the S3 server running?")?;
    let endpoint = endpoint.trim();
    Ok(endpoint
        .strip_prefix("http://")
        .unwrap_or(endpoint)
        .to_string())
}

/// Puts `files` (key, contents) into `bucket` of the local S3 server, making the
/// bucket if it is missing. Keys already there and not in `files` stay: remove
/// them with [`delete_manifest`].
pub async fn upload_manifests(
    cluster_dir: &Path,
    bucket: &str,
    files: &[(&str, &str)],
) -> Result<()> {
    let base = format!("http://{}/{bucket}", s3_address(cluster_dir)?);
    // gofakes3 answers 409 for a bucket that exists already.
    let status = curl(
        &[
            "-sS",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-X",
            "PUT",
            &base,
        ],
        None,
    )
    .await?;
    if status != "200" && status != "409" {
        bail!("creating bucket {bucket} in the local S3 server: HTTP {status}");
    }
    for (key, contents) in files {
        curl(
            &[
                "-fsS",
                "-X",
                "PUT",
                "--data-binary",
                "@-",
                &format!("{base}/{key}"),
            ],
            Some(contents.as_bytes()),
        )
        .await
        .with_context(|| format!("uploading {key} to bucket {bucket}"))?;
    }
    Ok(())
}

/// Removes one key from `bucket` of the local S3 server.
pub async fn delete_manifest(cluster_dir: &Path, bucket: &str, key: &str) -> Result<()> {
    let url = format!("http://{}/{bucket}/{key}", s3_address(cluster_dir)?);
    curl(&["-fsS", "-X", "DELETE", &url], None).await?;
    Ok(())
}

/// An app as Flux deploys it: a Bucket over `bucket` of the local S3 server, and a
/// Kustomization applying its manifests into `namespace`, both named `name` and
/// living in `namespace`.
#[derive(Debug, Clone)]
pub struct FluxApp<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub bucket: &'a str,
    /// How often both look again on their own; a test asks for reconciles sooner
    /// with [`request_reconcile`].
    pub interval: Duration,
}

/// A platform team's app in `namespace`, unrelated to any test's app: its Bucket (over
/// a bucket named after the namespace) and Kustomization `name` apply one ConfigMap
/// there, and look again on their own only every ten minutes. Returns the
/// Kustomization once it is Ready.
pub async fn platform_app(
    client: &Client,
    cluster_dir: &Path,
    namespace: &str,
    name: &str,
    timeout: Duration,
) -> Result<DynamicObject> {
    let settings = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings"}, "data": {"a": "b"},
    })
    .to_string();
    upload_manifests(cluster_dir, namespace, &[("settings.yaml", &settings)]).await?;
    let app = FluxApp {
        namespace,
        name,
        bucket: namespace,
        interval: Duration::from_secs(600),
    };
    create_app(client, cluster_dir, &app).await?;
    wait_ready(client, Kind::Kustomization, namespace, name, timeout).await
}

/// The labels Flux's kustomize-controller puts on what a Kustomization applies, naming
/// `namespace/name`: anyone who may edit an object can write them on it.
pub fn kustomization_marks(namespace: &str, name: &str) -> serde_json::Value {
    json!({"metadata": {"labels": {
        "kustomize.toolkit.fluxcd.io/name": name,
        "kustomize.toolkit.fluxcd.io/namespace": namespace,
    }}})
}

/// Makes the Secret (`<name>-s3`), the Bucket and the Kustomization of `app`
/// (server-side apply: calling it again changes what differs). The Kustomization
/// prunes what leaves the source, and sets `namespace` on every object of it.
pub async fn create_app(client: &Client, cluster_dir: &Path, app: &FluxApp<'_>) -> Result<()> {
    let params = PatchParams::apply(MANAGER).force();
    let interval = humantime::format_duration(app.interval)
        .to_string()
        .replace(' ', "");
    let secret = format!("{}-s3", app.name);
    // The S3 server checks no signatures; Flux's generic provider still wants keys.
    let secret_object: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": secret, "namespace": app.namespace},
        "stringData": {"accesskey": "refill", "secretkey": "refill-local"},
    }))?;
    Api::<Secret>::namespaced(client.clone(), app.namespace)
        .patch(&secret, &params, &Patch::Apply(&secret_object))
        .await?;
    let bucket = json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "Bucket",
        "metadata": {"name": app.name, "namespace": app.namespace},
        "spec": {
            "provider": "generic",
            "bucketName": app.bucket,
            "endpoint": s3_address(cluster_dir)?,
            "insecure": true,
            "region": "local",
            "interval": interval,
            "timeout": "30s",
            "secretRef": {"name": secret},
        },
    });
    apply(client, Kind::Bucket, app.namespace, app.name, bucket).await?;
    let kustomization = json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": app.name, "namespace": app.namespace},
        "spec": {
            "sourceRef": {"kind": "Bucket", "name": app.name},
            "path": "./",
            "prune": true,
            "interval": interval,
            "retryInterval": interval,
            "timeout": "60s",
            "targetNamespace": app.namespace,
        },
    });
    apply(
        client,
        Kind::Kustomization,
        app.namespace,
        app.name,
        kustomization,
    )
    .await
}

async fn apply(
    client: &Client,
    kind: Kind,
    namespace: &str,
    name: &str,
    object: serde_json::Value,
) -> Result<()> {
    let object: DynamicObject = serde_json::from_value(object)?;
    flux_api(client, kind, namespace)
        .patch(
            name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&object),
        )
        .await
        .with_context(|| format!("applying {} {namespace}/{name}", kind.name()))?;
    Ok(())
}

/// The object's Ready condition, once its controller has seen its current
/// generation: `Some((status, reason, message))`.
fn ready_condition(object: &DynamicObject) -> Option<(String, String, String)> {
    let status = &object.data["status"];
    if status["observedGeneration"].as_i64() != object.metadata.generation {
        return None;
    }
    let ready = status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")?;
    let text = |field: &str| ready[field].as_str().unwrap_or_default().to_string();
    Some((text("status"), text("reason"), text("message")))
}

/// Waits until a Bucket or Kustomization is Ready for its current generation.
/// Fails at once when its manifests do not build (a retry changes nothing), and
/// names Flux's last Ready condition when it times out.
pub async fn wait_ready(
    client: &Client,
    kind: Kind,
    namespace: &str,
    name: &str,
    timeout: Duration,
) -> Result<DynamicObject> {
    let api = flux_api(client, kind, namespace);
    let last = Mutex::new(String::from("no Ready condition yet"));
    let what = format!("{} {namespace}/{name} Ready", kind.name());
    wait_for(&what, timeout, || async {
        let object = api.get(name).await?;
        match ready_condition(&object) {
            Some((status, _, _)) if status == "True" => Ok(Some(object)),
            Some((_, reason, message)) if reason == "BuildFailed" => {
                bail!("{} {namespace}/{name}: {reason}: {message}", kind.name())
            }
            Some((status, reason, message)) => {
                *last.lock().unwrap() = format!("Ready={status} {reason}: {message}");
                Ok(None)
            }
            None => Ok(None),
        }
    })
    .await
    .map_err(|e| {
        let last = last.lock().unwrap().clone();
        e.context(format!(
            "{} {namespace}/{name}, last seen {last}",
            kind.name()
        ))
    })
}

/// Asks Flux to reconcile the object now (as `flux reconcile` does: a new value of
/// the `reconcile.fluxcd.io/requestedAt` annotation). Returns that value, for
/// [`wait_reconciled`].
pub async fn request_reconcile(
    client: &Client,
    kind: Kind,
    namespace: &str,
    name: &str,
) -> Result<String> {
    let token = uuid::Uuid::new_v4().to_string();
    let patch = json!({"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": token}}});
    flux_api(client, kind, namespace)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| {
            format!(
                "requesting a reconcile of {} {namespace}/{name}",
                kind.name()
            )
        })?;
    Ok(token)
}

/// Waits until Flux has handled the reconcile asked for with `token` (its
/// `status.lastHandledReconcileAt`) and the object is Ready, and returns it then.
/// A suspended Kustomization marks the request handled too (within a second),
/// applying nothing and keeping its last Ready condition: after this returns, a
/// test of suspension checks that the app is still as it left it.
pub async fn wait_reconciled(
    client: &Client,
    kind: Kind,
    namespace: &str,
    name: &str,
    token: &str,
    timeout: Duration,
) -> Result<DynamicObject> {
    let api = flux_api(client, kind, namespace);
    let what = format!(
        "{} {namespace}/{name} to handle reconcile request {token}",
        kind.name()
    );
    wait_for(&what, timeout, || async {
        let object = api.get(name).await?;
        let handled = object.data["status"]["lastHandledReconcileAt"] == token;
        let ready = ready_condition(&object).is_some_and(|(status, _, _)| status == "True");
        Ok((handled && ready).then_some(object))
    })
    .await
}

/// Suspends or resumes a Kustomization (`spec.suspend`, as `flux suspend` and
/// `flux resume` do): while suspended, Flux leaves the app as it is.
pub async fn set_suspended(
    client: &Client,
    namespace: &str,
    name: &str,
    suspend: bool,
) -> Result<()> {
    let patch = json!({"spec": {"suspend": suspend}});
    flux_api(client, Kind::Kustomization, namespace)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| {
            format!("setting suspend={suspend} on Kustomization {namespace}/{name}")
        })?;
    Ok(())
}

/// The local S3 server checks no signatures, so plain requests do. `stdin`, if
/// given, is the request's body (`--data-binary @-`).
async fn curl(args: &[&str], stdin: Option<&[u8]>) -> Result<String> {
    let mut child = tokio::process::Command::new("curl")
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running curl")?;
    if let Some(body) = stdin {
        let mut pipe = child.stdin.take().context("curl's stdin")?;
        pipe.write_all(body).await?;
        drop(pipe);
    }
    let out = child.wait_with_output().await?;
    if !out.status.success() {
        bail!("curl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8(out.stdout)?)
}

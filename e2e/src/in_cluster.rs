//! refill's controller as users run it: a pod of `manifests/deployment.yaml` on a
//! real node, from refill's own image built from this checkout.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

use crate::cluster::{Cluster, REAL_NODE_LABEL, REAL_NODE_TAINT, REFILL_IMAGE};
use crate::fixture::{self, CONTROLLER_SA};
use crate::support::{is_pod_ready, wait_for};

/// Annotation of the pod template naming the image archive's SHA-256, so that a
/// rebuilt image (same tag) rolls the controller out again.
const IMAGE_SHA_ANNOTATION: &str = "refill.dev/image-sha256";

/// The name of the Lease the controller's replicas elect their leader by, in
/// Velero's namespace (refill's default).
pub const LEASE: &str = refill::controller::runtime::leader::Election::DEFAULT_LEASE_NAME;

/// The objects of `manifests/deployment.yaml`: the Deployment and its
/// PodDisruptionBudget.
fn manifest_objects() -> Result<(Deployment, serde_json::Value)> {
    use serde::Deserialize;
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/deployment.yaml");
    let yaml = std::fs::read_to_string(&path)?;
    let mut deployment = None;
    let mut budget = None;
    for document in yaml_serde::Deserializer::from_str(&yaml) {
        let object = serde_json::Value::deserialize(document)?;
        match object["kind"].as_str() {
            Some("Deployment") => deployment = Some(serde_json::from_value(object)?),
            Some("PodDisruptionBudget") => budget = Some(object),
            other => anyhow::bail!("{}: unexpected kind {other:?}", path.display()),
        }
    }
    Ok((
        deployment.context("deployment.yaml has no Deployment")?,
        budget.context("deployment.yaml has no PodDisruptionBudget")?,
    ))
}

/// `manifests/deployment.yaml`'s Deployment as a user applies it, changed only
/// where this cluster differs: the image is the locally built one (never pulled),
/// Velero's namespace is `velero_namespace`, and the pods go to real nodes.
pub fn controller_deployment(velero_namespace: &str, image_sha: &str) -> Result<Deployment> {
    let (mut deployment, _) = manifest_objects()?;
    let template = &mut deployment
        .spec
        .as_mut()
        .context("deployment.yaml has no spec")?
        .template;
    template
        .metadata
        .get_or_insert_with(Default::default)
        .annotations
        .get_or_insert_with(Default::default)
        .insert(IMAGE_SHA_ANNOTATION.into(), image_sha.into());
    let spec = template
        .spec
        .as_mut()
        .context("deployment.yaml has no pod spec")?;
    spec.node_selector = Some([(REAL_NODE_LABEL.to_string(), "real".to_string())].into());
    spec.tolerations = Some(serde_json::from_value(json!([
        { "key": REAL_NODE_TAINT, "operator": "Exists", "effect": "NoSchedule" }
    ]))?);
    let container = spec
        .containers
        .iter_mut()
        .find(|c| c.name == "refill")
        .context("deployment.yaml has no refill container")?;
    container.image = Some(REFILL_IMAGE.to_string());
    container.image_pull_policy = Some("Never".to_string());
    for var in container.env.iter_mut().flatten() {
        if var.name == "REFILL_COPIER_IMAGE" {
            var.value = Some(REFILL_IMAGE.to_string());
        }
    }
    let args = container
        .args
        .as_mut()
        .context("deployment.yaml: no args")?;
    let at = args
        .iter()
        .position(|a| a == "--namespace")
        .context("deployment.yaml: no --namespace")?;
    args[at + 1] = velero_namespace.to_string();
    // A node that stops answering is given up after 20 s rather than 2 min, so that
    // the real node's fault test (e2e/tests/node_faults.rs) ends in about a minute
    // and a half; no other test takes a node down.
    match args.iter().position(|a| a == "--node-grace") {
        Some(at) => args[at + 1] = "20s".to_string(),
        None => args.extend(["--node-grace".to_string(), "20s".to_string()]),
    }
    Ok(deployment)
}

/// Installs refill from `manifests/` (CRDs, RBAC for `velero_namespace`, the
/// controller Deployment, its PodDisruptionBudget and metrics Service) with the image of this
/// checkout, and returns the leader once every replica is of that image and Ready
/// (a replica is Ready standing by, or leading with its watches synced) and one of
/// them holds the Lease. Leaves them running, as an installed controller is.
pub async fn install_controller(
    cluster: &Cluster,
    client: &Client,
    velero_namespace: &str,
    timeout: Duration,
) -> Result<Pod> {
    let image_sha = cluster.load_refill_image().await?;
    fixture::install_refill(client, velero_namespace).await?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), CONTROLLER_SA.0);
    let deployment = controller_deployment(velero_namespace, &image_sha)?;
    let apply = PatchParams::apply("refill-e2e").force();
    deployments
        .patch("refill", &apply, &Patch::Apply(&deployment))
        .await?;
    let (_, budget) = manifest_objects()?;
    Api::<PodDisruptionBudget>::namespaced(client.clone(), CONTROLLER_SA.0)
        .patch("refill", &apply, &Patch::Apply(&budget))
        .await?;
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/metrics.yaml");
    let service: Service = yaml_serde::from_str(&std::fs::read_to_string(&path)?)?;
    Api::<Service>::namespaced(client.clone(), CONTROLLER_SA.0)
        .patch("refill-metrics", &apply, &Patch::Apply(&service))
        .await?;
    wait_for_leader(client, velero_namespace, &image_sha, timeout).await
}

/// Removes the controller installed from `manifests/` (left by an earlier run of the
/// Velero tests; the cluster keeps its state between runs) and waits until its pods are
/// gone. Its request controller serves every namespace, so a test whose own controller
/// serves requests would have the two answer the same request. The Velero tests install
/// it again when they need it.
pub async fn remove_controller(client: &Client, timeout: Duration) -> Result<()> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), CONTROLLER_SA.0);
    match deployments.delete("refill", &Default::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), CONTROLLER_SA.0);
    let selector = ListParams::default().labels("app.kubernetes.io/name=refill");
    wait_for("the installed controller's pods gone", timeout, || async {
        Ok(pods.list(&selector).await?.items.is_empty().then_some(()))
    })
    .await
}

/// Waits until as many controller pods of the image `image_sha` as the installed
/// Deployment asks for are Ready and one of them holds the Lease, on a real node;
/// returns that one.
async fn wait_for_leader(
    client: &Client,
    velero_namespace: &str,
    image_sha: &str,
    timeout: Duration,
) -> Result<Pod> {
    let replicas = Api::<Deployment>::namespaced(client.clone(), CONTROLLER_SA.0)
        .get("refill")
        .await?
        .spec
        .and_then(|s| s.replicas)
        .unwrap_or(1) as usize;
    let pods: Api<Pod> = Api::namespaced(client.clone(), CONTROLLER_SA.0);
    let leases: Api<Lease> = Api::namespaced(client.clone(), velero_namespace);
    let leader = wait_for(
        format!("{replicas} Ready controller pods of the new image, one leading"),
        timeout,
        || async {
            let listed = pods
                .list(&ListParams::default().labels("app.kubernetes.io/name=refill"))
                .await?;
            let current: Vec<Pod> = listed
                .items
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .collect();
            let all_new_and_ready = current.len() == replicas
                && current.iter().all(|p| {
                    is_pod_ready(p)
                        && p.metadata
                            .annotations
                            .as_ref()
                            .and_then(|a| a.get(IMAGE_SHA_ANNOTATION))
                            == Some(&image_sha.to_string())
                });
            if !all_new_and_ready {
                return Ok(None);
            }
            let holder = leases
                .get_opt(LEASE)
                .await?
                .and_then(|l| l.spec?.holder_identity);
            Ok(current
                .into_iter()
                .find(|p| p.metadata.name.is_some() && p.metadata.name == holder))
        },
    )
    .await?;
    let node = leader.spec.as_ref().and_then(|s| s.node_name.clone());
    ensure!(
        node.as_deref().is_some_and(|n| n.starts_with("real-")),
        "the controller runs on {node:?}, not a real node"
    );
    Ok(leader)
}

/// The controller pod that holds the Lease now, if one does.
pub async fn leader(client: &Client, velero_namespace: &str) -> Result<Option<Pod>> {
    let holder = Api::<Lease>::namespaced(client.clone(), velero_namespace)
        .get_opt(LEASE)
        .await?
        .and_then(|l| l.spec?.holder_identity);
    match holder {
        Some(name) => Ok(Api::<Pod>::namespaced(client.clone(), CONTROLLER_SA.0)
            .get_opt(&name)
            .await?),
        None => Ok(None),
    }
}

/// Installs refill with its Helm chart (`charts/refill`, helm built by
/// `e2e/cluster/build-helm.sh`) as a user would, with the image of this checkout and
/// the values this cluster needs (the local image, Velero's namespace, the real
/// nodes), and returns the leader as [`install_controller`] does. The CRDs are
/// applied first, as `helm upgrade` leaves a chart's CRDs alone.
pub async fn install_with_helm(
    cluster: &Cluster,
    client: &Client,
    velero_namespace: &str,
    timeout: Duration,
) -> Result<Pod> {
    let image_sha = cluster.load_refill_image().await?;
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/refill");
    fixture::apply_crds(
        client,
        &std::fs::read_to_string(chart.join("crds/crds.yaml"))?,
    )
    .await?;
    let helm = tokio::task::spawn_blocking(crate::cluster::helm).await??;
    let (repository, tag) = REFILL_IMAGE
        .rsplit_once(':')
        .context("REFILL_IMAGE has no tag")?;
    let node_selector = json!({ REAL_NODE_LABEL: "real" });
    let tolerations =
        json!([{ "key": REAL_NODE_TAINT, "operator": "Exists", "effect": "NoSchedule" }]);
    let annotations = json!({ IMAGE_SHA_ANNOTATION: image_sha });
    let out = tokio::process::Command::new(&helm)
        .args(["upgrade", "--install", "refill"])
        .arg(&chart)
        .args([
            "--namespace",
            CONTROLLER_SA.0,
            "--create-namespace",
            "--take-ownership",
        ])
        .arg("--kubeconfig")
        .arg(&cluster.kubeconfig)
        .args([
            "--set",
            &format!("image.repository={repository},image.tag={tag},image.pullPolicy=Never"),
        ])
        .args(["--set", &format!("veleroNamespace={velero_namespace}")])
        .args(["--set-json", &format!("nodeSelector={node_selector}")])
        .args(["--set-json", &format!("tolerations={tolerations}")])
        .args(["--set-json", &format!("podAnnotations={annotations}")])
        .output()
        .await?;
    ensure!(
        out.status.success(),
        "helm upgrade --install failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for_leader(client, velero_namespace, &image_sha, timeout).await
}

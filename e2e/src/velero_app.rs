//! An app on the real nodes whose claim Velero backs up, for the tests and the
//! benchmark that restore through the real Velero: its files written by an init
//! container, damaged as an operator finds them, compared entry by entry afterwards.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Result, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use refill::api::{DataRestore, PodVolumeRestore};
use serde_json::{Value, json};

use crate::cluster::NODE_SELECTOR_ANNOTATION;
use crate::velero::{self, Entry, VELERO_NAMESPACE};
use crate::{LOCAL_PATH_CLASS, TESTBOX_IMAGE, fixture, real_node_annotations, wait_for};

/// Real pods, kopia and a busy two-core machine: generous bounds.
pub const TIMEOUT: Duration = Duration::from_secs(300);

/// One controller pod serves every test of a test binary, as one installed refill
/// serves a cluster; the first test to need it installs it.
static CONTROLLER: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();

/// refill's controller from `manifests/`, installed once per test binary.
pub async fn controller(env: &crate::TestEnv) -> Result<()> {
    CONTROLLER
        .get_or_try_init(|| async {
            crate::in_cluster::install_controller(
                env.cluster,
                &env.client,
                VELERO_NAMESPACE,
                TIMEOUT,
            )
            .await
            .map(|_| ())
        })
        .await?;
    Ok(())
}

/// The app of [`deploy_app`] with `mib` MiB in a test's namespace, its files as they
/// were backed up, and Velero's backup of the namespace.
pub struct BackedUp {
    pub ns: String,
    pub client: Client,
    pub app: Pod,
    pub dir: PathBuf,
    pub want: BTreeMap<String, Entry>,
    pub backup: String,
}

/// refill's controller installed, and [`BackedUp`] made.
pub async fn backed_up(env: &crate::TestEnv, mib: u32) -> Result<BackedUp> {
    backed_up_on(env, mib, None).await
}

/// [`backed_up`], every pod of the namespace on real node `node` when one is given.
pub async fn backed_up_on(env: &crate::TestEnv, mib: u32, node: Option<&str>) -> Result<BackedUp> {
    controller(env).await?;
    let ns = env.namespace().to_string();
    let client = env.client.clone();
    let (app, dir) = deploy_app_on(&client, &ns, mib, node).await?;
    let want = velero::tree(&dir)?;
    let backup = format!("{ns}-nightly");
    velero::backup_namespaces(&client, &backup, &[&ns], TIMEOUT).await?;
    Ok(BackedUp {
        ns,
        client,
        app,
        dir,
        want,
        backup,
    })
}

/// Every pod of `namespace`, stand-ins included, goes to a real node.
pub async fn on_real_nodes(client: &Client, namespace: &str) -> Result<()> {
    on_real_node(client, namespace, None).await
}

/// [`on_real_nodes`], on real node `node` alone when one is given.
pub async fn on_real_node(client: &Client, namespace: &str, node: Option<&str>) -> Result<()> {
    let mut annotations = real_node_annotations();
    if let Some(node) = node {
        annotations
            .entry(NODE_SELECTOR_ANNOTATION.to_string())
            .and_modify(|selector| selector.push_str(&format!(",kubernetes.io/hostname={node}")));
    }
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .patch(
            namespace,
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "annotations": annotations } })),
        )
        .await?;
    Ok(())
}

/// A pod template whose init container writes `mib` MiB of files (nested
/// directories, modes, owners, a symlink) into the volume `data`, once, and whose
/// app container then just runs. `volumes` is the pod's list of volumes.
pub fn app_template(app: &str, mib: u32, volumes: Value) -> Value {
    let mounts = json!([{ "name": "data", "mountPath": "/data" }]);
    json!({
        "metadata": { "labels": { "app": app } },
        "spec": {
            "initContainers": [{
                "name": "write", "image": TESTBOX_IMAGE, "imagePullPolicy": "Never",
                "args": ["tree", "/data", mib.to_string()], "volumeMounts": mounts,
            }],
            "containers": [{
                "name": "app", "image": TESTBOX_IMAGE, "imagePullPolicy": "Never",
                "args": ["sleep"], "volumeMounts": mounts,
            }],
            "volumes": volumes,
            "terminationGracePeriodSeconds": 1,
            // The app says it runs as root (it chowns its files), so Velero's helper
            // in refill's stand-in runs as root too and can remove the done files the
            // node agent (root) wrote. Without a user, Velero runs the helper as 1000,
            // which cannot, and `.velero/` stays in the volume, as with Velero alone.
            "securityContext": { "runAsUser": 0, "runAsGroup": 0 },
        }
    })
}

/// On the real nodes of `namespace`: the claim `data` (local-path, so it binds where
/// the pod lands) and the Deployment `app` of [`app_template`] mounting it. Returns
/// the app's Ready pod and the claim's directory on this machine.
pub async fn deploy_app(client: &Client, namespace: &str, mib: u32) -> Result<(Pod, PathBuf)> {
    deploy_app_on(client, namespace, mib, None).await
}

/// [`deploy_app`], on real node `node` when one is given.
pub async fn deploy_app_on(
    client: &Client,
    namespace: &str,
    mib: u32,
    node: Option<&str>,
) -> Result<(Pod, PathBuf)> {
    on_real_node(client, namespace, node).await?;
    fixture::pvc_of_class(client, namespace, "data", None, &[], LOCAL_PATH_CLASS).await?;
    let volume = json!({ "name": "data", "persistentVolumeClaim": { "claimName": "data" } });
    let deployment = serde_json::from_value(json!({
        "metadata": { "name": "app" },
        "spec": {
            "replicas": 1,
            "selector": { "matchLabels": { "app": "app" } },
            "template": app_template("app", mib, json!([volume])),
        }
    }))?;
    Api::<Deployment>::namespaced(client.clone(), namespace)
        .create(&Default::default(), &deployment)
        .await?;
    let mut pods = fixture::wait_ready_pods(client, namespace, "app", 1, TIMEOUT).await?;
    let dir = velero::claim_dir(client, namespace, "data").await?;
    Ok((pods.remove(0), dir))
}

/// Damage as an operator finds it: bytes overwritten, files and the symlink
/// deleted, a mode and an owner changed.
pub fn damage(dir: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let db = dir.join("db/main.db");
    let mut bytes = std::fs::read(&db)?;
    bytes[..4096].fill(0);
    std::fs::write(&db, bytes)?;
    std::fs::remove_file(dir.join("db/wal/000002.log"))?;
    std::fs::remove_file(dir.join("current"))?;
    std::fs::set_permissions(
        dir.join("etc/app.conf"),
        std::fs::Permissions::from_mode(0o666),
    )?;
    std::os::unix::fs::chown(dir.join("README"), Some(4242), Some(4242))?;
    Ok(())
}

/// Checks the tree is what the backup holds, and was damaged before the restore.
pub fn same_tree(want: &BTreeMap<String, Entry>, dir: &Path) -> Result<()> {
    let diff = velero::tree_diff(want, &velero::tree(dir)?);
    ensure!(
        diff.is_empty(),
        "{} differs from the backup:\n{}",
        dir.display(),
        diff.join("\n")
    );
    Ok(())
}

/// Once a test passed, its restore and its backup (through Velero, data included)
/// go, so that Velero's namespace and the object store of a cluster kept between
/// runs do not grow without end.
pub async fn forget(client: &Client, restore: &str, backup: &str) -> Result<()> {
    let restores: Api<DataRestore> = Api::namespaced(client.clone(), VELERO_NAMESPACE);
    match restores.delete(restore, &Default::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    velero::delete_backup(client, backup).await
}

/// After a restore: refill's stand-ins are gone from the app's namespace, and
/// Velero's data-mover pods (named after the PodVolumeRestores) from Velero's.
pub async fn nothing_left_behind(client: &Client, ns: &str, restore: &DataRestore) -> Result<()> {
    let pvrs: Api<PodVolumeRestore> = Api::namespaced(client.clone(), VELERO_NAMESPACE);
    let velero_pods: Api<Pod> = Api::namespaced(client.clone(), VELERO_NAMESPACE);
    let uid = restore.uid().unwrap_or_default();
    let mine: Vec<PodVolumeRestore> = pvrs
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|p| p.owner_references().iter().any(|o| o.uid == uid))
        .collect();
    ensure!(
        !mine.is_empty(),
        "no PodVolumeRestore of {} found",
        restore.name_any()
    );
    wait_for(
        "stand-ins and data-mover pods gone",
        Duration::from_secs(120),
        || async {
            let stand_ins = fixture::stand_in_pods(client, ns).await?;
            let mut movers = Vec::new();
            for pvr in &mine {
                if velero_pods.get_opt(&pvr.name_any()).await?.is_some() {
                    movers.push(pvr.name_any());
                }
            }
            Ok((stand_ins.is_empty() && movers.is_empty()).then_some(()))
        },
    )
    .await
}

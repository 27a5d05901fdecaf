//! The real Velero of the local cluster (`e2e/cluster/velero.sh`): backups it takes
//! with kopia into the local S3 server, and what a test compares before and after
//! a restore.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume, PersistentVolumeClaim};
use kube::api::{
    ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use kube::{Api, Client};
use refill::api::PodVolumeBackup;
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::support::wait_for;

/// Where `e2e/cluster/up.sh` installs Velero.
pub const VELERO_NAMESPACE: &str = "velero";

/// A version named in `e2e/cluster/versions.env` (`VELERO_VERSION`,
/// `VELERO_COMPAT_VERSION`, ...), as the cluster scripts read it.
pub fn version(name: &str) -> Result<String> {
    let file = crate::cluster::scripts_dir().join("versions.env");
    let text =
        std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix('='))
        .map(|v| v.trim().to_string())
        .filter(|v| v.starts_with('v'))
        .with_context(|| format!("no {name}=v... in {}", file.display()))
}

/// The image of Velero's server Deployment, if Velero is installed.
pub async fn server_image(client: &Client) -> Result<Option<String>> {
    let deployment =
        Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(client.clone(), VELERO_NAMESPACE)
            .get_opt("velero")
            .await?;
    Ok(deployment.map(|d| {
        d.spec
            .and_then(|s| s.template.spec)
            .and_then(|s| s.containers.into_iter().next())
            .and_then(|c| c.image)
            .unwrap_or_default()
    }))
}

/// The release Velero's server Deployment runs, from its image tag.
pub async fn running_version(client: &Client) -> Result<String> {
    let image = server_image(client)
        .await?
        .context("no Velero server Deployment in namespace velero")?;
    image
        .rsplit_once(':')
        .map(|(_, tag)| tag.to_string())
        .with_context(|| format!("Velero's server image {image:?} has no tag"))
}

/// One of Velero's kinds (`Backup`, `Restore`, ...) in Velero's namespace, as
/// dynamic objects: refill's own types carry only the fields it reads.
pub fn velero_api(client: &Client, kind: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("velero.io", "v1", kind);
    Api::namespaced_with(
        client.clone(),
        VELERO_NAMESPACE,
        &ApiResource::from_gvk(&gvk),
    )
}

/// Creates a Velero Backup or Restore (`object`, in Velero's namespace) and waits
/// until Velero has finished it. Fails with Velero's status unless it Completed.
pub async fn run_to_completion(
    client: &Client,
    object: serde_json::Value,
    timeout: Duration,
) -> Result<DynamicObject> {
    let object: DynamicObject = serde_json::from_value(object)?;
    let kind = object
        .types
        .as_ref()
        .map(|t| t.kind.clone())
        .unwrap_or_default();
    let name = object.metadata.name.clone().unwrap_or_default();
    let api = velero_api(client, &kind);
    api.create(&PostParams::default(), &object).await?;
    let done = wait_for(format!("Velero {kind} {name}"), timeout, || async {
        let o = api.get(&name).await?;
        let phase = o.data["status"]["phase"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        Ok(matches!(
            phase.as_str(),
            "Completed" | "PartiallyFailed" | "Failed" | "FailedValidation"
        )
        .then_some(o))
    })
    .await?;
    let status = &done.data["status"];
    if status["phase"] != "Completed" {
        bail!("Velero {kind} {name} ended {}: {status:#}", status["phase"]);
    }
    Ok(done)
}

/// Has Velero back up `namespaces`, every pod volume by file-system backup (as
/// `velero backup create --include-namespaces NS --default-volumes-to-fs-backup`),
/// and waits until the backup is Completed. Fails with Velero's reasons otherwise.
pub async fn backup_namespaces(
    client: &Client,
    name: &str,
    namespaces: &[&str],
    timeout: Duration,
) -> Result<DynamicObject> {
    let backup = json!({
        "apiVersion": "velero.io/v1",
        "kind": "Backup",
        "metadata": { "name": name, "namespace": VELERO_NAMESPACE },
        "spec": {
            "includedNamespaces": namespaces,
            "defaultVolumesToFsBackup": true,
            "storageLocation": "default",
            "snapshotVolumes": false,
            "ttl": "24h0m0s",
        },
    });
    run_to_completion(client, backup, timeout).await
}

/// Asks Velero to delete a backup and its data, as `velero backup delete` does.
pub async fn delete_backup(client: &Client, backup: &str) -> Result<()> {
    let api = velero_api(client, "DeleteBackupRequest");
    let request: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "velero.io/v1",
        "kind": "DeleteBackupRequest",
        "metadata": { "generateName": format!("{backup}-"), "namespace": VELERO_NAMESPACE },
        "spec": { "backupName": backup },
    }))?;
    api.create(&PostParams::default(), &request).await?;
    Ok(())
}

/// The PodVolumeBackups Velero made for a backup.
pub async fn pod_volume_backups(client: &Client, backup: &str) -> Result<Vec<PodVolumeBackup>> {
    let api: Api<PodVolumeBackup> = Api::namespaced(client.clone(), VELERO_NAMESPACE);
    let selector = format!("{}={backup}", refill::labels::BACKUP_NAME);
    Ok(api
        .list(&ListParams::default().labels(&selector))
        .await?
        .items)
}

/// The directory on this machine that holds a claim's data: the `local` path of
/// its PersistentVolume (local-path-provisioner's, or a test's own).
pub async fn claim_dir(client: &Client, namespace: &str, claim: &str) -> Result<PathBuf> {
    let pvc = Api::<PersistentVolumeClaim>::namespaced(client.clone(), namespace)
        .get(claim)
        .await?;
    let volume = pvc
        .spec
        .and_then(|s| s.volume_name)
        .with_context(|| format!("claim {namespace}/{claim} is not bound"))?;
    let pv = Api::<PersistentVolume>::all(client.clone())
        .get(&volume)
        .await?;
    let path = pv
        .spec
        .and_then(|s| s.local)
        .map(|l| l.path)
        .with_context(|| format!("PV {volume} is not a local volume"))?;
    Ok(PathBuf::from(path))
}

/// One file, directory or symlink as a restore must bring it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Permission bits and file type.
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// SHA-256 of a file's bytes, or a symlink's target; empty for a directory.
    pub content: String,
}

/// Every entry under `dir` by relative path, without following symlinks.
pub fn tree(dir: &Path) -> Result<BTreeMap<String, Entry>> {
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out)?;
    Ok(out)
}

fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Entry>) -> Result<()> {
    for item in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = item?.path();
        let meta = std::fs::symlink_metadata(&path)?;
        let content = if meta.file_type().is_symlink() {
            std::fs::read_link(&path)?.display().to_string()
        } else if meta.is_file() {
            hex::encode(Sha256::digest(std::fs::read(&path)?))
        } else {
            String::new()
        };
        let relative = path.strip_prefix(root)?.display().to_string();
        out.insert(
            relative,
            Entry {
                mode: meta.mode(),
                uid: meta.uid(),
                gid: meta.gid(),
                content,
            },
        );
        if meta.is_dir() {
            walk(root, &path, out)?;
        }
    }
    Ok(())
}

/// What differs between two trees, one line per path; empty when they match.
pub fn tree_diff(want: &BTreeMap<String, Entry>, have: &BTreeMap<String, Entry>) -> Vec<String> {
    let mut diff = Vec::new();
    for (path, w) in want {
        match have.get(path) {
            None => diff.push(format!("{path}: missing")),
            Some(h) if h != w => diff.push(format!("{path}: want {w:?}, have {h:?}")),
            Some(_) => {}
        }
    }
    for path in have.keys().filter(|p| !want.contains_key(*p)) {
        diff.push(format!("{path}: not in the backup"));
    }
    diff
}

/// Removes the data of every snapshot in the kopia repository Velero keeps for
/// `namespace` (its `p` pack blobs, through the local S3 server's API), leaving the
/// index and snapshot manifests: Velero still finds each snapshot, and fails
/// reading its files. Returns how many blobs went.
pub fn remove_snapshot_data(cluster_dir: &Path, namespace: &str) -> Result<usize> {
    let endpoint = std::fs::read_to_string(cluster_dir.join("s3-endpoint"))
        .context("no s3-endpoint in the cluster directory: is Velero installed?")?;
    let bucket = format!("{}/velero", endpoint.trim());
    let prefix = format!("kopia/{namespace}/p");
    let listing = curl(&["-fsS", &format!("{bucket}?prefix={prefix}")])?;
    let keys: Vec<&str> = listing
        .split("<Key>")
        .skip(1)
        .filter_map(|rest| rest.split("</Key>").next())
        .collect();
    for key in &keys {
        curl(&["-fsS", "-X", "DELETE", &format!("{bucket}/{key}")])?;
    }
    Ok(keys.len())
}

/// The S3 server of the local cluster checks no signatures, so plain requests do.
fn curl(args: &[&str]) -> Result<String> {
    let out = std::process::Command::new("curl")
        .args(args)
        .output()
        .context("running curl")?;
    if !out.status.success() {
        bail!("curl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// The node agent's DaemonSet, as `velero install` names it.
const NODE_AGENT: &str = "node-agent";

/// The node agent's arguments: what [`set_node_agent_args`] changes and puts back.
pub async fn node_agent_args(client: &Client) -> Result<Vec<String>> {
    let daemon_set = Api::<DaemonSet>::namespaced(client.clone(), VELERO_NAMESPACE)
        .get(NODE_AGENT)
        .await?;
    daemon_set
        .spec
        .and_then(|s| s.template.spec)
        .and_then(|s| s.containers.into_iter().find(|c| c.name == NODE_AGENT))
        .map(|c| c.args.unwrap_or_default())
        .context("the node agent's DaemonSet has no node-agent container")
}

/// Gives the node agent `args` and waits until every node runs a new pod of it:
/// it reads its ConfigMap (`--node-agent-configmap`) only when it starts.
pub async fn set_node_agent_args(
    client: &Client,
    args: &[String],
    timeout: Duration,
) -> Result<()> {
    let api = Api::<DaemonSet>::namespaced(client.clone(), VELERO_NAMESPACE);
    let patch = json!({ "spec": { "template": { "spec": { "containers": [
        { "name": NODE_AGENT, "args": args }
    ] } } } });
    let patched = api
        .patch(
            NODE_AGENT,
            &PatchParams::default(),
            &Patch::Strategic(patch),
        )
        .await?;
    let generation = patched.metadata.generation.unwrap_or_default();
    wait_for("the node agent rolled out", timeout, || async {
        let status = api.get(NODE_AGENT).await?.status.unwrap_or_default();
        let desired = status.desired_number_scheduled;
        Ok(
            (status.observed_generation.unwrap_or_default() >= generation
                && status.updated_number_scheduled.unwrap_or_default() == desired
                && status.number_available.unwrap_or_default() == desired
                && status.number_ready == desired)
                .then_some(()),
        )
    })
    .await
}

/// The ConfigMap the node agent reads its data-path settings from (Velero's
/// `--node-agent-configmap`), holding only `loadConcurrency.globalConfig`: how many
/// volumes each node agent moves at once (1 unless set).
pub fn load_concurrency_config(name: &str, per_node: u32) -> Result<ConfigMap> {
    let config = json!({ "loadConcurrency": { "globalConfig": per_node } });
    Ok(serde_json::from_value(json!({
        "metadata": { "name": name, "namespace": VELERO_NAMESPACE },
        "data": { "node-agent-config.json": config.to_string() },
    }))?)
}

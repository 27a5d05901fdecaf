//! The CSI driver of the local cluster's real nodes (`e2e/cluster/csi.sh`): a
//! DaemonSet of the directory-backed driver of `e2e/csi` beside the CSI
//! external-provisioner in node-deployment mode, with the StorageClass
//! [`CSI_CLASS`]. Where its volumes and mounts are, for tests that look at them
//! from this machine.

use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::Cluster;

/// The StorageClass of the CSI driver (WaitForFirstConsumer, reclaim policy
/// Delete).
pub const CSI_CLASS: &str = "csi-hostpath";

/// The CSI driver's name: its PVs' `spec.csi.driver`, its CSIDriver object.
pub const CSI_DRIVER: &str = "hostpath.csi.refill.dev";

/// The topology key of the driver's volumes: the node that holds them.
pub const CSI_TOPOLOGY_KEY: &str = "topology.hostpath.csi.refill.dev/node";

/// The directory on this machine that holds a volume of the driver on `node`.
pub fn volume_dir(cluster: &Cluster, node: &str, volume_handle: &str) -> PathBuf {
    cluster
        .real_node_dir(node)
        .join("csi-hostpath")
        .join(volume_handle)
}

/// Where the kubelet of a node has a pod's CSI volume mounted, as its mount
/// namespace (the node's) sees it, and Velero's node agent looks for it.
pub fn kubelet_mount_path(pod_uid: &str, pv: &str) -> String {
    format!("/var/lib/kubelet/pods/{pod_uid}/volumes/kubernetes.io~csi/{pv}/mount")
}

/// The mount points of a real node's mount namespace, read through its kubelet's
/// `/proc` entry: what the kubelet and every pod of the node see mounted.
pub fn node_mount_points(cluster: &Cluster, node: &str) -> Result<Vec<String>> {
    let pid_file = cluster.real_node_dir(node).join("run/kubelet.pid");
    let pid = std::fs::read_to_string(&pid_file)
        .with_context(|| format!("reading {}", pid_file.display()))?;
    let info = std::fs::read_to_string(format!("/proc/{}/mountinfo", pid.trim()))
        .with_context(|| format!("reading the mounts of {node}'s kubelet"))?;
    Ok(mount_points(&info))
}

/// The fifth field of each mountinfo line, the mount point (paths with spaces,
/// written as `\040`, are of no interest here and kept as written).
fn mount_points(mountinfo: &str) -> Vec<String> {
    mountinfo
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(str::to_string)
        .collect()
}

/// The one container of a test app on a real node: it sleeps with its volume `data`
/// at /data, and is Ready only while its probe finds exactly `text` in `path` (the
/// app itself reads the volume's bytes).
pub fn checking_container(path: &str, text: &str) -> serde_json::Value {
    use sha2::Digest;
    let sha = hex::encode(sha2::Sha256::digest(text.as_bytes()));
    serde_json::json!({
        "name": "app", "image": crate::TESTBOX_IMAGE, "imagePullPolicy": "Never",
        "args": ["sleep"], "volumeMounts": [{ "name": "data", "mountPath": "/data" }],
        "readinessProbe": {
            "exec": { "command": ["/testbox", "check", path, sha] },
            "periodSeconds": 1,
        },
    })
}

/// The spec of a test app's pod on a real node: `init` containers, then
/// [`checking_container`] with `claim` at /data, as root (Velero's restore helper
/// must be root to remove its done files, and the volume's root is root's), with
/// `selector` as its node selector.
pub fn app_pod_spec(
    selector: serde_json::Value,
    init: serde_json::Value,
    claim: &str,
    (path, text): (&str, &str),
) -> serde_json::Value {
    serde_json::json!({
        "nodeSelector": selector,
        "tolerations": [{ "key": crate::REAL_NODE_TAINT, "operator": "Exists", "effect": "NoSchedule" }],
        "initContainers": init,
        "containers": [checking_container(path, text)],
        "volumes": [{ "name": "data", "persistentVolumeClaim": { "claimName": claim } }],
        "securityContext": { "runAsUser": 0, "runAsGroup": 0 },
        "terminationGracePeriodSeconds": 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_are_the_fifth_field() {
        let info = "22 1 8:1 / / rw shared:1 - ext4 /dev/vda rw\n\
                    310 22 8:1 /csi/pvc-1 /var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/pvc-1/mount rw - ext4 /dev/vda rw\n";
        assert_eq!(mount_points(info), ["/", &kubelet_mount_path("u", "pvc-1")]);
    }
}

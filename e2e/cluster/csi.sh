# shellcheck shell=bash disable=SC2154 # variables come from lib.sh, nodes.sh, up.sh
# The CSI driver of the real nodes: sourced by up.sh after lib.sh and nodes.sh,
# not run.
#
# A DaemonSet on the real nodes, as CSI drivers are deployed on a cluster, whose
# pod on each node holds two containers of one image (build-csi.sh):
#   - the driver (e2e/csi): its CSI socket in the kubelet's plugins directory,
#     its registration socket in plugins_registry (the kubelet's plugin watcher
#     finds it there and records the driver in the node's CSINode), and each
#     volume a directory of the node's own state directory,
#     $nodes_dir/<node>/csi-hostpath, which it bind-mounts into pods. It mounts
#     the kubelet's pods directory with Bidirectional propagation (hence
#     privileged), so that its mounts reach the kubelet and the pods, and Velero's
#     node agent, which reads /var/lib/kubelet/pods with HostToContainer;
#   - the CSI external-provisioner in node-deployment mode: each node provisions
#     its own volumes, for claims whose pod the scheduler put there
#     (WaitForFirstConsumer), and leaves alone a claim whose dataSourceRef names a
#     kind it does not handle: a volume populator's.
# The StorageClass is $csi_class. down.sh stops the pods with their nodes; the
# volumes' directories stay on disk like local-path's (--purge removes them).

csi_namespace=hostpath-csi
csi_driver=hostpath.csi.refill.dev
csi_class=csi-hostpath

csi_ready() {
  "${kubectl[@]}" -n "$csi_namespace" rollout status daemonset/csi-hostpath --timeout=1s >/dev/null 2>&1 || return 1
  local name drivers
  for name in $(real_node_names); do
    drivers="$("${kubectl[@]}" get csinode "$name" -o jsonpath='{.spec.drivers[*].name}' 2>/dev/null)" || return 1
    grep -qw "$csi_driver" <<<"$drivers" || return 1
  done
}

# start_csi <image>: the image is already in every node (start_real_nodes).
start_csi() {
  local image="$1" name
  for name in $(real_node_names); do
    node_vars "$name"
    mkdir -p "$n_dir/csi-hostpath"
  done
  csi_manifests "$image" | "${kubectl[@]}" apply --server-side --force-conflicts -f - >/dev/null
  local deadline=$((SECONDS + 120))
  until csi_ready; do
    if ((SECONDS >= deadline)); then
      say "timed out after 120s waiting for the CSI driver on every real node"
      "${kubectl[@]}" -n "$csi_namespace" get pods -o wide >&2 || true
      exit 1
    fi
    sleep 1
  done
  say "CSI driver $csi_driver ready (StorageClass $csi_class)"
}

# With REFILL_CSI=0: what start_csi made goes, if it is there. Volumes it
# provisioned stay with their PVs.
stop_csi() {
  "${kubectl[@]}" get namespace "$csi_namespace" >/dev/null 2>&1 || return 0
  say "removing the CSI driver"
  "${kubectl[@]}" delete namespace "$csi_namespace" --wait=true >/dev/null
  "${kubectl[@]}" delete storageclass "$csi_class" --ignore-not-found >/dev/null
  "${kubectl[@]}" delete csidriver "$csi_driver" --ignore-not-found >/dev/null
  "${kubectl[@]}" delete clusterrolebinding refill-csi-provisioner --ignore-not-found >/dev/null
  "${kubectl[@]}" delete clusterrole refill-csi-provisioner --ignore-not-found >/dev/null
}

csi_manifests() {
  local image="$1" plugin_dir="/var/lib/kubelet/plugins/$csi_driver"
  cat <<YAML
apiVersion: v1
kind: Namespace
metadata:
  name: $csi_namespace
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: csi-provisioner
  namespace: $csi_namespace
---
# What the external-provisioner's own RBAC grants it, less leader election
# (one provisioner per node) and capacity tracking (off).
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: refill-csi-provisioner
rules:
- apiGroups: [""]
  resources: [persistentvolumes]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [get, list, watch, update]
- apiGroups: [storage.k8s.io]
  resources: [storageclasses, csinodes, volumeattachments]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [events]
  verbs: [list, watch, create, update, patch]
- apiGroups: [snapshot.storage.k8s.io]
  resources: [volumesnapshots, volumesnapshotcontents]
  verbs: [get, list]
- apiGroups: [""]
  resources: [nodes]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: refill-csi-provisioner
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: refill-csi-provisioner
subjects:
- kind: ServiceAccount
  name: csi-provisioner
  namespace: $csi_namespace
---
apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata:
  name: $csi_driver
spec:
  attachRequired: false
  podInfoOnMount: true
  fsGroupPolicy: File
  volumeLifecycleModes: [Persistent]
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: $csi_class
provisioner: $csi_driver
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Delete
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: csi-hostpath
  namespace: $csi_namespace
spec:
  selector:
    matchLabels: {app: csi-hostpath}
  template:
    metadata:
      labels: {app: csi-hostpath}
    spec:
      serviceAccountName: csi-provisioner
      priorityClassName: system-node-critical
      nodeSelector: {$real_node_label: real}
      tolerations:
      - {key: $real_node_taint, operator: Exists, effect: NoSchedule}
      containers:
      - name: driver
        image: $image
        imagePullPolicy: Never
        command: [/csi-hostpath]
        args:
        - -node=\$(NODE_NAME)
        - -endpoint=$plugin_dir/csi.sock
        - -registration=/var/lib/kubelet/plugins_registry/$csi_driver-reg.sock
        - -state=/csi-data-dir
        env:
        - name: NODE_NAME
          valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
        securityContext: {privileged: true}
        volumeMounts:
        - {name: pods, mountPath: /var/lib/kubelet/pods, mountPropagation: Bidirectional}
        - {name: plugin, mountPath: $plugin_dir}
        - {name: registry, mountPath: /var/lib/kubelet/plugins_registry}
        - {name: nodes, mountPath: /csi-data-dir, subPathExpr: \$(NODE_NAME)/csi-hostpath}
      - name: provisioner
        image: $image
        imagePullPolicy: Never
        command: [/csi-provisioner]
        args:
        - --csi-address=$plugin_dir/csi.sock
        - --node-deployment=true
        - --immediate-topology=false
        - --worker-threads=4
        - --v=3
        env:
        - name: NODE_NAME
          valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
        volumeMounts:
        - {name: plugin, mountPath: $plugin_dir}
      volumes:
      - {name: pods, hostPath: {path: /var/lib/kubelet/pods, type: Directory}}
      - {name: plugin, hostPath: {path: $plugin_dir, type: DirectoryOrCreate}}
      - {name: registry, hostPath: {path: /var/lib/kubelet/plugins_registry, type: Directory}}
      - {name: nodes, hostPath: {path: $nodes_dir, type: Directory}}
YAML
}

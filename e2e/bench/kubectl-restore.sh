#!/usr/bin/env bash
# The benchmark's baseline: a data-only, in-place restore of PVCs from a Velero
# file-system backup done by hand with kubectl, one PVC at a time, the way a
# runbook would do it. It does what refill does for a Deployment's claim:
#
#   1. find the claim's PodVolumeBackup in the backup
#   2. scale the Deployment to 0 and wait until its pods are gone
#   3. create a ConfigMap in Velero's namespace to own the PodVolumeRestore; its
#      UID is what restore-wait waits for (the node agent names its done file
#      after the first owner of the PodVolumeRestore)
#   4. start a helper pod that mounts the claim, with Velero's restore-wait init
#      container (args: that UID; the volume mounted at /restores/<volume>), and
#      wait until restore-wait runs
#   5. create the PodVolumeRestore and wait until it is Completed
#   6. delete the helper pod, scale the Deployment back, wait until it is ready
#
# The ConfigMap and the PodVolumeRestore stay as a record of the restore (as
# refill's stay with their DataRestore); both carry the label
# kubectl-restore/run=<run id> for cleaning up.
#
# Usage:
#   kubectl-restore.sh -n VELERO_NAMESPACE -b BACKUP [-r RUN_ID] [-t TIMEOUT] \
#       NAMESPACE/PVC=DEPLOYMENT...
#
#   KUBECTL               kubectl to run (default: kubectl on PATH)
#   RESTORE_HELPER_IMAGE  image of restore-wait (default velero/velero:v1.17.0)
#   HELPER_IMAGE          image of the helper pod's idle container
#                         (default registry.k8s.io/pause:3.10)
#
# It stops at the first error. Each finished claim is reported on stdout as
# `restored NAMESPACE/PVC in SECONDS`.
set -euo pipefail

kubectl_bin="${KUBECTL:-kubectl}"
helper_image="${RESTORE_HELPER_IMAGE:-velero/velero:v1.17.0}"
idle_image="${HELPER_IMAGE:-registry.k8s.io/pause:3.10}"
velero_ns=velero
backup=""
run_id="$(date +%s)"
timeout=300s

usage() {
  sed -n '/^# Usage:/,/^#   HELPER_IMAGE/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

while getopts "n:b:r:t:h" opt; do
  case "$opt" in
    n) velero_ns="$OPTARG" ;;
    b) backup="$OPTARG" ;;
    r) run_id="$OPTARG" ;;
    t) timeout="$OPTARG" ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
[[ -n "$backup" && $# -gt 0 ]] || usage

k() { "$kubectl_bin" "$@"; }
say() { printf '[kubectl-restore] %s\n' "$*" >&2; }
now_ns() { date +%s%N; }
# mark <what>: logs how long the claim's last step took, to stderr.
mark() {
  local t
  t="$(now_ns)"
  say "$ns/$pvc: $1 ($(((t - step_started) / 1000000)) ms)"
  step_started="$t"
}

restore_one() {
  local target="$1"
  local ns="${target%%/*}" rest="${target#*/}"
  local pvc="${rest%%=*}" deploy="${rest#*=}"
  [[ "$ns" != "$target" && "$pvc" != "$rest" && -n "$deploy" ]] ||
    { say "'$target' is not NAMESPACE/PVC=DEPLOYMENT"; return 2; }
  local started step_started
  started="$(now_ns)"
  step_started="$started"

  # 1. The claim's PodVolumeBackup: the pod's namespace and the pvc-name
  #    annotation identify it among the backup's.
  local pvb volume snapshot repo location uploader
  read -r pvb volume snapshot repo location uploader < <(
    k -n "$velero_ns" get podvolumebackups -l "velero.io/backup-name=$backup" -o jsonpath='{range .items[*]}{.spec.pod.namespace}{" "}{.metadata.annotations.velero\.io/pvc-name}{" "}{.metadata.name}{" "}{.spec.volume}{" "}{.status.snapshotID}{" "}{.spec.repoIdentifier}{" "}{.spec.backupStorageLocation}{" "}{.spec.uploaderType}{"\n"}{end}' |
      awk -v ns="$ns" -v pvc="$pvc" '$1 == ns && $2 == pvc { $1 = ""; $2 = ""; print; exit }'
  ) || true
  [[ -n "${snapshot:-}" ]] || { say "backup $backup has no file-system backup of $ns/$pvc"; return 1; }
  mark "found PodVolumeBackup $pvb"

  # 2. Stop the Deployment, remembering its size and which pods are its own.
  local replicas selector
  # shellcheck disable=SC2016 # a go-template, not shell
  read -r replicas selector < <(
    k -n "$ns" get deployment "$deploy" -o go-template='{{.spec.replicas}} {{range $k, $v := .spec.selector.matchLabels}}{{$k}}={{$v}},{{end}}{{"\n"}}'
  )
  selector="${selector%,}"
  k -n "$ns" scale deployment "$deploy" --replicas=0 >/dev/null
  mark "scaled down from $replicas"
  k -n "$ns" wait --for=delete pod -l "$selector" --timeout="$timeout" >/dev/null
  mark "pods gone"

  # 3. The owner of the PodVolumeRestore, whose UID restore-wait waits for.
  local name="restore-$ns-$pvc" owner_uid
  owner_uid="$(k apply -o jsonpath='{.metadata.uid}' -f - <<EOF
apiVersion: v1
kind: ConfigMap
metadata:
  name: $name
  namespace: $velero_ns
  labels:
    kubectl-restore/run: "$run_id"
data:
  pvc: $ns/$pvc
  backup: $backup
  podVolumeBackup: $pvb
EOF
)"
  mark "created ConfigMap $name"

  # 4. The helper pod, shaped like Velero's restored pods: restore-wait first.
  local helper="restore-helper-$pvc" pod_uid
  pod_uid="$(k apply -o jsonpath='{.metadata.uid}' -f - <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $helper
  namespace: $ns
  labels:
    kubectl-restore/run: "$run_id"
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  automountServiceAccountToken: false
  initContainers:
  - name: restore-wait
    image: $helper_image
    command: ["/velero-restore-helper"]
    args: ["$owner_uid"]
    env:
    - name: POD_NAMESPACE
      valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
    - name: POD_NAME
      valueFrom: {fieldRef: {fieldPath: metadata.name}}
    volumeMounts:
    - name: $volume
      mountPath: /restores/$volume
  containers:
  - name: idle
    image: $idle_image
  volumes:
  - name: $volume
    persistentVolumeClaim:
      claimName: $pvc
EOF
)"
  mark "created helper pod $helper"
  k -n "$ns" wait "pod/$helper" --timeout="$timeout" \
    --for=jsonpath='{.status.initContainerStatuses[0].state.running.startedAt}' >/dev/null
  mark "restore-wait running"

  # 5. The restore itself, carried out by Velero's node agent.
  k apply -f - >/dev/null <<EOF
apiVersion: velero.io/v1
kind: PodVolumeRestore
metadata:
  name: $name
  namespace: $velero_ns
  labels:
    kubectl-restore/run: "$run_id"
    velero.io/pod-uid: $pod_uid
  ownerReferences:
  - apiVersion: v1
    kind: ConfigMap
    name: $name
    uid: $owner_uid
spec:
  pod:
    apiVersion: v1
    kind: Pod
    namespace: $ns
    name: $helper
    uid: $pod_uid
  volume: $volume
  backupStorageLocation: $location
  repoIdentifier: $repo
  uploaderType: $uploader
  snapshotID: $snapshot
  sourceNamespace: $ns
EOF
  mark "created PodVolumeRestore"
  if ! k -n "$velero_ns" wait "podvolumerestore/$name" --timeout="$timeout" \
    --for=jsonpath='{.status.phase}'=Completed >/dev/null; then
    say "PodVolumeRestore $name did not complete:"
    k -n "$velero_ns" get podvolumerestore "$name" -o jsonpath='{.status}{"\n"}' >&2 || true
    return 1
  fi
  mark "PodVolumeRestore Completed"

  # 6. Undo the helper, bring the application back.
  k -n "$ns" delete pod "$helper" >/dev/null
  mark "helper pod deleted"
  k -n "$ns" scale deployment "$deploy" --replicas="$replicas" >/dev/null
  mark "scaled back to $replicas"
  k -n "$ns" rollout status deployment "$deploy" --timeout="$timeout" >/dev/null
  mark "ready"

  local ended
  ended="$(now_ns)"
  local ms=$(((ended - started) / 1000000))
  printf 'restored %s/%s in %d.%03d\n' "$ns" "$pvc" $((ms / 1000)) $((ms % 1000))
}

for target in "$@"; do
  restore_one "$target"
done

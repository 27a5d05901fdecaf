# shellcheck shell=bash disable=SC2154 # variables come from lib.sh, nodes.sh, up.sh
# Velero in the local cluster: sourced by up.sh after lib.sh and nodes.sh, not run.
#
# Installed as a user installs it, with `velero install` (the CLI built from the
# same module as the server), into the `velero` namespace:
#   - backups go to gofakes3, an S3 server on the host's loopback that keeps its
#     objects in $cluster_dir/s3; real nodes and their pods reach it at
#     $s3_address through their relay (nodes.sh);
#   - the namespace is made before the install with two annotations an admin
#     would use to keep Velero on the real nodes: a node selector (PodNodeSelector)
#     and a toleration of their taint (PodTolerationRestriction). They apply to
#     every pod there, the node agent's data-mover pods included;
#   - the images are imported into the nodes, never pulled.
# Velero runs only where real nodes do: with REFILL_REAL_NODES=0 nothing of it
# starts.


velero_namespace=velero
velero_bucket=velero

start_s3() {
  mkdir -p "$cluster_dir/s3"
  # The bolt back end (one database file) rather than gofakes3's file-system one,
  # which answers a listing under a prefix that has no object yet with "no such
  # bucket": kopia lists exactly that when it makes a repository. The database is
  # named with `=`, so that up.sh's fingerprint (which reads files named by
  # arguments) does not change with its contents.
  bin="$velero_bin" ensure gofakes3 \
    -backend bolt -bolt.db="$cluster_dir/s3/objects.db" \
    -host "127.0.0.1:$s3_host_port" -initialbucket "$velero_bucket"
  wait_until 30 gofakes3 "the S3 server" curl -fsS --max-time 2 -o /dev/null "http://127.0.0.1:$s3_host_port/"
  # For tests that reach into the object store (a snapshot's data removed).
  echo "http://127.0.0.1:$s3_host_port" >"$cluster_dir/s3-endpoint"
}

velero_cli() { "$velero_bin/velero" --kubeconfig "$cluster_dir/admin.kubeconfig" "$@"; }

velero_ready() {
  local phase
  phase="$("${kubectl[@]}" -n "$velero_namespace" get backupstoragelocation default \
    -o jsonpath='{.status.phase}' 2>/dev/null)" || return 1
  [[ "$phase" == Available ]] || return 1
  "${kubectl[@]}" -n "$velero_namespace" rollout status deployment/velero --timeout=1s >/dev/null 2>&1 || return 1
  "${kubectl[@]}" -n "$velero_namespace" rollout status daemonset/node-agent --timeout=1s >/dev/null 2>&1
}

velero_namespace_manifest() {
  local toleration="[{\"key\": \"$real_node_taint\", \"operator\": \"Exists\", \"effect\": \"NoSchedule\"}]"
  printf '%s\n' \
    "apiVersion: v1" \
    "kind: Namespace" \
    "metadata:" \
    "  name: $velero_namespace" \
    "  annotations:" \
    "    scheduler.alpha.kubernetes.io/node-selector: $real_node_label=real" \
    "    scheduler.alpha.kubernetes.io/defaultTolerations: '$toleration'"
}

node_agent_patch() {
  printf '{"spec": {"template": {"spec": {"nodeSelector": {"%s": "real"}, "tolerations": [{"key": "%s", "operator": "Exists", "effect": "NoSchedule"}]}}}}' \
    "$real_node_label" "$real_node_taint"
}

install_velero() {
  local dir="$cluster_dir/velero"
  mkdir -p "$dir"
  printf '[default]\naws_access_key_id = refill\naws_secret_access_key = refill-local\n' >"$dir/credentials"
  velero_namespace_manifest | "${kubectl[@]}" apply --server-side --force-conflicts -f - >/dev/null
  # Requests of zero: the real nodes are small, and share two cores with the rest.
  # Every test namespace gets a kopia repository of its own; maintenance once a
  # week (not hourly) keeps their maintenance Jobs from piling up on the nodes of
  # a cluster that stays up between test runs.
  local args=(
    install --namespace "$velero_namespace"
    --image "velero/velero:$VELERO_VERSION"
    --plugins "velero/velero-plugin-for-aws:$VELERO_AWS_PLUGIN_VERSION"
    --provider aws --bucket "$velero_bucket"
    --secret-file "$dir/credentials"
    --backup-location-config "region=local,s3ForcePathStyle=true,s3Url=http://$s3_address,checksumAlgorithm="
    --use-volume-snapshots=false
    --use-node-agent
    --uploader-type kopia
    --default-repo-maintain-frequency 168h
    --velero-pod-cpu-request 0 --velero-pod-mem-request 0 --velero-pod-cpu-limit 0 --velero-pod-mem-limit 0
    --node-agent-pod-cpu-request 0 --node-agent-pod-mem-request 0 --node-agent-pod-cpu-limit 0 --node-agent-pod-mem-limit 0
  )
  local want
  want="$(printf '%s\n' "$velero_bin" "${args[@]}" | sha256sum | cut -d' ' -f1)"
  if [[ "$(cat "$dir/installed" 2>/dev/null)" != "$want" ]] || ! velero_ready; then
    say "installing Velero $VELERO_VERSION"
    # `velero install` creates what is missing and leaves what exists alone: the
    # server and the node agents go first, so that they come back as asked now.
    "${kubectl[@]}" -n "$velero_namespace" delete deployment/velero daemonset/node-agent \
      --ignore-not-found --wait=true >/dev/null
    velero_cli "${args[@]}" >"$cluster_dir/logs/velero-install.log" 2>&1 ||
      { say "velero install failed"; tail -n 30 "$cluster_dir/logs/velero-install.log" >&2; exit 1; }
    # The DaemonSet controller makes a pod for every node its template allows,
    # whatever the namespace's annotations (which act on pods, later): the node
    # agent gets the real nodes' selector and toleration in its template.
    "${kubectl[@]}" -n "$velero_namespace" patch daemonset node-agent --type merge -p "$(node_agent_patch)" >/dev/null
    echo "$want" >"$dir/installed"
  fi
  local deadline=$((SECONDS + 180))
  until velero_ready; do
    if ((SECONDS >= deadline)); then
      say "timed out after 180s waiting for Velero (server, node agents, backup location Available)"
      "${kubectl[@]}" -n "$velero_namespace" get pods,backupstoragelocations -o wide >&2 || true
      exit 1
    fi
    sleep 1
  done
  say "Velero $VELERO_VERSION ready"
}

# Velero's own CRDs, from its module, in every local cluster (with or without real
# nodes): the tests' Velero objects are checked against Velero's schemas. Replaced
# rather than applied, so that no field of an older definition survives.
install_velero_crds() {
  local dirs dir file names=()
  dirs="$("$here/build-velero.sh" crds)"
  for dir in $dirs; do
    for file in "$dir"/*.yaml; do
      "${kubectl[@]}" replace -f "$file" >/dev/null 2>&1 || "${kubectl[@]}" create -f "$file" >/dev/null
      names+=("crd/$(sed -n 's/^  name: //p' "$file" | head -n 1)")
    done
  done
  "${kubectl[@]}" wait --for condition=established --timeout=60s "${names[@]}" >/dev/null
}

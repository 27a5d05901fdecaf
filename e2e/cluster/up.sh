#!/usr/bin/env bash
# Starts the local Kubernetes control plane used by the tests and the demo:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok, which
# plays the kubelets of a few simulated nodes. No container runtime is needed.
#
# Safe to run again and from several processes at once: components that are up
# and healthy are left alone, missing ones are (re)started, and the caller waits
# until the whole cluster is usable. Prints the admin kubeconfig path last.
#
#   REFILL_CLUSTER_DIR  state directory (default ~/.cache/refill/cluster)
#   REFILL_NODES        number of simulated nodes, node-a, node-b, ... (default 3)
#   REFILL_PORT_OFFSET  added to every port, for a second cluster (default 0)
#   REFILL_REAL_NODES   number of real nodes, real-a, real-b, ... (default 2; 0 for
#                       kwok only). See nodes.sh.
#   REFILL_VELERO       1 (default with real nodes): Velero and its S3 server on
#                       the real nodes; 0 to leave them out. See velero.sh.
#   REFILL_VELERO_VERSION  the Velero release to build and install (default
#                       VELERO_VERSION of versions.env)
#   REFILL_RESTART_NODE a real node to start over (stopped with its containers,
#                       started again, registered anew: a machine of that name
#                       coming back after its Node object was deleted); only that
#                       node is waited for, others may be down meanwhile
#   REFILL_FLUX         1 (default where the S3 server is, i.e. with Velero): Flux's
#                       source-controller and kustomize-controller on the host,
#                       with their CRDs and Argo CD's Application CRD; 0 to leave
#                       them out (and stop them). See flux.sh.
#   REFILL_ARGOCD       1: Argo CD's application-controller and repo-server on the
#                       host too (with real nodes), with a Git server for test apps;
#                       0: they are stopped; unset: left as they are, so that a
#                       later up.sh (a test restarting a node) keeps them. The
#                       Argo CD tests start them themselves. See argocd.sh.
#   REFILL_CSI          1 (default with real nodes): a CSI driver on the real nodes
#                       (directory volumes, the CSI external-provisioner on each
#                       node) and its StorageClass csi-hostpath; 0 to leave it out
#                       (and remove it). See csi.sh.
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=SCRIPTDIR/nodes.sh
source "$here/nodes.sh"
# shellcheck source=SCRIPTDIR/velero.sh
source "$here/velero.sh"
# shellcheck source=SCRIPTDIR/flux.sh
source "$here/flux.sh"
# shellcheck source=SCRIPTDIR/argocd.sh
source "$here/argocd.sh"
# shellcheck source=SCRIPTDIR/csi.sh
source "$here/csi.sh"

node_count="${REFILL_NODES:-3}"
if ! [[ "$node_count" =~ ^[0-9]+$ ]] || ((node_count < 1 || node_count > 26)); then
  say "REFILL_NODES must be between 1 and 26, not '$node_count'"
  exit 2
fi
if ! [[ "$real_node_count" =~ ^[0-9]+$ ]] || ((real_node_count > 26)); then
  say "REFILL_REAL_NODES must be between 0 and 26, not '$real_node_count'"
  exit 2
fi
with_velero=false
if ((real_node_count)) && [[ "${REFILL_VELERO:-1}" != 0 ]]; then with_velero=true; fi
# Flux's tests serve their sources from Velero's S3 server.
with_flux=false
if $with_velero && [[ "${REFILL_FLUX:-1}" != 0 ]]; then with_flux=true; fi
with_argocd=false
if [[ "${REFILL_ARGOCD:-}" == 1 ]]; then with_argocd=true; fi
with_csi=false
if ((real_node_count)) && [[ "${REFILL_CSI:-1}" != 0 ]]; then with_csi=true; fi
if ((real_node_count)) && ((EUID != 0)); then
  say "real nodes need root (namespaces, cgroups, mounts); run as root or with REFILL_REAL_NODES=0"
  exit 2
fi

pki="$cluster_dir/pki"
mkdir -p "$cluster_dir/logs" "$cluster_dir/run" "$pki"
started_at=$(date +%s%N)

# One caller at a time; the others wait here and then find the cluster up.
exec 9>"$cluster_dir/lock"
flock -w 3600 9 || { say "timed out waiting for $cluster_dir/lock"; exit 1; }

bin="$("$here/build.sh" | tail -n 1)"
[[ -x "$bin/kube-apiserver" ]] || { say "build.sh gave no usable bin dir ('$bin')"; exit 1; }
# down.sh uses this to find the binaries without building anything.
echo "$bin" >"$cluster_dir/bin-dir"
kubectl=("$bin/kubectl" --kubeconfig "$cluster_dir/admin.kubeconfig")

# --- certificates --------------------------------------------------------------
# A private CA signs everything. EC keys: generated instantly, and accepted by
# Go clients as well as by rustls.

new_key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

# issue <name> <subject> <extendedKeyUsage> [subjectAltName]
issue() {
  local name="$1" subject="$2" usage="$3" san="${4:-}"
  [[ -s "$pki/$name.crt" ]] && return 0
  new_key "$pki/$name.key"
  {
    echo "basicConstraints = critical, CA:FALSE"
    echo "keyUsage = critical, digitalSignature, keyEncipherment"
    echo "extendedKeyUsage = $usage"
    echo "subjectKeyIdentifier = hash"
    echo "authorityKeyIdentifier = keyid"
    [[ -z "$san" ]] || echo "subjectAltName = $san"
  } >"$pki/$name.ext"
  openssl req -new -key "$pki/$name.key" -subj "$subject" -out "$pki/$name.csr" 2>/dev/null
  openssl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
    -days 3650 -sha256 -extfile "$pki/$name.ext" -out "$pki/$name.crt" 2>/dev/null
  rm -f "$pki/$name.csr" "$pki/$name.ext"
}

# kubeconfig <name> <client cert name>
kubeconfig() {
  cat >"$cluster_dir/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: refill-local
  cluster:
    server: https://127.0.0.1:$apiserver_port
    certificate-authority: $pki/ca.crt
users:
- name: $1
  user:
    client-certificate: $pki/$2.crt
    client-key: $pki/$2.key
contexts:
- name: refill-local
  context:
    cluster: refill-local
    user: $1
current-context: refill-local
EOF
}

make_pki() {
  if [[ ! -s "$pki/ca.crt" ]]; then
    rm -f "$pki"/*.crt # every certificate must come from the new CA
    new_key "$pki/ca.key"
    openssl req -x509 -new -key "$pki/ca.key" -subj "/CN=refill-local-ca" -days 3650 -sha256 \
      -addext "basicConstraints = critical, CA:TRUE" \
      -addext "keyUsage = critical, keyCertSign, cRLSign, digitalSignature" \
      -out "$pki/ca.crt" 2>/dev/null
  fi
  issue apiserver "/CN=kube-apiserver" serverAuth \
    "DNS:localhost, DNS:kubernetes, DNS:kubernetes.default, DNS:kubernetes.default.svc, DNS:kubernetes.default.svc.cluster.local, IP:127.0.0.1, IP:10.96.0.1"
  # system:masters bypasses RBAC: for tests and people, never for code under test.
  issue admin "/O=system:masters/CN=refill-admin" clientAuth
  # The bootstrap RBAC policy grants these two user names what they need.
  issue controller-manager "/CN=system:kube-controller-manager" clientAuth
  issue scheduler "/CN=system:kube-scheduler" clientAuth
  # kwok writes status for every node and pod, and deletes pods; it stands in
  # for all kubelets at once, so the Node authorizer's per-node rules don't fit.
  issue kwok "/O=system:masters/CN=kwok" clientAuth
  # The API server's client certificate towards kubelets (logs, exec).
  issue apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
  # The provisioner creates PVs and helper pods; like kwok, a tool of the cluster.
  issue local-path-provisioner "/O=system:masters/CN=local-path-provisioner" clientAuth
  if [[ ! -s "$pki/sa.key" ]]; then
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$pki/sa.key" 2>/dev/null
    openssl pkey -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
  fi
  kubeconfig admin admin
  kubeconfig controller-manager controller-manager
  kubeconfig scheduler scheduler
  kubeconfig kwok kwok
  kubeconfig local-path-provisioner local-path-provisioner
}

# --- audit policy --------------------------------------------------------------
# One line per request, without bodies, so a benchmark can count requests per
# client (user agent) cheaply. The control plane's own chatter is left out; what
# remains is requests made by people, tests and workloads' service accounts.
write_audit_policy() {
  cat >"$cluster_dir/audit-policy.yaml" <<'EOF'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
omitManagedFields: true
rules:
- level: None
  users: ["system:apiserver", "system:kube-controller-manager", "system:kube-scheduler", "kwok"]
- level: None
  userGroups: ["system:nodes", "system:serviceaccounts:kube-system"]
- level: None
  nonResourceURLs: ["/healthz*", "/readyz*", "/livez*", "/version", "/openapi*"]
- level: Metadata
EOF
}

# --- processes -----------------------------------------------------------------

# Starts a component in its own session, so it outlives this script and whatever
# ran it (a test harness, a CI step). All of its descriptors point elsewhere:
# an inherited pipe would keep the caller's output open, an inherited lock fd 9
# would keep the lock taken for as long as the component lives. $argv0, if set,
# is the process's argv[0] instead of the binary's path: down.sh finds a process
# whose pid file went missing by the state directory in its command line, and a
# component whose flags name no file there carries it in argv[0].
launch() {
  local name="$1"; shift
  local log; log="$(log_file "$name")"
  [[ ! -s "$log" ]] || mv -f "$log" "$log.1"
  say "starting $name"
  rm -f "$(pid_file "$name")"
  # shellcheck disable=SC2016 # expanded by the inner shell
  setsid bash -c 'echo $$ >"$1"; argv0="$2"; shift 2; exec -a "$argv0" "$@"' _ \
    "$(pid_file "$name")" "${argv0:-$bin/$name}" "$bin/$name" "$@" \
    </dev/null >"$log" 2>&1 9>&- &
  # Until the exec has happened the pid file names a shell, not the component.
  local deadline=$((SECONDS + 10))
  local pid
  until component_pid "$name" >/dev/null; do
    pid="$(cat "$(pid_file "$name")" 2>/dev/null)" || pid=""
    if [[ -n "$pid" ]] && ! running "$pid"; then
      say "$name exited at once"
      show_log "$name"
      exit 1
    fi
    if ((SECONDS >= deadline)); then
      say "$name did not start"
      show_log "$name"
      exit 1
    fi
    sleep 0.05
  done
}

# The last lines of a component's log, for messages about why it isn't ready.
show_log() {
  local log; log="$(log_file "$1")"
  [[ -f "$log" ]] || return 0
  echo "----- last lines of $log -----" >&2
  tail -n "${2:-40}" "$log" >&2
  echo "-----" >&2
}

# wait_until <seconds> <component> <what> <command...>: polls until the command
# succeeds. Gives up early if the component's process has exited.
wait_until() {
  local timeout="$1" name="$2" what="$3"; shift 3
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if ! component_pid "$name" >/dev/null; then
      say "$name exited while waiting for $what"
      show_log "$name"
      exit 1
    fi
    if ((SECONDS >= deadline)); then
      say "timed out after ${timeout}s waiting for $what"
      show_log "$name"
      exit 1
    fi
    sleep 0.2
  done
}

healthy() { # healthy <url> [curl args...]: the endpoint answers "ok"
  local url="$1"; shift
  [[ "$(curl -fsS --max-time 2 "$@" "$url" 2>/dev/null)" == ok ]]
}
etcd_healthy() {
  curl -fsS --max-time 2 "http://127.0.0.1:$etcd_client_port/health" 2>/dev/null | grep -q '"health":"true"'
}
apiserver_ready() {
  healthy "https://127.0.0.1:$apiserver_port/readyz" \
    --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key"
}
controller_manager_healthy() { healthy "https://127.0.0.1:$controller_manager_port/healthz" -k; }
scheduler_healthy() { healthy "https://127.0.0.1:$scheduler_port/healthz" -k; }

# What a component is started with: binary path (it names the versions), flags,
# and the contents of files named by the flags (kwok stages, audit policy,
# certificates), but not of the logs they write to.
fingerprint() {
  local binary="$1" arg; shift
  {
    printf '%s\n' "$binary" "$@"
    for arg in "$@"; do
      if [[ -f "$arg" && "$arg" != "$cluster_dir/logs/"* ]]; then cat "$arg"; fi
    done
  } | sha256sum | cut -d' ' -f1
}

# Starts the component unless it already runs with the same binary, flags and
# configuration; one started differently (versions.env, this script or the kwok
# stages changed since) is replaced. $before_launch, if set, runs just before a
# start.
ensure() {
  local name="$1"; shift
  local want have
  want="$(fingerprint "$bin/$name" "$@")"
  if component_pid "$name" >/dev/null; then
    have="$(cat "$cluster_dir/run/$name.fingerprint" 2>/dev/null || true)"
    [[ "$have" == "$want" ]] && return 0
    say "restarting $name: its binary or configuration changed"
    stop_component "$name"
  fi
  ${before_launch:-}
  launch "$name" "$@"
  echo "$want" >"$cluster_dir/run/$name.fingerprint"
}

# apply_crds <dir>...: every CRD of the directories, applied server-side (some
# of Flux's are too large for the annotation a client-side apply keeps), and
# waited for until established. For flux.sh and argocd.sh.
apply_crds() {
  local dir file names=()
  for dir in "$@"; do
    for file in "$dir"/*.yaml; do
      "${kubectl[@]}" apply --server-side --force-conflicts -f "$file" >/dev/null
      names+=("crd/$(sed -n 's/^  name: //p' "$file" | head -n 1)")
    done
  done
  "${kubectl[@]}" wait --for condition=established --timeout=60s "${names[@]}" >/dev/null
}

# tool_identity <name> <namespace>: a tool of the cluster that acts on any
# object (Flux's and Argo CD's controllers on the host) gets its own client
# certificate and $cluster_dir/<name>.kubeconfig, as user refill-<name> in group
# refill:<name>, which is bound to cluster-admin (as those tools' own installs
# bind theirs), and its namespace.
tool_identity() {
  local name="$1" namespace="$2"
  issue "$name" "/O=refill:$name/CN=refill-$name" clientAuth
  kubeconfig "$name" "$name"
  "${kubectl[@]}" apply --server-side --force-conflicts -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata:
  name: $namespace
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: refill-$name
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: cluster-admin
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: Group
  name: refill:$name
EOF
}

start_etcd() {
  # No fsync: the data is disposable, and fsync dominates etcd's latency on
  # ordinary disks.
  ensure etcd \
    --name refill \
    --data-dir "$cluster_dir/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_client_port" \
    --advertise-client-urls "http://127.0.0.1:$etcd_client_port" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer_port" \
    --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port" \
    --initial-cluster "refill=http://127.0.0.1:$etcd_peer_port" \
    --unsafe-no-fsync \
    --quota-backend-bytes $((4 * 1024 * 1024 * 1024))
  wait_until 30 etcd "etcd health" etcd_healthy
}

start_apiserver() {
  # The endpoint reconciler would publish 127.0.0.1 as the address of the
  # `kubernetes` Service, which Endpoints validation rejects, so it is switched
  # off. Pods on real nodes still reach the Service's ClusterIP: each node holds
  # it and relays it to 127.0.0.1 (nodes.sh). NodeRestriction limits a kubelet to
  # its own Node and pods, as in a real cluster. PodTolerationRestriction lets a
  # test namespace give all its pods (stand-ins included) the real nodes'
  # toleration through the scheduler.alpha.kubernetes.io/defaultTolerations
  # annotation, and PodNodeSelector keeps a namespace's pods (Velero's) on the
  # real nodes through scheduler.alpha.kubernetes.io/node-selector. Kubelets are reached at their InternalIP: their host names
  # resolve nowhere.
  # Without a watch termination grace period, one client still watching (a test
  # or a controller left running) keeps a stopping apiserver alive indefinitely.
  ensure kube-apiserver \
    --etcd-servers "http://127.0.0.1:$etcd_client_port" \
    --bind-address 127.0.0.1 \
    --advertise-address 127.0.0.1 \
    --secure-port "$apiserver_port" \
    --tls-cert-file "$pki/apiserver.crt" \
    --tls-private-key-file "$pki/apiserver.key" \
    --client-ca-file "$pki/ca.crt" \
    --authorization-mode Node,RBAC \
    --enable-admission-plugins NodeRestriction,PodTolerationRestriction,PodNodeSelector \
    --kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$pki/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types InternalIP \
    --anonymous-auth=false \
    --service-account-key-file "$pki/sa.pub" \
    --service-account-signing-key-file "$pki/sa.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-cluster-ip-range 10.96.0.0/16 \
    --endpoint-reconciler-type none \
    --allow-privileged=true \
    --audit-policy-file "$cluster_dir/audit-policy.yaml" \
    --audit-log-path "$cluster_dir/logs/audit.log" \
    --audit-log-maxsize 0 \
    --shutdown-watch-termination-grace-period 1s
  wait_until 120 kube-apiserver "kube-apiserver /readyz" apiserver_ready
}

start_controller_manager() {
  # Higher client rate limits than the defaults (20/s), so that a benchmark
  # creating hundreds of pods measures refill rather than this throttle.
  ensure kube-controller-manager \
    --kubeconfig "$cluster_dir/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 \
    --secure-port "$controller_manager_port" \
    --leader-elect=false \
    --use-service-account-credentials=true \
    --service-account-private-key-file "$pki/sa.key" \
    --root-ca-file "$pki/ca.crt" \
    --cluster-signing-cert-file "$pki/ca.crt" \
    --cluster-signing-key-file "$pki/ca.key" \
    --service-cluster-ip-range 10.96.0.0/16 \
    --kube-api-qps 200 \
    --kube-api-burst 400
}

start_scheduler() {
  ensure kube-scheduler \
    --kubeconfig "$cluster_dir/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 \
    --secure-port "$scheduler_port" \
    --leader-elect=false \
    --kube-api-qps 200 \
    --kube-api-burst 400
}

# A new kwok process has a new identity, and it leaves alone any node whose Lease
# another holder (its predecessor) renewed within the lease duration: for up to
# 40 seconds pods on those nodes would not move. The leases of a previous kwok
# are therefore removed before a new one starts; the new one recreates them.
clear_node_leases() {
  local names
  names="$( (node_names; "${kubectl[@]}" get nodes -l type=kwok -o name | sed 's#^node/##') | sort -u)"
  # shellcheck disable=SC2086 # one node name per word
  "${kubectl[@]}" -n kube-node-lease delete lease --ignore-not-found --wait=false $names >/dev/null
}

start_kwok() {
  # kwok only looks after nodes labelled type=kwok, so a node created for some
  # other purpose is not silently made Ready. Pod IPs come from a /16 because the
  # default /24 runs out at 254 pods. Node leases must be asked for explicitly
  # when kwok runs outside kwokctl; without them the node lifecycle controller
  # marks every node NotReady after 50 seconds.
  #
  # The stages are copied into the state directory so that every checkout
  # sharing this cluster starts kwok with the same flags; otherwise the path
  # alone would make each checkout restart kwok in turn.
  cmp -s "$here/kwok/stages.yaml" "$cluster_dir/kwok-stages.yaml" ||
    cp "$here/kwok/stages.yaml" "$cluster_dir/kwok-stages.yaml"
  before_launch=clear_node_leases ensure kwok \
    --kubeconfig "$cluster_dir/kwok.kubeconfig" \
    --config "$cluster_dir/kwok-stages.yaml" \
    --manage-all-nodes=false \
    --manage-nodes-with-label-selector type=kwok \
    --cidr 10.244.0.0/16 \
    --node-ip 10.0.0.1 \
    --node-lease-duration-seconds 40
}

# --- simulated nodes -----------------------------------------------------------

node_names() {
  local letters=abcdefghijklmnopqrstuvwxyz i
  for ((i = 0; i < node_count; i++)); do echo "node-${letters:i:1}"; done
}

# Nodes are created with their capacity in status (Node creation accepts status);
# kwok's node-initialize stage keeps it. Room for thousands of pods each: the
# benchmark's largest run (10,000 claims) has a pod per claim, and stand-ins beside
# them.
node_manifest() {
  local name="$1" zone="$2"
  cat <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $name
  labels:
    type: kwok
    kubernetes.io/hostname: $name
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    topology.kubernetes.io/zone: $zone
spec: {}
status:
  capacity: {cpu: "128", memory: 512Gi, pods: "$kwok_node_pods", ephemeral-storage: 1Ti}
  allocatable: {cpu: "128", memory: 512Gi, pods: "$kwok_node_pods", ephemeral-storage: 1Ti}
EOF
}
kwok_node_pods=8000

ensure_nodes() {
  local zones=(zone-a zone-b zone-c) existing want i=0 name
  existing="$("${kubectl[@]}" get nodes -l type=kwok -o name)"
  want="$(node_names)"
  for name in $want; do
    if ! grep -qx "node/$name" <<<"$existing"; then
      node_manifest "$name" "${zones[i % 3]}" | "${kubectl[@]}" create -f - >/dev/null
      say "created node $name"
    else
      # A node made by an older script may have less room.
      "${kubectl[@]}" patch "node/$name" --subresource=status --type=merge -p \
        "{\"status\":{\"capacity\":{\"pods\":\"$kwok_node_pods\"},\"allocatable\":{\"pods\":\"$kwok_node_pods\"}}}" >/dev/null
    fi
    i=$((i + 1))
  done
  # Fewer nodes asked for than last time: drop the extra ones.
  for name in $existing; do
    grep -qx "${name#node/}" <<<"$want" || "${kubectl[@]}" delete "$name" --wait=false >/dev/null
  done
}

# Ready, no longer carrying the not-ready taint that admission puts on every new
# node (the scheduler skips the node until the node lifecycle controller removes
# it), and with a Lease, which only the running kwok can have created (see
# clear_node_leases): before that, kwok does not act on the node's pods.
nodes_ready() {
  local out leases name
  out="$("${kubectl[@]}" get nodes -l type=kwok -o \
    jsonpath='{range .items[*]}{.metadata.name} {.status.conditions[?(@.type=="Ready")].status} {.spec.taints[*].key}{"\n"}{end}')" || return 1
  [[ "$(grep -c . <<<"$out")" -eq "$node_count" ]] || return 1
  ! grep -qv '^[^ ]* True *$' <<<"$out" || return 1
  leases="$("${kubectl[@]}" -n kube-node-lease get leases -o name)" || return 1
  for name in $(node_names); do
    grep -qx "lease.coordination.k8s.io/$name" <<<"$leases" || return 1
  done
}

default_service_account() { "${kubectl[@]}" -n default get serviceaccount default; }

# --- real nodes ------------------------------------------------------------------

start_real_nodes() {
  local name
  # Nodes asked for before but not now are stopped and deregistered.
  for name in $(known_real_nodes); do
    if ! real_node_names | grep -qx "$name"; then
      stop_real_node "$name"
      "${kubectl[@]}" delete node "$name" --ignore-not-found --wait=false >/dev/null
    fi
  done
  # The nodes this start asked for, for scripts run later without its settings
  # (load-image.sh).
  real_node_names >"$cluster_dir/real-nodes"
  ((real_node_count)) || return 0
  node_bin="$("$here/build-node.sh" | tail -n 1)"
  [[ -x "$node_bin/kubelet" ]] || { say "build-node.sh gave no usable bin dir ('$node_bin')"; exit 1; }
  local built
  built="$("$here/../images/build.sh")"
  images_bin="$(sed -n 1p <<<"$built")"
  image_archives=("$(sed -n 2p <<<"$built")"/*.tar)
  if $with_velero; then
    built="$("$here/build-velero.sh")"
    velero_bin="$(sed -n 1p <<<"$built")"
    image_archives+=("$(sed -n 2p <<<"$built")"/*.tar)
    start_s3
  fi
  local csi_image=""
  if $with_csi; then
    built="$("$here/build-csi.sh")"
    image_archives+=("$(sed -n 2p <<<"$built")"/*.tar)
    csi_image="$(sed -n 3p <<<"$built")"
  fi
  local started=$SECONDS
  local restart="${REFILL_RESTART_NODE:-}"
  if [[ -n "$restart" ]]; then
    real_node_names | grep -qx "$restart" || { say "REFILL_RESTART_NODE: no real node '$restart'"; exit 1; }
    stop_real_node "$restart"
  fi
  for name in $(real_node_names); do start_real_node "$name"; done
  local deadline=$((SECONDS + 120))
  local -A relaunched=()
  until real_nodes_ready "$restart"; do
    # A kubelet has been seen to die while starting (a Go runtime fatal error,
    # "concurrent map iteration and map write"): a node whose kubelet exited is
    # started again, twice at most, rather than waited for until the deadline.
    for name in $(real_node_names); do
      node_vars "$name"
      node_component_pid kubelet >/dev/null && continue
      ((${relaunched[$name]:-0} < 2)) || continue
      relaunched[$name]=$((${relaunched[$name]:-0} + 1))
      say "the kubelet of $name exited while starting; starting $name again. Its last words:"
      tail -n 5 "$n_dir/logs/kubelet.log" >&2
      start_real_node "$name"
      deadline=$((SECONDS + 120))
    done
    if ((SECONDS >= deadline)); then
      say "timed out after 120s waiting for $real_node_count Ready real nodes"
      for name in $(real_node_names); do
        node_vars "$name"
        echo "----- $n_dir/logs/kubelet.log -----" >&2
        tail -n 20 "$n_dir/logs/kubelet.log" >&2
      done
      exit 1
    fi
    sleep 0.5
  done
  say "${restart:-$real_node_count real nodes} Ready after $((SECONDS - started))s"
  # The rest runs already; checking Velero's readiness now would find the node
  # agent of a node that is down (another test's) not Ready, and install it anew.
  [[ -z "$restart" ]] || return 0
  start_local_path_provisioner
  if $with_csi; then start_csi "$csi_image"; else stop_csi; fi
  if $with_velero; then install_velero; fi
  if $with_flux; then start_flux; fi
  if $with_argocd; then start_argocd; fi
}

# local-path-provisioner runs on the host (it only talks to the API server) and
# provisions a WaitForFirstConsumer claim on the node its pod lands on, through a
# helper pod there that creates the directory. The helper is the test image's
# program, named as setup and teardown command, since there is no shell.
start_local_path_provisioner() {
  local dir="$cluster_dir/local-path" name entries=()
  mkdir -p "$dir"
  for name in $(real_node_names); do
    node_vars "$name"
    mkdir -p "$n_dir/local-path"
    entries+=("{\"node\": \"$name\", \"paths\": [\"$n_dir/local-path\"]}")
  done
  local joined
  joined="$(IFS=,; echo "${entries[*]}")"
  cat >"$dir/config.json" <<EOF
{"nodePathMap": [$joined], "setupCommand": "/testbox", "teardownCommand": "/testbox"}
EOF
  cat >"$dir/helper-pod.yaml" <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: helper-pod
spec:
  priorityClassName: system-node-critical
  containers:
  - name: helper-pod
    image: $testbox_image
    imagePullPolicy: Never
EOF
  "${kubectl[@]}" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata:
  name: local-path-storage
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: local-path-provisioner
  namespace: local-path-storage
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: $local_path_class
  annotations:
    # Local rather than hostPath PVs: Velero's file-system backup skips hostPath.
    defaultVolumeType: local
provisioner: refill.dev/local-path
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Delete
EOF
  bin="$node_bin" ensure local-path-provisioner \
    --debug start \
    --kubeconfig "$cluster_dir/local-path-provisioner.kubeconfig" \
    --config "$dir/config.json" \
    --helper-pod-file "$dir/helper-pod.yaml" \
    --provisioner-name refill.dev/local-path \
    --namespace local-path-storage \
    --service-account-name local-path-provisioner \
    --helper-image "$testbox_image"
}

# --- main ----------------------------------------------------------------------

make_pki
write_audit_policy
start_etcd
start_apiserver
start_controller_manager
start_scheduler
start_kwok
wait_until 60 kube-controller-manager "kube-controller-manager /healthz" controller_manager_healthy
wait_until 60 kube-scheduler "kube-scheduler /healthz" scheduler_healthy
ensure_nodes
wait_until 90 kwok "$node_count Ready nodes with leases and without taints" nodes_ready
wait_until 60 kube-controller-manager "the default ServiceAccount" default_service_account
install_velero_crds
$with_flux || stop_flux
if [[ "${REFILL_ARGOCD:-}" == 0 ]]; then stop_argocd; fi
start_real_nodes

elapsed_ms=$((($(date +%s%N) - started_at) / 1000000))
say "ready in $((elapsed_ms / 1000)).$(printf '%03d' $((elapsed_ms % 1000)))s; export KUBECONFIG=$cluster_dir/admin.kubeconfig"
echo "$cluster_dir/admin.kubeconfig"

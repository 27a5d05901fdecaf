# shellcheck shell=bash disable=SC2034,SC2154 # variables are shared with the sourcing scripts
# Real nodes: sourced by up.sh and down.sh after lib.sh, not run.
#
# Each real node (real-a, real-b, ...) is a kubelet and a containerd (with runc and
# the CNI bridge) in a mount namespace and a network namespace of its own, so that
# nothing it does reaches the host:
#   - mounts (container root filesystems, volumes, /run, the overlays below) exist
#     only in the node's mount namespace and vanish with it;
#   - the kubelet and containerd write to paths they hard-code (/var/lib/kubelet,
#     /var/lib/cni, /var/log/containers, /run/...): /var/lib and /var/log are
#     overlays and /run a tmpfs inside that namespace;
#   - the kubelet rewrites three host sysctls; inside the namespace those files are
#     covered by plain files;
#   - pods' bridge, addresses and routes live in the node's network namespace. A veth
#     pair joins it to the host (a /30 per node) so the API server can reach the
#     kubelet (logs, exec); the host gets no route to pods and no forwarding.
#   - the node and its pods reach the API server at the `kubernetes` Service's
#     ClusterIP (10.96.0.1:443), and the S3 server Velero's backups go to at
#     10.97.0.1:80 (outside the Service range, so no Service is ever given it),
#     addresses the node holds on its loopback device: a relay
#     (e2e/images/cmd/host-relay) listens there from the host's side and forwards
#     to the host's 127.0.0.1. No kube-proxy, iptables or nftables are needed, and
#     the API server and the S3 server keep listening on loopback only.
#   - the kubelet's root directory is the usual /var/lib/kubelet inside the node,
#     a bind mount of the node's own directory: Velero's node agent mounts
#     /var/lib/kubelet/pods from every node by one hostPath. Mounts in the node's
#     namespace are shared among themselves (not with the host), as on a machine,
#     so a hostPath with HostToContainer propagation is accepted.
#   - every process of the node (relay, containerd, shims, kubelet, containers) is
#     in one cgroup subtree, /refill-<tag>/<node>, which is how down.sh finds them.
#
# Host-level names carry a tag derived from the cluster directory, so two clusters
# (two REFILL_CLUSTER_DIRs) on one machine never share one; addresses on the host
# side derive from REFILL_PORT_OFFSET, which differs between such clusters too.

real_node_count="${REFILL_REAL_NODES:-2}"
cluster_tag="$(printf '%s' "$cluster_dir" | sha256sum | cut -c1-6)"
cgroup_top="refill-$cluster_tag"
nodes_dir="$cluster_dir/nodes"
# The third octet of the host-side addresses: clusters on one machine differ in
# their port offset, so they differ here too.
node_net_octet=$((port_offset % 250))
# The label and taint real nodes carry: the scheduler keeps every pod without the
# toleration (all kwok-based tests) off them.
real_node_label=refill.dev/node-kind
real_node_taint=refill.dev/real-node
# The sandbox image the nodes pin, and the images every node gets.
pause_image=refill.local/pause:1
testbox_image=refill.local/testbox:1
# The StorageClass of local-path-provisioner's volumes on real nodes.
local_path_class=refill-local-path
# Where the node and its pods reach the S3 server (e2e/velero), and where that
# server listens on the host.
s3_address=10.97.0.1:80
s3_host_port=$((19000 + port_offset))

real_node_names() {
  local letters=abcdefghijklmnopqrstuvwxyz i
  for ((i = 0; i < real_node_count; i++)); do echo "real-${letters:i:1}"; done
}

# Every real node directory on disk, whether or not it is still wanted.
known_real_nodes() {
  local d
  for d in "$nodes_dir"/real-*; do [[ -d "$d" ]] && basename "$d"; done
  return 0
}

# node_vars <name>: the paths, names and addresses of one node, as n_* variables.
node_vars() {
  n_name="$1"
  local letter="${1#real-}" letters=abcdefghijklmnopqrstuvwxyz
  local prefix="${letters%%"$letter"*}"
  n_index=${#prefix}
  n_dir="$nodes_dir/$n_name"
  n_ns="$n_dir/ns"
  n_sock="$n_dir/containerd.sock"
  n_cgroup="$cgroup_top/$n_name"
  n_veth="rf$cluster_tag-$letter"
  n_host_ip="10.250.$node_net_octet.$((4 * n_index + 1))"
  n_ip="10.250.$node_net_octet.$((4 * n_index + 2))"
  n_pod_subnet="10.245.$n_index.0/24"
}

# cgroup v1 hierarchies mounted under /sys/fs/cgroup; with `all`, also the
# unified (v2) one of a hybrid setup, where runc puts containers as well.
cgroup_hierarchies() {
  local d
  for d in /sys/fs/cgroup/*/; do
    d="${d%/}"
    [[ "$(basename "$d")" == unified && "${1:-}" != all ]] && continue
    [[ -f "$d/cgroup.procs" ]] && echo "$d"
  done
  return 0
}

# Creates a cgroup path in every hierarchy, as the kubelet insists its cgroupRoot
# exists in all of them. cpuset cgroups start with no CPUs or memory nodes, so
# each level copies its parent's.
make_cgroup() {
  local path="$1" h part sub
  while read -r h; do
    sub=""
    IFS=/ read -ra parts <<<"$path"
    for part in "${parts[@]}"; do
      [[ -n "$part" ]] || continue
      local parent="$h$sub"
      sub="$sub/$part"
      [[ -d "$h$sub" ]] && continue
      mkdir "$h$sub"
      if [[ -f "$h$sub/cpuset.cpus" ]]; then
        cat "$parent/cpuset.cpus" >"$h$sub/cpuset.cpus"
        cat "$parent/cpuset.mems" >"$h$sub/cpuset.mems"
      fi
    done
  done < <(cgroup_hierarchies)
}

# Every process in a cgroup subtree (the pids hierarchy sees all of them: the
# node's daemons are put there, and the kubelet puts pods there).
cgroup_pids() {
  local root="/sys/fs/cgroup/pids/$1"
  [[ -d "$root" ]] || return 0
  find "$root" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -un
}

# Removes a cgroup subtree, deepest first, in every hierarchy.
remove_cgroup() {
  local h
  while read -r h; do
    [[ -d "$h/$1" ]] || continue
    find "$h/$1" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done < <(cgroup_hierarchies all)
}

node_pid_file() { echo "$n_dir/run/$1.pid"; }

# The pid recorded for one of the node's processes, if it still runs that binary.
node_component_pid() {
  local pid
  pid="$(cat "$(node_pid_file "$1")" 2>/dev/null)" || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] && running "$pid" || return 1
  [[ "$(readlink "/proc/$pid/exe" 2>/dev/null)" == */"$1" ]] || return 1
  echo "$pid"
}

# node_launch <component> <in-namespaces: yes|no> <binary> <args...>: starts one of
# the node's processes in its own session, in the node's cgroup, and (for
# containerd and the kubelet) inside the node's mount and network namespaces.
node_launch() {
  local name="$1" inside="$2" binary="$3"; shift 3
  local log="$n_dir/logs/$name.log" pid_file
  pid_file="$(node_pid_file "$name")"
  [[ ! -s "$log" ]] || mv -f "$log" "$log.1"
  rm -f "$pid_file"
  local enter=()
  [[ "$inside" == yes ]] && enter=(nsenter "--mount=$n_ns/mnt" "--net=$n_ns/net" --)
  say "starting $name on $n_name"
  # The pid is written before the exec; nsenter execs the binary without forking,
  # so it stays the binary's pid. The cgroup is joined in every hierarchy but
  # memory, whose limits belong to whoever runs this script.
  # shellcheck disable=SC2016 # expanded by the inner shell
  setsid bash -c '
    pid_file="$1" cgroup="$2"; shift 2
    for h in /sys/fs/cgroup/*/; do
      case "$h" in */memory/ | */unified/) continue ;; esac
      [[ -d "$h$cgroup" ]] && echo $$ >"$h$cgroup/cgroup.procs"
    done
    echo $$ >"$pid_file"
    exec "$@"' _ "$pid_file" "$n_cgroup/system" "${enter[@]}" "$binary" "$@" \
    </dev/null >"$log" 2>&1 9>&- &
  local deadline=$((SECONDS + 10)) pid
  until node_component_pid "$name" >/dev/null; do
    pid="$(cat "$pid_file" 2>/dev/null)" || pid=""
    if [[ -n "$pid" ]] && ! running "$pid"; then
      say "$name on $n_name exited at once"
      tail -n 30 "$log" >&2
      exit 1
    fi
    if ((SECONDS >= deadline)); then
      say "$name on $n_name did not start within 10s"
      tail -n 30 "$log" >&2
      exit 1
    fi
    sleep 0.05
  done
}

# --- namespaces and network -----------------------------------------------------

# The inode numbers of the node's namespaces, recorded so that down.sh can check
# that no process is left in them.
ns_inode() { stat -L -c %i "$1" 2>/dev/null; }

make_namespaces() {
  mkdir -p "$n_ns" "$n_dir/run" "$n_dir/logs"
  # Namespaces are kept alive by bind mounts onto files; those must sit on a
  # private mount, or the mount namespace would hold a reference to itself.
  if ! mountpoint -q "$n_ns"; then
    mount --bind "$n_ns" "$n_ns"
    mount --make-private "$n_ns"
  fi
  touch "$n_ns/net" "$n_ns/mnt"
  unshare --net="$n_ns/net" true
  # The overlays' upper layers and /run are on one tmpfs: what the programs write to
  # those host paths is gone when the node stops, like a machine's /run at boot.
  printf '1\n' >"$n_dir/run/vm.overcommit_memory"
  printf '10\n' >"$n_dir/run/kernel.panic"
  printf '1\n' >"$n_dir/run/kernel.panic_on_oops"
  # shellcheck disable=SC2016 # expanded by the inner shell
  unshare --mount="$n_ns/mnt" --propagation private bash -euc '
    dir="$1"
    mount -t tmpfs -o mode=0755,size=512m refill-run /run
    for p in var/lib var/log; do
      mkdir -p "/run/.overlay/$p/upper" "/run/.overlay/$p/work"
      mount -t overlay overlay -o "lowerdir=/$p,upperdir=/run/.overlay/$p/upper,workdir=/run/.overlay/$p/work" "/$p"
    done
    mount --bind "$dir/run/vm.overcommit_memory" /proc/sys/vm/overcommit_memory
    mount --bind "$dir/run/kernel.panic" /proc/sys/kernel/panic
    mount --bind "$dir/run/kernel.panic_on_oops" /proc/sys/kernel/panic_on_oops
    mkdir -p "$dir/kubelet" /var/lib/kubelet
    mount --bind "$dir/kubelet" /var/lib/kubelet
    mount --make-rshared /
  ' _ "$n_dir"
  {
    echo "net $(ns_inode "$n_ns/net")"
    echo "mnt $(ns_inode "$n_ns/mnt")"
  } >"$n_dir/run/namespaces"
  local in_ns=(nsenter "--net=$n_ns/net" --)
  ip link add "$n_veth" type veth peer name eth0 netns "$n_ns/net"
  ip addr add "$n_host_ip/30" dev "$n_veth"
  ip link set "$n_veth" up
  "${in_ns[@]}" ip link set lo up
  "${in_ns[@]}" ip addr add 10.96.0.1/32 dev lo
  "${in_ns[@]}" ip addr add "${s3_address%:*}/32" dev lo
  "${in_ns[@]}" ip addr add "$n_ip/30" dev eth0
  "${in_ns[@]}" ip link set eth0 up
}

# --- configuration ----------------------------------------------------------------

# Pods get two routes, to the API server's ClusterIP and to the S3 server's
# address, through the bridge (where the node holds those addresses): no default
# route, so nothing a pod sends can leave the node's namespace.
write_containerd_config() {
  mkdir -p "$n_dir/containerd" "$n_dir/cni"
  cat >"$n_dir/cni/10-refill.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "refill",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$n_pod_subnet"}]],
        "routes": [{"dst": "10.96.0.1/32"}, {"dst": "${s3_address%:*}/32"}],
        "dataDir": "/run/cni-ipam"
      }
    }
  ]
}
EOF
  # root (images, snapshots) persists; state, the shims' sockets and runc's state
  # are in the node's /run and start empty with the node. The OOM score may only be
  # raised: root lacks CAP_SYS_RESOURCE on some machines.
  cat >"$n_dir/containerd.toml" <<EOF
version = 3
root = "$n_dir/containerd/root"
state = "/run/containerd"

[grpc]
  address = "$n_sock"

[ttrpc]
  address = "$n_sock.ttrpc"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = '$pause_image'

[plugins.'io.containerd.cri.v1.runtime']
  netns_mounts_under_state_dir = true
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = 'runc'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = '$node_bin/runc'
        Root = '/run/runc'
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['$node_bin/cni']
    conf_dir = '$n_dir/cni'

[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
  stream_server_address = '127.0.0.1'
  stream_server_port = '0'

[plugins.'io.containerd.nri.v1.nri']
  disable = true
EOF
}

write_kubelet_config() {
  mkdir -p "$n_dir/kubelet" "$n_dir/pki" "$n_dir/pod-logs"
  cat >"$n_dir/kubelet.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: refill-local
  cluster:
    server: https://10.96.0.1:443
    certificate-authority: $pki/ca.crt
users:
- name: $n_name
  user:
    client-certificate: $pki/node-$n_name.crt
    client-key: $pki/node-$n_name.key
contexts:
- name: refill-local
  context:
    cluster: refill-local
    user: $n_name
current-context: refill-local
EOF
  # Thresholds are set so that neither image garbage collection (the images here
  # cannot be pulled again) nor eviction acts on a busy shared disk.
  cat >"$n_dir/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $n_ip
port: 10250
healthzBindAddress: 127.0.0.1
healthzPort: 10248
readOnlyPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$n_sock
cgroupDriver: cgroupfs
cgroupRoot: /$n_cgroup/pods
failCgroupV1: false
failSwapOn: false
oomScoreAdj: 0
makeIPTablesUtilChains: false
podLogsDir: $n_dir/pod-logs
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 1Mi, nodefs.available: 1%, nodefs.inodesFree: 1%, imagefs.available: 1%}
maxPods: 50
registerWithTaints:
- {key: $real_node_taint, effect: NoSchedule}
nodeStatusUpdateFrequency: 10s
serializeImagePulls: false
resolvConf: ""
EOF
}

# --- start, stop ------------------------------------------------------------------

node_fingerprint() {
  {
    echo "$node_bin" "$images_bin" "$n_ip"
    cat "$n_dir/containerd.toml" "$n_dir/kubelet.yaml" "$n_dir/kubelet.kubeconfig" "$n_dir/cni/10-refill.conflist"
  } | sha256sum | cut -d' ' -f1
}

node_running() {
  node_component_pid host-relay >/dev/null &&
    node_component_pid containerd >/dev/null &&
    node_component_pid kubelet >/dev/null
}

# Stops every process of the node and removes its namespaces, cgroups and host
# network device. Safe on a node that is half started or already stopped.
stop_real_node() {
  node_vars "$1"
  local pids pid round
  # The kubelet first, so that it restarts nothing while the rest goes. Then
  # everything else at once: containers, shims, containerd and the relay hold
  # nothing that a graceful stop would save (the node's state is disposable).
  if pid="$(node_component_pid kubelet)"; then stop_pids "$pid"; fi
  for round in 1 2 3; do
    mapfile -t pids < <(cgroup_pids "$n_cgroup")
    ((${#pids[@]})) || break
    ((round > 1)) || say "stopping $n_name (${#pids[@]} processes)"
    kill -KILL "${pids[@]}" 2>/dev/null || true
    local deadline=$((SECONDS + 15))
    for pid in "${pids[@]}"; do
      while running "$pid" && ((SECONDS < deadline)); do sleep 0.05; done
    done
    # Another round for any child forked while its parent was being killed.
  done
  local f
  for f in net mnt; do
    if mountpoint -q "$n_ns/$f" 2>/dev/null; then umount "$n_ns/$f"; fi
  done
  if mountpoint -q "$n_ns" 2>/dev/null; then umount "$n_ns"; fi
  # The veth pair goes with the network namespace; one that outlived it (the
  # namespace was made but not joined yet) is removed here. The kernel may take it
  # away between the look and the delete ("Cannot find device"): only one still
  # there after a failed delete is an error.
  if ip link show "$n_veth" >/dev/null 2>&1 && ! ip link del "$n_veth" 2>/dev/null; then
    if ip link show "$n_veth" >/dev/null 2>&1; then
      say "could not remove network device $n_veth"
      return 1
    fi
  fi
  remove_cgroup "$n_cgroup"
  rm -f "$n_dir"/run/*.pid "$n_dir/run/fingerprint"
}

# What down.sh checks after stopping: no process, mount, cgroup, network device or
# namespace of the cluster's real nodes is left. Prints each leftover.
real_node_leftovers() {
  local h name inode pid
  while read -r h; do
    [[ -e "$h/$cgroup_top" ]] && echo "cgroup $h/$cgroup_top"
  done < <(cgroup_hierarchies all)
  grep -F " $nodes_dir/" /proc/self/mountinfo | awk '{print "mount " $5}'
  ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' |
    grep "^rf$cluster_tag-" | sed 's/^/network device /'
  for name in $(known_real_nodes); do
    node_vars "$name"
    [[ -f "$n_dir/run/namespaces" ]] || continue
    while read -r _ inode; do
      [[ -n "$inode" ]] || continue
      for pid in /proc/[0-9]*; do
        if [[ "$(stat -L -c %i "$pid/ns/net" 2>/dev/null)" == "$inode" ||
          "$(stat -L -c %i "$pid/ns/mnt" 2>/dev/null)" == "$inode" ]]; then
          echo "process ${pid#/proc/} in a namespace of $n_name"
        fi
      done
    done <"$n_dir/run/namespaces"
  done
  return 0
}

start_real_node() {
  node_vars "$1"
  mkdir -p "$n_dir/run" "$n_dir/logs"
  issue "node-$n_name" "/O=system:nodes/CN=system:node:$n_name" clientAuth
  write_containerd_config
  write_kubelet_config
  local want
  want="$(node_fingerprint)"
  if node_running && [[ "$(cat "$n_dir/run/fingerprint" 2>/dev/null)" == "$want" ]]; then
    # Images added or rebuilt since the node started (Velero's, say) go in too.
    import_images
    return 0
  fi
  # Anything less than the whole node running as configured starts over: a node
  # is cheap to start, and half of one is hard to reason about.
  stop_real_node "$n_name"
  node_vars "$1"
  make_cgroup "$n_cgroup/system"
  make_cgroup "$n_cgroup/pods"
  make_namespaces
  node_launch host-relay no "$images_bin/host-relay" -netns "$n_ns/net" \
    -relay "10.96.0.1:443=127.0.0.1:$apiserver_port" -relay "$s3_address=127.0.0.1:$s3_host_port"
  # containerd finds the runc shim on its PATH.
  PATH="$node_bin:$PATH" node_launch containerd yes "$node_bin/containerd" --config "$n_dir/containerd.toml"
  local deadline=$((SECONDS + 30))
  until "$node_bin/ctr" --address "$n_sock" version >/dev/null 2>&1; do
    if ! node_component_pid containerd >/dev/null || ((SECONDS >= deadline)); then
      say "containerd on $n_name did not come up within 30s"
      tail -n 30 "$n_dir/logs/containerd.log" >&2
      exit 1
    fi
    sleep 0.2
  done
  import_images
  node_launch kubelet yes "$node_bin/kubelet" \
    --config "$n_dir/kubelet.yaml" \
    --kubeconfig "$n_dir/kubelet.kubeconfig" \
    --root-dir /var/lib/kubelet \
    --cert-dir "$n_dir/pki" \
    --hostname-override "$n_name" \
    --node-ip "$n_ip" \
    --node-labels "$real_node_label=real"
  echo "$want" >"$n_dir/run/fingerprint"
}

# The names the images of a docker archive go by in containerd (its manifest's
# RepoTags, as containerd spells them: `velero/velero:v1` is
# `docker.io/velero/velero:v1`).
archive_images() {
  local ref first
  tar -xOf "$1" manifest.json 2>/dev/null | grep -o '"RepoTags":\[[^]]*\]' |
    sed 's/.*\[//; s/\]//' | tr ',' '\n' | tr -d '"' | while read -r ref; do
      [[ -n "$ref" ]] || continue
      first="${ref%%/*}"
      if [[ "$ref" != */* ]]; then
        echo "docker.io/library/$ref"
      elif [[ "$first" == *.* || "$first" == *:* || "$first" == localhost ]]; then
        echo "$ref"
      else
        echo "docker.io/$ref"
      fi
    done
}

# Puts every image archive of $image_archives into the node's containerd, unless
# the same archive was imported before and containerd still has its images: one
# was seen gone from a node while its stamp stayed, and the Velero server then
# could not start there.
import_images() {
  local archive stamp sum present name missing
  mkdir -p "$n_dir/images"
  present="$("$node_bin/ctr" --address "$n_sock" -n k8s.io images ls -q 2>/dev/null)"
  for archive in "${image_archives[@]}"; do
    stamp="$n_dir/images/$(basename "$archive").sha256"
    sum="$(sha256sum "$archive" | cut -d' ' -f1)"
    missing=false
    for name in $(archive_images "$archive"); do
      grep -qxF "$name" <<<"$present" || missing=true
    done
    # The stamps sit beside containerd's root, so they go when it goes.
    [[ "$(cat "$stamp" 2>/dev/null)" == "$sum" ]] && ! $missing && continue
    local out
    # ctr warns about cgroup v1 on every call; the output matters only on failure.
    out="$("$node_bin/ctr" --address "$n_sock" -n k8s.io images import "$archive" 2>&1)" ||
      { say "importing $archive into $n_name failed:"; echo "$out" >&2; exit 1; }
    echo "$sum" >"$stamp"
  done
}

# Every real node is Ready; or only node $1, when given.
real_nodes_ready() {
  local out only="${1:-}"
  out="$("${kubectl[@]}" get nodes -l "$real_node_label=real" -o \
    jsonpath='{range .items[*]}{.metadata.name} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}')" || return 1
  if [[ -n "$only" ]]; then
    grep -qx "$only True" <<<"$out"
  else
    [[ "$(grep -c ' True$' <<<"$out")" -eq "$real_node_count" ]]
  fi
}

#!/usr/bin/env bash
# Stops the local cluster started by up.sh: its real nodes (with their pods), the
# control plane, kwok and the host processes beside them (the S3 server, Flux,
# Argo CD). Then checks that no process, mount, cgroup, network
# device or namespace of it is left, and fails naming what is. Certificates,
# images and logs stay for a fast next start unless --purge is given; the etcd
# data and the S3 store go every time: nothing needs them across runs, and the
# store's one database file never shrinks (it reached 13 GB over a few weeks of
# benchmarks and backups), while the real nodes evict pods when the disk is
# nearly full.
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=SCRIPTDIR/nodes.sh
source "$here/nodes.sh"

purge=false
case "${1:-}" in
  "") ;;
  --purge) purge=true ;;
  *) echo "usage: $0 [--purge]" >&2; exit 2 ;;
esac

[[ -d "$cluster_dir" ]] || exit 0

# Waits for a concurrent up.sh to finish rather than stopping half of what it
# is starting.
exec 9>"$cluster_dir/lock"
flock -w 600 9 || { say "timed out waiting for $cluster_dir/lock"; exit 1; }

# Real nodes first: their kubelets would otherwise keep talking to an API server
# that is going away.
for name in $(known_real_nodes); do
  stop_real_node "$name"
done
remove_cgroup "$cgroup_top"

for ((i = ${#components[@]} - 1; i >= 0; i--)); do
  stop_component "${components[i]}"
done

# Anything a lost pid file no longer names.
mapfile -t leftovers < <(stray_pids)
if ((${#leftovers[@]})); then
  say "stopping leftover processes ${leftovers[*]}"
  stop_pids "${leftovers[@]}"
fi
mapfile -t leftovers < <(stray_pids)
if ((${#leftovers[@]})); then
  say "could not stop ${leftovers[*]}"
  exit 1
fi

mapfile -t leftovers < <(real_node_leftovers)
if ((${#leftovers[@]})); then
  say "left behind after stopping the real nodes:"
  printf '  %s\n' "${leftovers[@]}" >&2
  exit 1
fi

if $purge; then
  rm -rf "$cluster_dir"
  say "stopped; removed $cluster_dir"
else
  rm -rf "$cluster_dir/etcd" "$cluster_dir/s3"
  say "stopped; removed the etcd data and the S3 store"
fi

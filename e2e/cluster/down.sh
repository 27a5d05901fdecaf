#!/usr/bin/env bash
# Stops the local control plane started by up.sh and leaves no process of it
# behind. The state (certificates, etcd data, logs) stays for a fast next start
# unless --purge is given.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=SCRIPTDIR/lib.sh
source "$here/lib.sh"

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

if $purge; then
  rm -rf "$cluster_dir"
  say "stopped; removed $cluster_dir"
else
  say "stopped"
fi

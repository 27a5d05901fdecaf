#!/usr/bin/env bash
# Imports image archives (docker or OCI format) into the containerd of every real
# node of the local cluster, which is how images get there: the nodes pull from
# no registry. Pods use them with imagePullPolicy Never or IfNotPresent.
#
#   e2e/cluster/load-image.sh ARCHIVE...
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=SCRIPTDIR/nodes.sh
source "$here/nodes.sh"

(($#)) || { echo "usage: $0 ARCHIVE..." >&2; exit 2; }
node_bin="$("$here/build-node.sh" | tail -n 1)"
image_archives=("$@")
# The real nodes of the cluster's last start (up.sh), whatever REFILL_REAL_NODES
# says now.
names="$(cat "$cluster_dir/real-nodes" 2>/dev/null || real_node_names)"
[[ -n "$names" ]] || { say "the cluster has no real nodes"; exit 1; }
for name in $names; do
  node_vars "$name"
  node_component_pid containerd >/dev/null || { say "$name is not running; start it with e2e/cluster/up.sh"; exit 1; }
  import_images
done

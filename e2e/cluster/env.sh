# shellcheck shell=bash
# Source this file to use kubectl against the local cluster:
#   source e2e/cluster/env.sh
# It does not start anything; run e2e/cluster/up.sh first.
_refill_dir="${REFILL_CLUSTER_DIR:-$HOME/.cache/refill/cluster}"
if [[ -s "$_refill_dir/bin-dir" ]]; then
  export KUBECONFIG="$_refill_dir/admin.kubeconfig"
  _refill_bin="$(cat "$_refill_dir/bin-dir")"
  case ":$PATH:" in
    *":$_refill_bin:"*) ;;
    *) export PATH="$_refill_bin:$PATH" ;;
  esac
  unset _refill_bin
else
  echo "no local cluster in $_refill_dir; run e2e/cluster/up.sh" >&2
fi
unset _refill_dir

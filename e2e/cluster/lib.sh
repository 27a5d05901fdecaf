# shellcheck shell=bash disable=SC2034 # variables are for the sourcing scripts
# The preamble of the scripts under e2e/, and what up.sh and down.sh share;
# sourced, not run. A script starts with
#
#   # shellcheck source=SCRIPTDIR/lib.sh
#   source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#
# (cluster/lib.sh from e2e/, ../cluster/lib.sh from a folder beside cluster/) and
# gets strict mode, $here (its own directory), $repo (the checkout's root), the
# versions of versions.env, and the caches below.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=SCRIPTDIR/versions.env
source "$repo/e2e/cluster/versions.env"

# Everything the local control plane owns lives in one state directory, so that
# several checkouts (or a test that wants its own cluster) can set
# REFILL_CLUSTER_DIR and never touch each other's processes or files.
cluster_dir="${REFILL_CLUSTER_DIR:-$HOME/.cache/refill/cluster}"
# The programs built for it, and their sources, are shared by every checkout.
cache_dir="${REFILL_CACHE:-$HOME/.cache/refill}"

# refill's builds, outside the repository and shared by e2e/test, e2e/demo and the
# benchmarks (and by a fresh clone, as in CI), so that none compiles what another
# already did.
use_shared_target_dir() {
  export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/refill/target}"
}

# `cargo build` of binaries of refill and refill-e2e-tools (debug) exactly as
# e2e/test's `cargo test --workspace` builds them, so that neither compiles anything
# after the other. The test target makes cargo resolve features with refill's
# dev-dependencies, as cargo test does (tokio's test-util, rustix's process);
# without it tokio and everything built on it would be compiled again, here and in
# the next e2e/test.
build_as_tests() {
  cargo build -p refill -p refill-e2e-tools --test bench_smoke "$@"
}

# The start of a build-*.sh: TAG begins its log lines, BIN is the directory its
# programs go to (made here), $work the one Go module sources are copied into
# (module_copy, modules.sh). Go stamps no VCS data and builds without cgo unless a
# build asks for it.
go_build_setup() {
  log_tag="$1" bin="$2" work="$cache_dir/src"
  mkdir -p "$bin" "$work"
  export GOFLAGS=-buildvcs=false CGO_ENABLED=0
  log() { printf '[%s] %s\n' "$log_tag" "$*" >&2; }
  # shellcheck source=SCRIPTDIR/modules.sh
  source "$repo/e2e/cluster/modules.sh"
}

# Start order; down.sh stops them in reverse.
components=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok local-path-provisioner gofakes3
  source-controller kustomize-controller redis-stand-in git-daemon argocd-repo-server argocd-application-controller)

# Ports away from the usual 2379/6443/10257/10259 so that a real cluster or
# another tool on the same machine is never disturbed. A second cluster (its
# own REFILL_CLUSTER_DIR) needs REFILL_PORT_OFFSET too, e.g. 100.
port_offset="${REFILL_PORT_OFFSET:-0}"
etcd_client_port=$((23790 + port_offset))
etcd_peer_port=$((23800 + port_offset))
apiserver_port=$((16443 + port_offset))
controller_manager_port=$((20257 + port_offset))
scheduler_port=$((20259 + port_offset))

say() { printf '[cluster] %s\n' "$*" >&2; }

pid_file() { echo "$cluster_dir/run/$1.pid"; }
log_file() { echo "$cluster_dir/logs/$1.log"; }

# The pid recorded for a component, if that process still exists and still is
# that component (pids get reused after a reboot or a crash).
component_pid() {
  local name="$1" pid
  pid="$(cat "$(pid_file "$name")" 2>/dev/null)" || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  running "$pid" || return 1
  # A binary rebuilt or replaced under a running process reads "<path> (deleted)":
  # still this component, and still holding its ports (a second copy would die on
  # "address in use").
  local exe
  exe="$(readlink "/proc/$pid/exe" 2>/dev/null)" || return 1
  [[ "${exe% (deleted)}" == */"$name" ]] || return 1
  echo "$pid"
}

# Every process started from the binary cache for this state directory, whether
# or not a pid file still names it: the fallback for down.sh after a pid file
# went missing. Matching the state directory in the command line keeps other
# clusters (other REFILL_CLUSTER_DIR) out of it.
stray_pids() {
  local p exe
  for p in /proc/[0-9]*; do
    exe="$(readlink "$p/exe" 2>/dev/null)" || continue
    [[ "$exe" == "$cache_dir/bin/"* ]] || continue
    tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -qF -- "$cluster_dir/" || continue
    echo "${p#/proc/}"
  done
}

# A zombie counts as gone: whoever adopted it may be slow to reap it, and no
# signal can move it any further.
running() {
  local state
  state="$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" || return 1
  [[ -n "$state" && "$state" != Z ]]
}

# Sends TERM, waits, then KILL; returns once every given process is gone.
stop_pids() {
  local pid deadline
  (($#)) || return 0
  kill -TERM "$@" 2>/dev/null || true
  deadline=$((SECONDS + 15))
  for pid in "$@"; do
    while running "$pid"; do
      if ((SECONDS >= deadline)); then
        say "process $pid ignored TERM; killing it"
        kill -KILL "$pid" 2>/dev/null || true
      fi
      sleep 0.1
    done
  done
}

stop_component() {
  local name="$1" pid
  if pid="$(component_pid "$name")"; then
    stop_pids "$pid"
  fi
  rm -f "$(pid_file "$name")"
}

#!/usr/bin/env bash
# Builds what a real node runs: runc, containerd (with ctr and the runc shim), the
# CNI plugins a pod network needs, and the kubelet, all from their Go modules, into
# a cache outside the repository keyed by their versions. Also the programs of
# e2e/images (image builder, pause, test programs, the API server relay) and the
# local-path provisioner. A second run finds the binaries and returns at once.
# Prints the bin directory last.
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
go_build_setup build-node "$cache_dir/bin/node-k8s-$KUBERNETES_VERSION-containerd-$CONTAINERD_VERSION-runc-$RUNC_VERSION-cni-$CNI_PLUGINS_VERSION-lpp-$LOCAL_PATH_PROVISIONER_VERSION"
mkdir -p "$bin/cni"

# runc needs libseccomp's headers (cgo); a fresh machine has none.
install_packages() {
  local packages=()
  [[ -f /usr/include/seccomp.h ]] || packages+=(libseccomp-dev)
  command -v gcc >/dev/null || packages+=(gcc libc6-dev)
  command -v pkg-config >/dev/null || packages+=(pkg-config)
  ((${#packages[@]})) || return 0
  log "installing ${packages[*]}"
  local sudo=()
  ((EUID == 0)) || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${packages[@]}" >/dev/null
}

build_runc() {
  [[ -x "$bin/runc" ]] && return 0
  install_packages
  local dir
  dir="$(module_copy github.com/opencontainers/runc "$RUNC_VERSION" runc)"
  log "building runc $RUNC_VERSION"
  # The default build tags also ask for libpathrs, a Rust library Debian lacks.
  (cd "$dir" && CGO_ENABLED=1 go build -mod=mod -trimpath -tags "seccomp urfave_cli_no_docs" \
    -ldflags "-s -w -X main.version=${RUNC_VERSION#v}" -o "$bin/runc.tmp" .)
  mv "$bin/runc.tmp" "$bin/runc"
}

build_containerd() {
  [[ -x "$bin/containerd" && -x "$bin/ctr" && -x "$bin/containerd-shim-runc-v2" ]] && return 0
  local dir
  dir="$(module_copy github.com/containerd/containerd/v2 "$CONTAINERD_VERSION" containerd)"
  log "building containerd $CONTAINERD_VERSION"
  (cd "$dir" && CGO_ENABLED=0 go build -mod=mod -trimpath -tags "no_btrfs no_devmapper no_zfs urfave_cli_no_docs" \
    -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
    -o "$bin/" ./cmd/containerd ./cmd/ctr ./cmd/containerd-shim-runc-v2)
}

build_cni() {
  [[ -x "$bin/cni/bridge" && -x "$bin/cni/host-local" && -x "$bin/cni/loopback" ]] && return 0
  local dir
  dir="$(module_copy github.com/containernetworking/plugins "$CNI_PLUGINS_VERSION" cni-plugins)"
  log "building CNI plugins $CNI_PLUGINS_VERSION"
  (cd "$dir" && CGO_ENABLED=0 go build -mod=mod -trimpath -ldflags "-s -w" \
    -o "$bin/cni/" ./plugins/main/bridge ./plugins/ipam/host-local ./plugins/main/loopback)
}

# Through the same wrapper module as the control plane (build.sh), so the two share
# every compiled package in Go's build cache.
build_kubelet() {
  [[ -x "$bin/kubelet" ]] && return 0
  local mod="$work/kubelet-$KUBERNETES_VERSION"
  mkdir -p "$mod"
  local gomod
  gomod="$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/$KUBERNETES_VERSION.mod"
  [[ -f "$gomod" ]] || (cd "$mod" && go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" >/dev/null)
  {
    echo "module refill.dev/localcluster/kubelet"
    echo
    echo "go 1.24.0"
    echo
    echo "require k8s.io/kubernetes $KUBERNETES_VERSION"
    echo
    sed -n 's#^\s*\(k8s\.io/[a-z0-9-]*\) => \./staging/.*#replace \1 => \1 '"$KUBERNETES_STAGING_VERSION"'#p' "$gomod"
  } >"$mod/go.mod"
  [[ $(grep -c '^replace' "$mod/go.mod") -ge 30 ]] || { log "expected ~31 staging replaces in $gomod"; exit 1; }
  cat >"$mod/tools.go" <<'GO'
//go:build tools

package tools

import _ "k8s.io/kubernetes/cmd/kubelet"
GO
  log "resolving k8s.io/kubernetes $KUBERNETES_VERSION modules for the kubelet"
  (cd "$mod" && { go mod tidy -e >/dev/null 2>&1 || true; } && go mod download)
  local minor="${KUBERNETES_VERSION#v1.}"; minor="${minor%%.*}"
  local ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  log "building kubelet $KUBERNETES_VERSION (cold: a few minutes on 2 cores)"
  (cd "$mod" && CGO_ENABLED=0 go build -ldflags "$ldflags" -o "$bin/kubelet.tmp" k8s.io/kubernetes/cmd/kubelet)
  mv "$bin/kubelet.tmp" "$bin/kubelet"
}

build_local_path_provisioner() {
  [[ -x "$bin/local-path-provisioner" ]] && return 0
  local dir
  dir="$(module_copy github.com/rancher/local-path-provisioner "$LOCAL_PATH_PROVISIONER_VERSION" local-path-provisioner)"
  log "building local-path-provisioner $LOCAL_PATH_PROVISIONER_VERSION"
  (cd "$dir" && CGO_ENABLED=0 go build -mod=mod -trimpath -ldflags "-s -w" -o "$bin/local-path-provisioner.tmp" .)
  mv "$bin/local-path-provisioner.tmp" "$bin/local-path-provisioner"
}

build_runc
build_cni
build_containerd
build_kubelet
build_local_path_provisioner
echo "$bin"

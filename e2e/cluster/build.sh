#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and kwok
# from their Go modules into a cache outside the repository, keyed by version.
# A second run finds the binaries and returns at once.
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
go_build_setup build "$cache_dir/bin/k8s-$KUBERNETES_VERSION-etcd-$ETCD_VERSION-kwok-$KWOK_VERSION"

build_kubernetes() {
  local want=(kube-apiserver kube-controller-manager kube-scheduler kubectl) missing=()
  for b in "${want[@]}"; do [[ -x "$bin/$b" ]] || missing+=("$b"); done
  ((${#missing[@]})) || return 0
  local mod="$work/kubernetes-$KUBERNETES_VERSION"
  mkdir -p "$mod"
  # k8s.io/kubernetes points each staging module at ./staging/...; a module that
  # requires it has to point every one of them at the published tag instead.
  local gomod
  gomod="$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/$KUBERNETES_VERSION.mod"
  [[ -f "$gomod" ]] || (cd "$mod" && go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" >/dev/null)
  {
    echo "module refill.dev/localcluster/kubernetes"
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

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
  log "resolving k8s.io/kubernetes $KUBERNETES_VERSION modules"
  (cd "$mod" && go mod tidy -e >/dev/null 2>&1 || true; cd "$mod" && go mod download)
  local minor="${KUBERNETES_VERSION#v1.}"; minor="${minor%%.*}"
  local ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  log "building ${missing[*]} (cold: tens of minutes on 2 cores)"
  local pkgs=()
  for b in "${missing[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
  (cd "$mod" && go build -ldflags "$ldflags" -o "$bin/" "${pkgs[@]}")
}

build_etcd() {
  [[ -x "$bin/etcd" ]] && return 0
  local mod="$work/etcd-$ETCD_VERSION"
  mkdir -p "$mod"
  # etcd's server module carries replace directives of its own, so `go install` of it
  # is refused; a one-line main around etcdmain builds the same server.
  cat >"$mod/go.mod" <<GOMOD
module refill.dev/localcluster/etcd

go 1.24.0

require go.etcd.io/etcd/server/v3 $ETCD_VERSION
GOMOD
  cat >"$mod/main.go" <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  log "building etcd $ETCD_VERSION"
  (cd "$mod" && go mod tidy >/dev/null && go build -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=refill" -o "$bin/etcd" .)
}

build_kwok() {
  [[ -x "$bin/kwok" ]] && return 0
  log "building kwok $KWOK_VERSION"
  GOBIN="$bin" go install -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
}

build_etcd
build_kwok
build_kubernetes
echo "$bin"

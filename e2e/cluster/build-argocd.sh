#!/usr/bin/env bash
# Builds Argo CD from its Go module the way its Makefile does: one static binary,
# `argocd`, from the module's ./cmd, whose main picks the component by the name
# it runs under (argv[0]'s base name, or ARGOCD_BINARY_NAME). The local cluster
# runs two of them as host processes (argocd.sh): argocd-application-controller
# and argocd-repo-server, hard links to that binary, so that each process's
# /proc/<pid>/exe names its component (lib.sh's component_pid) without a second
# copy. Beside them, the two scripts Argo CD's image puts on the repo-server's
# PATH: it runs git-verify-wrapper.sh on every commit it generates manifests
# from (and fails without it), gpg-wrapper.sh when it verifies signatures.
# Keeps the Application and AppProject CRDs of the same module, and builds
# e2e/images, whose redis-stand-in is the Redis both components cache in.
# Cached outside the repository, keyed by ARGOCD_VERSION; a second run returns
# at once. Prints the bin directory, the CRD directory, then the directory of
# e2e/images' programs.
#
#   build-argocd.sh crds   prints only the CRD directory, downloading the module
#                          if needed but building nothing (build-flux.sh installs
#                          Argo CD's CRDs beside Flux's)
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
go_build_setup argocd "$cache_dir/bin/argocd-$ARGOCD_VERSION"
crds="$bin/crds"
module=github.com/argoproj/argo-cd/v3
# Argo CD's go.mod names a newer Go than the one installed: the go command
# refuses to download or build the module with an older one, and takes this one
# from the module proxy instead.
export GOTOOLCHAIN="$ARGOCD_GOTOOLCHAIN"

# The CRDs straight from the module cache: no copy of the whole module, no lock
# (each file lands under its final name in one rename), so that build-flux.sh
# never waits for a build of Argo CD.
copy_crds() {
  [[ -s "$crds/application-crd.yaml" && -s "$crds/appproject-crd.yaml" ]] && return 0
  local src file
  src="$(cd "$work" && go mod download -json "$module@$ARGOCD_VERSION" |
    sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')"
  [[ -f "$src/manifests/crds/application-crd.yaml" ]] ||
    { log "could not download $module@$ARGOCD_VERSION"; exit 1; }
  mkdir -p "$crds"
  for file in application-crd.yaml appproject-crd.yaml; do
    cp "$src/manifests/crds/$file" "$crds/$file.tmp.$$"
    chmod u+w "$crds/$file.tmp.$$"
    mv -f "$crds/$file.tmp.$$" "$crds/$file"
  done
}

# The module's go.mod points gitops-engine/v3 at ./gitops-engine, a module of its
# own that the module's archive leaves out (`go build`: "replacement directory
# ./gitops-engine does not exist"). Argo CD publishes it at the same tag, which
# go.mod requires: without the replace directive the build takes that release.
adapt_go_mod() {
  local dir="$1"
  if grep -q '^replace github.com/argoproj/argo-cd/gitops-engine/v3 => ./gitops-engine' "$dir/go.mod"; then
    (cd "$dir" && go mod edit -dropreplace github.com/argoproj/argo-cd/gitops-engine/v3)
  fi
}

programs=(argocd argocd-application-controller argocd-repo-server git-verify-wrapper.sh gpg-wrapper.sh)

build_argocd() {
  local dir name missing=false
  for name in "${programs[@]}"; do [[ -x "$bin/$name" ]] || missing=true; done
  $missing || return 0
  dir="$(module_copy "$module" "$ARGOCD_VERSION" argo-cd)"
  adapt_go_mod "$dir"
  # The version the components log and report (the Makefile's -X flags, without
  # the git data a module has none of).
  local ldflags="-s -w -X $module/common.version=${ARGOCD_VERSION#v}"
  log "building argocd $ARGOCD_VERSION (cold: over ten minutes on 2 cores)"
  (cd "$dir" && go build -mod=mod -trimpath -ldflags "$ldflags" -o "$bin/argocd.tmp" ./cmd)
  mv -f "$bin/argocd.tmp" "$bin/argocd"
  for name in argocd-application-controller argocd-repo-server; do
    ln -f "$bin/argocd" "$bin/$name"
  done
  install -m 0755 "$dir/hack/git-verify-wrapper.sh" "$dir/hack/gpg-wrapper.sh" "$bin/"
}

if [[ "${1:-}" == crds ]]; then
  copy_crds
  echo "$crds"
  exit 0
fi

# up.sh and e2e/test may ask at the same time: one builds, the others wait.
exec 9>"$bin/.lock"
flock 9
copy_crds
build_argocd
images_bin="$("$here/../images/build.sh" | sed -n 1p)"
[[ -x "$images_bin/redis-stand-in" ]] || { log "e2e/images built no redis-stand-in ('$images_bin')"; exit 1; }
echo "$bin"
echo "$crds"
echo "$images_bin"

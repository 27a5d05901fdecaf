#!/usr/bin/env bash
# Builds Flux's source-controller and kustomize-controller from their Go modules
# the way their Dockerfiles do (one static binary each, from the module's
# main.go), for the local cluster's GitOps tests: up.sh runs them as host
# processes (flux.sh). Keeps, beside the binaries, the CRDs of both modules.
# Cached outside the repository, keyed by the versions in versions.env; a second
# run returns at once. Prints the bin directory first, then each directory of
# CRDs to install: Flux's two and Argo CD's (Application, AppProject), which
# build-argocd.sh takes from Argo CD's module without building it.
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
go_build_setup flux "$cache_dir/bin/flux-source-$FLUX_SOURCE_CONTROLLER_VERSION-kustomize-$FLUX_KUSTOMIZE_CONTROLLER_VERSION"

# What the module proxy serves differs from what the repositories build with:
#   - each go.mod points its api submodule at ./api, which a module's archive
#     leaves out (it is a module of its own): the published api module, at the
#     version go.mod requires, is used instead;
#   - source-controller v1.9.6 asks for github.com/fluxcd/pkg/artifact v0.18.3,
#     which the proxy refuses; v0.18.0, the release it serves of that minor,
#     builds the same controller.
adapt_go_mod() {
  local dir="$1" name="$2"
  if grep -q "^replace github.com/fluxcd/$name/api => ./api" "$dir/go.mod"; then
    (cd "$dir" && go mod edit -dropreplace "github.com/fluxcd/$name/api")
  fi
  if grep -q 'github.com/fluxcd/pkg/artifact v0.18.3' "$dir/go.mod"; then
    (cd "$dir" && go mod edit -replace github.com/fluxcd/pkg/artifact=github.com/fluxcd/pkg/artifact@v0.18.0)
  fi
}

# build <module> <version> <name>: the binary <name> and the module's CRDs in
# $bin/crds/<name>.
build() {
  local module="$1" version="$2" name="$3" dir
  [[ -x "$bin/$name" && -d "$bin/crds/$name" ]] && return 0
  dir="$(module_copy "$module" "$version" "$name")"
  adapt_go_mod "$dir" "$name"
  log "building $name $version (cold: several minutes on 2 cores)"
  (cd "$dir" && go build -mod=mod -trimpath -ldflags "-s -w" -o "$bin/$name.tmp" .)
  rm -rf "$bin/crds/$name.tmp"
  mkdir -p "$bin/crds/$name.tmp"
  cp "$dir"/config/crd/bases/*.yaml "$bin/crds/$name.tmp/"
  rm -rf "$bin/crds/$name"
  mv "$bin/crds/$name.tmp" "$bin/crds/$name"
  mv "$bin/$name.tmp" "$bin/$name"
}

# up.sh and e2e/test may ask at the same time: one builds, the others wait.
exec 9>"$bin/.lock"
flock 9
build github.com/fluxcd/source-controller "$FLUX_SOURCE_CONTROLLER_VERSION" source-controller
build github.com/fluxcd/kustomize-controller "$FLUX_KUSTOMIZE_CONTROLLER_VERSION" kustomize-controller
# Argo CD's CRDs have a version of their own: a new one must not rebuild Flux.
argocd_crds="$("$here/build-argocd.sh" crds)"
echo "$bin"
echo "$bin/crds/source-controller"
echo "$bin/crds/kustomize-controller"
echo "$argocd_crds"

#!/usr/bin/env bash
# Builds the helm CLI from its Go module, for the chart's test (tests/helm_chart.rs:
# `helm template` and `helm install` of charts/refill). Cached outside the
# repository, keyed by HELM_VERSION in versions.env; prints the binary's path last.
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
go_build_setup helm "$cache_dir/bin/helm-$HELM_VERSION"

# Tests may ask for it at the same time: one builds, the others wait.
exec 9>"$bin/.lock"
flock 9
if [[ ! -x "$bin/helm" ]]; then
  dir="$(module_copy helm.sh/helm/v3 "$HELM_VERSION" helm)"
  log "building helm $HELM_VERSION (cold: a few minutes on 2 cores)"
  (cd "$dir" && go build -mod=mod -trimpath -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
    -o "$bin/helm.tmp" ./cmd/helm)
  mv "$bin/helm.tmp" "$bin/helm"
fi
echo "$bin/helm"

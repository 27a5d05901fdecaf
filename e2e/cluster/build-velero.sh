#!/usr/bin/env bash
# Builds Velero from its Go module the way its Dockerfiles do (one `velero` binary:
# server, node agent, data mover and CLI; plus `velero-restore-helper` and
# `velero-helper`), its AWS object-store plugin with the plugin's `cp-plugin`, and
# gofakes3, the S3 server the local cluster's backups go to. Then makes Velero's
# two images without Docker. Everything is cached outside the repository, keyed
# by the versions in e2e/cluster/versions.env; a second run returns at once.
# Prints the bin directory, then the images directory, last.
#
#   build-velero.sh crds   prints only the directories of Velero's CRDs (v1 and
#                          v2alpha1) in its module, downloading it if needed
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
key="velero-$VELERO_VERSION-aws-$VELERO_AWS_PLUGIN_VERSION-gofakes3-$GOFAKES3_VERSION"
go_build_setup velero "$cache_dir/bin/$key"
# The images also depend on how this script lays them out.
images="$cache_dir/images/$key-$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-8)"

# Velero's go.mod takes kopia from a fork (a replace directive): module_copy builds
# in a copy of the module, so that its own go.mod applies.
build_velero() {
  [[ -x "$bin/velero" && -x "$bin/velero-restore-helper" && -x "$bin/velero-helper" ]] && return 0
  local dir
  dir="$(module_copy github.com/vmware-tanzu/velero "$VELERO_VERSION" velero)"
  # Velero's go.mod asks for a k8s.io/cli-runtime patch release the module proxy
  # does not serve; the next patch release resolves the whole graph.
  if grep -q 'k8s.io/cli-runtime v0.33.12' "$dir/go.mod" && ! grep -q '^replace k8s.io/cli-runtime' "$dir/go.mod"; then
    echo 'replace k8s.io/cli-runtime => k8s.io/cli-runtime v0.33.13' >>"$dir/go.mod"
  fi
  local pkg=github.com/vmware-tanzu/velero
  # ImageRegistry is where `velero install` takes images from by default; the
  # local cluster names its images explicitly, so it only needs to be a name.
  local ldflags="-s -w -X $pkg/pkg/buildinfo.Version=$VELERO_VERSION -X $pkg/pkg/buildinfo.GitSHA=module"
  ldflags+=" -X $pkg/pkg/buildinfo.GitTreeState=clean -X $pkg/pkg/buildinfo.ImageRegistry=velero"
  log "building velero $VELERO_VERSION (cold: about ten minutes on 2 cores)"
  (cd "$dir" && go build -mod=mod -trimpath -ldflags "$ldflags" -o "$bin/" \
    ./cmd/velero ./cmd/velero-restore-helper ./cmd/velero-helper)
}

build_aws_plugin() {
  [[ -x "$bin/velero-plugin-for-aws" && -x "$bin/cp-plugin" ]] && return 0
  local dir
  dir="$(module_copy github.com/vmware-tanzu/velero-plugin-for-aws "$VELERO_AWS_PLUGIN_VERSION" velero-plugin-for-aws)"
  log "building velero-plugin-for-aws $VELERO_AWS_PLUGIN_VERSION"
  (cd "$dir" && go build -mod=mod -trimpath -ldflags "-s -w" -o "$bin/" \
    ./velero-plugin-for-aws ./hack/cp-plugin)
}

build_gofakes3() {
  [[ -x "$bin/gofakes3" ]] && return 0
  local dir
  dir="$(module_copy github.com/johannesboyne/gofakes3 "$GOFAKES3_VERSION" gofakes3)"
  log "building gofakes3 $GOFAKES3_VERSION"
  (cd "$dir" && go build -mod=mod -trimpath -ldflags "-s -w" -o "$bin/gofakes3.tmp" ./cmd/gofakes3)
  mv "$bin/gofakes3.tmp" "$bin/gofakes3"
}

# The images hold what Velero's own Dockerfiles put in them, at the same paths:
# /velero, /velero-restore-helper and /velero-helper; /plugins/velero-plugin-for-aws
# and /bin/cp-plugin, which copies the plugin into the server's plugin directory.
# HOME is /tmp (writable by any user): Velero keeps its repository configuration
# under $HOME/udmrepo, and the image's user has no home directory.
build_images() {
  [[ -f "$images/done" ]] && return 0
  local imagebuild
  imagebuild="$("$here/../images/build.sh" | sed -n 1p)/imagebuild"
  rm -rf "$images" && mkdir -p "$images"
  "$imagebuild" -o "$images/velero.tar" -t "$velero_image" -entrypoint /velero -user 65532 -env HOME=/tmp \
    "$bin/velero:/velero" "$bin/velero-restore-helper:/velero-restore-helper" "$bin/velero-helper:/velero-helper"
  "$imagebuild" -o "$images/velero-plugin-for-aws.tar" -t "$aws_plugin_image" -user 65532 \
    -entrypoint "/bin/cp-plugin /plugins/velero-plugin-for-aws /target/velero-plugin-for-aws" \
    "$bin/velero-plugin-for-aws:/plugins/velero-plugin-for-aws" "$bin/cp-plugin:/bin/cp-plugin"
  touch "$images/done"
}

if [[ "${1:-}" == crds ]]; then
  dir="$(module_copy github.com/vmware-tanzu/velero "$VELERO_VERSION" velero)"
  echo "$dir/config/crd/v1/bases"
  echo "$dir/config/crd/v2alpha1/bases"
  exit 0
fi

# Names under which the real nodes find the images without a registry.
velero_image="velero/velero:$VELERO_VERSION"
aws_plugin_image="velero/velero-plugin-for-aws:$VELERO_AWS_PLUGIN_VERSION"

# e2e/test builds one release beside the tests while a cluster may ask for it:
# one builds, the others wait.
exec 9>"$bin/.lock"
flock 9
build_gofakes3
build_aws_plugin
build_velero
build_images
echo "$bin"
echo "$images"

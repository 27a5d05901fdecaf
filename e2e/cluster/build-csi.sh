#!/usr/bin/env bash
# Builds what the local cluster's CSI driver runs on each real node (csi.sh): the
# CSI external-provisioner from its Go module, and the driver of e2e/csi (node and
# controller services of a directory-backed driver, and the kubelet's plugin
# registration). Then makes one image holding both, without Docker. Cached
# outside the repository: the provisioner keyed by its version, the driver and
# the image also by a hash of e2e/csi; a second run returns at once. Prints the
# bin directory, the images directory, and the image's name.
# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
driver_src="$repo/e2e/csi"
driver_hash="$(cd "$driver_src" && find . -type f \( -name '*.go' ! -name '*_test.go' -o -name go.mod -o -name go.sum \) -print0 |
  sort -z | xargs -0 sha256sum | sha256sum | cut -c1-12)"
go_build_setup csi "$cache_dir/bin/csi-provisioner-$CSI_PROVISIONER_VERSION"
driver="$bin/csi-hostpath-$driver_hash"
# The image also depends on how this script lays it out.
images="$cache_dir/images/csi-$CSI_PROVISIONER_VERSION-$driver_hash-$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-8)"

# The Go builds share the machine with whatever else runs: they yield to it.
go_build() { nice -n 19 go build -mod=mod -trimpath -ldflags "-s -w" "$@"; }

build_provisioner() {
  [[ -x "$bin/csi-provisioner" ]] && return 0
  local dir
  dir="$(module_copy github.com/kubernetes-csi/external-provisioner/v5 "$CSI_PROVISIONER_VERSION" external-provisioner)"
  log "building csi-provisioner $CSI_PROVISIONER_VERSION (cold: several minutes on 2 cores)"
  (cd "$dir" && go_build -ldflags "-s -w -X main.version=$CSI_PROVISIONER_VERSION" \
    -o "$bin/csi-provisioner.tmp" ./cmd/csi-provisioner)
  mv "$bin/csi-provisioner.tmp" "$bin/csi-provisioner"
}

build_driver() {
  [[ -x "$driver" ]] && return 0
  log "building csi-hostpath (e2e/csi)"
  (cd "$driver_src" && go_build -o "$driver.tmp" ./cmd/csi-hostpath)
  mv "$driver.tmp" "$driver"
}

# One image, two entry points: the DaemonSet's containers name their command.
build_image() {
  [[ -f "$images/done" ]] && return 0
  local imagebuild
  imagebuild="$("$here/../images/build.sh" | sed -n 1p)/imagebuild"
  rm -rf "$images" && mkdir -p "$images"
  "$imagebuild" -o "$images/csi.tar" -t "$csi_image" -entrypoint /csi-hostpath \
    "$driver:/csi-hostpath" "$bin/csi-provisioner:/csi-provisioner"
  touch "$images/done"
}

csi_image="refill.local/csi:$CSI_PROVISIONER_VERSION-$driver_hash"

# up.sh and a test may ask at the same time: one builds, the others wait.
exec 9>"$bin/.lock"
flock 9
build_provisioner
build_driver
build_image
echo "$bin"
echo "$images"
echo "$csi_image"

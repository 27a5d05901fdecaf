#!/usr/bin/env bash
# Builds the programs of e2e/images (static, CGO_ENABLED=0) and the images the real
# nodes of the local cluster get: the pause (sandbox) image and the test image.
# Both are cached outside the repository, keyed by a hash of this directory, so a
# second run returns at once.
# Prints the programs' directory, then the images' directory, last.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${REFILL_CACHE:-$HOME/.cache/refill}"
hash="$(cd "$here" && find . -type f \( -name '*.go' -o -name go.mod -o -name go.sum -o -name '*.sh' \) -print0 |
  sort -z | xargs -0 sha256sum | sha256sum | cut -c1-12)"
bin="$cache/bin/images-$hash"
images="$cache/images/$hash"

programs=(host-relay imagebuild pause redis-stand-in testbox)
missing=false
for p in "${programs[@]}"; do [[ -x "$bin/$p" ]] || missing=true; done
if $missing; then
  printf '[images] building %s\n' "${programs[*]}" >&2
  mkdir -p "$bin.tmp"
  (cd "$here" && CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -trimpath -ldflags "-s -w" -o "$bin.tmp/" ./cmd/...)
  rm -rf "$bin" && mv "$bin.tmp" "$bin"
fi

if [[ ! -f "$images/done" ]]; then
  rm -rf "$images" && mkdir -p "$images"
  # The pause image is also tagged as the stand-in pod's default image, so stand-ins
  # on real nodes run without a registry.
  "$bin/imagebuild" -o "$images/pause.tar" -t refill.local/pause:1 -t registry.k8s.io/pause:3.10 \
    -entrypoint /pause -user 65535 "$bin/pause:/pause"
  "$bin/imagebuild" -o "$images/testbox.tar" -t refill.local/testbox:1 \
    -entrypoint /testbox "$bin/testbox:/testbox"
  touch "$images/done"
fi
echo "$bin"
echo "$images"

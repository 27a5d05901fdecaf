#!/usr/bin/env bash
# Builds refill as a static binary and writes its container image as an archive,
# without Docker: push it to your registry with e.g.
#   skopeo copy oci-archive:refill.oci.tar docker://<registry>/refill:<version>
# (the Dockerfile at the repository's root builds the same image with Docker).
#
#   e2e/images/refill-image.sh [-o FILE] [-t REF]... [--format oci|docker] [--profile P]
#
# Default: an OCI archive at $CARGO_TARGET_DIR/refill-image.oci.tar tagged
# refill.local/refill:dev, of a release build. The tests build theirs with
# --profile test-image (Cargo.toml says why). Prints the archive's path last.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"

out="" format=oci tags=() profile=release
while (($#)); do
  case "$1" in
    -o) out="$2"; shift 2 ;;
    -t) tags+=("$2"); shift 2 ;;
    --format) format="$2"; shift 2 ;;
    --profile) profile="$2"; shift 2 ;;
    *) echo "usage: $0 [-o FILE] [-t REF]... [--format oci|docker] [--profile P]" >&2; exit 2 ;;
  esac
done
((${#tags[@]})) || tags=(refill.local/refill:dev)
[[ -n "$out" ]] || out="$target_dir/refill-image.$format.tar"
# Builds into one archive take turns (tests install refill into two clusters at
# once): the archive is written through a temporary file of a fixed name.
mkdir -p "$(dirname "$out")"
exec 9>"$out.lock"
flock 9

# Static, so that the image needs no C library. The gnu target with crt-static
# rather than musl: it needs nothing beyond the default toolchain. With --target,
# RUSTFLAGS leaves build scripts and proc macros (built for the host) alone.
triple=x86_64-unknown-linux-gnu
# Run by a test, this script inherits what cargo sets for a crate's process
# (CARGO_MANIFEST_DIR, CARGO_PKG_NAME, ...). ring's build script watches those, so
# cargo would count them as changed against a build started from a shell and build
# ring, rustls, kube and refill again: ten minutes on 2 cores, each time a test and
# e2e/test's own image step follow each other. The build sees the shell's
# environment, whoever calls.
for var in $(compgen -e); do
  case "$var" in
    CARGO_MANIFEST_* | CARGO_PKG_* | CARGO_CRATE_NAME | CARGO_BIN_NAME | CARGO_BIN_EXE_* | \
      CARGO_PRIMARY_PACKAGE | CARGO_TARGET_TMPDIR | CARGO_RUSTC_CURRENT_DIR | OUT_DIR) unset "$var" ;;
  esac
done
printf '[refill-image] cargo build --profile %s --target %s\n' "$profile" "$triple" >&2
(cd "$repo" && RUSTFLAGS='-C target-feature=+crt-static' CARGO_TARGET_DIR="$target_dir" \
  cargo build --quiet --profile "$profile" --locked --target "$triple" --bin refill)
# cargo writes the dev profile's build under debug/, every other under its name.
profile_dir="$profile"
[[ "$profile" != dev ]] || profile_dir=debug
binary="$target_dir/$triple/$profile_dir/refill"
# ldd lists the libraries a dynamic binary loads ("libc.so.6 => ..."); a static
# one it calls "statically linked" or "not a dynamic executable".
if ldd "$binary" 2>&1 | grep -q '=>'; then
  echo "[refill-image] $binary is not static" >&2
  exit 1
fi

imagebuild="$("$here/build.sh" | sed -n 1p)/imagebuild"
tag_args=()
for t in "${tags[@]}"; do tag_args+=(-t "$t"); done
# The same user as manifests/deployment.yaml's runAsUser.
"$imagebuild" -o "$out" -format "$format" "${tag_args[@]}" -entrypoint /refill -user 65532 \
  "$binary:/refill"
echo "$out"

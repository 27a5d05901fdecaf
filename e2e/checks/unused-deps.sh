#!/usr/bin/env bash
# Fails when a crate listed under [dependencies] of a workspace member is never named in
# that member's code: a dependency nothing uses only costs build time.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
status=0
check() {
  local manifest="$1"; shift
  local deps
  deps="$(sed -n '/^\[dependencies\]/,/^\[/p' "$manifest" | grep -E '^[a-z0-9_-]+ *=' | cut -d= -f1 | tr -d ' ')"
  for dep in $deps; do
    local name="${dep//-/_}"
    if ! grep -rqE "\b$name(::|\b)" "$@"; then
      echo "unused dependency '$dep' in $manifest" >&2
      status=1
    fi
  done
}
check Cargo.toml src
check e2e/Cargo.toml e2e/src e2e/tests
check e2e/tools/Cargo.toml e2e/tools/src e2e/tools/tests
exit "$status"

# shellcheck shell=bash disable=SC2154 # $work and log come from the sourcing script
# Shared by the build-*.sh scripts; sourced by lib.sh's go_build_setup, not run,
# which sets $work (where module copies go) and defines log.

# A writable copy of a module's source, so that the module's own go.mod (with its
# replace directives) is the main module of the build, as in its own repository.
module_copy() {
  local module="$1" version="$2" name="$3" dir src
  dir="$work/$name-$version"
  if [[ ! -f "$dir/go.mod" ]]; then
    src="$(cd "$work" && go mod download -json "$module@$version" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')"
    [[ -d "$src" ]] || { log "could not download $module@$version"; exit 1; }
    rm -rf "$dir.tmp"
    cp -r "$src" "$dir.tmp"
    chmod -R u+w "$dir.tmp"
    mv "$dir.tmp" "$dir"
  fi
  echo "$dir"
}

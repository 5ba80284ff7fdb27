# Sourced by the scripts that build release binaries (demo, package, check-package), so each one
# builds with the flags of scripts/test's release build and reuses that build (a flag that differs
# rebuilds everything). The flags themselves are listed in scripts/build-flags.
RELEASE_FLAGS=()
if [[ -f "$ROOT/scripts/build-flags" ]]; then
    mapfile -t RELEASE_FLAGS < <(grep -v -e '^#' -e '^[[:space:]]*$' "$ROOT/scripts/build-flags")
fi

#!/usr/bin/env bash
# fmt and clippy (warnings are errors) over the Rust that lives outside the
# main workspace: the guest workspace (plugins/, the SDK included), the
# fuzz drivers (fuzz/) and the example agent (examples/first-agent). `make
# lint` calls it after the main workspace's own checks.
#
# The guests are checked for the host's target: their code builds natively
# (wit-bindgen stubs the imports), so no wasm std is needed. Each plugin is
# checked on its own, as it is built: the SDK's world features are exclusive,
# and a workspace-wide check would unify them.
set -euo pipefail
cd "$(dirname "$0")/.."
CARGO="${CARGO:-cargo}"

echo "lint: plugins/"
(
  cd plugins
  "$CARGO" fmt --all --check
  packages=$("$CARGO" metadata --no-deps --format-version 1 |
    python3 -c 'import json, sys; print(" ".join(p["name"] for p in json.load(sys.stdin)["packages"]))')
  for package in $packages; do
    if [ "$package" = nexo-sdk ]; then
      for world in agent skill search-backend sandbox-provider; do
        "$CARGO" clippy -q -p nexo-sdk --features "$world" --all-targets -- -D warnings
      done
    else
      "$CARGO" clippy -q -p "$package" --all-targets -- -D warnings
    fi
  done
)

echo "lint: examples/first-agent"
(cd examples/first-agent && "$CARGO" fmt --check && "$CARGO" clippy -q --all-targets -- -D warnings)

echo "lint: fuzz/"
(cd fuzz && "$CARGO" fmt --check && "$CARGO" clippy -q --all-targets -- -D warnings)

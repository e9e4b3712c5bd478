#!/usr/bin/env bash
# Installs wkg (crates.io, wasm-pkg-tools) into target/tools/wkg (override
# with NEXO_WKG_TOOLS), for the registry tests' interoperability half
# (host/tests/registry.rs): a component nexo pushes is pulled by wkg, and
# one wkg pushes is pulled and run by nexo.
#
# Idempotent and quick when the pinned version is there; a first install
# builds about 230 crates, unoptimized (a test tool: its speed does not
# matter, its build time in CI does). `make test` and
# .ci/run call it.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION="0.16.1"
ROOT="${NEXO_WKG_TOOLS:-target/tools/wkg}"

if [ -x "$ROOT/bin/wkg" ] && "$ROOT/bin/wkg" --version 2>/dev/null | grep -q "$VERSION"; then
  exit 0
fi

echo "wkg deps: installing wkg $VERSION into $ROOT"
# Its own target directory, so the workspace's build (and its flags) are not touched.
CARGO_TARGET_DIR="$ROOT/build" "${CARGO:-cargo}" install --quiet --locked --debug --root "$ROOT" wkg --version "$VERSION"
rm -rf "$ROOT/build"
"$ROOT/bin/wkg" --version

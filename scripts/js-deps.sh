#!/usr/bin/env bash
# Installs ComponentizeJS, which builds examples/js-agent into a component, with
# npm into target/tools/js (override with NEXO_JS_TOOLS), pinned by
# examples/js-agent/package.json and package-lock.json. Installs Node.js and npm
# with apt-get first if they are missing (as root, or with sudo); otherwise
# says exactly what to install.
#
# Idempotent and quick when the locked versions are already there; `make test`
# and .ci/run call it. The tests look for the tool at the same place (or at
# $NEXO_COMPONENTIZE_JS, or on PATH).
set -euo pipefail
cd "$(dirname "$0")/.."

DIR="${NEXO_JS_TOOLS:-target/tools/js}"
LOCK="examples/js-agent/package-lock.json"

if [ -x "$DIR/node_modules/.bin/componentize-js" ] && cmp -s "$LOCK" "$DIR/package-lock.json"; then
  exit 0
fi

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  . scripts/apt-install.sh
  apt_install "building the JavaScript example" nodejs npm
fi

echo "js deps: installing ComponentizeJS into $DIR (npm ci)"
mkdir -p "$DIR"
cp examples/js-agent/package.json "$LOCK" "$DIR/"
(cd "$DIR" && npm ci --no-audit --no-fund --loglevel=error)
"$DIR/node_modules/.bin/componentize-js" --version

#!/usr/bin/env bash
# Installs what the web console's browser test (host/tests/console.rs) needs:
# Debian's chromium at /usr/bin/chromium, and playwright-core into
# tests/console/node_modules, pinned by tests/console/package.json and
# package-lock.json (npm ci, with no browser download: the test drives the
# system chromium). Installs chromium, Node.js and npm with apt-get if they
# are missing (as root, or with sudo); otherwise says exactly what to install.
#
# Idempotent and quick when the locked versions are already there; `make test`
# and .ci/run call it. The test never touches the network: it looks for node,
# /usr/bin/chromium and tests/console/node_modules/playwright-core, and fails
# in CI (skips elsewhere), naming this script, if one is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

DIR="tests/console"
LOCK="$DIR/package-lock.json"
# A copy of the lock npm ci installed from: a different lock means a stale install.
STAMP="$DIR/node_modules/.nexo-package-lock.json"

missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium)
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  missing+=(nodejs npm)
fi
if [ ${#missing[@]} -gt 0 ]; then
  . scripts/apt-install.sh
  apt_install "the web console's browser test" "${missing[@]}"
fi

if [ -f "$DIR/node_modules/playwright-core/package.json" ] && cmp -s "$LOCK" "$STAMP"; then
  exit 0
fi

echo "console deps: installing playwright-core into $DIR/node_modules (npm ci)"
(cd "$DIR" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error)
cp "$LOCK" "$STAMP"

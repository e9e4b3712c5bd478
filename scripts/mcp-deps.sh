#!/usr/bin/env bash
# Installs the npm reference MCP servers that nexo-mcp's tests run against
# (server-everything over stdio and streamable HTTP, server-filesystem over
# stdio) into target/mcp-npm (override with NEXO_MCP_NPM), pinned here.
# Installs Node.js and npm with apt-get first if they are missing (as root, or
# with sudo); otherwise says exactly what to install.
#
# Idempotent and quick when the pinned versions are already there; .ci/run
# calls it. The tests never touch the network: they look for the servers at
# target/mcp-npm/node_modules/@modelcontextprotocol/*/dist/index.js and fail,
# naming this script, if they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."

DIR="${NEXO_MCP_NPM:-target/mcp-npm}"
VERSION="2026.8.31"
PACKAGES=(server-everything server-filesystem)

installed() {
  local pkg
  for pkg in "${PACKAGES[@]}"; do
    local manifest="$DIR/node_modules/@modelcontextprotocol/$pkg/package.json"
    [ -f "$manifest" ] || return 1
    grep -q "\"version\": \"$VERSION\"" "$manifest" || return 1
  done
}

if installed; then
  exit 0
fi

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  . scripts/apt-install.sh
  apt_install "the MCP reference servers" nodejs npm
fi

specs=()
for pkg in "${PACKAGES[@]}"; do
  specs+=("@modelcontextprotocol/$pkg@$VERSION")
done
echo "mcp deps: installing ${specs[*]} into $DIR"
mkdir -p "$DIR"
npm install --prefix "$DIR" --no-audit --no-fund --loglevel=error "${specs[@]}"
installed || { echo "error: the MCP reference servers did not install at $VERSION into $DIR" >&2; exit 1; }

#!/usr/bin/env bash
# Installs the Claude Code CLI that the claude-code loop's live test drives
# (host/tests/claude_code.rs, `live_claude_code`) into target/claude-npm,
# pinned here to the version nexo's recorded sessions come from. npm's
# package carries the native binary, so no Node.js is needed to run it.
# Installs Node.js and npm with apt-get first if they are missing (as root,
# or with sudo); otherwise says exactly what to install.
#
# Idempotent and quick when the pinned version is already there; .ci/run and
# `make test` call it. The test never touches the network: it runs
# target/claude-npm/node_modules/@anthropic-ai/claude-code-linux-x64/claude.
set -euo pipefail
cd "$(dirname "$0")/.."

DIR="target/claude-npm"
VERSION="2.1.332"
BINARY="$DIR/node_modules/@anthropic-ai/claude-code-linux-x64/claude"

installed() {
  local manifest="$DIR/node_modules/@anthropic-ai/claude-code/package.json"
  [ -x "$BINARY" ] && [ -f "$manifest" ] && grep -q "\"version\": \"$VERSION\"" "$manifest"
}

if installed; then
  exit 0
fi

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  . scripts/apt-install.sh
  apt_install "the Claude Code CLI" nodejs npm
fi

echo "claude deps: installing @anthropic-ai/claude-code@$VERSION into $DIR"
mkdir -p "$DIR"
# --ignore-scripts: the package's own install step only links the native
# binary, which the test runs from its package directly.
npm install --prefix "$DIR" --no-audit --no-fund --ignore-scripts --loglevel=error \
  "@anthropic-ai/claude-code@$VERSION"
installed || { echo "error: the Claude Code CLI did not install at $VERSION into $DIR" >&2; exit 1; }

#!/usr/bin/env bash
# Installs the OpenAI Agents SDK (PyPI `openai-agents`), the Python peer of
# the conversation benchmark (host/benches/conversation.rs), into a
# virtualenv at target/tools/openai-agents (override with NEXO_OPENAI_AGENTS).
# Installs python3 and its venv module with apt-get first if they are missing
# (as root, or with sudo); otherwise says exactly what to install.
#
# Idempotent and quick when the pinned version is already there;
# scripts/bench-conversation.sh calls it. The benchmark looks for the
# virtualenv's python at the same place.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION="0.24.0"
VENV="${NEXO_OPENAI_AGENTS:-target/tools/openai-agents}"

installed() {
  "$VENV/bin/python" -c 'import importlib.metadata as m, sys; sys.exit(m.version("openai-agents") != sys.argv[1])' \
    "$VERSION" >/dev/null 2>&1
}

if [ -x "$VENV/bin/python" ] && installed; then
  exit 0
fi

if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
  . scripts/apt-install.sh
  apt_install "the Python peer of the conversation benchmark" python3 python3-venv
fi

echo "openai-agents deps: installing openai-agents $VERSION into $VENV"
rm -rf "$VENV"
python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet --disable-pip-version-check "openai-agents==$VERSION"
installed
echo "openai-agents $VERSION"

#!/usr/bin/env bash
# Installs componentize-py, which builds examples/python-agent into a component,
# into a virtualenv at target/tools/python (override with NEXO_PY_TOOLS).
# Installs python3 and its venv module with apt-get first if they are missing
# (as root, or with sudo); otherwise says exactly what to install.
#
# Idempotent and quick when the pinned version is already there; `make test`
# and .ci/run call it. The tests look for the tool at the same place (or at
# $NEXO_COMPONENTIZE_PY, or on PATH).
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION="0.25.1"
VENV="${NEXO_PY_TOOLS:-target/tools/python}"

if [ -x "$VENV/bin/componentize-py" ] && [ "$("$VENV/bin/componentize-py" --version 2>/dev/null)" = "componentize-py $VERSION" ]; then
  exit 0
fi

if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
  . scripts/apt-install.sh
  apt_install "building the Python example" python3 python3-venv
fi

echo "python deps: installing componentize-py $VERSION into $VENV"
rm -rf "$VENV"
python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet --disable-pip-version-check "componentize-py==$VERSION"
"$VENV/bin/componentize-py" --version

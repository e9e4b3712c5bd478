#!/usr/bin/env bash
# Builds python_hook.wasm (or the path given) from app.py against ../../wit.
# Needs componentize-py 0.25.x: ../../scripts/python-deps.sh installs it into
# target/tools/python; $NEXO_COMPONENTIZE_PY or PATH also work.
set -euo pipefail
cd "$(dirname "$0")"
TOOL="${NEXO_COMPONENTIZE_PY:-../../target/tools/python/bin/componentize-py}"
if [ ! -x "$TOOL" ]; then
  TOOL=$(command -v componentize-py) || {
    echo "error: componentize-py is not installed: run ../../scripts/python-deps.sh (or pip install componentize-py==0.25.1)" >&2
    exit 1
  }
fi
exec "$TOOL" -d ../../wit -w hook-plugin componentize app -o "${1:-python_hook.wasm}"
